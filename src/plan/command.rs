//! Planning a raw command (an argv the caller wrote) and the built-in
//! `apply_patch`: the policy's checks, the working directory, the
//! environment, the timeout and the sandbox.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::files::FileOp;
use super::resolve::caller_cwd;
use super::sandbox;
use super::{
    APPLY_PATCH_TIMEOUT, DEFAULT_COMMAND_TIMEOUT, Door, Plan, Planner, Rejection, Request,
};
use crate::exec::SESSION_VAR;
use crate::registry::kinds;
use crate::registry::metrics::RAW_COMMAND_LABEL;
use crate::sandbox::Policy;
use crate::scheduler::Demand;
use crate::workspace::locate;

/// The metrics label of `apply_patch`.
pub(crate) const APPLY_PATCH_LABEL: &str = "apply_patch";

/// A raw command from `door`.
pub(crate) fn plan_command(
    planner: &Planner,
    request: &Request,
    argv: &[OsString],
    door: Door,
) -> Result<Plan, Rejection> {
    let policy = &planner.policy;
    if door != Door::Run {
        policy.check_raw_commands()?;
    }
    if argv.is_empty() {
        return Err(Rejection::rejected(
            kinds::MALFORMED_REQUEST,
            "the command is empty",
        ));
    }
    let cwd = command_cwd(planner, request.workdir.as_deref(), door)?;
    let sandbox = policy.sandbox_for(request.sandbox, None)?;
    if let Some(sandboxed) = sandbox {
        check_workspace(planner, sandboxed, &cwd)?;
    }
    if door != Door::Run {
        policy.check_raw_approval(argv, &cwd, door, request.approve)?;
    }
    let tty = request.tty.unwrap_or(false);
    let tag = crate::exec::new_session_tag();
    let env = command_env(planner, request, tty, &tag);
    let timeout = match request.timeout_ms {
        None if request.session => None,
        None => Some(DEFAULT_COMMAND_TIMEOUT),
        Some(0) => None,
        Some(ms) => Some(std::time::Duration::from_millis(ms)),
    };
    let mut spec = planner.spec(
        argv.to_vec(),
        cwd.clone(),
        env,
        tag,
        planner.all_secrets.clone(),
    );
    spec.tty = tty;
    spec.timeout = timeout;
    spec.merge_output = request.session;
    spec.limits.keep_blanks = request.keep_blanks;
    let report = sandbox::apply_sandbox(planner, &mut spec, sandbox, policy.network_for(false))?;
    Ok(Plan {
        spec,
        render: super::render(request),
        demand: Demand::new(None, None, request.priority),
        label: RAW_COMMAND_LABEL.to_owned(),
        tool: None,
        cache: None,
        report,
        capped: Vec::new(),
        background: None,
    })
}

/// The built-in `apply_patch` tool: a file write planned as one (refused
/// where raw commands are, and under a `read-only` policy), then the patch
/// through the personality, in the caller's directory confined to the
/// root, under the policy's default sandbox.
pub(crate) fn plan_apply_patch(
    planner: &Planner,
    request: &Request,
    input: &str,
    door: Door,
) -> Result<Plan, Rejection> {
    super::files::plan_file(&planner.policy, FileOp::ApplyPatch, &[], door)?;
    let Some((program, extra)) = planner.config.apply_patch_prefix.split_first() else {
        return Err(Rejection::error(
            kinds::SPAWN_FAILED,
            "this process has no apply_patch link",
        ));
    };
    let root = &planner.policy.root;
    let cwd = match request.workdir.as_deref() {
        Some(dir) => caller_cwd(root, dir)?,
        None => root.clone(),
    };
    let sandbox = planner.policy.sandbox_for(request.sandbox, None)?;
    if let Some(sandboxed) = sandbox {
        check_workspace(planner, sandboxed, &cwd)?;
    }
    check_patch_paths(planner, &cwd, input)?;
    let tag = crate::exec::new_session_tag();
    let env = crate::exec::child_env(&planner.config.env, &[], &[], false, &tag);
    let mut argv = vec![program.clone()];
    argv.extend(extra.iter().cloned());
    argv.push(input.into());
    let mut spec = planner.spec(argv, cwd.clone(), env, tag, planner.all_secrets.clone());
    spec.timeout = Some(APPLY_PATCH_TIMEOUT);
    let report =
        sandbox::apply_sandbox(planner, &mut spec, sandbox, crate::sandbox::Network::Deny)?;
    Ok(Plan {
        spec,
        render: super::render(request),
        demand: Demand::new(None, None, request.priority),
        label: APPLY_PATCH_LABEL.to_owned(),
        tool: None,
        cache: None,
        report,
        capped: Vec::new(),
        background: None,
    })
}

