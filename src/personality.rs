//! The names the binary answers to: one table, below everything that needs
//! it (the argv[0] dispatch, the session PATH directory's links).

/// What a start of the binary does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Personality {
    /// Apply a patch in the Codex format.
    ApplyPatch,
    /// Confine a command with Landlock and seccomp, then exec it.
    Sandbox,
    /// Run one command through the exec engine (`agent-reach run`).
    Exec,
    /// The SWE-ReX remote runtime server (`serve --listen swerex=...`).
    SwerexRemote,
    /// The normal command-line interface.
    Cli,
}

/// Every name that selects a personality other than the CLI. The session PATH
/// directory holds one link per entry.
pub(crate) const PERSONALITY_NAMES: &[(&str, Personality)] = &[
    ("apply_patch", Personality::ApplyPatch),
    ("applypatch", Personality::ApplyPatch),
    ("agent-reach-sandbox", Personality::Sandbox),
    ("agent-reach-exec", Personality::Exec),
];

/// Names of personalities that serve others and have no link in the
/// session PATH directory (installed as aliases: `install.sh --with-aliases`).
pub(crate) const SERVICE_NAMES: &[(&str, Personality)] =
    &[("swerex-remote", Personality::SwerexRemote)];

/// The hidden first argument that selects a personality by name.
pub(crate) const RUN_AS_PREFIX: &str = "--agent-reach-run-as=";
