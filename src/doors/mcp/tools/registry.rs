//! The registry's tools as MCP tools: one MCP tool per registry tool, its
//! parameters as the input schema, its result as the normalized JSON.
//!
//! The broker does the work (validation, policy, a person's approval,
//! scheduling, secrets, the engine); this module only translates between
//! MCP and it. A registry
//! tool whose name a built-in tool already has is left out (and logged),
//! since the built-ins are what agents rely on.

use rmcp::model::{CallToolResult, ContentBlock, Tool};
use serde_json::{Map, Value};

use rmcp::RoleServer;
use rmcp::service::Peer;

use crate::broker::Broker;
use crate::doors::mcp::approval::PeerApprover;
use crate::gate::Caller;
use crate::plan::Request;
use crate::result::Status;

/// Request-level fields a call may carry next to the tool's parameters.
const REQUEST_FIELDS: [&str; 2] = ["approve", "max_output_tokens"];

/// The registry tools served over MCP.
pub(crate) struct RegistryTools {
    broker: Broker,
    tools: Vec<Tool>,
}

impl RegistryTools {
    /// The available tools of the operator's registry, minus those whose
    /// names are in `taken`.
    pub(crate) fn new(broker: Broker, taken: &[&str]) -> Self {
        let mut tools = Vec::new();
        for spec in broker.registry().tools() {
            if taken.contains(&spec.name()) {
                tracing::warn!(
                    tool = spec.name(),
                    "registry tool not served: a built-in tool has its name"
                );
                continue;
            }
            let mut schema = match spec.input_schema() {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            add_request_fields(&mut schema, spec.params.iter().map(|p| p.name.as_str()));
            tools.push(super::raw_tool(
                spec.name().to_owned(),
                spec.model_description(),
                schema,
            ));
        }
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
        let mut args = args.unwrap_or_default();
        let declared = |field: &str| {
            self.broker
                .registry()
                .tool(name)
                .is_some_and(|t| t.params.iter().any(|p| p.name == field))
        };
        let approve = if declared("approve") {
            None
        } else {
            args.remove("approve")
        };
        let max_tokens = if declared("max_output_tokens") {
            None
        } else {
            args.remove("max_output_tokens")
        };
        let mut request = Request::for_tool(None, name, args);
        request.approve = approve.and_then(|v| v.as_bool()).unwrap_or(false);
        request.max_output_tokens = max_tokens
            .and_then(|v| v.as_u64())
            .and_then(|v| usize::try_from(v).ok());
        // The model's `approve` never counts over MCP: a person is asked.
        let result = self
            .broker
            .dispatch_asking(caller, request, &PeerApprover(peer))
            .await;
        // The broker logged it, once.
        let value = serde_json::to_value(&result).unwrap_or(Value::Null);
        let failed = matches!(
            result.status,
            Status::Rejected | Status::Busy | Status::Error
        );
        let mut call = if failed {
            CallToolResult::error(vec![ContentBlock::text(value.to_string())])
        } else {
            CallToolResult::success(vec![ContentBlock::text(value.to_string())])
        };
        call.structured_content = Some(value);
        call
    }
}

/// Adds `approve` and `max_output_tokens` to a tool's schema where the tool
/// has no parameter of that name, so a client that validates arguments
/// against the schema lets them through.
fn add_request_fields<'a>(schema: &mut Map<String, Value>, params: impl Iterator<Item = &'a str>) {
    let params: Vec<&str> = params.collect();
    let Some(Value::Object(properties)) = schema.get_mut("properties") else {
        return;
    };
    for field in REQUEST_FIELDS {
        if params.contains(&field) {
            continue;
        }
        let property = match field {
            "approve" => serde_json::json!({
                "type": "boolean",
                "description": "Confirm a risky tool call (the registry says which tools need it)."
            }),
            _ => serde_json::json!({
                "type": "integer",
                "minimum": 1,
                "description": "Fold the output to about this many tokens (default 10000)."
            }),
        };
        properties.insert(field.to_owned(), property);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_fields_are_added_unless_the_tool_declares_them() {
        let mut schema =
            serde_json::json!({"type": "object", "properties": {"approve": {"type": "string"}}})
                .as_object()
                .cloned()
                .unwrap();
        add_request_fields(&mut schema, ["approve"].into_iter());
        assert_eq!(schema["properties"]["approve"]["type"], "string");
        assert_eq!(schema["properties"]["max_output_tokens"]["type"], "integer");
    }
}
