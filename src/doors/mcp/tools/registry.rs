//! The registry's tools as MCP tools: one MCP tool per registry tool, its
//! parameters as the input schema, its result as the normalized JSON.
//!
//! The broker does the work (validation, policy, a person's approval,
//! scheduling, secrets, the engine); this module only translates between
//! MCP and it. A registry
//! tool whose name a built-in tool already has is left out (and logged),
//! since the built-ins are what agents rely on.

use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value};

use rmcp::RoleServer;
use rmcp::service::Peer;

use crate::broker::Broker;
use crate::doors::mcp::approval::PeerApprover;
use crate::doors::mcp::portable::registry_tools;
use crate::gate::Caller;
use crate::plan::Request;

/// The registry tools served over MCP.
pub(crate) struct RegistryTools {
    broker: Broker,
    tools: Vec<Tool>,
}

impl RegistryTools {
    /// The available tools of the operator's registry, minus those whose
    /// names are in `taken`.
    pub(crate) fn new(broker: Broker, taken: &[&str]) -> Self {
        let tools = registry_tools(&broker.registry(), taken, |name| {
            tracing::warn!(
                tool = name,
                "registry tool not served: a built-in tool has its name"
            );
        });
        Self { broker, tools }
    }

    /// The MCP tool definitions.
    pub(crate) fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// Whether `name` is one of them.
    pub(crate) fn serves(&self, name: &str) -> bool {
        self.tools.iter().any(|t| t.name == name)
    }

    /// Runs one call; the result is the normalized JSON, as text and as
    /// structured content. Refusals and agent-reach failures are tool errors.
    pub(crate) async fn call(
        &self,
        caller: &Caller,
        name: &str,
        args: Option<Map<String, Value>>,
        peer: &Peer<RoleServer>,
    ) -> CallToolResult {
        let args = args.unwrap_or_default();
        let request = match self.broker.registry().tool(name) {
            Some(spec) => Request::for_mcp_tool(spec, args),
            None => Request::for_tool(None, name, args),
        };
        // The model's `approve` never counts over MCP: a person is asked.
        let result = self
            .broker
            .dispatch_asking(caller, request, &PeerApprover(peer))
            .await;
        // The broker logged it, once.
        crate::doors::mcp::portable::tool_result(&result)
    }
}
