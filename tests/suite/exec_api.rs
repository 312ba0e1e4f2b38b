//! The engine's library API as sessions and registry tools use it: spawn,
//! wait (the yield, never a kill), take the output window by window, write
//! to a PTY, terminate, finish. Every wait is bounded.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::time::{Duration, Instant};

use agent_reach::exec::{self, Execution, RenderOptions, SpawnSpec, WaitEnd};

use crate::common::TestEnv;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn spec(env: &TestEnv, script: &str, tty: bool) -> SpawnSpec {
    let parent: BTreeMap<OsString, OsString> =
        [("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into())].into();
    let tag = exec::new_session_tag();
    let child_env = exec::child_env(&parent, &[], &[], tty, &tag);
    let mut spec = SpawnSpec::new(
        vec!["sh".into(), "-c".into(), script.into()],
        env.work(),
        child_env,
        env.ar_home(),
    );
    spec.session_tag = tag;
    spec.tty = tty;
    spec.merge_output = true;
    spec
}

fn opts() -> RenderOptions {
    RenderOptions::default()
}

/// Fails the test instead of hanging when an engine call does not return.
async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within 20 s"))
}

#[test]
fn wait_yields_without_killing_and_windows_carry_only_new_output() {
    let env = TestEnv::new();
    runtime().block_on(async {
        // Seconds apart, so a loaded machine still sees them apart.
        let execution = Execution::spawn(spec(
            &env,
            "echo first; sleep 4; echo second; sleep 30",
            false,
        ))
        .unwrap();
        let first = regex::Regex::new("first").unwrap();
        let end = execution
            .wait(Instant::now() + Duration::from_secs(10), Some(&first))
            .await;
        assert_eq!(end, WaitEnd::Matched);
        assert_eq!(execution.take_output(&opts()).text, "first\n");
        let end = execution
            .wait(Instant::now() + Duration::from_millis(300), None)
            .await;
        assert_eq!(end, WaitEnd::Deadline);
        assert!(execution.exit_info().is_none(), "the yield kills nothing");
        assert_eq!(execution.take_output(&opts()).text, "", "nothing new yet");
        let pattern = regex::Regex::new("sec.nd").unwrap();
        let end = execution
            .wait(Instant::now() + Duration::from_secs(10), Some(&pattern))
            .await;
        assert_eq!(end, WaitEnd::Matched);
        assert_eq!(execution.take_output(&opts()).text, "second\n");
        let started = Instant::now();
        let report = bounded("terminate", execution.terminate()).await;
        assert!(report.survivors.is_empty(), "{report:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        let exit = execution.exit_info().expect("exited after terminate");
        assert_eq!(exit.signal, Some(libc::SIGTERM));
    });
}

#[test]
fn wait_reports_the_exit_with_the_last_output() {
    let env = TestEnv::new();
    runtime().block_on(async {
        let execution = Execution::spawn(spec(&env, "echo bye; exit 7", false)).unwrap();
        let end = execution
            .wait(Instant::now() + Duration::from_secs(10), None)
            .await;
        assert_eq!(end, WaitEnd::Exited);
        assert_eq!(execution.exit_info().unwrap().code, Some(7));
        assert_eq!(execution.take_output(&opts()).text, "bye\n");
        let completed = bounded("finish", execution.finish(&opts())).await;
        assert_eq!(completed.exit.exit_code(), 7);
    });
}

#[test]
fn a_pty_session_takes_input_and_says_when_it_waits_for_it() {
    let env = TestEnv::new();
    runtime().block_on(async {
        let execution = Execution::spawn(spec(
            &env,
            "printf 'name? '; read name; echo hello $name; sleep 30",
            true,
        ))
        .unwrap();
        let prompt = regex::Regex::new(r"name\? $").unwrap();
        let end = execution
            .wait(Instant::now() + Duration::from_secs(10), Some(&prompt))
            .await;
        assert_eq!(
            end,
            WaitEnd::Matched,
            "pid {} exit {:?} output {:?}",
            execution.pid(),
            execution.exit_info(),
            execution.take_output(&opts()).text
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while !execution.awaiting_input() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(execution.awaiting_input(), "blocked reading the terminal");
        assert_eq!(execution.take_output(&opts()).text, "name? ");
        execution.write_stdin(b"world\n").unwrap();
        let greeting = regex::Regex::new("hello world").unwrap();
        let end = execution
            .wait(Instant::now() + Duration::from_secs(10), Some(&greeting))
            .await;
        assert_eq!(end, WaitEnd::Matched);
        let text = execution.take_output(&opts()).text;
        assert!(text.contains("hello world\n"), "{text:?}");
        assert!(!text.contains('\r'), "{text:?}");
        assert!(!execution.awaiting_input(), "sleeping, not reading");
        bounded("terminate", execution.terminate()).await;
    });
}

/// A command killed with SIGKILL (its cgroup killed) must not doom the
/// next command of the same process: Linux kills every later clone into a
/// cgroup that was killed once, so such a cgroup must never be reused.
#[test]
fn a_command_after_a_killed_one_runs_normally() {
    let env = TestEnv::new();
    let up = regex::Regex::new("up").unwrap();
    runtime().block_on(async {
        for round in 0..3 {
            let mut stubborn = spec(&env, "trap '' TERM; echo up; sleep 30", false);
            stubborn.kill_grace = Duration::from_millis(100);
            let execution = Execution::spawn(stubborn).unwrap();
            let end = execution
                .wait(Instant::now() + Duration::from_secs(10), Some(&up))
                .await;
            assert_eq!(end, WaitEnd::Matched, "round {round}");
            let report = bounded("terminate", execution.terminate()).await;
            assert!(report.escalated, "round {round}: SIGKILL was needed");
            let next = Execution::spawn(spec(&env, "echo next; exit 3", false)).unwrap();
            let completed = bounded("finish", next.finish(&opts())).await;
            assert_eq!(
                (completed.exit.exit_code(), completed.stdout.text.as_str()),
                (3, "next\n"),
                "round {round}: the next command was killed at birth: {:?}",
                completed.exit
            );
        }
    });
}

#[test]
fn writing_to_a_pipe_session_is_a_clear_error() {
    let env = TestEnv::new();
    runtime().block_on(async {
        let execution = Execution::spawn(spec(&env, "sleep 30", false)).unwrap();
        let err = execution.write_stdin(b"x").unwrap_err();
        assert!(err.to_string().contains("tty"), "{err}");
        bounded("terminate", execution.terminate()).await;
    });
}

#[test]
fn a_grandchild_holding_the_pty_cannot_block_finish() {
    let env = TestEnv::new();
    runtime().block_on(async {
        let mut spec = spec(
            &env,
            "sh -c 'trap \"\" HUP TERM; sleep 30' & echo parent-done",
            true,
        );
        spec.kill_grace = Duration::from_millis(300);
        spec.drain = Duration::from_millis(300);
        let execution = Execution::spawn(spec).unwrap();
        let started = Instant::now();
        let completed = bounded("finish", execution.finish(&opts())).await;
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
        assert!(completed.stdout.text.contains("parent-done"));
        assert!(completed.survivors.is_empty(), "{:?}", completed.survivors);
    });
}

#[test]
fn dropping_the_last_handle_kills_the_command() {
    let env = TestEnv::new();
    let rt = runtime();
    let pid = rt.block_on(async {
        let execution = Execution::spawn(spec(&env, "sleep 30", false)).unwrap();
        execution.pid() as i32
    });
    let deadline = Instant::now() + Duration::from_secs(3);
    let alive = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.rsplit_once(')').unwrap().1.trim_start().starts_with('Z'))
            .unwrap_or(false)
    };
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(pid), "the command outlived its last handle");
}

