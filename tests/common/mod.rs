//! The shared test harness: a temp dir per test, commands with a cleared
//! environment and a hard time limit, and assertions that chain and print
//! everything needed to debug a failure (command, cwd, code, stdout, stderr).

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub mod pids;
mod process;
#[cfg(target_os = "linux")]
pub mod race;
pub use process::{ServerProcess, gone_within, is_alive, pid_in};

/// Names the binary under test instead of cargo's build (CI points it at
/// the one `install.sh` installed: the shipped binary is the tested one).
pub const TEST_BIN_VAR: &str = "AGENT_REACH_TEST_BIN";

/// The binary under test: `$AGENT_REACH_TEST_BIN`, else cargo's build.
pub fn bin() -> PathBuf {
    match std::env::var_os(TEST_BIN_VAR) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_agent-reach")),
    }
}

/// Protocol → address of every `listening` line in a server's JSON log so
/// far (the addresses the ports `:0` were given).
pub fn listening_addrs(log: &Path) -> std::collections::BTreeMap<String, std::net::SocketAddr> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            (v["fields"]["message"] == "listening").then_some(())?;
            let protocol = v["fields"]["protocol"].as_str()?.to_owned();
            Some((protocol, v["fields"]["addr"].as_str()?.parse().ok()?))
        })
        .collect()
}

/// `agent-reach serve` with listeners, as the listener suites start it:
/// the work dir as `--root` and current directory, a JSON log at `log`,
/// `token` in `$AGENT_REACH_TOKEN`, a cleared environment, no stdio.
pub fn serve_listening(env: &TestEnv, log: &Path, listens: &[String], token: &str) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("serve")
        .arg("--root")
        .arg(env.work())
        .arg("--log-file")
        .arg(log);
    for listen in listens {
        cmd.arg("--listen").arg(listen);
    }
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", env.root.path().join("home"))
        .env("AGENT_REACH_HOME", env.ar_home())
        .env("LANG", "C.UTF-8")
        .env("AGENT_REACH_TOKEN", token)
        .current_dir(env.work())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// A per-test scenario: a work dir, a private agent-reach home, a bin dir for links.
pub struct TestEnv {
    pub root: tempfile::TempDir,
}

impl Default for TestEnv {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("ar-test")
            .tempdir()
            .unwrap();
        for dir in ["work", "home", "bin", "ar-home"] {
            fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        Self { root }
    }

    /// The directory commands run in.
    pub fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// `$AGENT_REACH_HOME` for this test.
    pub fn ar_home(&self) -> PathBuf {
        self.root.path().join("ar-home")
    }

    /// The session PATH directories' parent.
    pub fn path_root(&self) -> PathBuf {
        self.ar_home().join("tmp").join("path")
    }

    /// Makes a symlink named `name` to the binary and returns its path.
    pub fn link(&self, name: impl AsRef<OsStr>) -> PathBuf {
        let dest = self.root.path().join("bin").join(name.as_ref());
        let _ = fs::remove_file(&dest);
        std::os::unix::fs::symlink(bin(), &dest).unwrap();
        dest
    }

    /// A command running the binary under its own name.
    pub fn cmd(&self) -> TestCommand {
        TestCommand::new(bin().into_os_string(), self)
    }

    /// A command running `program` (a link or anything else).
    pub fn cmd_at(&self, program: impl AsRef<OsStr>) -> TestCommand {
        TestCommand::new(program.as_ref().into(), self)
    }

