//! The exec engine's Windows backend: one command in a job object, its
//! pipes drained by reader threads (a full pipe never blocks the command,
//! a slow caller never blocks the readers), its exit watched by a thread
//! that also enforces the command timeout (→ 124, the whole tree ended with
//! `TerminateJobObject`). Output goes through the same pipeline as on Linux
//! ([`crate::exec::glue::Sink`]: clean-up, fold, spill), after the code-page
//! decoding Windows needs ([`super::codepage`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use windows_sys::Win32::Foundation::{WAIT_OBJECT_0, WAIT_TIMEOUT};
use windows_sys::Win32::System::Threading::{GetExitCodeProcess, WaitForSingleObject};

use super::codepage::{StreamDecoder, UTF8_CODE_PAGE, child_code_page};
use super::conpty::{self, PseudoConsole, QueryWatch};
use super::job::JobGuard;
use super::process::{self, StartError, StartSpec};
use crate::exec::glue::{RenderOptions, Rendered, Sink, SinkConfig, open_spill_store};

/// After the command exits, how long its pipes may stay open before what is
/// left of its tree is ended (as `EXIT_SETTLE` on Linux).
const EXIT_SETTLE: Duration = Duration::from_millis(50);
/// How long output is still read once the tree was ended.
const DRAIN: Duration = Duration::from_secs(2);
/// Bytes read per `ReadFile`.
const CHUNK: usize = 64 * 1024;
/// Bytes of each stream held in memory.
const CAP_BYTES: usize = 1024 * 1024;
/// The spill store's cap.
const SPILL_CAP_BYTES: u64 = 64 * 1024 * 1024;
/// How often the waiter wakes to look at a kill request.
const WAIT_TICK_MS: u32 = 20;

/// What to run.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub(crate) argv: Vec<OsString>,
    pub(crate) cwd: PathBuf,
    pub(crate) env: BTreeMap<OsString, OsString>,
    /// `None` = never.
    pub(crate) timeout: Option<Duration>,
    /// stdout and stderr in one stream, in arrival order (sessions).
    pub(crate) merged: bool,
    /// Give the command a stdin pipe (sessions).
    pub(crate) stdin_pipe: bool,
    /// The arguments go on the command line as they are (a `cmd.exe /c`
    /// line, which cmd parses itself), not quoted for the C runtime.
    pub(crate) verbatim_args: bool,
    /// A pseudo console (`tty: true`; the caller checked
    /// [`super::conpty::unavailable`]): one stream, a stdin.
    pub(crate) tty: bool,
    /// `$AGENT_REACH_HOME`, where the spill store lives.
    pub(crate) home: PathBuf,
    /// Names spill files.
    pub(crate) label: String,
    /// Secret values (a registry tool's): replaced by `[REDACTED:NAME]`
    /// in the output.
    pub(crate) secrets: Vec<(String, Vec<u8>)>,
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exit {
    /// Its exit code (from `GetExitCodeProcess`).
    pub(crate) code: u32,
    /// Ended at the command timeout.
    pub(crate) timed_out: bool,
    /// Ended by a kill request.
    pub(crate) killed: bool,
}

impl Exit {
    /// The code `run` exits with: 124 at the timeout, else the command's.
    pub(crate) fn exit_code(&self) -> i32 {
        if self.timed_out {
            crate::exit_code::TIMEOUT
        } else {
            self.code as i32
        }
    }
}

#[derive(Debug)]
struct State {
    stdout: Sink,
    /// `None` with merged streams.
    stderr: Option<Sink>,
    decoders: [StreamDecoder; 2],
    exit: Option<Exit>,
    exited_at: Option<Instant>,
    open_streams: usize,
    kill_requested: bool,
    /// The readers are done (closed, or given up at the drain bound).
    done: bool,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    job: JobGuard,
    pid: u32,
    started: Instant,
    stdin: Mutex<Stdin>,
    /// The command's pseudo console (`tty`), closed by the waiter once the
    /// tree is done: it holds the output open until then.
    console: Mutex<Option<PseudoConsole>>,
    tty: bool,
}

/// The command's stdin, and (for a tty) the last byte written to it.
#[derive(Debug)]
struct Stdin {
    pipe: Option<std::io::PipeWriter>,
    last: u8,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }
}

/// A running (or finished) command; clones share it. Dropping the last
/// clone ends the tree, whatever still runs of it.
#[derive(Debug, Clone)]
pub(crate) struct Execution {
    owner: Arc<Owner>,
}

