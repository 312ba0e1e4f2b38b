//! The columns of the matrix: each a guarantee, checked of one row through
//! its wire helpers only, answering one [`Verdict`]. A cell collects every
//! check it makes ([`Cell`]) so a failure lists all that broke, and a part
//! the door does not offer is named `n/a` with the door's reason.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{
    Cmd, Column, MAX_SESSIONS, Matrix, Outcome, PIDS_LIMIT, Refusal, Server, Session, Verdict, Wire,
};
use crate::common::pids::{has_pids_controller, running};
use crate::common::race::swap_until;

/// Every column, in the order printed.
pub(super) const COLUMNS: &[Column] = &[
    ("link-out", link_out),
    ("swapped-link", swapped_link),
    ("request-env", request_env),
    ("n+1-sessions", sessions),
    ("read-only", read_only),
    ("fork-bomb", fork_bomb),
    ("protected", protected),
    ("server-env", server_env),
    ("live-cap", live_cap),
];

/// What the file outside the root holds; no answer may contain it.
const SECRET: &str = "the-secret-outside-the-root";
/// Commands started while a directory is swapped for a link out.
const RACE_TRIES: usize = 100;
/// How long a fork bomb may take to end (its request's timeout is less).
const BOMB_LIMIT: Duration = Duration::from_secs(30);
/// How long a freed seat, or a killed process, may take to show.
const SETTLE: Duration = Duration::from_secs(5);

/// The checks of one cell: what held, what the door does not offer, what broke.
#[derive(Default)]
struct Cell {
    held: Vec<String>,
    absent: Vec<String>,
    broken: Vec<String>,
}

impl Cell {
    fn held(&mut self, what: impl Into<String>) {
        self.held.push(what.into());
    }

    fn broke(&mut self, what: impl Into<String>) {
        self.broken.push(what.into());
    }

    fn check(&mut self, ok: bool, what: impl Into<String>) {
        if !ok {
            self.broke(what);
        }
    }

    /// `outcome` must be a refusal (of kind `want`, if given).
    fn refused(&mut self, what: &str, outcome: Outcome, want: Option<Refusal>) {
        match outcome {
            Outcome::Refused { kind, said } if want.is_none_or(|w| w == kind) => {
                self.held(format!("{what}: refused ({})", short(&said)));
            }
            Outcome::NotOffered(why) => self.absent.push(format!("{what}: n/a ({why})")),
            other => self.broke(format!(
                "{what}: expected a refusal {want:?}, got {other:?}"
            )),
        }
    }

    fn verdict(self) -> Verdict {
        let mut parts = self.held;
        parts.extend(self.absent.iter().cloned());
        if !self.broken.is_empty() {
            return Verdict::Failed(format!(
                "{} [also: {}]",
                self.broken.join("; "),
                parts.join("; ")
            ));
        }
        if parts.len() == self.absent.len() {
            return Verdict::NotApplicable(self.absent.join("; "));
        }
        Verdict::Held(parts.join("; "))
    }
}

fn short(said: &str) -> String {
    said.lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(100)
        .collect()
}

/// A directory outside the root holding only the secret, and a link to it
/// in the workspace: `TAG/link-out`. Nothing may ever be added to it.
struct Outside {
    dir: PathBuf,
}

