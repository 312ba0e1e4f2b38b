//! Planning a file operation like a command. Every door's file routes
//! (SWE-ReX `/read_file`, `/write_file`, `/upload`; sandboxd's
//! `/v1/files`; python-runtime's `/upload`, `/download`, `/list`,
//! `/exists`; MCP `apply_patch`) reach the workspace only with a
//! [`FilePermit`], and only [`plan_file`] makes one.
//!
//! A caller who names paths and bytes does what a raw command could do, so
//! the operator's raw-command rules hold for it at that door:
//! `allow_raw_commands = false` refuses it (`raw_commands_disabled`), a
//! `raw_commands_risk` above `max_risk` refuses it (`denied_by_policy`),
//! and one that needs approval is refused where no person can give it. A
//! write (write, upload, unzip, remove, move, apply_patch) where the
//! operator's sandbox is `read-only` is `denied_by_policy`: what a command
//! may not change, a file route may not change either. File names holding
//! a line break are refused at every route (`invalid_params`): logs,
//! listings and shell loops over names cannot tell them apart.
//!
//! Where a path may lead is the workspace's business (resolved beneath the
//! root by the kernel); this stage decides whether the operation may run.

use super::policy::OperatorPolicy;
use super::{ApprovalAsk, Door, Rejection};
use crate::registry::kinds;
use crate::sandbox::Policy;

/// What a door does with files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileOp {
    Read,
    Write,
    Upload,
    Unzip,
    List,
    Remove,
    Move,
    ApplyPatch,
}

impl FileOp {
    /// Whether it changes the workspace.
    pub(crate) fn writes(self) -> bool {
        match self {
            FileOp::Read | FileOp::List => false,
            FileOp::Write
            | FileOp::Upload
            | FileOp::Unzip
            | FileOp::Remove
            | FileOp::Move
            | FileOp::ApplyPatch => true,
        }
    }

    /// How messages name it.
    pub(crate) fn verb(self) -> &'static str {
        match self {
            FileOp::Read => "read",
            FileOp::Write => "write",
            FileOp::Upload => "upload",
            FileOp::Unzip => "unzip",
            FileOp::List => "list",
            FileOp::Remove => "remove",
            FileOp::Move => "move",
            FileOp::ApplyPatch => "apply_patch",
        }
    }
}

/// The planner's word that a file operation may run. It can only be made
/// by [`plan_file`], so a route that holds one went through the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FilePermit {
    op: FileOp,
}

impl FilePermit {
    /// The operation allowed.
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "read by the doors to come, which dispatch on it")
    )]
    pub(crate) fn op(self) -> FileOp {
        self.op
    }

    /// Checks names that arrive after the permit (a multipart form's
    /// target, an archive's entries).
    pub(crate) fn check_names<'a>(
        self,
        paths: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), Rejection> {
        check_names(paths)
    }
}

/// A file name with a newline or carriage return is refused at every door.
pub(crate) fn check_names<'a>(paths: impl IntoIterator<Item = &'a str>) -> Result<(), Rejection> {
    for path in paths {
        if path.contains(['\n', '\r']) {
            return Err(Rejection::rejected(
                kinds::INVALID_PARAMS,
                format!(
                    "the file name {path:?} holds a newline or carriage return; names with line breaks are refused"
                ),
            ));
        }
        if path.contains('\0') {
            return Err(Rejection::rejected(
                kinds::INVALID_PARAMS,
                format!("the file name {path:?} holds a NUL byte"),
            ));
        }
    }
    Ok(())
}

