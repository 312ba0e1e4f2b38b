//! The matrix: every guarantee of the network doors × every door, from
//! outside, through the real door, on loopback. A door is a row ([`Wire`]:
//! its wire helpers — run a command, start a long-lived session, write a
//! file, read a file — each answered as one normalized [`Outcome`]); a
//! guarantee is a column (`columns`: a function taking the row). A new
//! door adds its row to [`rows`] and gets every column; a door without a
//! capability says so in its row ([`Outcome::NotOffered`], after checking
//! the door offers no way to do it), and the cell prints `n/a` with the
//! reason instead of passing silently.
//!
//! Three `serve` processes, each listening with every protocol, hold the
//! columns: the main one (`workspace-write`, `[limits] pids`), one with a
//! small `--max-sessions`, one whose policy is `read-only`. The columns run
//! side by side; the test prints the whole matrix and fails listing every
//! failing cell. The admission columns (token, `Host`, `Origin`, body
//! limit, half-open connections) are the gate suite's (`gate.rs`).

mod codex_row;
mod columns;
mod doors;
mod envd;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use super::listeners::listening;
use crate::common::{ServerProcess, TestEnv, serve_listening};

/// The protocols every server of the matrix listens with.
const PROTOCOLS: [&str; 8] = [
    "mcp",
    "sandboxd-grpc",
    "sandboxd-rest",
    "python-runtime",
    "swerex",
    "envd",
    "daytona",
    "codex-exec",
];
/// `--max-sessions` of the sessions server: small, so N+1 is cheap.
pub(crate) const MAX_SESSIONS: usize = 3;
/// `[limits] pids` of the main server.
pub(crate) const PIDS_LIMIT: usize = 64;
/// A variable of the main server's own environment: no command may see it.
pub(crate) const SERVER_SECRET: &str = "server-secret-9f2c";
/// What the main server's secrets file (inside its root) holds.
pub(crate) const SECRETS_VALUE: &str = "registry-secret-51ab";
/// The bound on any single request of the matrix.
pub(crate) const REQUEST_LIMIT: Duration = Duration::from_secs(60);

/// Why a door refused, in the terms every door maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Bad parameters: 400/422, `INVALID_ARGUMENT`, `ValueError`, `invalid_params`.
    Invalid,
    /// The policy or the root said no: 403, `PERMISSION_DENIED`, `PermissionError`.
    Denied,
    /// No seat left: `RESOURCE_EXHAUSTED`, SWE-ReX's 511, an MCP tool error.
    Full,
    /// Any other refusal (not found, an error of the command's start).
    Other,
}

/// What a door answered, normalized.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// It did it: a command's output (stdout then stderr) and exit code; a
    /// file's content (read) or nothing (write), exit 0.
    Done { output: String, exit: i32 },
    /// It refused, as `said` on the wire.
    Refused { kind: Refusal, said: String },
    /// The door has no way to do this at all (checked where it can be).
    NotOffered(&'static str),
    /// An answer no door should give (not its protocol, a lost connection).
    Unexpected(String),
}

/// A command as a caller asks for it: a shell line, its working directory
/// (relative to the root), request variables and a timeout.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cmd {
    pub(crate) line: String,
    pub(crate) cwd: Option<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) timeout_s: u64,
}

impl Cmd {
    pub(crate) fn line(line: impl Into<String>) -> Self {
        Self {
            line: line.into(),
            timeout_s: 30,
            ..Self::default()
        }
    }

    pub(crate) fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    pub(crate) fn env(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.push((name.to_owned(), value.into()));
        self
    }

    pub(crate) fn timeout(mut self, seconds: u64) -> Self {
        self.timeout_s = seconds;
        self
    }
}

/// A long-lived process a door holds for its caller; `close` ends it the
/// door's way (kill_session, the stream dropped, close_session).
pub(crate) trait Session: Send {
    fn close(self: Box<Self>, at: &Server);
}