/// The handle's side of the shared state: the reader and waiter threads
/// hold [`Inner`] too, so the tree is ended when the last handle goes, not
/// when the last thread does.
#[derive(Debug)]
struct Owner {
    inner: Arc<Inner>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.inner.job.terminate();
    }
}

/// A finished command, rendered.
#[derive(Debug, Clone)]
pub(crate) struct Completed {
    pub(crate) exit: Exit,
    pub(crate) stdout: Rendered,
    pub(crate) stderr: Rendered,
    pub(crate) duration: Duration,
    pub(crate) spill_paths: [Option<PathBuf>; 2],
    /// What the decoding did, when it had to: a line for the caller.
    pub(crate) decoding_note: Option<String>,
}

impl Execution {
    /// Starts `spec` in a new job.
    pub(crate) fn spawn(spec: &Spec) -> Result<Self, StartError> {
        let job = JobGuard::new().map_err(|source| StartError::Setup {
            what: "the job object",
            program: spec.argv.first().cloned().unwrap_or_default(),
            source,
        })?;
        let started = process::start(
            &StartSpec {
                argv: &spec.argv,
                cwd: &spec.cwd,
                env: &spec.env,
                stdin_pipe: spec.stdin_pipe,
                merged: spec.merged,
                verbatim_args: spec.verbatim_args,
                tty: spec.tty,
            },
            &job,
        )?;
        let store = open_spill_store(&spec.home, SPILL_CAP_BYTES);
        let sink = |stream: &str| {
            Sink::new(SinkConfig {
                cap_bytes: CAP_BYTES,
                secrets: spec.secrets.clone(),
                keep_color: false,
                keep_blanks: false,
                tty: spec.tty,
                label: format!("{}-{stream}", spec.label),
                spill: store.clone(),
                skim_after: SPILL_CAP_BYTES / 4,
            })
        };
        // A pseudo console writes UTF-8 whatever the command's code page.
        let code_page = if spec.tty {
            UTF8_CODE_PAGE
        } else {
            child_code_page()
        };
        let streams = if started.stderr.is_some() { 2 } else { 1 };
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                stdout: sink("stdout"),
                stderr: started.stderr.is_some().then(|| sink("stderr")),
                decoders: [StreamDecoder::new(code_page), StreamDecoder::new(code_page)],
                exit: None,
                exited_at: None,
                open_streams: streams,
                kill_requested: false,
                done: false,
            }),
            changed: Condvar::new(),
            job,
            pid: started.pid,
            started: Instant::now(),
            stdin: Mutex::new(Stdin {
                pipe: started.stdin,
                last: 0,
            }),
            console: Mutex::new(started.console),
            tty: spec.tty,
        });
        spawn_reader(Arc::clone(&inner), started.stdout, 0);
        if let Some(stderr) = started.stderr {
            spawn_reader(Arc::clone(&inner), stderr, 1);
        }
        let timeout_at = spec.timeout.map(|t| Instant::now() + t);
        let waiter = Arc::clone(&inner);
        let process = started.process;
        std::thread::spawn(move || watch(&waiter, &process, timeout_at));
        Ok(Self {
            owner: Arc::new(Owner { inner }),
        })
    }

    /// The command's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.owner.inner.pid
    }

    /// How it ended, once it did.
    pub(crate) fn exit(&self) -> Option<Exit> {
        self.owner.inner.lock().exit
    }

    /// Blocks until the command ended and its output was read, or `until`.
    /// Returns whether it finished.
    pub(crate) fn wait_until(&self, until: Option<Instant>) -> bool {
        let mut state = self.owner.inner.lock();
        loop {
            if state.done {
                return true;
            }
            match until {
                None => {
                    state = self
                        .owner
                        .inner
                        .changed
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        return false;
                    }
                    state = self
                        .owner
                        .inner
                        .changed
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
        }
    }

    /// What arrived since the last take (both streams, stdout first).
    pub(crate) fn take_output(&self, opts: &RenderOptions) -> Rendered {
        let mut state = self.owner.inner.lock();
        let mut rendered = state.stdout.take_window(opts);
        if let Some(stderr) = state.stderr.as_mut() {
            let more = stderr.take_window(opts);
            rendered.text.push_str(&more.text);
            rendered.truncated |= more.truncated;
            rendered.original_bytes += more.original_bytes;
            rendered.original_token_count += more.original_token_count;
            rendered.highlights.merge(more.highlights);
        }
        rendered
    }

    /// Writes to the command's stdin (sessions).
    pub(crate) fn write_stdin(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut stdin = crate::sync::lock(&self.owner.inner.stdin);
        let Stdin { pipe, last } = &mut *stdin;
        let keystrokes;
        let bytes = if self.owner.inner.tty {
            keystrokes = conpty::keystrokes(bytes, last);
            &keystrokes[..]
        } else {
            bytes
        };
        match pipe.as_mut() {
            Some(pipe) => pipe.write_all(bytes).and_then(|()| pipe.flush()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the command has no stdin pipe",
            )),
        }
    }

    /// Ends the whole tree now (`kill_session`).
    pub(crate) fn kill(&self) {
        self.owner.inner.lock().kill_requested = true;
        self.owner.inner.job.terminate();
        self.owner.inner.changed.notify_all();
    }

    /// Whether processes of its tree still run.
    pub(crate) fn tree_alive(&self) -> bool {
        self.owner
            .inner
            .job
            .active_processes()
            .is_some_and(|n| n > 0)
    }

    /// Waits for the end and renders everything.
    pub(crate) fn finish(&self, opts: &RenderOptions) -> Completed {
        self.wait_until(None);
        let state = self.owner.inner.lock();
        let exit = state.exit.unwrap_or(Exit {
            code: crate::exit_code::INTERNAL as u32,
            timed_out: false,
            killed: false,
        });
        let stdout = state.stdout.whole(opts);
        let stderr = state
            .stderr
            .as_ref()
            .map(|s| s.whole(opts))
            .unwrap_or_default();
        let spill_paths = [
            state.stdout.spill_path().filter(|_| stdout.truncated),
            state
                .stderr
                .as_ref()
                .and_then(Sink::spill_path)
                .filter(|_| stderr.truncated),
        ];
        let decoding_note = decoding_note(&state.decoders);
        Completed {
            exit,
            stdout,
            stderr,
            duration: state.exited_at.unwrap_or_else(Instant::now) - self.owner.inner.started,
            spill_paths,
            decoding_note,
        }
    }
}

