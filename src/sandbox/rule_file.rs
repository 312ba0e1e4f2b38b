//! The sandbox's filesystem rule file `sandbox/landlock.toml`: its schema,
//! and the Rust code build.rs writes from it (build.rs includes this file).
//! A sandbox start then builds the rules instead of parsing TOML, about
//! 20 µs of every start; a rule file that does not parse fails the build.

use std::path::PathBuf;

use serde::Deserialize;

/// The rule file's text (the tests parse it again).
pub const RULE_FILE: &str = include_str!("../../sandbox/landlock.toml");

/// The data of [`RULE_FILE`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleFile {
    /// Devices usable under every policy.
    pub devices: Vec<PathBuf>,
    /// Directories of devices usable under every policy.
    pub device_dirs: Vec<PathBuf>,
    /// Writable under workspace-write, when they exist.
    pub workspace_roots: Vec<PathBuf>,
    /// Environment variables naming more workspace-write roots.
    pub workspace_root_vars: Vec<String>,
    /// Entry names kept read-only at the top of each writable root.
    pub protected_names: Vec<String>,
    /// When to add the read-only mount namespace under Landlock.
    pub read_only_mounts: MountMode,
}

/// When the sandbox adds its read-only mount namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountMode {
    /// Under every confining policy.
    Always,
    /// Only where a protected path inside a writable root needs it.
    Repositories,
    /// Never: Landlock alone.
    Never,
}

impl MountMode {
    /// Whether to try the namespace, given whether anything needs protecting.
    pub fn wanted(self, has_protected_paths: bool) -> bool {
        match self {
            MountMode::Always => true,
            MountMode::Repositories => has_protected_paths,
            MountMode::Never => false,
        }
    }
}

impl RuleFile {
    /// A Rust expression that builds this value (build.rs writes it).
    pub fn to_rust(&self) -> String {
        let paths = |list: &[PathBuf]| -> String {
            let items: Vec<String> = list
                .iter()
                .map(|p| format!("PathBuf::from({:?})", p.to_string_lossy()))
                .collect();
            format!("vec![{}]", items.join(", "))
        };
        let strings = |list: &[String]| -> String {
            let items: Vec<String> = list
                .iter()
                .map(|s| format!("String::from({s:?})"))
                .collect();
            format!("vec![{}]", items.join(", "))
        };
        format!(
            "RuleFile {{ devices: {}, device_dirs: {}, workspace_roots: {}, \
             workspace_root_vars: {}, protected_names: {}, read_only_mounts: MountMode::{:?} }}",
            paths(&self.devices),
            paths(&self.device_dirs),
            paths(&self.workspace_roots),
            strings(&self.workspace_root_vars),
            strings(&self.protected_names),
            self.read_only_mounts,
        )
    }
}
