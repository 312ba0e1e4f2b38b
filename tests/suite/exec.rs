//! `agent-reach run` and `agent-reach-exec` against the pitfalls an agent
//! hits: prompts, background jobs, timeouts, floods, escapees. Every test is
//! bounded by the harness limit, so a regression fails instead of hanging.

use std::time::{Duration, Instant};

use crate::common::TestEnv;
use crate::skip_unless;

/// Processes whose command line contains `needle`, except zombies.
fn live_processes_with(needle: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        if !zombie
            && String::from_utf8_lossy(&cmdline)
                .replace('\0', " ")
                .contains(needle)
        {
            found.push(pid);
        }
    }
    found
}

/// Waits briefly for `needle` processes to vanish (the kernel finishes a
/// SIGKILL asynchronously), then asserts none is left.
#[track_caller]
fn assert_no_process_with(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline && !live_processes_with(needle).is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = live_processes_with(needle);
    assert!(left.is_empty(), "processes survived: {left:?} ({needle})");
}

/// A number unique to this test run, so `sleep <number>` finds only the
/// processes of the test that started them.
fn marker(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}{:03}{}", std::process::id(), n, name.len())
}

#[test]
fn prints_the_output_and_passes_the_exit_code_through() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--", "sh", "-c", "echo out; echo err >&2; exit 3"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(3)
        .stdout_is("out\n")
        .stderr_contains("err");
}

#[test]
fn exec_personality_is_run() {
    let env = TestEnv::new();
    let link = env.link("agent-reach-exec");
    env.cmd_at(link)
        .args(["--", "echo", "hi"])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("hi\n");
}

#[test]
fn the_double_dash_is_optional_and_options_after_the_command_are_its_own() {
    let env = TestEnv::new();
    env.cmd()
        .args([
            "run",
            "--timeout-ms",
            "5000",
            "sh",
            "-c",
            "echo $1",
            "sh",
            "--json",
        ])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("--json\n");
    let link = env.link("agent-reach-exec");
    env.cmd_at(link)
        .args(["echo", "hi"])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("hi\n");
}

#[test]
fn bad_flags_are_125() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--no-such-flag", "--", "true"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(125);
    let link = env.link("agent-reach-exec");
    env.cmd_at(link)
        .args(["--timeout-ms", "soon", "--", "true"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(125);
}

#[test]
fn not_found_is_127_with_one_clear_line() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args(["run", "--", "no-such-command-xyz"])
        .limit(Duration::from_secs(20))
        .run();
    result
        .code_is(127)
        .stderr_contains("no-such-command-xyz: command not found");
    assert_eq!(
        result.stderr_str().lines().count(),
        1,
        "{}",
        result.stderr_str()
    );
}