/// A door's row: its wire helpers, blocking, one normalized outcome each.
pub(crate) trait Wire: Sync {
    fn protocol(&self) -> &'static str;
    fn run(&self, at: &Server, cmd: &Cmd) -> Outcome;
    /// Starts `line` as a long-lived session (a door whose sessions run no
    /// line of the caller's, SWE-ReX's bash, ignores it).
    fn open_session(&self, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome>;
    fn write(&self, at: &Server, path: &str, content: &str) -> Outcome;
    fn read(&self, at: &Server, path: &str) -> Outcome;
}

/// Every door, one row each.
fn rows() -> Vec<Box<dyn Wire>> {
    vec![
        Box::new(doors::Mcp),
        Box::new(doors::Grpc),
        Box::new(doors::Rest),
        Box::new(doors::PythonRuntime),
        Box::new(doors::Swerex),
        Box::new(envd::Envd),
        Box::new(doors::Daytona),
        Box::new(codex_row::CodexExec),
    ]
}

/// The runtime every wire helper blocks on.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

/// Runs `future` to its end on the matrix's runtime, bounded.
pub(crate) fn block<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
    RUNTIME.block_on(async { tokio::time::timeout(REQUEST_LIMIT, future).await.ok() })
}

/// One `serve` process listening with every protocol on loopback, no token
/// (normal on loopback); stopped, then its workspace removed, when dropped.
pub(crate) struct Server {
    _process: ServerProcess,
    _known: agent_reach::exec::KnownChildGuard,
    pub(crate) env: TestEnv,
    addrs: BTreeMap<String, SocketAddr>,
}

/// A server spawned and not yet listening.
struct Starting {
    process: ServerProcess,
    known: agent_reach::exec::KnownChildGuard,
    env: TestEnv,
    log: PathBuf,
}

impl Starting {
    /// `serve` with every protocol, the registry `registry` and `extra` flags.
    fn spawn(registry: &str, extra: &[&str]) -> Self {
        Self::spawn_with(TestEnv::new(), registry, extra, &[])
    }

    /// The same in `env`, with `vars` added to the server's environment.
    fn spawn_with(env: TestEnv, registry: &str, extra: &[&str], vars: &[(&str, PathBuf)]) -> Self {
        let log = env.root.path().join("serve.log");
        let config = env.root.path().join("registry.toml");
        std::fs::write(&config, registry).unwrap();
        let listens: Vec<String> = PROTOCOLS
            .iter()
            .map(|protocol| format!("{protocol}=127.0.0.1:0"))
            .collect();
        let child = serve_listening(&env, &log, &listens, "")
            .arg("--config")
            .arg(&config)
            .args(extra)
            .env("MATRIX_SERVER_SECRET", SERVER_SECRET)
            .envs(vars.iter().map(|(k, v)| (k, v)))
            .spawn()
            .unwrap();
        Self {
            known: agent_reach::exec::KnownChildGuard::register(child.id() as i32),
            process: ServerProcess::new(child),
            env,
            log,
        }
    }

    fn listening(self) -> Server {
        let addrs = listening(&self.log, PROTOCOLS.len());
        Server {
            _process: self.process,
            _known: self.known,
            env: self.env,
            addrs,
        }
    }
}

impl Server {
    pub(crate) fn addr(&self, protocol: &str) -> SocketAddr {
        self.addrs[protocol]
    }

    /// `http://ADDR` + `path` of `protocol`'s listener.
    pub(crate) fn url(&self, protocol: &str, path: &str) -> String {
        format!("http://{}{path}", self.addr(protocol))
    }

    /// `rel` under the workspace (`--root`).
    pub(crate) fn work(&self, rel: &str) -> PathBuf {
        self.env.work().join(rel)
    }
}

/// The three servers the columns use, and what they share.
pub(crate) struct Matrix {
    /// `workspace-write`, raw commands, `[limits] pids`.
    pub(crate) main: Server,
    /// `--max-sessions MAX_SESSIONS`.
    pub(crate) sessions: Server,
    /// `[sandbox] default = "read-only"`.
    pub(crate) read_only: Server,
    /// `[limits] max_timeout_ms = CAP_MS`: live processes end there.
    pub(crate) capped: Server,
}

/// `[limits] max_timeout_ms` of the capped server.
pub(crate) const CAP_MS: u64 = 3_000;

