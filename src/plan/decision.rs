//! What the plan stage decides about a request besides the command: who
//! asks ([`Door`]), what a person would be asked to approve, and the
//! refusal with the contract's `error.kind`. Platform-neutral: Windows
//! plans registry tools with them too.

use std::path::PathBuf;

use crate::registry::model::Risk;
use crate::result::Status;

/// Who is asking: decides whose approval counts and whether the operator's
/// policy governs the request at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Door {
    /// `agent-reach run`: the local user's own command line. The policy
    /// does not govern it; its sandbox is its own `--sandbox`.
    Run,
    /// `exec --json`/`--jsonl`: a program the operator trusts, so the
    /// request's `approve` counts.
    Exec,
    /// An MCP tool call. The model writes the arguments, so its `approve`
    /// never counts; `person_approved` is set once a person accepted an
    /// elicitation for this very call.
    Mcp { person_approved: bool },
    /// A network listener without a person (sandboxd, python-runtime,
    /// swerex): what needs approval is refused.
    Listener,
}

/// What a person is asked to approve (MCP elicitation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApprovalAsk {
    /// `tool NAME` or `a raw command`.
    pub(crate) what: String,
    /// The command line that would run.
    pub(crate) argv: Vec<String>,
    /// Where.
    pub(crate) workdir: PathBuf,
    pub(crate) risk: Risk,
}

/// A request refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Rejection {
    /// `rejected`, or `error` when agent-reach itself cannot (a secret
    /// without a value, a tool's fixed directory missing).
    pub(crate) status: Status,
    /// The contract's stable `error.kind`.
    pub(crate) kind: &'static str,
    pub(crate) message: String,
    /// Set when a person's approval would let it run.
    pub(crate) approval: Option<Box<ApprovalAsk>>,
}

impl Rejection {
    /// A `rejected` request.
    pub(crate) fn rejected(kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: Status::Rejected,
            kind,
            message: message.into(),
            approval: None,
        }
    }

    /// agent-reach cannot run it (`status: error`).
    pub(crate) fn error(kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: Status::Error,
            kind,
            message: message.into(),
            approval: None,
        }
    }
}