#[test]
fn not_executable_is_126() {
    let env = TestEnv::new();
    env.write("script.sh", "echo hi\n");
    env.cmd()
        .args(["run", "--", "./script.sh"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(126)
        .stderr_contains("cannot execute");
}

#[test]
fn missing_workdir_is_125() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--workdir", "does/not/exist", "--", "true"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(125)
        .stderr_contains("does not exist");
}

#[test]
fn workdir_is_where_the_command_runs() {
    let env = TestEnv::new();
    env.write("sub/file.txt", "x");
    env.cmd()
        .args(["run", "--workdir", "sub", "--", "ls"])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("file.txt\n");
}

#[test]
fn reading_stdin_on_pipes_ends_at_once() {
    let env = TestEnv::new();
    env.cmd()
        .args([
            "run",
            "--timeout-ms",
            "30000",
            "--",
            "sh",
            "-c",
            "read x; echo got:$x; cat; echo end",
        ])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("got:\nend\n")
        .elapsed_under(Duration::from_secs(5));
}

#[test]
fn a_background_job_does_not_hold_the_result() {
    let env = TestEnv::new();
    let tag = format!("1000{}", marker("bg"));
    let script = format!("(sleep {tag} &); echo done");
    env.cmd()
        .args(["run", "--", "sh", "-c", &script])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("done\n")
        .elapsed_under(Duration::from_millis(2500));
    assert_no_process_with(&format!("sleep {tag}"));
}

#[test]
fn the_timeout_kills_children_and_grandchildren_with_124() {
    let env = TestEnv::new();
    let tag = format!("2000{}", marker("timeout"));
    let script = format!("sleep {tag} & sh -c 'sleep {tag}' & echo started; sleep {tag}");
    let result = env
        .cmd()
        .args(["run", "--timeout-ms", "500", "--", "sh", "-c", &script])
        .limit(Duration::from_secs(20))
        .run();
    result
        .code_is(124)
        .stdout_is("started\n")
        .stderr_contains("timeout")
        .elapsed_under(Duration::from_secs(4));
    assert_no_process_with(&format!("sleep {tag}"));
}

#[test]
fn setsid_daemons_and_term_ignoring_children_are_killed() {
    let env = TestEnv::new();
    let tag = format!("3000{}", marker("daemon"));
    let script = format!(
        "setsid sh -c 'sleep {tag}' </dev/null >/dev/null 2>&1 & \
         sh -c 'trap \"\" TERM HUP; sleep {tag}' </dev/null >/dev/null 2>&1 & \
         sleep 0.2; echo ok"
    );
    env.cmd()
        .args(["run", "--", "sh", "-c", &script])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("ok\n")
        .elapsed_under(Duration::from_secs(6));
    assert_no_process_with(&format!("sleep {tag}"));
}

#[test]
fn setsid_daemons_are_killed_without_cgroups_too() {
    let env = TestEnv::new();
    let tag = format!("4000{}", marker("nocgroup"));
    let script = format!("setsid sh -c 'sleep {tag}' >/dev/null 2>&1 & echo ok");
    env.cmd()
        .env("AGENT_REACH_NO_CGROUP", "1")
        .args(["run", "--", "sh", "-c", &script])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("ok\n");
    assert_no_process_with(&format!("sleep {tag}"));
}

#[test]
fn a_signal_death_is_128_plus_n() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--", "sh", "-c", "kill -9 $$"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(137);
}

#[test]
fn json_has_the_contract_fields() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "run",
            "--json",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 2",
        ])
        .limit(Duration::from_secs(20))
        .run();
    result.code_is(2);
    let json = result.json();
    assert_eq!(json["status"], "failure");
    assert_eq!(json["exit_code"], 2);
    assert_eq!(json["stdout"], "out\n");
    assert_eq!(json["stderr"], "err\n");
    assert_eq!(json["original_bytes"]["stdout"], 4);
    assert_eq!(json["original_bytes"]["stderr"], 4);
    assert_eq!(json["truncated"], false);
    assert!(json["duration_ms"].is_u64());
    assert!(json["full_output_path"].is_null());
    assert!(json["sandbox"].is_null());
    assert_eq!(json["cached"], false);
}

#[test]
fn json_timeout_status() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args(["run", "--json", "--timeout-ms", "300", "--", "sleep", "30"])
        .limit(Duration::from_secs(20))
        .run();
    result.code_is(124);
    let json = result.json();
    assert_eq!(json["status"], "timeout");
    assert_eq!(json["exit_code"], 124);
    assert_eq!(json["error"]["kind"], "timeout", "{json}");
}

#[test]
fn env_is_cleared_with_a_whitelist_and_env_flags() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .env("SECRET_THING", "s3cr3t")
        .env("KEEP_ME", "kept")
        .args(["run", "--env", "KEEP_ME", "--env", "SET_ME=v", "--", "env"])
        .limit(Duration::from_secs(20))
        .run();
    result.success();
    let out = result.stdout_str();
    assert!(!out.contains("s3cr3t"), "{out}");
    assert!(out.contains("KEEP_ME=kept"), "{out}");
    assert!(out.contains("SET_ME=v"), "{out}");
    assert!(out.contains("TERM=dumb"), "{out}");
    assert!(out.contains("PAGER=cat"), "{out}");
    assert!(out.contains("AGENT_REACH_SESSION=ar-"), "{out}");
    let path_line = out.lines().find(|l| l.starts_with("PATH=")).unwrap();
    assert!(
        path_line.contains("/tmp/path/"),
        "session PATH entry first: {path_line}"
    );
}

#[test]
fn tty_gives_a_terminal_and_plain_newlines() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "run",
            "--tty",
            "--",
            "sh",
            "-c",
            "test -t 0 && test -t 1 && echo is-a-tty; tty",
        ])
        .limit(Duration::from_secs(20))
        .run();
    result.success().stdout_contains("is-a-tty\n/dev/pts/");
    assert!(
        !result.stdout_str().contains('\r'),
        "{:?}",
        result.stdout_str()
    );
}

