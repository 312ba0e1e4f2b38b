//! Resolving a registry tool's request under the operator's policy, the
//! part of planning both platforms share: availability under the profile
//! and policy, the interactive check, the tool's directory, its parameters
//! validated and expanded into the argv, the sandbox, the approval, its
//! secrets, tty and timeout. Linux's plan (`super::tool`) and Windows'
//! `exec --json` each turn the resulting [`ToolCall`] into their engine's
//! spec.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::policy::OperatorPolicy;
use super::request::{Args, Request};
use super::{ApprovalAsk, Door, Rejection};
use crate::registry::model::{CwdPolicy, DEFAULT_TOOL_TIMEOUT, ToolSpec};
use crate::registry::params::{PathContext, expand, validate_extra, validate_named};
use crate::registry::secrets::SecretStore;
use crate::registry::{Availability, Registry, kinds};
use crate::sandbox::Policy;

#[cfg(windows)]
use crate::platform_windows::locate::locate;
#[cfg(unix)]
use crate::workspace::locate;

/// A registry tool request, resolved: what to start, where and how.
#[derive(Debug, Clone)]
pub(crate) struct ToolCall {
    pub(crate) tool: Arc<ToolSpec>,
    /// The command with its parameters expanded.
    pub(crate) argv: Vec<String>,
    /// The tool's directory, by its `cwd` policy.
    pub(crate) cwd: PathBuf,
    /// The tool's `secrets`, with their values.
    pub(crate) secrets: Vec<(String, Vec<u8>)>,
    pub(crate) tty: bool,
    /// The tool's timeout, or the request's when shorter.
    pub(crate) timeout: Duration,
    /// The sandbox it runs in (`None`: none).
    pub(crate) sandbox: Option<Policy>,
}

/// Resolves a request for tool `name` from `door`, or says why not.
pub(crate) fn resolve_tool(
    policy: &OperatorPolicy,
    secrets: &SecretStore,
    registry: &Registry,
    request: &Request,
    name: &str,
    args: &Args,
    door: Door,
) -> Result<ToolCall, Rejection> {
    let Some((tool, availability)) = registry.lookup(name) else {
        let known: Vec<&str> = registry.tools().map(|t| t.name.as_str()).take(30).collect();
        return Err(Rejection::rejected(
            kinds::UNKNOWN_TOOL,
            format!("no tool named {name:?} (tools: {})", known.join(", ")),
        ));
    };
    let label = tool.name.as_str();
    match availability {
        Availability::Available => {}
        Availability::DeniedByProfile(why) => {
            return Err(Rejection::rejected(kinds::DENIED_BY_PROFILE, why.clone()));
        }
        Availability::DeniedByPolicy(why) => {
            return Err(Rejection::rejected(kinds::DENIED_BY_POLICY, why.clone()));
        }
    }
    // One-shot: nobody could answer its prompts, it would only time out.
    if tool.interactive && door != Door::Run && !request.session {
        return Err(Rejection::rejected(
            kinds::NEEDS_SESSION,
            format!(
                "tool {label} is interactive: it waits for input that a one-shot request cannot give, so it was not started; run it in a terminal session (MCP exec_command with tty: true, or agent-reach run)"
            ),
        ));
    }
    let cwd = tool_cwd(registry, tool, request.workdir.as_deref())?;
    let paths = PathContext {
        root: &registry.root,
        cwd: &cwd,
    };
    let empty = serde_json::Map::new();
    let (named, extra): (&serde_json::Map<String, Value>, &[String]) = match args {
        Args::Named(map) => (map, &[]),
        Args::List(list) => (&empty, list),
    };
    let values = validate_named(tool, named, paths)
        .map_err(|why| Rejection::rejected(kinds::INVALID_PARAMS, why))?;
    validate_extra(tool, extra).map_err(|why| Rejection::rejected(kinds::INVALID_PARAMS, why))?;
    let argv = expand(tool, &values, extra);
    let sandbox = policy.sandbox_for(request.sandbox, tool.sandbox)?;
    let ask = ApprovalAsk {
        what: format!("tool {label}"),
        argv: argv.clone(),
        workdir: cwd.clone(),
        risk: tool.risk,
    };
    policy.check_approval(ask, door, request.approve)?;
    let mut values = Vec::new();
    for secret in &tool.secrets {
        match secrets.get(secret) {
            Some(value) => values.push((secret.clone(), value.to_vec())),
            None => {
                return Err(Rejection::error(
                    kinds::SECRET_UNAVAILABLE,
                    format!(
                        "tool {label} needs secret {secret}, which is set neither in the secrets file nor in the server's environment"
                    ),
                ));
            }
        }
    }
    let tool_timeout = tool.timeout.unwrap_or(DEFAULT_TOOL_TIMEOUT);
    let timeout = match request.timeout_ms {
        Some(ms) if ms > 0 => Duration::from_millis(ms).min(tool_timeout),
        _ => tool_timeout,
    };
    Ok(ToolCall {
        tool: Arc::clone(tool),
        argv,
        cwd,
        secrets: values,
        tty: request.tty.unwrap_or(tool.interactive),
        timeout,
        sandbox,
    })
}