    /// Writes a file under the work dir, creating parents.
    pub fn write(&self, rel: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let path = self.work().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, contents).unwrap();
        path
    }

    /// Reads a file under the work dir as text.
    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.work().join(rel)).unwrap()
    }

    /// The session PATH directories that currently exist.
    pub fn path_dirs(&self) -> Vec<PathBuf> {
        match fs::read_dir(self.path_root()) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

/// A command with a cleared environment and a time limit.
pub struct TestCommand {
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: PathBuf,
    stdin: Option<Vec<u8>>,
    limit: Duration,
}

impl TestCommand {
    fn new(program: OsString, env: &TestEnv) -> Self {
        let base = vec![
            ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
            ("HOME".into(), env.root.path().join("home").into_os_string()),
            ("AGENT_REACH_HOME".into(), env.ar_home().into_os_string()),
            ("LANG".into(), "C.UTF-8".into()),
        ];
        Self {
            program,
            args: Vec::new(),
            env: base,
            cwd: env.work(),
            stdin: None,
            limit: Duration::from_secs(60),
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        let name = name.as_ref().to_owned();
        self.env.retain(|(n, _)| *n != name);
        self.env.push((name, value.as_ref().to_owned()));
        self
    }

    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = dir.as_ref().to_path_buf();
        self
    }

    pub fn stdin(mut self, input: impl AsRef<[u8]>) -> Self {
        self.stdin = Some(input.as_ref().to_vec());
        self
    }

    /// The hard limit after which the process group is killed and the test fails.
    pub fn limit(mut self, limit: Duration) -> Self {
        self.limit = limit;
        self
    }

    fn describe(&self) -> String {
        let mut words = vec![self.program.to_string_lossy().into_owned()];
        words.extend(self.args.iter().map(|a| a.to_string_lossy().into_owned()));
        format!("command: {:?}\ncwd: {}", words, self.cwd.display())
    }

    /// Runs to completion (or to the limit, which panics).
    #[track_caller]
    pub fn run(self) -> RunResult {
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(if self.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let started = Instant::now();
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn\n{}\nerror: {e}", self.describe()));
        if let Some(input) = &self.stdin {
            let mut pipe = child.stdin.take().unwrap();
            let input = input.clone();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&input);
            });
        }
        let mut out_pipe = child.stdout.take().unwrap();
        let mut err_pipe = child.stderr.take().unwrap();
        let out_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = out_pipe.read_to_end(&mut buf);
            buf
        });
        let err_reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = err_pipe.read_to_end(&mut buf);
            buf
        });
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > self.limit {
                let pgid = child.id() as i32;
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                let _ = child.wait();
                panic!("timed out after {:?}\n{}", self.limit, self.describe());
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = started.elapsed();
        let stdout = out_reader.join().unwrap();
        let stderr = err_reader.join().unwrap();
        RunResult {
            description: self.describe(),
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr,
            elapsed,
        }
    }
}

/// What a finished command did; assertions chain and print all of it on failure.
pub struct RunResult {
    description: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub elapsed: Duration,
}

impl RunResult {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_str(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }

    #[track_caller]
    fn fail(&self, what: &str) -> ! {
        panic!(
            "{what}\n{}\nexit code: {:?} signal: {:?} elapsed: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}\n",
            self.description,
            self.code,
            self.signal,
            self.elapsed,
            self.stdout_str(),
            self.stderr_str()
        )
    }

    #[track_caller]
    pub fn success(&self) -> &Self {
        if self.code != Some(0) {
            self.fail("expected success");
        }
        self
    }

    #[track_caller]
    pub fn code_is(&self, code: i32) -> &Self {
        if self.code != Some(code) {
            self.fail(&format!("expected exit code {code}"));
        }
        self
    }

    #[track_caller]
    pub fn stdout_is(&self, expected: &str) -> &Self {
        if self.stdout_str() != expected {
            self.fail(&format!("expected stdout {expected:?}"));
        }
        self
    }

    #[track_caller]
    pub fn stdout_contains(&self, needle: &str) -> &Self {
        if !self.stdout_str().contains(needle) {
            self.fail(&format!("expected stdout to contain {needle:?}"));
        }
        self
    }

    #[track_caller]
    pub fn stderr_contains(&self, needle: &str) -> &Self {
        if !self.stderr_str().contains(needle) {
            self.fail(&format!("expected stderr to contain {needle:?}"));
        }
        self
    }

