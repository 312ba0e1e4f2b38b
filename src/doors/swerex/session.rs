//! One SWE-ReX bash session on our engine: a persistent `bash -i` on a PTY
//! (an [`Execution`] started through the door's engine seam) driven by the
//! marker protocol of [`super::protocol`], with the original's semantics
//! for every action (`check`, `expect`, interactive programs, interrupts).
//!
//! Where it differs, on purpose: a command past its timeout raises the
//! same `CommandTimeoutError`, but its foreground job is interrupted (^C,
//! then SIGKILL to the PTY's foreground process group) until the shell is
//! back at its prompt, so the session stays usable; the output it printed
//! is kept for the `BashInterruptAction` clients send next. Closing kills
//! everything the session started, escapees included.

use std::time::{Duration, Instant};

use regex::Regex;
use serde::Serialize;

use super::engine;
use super::error::{PyClass, SwerexError};
use super::model::{BashAction, BashInterrupt, Check, CreateSession};
use super::protocol::{PS1_EXPECT_STRING, ShellProtocol, Status};
use super::pyrepr;
use crate::broker::Broker;
use crate::broker::scratch::ScratchGuard;
use crate::broker::scratch::nonce;
use crate::exec::{Execution, RenderOptions, WaitEnd};
use crate::gate::Caller;

/// The original gives the shell this long before its startup timeout runs.
const SHELL_START_GRACE: Duration = Duration::from_millis(300);
/// Rounds of ^C, then SIGKILL to the foreground job, before a shell past a
/// command timeout counts as lost.
const RECOVERY_ROUNDS: u32 = 5;
/// How long each recovery step waits for the prompt.
const RECOVERY_STEP: Duration = Duration::from_millis(200);
/// How long the original waits between failed interrupt attempts.
const INTERRUPT_PAUSE: Duration = Duration::from_millis(200);
/// How long resetting the terminal after an interactive program may take.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(2);
/// The ^C byte: the terminal sends SIGINT to its foreground job.
const CTRL_C: &[u8] = b"\x03";
/// The ^Z byte: the terminal stops its foreground job (SIGTSTP) and the
/// shell takes the terminal back.
const CTRL_Z: &[u8] = b"\x1a";

/// `BashObservation`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Observation {
    pub(crate) output: String,
    pub(crate) exit_code: Option<i32>,
    pub(crate) failure_reason: String,
    pub(crate) expect_string: String,
    pub(crate) session_type: &'static str,
}

impl Observation {
    fn new(output: String, exit_code: Option<i32>, expect_string: &str) -> Self {
        Self {
            output,
            exit_code,
            failure_reason: String::new(),
            expect_string: expect_string.to_owned(),
            session_type: super::model::BASH,
        }
    }
}

/// How a session's private directory is named in the temporary
/// directory, before the owning server's pid and a random part.
const SESSION_DIR_PREFIX: &str = "agent-reach-swerex-";

/// Removes the session directories of servers that are gone (killed
/// before they could). Called when the listener starts.
pub(crate) fn sweep_stale_dirs(broker: &Broker) {
    crate::broker::scratch::sweep_stale(&broker.scratch_root(), SESSION_DIR_PREFIX);
}

/// A live bash session.
#[derive(Debug)]
pub(crate) struct BashSession {
    exec: Execution,
    /// The sandbox report of the shell, kept while it lives.
    _report: Option<crate::plan::sandbox::ReportGuard>,
    /// Its seat in the broker's one session table.
    _seat: crate::broker::SessionTicket,
    protocol: ShellProtocol,
    /// Its private directory (rc file, command, status); removed with it.
    scratch: ScratchGuard,
    commands: u64,
    /// What a command cut at its timeout printed, for the interrupt that
    /// clients send next.
    after_timeout: Option<String>,
    /// The operator's `[limits] max_timeout_ms`: no command waits longer.
    max_wait: Duration,
}

