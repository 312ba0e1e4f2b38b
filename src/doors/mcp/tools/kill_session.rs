//! `kill_session`: ends a session (SIGTERM to all it started, SIGKILL after
//! a grace) and replies with its last output and how it ended.

use std::time::Instant;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{ContentBlock, Tool};

use super::KILL_SESSION;
use crate::doors::mcp::reply::ReplyState;
use crate::doors::mcp::server::{
    AgentReachServer, JsonArgs, ToolFailure, ToolResult, parse, reply_result, text_result,
    window_reply,
};
use crate::doors::mcp::session;
use crate::doors::mcp::table::Lookup;
use crate::doors::mcp::tool_params::{self, KillSessionParams};
use crate::exec::RenderOptions;
use crate::logging::{self, ExecutionEvent};

/// What the model reads about the tool.
const DOC: &str = "End a session: SIGTERM to everything it started, SIGKILL after a short grace. Returns its last output and how it ended.";

/// The tool as listed.
pub(super) fn tool() -> Tool {
    Tool::new(KILL_SESSION, DOC, schema_for_type::<KillSessionParams>())
}

impl AgentReachServer {
    pub(in crate::doors::mcp) async fn kill_session(&self, args: JsonArgs) -> ToolResult {
        let started = Instant::now();
        let p: tool_params::KillSessionParams = parse(args)?;
        let id = p.session_id;
        let session = match self.table().get(self.client.id(), id) {
            Lookup::Live(s) => s,
            Lookup::Ended(how) => {
                return Ok(text_result(format!("session {id} already {how}")));
            }
            Lookup::Unknown => return Err(ToolFailure::refused(format!("no session {id}"))),
        };
        let report = session.exec.terminate().await;
        let exit = session.exec.exit_info();
        if let Some(exit) = &exit {
            self.count_end(&session, exit);
        }
        let exit_code = exit.as_ref().map(session::exit_code_of);
        let how = match exit_code {
            Some(code) => format!("was killed (exit code {code})"),
            None => "was killed".to_owned(),
        };
        self.table().end(id, how.clone());
        let rendered = session.exec.take_output(&RenderOptions {
            max_output_tokens: tool_params::MAX_OUTPUT_TOKENS_DEFAULT,
            keep_color: false,
        });
        let mut notes = self.table().take_notes(self.client.id());
        if !report.survivors.is_empty() {
            notes.push(format!(
                "these processes could not be killed: {:?}",
                report.survivors
            ));
        }
        let reply = window_reply(
            &session,
            rendered,
            exit_code,
            None,
            ReplyState::Exited,
            notes,
            started,
        );
        let argv = self.redact_all(std::slice::from_ref(&session.command));
        logging::execution(&ExecutionEvent {
            tool: KILL_SESSION,
            argv: &argv,
            cwd: &self.inner.config.root,
            duration: started.elapsed(),
            session_id: Some(id),
            state: "killed",
            exit_code,
            bytes_out: reply.original_token_count * 4,
            truncated: reply.truncated,
        });
        let mut result = reply_result(&reply);
        result
            .content
            .insert(0, ContentBlock::text(format!("session {id} {how}")));
        Ok(result)
    }
}