impl Outside {
    fn plant(at: &Server, tag: &str) -> Self {
        let dir = at.env.root.path().join(format!("outside-{tag}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("secret"), SECRET).unwrap();
        std::fs::create_dir_all(at.work(tag)).unwrap();
        std::os::unix::fs::symlink(&dir, at.work(&format!("{tag}/link-out"))).unwrap();
        Self { dir }
    }

    fn untouched(&self, cell: &mut Cell) {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let secret = std::fs::read_to_string(self.dir.join("secret")).unwrap_or_default();
        cell.check(
            names == ["secret"] && secret == SECRET,
            format!("outside the root changed: {names:?}"),
        );
    }
}

/// (1) `missing/../link-out/x`: a link out behind a missing component,
/// read, written, and as a command's working directory, is refused.
fn link_out(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.main;
    let tag = format!("link-{}", row.protocol());
    let outside = Outside::plant(at, &tag);
    let mut cell = Cell::default();
    for via in ["missing/../link-out", "link-out"] {
        let read = row.read(at, &format!("{tag}/{via}/secret"));
        if let Outcome::Done { output, .. } = &read {
            cell.check(
                !output.contains(SECRET),
                format!("the read of {via} leaked the secret"),
            );
        }
        cell.refused(&format!("read {via}"), read, None);
        let write = row.write(at, &format!("{tag}/{via}/x"), "planted");
        cell.refused(&format!("write {via}"), write, None);
        let cwd = Cmd::line("touch ran-here").cwd(format!("{tag}/{via}"));
        cell.refused(&format!("cwd {via}"), row.run(at, &cwd), None);
    }
    outside.untouched(&mut cell);
    cell.verdict()
}

/// (2) A directory swapped for a link out in a loop while commands with
/// that working directory write a file: no write lands outside.
fn swapped_link(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.main;
    let tag = format!("race-{}", row.protocol());
    let outside = Outside::plant(at, &tag);
    let (dir, swap) = (
        at.work(&format!("{tag}/d")),
        at.work(&format!("{tag}/d_swap")),
    );
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::symlink(&outside.dir, &swap).unwrap();
    let mut cell = Cell::default();
    let write = Cmd::line("echo x >> f").cwd(format!("{tag}/d"));
    if let Outcome::NotOffered(why) = row.run(at, &write) {
        return Verdict::NotApplicable(format!("commands with a working directory: {why}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = swap_until(dir.clone(), swap.clone(), Arc::clone(&stop));
    let (mut written, mut refused) = (1, 0);
    for _ in 0..RACE_TRIES {
        match row.run(at, &write) {
            Outcome::Done { exit: 0, .. } => written += 1,
            _ => refused += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    outside.untouched(&mut cell);
    let real = if dir.is_symlink() {
        swap.clone()
    } else {
        dir.clone()
    };
    let lines = std::fs::read_to_string(real.join("f"))
        .unwrap_or_default()
        .lines()
        .count();
    cell.check(
        lines == written,
        format!("{written} commands said they wrote, {lines} lines are in the directory"),
    );
    // Under a fast swapper every command may have met the link; with the
    // directory back in place, one must run (the refusals were the race's,
    // not a door that refuses everything).
    if dir.is_symlink() {
        let link = at.work(&format!("{tag}/d_link"));
        std::fs::rename(&dir, &link).unwrap();
        std::fs::rename(&swap, &dir).unwrap();
    }
    cell.check(
        matches!(row.run(at, &write), Outcome::Done { exit: 0, .. }),
        "with the directory in place the command did not run",
    );
    cell.held(format!(
        "{written} wrote inside, {refused} refused, {swaps} swaps"
    ));
    cell.verdict()
}

/// What the preload library's constructor prints on stderr when loaded.
const PRELOADED: &str = "matrix-preload-loaded";

/// The preload library (built once with `cc`) and the directory outside
/// the root it tries to write to when loaded, which only a process
/// outside the `read-only` sandbox can; or why there is none.
fn preload(m: &Matrix) -> &'static Result<(PathBuf, PathBuf), String> {
    static LIB: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = m.read_only.env.root.path();
        let outside = root.join("outside-preload");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), SECRET).unwrap();
        let source = root.join("preload.c");
        std::fs::write(
            &source,
            format!(
                r#"#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {{
    char path[4096];
    snprintf(path, sizeof path, "%s/loaded.%d", "{}", (int)getpid());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) close(fd);
    const char *said = "{PRELOADED}\n";
    if (write(2, said, strlen(said)) < 0) return;
}}
"#,
                outside.display()
            ),
        )
        .unwrap();
        let lib = root.join("preload.so");
        match std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&lib)
            .arg(&source)
            .output()
        {
            Ok(out) if out.status.success() => Ok((lib, outside)),
            Ok(out) => Err(format!(
                "cc failed: {}",
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => Err(format!("no C compiler: {e}")),
        }
    })
}

