//! What `run --sandbox` gets on this machine, found by doing it: this very
//! binary started as `agent-reach-sandbox` (workspace-write, network
//! denied) on itself, first strictly, then with `--best-effort` when the
//! strict start was refused, its attestation report read back.
//!
//! This is a probe, not a door: it runs our own `--version` and nothing a
//! caller chose, so it starts the child with std's `Command` directly.

use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::personality::RUN_AS_PREFIX;
use crate::result::SandboxAttestation;

/// How much of a sandbox `run --sandbox` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum SandboxState {
    /// Files and network both enforced.
    Full,
    /// Only with `--best-effort`, or part of the rules.
    Partial,
    /// Refused even with `--best-effort`.
    Unavailable,
}

/// The verdict and why.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SandboxVerdict {
    pub(crate) state: SandboxState,
    pub(crate) detail: String,
    /// The attestation of the start that worked.
    pub(crate) attestation: Option<SandboxAttestation>,
}

/// Starts the sandbox personality of `exe` on `exe --version`, its report
/// in a directory under `<home>/tmp`, where `run --sandbox` makes its own.
pub(crate) fn probe(exe: &Path, home: &Path) -> SandboxVerdict {
    let parent = home.join("tmp");
    let made = std::fs::create_dir_all(&parent).and_then(|()| {
        tempfile::Builder::new()
            .prefix("doctor-sandbox")
            .tempdir_in(&parent)
    });
    let dir = match made {
        Ok(dir) => dir,
        Err(err) => {
            return SandboxVerdict {
                state: SandboxState::Unavailable,
                detail: format!(
                    "cannot make the report directory under {} as run --sandbox does: {err}",
                    parent.display()
                ),
                attestation: None,
            };
        }
    };
    let strict = start(exe, dir.path(), false);
    if let Ok(attestation) = &strict.0 {
        let full = attestation.fs == "enforced" && attestation.net == "enforced";
        return SandboxVerdict {
            state: if full {
                SandboxState::Full
            } else {
                SandboxState::Partial
            },
            detail: format!(
                "files {}, network {}{}",
                attestation.fs,
                attestation.net,
                attestation
                    .abi
                    .map_or_else(String::new, |abi| format!(" (Landlock ABI {abi})"))
            ),
            attestation: Some(attestation.clone()),
        };
    }
    let refused = strict.1;
    match start(exe, dir.path(), true) {
        (Ok(attestation), _) => SandboxVerdict {
            state: SandboxState::Partial,
            detail: format!(
                "only with --best-effort (files {}, network {}): {refused}",
                attestation.fs, attestation.net
            ),
            attestation: Some(attestation),
        },
        (Err(why), _) => SandboxVerdict {
            state: SandboxState::Unavailable,
            detail: if why == refused {
                why
            } else {
                format!("{refused}; with --best-effort: {why}")
            },
            attestation: None,
        },
    }
}

/// One start; the attestation, or why it failed, and the refusal's stderr.
fn start(
    exe: &Path,
    dir: &Path,
    best_effort: bool,
) -> (Result<SandboxAttestation, String>, String) {
    let report = dir.join(if best_effort {
        "best-effort.json"
    } else {
        "strict.json"
    });
    let mut command = Command::new(exe);
    command
        .arg(format!("{RUN_AS_PREFIX}agent-reach-sandbox"))
        .args(["--policy", "workspace-write", "--network", "deny", "--cwd"])
        .arg(dir)
        .arg("--report")
        .arg(&report);
    if best_effort {
        command.arg("--best-effort");
    }
    command
        .arg("--")
        .arg(exe)
        .arg(format!("{RUN_AS_PREFIX}agent-reach"))
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let output = match command.output() {
        Ok(output) => output,
        Err(err) => {
            let why = format!("cannot start {}: {err}", exe.display());
            return (Err(why.clone()), why);
        }
    };
    let stderr = String::from_utf8_lossy(&output.stderr)
        .lines()
        .map(|l| l.trim_start_matches("agent-reach-sandbox: "))
        .collect::<Vec<_>>()
        .join("; ");
    let attestation = crate::sandbox::read_attestation(&report);
    match (output.status.success(), attestation) {
        (true, Some(attestation)) => (Ok(attestation), stderr),
        (true, None) => {
            let why = "the sandbox ran but wrote no report".to_owned();
            (Err(why.clone()), why)
        }
        (false, _) => {
            let why = if stderr.is_empty() {
                format!("the sandbox exited with {}", output.status)
            } else {
                stderr
            };
            (Err(why.clone()), why)
        }
    }
}