#[test]
fn secrets_never_reach_the_output() {
    let env = TestEnv::new();
    runtime().block_on(async {
        let mut spec = spec(&env, "echo token=$API_TOKEN; echo done", false);
        spec.env.insert("API_TOKEN".into(), "tok-123456789".into());
        spec.secrets = vec![("API_TOKEN".into(), b"tok-123456789".to_vec())];
        let execution = Execution::spawn(spec).unwrap();
        let completed = bounded("finish", execution.finish(&opts())).await;
        assert!(
            !completed.stdout.text.contains("tok-123456789"),
            "{}",
            completed.stdout.text
        );
        assert!(
            completed.stdout.text.contains("[REDACTED:API_TOKEN]"),
            "{}",
            completed.stdout.text
        );
    });
}

#[test]
fn pending_bytes_and_the_spill_file_of_a_session() {
    let env = TestEnv::new();
    runtime().block_on(async {
        let execution = Execution::spawn(spec(
            &env,
            "printf '\\033[1mbold\\033[0m\\n'; printf partial; seq 1 5 >&2; sleep 30",
            false,
        ))
        .unwrap();
        let raw = 13 + 7 + 10;
        let start = Instant::now();
        while execution.pending_bytes() < raw && start.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(execution.pending_bytes(), raw, "raw bytes, both streams");
        let spill = execution
            .spill_path()
            .expect("the merged stream is spilled");
        assert!(spill.starts_with(env.ar_home().join("spill")), "{spill:?}");
        let window = execution.take_output(&opts());
        assert!(window.text.contains("bold"), "{}", window.text);
        assert_eq!(execution.pending_bytes(), 0);
        let saved = std::fs::read_to_string(&spill).unwrap();
        assert!(saved.starts_with("bold\n"), "{saved:?}");
        bounded("terminate", execution.terminate()).await;
    });
}