    #[track_caller]
    pub fn no_stderr(&self) -> &Self {
        if !self.stderr.is_empty() {
            self.fail("expected no stderr");
        }
        self
    }

    #[track_caller]
    pub fn elapsed_under(&self, limit: Duration) -> &Self {
        if self.elapsed > limit {
            self.fail(&format!("expected to finish within {limit:?}"));
        }
        self
    }

    /// Parses stdout as one JSON value.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| self.fail(&format!("stdout is not JSON: {e}")))
    }
}

/// The variable naming features this machine has (`landlock,cgroup,userns,pty`):
/// a test that would skip for lack of one of them fails instead, so CI cannot
/// report `ok` for a suite that did not run.
pub const REQUIRE_VAR: &str = "AGENT_REACH_REQUIRE";

/// Records a skip: `SKIPPED <test>: <why>` on the real stderr (the test
/// harness captures only the print macros, and throws away what a passing
/// test printed), and a line in `$CARGO_TARGET_TMPDIR/skipped.log` for the
/// run's count. A skip for lack of a feature in `AGENT_REACH_REQUIRE` panics.
pub fn skipped(feature: Option<&str>, why: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<unnamed test>");
    if let Some(feature) = feature {
        let required = std::env::var(REQUIRE_VAR).unwrap_or_default();
        if required.split(',').any(|f| f.trim() == feature) {
            panic!(
                "{test} needs {feature}, which {REQUIRE_VAR}={required} says this machine has: {why}"
            );
        }
    }
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped.log");
    if let Ok(mut file) = fs::OpenOptions::new().create(true).append(true).open(log) {
        let _ = file.write_all(line.as_bytes());
    }
}

/// Skips a test loudly unless `cond` holds (see [`skipped`]); with
/// `feature = "..."` the skip fails the test where CI requires the feature.
#[macro_export]
macro_rules! skip_unless {
    (feature = $feature:literal, $cond:expr, $why:expr) => {
        if !$cond {
            $crate::common::skipped(Some($feature), &$why.to_string());
            return;
        }
    };
    ($cond:expr, $why:expr) => {
        if !$cond {
            $crate::common::skipped(None, &$why.to_string());
            return;
        }
    };
}

/// The Landlock ABI this kernel grants (0: none), asked of the kernel itself.
pub fn landlock_abi() -> i64 {
    // SAFETY: the version query takes no pointer the kernel writes to.
    unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    }
    .max(0)
}

/// An MCP client of the server `command` starts (its stderr dropped), and
/// the guard that makes the child known to the engine's reaper. Panics
/// naming `what` when it does not answer `initialize` within a minute.
pub async fn mcp_stdio_client(
    command: tokio::process::Command,
    what: &str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    agent_reach::exec::KnownChildGuard,
) {
    use rmcp::ServiceExt;
    let (transport, _) = rmcp::transport::TokioChildProcess::builder(command)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = transport.id().unwrap();
    let known = agent_reach::exec::KnownChildGuard::register(pid as i32);
    let limit = Duration::from_secs(60);
    match tokio::time::timeout(limit, ().serve(transport)).await {
        Ok(Ok(client)) => (client, known),
        Ok(Err(e)) => panic!("{what} does not speak MCP: {e}"),
        Err(_) => panic!("{what} did not answer initialize"),
    }
}

/// Standard base64 (what the proto3 JSON mapping writes bytes in),
/// decoded; `=` padding ignored, anything else outside the alphabet panics.
pub fn base64_decode(text: &str) -> Vec<u8> {
    let table = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in text.bytes().filter(|c| *c != b'=') {
        let value = table
            .iter()
            .position(|t| *t == c)
            .unwrap_or_else(|| panic!("not base64: {text:?}"));
        bits = (bits << 6) | value as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
            bits &= (1 << n) - 1;
        }
    }
    out
}