#[test]
fn a_password_prompt_on_a_tty_is_visible_at_the_timeout() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "run",
            "--tty",
            "--timeout-ms",
            "700",
            "--",
            "sh",
            "-c",
            "printf 'Password: '; stty -echo; read pw; echo never",
        ])
        .limit(Duration::from_secs(20))
        .run();
    // Rows lose trailing blanks (the contract), the prompt's space too.
    result.code_is(124).stdout_contains("Password:");
    assert!(!result.stdout_str().contains("never"));
}

#[test]
fn a_prompt_reading_dev_tty_fails_at_once_on_pipes() {
    let env = TestEnv::new();
    env.cmd()
        .args([
            "run",
            "--timeout-ms",
            "20000",
            "--",
            "sh",
            "-c",
            "read x </dev/tty; echo $?",
        ])
        .limit(Duration::from_secs(20))
        .run()
        .elapsed_under(Duration::from_secs(5));
}

#[test]
fn a_flood_keeps_memory_bounded_and_the_tail_survives() {
    let env = TestEnv::new();
    let script = "yes 'compiling crate number 42 of many' | head -c 200000000; echo; echo '3 failed'; \
                  grep VmHWM /proc/$PPID/status >&2";
    let result = env
        .cmd()
        .args(["run", "--timeout-ms", "120000", "--", "sh", "-c", script])
        .limit(Duration::from_secs(150))
        .run();
    result
        .success()
        .stdout_contains("3 failed\n")
        .stdout_contains("omitted");
    assert!(
        result.stdout.len() < 100_000,
        "folded: {} bytes",
        result.stdout.len()
    );
    let hwm_kb: u64 = result
        .stderr_str()
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {:?}", result.stderr_str()));
    assert!(hwm_kb < 64 * 1024, "peak RSS of agent-reach: {hwm_kb} kB");
}

#[test]
fn a_progress_bar_comes_back_as_a_few_lines() {
    let env = TestEnv::new();
    let script = "i=0; while [ $i -lt 10000 ]; do printf '\\rBuilding %d/10000' $i; i=$((i+1)); done; \
                  printf '\\rBuilding done\\n'; echo finished";
    let result = env
        .cmd()
        .args(["run", "--timeout-ms", "60000", "--", "sh", "-c", script])
        .limit(Duration::from_secs(90))
        .run();
    result.success().stdout_contains("finished");
    let lines = result.stdout_str().lines().count();
    assert!(lines <= 4, "{lines} lines:\n{}", result.stdout_str());
}

#[test]
fn nul_laden_output_is_refused() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "run",
            "--",
            "sh",
            "-c",
            "printf 'PK\\003\\004\\000\\000\\000binary\\000'; head -c 5000 /dev/zero",
        ])
        .limit(Duration::from_secs(20))
        .run();
    result.success();
    assert!(!result.stdout.contains(&0), "no NUL reaches the model");
    assert!(
        result.stdout_str().to_lowercase().contains("binary"),
        "{}",
        result.stdout_str()
    );
    assert_eq!(
        result.stdout_str().trim_end().lines().count(),
        1,
        "{}",
        result.stdout_str()
    );
}

#[test]
fn json_reports_truncation_with_a_spill_file() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "run",
            "--json",
            "--max-output-tokens",
            "100",
            "--",
            "seq",
            "1",
            "20000",
        ])
        .limit(Duration::from_secs(20))
        .run();
    result.success();
    let json = result.json();
    assert_eq!(json["truncated"], true);
    let path = json["full_output_path"].as_str().expect("a spill path");
    let spilled = std::fs::read_to_string(path).unwrap();
    assert!(spilled.starts_with("1\n2\n") && spilled.ends_with("19999\n20000\n"));
    assert!(json["stdout"].as_str().unwrap().contains("20000"));
    assert_eq!(json["original_bytes"]["stdout"], 108_894);
}

