//! Planning a registry tool: availability under the profile and policy,
//! parameters validated and expanded into the argv, the tool's directory,
//! its environment and secrets, timeout, sandbox, cache and scheduling.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::command::caller_cwd;
use super::sandbox;
use super::{ApprovalAsk, DEFAULT_TOOL_TIMEOUT, Door, Plan, Planner, Rejection, Request};
use crate::registry::cache::{CacheKey, Cacheable};
use crate::registry::env::tool_env;
use crate::registry::model::{CwdPolicy, ToolSpec};
use crate::registry::params::{PathContext, expand, validate_extra, validate_named};
use crate::registry::{Availability, Registry, kinds};
use crate::scheduler::Demand;
use crate::workspace::locate;

use super::request::Args;

/// A registry tool from `door`.
pub(crate) fn plan_tool(
    planner: &Planner,
    registry: &Registry,
    request: &Request,
    name: &str,
    args: &Args,
    door: Door,
) -> Result<Plan, Rejection> {
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
    let words = expand(tool, &values, extra);
    let policy = &planner.policy;
    let sandbox = policy.sandbox_for(request.sandbox, tool.sandbox)?;
    let ask = ApprovalAsk {
        what: format!("tool {label}"),
        argv: words.clone(),
        workdir: cwd.clone(),
        risk: tool.risk,
    };
    policy.check_approval(ask, door, request.approve)?;
    let argv: Vec<OsString> = words.into_iter().map(OsString::from).collect();
    let mut secrets = Vec::new();
    for secret in &tool.secrets {
        match planner.secrets.get(secret) {
            Some(value) => secrets.push((secret.clone(), value.to_vec())),
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
    let tty = request.tty.unwrap_or(tool.interactive);
    let tag = crate::exec::new_session_tag();
    let env = tool_env(
        &planner.config.env,
        &tool.env,
        &registry.settings.env,
        &secrets,
        tty,
        &tag,
    );
    let tool_timeout = tool.timeout.unwrap_or(DEFAULT_TOOL_TIMEOUT);
    let timeout = match request.timeout_ms {
        Some(ms) if ms > 0 => Duration::from_millis(ms).min(tool_timeout),
        _ => tool_timeout,
    };
    // Never for a request that approves a risky run, or asks for a fresh one.
    let cache = tool
        .cache_ttl
        .filter(|_| tool.cacheable() && !request.approve && !request.no_cache)
        .map(|ttl| Cacheable {
            key: CacheKey {
                tool: tool.name.clone(),
                argv: argv.clone(),
                cwd: cwd.clone(),
                tty,
            },
            ttl,
            keep_failures: tool.cache_failures,
        });
    let mut all_secrets = planner.all_secrets.clone();
    all_secrets.extend(secrets);
    let mut spec = planner.spec(argv, cwd.clone(), env, tag, all_secrets);
    spec.tty = tty;
    spec.timeout = Some(timeout);
    let report = sandbox::apply_sandbox(
        planner,
        &mut spec,
        sandbox,
        policy.network_for(tool.network),
    )?;
    Ok(Plan {
        spec,
        render: super::render(request),
        demand: Demand::new(tool.group.clone(), tool.exclusive.clone(), request.priority),
        label: label.to_owned(),
        tool: Some(tool.name.clone()),
        cache,
        report,
        capped: Vec::new(),
        background: None,
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
        let asked = locate(root, root, workdir).ok();
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