impl Matrix {
    fn start() -> Self {
        // The main server's root is a repository holding its state
        // directory and its secrets file (the `protected` column).
        let env = TestEnv::new();
        std::fs::create_dir_all(env.work().join(".git/hooks")).unwrap();
        std::fs::write(env.work().join(".git/config"), "[core]\n\tbare = false\n").unwrap();
        let secrets = env.work().join("secrets.env");
        std::fs::write(&secrets, format!("MATRIX_SECRET={SECRETS_VALUE}\n")).unwrap();
        std::fs::set_permissions(
            &secrets,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let home = env.work().join(".agent-reach");
        let main = Starting::spawn_with(
            env,
            &format!(
                "allow_raw_commands = true\nsecrets_file = {secrets:?}\n[sandbox]\ndefault = \"workspace-write\"\n[limits]\npids = {PIDS_LIMIT}\n"
            ),
            &[],
            &[("AGENT_REACH_HOME", home)],
        );
        let sessions = Starting::spawn(
            "allow_raw_commands = true\n",
            &[
                "--max-sessions",
                &MAX_SESSIONS.to_string(),
                "--max-sessions-per-client",
                "64",
            ],
        );
        let read_only = Starting::spawn(
            "allow_raw_commands = true\n[sandbox]\ndefault = \"read-only\"\n",
            &[],
        );
        let capped = Starting::spawn(
            &format!("allow_raw_commands = true\n[limits]\nmax_timeout_ms = {CAP_MS}\n"),
            &[],
        );
        Self {
            main: main.listening(),
            sessions: sessions.listening(),
            read_only: read_only.listening(),
            capped: capped.listening(),
        }
    }
}

/// What a cell found.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// The guarantee held; what was seen.
    Held(String),
    /// The door has none of what the column exercises; why.
    NotApplicable(String),
    /// The guarantee broke; how.
    Failed(String),
}

impl Verdict {
    fn short(&self) -> &'static str {
        match self {
            Verdict::Held(_) => "ok",
            Verdict::NotApplicable(_) => "n/a",
            Verdict::Failed(_) => "FAILED",
        }
    }

    fn detail(&self) -> &str {
        match self {
            Verdict::Held(s) | Verdict::NotApplicable(s) | Verdict::Failed(s) => s,
        }
    }
}

/// A column: its name and the check it makes of one row.
type Column = (&'static str, fn(&Matrix, &dyn Wire) -> Verdict);

/// The matrix as text: one line per door, then every cell's detail.
fn render(rows: &[Box<dyn Wire>], found: &BTreeMap<(usize, usize), Verdict>) -> String {
    let columns = columns::COLUMNS;
    let mut text = format!("{:<16}", "door");
    for (name, _) in columns {
        text.push_str(&format!("{name:<14}"));
    }
    text.push('\n');
    for (r, row) in rows.iter().enumerate() {
        text.push_str(&format!("{:<16}", row.protocol()));
        for c in 0..columns.len() {
            text.push_str(&format!("{:<14}", found[&(c, r)].short()));
        }
        text.push('\n');
    }
    for (r, row) in rows.iter().enumerate() {
        for (c, (name, _)) in columns.iter().enumerate() {
            let cell = &found[&(c, r)];
            text.push_str(&format!(
                "{} × {name}: {}: {}\n",
                row.protocol(),
                cell.short(),
                cell.detail()
            ));
        }
    }
    text
}

#[test]
fn every_guarantee_holds_at_every_door() {
    let matrix = Matrix::start();
    let rows = rows();
    let started = std::time::Instant::now();
    let found: BTreeMap<(usize, usize), Verdict> = std::thread::scope(|scope| {
        let handles: Vec<_> = columns::COLUMNS
            .iter()
            .enumerate()
            .map(|(c, (_, check))| {
                let (matrix, rows) = (&matrix, &rows);
                scope.spawn(move || {
                    rows.iter()
                        .enumerate()
                        .map(|(r, row)| ((c, r), check(matrix, row.as_ref())))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a column panicked"))
            .collect()
    });
    let text = render(&rows, &found);
    println!("{text}matrix took {:?}", started.elapsed());
    let failed: Vec<String> = found
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Failed(_)))
        .map(|((c, r), v)| {
            format!(
                "{} × {}: {}",
                rows[*r].protocol(),
                columns::COLUMNS[*c].0,
                v.detail()
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} failing cell(s):\n{}\n\n{text}",
        failed.len(),
        failed.join("\n")
    );
}
