//! The tool registry: the commands agents may run, described once in TOML by
//! an operator (typed parameters, cwd policy, risk, env, secrets, scheduling).
//!
//! Loading is pure (files in, [`Registry`] or every problem out); requests
//! are planned and run by the plan stage, above it.

// The result cache, the child environment and the metrics listener serve
// the Linux engine and doors; Windows loads, inspects and plans tools with
// the rest.
pub(crate) mod builtin;
#[cfg(unix)]
pub(crate) mod cache;
#[cfg(unix)]
mod cache_store;
#[cfg(unix)]
pub(crate) mod env;
pub(crate) mod kinds;
pub(crate) mod load;
pub(crate) mod location;
#[cfg(unix)]
pub(crate) mod metrics;
#[cfg(unix)]
pub(crate) mod metrics_http;
pub(crate) mod model;
pub(crate) mod node;
pub(crate) mod params;
pub(crate) mod parse;
pub(crate) mod schema;
pub(crate) mod secrets;
pub(crate) mod template;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use location::Problem;
#[cfg(unix)]
pub(crate) use metrics::Metrics;
pub(crate) use model::{Settings, ToolSpec};

/// Why a registry could not be loaded.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    #[error("cannot read registry file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", describe_problems(problems))]
    Invalid { problems: Vec<Problem> },
    #[error("unknown profile {name:?} (known: {})", if known.is_empty() { "none".to_owned() } else { known.join(", ") })]
    UnknownProfile { name: String, known: Vec<String> },
    #[error("project root {path} is not usable: {source}")]
    Root {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn describe_problems(problems: &[Problem]) -> String {
    let mut text = format!(
        "the registry has {} problem{} (see `agent-reach tools check`)",
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for problem in problems {
        text.push_str("\n  ");
        text.push_str(&problem.to_string());
    }
    text
}

/// Whether a tool may be requested under the active profile and policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Availability {
    Available,
    /// Left out by the active profile (message says why).
    DeniedByProfile(String),
    /// Above the registry's `max_risk`.
    DeniedByPolicy(String),
}

/// A loaded, validated registry with its profile applied.
#[derive(Debug, Clone)]
pub(crate) struct Registry {
    tools: BTreeMap<String, (Arc<ToolSpec>, Availability)>,
    order: Vec<String>,
    /// The effective settings (the profile's narrowing applied).
    pub(crate) settings: Settings,
    /// The canonical project root.
    pub(crate) root: PathBuf,
}

impl Registry {
    /// Loads `config` (and its includes) or, without one, the built-in
    /// registry; applies `profile`; `root` is the project root.
    pub(crate) fn load(
        config: Option<&Path>,
        profile: Option<&str>,
        root: &Path,
    ) -> Result<Registry, RegistryError> {
        let root = root.canonicalize().map_err(|source| RegistryError::Root {
            path: root.to_path_buf(),
            source,
        })?;
        if !root.is_dir() {
            return Err(RegistryError::Root {
                path: root,
                source: std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory"),
            });
        }
        let merged = match config {
            Some(path) => load::read_tree(path)?,
            None => load::read_builtin(&root),
        };
        load::build(merged, profile, root)
    }

    /// Every problem of a registry file and its includes (empty = clean),
    /// and how many tools it defines.
    pub(crate) fn check(config: &Path) -> Result<(usize, Vec<Problem>), RegistryError> {
        let mut merged = load::read_tree(config)?;
        // Loads, but is never served from the cache: the operator should know.
        for tool in &merged.tools {
            if tool.cache_ttl.is_some() && !tool.cacheable() {
                merged.problems.push(Problem {
                    location: tool.location.clone(),
                    message: format!(
                        "tool {:?}: `cache_ttl` on a tool of {} risk: a cached answer would skip a run that has effects; it is never served from the cache (mark the tool `idempotent = true` if it has none, or remove `cache_ttl`)",
                        tool.name,
                        tool.risk.as_str()
                    ),
                });
            }
        }
        Ok((merged.tools.len(), merged.problems))
    }

    /// The tools requests may use, in file order.
    pub(crate) fn tools(&self) -> impl Iterator<Item = &Arc<ToolSpec>> {
        self.order
            .iter()
            .filter_map(|name| match self.tools.get(name) {
                Some((tool, Availability::Available)) => Some(tool),
                _ => None,
            })
    }

    /// Every tool with its availability, in file order.
    pub(crate) fn all_tools(&self) -> impl Iterator<Item = (&Arc<ToolSpec>, &Availability)> {
        self.order
            .iter()
            .filter_map(|name| self.tools.get(name).map(|(t, a)| (t, a)))
    }

    /// One tool by name, whatever its availability.
    pub(crate) fn lookup(&self, name: &str) -> Option<(&Arc<ToolSpec>, &Availability)> {
        self.tools.get(name).map(|(t, a)| (t, a))
    }

    /// One available tool by name.
    pub(crate) fn tool(&self, name: &str) -> Option<&Arc<ToolSpec>> {
        match self.tools.get(name) {
            Some((tool, Availability::Available)) => Some(tool),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::model::Risk;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    const TOOL: &str =
        "[[tools]]\nname = \"{n}\"\ncommand = [\"true\"]\ncwd = \"project_root\"\nrisk = \"{r}\"\n";

    fn tool(name: &str, risk: &str) -> String {
        TOOL.replace("{n}", name).replace("{r}", risk)
    }

    #[test]
    fn includes_merge_and_later_wins() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "common.toml",
            &format!(
                "max_risk = \"medium\"\n{}{}",
                tool("a", "low"),
                tool("b", "high")
            ),
        );
        let main = write(
            dir.path(),
            "main.toml",
            &format!("include = [\"common.toml\"]\n{}", tool("b", "low")),
        );
        let registry = Registry::load(Some(&main), None, dir.path()).unwrap();
        let names: Vec<&str> = registry.tools().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(registry.tool("b").unwrap().risk, Risk::Low);
        assert_eq!(registry.settings.max_risk, Risk::Medium);
    }

    #[test]
    fn include_cycles_are_reported_with_the_line() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.toml", "include = [\"b.toml\"]\n");
        write(dir.path(), "b.toml", "\ninclude = [\"a.toml\"]\n");
        let (_, problems) = Registry::check(&dir.path().join("a.toml")).unwrap();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].to_string().contains("b.toml:2:"),
            "{}",
            problems[0]
        );
        assert!(problems[0].message.contains("include cycle"));
    }

    #[test]
    fn profiles_narrow_by_risk_and_list() {
        let dir = tempfile::tempdir().unwrap();
        let main = write(
            dir.path(),
            "r.toml",
            &format!(
                "allow_raw_commands = true\n[profiles.prod]\nmax_risk = \"low\"\nallow_raw_commands = false\n[profiles.only_c]\ntools = [\"c\"]\n{}{}{}",
                tool("a", "low"),
                tool("b", "medium"),
                tool("c", "high")
            ),
        );
        let prod = Registry::load(Some(&main), Some("prod"), dir.path()).unwrap();
        assert_eq!(
            prod.tools().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        assert!(matches!(
            prod.lookup("b").unwrap().1,
            Availability::DeniedByProfile(_)
        ));
        assert!(!prod.settings.allow_raw_commands);
        let only = Registry::load(Some(&main), Some("only_c"), dir.path()).unwrap();
        assert_eq!(
            only.tools().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
        let err = Registry::load(Some(&main), Some("nope"), dir.path()).unwrap_err();
        assert!(err.to_string().contains("known: only_c, prod"), "{err}");
    }

    #[test]
    fn undeclared_groups_and_profile_names_are_problems() {
        let dir = tempfile::tempdir().unwrap();
        let main = write(
            dir.path(),
            "r.toml",
            &format!(
                "[profiles.p]\ntools = [\"zz\"]\n{}group = \"cpu\"\n",
                tool("a", "low")
            ),
        );
        let (_, problems) = Registry::check(&main).unwrap();
        let all: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(problems.len(), 2, "{all:?}");
    }
}
