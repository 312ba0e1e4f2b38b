//! `apply_patch`: edits files with a patch in the apply_patch format, all or
//! nothing, through the plan stage like any other command.

use std::path::PathBuf;
use std::time::Instant;

use rmcp::RoleServer;
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::service::RequestContext;

use super::APPLY_PATCH;
use crate::doors::mcp::server::{
    AgentReachServer, JsonArgs, ToolFailure, ToolResult, parse, text_result,
};
use crate::doors::mcp::session;
use crate::doors::mcp::tool_params::{self, ApplyPatchParams};
use crate::logging::{self, ExecutionEvent};
use crate::plan::{Request, Target};

/// What the model reads about the tool: the patch format in brief.
const DOC: &str = "Edit files with a patch in the apply_patch format, all or nothing:\n\
*** Begin Patch\n\
*** Add File: path/new.txt\n\
+line\n\
*** Update File: path/old.rs\n\
@@ fn context_line\n\
 unchanged\n\
-removed\n\
+added\n\
*** Delete File: path/gone.txt\n\
*** End Patch\n\
`*** Move to: P` after an Update header renames. Paths are relative to `workdir` (default: the server root). If any hunk does not apply, nothing is changed and the error says why.";

/// The tool as listed: it writes files, so destructive.
pub(super) fn tool() -> Tool {
    Tool::new(APPLY_PATCH, DOC, schema_for_type::<ApplyPatchParams>())
        .with_annotations(ToolAnnotations::new().destructive(true))
}

impl AgentReachServer {
    pub(in crate::doors::mcp) async fn apply_patch(
        &self,
        args: JsonArgs,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let started = Instant::now();
        let p: tool_params::ApplyPatchParams = parse(args)?;
        let mut request = Request::new(Target::ApplyPatch { input: p.input });
        request.workdir = p.workdir.filter(|w| !w.is_empty()).map(PathBuf::from);
        let plan = self.plan(&request, ctx).await.map_err(|rejection| {
            ToolFailure::refused(format!("{} ({})", rejection.message, rejection.kind))
        })?;
        let workdir = plan.workdir().to_path_buf();
        let done = self.inner.broker.run_planned(plan).await?;
        let code = session::exit_code_of(&done.exit);
        self.inner
            .metrics
            .record_outcome(APPLY_PATCH, done.exit.status(), started.elapsed());
        logging::execution(&ExecutionEvent {
            tool: APPLY_PATCH,
            argv: &["apply_patch".to_owned()],
            cwd: &workdir,
            duration: started.elapsed(),
            session_id: None,
            state: "exited",
            exit_code: Some(code),
            bytes_out: done.stdout.original_bytes + done.stderr.original_bytes,
            truncated: done.truncated,
        });
        if code == 0 {
            Ok(text_result(done.stdout.text))
        } else {
            let mut message = done.stderr.text.trim().to_owned();
            if message.is_empty() {
                message = done.stdout.text.trim().to_owned();
            }
            Err(ToolFailure {
                message: format!("apply_patch failed (exit {code}): {message}"),
                counted_as: None,
            })
        }
    }
}