fn decoding_note(decoders: &[StreamDecoder; 2]) -> Option<String> {
    let lossy = decoders.iter().any(StreamDecoder::lossy);
    let code_page = decoders.iter().find_map(StreamDecoder::decoded_from)?;
    Some(if lossy {
        format!(
            "output was not UTF-8 and not all valid in code page {code_page}: \
             the bytes neither could decode are shown as U+FFFD"
        )
    } else {
        format!("output was not UTF-8: decoded from code page {code_page}")
    })
}

fn spawn_reader(inner: Arc<Inner>, mut pipe: std::io::PipeReader, index: usize) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; CHUNK];
        // A console's terminal queries get their answers (nobody else
        // would give them, and the asker waits).
        let mut queries = inner.tty.then(QueryWatch::default);
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Some(watch) = queries.as_mut() {
                        answer(&inner, &watch.answers(&buf[..n]));
                    }
                    let mut state = inner.lock();
                    let text = state.decoders[index].push(&buf[..n]);
                    push(&mut state, index, &text);
                    drop(state);
                    inner.changed.notify_all();
                }
            }
        }
        let mut state = inner.lock();
        let rest = state.decoders[index].finish();
        push(&mut state, index, &rest);
        state.open_streams -= 1;
        drop(state);
        inner.changed.notify_all();
    });
}

/// Writes `answers` to a console's input as they are (not as keystrokes).
fn answer(inner: &Inner, answers: &[u8]) {
    if answers.is_empty() {
        return;
    }
    if let Some(pipe) = crate::sync::lock(&inner.stdin).pipe.as_mut() {
        let _ = pipe.write_all(answers).and_then(|()| pipe.flush());
    }
}

fn push(state: &mut State, index: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    match (index, state.stderr.as_mut()) {
        (1, Some(stderr)) => stderr.push(bytes),
        _ => state.stdout.push(bytes),
    }
}