/// (3) The request's environment: `AGENT_REACH_*` is refused as invalid
/// parameters; `LD_PRELOAD` reaches the final command only: under
/// `read-only` the library is loaded, yet neither it nor the command
/// writes (nothing unconfined loaded it).
fn request_env(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.main;
    let tag = format!("env-{}", row.protocol());
    std::fs::create_dir_all(at.work(&tag)).unwrap();
    let mut cell = Cell::default();
    let probe = row.run(at, &Cmd::line("true").env("MATRIX_PROBE", "1"));
    if let Outcome::NotOffered(why) = probe {
        return Verdict::NotApplicable(format!("request environment: {why}"));
    }
    for (name, value) in [
        ("AGENT_REACH_HOME", "/nonexistent"),
        ("AGENT_REACH_SANDBOX", "x"),
    ] {
        let marker = at.work(&format!("{tag}/ran-{name}"));
        let line = format!("touch {}", marker.display());
        cell.refused(
            name,
            row.run(at, &Cmd::line(line).env(name, value)),
            Some(Refusal::Invalid),
        );
        cell.check(!marker.exists(), format!("a command with {name} ran"));
    }
    let smuggled = at.work(&format!("{tag}/ran-smuggled"));
    cell.refused(
        "a NUL in a value",
        row.run(
            at,
            &Cmd::line(format!("touch {}", smuggled.display())).env("OK", "a\0AGENT_REACH_DEPTH=9"),
        ),
        Some(Refusal::Invalid),
    );
    cell.check(!smuggled.exists(), "a command with a NUL in a variable ran");
    let (lib, outside) = match preload(m) {
        Ok(found) => found,
        Err(why) => {
            cell.absent.push(format!("LD_PRELOAD: n/a ({why})"));
            return cell.verdict();
        }
    };
    let line = format!(
        "echo \"preload=$LD_PRELOAD\"; touch {}/direct; echo \"touch=$?\"",
        outside.display()
    );
    let cmd = Cmd::line(line).env("LD_PRELOAD", lib.to_string_lossy());
    match row.run(&m.read_only, &cmd) {
        Outcome::Done { output, .. } => {
            cell.check(
                output.contains(&format!("preload={}", lib.display())),
                format!("LD_PRELOAD did not reach the command: {output}"),
            );
            cell.check(
                output.contains(PRELOADED),
                format!("the command did not load the library: {output}"),
            );
            cell.check(
                !output.contains("touch=0"),
                format!("the read-only command wrote: {output}"),
            );
            cell.held("LD_PRELOAD: loaded by the command, which still cannot write");
        }
        other => cell.broke(format!("a command with LD_PRELOAD: {other:?}")),
    }
    Outside {
        dir: outside.clone(),
    }
    .untouched(&mut cell);
    cell.verdict()
}

/// (4) `--max-sessions N` across doors: N sessions through several doors
/// fill the table, the N+1th through this door is refused (and does not
/// run), and closing one frees a seat for this door.
fn sessions(m: &Matrix, row: &dyn Wire) -> Verdict {
    // One table: one row at a time.
    static TABLE: Mutex<()> = Mutex::new(());
    let _turn = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let at = &m.sessions;
    let doors = super::rows();
    let mut cell = Cell::default();
    let line = "sleep 300";
    let mine = match open_when_free(row, at, line) {
        Ok(session) => session,
        Err(Outcome::NotOffered(why)) => return Verdict::NotApplicable(format!("sessions: {why}")),
        Err(other) => return Verdict::Failed(format!("the first session was refused: {other:?}")),
    };
    let mut open: Vec<(String, Box<dyn Session>)> = vec![(row.protocol().to_owned(), mine)];
    for door in doors
        .iter()
        .filter(|d| d.protocol() != row.protocol())
        .cycle()
        .take(40)
    {
        if open.len() == MAX_SESSIONS {
            break;
        }
        if let Ok(session) = open_when_free(door.as_ref(), at, line) {
            open.push((door.protocol().to_owned(), session));
        }
    }
    let through: Vec<&str> = open.iter().map(|(p, _)| p.as_str()).collect();
    cell.check(
        open.len() == MAX_SESSIONS,
        format!("only {} seats were granted: {through:?}", open.len()),
    );
    let marker = at.work(&format!("extra-{}", row.protocol()));
    let extra = row.open_session(at, &format!("touch {}; sleep 300", marker.display()));
    match extra {
        Ok(session) => {
            cell.broke(format!(
                "session {} through {} was granted",
                MAX_SESSIONS + 1,
                row.protocol()
            ));
            session.close(at);
        }
        Err(refused) => cell.refused(
            &format!("session {} after {through:?}", MAX_SESSIONS + 1),
            refused,
            Some(Refusal::Full),
        ),
    }
    std::thread::sleep(Duration::from_millis(300));
    cell.check(!marker.exists(), "the refused session ran its command");
    // Close another door's session: a seat for this door.
    let (freed, session) = open.remove(open.len() - 1);
    session.close(at);
    match open_when_free(row, at, line) {
        Ok(session) => {
            cell.held(format!("closing a {freed} session freed a seat"));
            open.push((row.protocol().to_owned(), session));
        }
        Err(other) => cell.broke(format!(
            "closing a {freed} session freed no seat: {other:?}"
        )),
    }
    for (_, session) in open {
        session.close(at);
    }
    cell.verdict()
}

