//! The operator's word, as one value every door is planned under: may raw
//! commands run, at what risk, which sandbox by default, the network, and
//! whose approval counts. Pure decisions, unit-tested without processes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::{ApprovalAsk, Door, Rejection};
use crate::registry::kinds;
use crate::registry::model::{Risk, Settings};
use crate::sandbox::{Network, Policy};

/// The policy of one process (the registry's settings and its profile,
/// `serve --sandbox`), or the local user's for `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OperatorPolicy {
    /// `allow_raw_commands`.
    pub(crate) allow_raw_commands: bool,
    /// `raw_commands_risk`.
    pub(crate) raw_commands_risk: Risk,
    /// `max_risk`.
    pub(crate) max_risk: Risk,
    /// `approval`: the lowest risk that needs approval.
    pub(crate) approval: Risk,
    /// `[sandbox] default` or `serve --sandbox`.
    pub(crate) sandbox_default: Option<Policy>,
    /// `[sandbox] network`.
    pub(crate) network: Network,
    /// `[sandbox] writable_roots`, absolute.
    pub(crate) writable_roots: Vec<PathBuf>,
    /// `[sandbox] best_effort`.
    pub(crate) best_effort: bool,
    /// The project root (`--root`).
    pub(crate) root: PathBuf,
    /// The policy governs requests (false only for `run`).
    pub(crate) governs: bool,
}

impl OperatorPolicy {
    /// The policy a registry's effective settings describe.
    pub(crate) fn from_settings(settings: &Settings, root: &Path) -> Self {
        Self {
            allow_raw_commands: settings.allow_raw_commands,
            raw_commands_risk: settings.raw_commands_risk,
            max_risk: settings.max_risk,
            approval: settings.approval,
            sandbox_default: settings.sandbox.default,
            network: settings.sandbox.network,
            writable_roots: settings
                .sandbox
                .writable_roots
                .iter()
                .map(|r| root.join(r))
                .collect(),
            best_effort: settings.sandbox.best_effort,
            root: root.to_path_buf(),
            governs: true,
        }
    }

    /// `run`: the local user's own command line, which no policy governs.
    pub(crate) fn local_user(cwd: PathBuf) -> Self {
        Self {
            allow_raw_commands: true,
            raw_commands_risk: Risk::Low,
            max_risk: Risk::High,
            approval: Risk::High,
            sandbox_default: None,
            network: Network::Deny,
            writable_roots: Vec::new(),
            best_effort: false,
            root: cwd,
            governs: false,
        }
    }

    /// `serve --sandbox POLICY` replaces `[sandbox] default`.
    pub(crate) fn with_sandbox_override(mut self, sandbox: Option<Policy>) -> Self {
        if sandbox.is_some() {
            self.sandbox_default = sandbox;
        }
        self
    }

    /// May a raw command run at all (before its risk is weighed)?
    pub(crate) fn check_raw_commands(&self) -> Result<(), Rejection> {
        if !self.governs {
            return Ok(());
        }
        if !self.allow_raw_commands {
            return Err(Rejection::rejected(
                kinds::RAW_COMMANDS_DISABLED,
                "raw commands are disabled by the operator's policy; use a registry tool (the operator can set allow_raw_commands = true in the registry)",
            ));
        }
        if self.raw_commands_risk > self.max_risk {
            return Err(Rejection::rejected(
                kinds::DENIED_BY_POLICY,
                format!(
                    "raw commands count as risk {} and the active policy allows at most {}",
                    self.raw_commands_risk, self.max_risk
                ),
            ));
        }
        Ok(())
    }

    /// Does `ask` need approval, and does the door have it?
    pub(crate) fn check_approval(
        &self,
        ask: ApprovalAsk,
        door: Door,
        approve: bool,
    ) -> Result<(), Rejection> {
        if !self.governs || ask.risk < self.approval {
            return Ok(());
        }
        let needs = |message: String, ask: Option<Box<ApprovalAsk>>| Rejection {
            approval: ask,
            ..Rejection::rejected(kinds::APPROVAL_REQUIRED, message)
        };
        let what = &ask.what;
        let risk = ask.risk;
        match door {
            Door::Run => Ok(()),
            Door::Exec if approve => Ok(()),
            Door::Exec => Err(needs(
                format!(
                    "{what} has risk {risk}, which needs approval: resend the request with \"approve\": true"
                ),
                None,
            )),
            Door::Mcp {
                person_approved: true,
            } => Ok(()),
            Door::Mcp {
                person_approved: false,
            } => Err(needs(
                format!(
                    "{what} has risk {risk}, which needs a person's approval; this MCP client cannot ask one (no elicitation capability), and the model's own `approve` does not count. The operator can allow it by raising `approval` in the registry above {risk}, or run it through `agent-reach exec --json` with \"approve\": true"
                ),
                Some(Box::new(ask)),
            )),
            Door::Listener => Err(needs(
                format!(
                    "{what} has risk {risk}, which needs a person's approval, and this listener has no person to ask; the operator can raise `approval` in the registry above {risk}"
                ),
                None,
            )),
        }
    }

    /// Does a raw command from `door` need approval (its risk is
    /// `raw_commands_risk`), and does the door have it?
    pub(crate) fn check_raw_approval(
        &self,
        argv: &[OsString],
        workdir: &Path,
        door: Door,
        approve: bool,
    ) -> Result<(), Rejection> {
        let ask = ApprovalAsk {
            what: "a raw command".to_owned(),
            argv: argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            workdir: workdir.to_path_buf(),
            risk: self.raw_commands_risk,
        };
        self.check_approval(ask, door, approve)
    }