impl BashSession {
    /// Starts bash, runs the rc file (bashrc, `startup_source`) and waits
    /// for the first prompt. On any failure nothing is left running.
    pub(crate) async fn start(
        broker: &Broker,
        caller: &Caller,
        request: &CreateSession,
    ) -> Result<(Self, String), SwerexError> {
        let bash = find_bash(broker)?;
        let scratch = ScratchGuard::new_in(&broker.scratch_root(), SESSION_DIR_PREFIX)
            .map_err(|e| SwerexError::Internal(format!("cannot make a session directory: {e}")))?;
        let protocol = ShellProtocol::new(scratch.path(), &bash, &nonce())
            .map_err(|e| SwerexError::Internal(format!("bad prompt pattern: {e}")))?;
        let rc = protocol.rc_path();
        scratch
            .write(&rc, protocol.rc_file(&request.startup_source).as_bytes())
            .map_err(|e| SwerexError::Internal(format!("cannot write {}: {e}", rc.display())))?;
        let argv = vec![
            bash.into_os_string(),
            "--noediting".into(),
            "--rcfile".into(),
            rc.into_os_string(),
            "-i".into(),
        ];
        let base = super::files::base_dir(broker.root());
        let live = engine::spawn_session(broker, caller, &base, argv)?;
        let session = BashSession {
            exec: live.exec,
            _report: live.report,
            _seat: live.ticket,
            protocol,
            scratch,
            commands: 0,
            after_timeout: None,
            max_wait: Duration::from_millis(broker.limits().max_timeout_ms),
        };
        let timeout = SHELL_START_GRACE + seconds(request.startup_timeout);
        let first = session.protocol.prompt_after(0);
        let end = session.wait(Some(Instant::now() + timeout), &first).await;
        let output = session.take_clean();
        match end {
            WaitEnd::Matched => Ok((session, output)),
            WaitEnd::Deadline => {
                session.exec.terminate().await;
                Err(SwerexError::raise(
                    PyClass::PexpectTimeout,
                    format!(
                        "Timeout exceeded: the shell did not reach its prompt within {}s. Output so far: {}",
                        pyrepr::float(timeout.as_secs_f64()),
                        pyrepr::string(&output)
                    ),
                ))
            }
            WaitEnd::Exited => {
                session.exec.terminate().await;
                Err(SwerexError::raise(
                    PyClass::PexpectEof,
                    format!(
                        "End Of File (EOF): the shell exited while starting. Output: {}",
                        pyrepr::string(&output)
                    ),
                ))
            }
        }
    }

    /// Whether the shell is gone (the session is then useless).
    pub(crate) fn is_dead(&self) -> bool {
        self.exec.exit_info().is_some()
    }

    /// A handle on the shell, for an interrupt while a command runs.
    pub(crate) fn execution(&self) -> Execution {
        self.exec.clone()
    }

    /// Kills the shell and everything it started.
    /// How long a command may take: what it asked (none: no limit),
    /// capped by the operator's `max_timeout_ms`.
    fn wait_for(&self, asked: Option<f64>) -> Duration {
        asked.map_or(self.max_wait, |t| seconds(t).min(self.max_wait))
    }

    pub(crate) async fn close(self) {
        self.exec.terminate().await;
    }

    /// A `BashAction`.
    pub(crate) async fn run(&mut self, action: &BashAction) -> Result<Observation, SwerexError> {
        self.after_timeout = None;
        if action.is_interactive_command || action.is_interactive_quit {
            return self.run_interactive(action).await;
        }
        let observation = self.run_normal(action).await?;
        if action.check == Check::Raise && observation.exit_code != Some(0) {
            let code = observation
                .exit_code
                .map_or_else(|| "None".to_owned(), |c| c.to_string());
            let mut message = format!(
                "Command {} failed with exit code {code}. Here is the output:\n{}",
                pyrepr::string(&action.command),
                pyrepr::string(&observation.output)
            );
            if !action.error_msg.is_empty() {
                message = format!("{}: {message}", action.error_msg);
            }
            return Err(SwerexError::raise(PyClass::NonZeroExitCode, message));
        }
        Ok(observation)
    }