/// The waiter: the exit, the timeout, then the settle and drain bounds.
fn watch(inner: &Inner, process: &OwnedHandle, timeout_at: Option<Instant>) {
    let mut timed_out = false;
    loop {
        let wait_ms = timeout_at.map_or(WAIT_TICK_MS, |at| {
            let left = at.saturating_duration_since(Instant::now()).as_millis();
            left.min(u128::from(WAIT_TICK_MS)) as u32
        });
        // SAFETY: the process handle is open for the call.
        let waited = unsafe { WaitForSingleObject(process.as_raw_handle(), wait_ms) };
        if waited == WAIT_OBJECT_0 {
            break;
        }
        if waited != WAIT_TIMEOUT {
            inner.job.terminate();
            break;
        }
        if !timed_out && timeout_at.is_some_and(|at| Instant::now() >= at) {
            timed_out = true;
            inner.job.terminate();
        }
    }
    let mut code = 0u32;
    // SAFETY: the handle is open and `code` is a valid out-pointer.
    unsafe { GetExitCodeProcess(process.as_raw_handle(), &raw mut code) };
    {
        let mut state = inner.lock();
        let killed = state.kill_requested;
        state.exit = Some(Exit {
            code,
            timed_out,
            killed,
        });
        state.exited_at = Some(Instant::now());
    }
    inner.changed.notify_all();
    let console = crate::sync::lock(&inner.console).take();
    if let Some(console) = console {
        // The console keeps its output open while it lives: what the
        // command left running gets the settle time, then the tree is
        // ended and the console closed (its last frame goes to the reader,
        // then the end of its output).
        if !wait_tree(inner, Instant::now() + EXIT_SETTLE) {
            inner.job.terminate();
        }
        drop(console);
    }
    // Output still in the pipes is read; what the command left running
    // and keeps them open is ended after the settle time.
    if !wait_streams(inner, Instant::now() + EXIT_SETTLE) {
        inner.job.terminate();
        wait_streams(inner, Instant::now() + DRAIN);
    }
    inner.lock().done = true;
    inner.changed.notify_all();
}

/// Waits until no process of the tree runs or `until`; whether none does.
fn wait_tree(inner: &Inner, until: Instant) -> bool {
    loop {
        if inner.job.active_processes().is_none_or(|n| n == 0) {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until every stream is closed or `until`; whether they all closed.
fn wait_streams(inner: &Inner, until: Instant) -> bool {
    let mut state = inner.lock();
    while state.open_streams > 0 {
        let now = Instant::now();
        if now >= until {
            return false;
        }
        state = inner
            .changed
            .wait_timeout(state, until - now)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTS: RenderOptions = RenderOptions {
        max_output_tokens: 1000,
        keep_color: false,
    };

    fn spec(command: &str, tty: bool, timeout: Duration) -> Spec {
        Spec {
            argv: vec!["cmd.exe".into(), "/d".into(), "/c".into(), command.into()],
            cwd: std::env::temp_dir(),
            env: std::env::vars_os().collect(),
            timeout: Some(timeout),
            merged: true,
            stdin_pipe: true,
            verbatim_args: true,
            tty,
            home: std::env::temp_dir().join("agent-reach-engine-tests"),
            label: "engine-test".into(),
            secrets: Vec::new(),
        }
    }

    // The pseudo console's output is not asserted: under Wine (where these
    // run in CI) it carries none. Its start, job, exit and close are.

    #[test]
    fn a_tty_command_exits_with_its_code_and_its_console_closes() {
        let execution = Execution::spawn(&spec("exit 7", true, Duration::from_secs(60))).unwrap();
        let done = execution.finish(&OPTS);
        assert_eq!(done.exit.code, 7);
        assert!(!done.exit.timed_out);
        assert!(!execution.tree_alive());
    }

    #[test]
    fn a_tty_command_past_its_timeout_is_124_and_its_tree_is_ended() {
        let line = "start /b ping -n 300 127.0.0.1 >NUL & ping -n 300 127.0.0.1 >NUL";
        let started = Instant::now();
        let execution = Execution::spawn(&spec(line, true, Duration::from_secs(2))).unwrap();
        let done = execution.finish(&OPTS);
        assert_eq!(done.exit.exit_code(), crate::exit_code::TIMEOUT);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        assert!(!execution.tree_alive());
    }

    #[test]
    fn a_command_on_pipes_shows_its_output_and_code() {
        let execution =
            Execution::spawn(&spec("echo piped& exit 3", false, Duration::from_secs(60))).unwrap();
        let done = execution.finish(&OPTS);
        assert_eq!(done.exit.code, 3);
        assert_eq!(done.stdout.text, "piped\n");
    }
}