    /// The sandbox of a command: the request may narrow the policy's (the
    /// tool's own, else the default), never widen it.
    pub(crate) fn sandbox_for(
        &self,
        asked: Option<Policy>,
        own: Option<Policy>,
    ) -> Result<Option<Policy>, Rejection> {
        let base = if self.governs {
            own.or(self.sandbox_default)
        } else {
            None
        };
        match (base, asked) {
            (None, asked) => Ok(asked),
            (Some(base), None) => Ok(Some(base)),
            (Some(base), Some(asked)) if asked <= base => Ok(Some(asked)),
            (Some(base), Some(asked)) => Err(Rejection::rejected(
                kinds::DENIED_BY_POLICY,
                format!(
                    "sandbox {asked} is wider than the operator's {base}; a request may only ask for a narrower one"
                ),
            )),
        }
    }

    /// The network of a sandboxed command: `[sandbox] network`, or a tool's
    /// own `network = true`.
    pub(crate) fn network_for(&self, tool_wants_network: bool) -> Network {
        if tool_wants_network || (self.governs && self.network == Network::Allow) {
            Network::Allow
        } else {
            Network::Deny
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::Status;

    fn policy() -> OperatorPolicy {
        let mut settings = Settings {
            allow_raw_commands: true,
            ..Settings::default()
        };
        settings.sandbox.default = Some(Policy::WorkspaceWrite);
        OperatorPolicy::from_settings(&settings, Path::new("/repo"))
    }

    fn ask(risk: Risk) -> ApprovalAsk {
        ApprovalAsk {
            what: "tool deploy".into(),
            argv: vec!["./deploy".into()],
            workdir: "/repo".into(),
            risk,
        }
    }

    #[test]
    fn a_request_may_narrow_the_sandbox_but_never_widen_it() {
        let p = policy();
        assert_eq!(p.sandbox_for(None, None), Ok(Some(Policy::WorkspaceWrite)));
        assert_eq!(
            p.sandbox_for(Some(Policy::ReadOnly), None),
            Ok(Some(Policy::ReadOnly))
        );
        let wider = p
            .sandbox_for(Some(Policy::DangerFullAccess), None)
            .unwrap_err();
        assert_eq!(wider.kind, kinds::DENIED_BY_POLICY);
        assert_eq!(wider.status, Status::Rejected);
        // A tool's own sandbox is its base.
        assert_eq!(
            p.sandbox_for(None, Some(Policy::ReadOnly)),
            Ok(Some(Policy::ReadOnly))
        );
        assert!(
            p.sandbox_for(Some(Policy::WorkspaceWrite), Some(Policy::ReadOnly))
                .is_err()
        );
    }

    #[test]
    fn without_a_policy_sandbox_the_request_chooses() {
        let p = OperatorPolicy::from_settings(&Settings::default(), Path::new("/r"));
        assert_eq!(p.sandbox_for(None, None), Ok(None));
        assert_eq!(
            p.sandbox_for(Some(Policy::DangerFullAccess), None),
            Ok(Some(Policy::DangerFullAccess))
        );
    }

    #[test]
    fn serve_sandbox_replaces_the_registry_default() {
        let p = policy().with_sandbox_override(Some(Policy::ReadOnly));
        assert_eq!(p.sandbox_default, Some(Policy::ReadOnly));
        let kept = policy().with_sandbox_override(None);
        assert_eq!(kept.sandbox_default, Some(Policy::WorkspaceWrite));
    }

    #[test]
    fn raw_commands_follow_allow_raw_commands_and_max_risk() {
        let mut p = policy();
        assert!(p.check_raw_commands().is_ok());
        p.max_risk = Risk::Low;
        assert_eq!(
            p.check_raw_commands().unwrap_err().kind,
            kinds::DENIED_BY_POLICY
        );
        p.allow_raw_commands = false;
        assert_eq!(
            p.check_raw_commands().unwrap_err().kind,
            kinds::RAW_COMMANDS_DISABLED
        );
        let run = OperatorPolicy::local_user("/w".into());
        assert!(run.check_raw_commands().is_ok());
    }

    #[test]
    fn approve_counts_only_where_the_caller_is_trusted() {
        let p = policy();
        assert!(
            p.check_approval(ask(Risk::Medium), Door::Exec, false)
                .is_ok()
        );
        assert!(p.check_approval(ask(Risk::High), Door::Exec, true).is_ok());
        let exec = p
            .check_approval(ask(Risk::High), Door::Exec, false)
            .unwrap_err();
        assert_eq!(exec.kind, kinds::APPROVAL_REQUIRED);
        let model = p
            .check_approval(
                ask(Risk::High),
                Door::Mcp {
                    person_approved: false,
                },
                true,
            )
            .unwrap_err();
        assert_eq!(model.kind, kinds::APPROVAL_REQUIRED);
        assert_eq!(
            model.approval.as_deref(),
            Some(&ask(Risk::High)),
            "a person can be asked"
        );
        assert!(model.message.contains("operator"), "{}", model.message);
        assert!(
            p.check_approval(
                ask(Risk::High),
                Door::Mcp {
                    person_approved: true
                },
                false
            )
            .is_ok()
        );
        let listener = p
            .check_approval(ask(Risk::High), Door::Listener, true)
            .unwrap_err();
        assert_eq!(listener.approval, None);
    }

    #[test]
    fn the_network_is_allowed_only_where_the_policy_says() {
        let mut p = policy();
        assert_eq!(p.network_for(false), Network::Deny);
        assert_eq!(p.network_for(true), Network::Allow);
        p.network = Network::Allow;
        assert_eq!(p.network_for(false), Network::Allow);
    }
}
