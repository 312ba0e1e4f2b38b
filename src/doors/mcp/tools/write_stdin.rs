//! `write_stdin`: types into a running session and/or polls it for the
//! output it produced since the last reply.

use std::sync::Arc;
use std::time::Instant;

use rmcp::RoleServer;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::Tool;
use rmcp::service::RequestContext;

use super::WRITE_STDIN;
use crate::doors::mcp::server::{
    AgentReachServer, JsonArgs, ToolFailure, ToolResult, parse, reply_result, state_name,
};
use crate::doors::mcp::session::CommandSession;
use crate::doors::mcp::table::Lookup;
use crate::doors::mcp::tool_params::{self, PollRequest, WriteStdinParams};
use crate::logging::{self, ExecutionEvent};

/// What the model reads about the tool: how to type, poll and end input.
const DOC: &str = "Type into a running session (started with `tty: true`) and/or read the output it produced since the last reply.\n\
\n\
`chars` is sent as is: end a line with \"\\n\"; \"\\u0003\" is Ctrl-C, \"\\u0004\" Ctrl-D (end of input). Empty `chars` only polls: it waits up to `yield_time_ms` (default 5000, up to 300000) for new output, returning early when the process exits, `wait_for` matches, or it waits for input. After a write the default wait is 250 ms.\n\
\n\
When the process has exited, the reply gives its remaining output and exit code, and the session ends.";

/// The tool as listed.
pub(super) fn tool() -> Tool {
    Tool::new(WRITE_STDIN, DOC, schema_for_type::<WriteStdinParams>())
}

impl AgentReachServer {
    pub(in crate::doors::mcp) async fn write_stdin(
        &self,
        args: JsonArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let started = Instant::now();
        let p: tool_params::WriteStdinParams = parse(args)?;
        let req: PollRequest = tool_params::poll_request(p)?;
        let id = req.session_id;
        let session = self.live_session(id, !req.chars.is_empty())?;
        let mut write_note = None;
        if !req.chars.is_empty() {
            if session.exec.exit_info().is_some() {
                write_note = Some(format!(
                    "nothing was written: the process of session {id} had already exited"
                ));
            } else if !session.tty {
                return Err(ToolFailure::refused(format!(
                    "session {id} runs on pipes and its stdin is closed, so nothing can be typed into it; start the command with exec_command and tty: true to write to it"
                )));
            } else {
                session.exec.write_stdin(req.chars.as_bytes())?;
            }
        }
        let until = started + req.yield_time;
        let outcome = self
            .wait_with_progress(&session, until, req.wait_for.as_ref(), ctx)
            .await;
        let limits = self.inner.broker.limits();
        let (max_output_tokens, cap) = crate::plan::caps::cap_tokens(req.max_output_tokens, limits);
        let mut reply = self
            .reply(id, &session, outcome, max_output_tokens, started)
            .await;
        reply.capped.extend(cap.map(|cap| cap.detail()));
        reply.notes.extend(write_note);
        let argv = self.redact_all(std::slice::from_ref(&session.command));
        logging::execution(&ExecutionEvent {
            tool: WRITE_STDIN,
            argv: &argv,
            cwd: &self.inner.config.root,
            duration: started.elapsed(),
            session_id: Some(id),
            state: state_name(reply.state),
            exit_code: reply.exit_code,
            bytes_out: reply.original_token_count * 4,
            truncated: reply.truncated,
        });
        Ok(reply_result(&reply))
    }

    /// The live session `id`, or the one-line answer saying what became of it.
    fn live_session(&self, id: u64, writing: bool) -> Result<Arc<CommandSession>, ToolFailure> {
        let nothing_written = if writing { "; nothing was written" } else { "" };
        match self.table().get(self.client.id(), id) {
            Lookup::Live(s) => Ok(s),
            Lookup::Ended(how) => Err(ToolFailure::refused(format!(
                "session {id} {how}{nothing_written}"
            ))),
            Lookup::Unknown => Err(ToolFailure::refused(format!(
                "no session {id}{nothing_written}; list_sessions shows the running ones"
            ))),
        }
    }
}
