//! A registry file and its includes, merged into one [`Registry`], with a
//! profile applied.
//!
//! Includes load before the file that names them and later definitions win
//! (a tool of the same name, a setting, a group limit, a profile), so a
//! project file can include a shared `common.toml` and override parts of it.
//! A file that includes itself, directly or not, is a reported cycle.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::builtin::builtin_toml;
use super::location::Problem;
use super::model::{Profile, Settings, ToolSpec};
use super::parse::{ParsedFile, parse_file};
use super::{Availability, Registry, RegistryError};

/// Everything read from a file tree, merged, before a profile narrows it.
#[derive(Debug, Default)]
pub(crate) struct Merged {
    pub(crate) settings: Settings,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) profiles: BTreeMap<String, Profile>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) files: Vec<PathBuf>,
}

/// Reads `path` and its includes. A missing top file is an error; every other
/// problem is collected.
pub(crate) fn read_tree(path: &Path) -> Result<Merged, RegistryError> {
    let text = std::fs::read_to_string(path).map_err(|source| RegistryError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut parsed = Vec::new();
    let mut problems = Vec::new();
    let canonical = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mut stack = vec![canonical];
    visit(path, &text, &mut stack, &mut parsed, &mut problems);
    let mut merged = merge(parsed);
    merged.problems.splice(0..0, problems);
    Ok(merged)
}

/// The built-in registry for `root`.
pub(crate) fn read_builtin(root: &Path) -> Merged {
    merge(vec![(
        PathBuf::from("<built-in>"),
        parse_file(Path::new("<built-in>"), &builtin_toml(root)),
    )])
}

fn visit(
    path: &Path,
    text: &str,
    stack: &mut Vec<PathBuf>,
    out: &mut Vec<(PathBuf, ParsedFile)>,
    problems: &mut Vec<Problem>,
) {
    let mut file = parse_file(path, text);
    for (include, location) in std::mem::take(&mut file.includes) {
        let canonical = include.canonicalize().unwrap_or_else(|_| include.clone());
        if let Some(start) = stack.iter().position(|p| *p == canonical) {
            let chain: Vec<String> = stack[start..]
                .iter()
                .chain(std::iter::once(&canonical))
                .map(|p| p.display().to_string())
                .collect();
            problems.push(Problem {
                location,
                message: format!("include cycle: {}", chain.join(" -> ")),
            });
            continue;
        }
        match std::fs::read_to_string(&include) {
            Ok(text) => {
                stack.push(canonical);
                visit(&include, &text, stack, out, problems);
                stack.pop();
            }
            Err(err) => problems.push(Problem {
                location,
                message: format!("cannot read included file {}: {err}", include.display()),
            }),
        }
    }
    out.push((path.to_path_buf(), file));
}

fn merge(files: Vec<(PathBuf, ParsedFile)>) -> Merged {
    let mut merged = Merged::default();
    let settings = &mut merged.settings;
    for (path, file) in files {
        merged.files.push(path);
        merged.problems.extend(file.problems);
        let s = file.settings;
        settings.max_risk = s.max_risk.unwrap_or(settings.max_risk);
        settings.approval = s.approval.unwrap_or(settings.approval);
        settings.allow_raw_commands = s.allow_raw_commands.unwrap_or(settings.allow_raw_commands);
        settings.raw_commands_risk = s.raw_commands_risk.unwrap_or(settings.raw_commands_risk);
        if s.secrets_file.is_some() {
            settings.secrets_file = s.secrets_file;
        }
        if s.scheduler_global.is_some() {
            settings.scheduler.global = s.scheduler_global;
        }
        if s.scheduler_per_caller.is_some() {
            settings.scheduler.per_caller = s.scheduler_per_caller;
        }
        if s.scheduler_queue.is_some() {
            settings.scheduler.queue = s.scheduler_queue;
        }
        settings.scheduler.groups.extend(s.groups);
        if s.sandbox_default.is_some() {
            settings.sandbox.default = s.sandbox_default;
        }
        if let Some(roots) = s.writable_roots {
            settings.sandbox.writable_roots = roots;
        }
        settings.sandbox.best_effort = s.best_effort.unwrap_or(settings.sandbox.best_effort);
        settings.sandbox.network = s.sandbox_network.unwrap_or(settings.sandbox.network);
        settings.env.extend(s.env);
        settings.limits = settings.limits.with(&s.limits);
        for tool in file.tools {
            match merged.tools.iter_mut().find(|t| t.name == tool.name) {
                Some(existing) => *existing = tool,
                None => merged.tools.push(tool),
            }
        }
        for profile in file.profiles {
            merged.profiles.insert(profile.name.clone(), profile);
        }
    }
    cross_check(&mut merged);
    merged
}

/// Problems only visible once every file is merged.
fn cross_check(merged: &mut Merged) {
    let groups = &merged.settings.scheduler.groups;
    for tool in &merged.tools {
        if let Some(group) = &tool.group
            && !groups.contains_key(group)
        {
            let known: Vec<&str> = groups.keys().map(String::as_str).collect();
            merged.problems.push(Problem {
                    location: tool.location.clone(),
                    message: format!(
                        "tool {:?}: group {group:?} is not declared in [scheduler.groups] (declared: {})",
                        tool.name,
                        if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                    ),
                });
        }
    }
    for profile in merged.profiles.values() {
        for name in profile.tools.iter().chain(&profile.exclude) {
            if !merged.tools.iter().any(|t| &t.name == name) {
                merged.problems.push(Problem {
                    location: profile.location.clone(),
                    message: format!("profile {:?} names unknown tool {name:?}", profile.name),
                });
            }
        }
    }
}

/// Applies a profile and builds the registry (fails on any problem).
pub(crate) fn build(
    merged: Merged,
    profile: Option<&str>,
    root: PathBuf,
) -> Result<Registry, RegistryError> {
    if !merged.problems.is_empty() {
        return Err(RegistryError::Invalid {
            problems: merged.problems,
        });
    }
    let mut settings = merged.settings;
    let chosen = match profile {
        None => None,
        Some(name) => Some(merged.profiles.get(name).cloned().ok_or_else(|| {
            RegistryError::UnknownProfile {
                name: name.to_owned(),
                known: merged.profiles.keys().cloned().collect(),
            }
        })?),
    };
    if let Some(profile) = &chosen {
        if let Some(max) = profile.max_risk {
            settings.max_risk = settings.max_risk.min(max);
        }
        if let Some(approval) = profile.approval {
            settings.approval = settings.approval.min(approval);
        }
        if let Some(raw) = profile.allow_raw_commands {
            settings.allow_raw_commands &= raw;
        }
        settings.limits = settings.limits.with(&profile.limits);
    }
    let mut tools = BTreeMap::new();
    let mut order = Vec::new();
    for tool in merged.tools {
        let availability = availability(&tool, &settings, chosen.as_ref());
        order.push(tool.name.clone());
        tools.insert(tool.name.clone(), (Arc::new(tool), availability));
    }
    Ok(Registry {
        tools,
        order,
        settings,
        root,
    })
}

fn availability(tool: &ToolSpec, settings: &Settings, profile: Option<&Profile>) -> Availability {
    if let Some(profile) = profile {
        let listed = profile.tools.is_empty() || profile.tools.contains(&tool.name);
        if !listed || profile.exclude.contains(&tool.name) {
            return Availability::DeniedByProfile(format!(
                "tool {} is not part of profile {:?}",
                tool.name, profile.name
            ));
        }
        if let Some(max) = profile.max_risk
            && tool.risk > max
        {
            return Availability::DeniedByProfile(format!(
                "tool {} has risk {} and profile {:?} allows at most {max}",
                tool.name, tool.risk, profile.name
            ));
        }
    }
    if tool.risk > settings.max_risk {
        return Availability::DeniedByPolicy(format!(
            "tool {} has risk {} and the registry allows at most {}",
            tool.name, tool.risk, settings.max_risk
        ));
    }
    Availability::Available
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::model::{
        DEFAULT_MAX_OUTPUT_TOKENS_LIMIT, DEFAULT_MAX_TIMEOUT_MS, DEFAULT_PIDS_LIMIT,
    };

    fn built(text: &str, profile: Option<&str>) -> Registry {
        let file = PathBuf::from("/r.toml");
        let parsed = super::super::parse::parse_file(&file, text);
        build(merge(vec![(file, parsed)]), profile, PathBuf::from("/")).unwrap()
    }

    #[test]
    fn limits_default_to_their_constants_and_a_profile_replaces_what_it_sets() {
        let plain = built("", None);
        assert_eq!(plain.settings.limits.pids, DEFAULT_PIDS_LIMIT);
        assert_eq!(plain.settings.limits.max_timeout_ms, DEFAULT_MAX_TIMEOUT_MS);
        assert_eq!(
            plain.settings.limits.max_output_tokens,
            DEFAULT_MAX_OUTPUT_TOKENS_LIMIT
        );
        let text = "[limits]\npids = 50\n[profiles.small.limits]\nmax_output_tokens = 9\n";
        let top = built(text, None);
        assert_eq!(top.settings.limits.pids, 50);
        assert_eq!(
            top.settings.limits.max_output_tokens,
            DEFAULT_MAX_OUTPUT_TOKENS_LIMIT
        );
        let small = built(text, Some("small"));
        assert_eq!(small.settings.limits.pids, 50);
        assert_eq!(small.settings.limits.max_output_tokens, 9);
    }
}