/// The one decision: `op` on `paths` from `door`, under `policy`.
pub(crate) fn plan_file(
    policy: &OperatorPolicy,
    op: FileOp,
    paths: &[&str],
    door: Door,
) -> Result<FilePermit, Rejection> {
    check_names(paths.iter().copied())?;
    let permit = FilePermit { op };
    if !policy.governs || door == Door::Run {
        return Ok(permit);
    }
    policy.check_raw_commands().map_err(|refused| Rejection {
        message: format!(
            "file {} refused: a file route counts as a raw command, and {}",
            op.verb(),
            refused.message
        ),
        ..refused
    })?;
    let ask = ApprovalAsk {
        what: format!("a file {}", op.verb()),
        argv: std::iter::once(op.verb().to_owned())
            .chain(paths.iter().map(|p| (*p).to_owned()))
            .collect(),
        workdir: policy.root.clone(),
        risk: policy.raw_commands_risk,
    };
    // Nothing in a file request is the caller's approval.
    policy.check_approval(ask, door, false)?;
    if op.writes() && policy.sandbox_default == Some(Policy::ReadOnly) {
        return Err(Rejection::rejected(
            kinds::DENIED_BY_POLICY,
            format!(
                "file {} refused: it writes, and the operator's sandbox is read-only",
                op.verb()
            ),
        ));
    }
    Ok(permit)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::registry::model::{Risk, Settings};
    use crate::result::Status;

    /// The built-in registry's policy: raw commands on, workspace-write.
    fn builtin() -> OperatorPolicy {
        let mut settings = Settings {
            allow_raw_commands: true,
            ..Settings::default()
        };
        settings.sandbox.default = Some(Policy::WorkspaceWrite);
        OperatorPolicy::from_settings(&settings, Path::new("/repo"))
    }

    const EVERY_OP: [FileOp; 8] = [
        FileOp::Read,
        FileOp::Write,
        FileOp::Upload,
        FileOp::Unzip,
        FileOp::List,
        FileOp::Remove,
        FileOp::Move,
        FileOp::ApplyPatch,
    ];

    #[test]
    fn under_the_builtin_policy_every_file_operation_runs() {
        for op in EVERY_OP {
            let permit = plan_file(&builtin(), op, &["a.txt"], Door::Listener).unwrap();
            assert_eq!(permit.op(), op);
        }
    }

    #[test]
    fn a_read_only_sandbox_refuses_writes_and_allows_reads() {
        let policy = builtin().with_sandbox_override(Some(Policy::ReadOnly));
        for op in EVERY_OP {
            let planned = plan_file(&policy, op, &["a.txt"], Door::Listener);
            if op.writes() {
                let refused = planned.unwrap_err();
                assert_eq!(refused.kind, kinds::DENIED_BY_POLICY, "{op:?}");
                assert_eq!(refused.status, Status::Rejected);
                assert!(refused.message.contains("read-only"), "{}", refused.message);
            } else {
                assert!(planned.is_ok(), "{op:?}");
            }
        }
    }

    #[test]
    fn raw_commands_off_refuses_every_file_operation() {
        let mut policy = builtin();
        policy.allow_raw_commands = false;
        for op in EVERY_OP {
            let refused = plan_file(&policy, op, &[], Door::Listener).unwrap_err();
            assert_eq!(refused.kind, kinds::RAW_COMMANDS_DISABLED, "{op:?}");
            assert!(refused.message.contains(op.verb()), "{}", refused.message);
        }
    }

    #[test]
    fn a_raw_commands_risk_above_max_risk_refuses_a_read_as_it_refuses_a_command() {
        let mut policy = builtin();
        policy.raw_commands_risk = Risk::High;
        policy.max_risk = Risk::Medium;
        let refused =
            plan_file(&policy, FileOp::Read, &["/etc/shadow"], Door::Listener).unwrap_err();
        assert_eq!(refused.kind, kinds::DENIED_BY_POLICY);
    }

    #[test]
    fn what_needs_approval_is_refused_at_a_listener_and_asked_over_mcp() {
        let mut policy = builtin();
        policy.raw_commands_risk = Risk::High;
        policy.approval = Risk::High;
        let listener = plan_file(&policy, FileOp::Read, &["x"], Door::Listener).unwrap_err();
        assert_eq!(listener.kind, kinds::APPROVAL_REQUIRED);
        assert!(listener.approval.is_none());
        let mcp = plan_file(
            &policy,
            FileOp::ApplyPatch,
            &[],
            Door::Mcp {
                person_approved: false,
            },
        )
        .unwrap_err();
        assert_eq!(mcp.kind, kinds::APPROVAL_REQUIRED);
        assert!(mcp.approval.is_some(), "a person can be asked");
        assert!(
            plan_file(
                &policy,
                FileOp::ApplyPatch,
                &[],
                Door::Mcp {
                    person_approved: true
                }
            )
            .is_ok()
        );
    }

    #[test]
    fn names_with_line_breaks_are_refused_whatever_the_policy() {
        for name in ["a\nb", "a\rb", "dir/x\r\n"] {
            let refused = plan_file(&builtin(), FileOp::Read, &[name], Door::Listener).unwrap_err();
            assert_eq!(refused.kind, kinds::INVALID_PARAMS, "{name:?}");
        }
        let run = OperatorPolicy::local_user("/w".into());
        assert!(plan_file(&run, FileOp::Write, &["a\nb"], Door::Run).is_err());
        let permit = plan_file(&builtin(), FileOp::Unzip, &[], Door::Listener).unwrap();
        assert!(permit.check_names(["ok/x", "bad\n"]).is_err());
        assert!(permit.check_names(["ok/x"]).is_ok());
    }

    #[test]
    fn without_a_policy_sandbox_writes_run() {
        let mut settings = Settings {
            allow_raw_commands: true,
            ..Settings::default()
        };
        settings.sandbox.default = None;
        let policy = OperatorPolicy::from_settings(&settings, Path::new("/r"));
        assert!(plan_file(&policy, FileOp::Write, &["x"], Door::Listener).is_ok());
    }
}