/// The directory a tool runs in, by its `cwd` policy.
fn tool_cwd(
    registry: &Registry,
    tool: &ToolSpec,
    workdir: Option<&Path>,
) -> Result<PathBuf, Rejection> {
    let root = &registry.root;
    let label = tool.name.as_str();
    let fixed = match &tool.cwd {
        CwdPolicy::Caller => {
            return match workdir {
                Some(workdir) => caller_cwd(root, workdir),
                None => Ok(root.clone()),
            };
        }
        CwdPolicy::ProjectRoot => root.clone(),
        CwdPolicy::Fixed(path) => {
            let dir = root.join(path);
            dir.canonicalize()
                .ok()
                .filter(|d| d.is_dir())
                .ok_or_else(|| {
                    Rejection::error(
                        kinds::INVALID_WORKDIR,
                        format!(
                            "tool {label} runs in {}, which is not an existing directory",
                            dir.display()
                        ),
                    )
                })?
        }
    };
    if let Some(workdir) = workdir {
        // Canonical on both sides (Windows' `locate` gives the plain form).
        let asked = locate(root, root, workdir)
            .ok()
            .and_then(|dir| dir.canonicalize().ok());
        if asked.as_deref() != Some(fixed.as_path()) {
            return Err(Rejection::rejected(
                kinds::INVALID_WORKDIR,
                format!(
                    "tool {label} always runs in {} (cwd = {}); leave out workdir",
                    fixed.display(),
                    tool.cwd
                ),
            ));
        }
    }
    Ok(fixed)
}

/// Why a caller's directory could not be located, as a rejection: the
/// machine's limits are `resources_exhausted` (try again), anything else
/// the caller's `invalid_workdir`.
pub(crate) fn workdir_refusal(exhausted: bool, e: &dyn std::fmt::Display) -> Rejection {
    if exhausted {
        Rejection::error(kinds::RESOURCES_EXHAUSTED, format!("workdir: {e}"))
    } else {
        Rejection::rejected(kinds::INVALID_WORKDIR, format!("workdir: {e}"))
    }
}

/// A directory given by the caller, confined to the project root.
pub(crate) fn caller_cwd(root: &Path, workdir: &Path) -> Result<PathBuf, Rejection> {
    // Windows' lookup has no such case: its errors are the caller's.
    #[cfg(unix)]
    let dir = locate(root, root, workdir).map_err(|e| workdir_refusal(e.is_exhausted(), &e))?;
    #[cfg(windows)]
    let dir = locate(root, root, workdir).map_err(|e| workdir_refusal(false, &e))?;
    if !dir.is_dir() {
        return Err(Rejection::rejected(
            kinds::INVALID_WORKDIR,
            format!("workdir {} is not an existing directory", workdir.display()),
        ));
    }
    Ok(dir)
}