    async fn run_normal(&mut self, action: &BashAction) -> Result<Observation, SwerexError> {
        self.commands += 1;
        let n = self.commands;
        let path = self.protocol.command_path();
        let mut text = action.command.clone();
        text.push('\n');
        self.scratch
            .write(&path, text.as_bytes())
            .map_err(|e| SwerexError::Internal(format!("cannot write {}: {e}", path.display())))?;
        self.type_line(&self.protocol.run_line(n))?;
        let deadline = Some(Instant::now() + self.wait_for(action.timeout));
        let prompt = self.protocol.prompt_after(n);
        match self.wait(deadline, &prompt).await {
            WaitEnd::Matched => {}
            WaitEnd::Deadline => return Err(self.timed_out(action).await),
            WaitEnd::Exited => return Err(self.shell_exited()),
        }
        let raw = self.exec.take_output(&RenderOptions::default()).text;
        let status = self.protocol.status_in(&raw, n);
        let output = self.protocol.clean(&raw);
        if let Some(Status::Syntax(code)) = status {
            // Nothing ran: what the window holds is `bash -n`'s message.
            let stderr = output;
            let message = format!(
                "Error (exit code {code}) while checking bash command \n{}\n---- Stderr ----\n{stderr}\n---- Stdout ----\n",
                pyrepr::string(&action.command)
            );
            let mut extra = serde_json::Map::new();
            extra.insert("bash_stdout".into(), "".into());
            extra.insert("bash_stderr".into(), stderr.into());
            return Err(SwerexError::Raise {
                class: PyClass::BashIncorrectSyntax,
                message,
                extra_info: extra,
            });
        }
        let exit_code = match (action.check, status) {
            (Check::Ignore, _) => None,
            (_, Some(Status::Ran(code))) => Some(code),
            (Check::Raise, _) => {
                return Err(SwerexError::raise(
                    PyClass::NoExitCode,
                    format!(
                        "failed to get the exit code of {} (it was interrupted)",
                        pyrepr::string(&action.command)
                    ),
                ));
            }
            _ => None,
        };
        Ok(Observation::new(output, exit_code, PS1_EXPECT_STRING))
    }

    /// A line for a program in the foreground (`is_interactive_command`),
    /// or the one that quits it (`is_interactive_quit`): no exit code, the
    /// wait ends at an `expect` string or the shell's prompt.
    async fn run_interactive(&mut self, action: &BashAction) -> Result<Observation, SwerexError> {
        let mut line = action.command.clone();
        line.push('\n');
        self.type_line(&line)?;
        let pattern = self.expect_pattern(&action.expect)?;
        let deadline = Some(Instant::now() + self.wait_for(action.timeout));
        match self.wait(deadline, &pattern).await {
            WaitEnd::Matched => {}
            WaitEnd::Deadline => return Err(self.timed_out(action).await),
            WaitEnd::Exited => return Err(self.shell_exited()),
        }
        let text = self.exec.take_output(&RenderOptions::default()).text;
        let (before, matched) = self.split_at_expect(&text, &action.expect);
        let output = if action.is_interactive_quit {
            self.restore().await;
            before
        } else {
            before
                .trim_start()
                .strip_prefix(action.command.as_str())
                .unwrap_or(before.trim_start())
                .trim()
                .to_owned()
        };
        Ok(Observation::new(output, Some(0), &matched))
    }

    /// A `BashInterruptAction`: ^C until an `expect` string or the prompt,
    /// then SIGKILL to the foreground job, as the original's ^Z and
    /// `kill -9 %1`. On a shell already brought back after a timeout it
    /// answers with what the cut command printed.
    pub(crate) async fn interrupt(
        &mut self,
        action: &BashInterrupt,
    ) -> Result<Observation, SwerexError> {
        if let Some(cut) = self.after_timeout.take() {
            // The shell is already back at its prompt: typing ^C would only
            // draw another prompt (and print there the job report the
            // original shows with the next command).
            return Ok(Observation::new(
                cut.trim().to_owned(),
                Some(0),
                PS1_EXPECT_STRING,
            ));
        }
        let mut output = String::new();
        let pattern = self.expect_pattern(&action.expect)?;
        let step = seconds(action.timeout);
        for _ in 0..action.n_retry {
            self.type_line_bytes(CTRL_C)?;
            match self.wait(Some(Instant::now() + step), &pattern).await {
                WaitEnd::Matched => {
                    let text = self.exec.take_output(&RenderOptions::default()).text;
                    let (before, matched) = self.split_at_expect(&text, &action.expect);
                    output.push_str(&before);
                    return Ok(Observation::new(
                        output.trim().to_owned(),
                        Some(0),
                        &matched,
                    ));
                }
                WaitEnd::Exited => return Err(self.shell_exited()),
                WaitEnd::Deadline => tokio::time::sleep(INTERRUPT_PAUSE).await,
            }
        }
        self.kill_foreground();
        match self.wait(Some(Instant::now() + step), &pattern).await {
            WaitEnd::Matched => {
                let text = self.exec.take_output(&RenderOptions::default()).text;
                let (before, matched) = self.split_at_expect(&text, &action.expect);
                output.push_str(&before);
                Ok(Observation::new(
                    output.trim().to_owned(),
                    Some(0),
                    &matched,
                ))
            }
            WaitEnd::Exited => Err(self.shell_exited()),
            WaitEnd::Deadline => Err(SwerexError::raise(
                PyClass::PexpectTimeout,
                "Failed to interrupt session",
            )),
        }
    }

