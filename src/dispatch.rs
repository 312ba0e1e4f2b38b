//! argv[0] dispatch: one table decides which personality a start gets.
//!
//! agent-reach is one executable reached under several names (links in the
//! session PATH directory, or installed aliases). The name it was started
//! under, with its directory and any `.exe` stripped, picks the personality;
//! `--agent-reach-run-as=NAME` as the first argument does the same where a
//! link is impossible (Windows `.cmd` shims, a renamed copy). This is also the
//! one place that reads argv and the environment (see [`ProcessContext`]).

use std::ffi::{OsStr, OsString};
use std::path::Path;

use crate::context::{DEPTH_VAR, ProcessContext};
use crate::exit_code;
pub(crate) use crate::personality::{PERSONALITY_NAMES, Personality, RUN_AS_PREFIX, SERVICE_NAMES};

/// How many agent-reach personalities may be nested in one process tree
/// before a start is refused as a re-exec loop. Real use nests a handful
/// (serve, a shell, a sandbox, a nested sandbox, apply_patch).
pub(crate) const MAX_DEPTH: u32 = 32;

/// The personality for the name the binary was started under. Anything not in
/// the table, including a name that is not valid UTF-8, is the CLI.
pub(crate) fn personality_for_argv0(argv0: &OsStr) -> Personality {
    let Some(file_name) = Path::new(argv0).file_name().and_then(OsStr::to_str) else {
        return Personality::Cli;
    };
    personality_for_name(strip_exe_suffix(file_name)).unwrap_or(Personality::Cli)
}

/// The personality a table name stands for, if any.
pub(crate) fn personality_for_name(name: &str) -> Option<Personality> {
    PERSONALITY_NAMES
        .iter()
        .chain(SERVICE_NAMES)
        .find(|(known, _)| *known == name)
        .map(|(_, personality)| *personality)
}

fn strip_exe_suffix(name: &str) -> &str {
    let len = name.len();
    if len > 4 && name.is_char_boundary(len - 4) && name[len - 4..].eq_ignore_ascii_case(".exe") {
        &name[..len - 4]
    } else {
        name
    }
}

/// A start that names a personality that does not exist.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "unknown personality {name:?} in {RUN_AS_PREFIX}{name}; known: apply_patch, applypatch, agent-reach-sandbox, agent-reach-exec, swerex-remote, agent-reach"
)]
pub(crate) struct UnknownPersonality {
    /// The name given after `--agent-reach-run-as=`.
    pub(crate) name: String,
}

/// Splits a full argv into the personality and the arguments it gets.
pub(crate) fn choose(
    mut argv: Vec<OsString>,
) -> Result<(Personality, Vec<OsString>), UnknownPersonality> {
    let argv0 = if argv.is_empty() {
        OsString::new()
    } else {
        argv.remove(0)
    };
    let run_as = argv
        .first()
        .and_then(|first| first.to_str())
        .and_then(|first| first.strip_prefix(RUN_AS_PREFIX))
        .map(str::to_owned);
    match run_as {
        Some(name) => {
            argv.remove(0);
            let personality = match strip_exe_suffix(&name) {
                "agent-reach" => Some(Personality::Cli),
                other => personality_for_name(other),
            };
            personality
                .map(|p| (p, argv))
                .ok_or(UnknownPersonality { name })
        }
        None => Ok((personality_for_argv0(&argv0), argv)),
    }
}

/// The process entry point: choose, capture the context, run, exit. Rust's
/// own start-up has ignored SIGPIPE (a write to a closed pipe is an `EPIPE`
/// we handle) and opened any closed standard descriptor on `/dev/null`.
pub fn process_main() -> i32 {
    // A panic unwinds (every guard's drop runs: commands killed,
    // directories removed); it is agent-reach failing, 125.
    let code = std::panic::catch_unwind(main).unwrap_or(exit_code::INTERNAL);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    code
}

