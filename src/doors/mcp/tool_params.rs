//! The MCP tools' arguments as the contract names them, and the pure step
//! that turns them into validated requests: defaults, clamps, regexes.
//!
//! Kept free of processes so every default and clamp is unit-tested; the
//! server only ever sees a [`ExecRequest`] or a [`PollRequest`] that is sound.

use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;

use super::lenient;

pub(crate) use super::yields::{
    EXEC_YIELD_DEFAULT_MS, EXEC_YIELD_RANGE_MS, POLL_YIELD_DEFAULT_MS, POLL_YIELD_RANGE_MS,
    WRITE_YIELD_DEFAULT_MS, WRITE_YIELD_RANGE_MS,
};
/// How much output a reply carries when the caller does not say.
pub(crate) const MAX_OUTPUT_TOKENS_DEFAULT: usize = crate::plan::DEFAULT_MAX_OUTPUT_TOKENS;
/// The shell when neither the argument nor `$SHELL` names one.
pub(crate) const FALLBACK_SHELL: &str = "/bin/bash";

/// Arguments of `exec_command`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ExecCommandParams {
    /// The shell command line to run, e.g. `cargo test` or `npm run dev`.
    pub(crate) cmd: String,
    /// Working directory; relative paths are taken from the server root. Default: the server root.
    #[serde(default)]
    pub(crate) workdir: Option<String>,
    /// The shell that runs `cmd` (default `$SHELL`, else /bin/bash).
    #[serde(default)]
    pub(crate) shell: Option<String>,
    /// Run the shell as a login shell (`-lc` instead of `-c`).
    #[serde(default)]
    pub(crate) login: Option<bool>,
    /// Run on a pseudo-terminal: needed for prompts, REPLs, password questions and anything you will type into with write_stdin. Default false (pipes, stdin closed).
    #[serde(default)]
    pub(crate) tty: Option<bool>,
    /// How long to wait for the command before handing control back (default 10000, clamped 250..30000). The command keeps running as a session when this runs out.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub(crate) yield_time_ms: Option<u64>,
    /// Fold the output of this reply to about this many tokens (default 10000).
    #[serde(default, deserialize_with = "lenient::opt_usize")]
    #[schemars(with = "Option<u64>")]
    pub(crate) max_output_tokens: Option<usize>,
    /// Kill the command after this many milliseconds (exit 124). Default: never; a session lives until it exits or is killed.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub(crate) timeout_ms: Option<u64>,
    /// A regex: return as soon as new output matches it (e.g. `listening on|ready`).
    #[serde(default)]
    pub(crate) wait_for: Option<String>,
    /// Confine the command: `read-only`, `workspace-write` or `danger-full-access`.
    #[serde(default)]
    pub(crate) sandbox: Option<String>,
}

/// Arguments of `write_stdin`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct WriteStdinParams {
    /// The session to write to, from a reply's `session_id`.
    #[serde(deserialize_with = "lenient::u64")]
    #[schemars(with = "u64")]
    pub(crate) session_id: u64,
    /// Characters to type; "" (the default) only polls for new output. Escapes such as "\n", "\u0003" (Ctrl-C) and "\u0004" (Ctrl-D) are sent as written.
    #[serde(default)]
    pub(crate) chars: Option<String>,
    /// How long to wait for new output (250 after a write, clamped 250..30000; 5000 for an empty poll, clamped 5000..300000).
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub(crate) yield_time_ms: Option<u64>,
    /// Fold the output of this reply to about this many tokens (default 10000).
    #[serde(default, deserialize_with = "lenient::opt_usize")]
    #[schemars(with = "Option<u64>")]
    pub(crate) max_output_tokens: Option<usize>,
    /// A regex: return as soon as new output matches it.
    #[serde(default)]
    pub(crate) wait_for: Option<String>,
}

/// Arguments of `kill_session`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KillSessionParams {
    /// The session to end.
    #[serde(deserialize_with = "lenient::u64")]
    #[schemars(with = "u64")]
    pub(crate) session_id: u64,
}

/// Arguments of `apply_patch`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApplyPatchParams {
    /// The whole patch, from `*** Begin Patch` to `*** End Patch`.
    pub(crate) input: String,
    /// The directory the patch's relative paths start from (default: the server root).
    #[serde(default)]
    pub(crate) workdir: Option<String>,
}

/// `list_sessions` takes nothing.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NoParams {}