    /// The command ran past its timeout: bring the shell back, keep what
    /// the command printed, and say so as the original does.
    async fn timed_out(&mut self, action: &BashAction) -> SwerexError {
        self.after_timeout = None;
        let recovered = self.recover().await;
        let rest = self.take_clean();
        self.after_timeout
            .get_or_insert_with(String::new)
            .push_str(&rest);
        let timeout = action
            .timeout
            .map_or_else(|| "None".to_owned(), pyrepr::float);
        let mut message = format!(
            "timeout after {timeout} seconds while running command {}",
            pyrepr::string(&action.command)
        );
        if !recovered {
            message.push_str(" (the shell did not come back to its prompt)");
        }
        SwerexError::raise(PyClass::CommandTimeout, message)
    }

    /// ^C, then SIGKILL to the foreground job, until the prompt shows.
    async fn recover(&mut self) -> bool {
        let any = self.protocol.any_prompt().clone();
        for round in 1..=RECOVERY_ROUNDS {
            if self.type_line_bytes(CTRL_C).is_err() {
                return false;
            }
            let step = RECOVERY_STEP * round;
            match self.wait(Some(Instant::now() + step), &any).await {
                WaitEnd::Matched => return true,
                WaitEnd::Exited => return false,
                WaitEnd::Deadline => {}
            }
            match self.stop_and_kill_job(step, &any).await {
                WaitEnd::Matched => return true,
                WaitEnd::Exited => return false,
                WaitEnd::Deadline => {}
            }
            self.kill_foreground();
            match self.wait(Some(Instant::now() + step), &any).await {
                WaitEnd::Matched => return true,
                WaitEnd::Exited => return false,
                WaitEnd::Deadline => {}
            }
        }
        false
    }

    /// The original's way past a job that ignores ^C (a pager, an editor):
    /// ^Z, and once the shell is back at its prompt the stopped job is
    /// killed. The shell, waiting for input, reports it (`[1]+  Killed
    /// ...`) before its next prompt, in the next command's output, as the
    /// original's `kill -9 %1` does.
    async fn stop_and_kill_job(&mut self, step: Duration, any: &Regex) -> WaitEnd {
        let Some(job) = self.foreground_job() else {
            return WaitEnd::Deadline;
        };
        if self.type_line_bytes(CTRL_Z).is_err() {
            return WaitEnd::Exited;
        }
        let end = self.wait(Some(Instant::now() + step), any).await;
        if matches!(end, WaitEnd::Matched) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(job),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        end
    }

    /// The PTY's foreground process group when it is a job of our shell
    /// (not the shell itself: a builtin loop, or the shell at its prompt).
    fn foreground_job(&self) -> Option<i32> {
        let shell = self.exec.pid() as i32;
        self.exec
            .pty_foreground_pgid()
            .filter(|&group| group > 1 && group != shell)
    }

