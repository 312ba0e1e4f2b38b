//! rmcp's [`ServerHandler`] for [`AgentReachServer`]: the server's info and
//! protocol revisions, the tool and resource lists, and `tools/call`, which
//! refuses the shell tools where the policy forbids raw commands, sends each
//! call to its tool's handler and counts it.

use std::time::Instant;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};

use super::{AgentReachServer, ToolFailure};
use crate::doors::mcp::tools;
use crate::result::Status;

/// The MCP resource with the metrics (the registry's [`Metrics::to_json`]).
pub(crate) const METRICS_URI: &str = "agent-reach://metrics";

const INSTRUCTIONS: &str = "agent-reach runs commands for you. exec_command runs a shell command line and returns when it ends or its yield runs out (then it goes on as a session you poll or type into with write_stdin). Run servers in the foreground with wait_for; use tty for anything interactive. apply_patch edits files all or nothing.";

impl ServerHandler for AgentReachServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(
            "agent-reach",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(INSTRUCTIONS)
    }

    /// Over HTTP only the revisions with `initialize` (and so with
    /// `Mcp-Session-Id`): a session is who owns the processes, and the
    /// sessionless 2026-07-28 lifecycle would leave a client none.
    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        if self.client.is_remote() {
            ProtocolVersion::KNOWN_VERSIONS
                .iter()
                .filter(|v| v.has_initialize())
                .cloned()
                .collect::<Vec<_>>()
                .into()
        } else {
            std::borrow::Cow::Borrowed(ProtocolVersion::KNOWN_VERSIONS)
        }
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let metrics = Resource::new(METRICS_URI, "metrics")
            .with_title("agent-reach metrics")
            .with_description(
                "Per tool: calls, runs, successes, failures, timeouts, errors, busy, rejected and cached answers, and a latency histogram; and the live sessions.",
            )
            .with_mime_type("application/json");
        Ok(ListResourcesResult::with_all_items(vec![metrics]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        if request.uri != METRICS_URI {
            return Err(McpError::resource_not_found(
                format!(
                    "no resource {:?}; the one resource is {METRICS_URI}",
                    request.uri
                ),
                None,
            ));
        }
        self.update_sessions_gauge();
        let json = self.inner.metrics.to_json().to_string();
        let contents = ResourceContents::text(json, METRICS_URI).with_mime_type("application/json");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let started = Instant::now();
        let name = request.name.to_string();
        let args = request.arguments;
        let builtin = tools::BUILTIN_NAMES.contains(&name.as_str());
        if !self.inner.raw_commands && tools::RAW_TOOLS.contains(&name.as_str()) {
            self.inner.metrics.record_call(&name);
            self.inner
                .metrics
                .record_outcome(&name, Status::Rejected, started.elapsed());
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "{name} is not available: raw commands are disabled by the operator's policy (raw_commands_disabled); use a registry tool (the operator can set allow_raw_commands = true in the registry)"
            ))])
            .into());
        }
        let result = match name.as_str() {
            tools::EXEC_COMMAND => self.exec_command(args, &context).await,
            tools::WRITE_STDIN => self.write_stdin(args, &context).await,
            tools::LIST_SESSIONS => self.list_sessions(args).await,
            tools::KILL_SESSION => self.kill_session(args).await,
            tools::APPLY_PATCH => self.apply_patch(args, &context).await,
            other if self.inner.registry.serves(other) => Ok(self
                .inner
                .registry
                .call(&self.client.caller(), other, args, &context.peer)
                .await),
            other => {
                return Err(McpError::invalid_params(
                    format!("no tool named {other:?}"),
                    None,
                ));
            }
        };
        // The dispatcher counts the registry's tools itself.
        if builtin {
            let metrics = &self.inner.metrics;
            metrics.record_call(&name);
            if let Err(ToolFailure {
                counted_as: Some(status),
                ..
            }) = &result
            {
                metrics.record_outcome(&name, *status, started.elapsed());
            }
        }
        self.update_sessions_gauge();
        Ok(match result {
            Ok(r) => r,
            Err(failure) => CallToolResult::error(vec![ContentBlock::text(failure.message)]),
        }
        .into())
    }
}
