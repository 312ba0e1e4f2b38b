//! The flags of `agent-reach-sandbox`, exactly as the contract spells them,
//! turned into a [`SandboxRequest`]. Bad flags are our failure: exit 125.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Parser;

use super::policy::{Network, Policy, SandboxSpec};

/// The environment variable that names the report file when `--report` is absent.
pub const REPORT_VAR: &str = "AGENT_REACH_SANDBOX_REPORT";

/// agent-reach-sandbox: confine a command with Landlock and seccomp, then exec it.
#[derive(Debug, Parser)]
#[command(name = "agent-reach-sandbox", version, about, long_about = None)]
struct SandboxArgs {
    /// What the command may write.
    #[arg(long, value_name = "POLICY", default_value = "workspace-write",
          value_parser = clap::builder::PossibleValuesParser::new(["read-only", "workspace-write", "danger-full-access"]))]
    policy: String,
    /// One more writable directory (workspace-write); repeatable. A `.git`
    /// named here is writable.
    #[arg(long = "writable-root", value_name = "DIR")]
    writable_roots: Vec<PathBuf>,
    /// Whether the command may open non-Unix sockets.
    #[arg(long, value_name = "MODE", default_value = "deny",
          value_parser = clap::builder::PossibleValuesParser::new(["allow", "deny"]))]
    network: String,
    /// Run the command in DIR (default: the current directory).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Run even where the kernel cannot enforce the policy, saying what is not enforced.
    #[arg(long)]
    best_effort: bool,
    /// Write {"fs","net","abi"} to FILE before exec (also $AGENT_REACH_SANDBOX_REPORT).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// A file or directory the command must not read (repeatable; internal:
    /// the engine names its token and secrets files).
    #[arg(long = "hide", value_name = "PATH", hide = true)]
    hidden: Vec<PathBuf>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// One parsed invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRequest {
    pub spec: SandboxSpec,
    pub cwd: Option<PathBuf>,
    pub report: Option<PathBuf>,
    /// Never empty.
    pub command: Vec<OsString>,
}

/// Parses the arguments (`argv[0]` excluded); `report_from_env` is the value of
/// [`REPORT_VAR`], used when `--report` is absent.
pub fn parse(
    args: &[OsString],
    report_from_env: Option<PathBuf>,
) -> Result<SandboxRequest, clap::Error> {
    let argv = std::iter::once(OsString::from("agent-reach-sandbox")).chain(args.iter().cloned());
    let parsed = SandboxArgs::try_parse_from(argv)?;
    // The possible-values parsers above already restrict both to known names.
    let policy = parsed.policy.parse::<Policy>().unwrap_or_default();
    let network = parsed.network.parse::<Network>().unwrap_or_default();
    Ok(SandboxRequest {
        spec: SandboxSpec {
            policy,
            writable_roots: parsed.writable_roots,
            network,
            best_effort: parsed.best_effort,
            hidden: parsed.hidden,
        },
        cwd: parsed.cwd,
        report: parsed.report.or(report_from_env),
        command: parsed.command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn defaults_are_workspace_write_and_no_network() {
        let request = parse(&args(&["--", "true"]), None).unwrap();
        assert_eq!(request.spec, SandboxSpec::default());
        assert_eq!(request.command, args(&["true"]));
        assert_eq!(request.cwd, None);
        assert_eq!(request.report, None);
    }

    #[test]
    fn wrapper_argv_parses_back_to_the_same_spec() {
        let spec = SandboxSpec {
            policy: Policy::ReadOnly,
            writable_roots: vec!["/a".into(), "/b".into()],
            network: Network::Allow,
            best_effort: true,
            hidden: vec!["/etc/agent-reach/token".into(), "/s".into()],
        };
        let mut argv = spec.wrapper_argv(
            std::path::Path::new("agent-reach-sandbox"),
            std::path::Path::new("/w"),
            Some(std::path::Path::new("/r")),
        );
        argv.remove(0);
        argv.extend(args(&["ls", "-la", "--", "x"]));
        let request = parse(&argv, Some("/env".into())).unwrap();
        assert_eq!(request.spec, spec);
        assert_eq!(request.cwd, Some("/w".into()));
        assert_eq!(request.report, Some("/r".into()));
        assert_eq!(request.command, args(&["ls", "-la", "--", "x"]));
    }

    #[test]
    fn report_falls_back_to_the_environment() {
        let request = parse(&args(&["--", "true"]), Some("/env".into())).unwrap();
        assert_eq!(request.report, Some("/env".into()));
    }

    #[test]
    fn unknown_policy_and_missing_command_are_errors() {
        assert!(parse(&args(&["--policy", "nope", "--", "true"]), None).is_err());
        assert!(parse(&args(&["--network", "maybe", "--", "true"]), None).is_err());
        assert!(parse(&args(&["--policy", "read-only"]), None).is_err());
        assert!(parse(&args(&["--bogus", "--", "true"]), None).is_err());
    }
}