/// Opens a session through `door`, waiting (bounded) while the table is
/// full of sessions that were closed and still hold their seat.
fn open_when_free(door: &dyn Wire, at: &Server, line: &str) -> Result<Box<dyn Session>, Outcome> {
    let started = Instant::now();
    loop {
        match door.open_session(at, line) {
            Err(Outcome::Refused {
                kind: Refusal::Full,
                ..
            }) if started.elapsed() < SETTLE => std::thread::sleep(Duration::from_millis(100)),
            other => return other,
        }
    }
}

/// (5) Under `[sandbox] default = "read-only"`: a file write is refused by
/// the policy, a command's write fails; nothing is written.
fn read_only(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.read_only;
    let mut cell = Cell::default();
    let file = format!("ro-{}.txt", row.protocol());
    cell.refused(
        "file write",
        row.write(at, &file, "x"),
        Some(Refusal::Denied),
    );
    cell.check(!at.work(&file).exists(), "the file write landed");
    let marker = format!("ro-cmd-{}", row.protocol());
    match row.run(at, &Cmd::line(format!("touch {marker}; echo \"touch=$?\""))) {
        Outcome::Done { output, .. } => {
            cell.check(
                !output.contains("touch=0"),
                format!("the command wrote: {output}"),
            );
            cell.held("a command's write failed in the read-only sandbox");
        }
        other => cell.refused("command write", other, None),
    }
    cell.check(!at.work(&marker).exists(), "the command's write landed");
    cell.verdict()
}

/// (6) A fork bomb under `[limits] pids`: it ends, bounded, having started
/// fewer processes than the limit; the server still answers; nothing it
/// started is left running.
fn fork_bomb(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.main;
    let required = std::env::var(crate::common::REQUIRE_VAR).unwrap_or_default();
    if !has_pids_controller() {
        let why = "no pids cgroup controller on this machine".to_owned();
        return if required.split(',').any(|f| f.trim() == "cgroup") {
            Verdict::Failed(why)
        } else {
            Verdict::NotApplicable(why)
        };
    }
    // A marker per door and per test process: `sleep` of a number of
    // seconds nothing else on the machine sleeps.
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let seconds =
        (40_000 + (std::process::id() as usize % 4096) * 8 + NEXT.fetch_add(1, Ordering::Relaxed))
            .to_string();
    let mut cell = Cell::default();
    let bomb = format!("i=0; while [ $i -lt 300 ]; do sleep {seconds} & i=$((i+1)); echo $i; done");
    let started = Instant::now();
    let outcome = row.run(at, &Cmd::line(bomb).timeout(20));
    let took = started.elapsed();
    match outcome {
        Outcome::NotOffered(why) => return Verdict::NotApplicable(format!("commands: {why}")),
        Outcome::Done { output, exit } => {
            let last: usize = output
                .lines()
                .rev()
                .find_map(|l| l.trim().parse().ok())
                .unwrap_or(0);
            cell.check(
                last < PIDS_LIMIT,
                format!("the bomb started {last} sleeps under a limit of {PIDS_LIMIT}"),
            );
            cell.held(format!(
                "ended after {last} sleeps (exit {exit}) in {took:.1?}"
            ));
        }
        Outcome::Refused { said, .. } => {
            cell.held(format!("refused in {took:.1?}: {}", short(&said)))
        }
        Outcome::Unexpected(what) => cell.broke(format!("the bomb's answer: {what}")),
    }
    cell.check(took < BOMB_LIMIT, format!("the bomb took {took:?}"));
    let started = Instant::now();
    match row.run(at, &Cmd::line("echo alive")) {
        Outcome::Done { output, exit: 0 } if output.contains("alive") => {
            cell.held(format!(
                "the server answered next in {:.1?}",
                started.elapsed()
            ));
        }
        other => cell.broke(format!("after the bomb the server answered {other:?}")),
    }
    let started = Instant::now();
    while running(&["sleep", &seconds]) > 0 && started.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = running(&["sleep", &seconds]);
    cell.check(
        left == 0,
        format!("{left} processes of the bomb were left running"),
    );
    cell.verdict()
}

