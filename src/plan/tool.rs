//! Planning a registry tool on Linux: the shared resolution
//! ([`super::resolve`]), then its environment, cache, engine spec, sandbox
//! and scheduling.

use std::ffi::OsString;

use super::resolve::resolve_tool;
use super::sandbox;
use super::{Door, Plan, Planner, Rejection, Request};
use crate::registry::Registry;
use crate::registry::cache::{CacheKey, Cacheable};
use crate::registry::env::tool_env;
use crate::scheduler::Demand;

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
    let call = resolve_tool(
        &planner.policy,
        &planner.secrets,
        registry,
        request,
        name,
        args,
        door,
    )?;
    let tool = &call.tool;
    let argv: Vec<OsString> = call.argv.iter().map(OsString::from).collect();
    let tag = crate::exec::new_session_tag();
    let env = tool_env(
        &planner.config.env,
        &tool.env,
        &registry.settings.env,
        &call.secrets,
        call.tty,
        &tag,
    );
    // Never for a request that approves a risky run, or asks for a fresh one.
    let cache = tool
        .cache_ttl
        .filter(|_| tool.cacheable() && !request.approve && !request.no_cache)
        .map(|ttl| Cacheable {
            key: CacheKey {
                tool: tool.name.clone(),
                argv: argv.clone(),
                cwd: call.cwd.clone(),
                tty: call.tty,
            },
            ttl,
            keep_failures: tool.cache_failures,
        });
    let mut all_secrets = planner.all_secrets.clone();
    all_secrets.extend(call.secrets.iter().cloned());
    let mut spec = planner.spec(argv, call.cwd.clone(), env, tag, all_secrets);
    spec.tty = call.tty;
    spec.timeout = Some(call.timeout);
    let report = sandbox::apply_sandbox(
        planner,
        &mut spec,
        call.sandbox,
        planner.policy.network_for(tool.network),
    )?;
    Ok(Plan {
        spec,
        render: super::render(request),
        demand: Demand::new(tool.group.clone(), tool.exclusive.clone(), request.priority),
        label: tool.name.clone(),
        tool: Some(tool.name.clone()),
        cache,
        report,
        capped: Vec::new(),
        background: None,
    })
}