#[test]
fn sandbox_confines_the_command_and_attests_it() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "run",
            "--json",
            "--sandbox",
            "read-only",
            "--",
            "sh",
            "-c",
            "touch made-here",
        ])
        .limit(Duration::from_secs(20))
        .run();
    skip_unless!(
        feature = "landlock",
        crate::common::landlock_abi() >= 1,
        "the kernel has no Landlock"
    );
    let json = result.json();
    assert_eq!(json["status"], "failure", "{json}");
    assert_eq!(json["sandbox"]["fs"], "enforced", "{json}");
    assert!(!env.work().join("made-here").exists());
    env.cmd()
        .args([
            "run",
            "--sandbox",
            "workspace-write",
            "--",
            "sh",
            "-c",
            "touch ok-here",
        ])
        .limit(Duration::from_secs(20))
        .run()
        .success();
    assert!(env.work().join("ok-here").exists());
}

#[test]
fn an_unknown_sandbox_policy_is_125() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--sandbox", "bogus", "--", "true"])
        .limit(Duration::from_secs(20))
        .run()
        .code_is(125)
        .stderr_contains("read-only");
}

#[test]
fn a_shown_whole_output_leaves_no_spill_file() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--", "echo", "small"])
        .limit(Duration::from_secs(20))
        .run()
        .success();
    let spill = env.ar_home().join("spill");
    let files: Vec<_> = std::fs::read_dir(&spill)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(files.is_empty(), "{files:?}");
}

#[test]
fn sigterm_to_run_kills_the_whole_tree_first() {
    let env = TestEnv::new();
    let tag = format!("5000{}", marker("sigterm"));
    let script = format!("setsid sleep {tag} & sleep {tag}");
    let bin = crate::common::bin();
    let mut child = std::process::Command::new(bin)
        .args(["run", "--timeout-ms", "30000", "--", "sh", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("AGENT_REACH_HOME", env.ar_home())
        .current_dir(env.work())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while live_processes_with(&format!("sleep {tag}")).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("run did not end after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert_no_process_with(&format!("sleep {tag}"));
}

/// The cgroup2 directory this test process runs in, when it is writable.
fn writable_cgroup_dir() -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mount = mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next()? == "cgroup2").then(|| before.split_whitespace().nth(4))?
    })?;
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = cgroups.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = std::path::Path::new(mount).join(own.trim_start_matches('/'));
    let probe = dir.join(format!("agent-reach-probe-{}", std::process::id()));
    std::fs::create_dir(&probe).ok()?;
    std::fs::remove_dir(&probe).ok()?;
    Some(dir)
}

#[test]
fn cgroups_left_by_a_killed_agent_reach_are_emptied_and_removed() {
    let env = TestEnv::new();
    let Some(base) = writable_cgroup_dir() else {
        skip_unless!(feature = "cgroup", false, "no writable cgroup2 tree here");
        return;
    };
    // pid_max is at most 2^22, so this owner is surely dead.
    let stale = base.join(format!("agent-reach-ar-99999999-0-{}", std::process::id()));
    std::fs::create_dir(&stale).unwrap();
    let mut escapee = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    std::fs::write(stale.join("cgroup.procs"), escapee.id().to_string()).unwrap();
    env.cmd()
        .args(["run", "--", "true"])
        .limit(Duration::from_secs(20))
        .run()
        .success();
    let status = escapee.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(
        !stale.exists(),
        "stale cgroup {} still there",
        stale.display()
    );
}

/// Linux (seen on 6.18) SIGKILLs a child cloned straight into a cgroup when
/// the cgroup its parent runs in was once killed through `cgroup.kill`:
/// `run` started in such a cgroup must still run its command (once).
#[test]
fn run_inside_a_once_killed_cgroup_still_runs_the_command() {
    let env = TestEnv::new();
    let Some(base) = writable_cgroup_dir() else {
        skip_unless!(feature = "cgroup", false, "no writable cgroup2 tree here");
        return;
    };
    let killed = base.join(format!("ar-test-killed-{}", marker("killseq")));
    std::fs::create_dir(&killed).unwrap();
    std::fs::write(killed.join("cgroup.kill"), "1").unwrap();
    let count = env.work().join("count");
    let script = format!(
        "echo $$ > {procs} && exec {bin} run -- sh -c 'echo ran >> {count}; echo hi'",
        procs = killed.join("cgroup.procs").display(),
        bin = crate::common::bin().display(),
        count = count.display(),
    );
    env.cmd_at("sh")
        .args(["-c", &script])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_is("hi\n");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap(),
        "ran\n",
        "run once"
    );
    // Empty again once `run` exited (its own cgroups removed at exit).
    std::fs::remove_dir(&killed).unwrap();
}