/// The sealed paths (the state directory, the token and secrets files)
/// stay out of a patch's reach under every policy, `danger-full-access`
/// included, where the patch runs unconfined: each path it names is
/// resolved as far as it exists (links followed) and refused when sealed.
/// A patch that does not parse is left to the personality to report.
fn check_patch_paths(planner: &Planner, cwd: &Path, input: &str) -> Result<(), Rejection> {
    let Ok(patch) = crate::apply_patch::parse(input) else {
        return Ok(());
    };
    let fence = planner.fence();
    let named = patch.operations.iter().flat_map(|op| {
        let moved = match op {
            crate::apply_patch::Operation::Update { move_to, .. } => move_to.as_ref(),
            _ => None,
        };
        std::iter::once(op.path()).chain(moved)
    });
    for path in named {
        let resolved = resolve_existing(&cwd.join(path));
        if fence.seals(&resolved) {
            return Err(Rejection::rejected(
                kinds::DENIED_BY_POLICY,
                format!(
                    "apply_patch refused: {} is agent-reach's own state, the token or the secrets file, out of every file operation's reach",
                    path.display()
                ),
            ));
        }
    }
    Ok(())
}

/// `path` with its longest existing part resolved by the filesystem and
/// the rest appended, `.` and `..` taken lexically.
fn resolve_existing(path: &Path) -> PathBuf {
    let parts: Vec<std::path::Component<'_>> = path.components().collect();
    for split in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..split].iter().collect();
        let Ok(mut resolved) = head.canonicalize() else {
            continue;
        };
        // The missing rest as the patch's own paths are read: `.` dropped,
        // `..` taking back the part before it.
        for part in &parts[split..] {
            match part {
                std::path::Component::ParentDir => {
                    resolved.pop();
                }
                std::path::Component::Normal(name) => resolved.push(name),
                _ => {}
            }
        }
        return resolved;
    }
    path.to_path_buf()
}

/// Where a raw command runs: `run` takes its directory as given; `exec` and
/// MCP keep it beneath the project root, and so do the listeners (a
/// directory leading out is `denied_by_policy`). Whatever lies inside the root is
/// opened beneath it again at the spawn and entered from that handle.
fn command_cwd(
    planner: &Planner,
    workdir: Option<&Path>,
    door: Door,
) -> Result<PathBuf, Rejection> {
    let root = &planner.policy.root;
    let Some(workdir) = workdir else {
        return Ok(root.clone());
    };
    match door {
        Door::Exec | Door::Mcp { .. } => caller_cwd(root, workdir),
        Door::Run => Ok(root.join(workdir)),
        // A remote caller's directory lies beneath the root, whatever it
        // names (an absolute path, `..`, a link out); one that does not
        // exist yet is the engine's to report, as the platform would.
        Door::Listener => locate(root, root, workdir).map_err(|e| {
            if e.is_exhausted() {
                super::resolve::workdir_refusal(true, &e)
            } else {
                Rejection::rejected(kinds::DENIED_BY_POLICY, format!("workdir: {e}"))
            }
        }),
    }
}

/// Under the operator's `workspace-write`, the working directory (which
/// that policy makes writable) must be inside the project root or one of
/// the configured writable roots: a request cannot widen the workspace.
fn check_workspace(planner: &Planner, sandboxed: Policy, cwd: &Path) -> Result<(), Rejection> {
    let policy = &planner.policy;
    if !policy.governs || sandboxed != Policy::WorkspaceWrite || policy.sandbox_default.is_none() {
        return Ok(());
    }
    let resolved = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let inside = std::iter::once(&policy.root)
        .chain(&policy.writable_roots)
        .any(|root| {
            let root = root.canonicalize().unwrap_or_else(|_| root.clone());
            resolved.starts_with(root)
        });
    if inside {
        Ok(())
    } else {
        Err(Rejection::rejected(
            kinds::DENIED_BY_POLICY,
            format!(
                "workdir {} is outside the workspace ({}) that the operator's workspace-write sandbox lets commands write",
                cwd.display(),
                policy.root.display()
            ),
        ))
    }
}

/// The environment of a raw command: the engine's whitelist plus the
/// registry's `[env]`, `run --env`, a session's settings and the request's
/// own values; or, when the request replaces the environment, exactly its
/// values and the session tag.
fn command_env(
    planner: &Planner,
    request: &Request,
    tty: bool,
    tag: &str,
) -> BTreeMap<OsString, OsString> {
    if request.replace_env {
        let mut env: BTreeMap<OsString, OsString> = request.env.iter().cloned().collect();
        env.insert(SESSION_VAR.into(), tag.into());
        return env;
    }
    let parent = &planner.config.env;
    let mut set: Vec<(OsString, OsString)> = Vec::new();
    if let Some(registry) = &planner.registry {
        set.extend(
            registry
                .settings
                .env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
    }
    // Python writes its output as it goes (on a pipe it would hold a dev
    // server's "listening on" line in a buffer, and `wait_for` would never
    // see it), unless the operator set PYTHONUNBUFFERED themselves.
    if request.session && !parent.contains_key(OsStr::new("PYTHONUNBUFFERED")) {
        set.push(("PYTHONUNBUFFERED".into(), "1".into()));
    }
    set.extend(request.env.iter().cloned());
    crate::exec::child_env(parent, &request.pass_env, &set, tty, tag)
}
