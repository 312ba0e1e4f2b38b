//! What the MCP server shares on every platform (Linux's door and
//! Windows' stdio server): asking the person behind the client to approve a
//! request (form elicitation), and a normalized result as a tool result.
//!
//! The model fills in a tool call's arguments, so its own `approve` never
//! counts over MCP: where a person's approval would let a request run and
//! the client declared form elicitation, the person is asked
//! (`elicitation/create`) with the tool, the command line, the directory
//! and the risk, and the request runs only when they accept.

use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{
    CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction, ElicitationSchema, Tool,
};
use rmcp::service::{ElicitationMode, Peer};
use serde_json::Value;

use crate::plan::{ApprovalAsk, Rejection};
use crate::registry::{Registry, kinds};
use crate::result::{NormalizedResult, Status};

/// How long a person has to answer before the request is refused.
const APPROVAL_WAIT: Duration = Duration::from_secs(600);

/// Whether the client declared form elicitation (a person can be asked).
pub(crate) fn can_ask(peer: &Peer<RoleServer>) -> bool {
    peer.supported_elicitation_modes()
        .contains(&ElicitationMode::Form)
}

/// What the person reads.
pub(crate) fn question(ask: &ApprovalAsk) -> String {
    let argv =
        shlex::try_join(ask.argv.iter().map(String::as_str)).unwrap_or_else(|_| ask.argv.join(" "));
    format!(
        "The agent asks to run {what} (risk {risk}):\n\n    {argv}\n\nin {dir}\n\nAccept to run it once; decline to refuse.",
        what = ask.what,
        risk = ask.risk,
        dir = ask.workdir.display(),
    )
}

/// Asks; `Ok` only on an explicit accept.
pub(crate) async fn ask_person(
    peer: &Peer<RoleServer>,
    ask: &ApprovalAsk,
) -> Result<(), Rejection> {
    let refused = |why: String| Rejection::rejected(kinds::APPROVAL_REQUIRED, why);
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "approve": {
                "type": "boolean",
                "title": "Run it",
                "description": "Run this command once",
                "default": true
            }
        }
    });
    let schema = match schema {
        serde_json::Value::Object(map) => ElicitationSchema::from_json_schema(map)
            .map_err(|e| refused(format!("cannot build the approval question: {e}")))?,
        _ => return Err(refused("cannot build the approval question".into())),
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: question(ask),
        requested_schema: schema,
    };
    let answer = peer
        .create_elicitation_with_timeout(params, Some(APPROVAL_WAIT))
        .await
        .map_err(|e| {
            refused(format!(
                "{} needs a person's approval, and asking for it failed: {e}",
                ask.what
            ))
        })?;
    let declined_in_form = answer
        .content
        .as_ref()
        .and_then(|c| c.get("approve"))
        .and_then(serde_json::Value::as_bool)
        == Some(false);
    match answer.action {
        ElicitationAction::Accept if !declined_in_form => {
            tracing::info!(what = %ask.what, risk = %ask.risk, "a person approved the request");
            Ok(())
        }
        ElicitationAction::Accept | ElicitationAction::Decline => Err(refused(format!(
            "the person declined: {} was not run",
            ask.what
        ))),
        _ => Err(refused(format!(
            "the person dismissed the question: {} was not run",
            ask.what
        ))),
    }
}

/// The MCP tools of `registry`'s available tools, each with its model
/// description and input schema, but those whose names are `taken` (the
/// built-ins, which agents rely on): each of those is passed to `skipped`.
pub(crate) fn registry_tools(
    registry: &Registry,
    taken: &[&str],
    mut skipped: impl FnMut(&str),
) -> Vec<Tool> {
    let mut tools = Vec::new();
    for spec in registry.tools() {
        if taken.contains(&spec.name()) {
            skipped(spec.name());
            continue;
        }
        tools.push(Tool::new(
            spec.name().to_owned(),
            spec.model_description(),
            Arc::new(spec.mcp_input_schema()),
        ));
    }
    tools
}

/// A registry tool's normalized result as an MCP tool result: the JSON as
/// text and as structured content; refusals and agent-reach's failures
/// are tool errors.
pub(crate) fn tool_result(result: &NormalizedResult) -> CallToolResult {
    let value = serde_json::to_value(result).unwrap_or(Value::Null);
    let failed = matches!(
        result.status,
        Status::Rejected | Status::Busy | Status::Error
    );
    let content = vec![ContentBlock::text(value.to_string())];
    let mut call = if failed {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    call.structured_content = Some(value);
    call
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::model::Risk;

    #[test]
    fn the_question_names_the_command_the_directory_and_the_risk() {
        let text = question(&ApprovalAsk {
            what: "tool deploy".into(),
            argv: vec!["./deploy.sh".into(), "prod env".into()],
            workdir: "/repo".into(),
            risk: Risk::High,
        });
        assert!(text.contains("tool deploy"), "{text}");
        assert!(text.contains("./deploy.sh 'prod env'"), "{text}");
        assert!(text.contains("/repo"), "{text}");
        assert!(text.contains("high"), "{text}");
    }
}