/// (7) The one rule list: what a sandboxed command may not read or write,
/// no file operation of the door reads or writes either. The main
/// server's state directory lies inside its root (`.agent-reach`), its
/// registry's secrets file too (`secrets.env`), and the root is a
/// repository (`.git`). A file elsewhere is written and read (the door
/// works), `.git/config` is read (read-only is not sealed).
fn protected(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.main;
    let door = row.protocol();
    let mut cell = Cell::default();
    match row.write(at, &format!("fence-{door}.txt"), "fine") {
        Outcome::Done { .. } => cell.held("a plain write landed"),
        Outcome::NotOffered(why) => return Verdict::NotApplicable(format!("files: {why}")),
        other => cell.broke(format!("a plain write: {other:?}")),
    }
    match row.read(at, ".git/config") {
        Outcome::Done { output, .. } => cell.check(
            output.contains("[core]"),
            format!(".git/config read as {output:?}"),
        ),
        Outcome::NotOffered(why) => cell.absent.push(format!("read: n/a ({why})")),
        other => cell.broke(format!("reading .git/config: {other:?}")),
    }
    // MCP's only write is apply_patch, a sandboxed command: its refusal is
    // the sandbox's, not a file route's `denied`.
    let denied = (door != "mcp").then_some(Refusal::Denied);
    let hook = format!(".git/hooks/post-checkout-{door}");
    cell.refused(
        "write .git/hooks",
        row.write(at, &hook, "echo pwned"),
        denied,
    );
    cell.check(!at.work(&hook).exists(), "a hook was planted in .git");
    let wrapper = format!(".agent-reach/planted-{door}");
    cell.refused(
        "write the state directory",
        row.write(at, &wrapper, "x"),
        denied,
    );
    cell.check(
        !at.work(&wrapper).exists(),
        "a file landed in the state directory",
    );
    let read = row.read(at, "secrets.env");
    if let Outcome::Done { output, .. } = &read {
        cell.check(
            !output.contains(super::SECRETS_VALUE),
            "the secrets file was served",
        );
    }
    cell.refused("read the secrets file", read, Some(Refusal::Denied));
    // The same answer for a sandboxed command: it cannot write the hook.
    let marker = format!(".git/hooks/by-command-{door}");
    match row.run(
        at,
        &Cmd::line(format!("echo x > {marker}; echo \"wrote=$?\"")),
    ) {
        Outcome::Done { output, .. } => cell.check(
            !output.contains("wrote=0"),
            format!("a command wrote into .git: {output}"),
        ),
        Outcome::NotOffered(_) => {}
        other => cell.refused("a command writing .git", other, None),
    }
    cell.check(
        !at.work(&marker).exists(),
        "a command's write landed in .git",
    );
    cell.verdict()
}

/// (9) A live process started without a timeout ends at the operator's
/// `[limits] max_timeout_ms` (the capped server's): its heartbeat stops.
fn live_cap(m: &Matrix, row: &dyn Wire) -> Verdict {
    let at = &m.capped;
    let door = row.protocol();
    let beat = at.work(&format!("beat-{door}"));
    let line = format!(
        "while :; do date +%s%N > {}; sleep 0.2; done",
        beat.display()
    );
    let started = Instant::now();
    let session = match row.open_session(at, &line) {
        Ok(session) => session,
        Err(Outcome::NotOffered(why)) => return Verdict::NotApplicable(format!("sessions: {why}")),
        Err(other) => return Verdict::Failed(format!("the session was refused: {other:?}")),
    };
    let mut cell = Cell::default();
    while !beat.exists() && started.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(100));
    }
    if !beat.exists() {
        session.close(at);
        return Verdict::Failed("the session's line never ran".to_owned());
    }
    let cap = Duration::from_millis(super::CAP_MS);
    std::thread::sleep((cap + Duration::from_secs(2)).saturating_sub(started.elapsed()));
    let then = std::fs::read_to_string(&beat).unwrap_or_default();
    std::thread::sleep(Duration::from_millis(800));
    let now = std::fs::read_to_string(&beat).unwrap_or_default();
    cell.check(
        then == now,
        format!("still beating {:?} after the cap", started.elapsed()),
    );
    if then == now {
        cell.held(format!("ended at the {}-ms cap", super::CAP_MS));
    }
    session.close(at);
    cell.verdict()
}

/// (8) No door hands a command the server's own environment: a variable
/// the server was started with never reaches the command.
fn server_env(m: &Matrix, row: &dyn Wire) -> Verdict {
    let mut cell = Cell::default();
    match row.run(
        &m.main,
        &Cmd::line("echo \"seen=$MATRIX_SERVER_SECRET\"; env"),
    ) {
        Outcome::Done { output, .. } => {
            cell.check(
                output.contains("seen=") && !output.contains(super::SERVER_SECRET),
                format!(
                    "the server's environment reached the command: {}",
                    short(&output)
                ),
            );
            cell.held("the server's variable did not reach the command");
        }
        Outcome::NotOffered(why) => return Verdict::NotApplicable(format!("commands: {why}")),
        other => cell.broke(format!("a plain command: {other:?}")),
    }
    cell.verdict()
}