/// Dispatch: picks the personality and runs it to its exit code.
pub(crate) fn main() -> i32 {
    let (personality, args) = match choose(std::env::args_os().collect()) {
        Ok(chosen) => chosen,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return exit(exit_code::INTERNAL);
        }
    };
    let mut ctx = ProcessContext::capture(args);
    if ctx.depth >= MAX_DEPTH {
        eprintln!(
            "agent-reach: refusing to start: {} nested agent-reach processes (limit {MAX_DEPTH}); \
             something is re-executing agent-reach in a loop",
            ctx.depth
        );
        return exit(exit_code::INTERNAL);
    }
    let depth = (ctx.depth + 1).to_string();
    // SAFETY: dispatch runs before any thread is started, so nothing can read
    // the environment concurrently. Children that inherit the environment
    // (the sandbox's exec, `shell`) carry the count on.
    unsafe { std::env::set_var(DEPTH_VAR, &depth) };
    ctx.env.insert(DEPTH_VAR.into(), depth.into());
    exit(run_personality(personality, ctx))
}

/// Runs one personality to its exit code.
#[cfg(unix)]
pub(crate) fn run_personality(personality: Personality, ctx: ProcessContext) -> i32 {
    match personality {
        Personality::ApplyPatch => crate::apply_patch::command::main(&ctx),
        Personality::Sandbox => crate::sandbox::command::main(&ctx),
        Personality::Exec => crate::cli::run::exec_personality(ctx),
        Personality::SwerexRemote => crate::serve::swerex_remote::main(ctx),
        Personality::Cli => crate::cli::main(ctx),
    }
}

/// Runs one personality to its exit code: Windows has its own backend.
#[cfg(windows)]
pub(crate) fn run_personality(personality: Personality, ctx: ProcessContext) -> i32 {
    crate::platform_windows::run_personality(personality, ctx)
}

fn exit(code: i32) -> i32 {
    code.clamp(0, 255)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_select_their_personality() {
        for (name, personality) in PERSONALITY_NAMES.iter().chain(SERVICE_NAMES) {
            assert_eq!(personality_for_argv0(OsStr::new(name)), *personality);
            let with_dir = format!("/some/dir/{name}");
            assert_eq!(personality_for_argv0(OsStr::new(&with_dir)), *personality);
            let with_exe = format!("/bin/{name}.EXE");
            assert_eq!(personality_for_argv0(OsStr::new(&with_exe)), *personality);
        }
    }

    #[test]
    fn unknown_and_empty_names_are_the_cli() {
        assert_eq!(
            personality_for_argv0(OsStr::new("agent-reach")),
            Personality::Cli
        );
        assert_eq!(personality_for_argv0(OsStr::new("")), Personality::Cli);
        assert_eq!(personality_for_argv0(OsStr::new(".exe")), Personality::Cli);
        assert_eq!(
            personality_for_argv0(OsStr::new("apply_patchx")),
            Personality::Cli
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_argv0_is_the_cli() {
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(
            personality_for_argv0(OsStr::from_bytes(b"/tmp/\xff\xfeapply_patch")),
            Personality::Cli
        );
    }

    #[test]
    fn run_as_flag_overrides_argv0_and_is_consumed() {
        let argv = vec![
            "agent-reach".into(),
            "--agent-reach-run-as=apply_patch".into(),
            "x".into(),
        ];
        assert_eq!(
            choose(argv),
            Ok((Personality::ApplyPatch, vec![OsString::from("x")]))
        );
        let argv = vec![
            "apply_patch".into(),
            "--agent-reach-run-as=agent-reach".into(),
        ];
        assert_eq!(choose(argv), Ok((Personality::Cli, vec![])));
    }

    #[test]
    fn run_as_unknown_name_is_an_error() {
        let argv = vec!["agent-reach".into(), "--agent-reach-run-as=nope".into()];
        assert_eq!(
            choose(argv),
            Err(UnknownPersonality {
                name: "nope".into()
            })
        );
    }

    #[test]
    fn run_as_only_counts_as_first_argument() {
        let argv = vec![
            "agent-reach".into(),
            "run".into(),
            "--agent-reach-run-as=apply_patch".into(),
        ];
        assert_eq!(choose(argv.clone()).map(|c| c.0), Ok(Personality::Cli));
    }
}
