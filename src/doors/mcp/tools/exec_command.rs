//! `exec_command`: runs a shell command line as a session and waits for it
//! (up to its yield, a `wait_for` match or its exit), then replies.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Instant;

use rmcp::RoleServer;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::service::RequestContext;

use super::EXEC_COMMAND;
use crate::broker::StartedSession;
use crate::doors::mcp::reply::ReplyState;
use crate::doors::mcp::server::{
    AgentReachServer, JsonArgs, ToolFailure, ToolResult, parse, reply_result, state_name,
};
use crate::doors::mcp::session::CommandSession;
use crate::doors::mcp::tool_params::{self, ExecCommandParams, ExecRequest};
use crate::logging::{self, ExecutionEvent};
use crate::plan::Request;

/// What the model reads about the tool: the two waits, servers, tty, folding.
const DOC: &str = "Run a shell command line and return its output.\n\
\n\
Two different times: `yield_time_ms` (default 10000) only hands control back to you: if the command has not finished by then, the reply gives a `session_id` and the command keeps running; read more of it with write_stdin. `timeout_ms` (default: none) kills the command (exit code 124). A wait also ends early when the command exits, when `wait_for` (a regex) matches new output, or, on a tty, when the program sits at a prompt waiting for input (state `awaiting_input`).\n\
\n\
Servers and watchers (`npm run dev`, `cargo watch`): run them in the foreground here with `wait_for` set to their ready line (e.g. `listening on|ready`); they live on as a session until you kill_session them. Background jobs (`cmd &`, `nohup`, daemons) are killed when the command that started them ends.\n\
\n\
Set `tty: true` for anything interactive: prompts, passwords, REPLs, `ssh`, programs you will type into with write_stdin. Without it stdin is closed and prompts fail at once.\n\
\n\
Long output is folded to `max_output_tokens`: the head and tail are kept and a marker says which lines were left out and the file that holds them (`sed -n 'A,Bp' FILE` prints them).";

/// The tool as listed: it runs anything, so destructive and open-world.
pub(super) fn tool() -> Tool {
    Tool::new(EXEC_COMMAND, DOC, schema_for_type::<ExecCommandParams>())
        .with_annotations(ToolAnnotations::new().destructive(true).open_world(true))
}

impl AgentReachServer {
    pub(in crate::doors::mcp) async fn exec_command(
        &self,
        args: JsonArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let started = Instant::now();
        let p: tool_params::ExecCommandParams = parse(args)?;
        let shell = self
            .inner
            .config
            .env
            .get(std::ffi::OsStr::new("SHELL"))
            .and_then(|s| s.to_str());
        let req = tool_params::exec_request(p, shell, &self.inner.config.root)?;
        let mut request = Request::command(req.argv.iter().map(OsString::from).collect());
        request.workdir = Some(req.workdir.clone());
        request.tty = Some(req.tty);
        request.timeout_ms = req
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        request.max_output_tokens = Some(req.max_output_tokens);
        request.sandbox = req.sandbox;
        request.session = true;
        let plan = self.plan(&request, ctx).await.map_err(|rejection| {
            self.log(&req, started, None, "rejected", None, 0, false);
            ToolFailure::refused(format!("{} ({})", rejection.message, rejection.kind))
        })?;
        // The budget and the caps the plan stage settled on ([limits]).
        let max_output_tokens = plan.max_output_tokens();
        let capped = plan.capped();
        // Room in this client's table and a seat in the one table of every
        // door (--max-sessions counts the other doors' live processes too),
        // both before the process starts: a refused session never runs.
        let pruned = self
            .table()
            .make_room(self.client.id(), self.client.max_sessions())
            .map_err(ToolFailure::from)?;
        self.kill_pruned(pruned);
        let ticket = self
            .inner
            .config
            .sessions
            .admit(&self.client.caller(), EXEC_COMMAND)
            .map_err(|full| {
                self.log(&req, started, None, "rejected", None, 0, false);
                ToolFailure::refused(full.to_string())
            })?;
        // A session's command takes a slot of the scheduler like any other
        // (machine-wide), held until the command ends. It waits for one no
        // longer than its yield: the model gets control back either way.
        let started_session = match self.inner.broker.start_planned(plan, req.yield_time).await {
            Ok(Ok(started_session)) => started_session,
            Ok(Err(e)) => {
                self.log(&req, started, None, "error", None, 0, false);
                return Err(ToolFailure::from(e));
            }
            Err(no_slot) => {
                self.log(&req, started, None, "busy", None, 0, false);
                return Err(ToolFailure::refused(format!(
                    "{no_slot} ({})",
                    crate::registry::kinds::QUEUE_FULL
                )));
            }
        };
        let StartedSession {
            exec,
            report,
            permit,
        } = started_session;
        let session = Arc::new(CommandSession::new(
            exec,
            req.cmd.clone(),
            req.tty,
            report,
            permit,
        ));
        let admitted = self.table().insert(
            self.client.id(),
            session.clone(),
            self.client.max_sessions(),
        );
        let (id, pruned) = match admitted {
            Ok(admitted) => admitted,
            Err(full) => {
                session.exec.terminate().await;
                return Err(ToolFailure::from(full));
            }
        };
        self.kill_pruned(pruned);
        session.take_seat(ticket);
        let until = started + req.yield_time;
        let outcome = self
            .wait_with_progress(&session, until, req.wait_for.as_ref(), ctx)
            .await;
        let mut reply = self
            .reply(id, &session, outcome, max_output_tokens, started)
            .await;
        reply.capped = capped;
        self.log(
            &req,
            started,
            (reply.state != ReplyState::Exited).then_some(id),
            state_name(reply.state),
            reply.exit_code,
            reply.original_token_count * 4,
            reply.truncated,
        );
        Ok(reply_result(&reply))
    }

    #[expect(clippy::too_many_arguments, reason = "one flat log event")]
    fn log(
        &self,
        req: &ExecRequest,
        started: Instant,
        session_id: Option<u64>,
        state: &str,
        exit_code: Option<i32>,
        bytes_out: u64,
        truncated: bool,
    ) {
        let argv = self.redact_all(&req.argv);
        logging::execution(&ExecutionEvent {
            tool: EXEC_COMMAND,
            argv: &argv,
            cwd: &req.workdir,
            duration: started.elapsed(),
            session_id,
            state,
            exit_code,
            bytes_out,
            truncated,
        });
    }
}