/// A bad argument, said in one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamError {
    #[error("cmd is empty: give the shell command line to run")]
    EmptyCommand,
    #[error("wait_for {pattern:?} is not a valid regex: {reason}")]
    BadRegex { pattern: String, reason: String },
    #[error("sandbox: {0}")]
    BadSandbox(#[from] crate::sandbox::UnknownName),
    #[error("max_output_tokens must be at least 1")]
    ZeroTokens,
}

/// A validated `exec_command`.
#[derive(Debug, Clone)]
pub(crate) struct ExecRequest {
    pub(crate) argv: Vec<String>,
    pub(crate) cmd: String,
    pub(crate) workdir: PathBuf,
    pub(crate) tty: bool,
    pub(crate) yield_time: Duration,
    pub(crate) max_output_tokens: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) wait_for: Option<Regex>,
    pub(crate) sandbox: Option<crate::sandbox::Policy>,
}

/// A validated `write_stdin`.
#[derive(Debug, Clone)]
pub(crate) struct PollRequest {
    pub(crate) session_id: u64,
    pub(crate) chars: String,
    pub(crate) yield_time: Duration,
    pub(crate) max_output_tokens: usize,
    pub(crate) wait_for: Option<Regex>,
}

/// Applies defaults and clamps to `exec_command`'s arguments.
/// `env_shell` is the server's `$SHELL`; `root` the server's `--root`.
pub(crate) fn exec_request(
    params: ExecCommandParams,
    env_shell: Option<&str>,
    root: &Path,
) -> Result<ExecRequest, ParamError> {
    if params.cmd.trim().is_empty() {
        return Err(ParamError::EmptyCommand);
    }
    let shell = params
        .shell
        .filter(|s| !s.trim().is_empty())
        .or_else(|| env_shell.filter(|s| !s.is_empty()).map(str::to_owned))
        .unwrap_or_else(|| FALLBACK_SHELL.to_owned());
    let flag = if params.login.unwrap_or(false) {
        "-lc"
    } else {
        "-c"
    };
    let sandbox = params
        .sandbox
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<crate::sandbox::Policy>())
        .transpose()?;
    Ok(ExecRequest {
        argv: vec![shell, flag.to_owned(), params.cmd.clone()],
        cmd: params.cmd,
        workdir: resolve_workdir(params.workdir.as_deref(), root),
        tty: params.tty.unwrap_or(false),
        yield_time: clamp_ms(
            params.yield_time_ms,
            EXEC_YIELD_DEFAULT_MS,
            EXEC_YIELD_RANGE_MS,
        ),
        max_output_tokens: tokens(params.max_output_tokens)?,
        timeout: params
            .timeout_ms
            .filter(|&ms| ms > 0)
            .map(Duration::from_millis),
        wait_for: regex(params.wait_for)?,
        sandbox,
    })
}

/// Applies defaults and clamps to `write_stdin`'s arguments: a write and an
/// empty poll have different yields, as the contract says.
pub(crate) fn poll_request(params: WriteStdinParams) -> Result<PollRequest, ParamError> {
    let chars = params.chars.unwrap_or_default();
    let yield_time = if chars.is_empty() {
        clamp_ms(
            params.yield_time_ms,
            POLL_YIELD_DEFAULT_MS,
            POLL_YIELD_RANGE_MS,
        )
    } else {
        clamp_ms(
            params.yield_time_ms,
            WRITE_YIELD_DEFAULT_MS,
            WRITE_YIELD_RANGE_MS,
        )
    };
    Ok(PollRequest {
        session_id: params.session_id,
        chars,
        yield_time,
        max_output_tokens: tokens(params.max_output_tokens)?,
        wait_for: regex(params.wait_for)?,
    })
}

/// `workdir` taken from `root` when relative; `root` when absent.
pub(crate) fn resolve_workdir(workdir: Option<&str>, root: &Path) -> PathBuf {
    match workdir.filter(|w| !w.is_empty()) {
        Some(w) => root.join(w),
        None => root.to_path_buf(),
    }
}

fn clamp_ms(given: Option<u64>, default: u64, (lo, hi): (u64, u64)) -> Duration {
    Duration::from_millis(given.unwrap_or(default).clamp(lo, hi))
}

fn tokens(given: Option<usize>) -> Result<usize, ParamError> {
    match given {
        Some(0) => Err(ParamError::ZeroTokens),
        Some(n) => Ok(n),
        None => Ok(MAX_OUTPUT_TOKENS_DEFAULT),
    }
}

