//! `list_sessions`: the caller's running sessions, with what their
//! processes are doing (state, idle time, pending output, listening ports).

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{CallToolResult, ContentBlock, Tool, ToolAnnotations};

use super::LIST_SESSIONS;
use crate::doors::mcp::server::{AgentReachServer, JsonArgs, ToolResult, parse};
use crate::doors::mcp::session::{self, CommandSession};
use crate::doors::mcp::tool_params::{self, NoParams};
use crate::exec::ports as session_ports;

/// What the model reads about the tool.
const DOC: &str = "List the running sessions: id, command, state (active, idle, exited), age, idle time, pid, bytes of output not yet read, and the TCP ports its processes listen on (so you know which session holds port 3000).";

/// The tool as listed: it changes nothing.
pub(super) fn tool() -> Tool {
    Tool::new(LIST_SESSIONS, DOC, schema_for_type::<NoParams>())
        .with_annotations(ToolAnnotations::new().read_only(true))
}

impl AgentReachServer {
    pub(in crate::doors::mcp) async fn list_sessions(&self, args: JsonArgs) -> ToolResult {
        let _: tool_params::NoParams = parse(args)?;
        let sessions = self.table().live_of(self.client.id());
        // No session, nothing to look up in /proc (a scan of every process
        // there costs milliseconds on a busy host).
        let rows = if sessions.is_empty() {
            Vec::new()
        } else {
            tokio::task::spawn_blocking(move || session_rows(&sessions))
                .await
                .unwrap_or_default()
        };
        let text = if rows.is_empty() {
            "no sessions".to_owned()
        } else {
            rows.iter()
                .map(|r| {
                    format!(
                        "session {} [{}] pid {} age {:.0}s idle {:.0}s pending {} bytes ports {:?}: {}",
                        r.session_id, state_label(r.state), r.pid, r.age_seconds, r.idle_seconds, r.bytes_pending, r.ports, r.command
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(serde_json::json!({ "sessions": rows }));
        Ok(result)
    }
}

fn state_label(state: session::SessionState) -> &'static str {
    match state {
        session::SessionState::Active => "active",
        session::SessionState::Idle => "idle",
        session::SessionState::Exited => "exited",
    }
}

/// One row of `list_sessions`.
#[derive(Debug, Clone, serde::Serialize)]
struct SessionRow {
    session_id: u64,
    command: String,
    state: session::SessionState,
    tty: bool,
    pid: u32,
    age_seconds: f64,
    idle_seconds: f64,
    bytes_pending: u64,
    ports: Vec<u16>,
}

fn session_rows(sessions: &[(u64, Arc<CommandSession>)]) -> Vec<SessionRow> {
    let stats: Vec<_> = crate::exec::procfs::all_pids()
        .into_iter()
        .filter_map(crate::exec::procfs::stat)
        .collect();
    let by_tag = crate::exec::procfs::pids_by_value(crate::exec::SESSION_VAR, &stats);
    let mut tables = session_ports::ListeningTables::default();
    sessions
        .iter()
        .map(|(id, s)| {
            let pid = s.exec.pid();
            let tagged: std::collections::BTreeSet<i32> = by_tag
                .get(s.exec.spec().session_tag.as_bytes())
                .into_iter()
                .flatten()
                .copied()
                .collect();
            let family = session_ports::family(&stats, pid as i32, &tagged);
            let last = s
                .exec
                .last_output_at()
                .unwrap_or(s.started)
                .max(s.last_call());
            SessionRow {
                session_id: *id,
                command: s.command.clone(),
                state: s.state(),
                tty: s.tty,
                pid,
                age_seconds: round1(s.started.elapsed()),
                idle_seconds: round1(last.elapsed()),
                bytes_pending: s.exec.pending_bytes(),
                ports: session_ports::listening_ports(&mut tables, &family),
            }
        })
        .collect()
}

fn round1(d: Duration) -> f64 {
    (d.as_secs_f64() * 10.0).round() / 10.0
}
