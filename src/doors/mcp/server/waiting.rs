//! The waits of `exec_command` and `write_stdin` (with progress
//! notifications when the client gave a progress token, and an early end
//! when it cancels, leaving the process running as a session) and the reply
//! built after one.

use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;

use super::{AgentReachServer, window_reply};
use crate::doors::mcp::reply::{Reply, ReplyState};
use crate::doors::mcp::session::{self, CommandSession, WaitOutcome};
use crate::exec::RenderOptions;

/// How often a waiting call sends a progress notification.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

impl AgentReachServer {
    pub(in crate::doors::mcp) async fn wait_with_progress(
        &self,
        session: &CommandSession,
        until: Instant,
        wait_for: Option<&regex::Regex>,
        ctx: &RequestContext<RoleServer>,
    ) -> WaitOutcome {
        let token = ctx.meta.get_progress_token();
        let peer = ctx.peer.clone();
        let started = Instant::now();
        let mut last_sent = started;
        let total = until.saturating_duration_since(started).as_secs_f64();
        session.touch();
        let outcome = session
            .wait(until, wait_for, &ctx.ct, || {
                let Some(token) = &token else { return };
                if last_sent.elapsed() < PROGRESS_EVERY {
                    return;
                }
                last_sent = Instant::now();
                let elapsed = started.elapsed().as_secs_f64();
                let note = ProgressNotificationParam::new(token.clone(), elapsed.floor())
                    .with_total(total.ceil())
                    .with_message(format!("waited {elapsed:.0}s for the command"));
                let peer = peer.clone();
                tokio::spawn(async move {
                    let _ = peer.notify_progress(note).await;
                });
            })
            .await;
        session.touch();
        outcome
    }

    /// Builds the reply after a wait: output not returned before, and, when
    /// the command is over, its exit code (the session then ends).
    pub(in crate::doors::mcp) async fn reply(
        &self,
        id: u64,
        session: &CommandSession,
        outcome: WaitOutcome,
        max_output_tokens: usize,
        started: Instant,
    ) -> Reply {
        if outcome == WaitOutcome::Cancelled {
            return cancelled_reply(id, session, started);
        }
        let exit = if outcome == WaitOutcome::Exited || session.exec.exit_info().is_some() {
            // Whatever the command left behind dies now; its output is drained.
            session.exec.terminate().await;
            session.exec.exit_info()
        } else {
            None
        };
        let rendered = session.exec.take_output(&RenderOptions {
            max_output_tokens,
            keep_color: false,
        });
        let state = match &exit {
            Some(_) => ReplyState::Exited,
            None => outcome.reply_state(),
        };
        if let Some(exit) = &exit {
            self.count_end(session, exit);
        }
        let exit_code = exit.as_ref().map(session::exit_code_of);
        if let Some(code) = exit_code {
            self.table().end(id, format!("ended with code {code}"));
        }
        let notes = self.table().take_notes(self.client.id());
        window_reply(
            session,
            rendered,
            exit_code,
            exit_code.is_none().then_some(id),
            state,
            notes,
            started,
        )
    }
}

/// The reply to a call cancelled mid-wait (by the client, or because its
/// connection dropped): nothing is read, so the next poll loses nothing.
fn cancelled_reply(id: u64, session: &CommandSession, started: Instant) -> Reply {
    Reply {
        wall_time_seconds: Reply::wall_time(started.elapsed()),
        exit_code: None,
        session_id: Some(id),
        state: ReplyState::Running,
        original_token_count: 0,
        full_output_path: None,
        output: String::new(),
        truncated: false,
        sandbox: session.attestation(),
        notes: vec![format!(
            "the call was cancelled: nothing was read and session {id} goes on; write_stdin polls it"
        )],
        capped: Vec::new(),
        highlights: Vec::new(),
    }
}