fn regex(pattern: Option<String>) -> Result<Option<Regex>, ParamError> {
    match pattern.filter(|p| !p.is_empty()) {
        None => Ok(None),
        Some(pattern) => Regex::new(&pattern)
            .map(Some)
            .map_err(|e| ParamError::BadRegex {
                reason: e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
                pattern,
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec(cmd: &str) -> ExecCommandParams {
        ExecCommandParams {
            cmd: cmd.into(),
            ..Default::default()
        }
    }

    #[test]
    fn exec_defaults_follow_the_contract() {
        let req = exec_request(exec("ls"), None, Path::new("/r")).unwrap();
        assert_eq!(req.argv, ["/bin/bash", "-c", "ls"]);
        assert_eq!(req.workdir, Path::new("/r"));
        assert!(!req.tty);
        assert_eq!(req.yield_time, Duration::from_millis(10_000));
        assert_eq!(req.max_output_tokens, 10_000);
        assert!(req.timeout.is_none());
        assert!(req.wait_for.is_none());
    }

    #[test]
    fn exec_uses_env_shell_then_argument_and_login_flag() {
        let req = exec_request(exec("ls"), Some("/bin/zsh"), Path::new("/r")).unwrap();
        assert_eq!(req.argv[0], "/bin/zsh");
        let mut p = exec("ls");
        p.shell = Some("/bin/sh".into());
        p.login = Some(true);
        let req = exec_request(p, Some("/bin/zsh"), Path::new("/r")).unwrap();
        assert_eq!(req.argv, ["/bin/sh", "-lc", "ls"]);
    }

    #[test]
    fn exec_yield_is_clamped_and_timeout_zero_is_none() {
        let mut p = exec("x");
        p.yield_time_ms = Some(1);
        p.timeout_ms = Some(0);
        let req = exec_request(p, None, Path::new("/")).unwrap();
        assert_eq!(req.yield_time, Duration::from_millis(250));
        assert!(req.timeout.is_none());
        let mut p = exec("x");
        p.yield_time_ms = Some(999_999);
        p.timeout_ms = Some(5);
        let req = exec_request(p, None, Path::new("/")).unwrap();
        assert_eq!(req.yield_time, Duration::from_millis(30_000));
        assert_eq!(req.timeout, Some(Duration::from_millis(5)));
    }

    #[test]
    fn relative_workdir_is_under_root() {
        let mut p = exec("x");
        p.workdir = Some("sub/dir".into());
        let req = exec_request(p, None, Path::new("/r")).unwrap();
        assert_eq!(req.workdir, Path::new("/r/sub/dir"));
        assert_eq!(
            resolve_workdir(Some("/abs"), Path::new("/r")),
            Path::new("/abs")
        );
    }

    #[test]
    fn bad_inputs_are_one_line_errors() {
        assert_eq!(
            exec_request(exec("  "), None, Path::new("/")).unwrap_err(),
            ParamError::EmptyCommand
        );
        let mut p = exec("x");
        p.wait_for = Some("(".into());
        let err = exec_request(p, None, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("wait_for \"(\" is not a valid regex"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        let mut p = exec("x");
        p.sandbox = Some("strict".into());
        assert!(matches!(
            exec_request(p, None, Path::new("/")),
            Err(ParamError::BadSandbox(_))
        ));
        let mut p = exec("x");
        p.max_output_tokens = Some(0);
        assert_eq!(
            exec_request(p, None, Path::new("/")).unwrap_err(),
            ParamError::ZeroTokens
        );
    }

    #[test]
    fn write_and_poll_have_their_own_yields() {
        let poll = poll_request(WriteStdinParams {
            session_id: 1,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(poll.yield_time, Duration::from_millis(5_000));
        let poll = poll_request(WriteStdinParams {
            session_id: 1,
            yield_time_ms: Some(10),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(poll.yield_time, Duration::from_millis(5_000));
        let poll = poll_request(WriteStdinParams {
            session_id: 1,
            yield_time_ms: Some(1_000_000),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(poll.yield_time, Duration::from_millis(300_000));
        let write = poll_request(WriteStdinParams {
            session_id: 1,
            chars: Some("y\n".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(write.yield_time, Duration::from_millis(250));
        let write = poll_request(WriteStdinParams {
            session_id: 1,
            chars: Some("y\n".into()),
            yield_time_ms: Some(100_000),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(write.yield_time, Duration::from_millis(30_000));
    }

    #[test]
    fn unknown_arguments_are_refused() {
        let err = serde_json::from_value::<ExecCommandParams>(
            serde_json::json!({"cmd": "ls", "cwd": "/"}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `cwd`"), "{err}");
    }
}
