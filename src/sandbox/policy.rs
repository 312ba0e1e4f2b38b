//! The pure description of a confinement: which policy, which extra writable
//! roots, whether the network is reachable, and how strict to be when the
//! kernel cannot enforce all of it.
//!
//! The exec engine builds a [`SandboxSpec`] from `run --sandbox` or a
//! registry tool's `sandbox = "..."`, and turns it into the argv that starts
//! the command through the `agent-reach-sandbox` link
//! ([`SandboxSpec::wrapper_argv`]); nothing here touches the kernel.

use std::fmt;
use std::str::FromStr;
#[cfg(unix)]
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
};

/// How much of the filesystem a confined command may write. Parsed at each
/// edge as this one type: clap (`--sandbox`), serde (JSON and TOML), `FromStr`.
/// The order is the contract's: each policy is narrower than the next.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    clap::ValueEnum,
    serde::Deserialize,
    serde::Serialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Everything readable and executable; no writes except the usual devices.
    ReadOnly,
    /// The working directory, `/tmp`, `$TMPDIR` and each `--writable-root`
    /// writable (their `.git` excepted); everything else read-only.
    #[default]
    WorkspaceWrite,
    /// No filesystem rules (the network and process rules still apply).
    DangerFullAccess,
}

impl Policy {
    /// Every policy, in the order the contract lists them.
    pub const ALL: [Policy; 3] = [
        Policy::ReadOnly,
        Policy::WorkspaceWrite,
        Policy::DangerFullAccess,
    ];

    /// The contract's name for the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::ReadOnly => "read-only",
            Policy::WorkspaceWrite => "workspace-write",
            Policy::DangerFullAccess => "danger-full-access",
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy or network name that the contract does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownName {
    #[error(
        "unknown sandbox policy {0:?}; expected read-only, workspace-write or danger-full-access"
    )]
    Policy(String),
    #[error("unknown network mode {0:?}; expected allow or deny")]
    Network(String),
}

impl FromStr for Policy {
    type Err = UnknownName;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Policy::ALL
            .into_iter()
            .find(|policy| policy.as_str() == name)
            .ok_or_else(|| UnknownName::Policy(name.to_owned()))
    }
}

/// Whether a confined command may open network sockets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// Any socket family.
    Allow,
    /// Only Unix sockets (`AF_UNIX`).
    #[default]
    Deny,
}

impl Network {
    /// The contract's name for the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Network::Allow => "allow",
            Network::Deny => "deny",
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Network {
    type Err = UnknownName;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "allow" => Ok(Network::Allow),
            "deny" => Ok(Network::Deny),
            other => Err(UnknownName::Network(other.to_owned())),
        }
    }
}

/// One confinement request, as the engine asks for it.
#[cfg(unix)]
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxSpec {
    pub policy: Policy,
    /// Writable in addition to the working directory, `/tmp` and `$TMPDIR`
    /// (ignored by `read-only`). A `.git` named here is writable.
    pub writable_roots: Vec<PathBuf>,
    pub network: Network,
    /// Run even when the kernel cannot enforce everything (and say what is not).
    pub best_effort: bool,
    /// Files and directories the command must not read (the listeners'
    /// token file, the secrets file): covered in its mount namespace. Passed
    /// with the hidden `--hide` flag, after the contract's flags.
    pub hidden: Vec<PathBuf>,
}

#[cfg(unix)]
impl SandboxSpec {
    /// The argv that starts a command confined by this spec:
    /// `[link, --policy, P, --writable-root, R..., --network, N, --cwd, DIR,
    /// (--best-effort), (--report FILE), --hide H..., --]`; append the
    /// command after it.
    pub fn wrapper_argv(
        &self,
        sandbox_link: &Path,
        cwd: &Path,
        report_file: Option<&Path>,
    ) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![
            sandbox_link.into(),
            "--policy".into(),
            self.policy.as_str().into(),
        ];
        for root in &self.writable_roots {
            argv.push("--writable-root".into());
            argv.push(root.into());
        }
        argv.extend([
            "--network".into(),
            self.network.as_str().into(),
            "--cwd".into(),
            cwd.into(),
        ]);
        if self.best_effort {
            argv.push("--best-effort".into());
        }
        if let Some(report) = report_file {
            argv.push("--report".into());
            argv.push(report.into());
        }
        for path in &self.hidden {
            argv.push("--hide".into());
            argv.push(path.into());
        }
        argv.push("--".into());
        argv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_round_trip() {
        for policy in Policy::ALL {
            assert_eq!(policy.as_str().parse::<Policy>(), Ok(policy));
        }
        assert_eq!(Policy::default(), Policy::WorkspaceWrite);
    }

    #[test]
    fn unknown_policy_names_the_choices() {
        let err = "readonly".parse::<Policy>().unwrap_err();
        let message = err.to_string();
        assert!(message.contains("\"readonly\""), "{message}");
        assert!(message.contains("workspace-write"), "{message}");
    }

    #[test]
    fn network_names_round_trip() {
        for network in [Network::Allow, Network::Deny] {
            assert_eq!(network.as_str().parse::<Network>(), Ok(network));
        }
        assert!("none".parse::<Network>().is_err());
        assert_eq!(Network::default(), Network::Deny);
    }

    #[cfg(unix)]
    #[test]
    fn wrapper_argv_lists_every_flag_in_order() {
        let spec = SandboxSpec {
            policy: Policy::ReadOnly,
            writable_roots: vec!["/a".into(), "/b c".into()],
            network: Network::Allow,
            best_effort: true,
            hidden: vec!["/etc/token".into()],
        };
        let argv = spec.wrapper_argv(
            Path::new("/s/agent-reach-sandbox"),
            Path::new("/w"),
            Some(Path::new("/r.json")),
        );
        let expected: Vec<OsString> = [
            "/s/agent-reach-sandbox",
            "--policy",
            "read-only",
            "--writable-root",
            "/a",
            "--writable-root",
            "/b c",
            "--network",
            "allow",
            "--cwd",
            "/w",
            "--best-effort",
            "--report",
            "/r.json",
            "--hide",
            "/etc/token",
            "--",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        assert_eq!(argv, expected);
    }

    #[cfg(unix)]
    #[test]
    fn wrapper_argv_omits_optional_flags() {
        let argv = SandboxSpec::default().wrapper_argv(Path::new("sb"), Path::new("/w"), None);
        let expected: Vec<OsString> = [
            "sb",
            "--policy",
            "workspace-write",
            "--network",
            "deny",
            "--cwd",
            "/w",
            "--",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        assert_eq!(argv, expected);
    }
}