    /// SIGKILL to the PTY's foreground process group, unless that is the
    /// shell itself (a builtin loop, or the shell at its prompt).
    fn kill_foreground(&self) {
        if let Some(group) = self.foreground_job() {
            // The group is a job of our shell (its pid is the shell's child's):
            // the shell has not reaped it while it is in the foreground.
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(group),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    /// Echo off and the prompt back after an interactive program quit.
    async fn restore(&mut self) {
        self.commands += 1;
        let n = self.commands;
        let line = format!("__ar_n={n}; {}", self.protocol.restore_line());
        if self.type_line(&line).is_ok() {
            let prompt = self.protocol.prompt_after(n);
            let _ = self
                .wait(Some(Instant::now() + RESTORE_TIMEOUT), &prompt)
                .await;
        }
        let _ = self.exec.take_output(&RenderOptions::default());
    }

    fn shell_exited(&self) -> SwerexError {
        SwerexError::raise(
            PyClass::PexpectEof,
            "End Of File (EOF): the session's shell exited",
        )
    }

    fn type_line(&self, line: &str) -> Result<(), SwerexError> {
        self.type_line_bytes(line.as_bytes())
    }

    fn type_line_bytes(&self, bytes: &[u8]) -> Result<(), SwerexError> {
        self.exec.write_stdin(bytes).map_err(|e| {
            if self.is_dead() {
                self.shell_exited()
            } else {
                SwerexError::raise(PyClass::SwerexException, e.to_string())
            }
        })
    }

    async fn wait(&self, deadline: Option<Instant>, pattern: &Regex) -> WaitEnd {
        let until = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3_153_600_000));
        self.exec.wait(until, Some(pattern)).await
    }

    /// The window so far, without prompts, folded to the output budget.
    fn take_clean(&self) -> String {
        let text = self.exec.take_output(&RenderOptions::default()).text;
        self.protocol.clean(&text)
    }

    /// `expect` strings or the prompt, as one pattern.
    fn expect_pattern(&self, expect: &[String]) -> Result<Regex, SwerexError> {
        let mut alternatives: Vec<String> = expect.iter().map(|e| regex::escape(e)).collect();
        alternatives.push(self.protocol.any_prompt().as_str().to_owned());
        Regex::new(&alternatives.join("|"))
            .map_err(|e| SwerexError::raise(PyClass::Value, format!("bad expect strings: {e}")))
    }

    /// pexpect's `before` and the string that matched: the earliest match
    /// in the output, the prompt reported as the original's `PS1`.
    fn split_at_expect(&self, text: &str, expect: &[String]) -> (String, String) {
        let mut best: Option<(usize, String)> = None;
        for e in expect.iter().filter(|e| !e.is_empty()) {
            if let Some(at) = text.find(e.as_str())
                && best.as_ref().is_none_or(|(b, _)| at < *b)
            {
                best = Some((at, e.clone()));
            }
        }
        if let Some(m) = self.protocol.any_prompt().find(text)
            && best.as_ref().is_none_or(|(b, _)| m.start() < *b)
        {
            best = Some((m.start(), PS1_EXPECT_STRING.to_owned()));
        }
        match best {
            Some((at, matched)) => (self.protocol.clean(&text[..at]), matched),
            None => (self.protocol.clean(text), String::new()),
        }
    }
}

/// A non-negative, finite number of seconds (pydantic floats) as a duration.
fn seconds(value: f64) -> Duration {
    if value.is_finite() && value > 0.0 {
        Duration::from_secs_f64(value.min(1e9))
    } else {
        Duration::ZERO
    }
}

/// The bash on the server's PATH, as an absolute path.
fn find_bash(broker: &Broker) -> Result<std::path::PathBuf, SwerexError> {
    let env = broker.server_env();
    crate::exec::resolve::resolve_program("bash".as_ref(), broker.root(), env).map_err(|_| {
        SwerexError::raise(
            PyClass::FileNotFound,
            "[Errno 2] No such file or directory: 'bash' (a SWE-ReX session is a bash shell)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_are_clamped_to_a_duration() {
        assert_eq!(seconds(0.5), Duration::from_millis(500));
        assert_eq!(seconds(-1.0), Duration::ZERO);
        assert_eq!(seconds(f64::NAN), Duration::ZERO);
    }

    #[test]
    fn nonces_are_hex_and_differ() {
        let a = nonce();
        assert_eq!(a.len(), 16);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, nonce());
    }
}
