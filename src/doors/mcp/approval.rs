//! Approval by a person over MCP. The model fills in a tool call's
//! arguments, so its own `approve` never counts: when the broker's plan
//! says a person's approval would let a request run, and the client
//! declared the elicitation capability, the person is asked
//! (`elicitation/create`) with the tool, the command line, the directory
//! and the risk, and the request runs only when they accept.

use std::time::Duration;

use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer};

use crate::broker::{Answer, Approver};
use crate::plan::{ApprovalAsk, Rejection};
use crate::registry::kinds;

/// How long a person has to answer before the request is refused.
const APPROVAL_WAIT: Duration = Duration::from_secs(600);

/// The person behind an MCP client, asked through its elicitation.
pub(crate) struct PeerApprover<'a>(pub(crate) &'a Peer<RoleServer>);

impl Approver for PeerApprover<'_> {
    /// The client declared form elicitation.
    fn can_ask(&self) -> bool {
        self.0
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
    }

    fn ask<'a>(&'a self, ask: &'a ApprovalAsk) -> Answer<'a> {
        Box::pin(ask_person(self.0, ask))
    }
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
async fn ask_person(peer: &Peer<RoleServer>, ask: &ApprovalAsk) -> Result<(), Rejection> {
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
