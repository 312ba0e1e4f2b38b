//! The built-in [`Runner`]: one child per plan, with a cleared environment,
//! null stdin, its own process group and a parent-death signal; killed
//! (TERM, grace, KILL to the whole group) at its timeout; output read
//! concurrently, bounded in memory, redacted and folded to the token budget;
//! and whatever the command left behind in its group killed after a bounded
//! drain, so nothing outlives its command.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::fold::{fold_text, redact_bytes};
use super::kinds;
use super::runner::{RunFuture, RunPlan, Runner};
use crate::exit_code;
use crate::result::{NormalizedResult, OriginalBytes, ResultError, Status};

/// Bytes of each stream kept from the start, and from the end.
const KEEP_HEAD: usize = 1 << 20;
const KEEP_TAIL: usize = 1 << 20;
/// How long TERM has before KILL, and how long output may still drain.
const KILL_GRACE: Duration = Duration::from_secs(2);
const DRAIN: Duration = Duration::from_secs(2);

/// Runs plans as child processes.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessRunner;

impl Runner for ProcessRunner {
    fn run(&self, plan: RunPlan) -> RunFuture<'_> {
        Box::pin(run(plan))
    }
}

/// One stream, bounded: the first and the last megabyte, and a count.
#[derive(Default)]
struct Captured {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Captured {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = KEEP_HEAD.saturating_sub(self.head.len());
        let (to_head, rest) = bytes.split_at(room.min(bytes.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        let excess = self.tail.len().saturating_sub(KEEP_TAIL);
        self.tail.drain(..excess);
    }

    fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }
}

async fn read_all(mut pipe: impl AsyncRead + Unpin) -> Captured {
    let mut captured = Captured::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return captured,
            Ok(n) => captured.push(&buf[..n]),
        }
    }
}

/// Kills the command's whole process group when the run ends, however it
/// ends (finished, timed out, or its request abandoned mid-run).
struct GroupGuard(i32);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.0 > 0 {
            kill_group(self.0, libc::SIGKILL);
        }
    }
}

fn kill_group(pgid: i32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory involved.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

async fn run(plan: RunPlan) -> NormalizedResult {
    let started = Instant::now();
    let argv: Vec<_> = plan
        .wrapper
        .iter()
        .chain(plan.argv.iter())
        .cloned()
        .collect();
    let Some((program, args)) = argv.split_first() else {
        return failed(kinds::SPAWN_FAILED, "empty command".into(), None);
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(&plan.env)
        .current_dir(&plan.cwd)
        // Nothing may block on a terminal or on input that never comes.
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            let shown = program.to_string_lossy();
            return match err.kind() {
                std::io::ErrorKind::NotFound => failed(
                    kinds::NOT_FOUND,
                    format!("{shown}: command not found"),
                    Some(exit_code::NOT_FOUND),
                ),
                std::io::ErrorKind::PermissionDenied => failed(
                    kinds::NOT_EXECUTABLE,
                    format!("{shown}: permission denied"),
                    Some(exit_code::CANNOT_EXECUTE),
                ),
                _ => failed(
                    kinds::SPAWN_FAILED,
                    format!("cannot start {shown}: {err}"),
                    None,
                ),
            };
        }
    };
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    let group = GroupGuard(pgid);
    let stdout = child.stdout.take().map(|p| tokio::spawn(read_all(p)));
    let stderr = child.stderr.take().map(|p| tokio::spawn(read_all(p)));

    let mut timed_out = false;
    let status = match plan.timeout {
        Some(limit) => match tokio::time::timeout(limit, child.wait()).await {
            Ok(status) => status,
            Err(_) => {
                timed_out = true;
                kill_group(pgid, libc::SIGTERM);
                match tokio::time::timeout(KILL_GRACE, child.wait()).await {
                    Ok(status) => status,
                    Err(_) => {
                        kill_group(pgid, libc::SIGKILL);
                        child.wait().await
                    }
                }
            }
        },
        None => child.wait().await,
    };
    // The leader is gone; give its output a bounded time to drain, then kill
    // whatever else of the group still holds the pipes.
    let drained = tokio::time::timeout(DRAIN, async {
        let out = match stdout {
            Some(task) => task.await.unwrap_or_default(),
            None => Captured::default(),
        };
        let err = match stderr {
            Some(task) => task.await.unwrap_or_default(),
            None => Captured::default(),
        };
        (out, err)
    })
    .await;
    drop(group);
    let (out, err) = drained.unwrap_or_default();

    let (code, signal) = match &status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            (status.code(), status.signal())
        }
        Err(_) => (None, None),
    };
    let budget = plan.max_output_tokens.saturating_mul(4);
    let (out_budget, err_budget) = match (out.total, err.total) {
        (0, _) => (0, budget),
        (_, 0) => (budget, 0),
        _ => (budget - budget / 4, budget / 4),
    };
    let (stdout_text, out_folded) = render(&out, out_budget, &plan.secrets);
    let (stderr_text, err_folded) = render(&err, err_budget, &plan.secrets);
    let exit_code = if timed_out {
        Some(exit_code::TIMEOUT)
    } else {
        code.or(signal.map(exit_code::for_signal))
    };
    let (status, error) = if timed_out {
        let ms = plan.timeout.map_or(0, |t| t.as_millis());
        (
            Status::Timeout,
            Some(error(
                kinds::TIMEOUT,
                format!("killed after the {ms} ms timeout"),
            )),
        )
    } else if code == Some(0) {
        (Status::Success, None)
    } else {
        (Status::Failure, None)
    };
    NormalizedResult {
        id: None,
        tool: None,
        status,
        exit_code,
        signal,
        stdout: stdout_text,
        stderr: stderr_text,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        truncated: out_folded || err_folded,
        original_bytes: OriginalBytes {
            stdout: out.total,
            stderr: err.total,
        },
        full_output_path: None,
        sandbox: None,
        cached: false,
        error,
    }
}

fn render(captured: &Captured, budget: usize, secrets: &[(String, Vec<u8>)]) -> (String, bool) {
    let head = redact_bytes(secrets, &captured.head);
    let tail = redact_bytes(secrets, &captured.tail.iter().copied().collect::<Vec<_>>());
    fold_text(&head, captured.dropped(), &tail, budget)
}

fn error(kind: &str, message: String) -> ResultError {
    ResultError {
        kind: kind.to_owned(),
        message,
        retry_after_ms: None,
        survivors: Vec::new(),
    }
}

fn failed(kind: &str, message: String, code: Option<i32>) -> NormalizedResult {
    let status = if code.is_some() {
        Status::Failure
    } else {
        Status::Error
    };
    let mut result = NormalizedResult::refused(None, None, status, kind, message);
    result.exit_code = code;
    result
}
