//! The registry's top level: its keys (`include`, `max_risk`, `approval`,
//! raw commands, the secrets file) and the `[scheduler]`, `[sandbox]`,
//! `[env]`, `[limits]` and `[profiles.NAME]` tables (a profile may hold its
//! own `limits`), read into [`FileSettings`] and
//! [`Profile`]s; `tools` is handed to the tool walker.
//!
//! [`FileSettings`]: super::FileSettings

use std::path::PathBuf;

use toml_edit::TableLike;

use super::Walker;
use crate::registry::model::{LimitOverrides, Profile, is_valid_env_name};
use crate::registry::node::{Node, entries};

const TOP_KEYS: &[&str] = &[
    "include",
    "max_risk",
    "approval",
    "allow_raw_commands",
    "raw_commands_risk",
    "secrets_file",
    "scheduler",
    "sandbox",
    "env",
    "limits",
    "profiles",
    "tools",
];
const SCHEDULER_KEYS: &[&str] = &["global", "queue", "groups", "per_caller"];
const SANDBOX_KEYS: &[&str] = &["default", "writable_roots", "best_effort", "network"];
const PROFILE_KEYS: &[&str] = &[
    "description",
    "max_risk",
    "approval",
    "tools",
    "exclude",
    "allow_raw_commands",
    "limits",
];
const LIMITS_KEYS: &[&str] = &[
    "pids",
    "max_timeout_ms",
    "max_output_tokens",
    "max_walk_entries",
];

impl Walker<'_> {
    pub(super) fn top(&mut self, table: &dyn TableLike) {
        self.unknown_keys(table, TOP_KEYS, "the registry");
        for (key, _, node) in entries(table) {
            match key {
                "include" => {
                    for (path, span) in self.strings(node, "include").unwrap_or_default() {
                        let location = self.index.locate_span(span);
                        self.out.includes.push((self.base_dir.join(path), location));
                    }
                }
                "max_risk" => self.out.settings.max_risk = self.risk(node, key),
                "approval" => self.out.settings.approval = self.risk(node, key),
                "allow_raw_commands" => {
                    self.out.settings.allow_raw_commands = self.boolean(node, key)
                }
                "raw_commands_risk" => self.out.settings.raw_commands_risk = self.risk(node, key),
                "secrets_file" => {
                    self.out.settings.secrets_file =
                        self.string(node, key).map(|p| self.base_dir.join(p))
                }
                "scheduler" => self.scheduler(node),
                "sandbox" => self.sandbox(node),
                "env" => self.env(node),
                "limits" => self.out.settings.limits = self.limits(node, "limits"),
                "profiles" => self.profiles(node),
                "tools" => self.tools(node),
                _ => {}
            }
        }
    }

    fn scheduler(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "scheduler") else {
            return;
        };
        self.unknown_keys(table, SCHEDULER_KEYS, "[scheduler]");
        for (key, _, node) in entries(table) {
            match key {
                "global" => {
                    self.out.settings.scheduler_global = self.count(node, "scheduler.global", 1)
                }
                "queue" => {
                    self.out.settings.scheduler_queue = self.count(node, "scheduler.queue", 0)
                }
                "per_caller" => {
                    self.out.settings.scheduler_per_caller =
                        self.count(node, "scheduler.per_caller", 1)
                }
                "groups" => {
                    let Some(groups) = self.table(node, "scheduler.groups") else {
                        continue;
                    };
                    for (name, _, limit) in entries(groups) {
                        if let Some(limit) =
                            self.count(limit, &format!("scheduler.groups.{name}"), 1)
                        {
                            self.out.settings.groups.insert(name.to_owned(), limit);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn sandbox(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "sandbox") else {
            return;
        };
        self.unknown_keys(table, SANDBOX_KEYS, "[sandbox]");
        for (key, _, node) in entries(table) {
            match key {
                "default" => {
                    self.out.settings.sandbox_default = self.sandbox_policy(node, "sandbox.default")
                }
                "best_effort" => {
                    self.out.settings.best_effort = self.boolean(node, "sandbox.best_effort")
                }
                "network" => {
                    self.out.settings.sandbox_network = self.network(node, "sandbox.network")
                }
                "writable_roots" => {
                    let roots = self
                        .strings(node, "sandbox.writable_roots")
                        .unwrap_or_default();
                    self.out.settings.writable_roots =
                        Some(roots.into_iter().map(|(p, _)| PathBuf::from(p)).collect());
                }
                _ => {}
            }
        }
    }

    /// A `[limits]` table (`what` names it: `limits`, `profiles.NAME.limits`).
    fn limits(&mut self, node: Node<'_>, what: &str) -> LimitOverrides {
        let mut limits = LimitOverrides::default();
        let Some(table) = self.table(node, what) else {
            return limits;
        };
        self.unknown_keys(table, LIMITS_KEYS, &format!("[{what}]"));
        for (key, _, node) in entries(table) {
            let count = self.count(node, &format!("{what}.{key}"), 1);
            match key {
                "pids" => limits.pids = count.map(|n| n as u64),
                "max_timeout_ms" => limits.max_timeout_ms = count.map(|n| n as u64),
                "max_output_tokens" => limits.max_output_tokens = count,
                "max_walk_entries" => limits.max_walk_entries = count,
                _ => {}
            }
        }
        limits
    }

    fn env(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "env") else {
            return;
        };
        for (name, span, value) in entries(table) {
            if !is_valid_env_name(name) {
                self.problem(
                    span,
                    format!("[env]: {name:?} is not a valid variable name"),
                );
                continue;
            }
            if let Some(value) = self.string(value, &format!("env.{name}")) {
                if value.contains('\0') {
                    self.problem(
                        span,
                        format!("[env]: the value of {name} contains a NUL byte"),
                    );
                } else {
                    self.out.settings.env.insert(name.to_owned(), value);
                }
            }
        }
    }

    fn profiles(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "profiles") else {
            return;
        };
        for (name, span, node) in entries(table) {
            let Some(profile_table) = self.table(node, &format!("profiles.{name}")) else {
                continue;
            };
            let what = format!("[profiles.{name}]");
            self.unknown_keys(profile_table, PROFILE_KEYS, &what);
            let mut profile = Profile {
                name: name.to_owned(),
                location: self.index.locate_span(span),
                ..Profile::default()
            };
            for (key, _, node) in entries(profile_table) {
                match key {
                    "max_risk" => profile.max_risk = self.risk(node, key),
                    "approval" => profile.approval = self.risk(node, key),
                    "allow_raw_commands" => profile.allow_raw_commands = self.boolean(node, key),
                    "limits" => {
                        profile.limits = self.limits(node, &format!("profiles.{name}.limits"))
                    }
                    "description" => {
                        self.string(node, key);
                    }
                    "tools" | "exclude" => {
                        let names = self.strings(node, key).unwrap_or_default();
                        let names = names.into_iter().map(|(n, _)| n).collect();
                        if key == "tools" {
                            profile.tools = names;
                        } else {
                            profile.exclude = names;
                        }
                    }
                    _ => {}
                }
            }
            self.out.profiles.push(profile);
        }
    }
}
