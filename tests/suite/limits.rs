//! `[limits]`: the per-command process limit (a fork bomb ends at it and
//! leaves nothing behind) and the caps on what a caller asks (timeout,
//! output budget), at every door, said in the reply.

use std::time::Duration;

use serde_json::json;

use crate::common::TestEnv;
use crate::common::pids::{has_pids_controller, running};
use crate::suite::exec_json::jsonl;

/// A marker no other process on the machine runs: `sleep` of this many seconds.
const MARKER_SECONDS: &str = "3171";

/// Processes whose command line is `sleep MARKER_SECONDS`.
fn marker_sleeps() -> usize {
    running(&["sleep", MARKER_SECONDS])
}

#[test]
fn a_fork_bomb_ends_at_the_pids_limit_and_leaves_nothing_behind() {
    crate::skip_unless!(
        feature = "cgroup",
        has_pids_controller(),
        "no pids cgroup controller on this machine"
    );
    let env = TestEnv::new();
    let registry = "allow_raw_commands = true\n[limits]\npids = 50\n";
    let script =
        format!("i=0; while [ $i -lt 200 ]; do sleep {MARKER_SECONDS} & i=$((i+1)); echo $i; done");
    let started = std::time::Instant::now();
    let (run, by_id) = jsonl(
        &env,
        registry,
        &[json!({"id": "bomb", "command": ["/bin/sh", "-c", script], "timeout_ms": 20000})],
        &[],
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{}",
        run.stderr_str()
    );
    let result = &by_id["bomb"];
    let last: u32 = result["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    assert!(
        (1..50).contains(&last),
        "the shell started {last} sleeps under a limit of 50: {result}"
    );
    let stderr = result["stderr"].as_str().unwrap_or("");
    assert!(
        stderr.contains("fork") || stderr.contains("Resource temporarily unavailable"),
        "a fork was refused inside: {result}"
    );
    assert_ne!(result["status"], "timeout", "it finished: {result}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while marker_sleeps() > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(marker_sleeps(), 0, "a sleep of the bomb was left running");
}

#[test]
fn exec_json_asking_for_more_output_than_the_limit_gets_the_cap_and_says_so() {
    let env = TestEnv::new();
    let registry = "allow_raw_commands = true\n";
    let (_, by_id) = jsonl(
        &env,
        registry,
        &[
            json!({"id": "big", "command": ["echo", "hi"], "max_output_tokens": 100_000_000u64}),
            json!({"id": "fair", "command": ["echo", "hi"], "max_output_tokens": 500}),
        ],
        &[],
    );
    assert_eq!(by_id["big"]["status"], "success", "{}", by_id["big"]);
    assert_eq!(by_id["big"]["capped"], json!(["max_output_tokens"]));
    assert!(
        by_id["fair"].get("capped").is_none(),
        "nothing capped, no field: {}",
        by_id["fair"]
    );
}

#[test]
fn exec_json_asking_for_a_longer_timeout_than_the_limit_is_killed_at_the_limit() {
    let env = TestEnv::new();
    let registry = "allow_raw_commands = true\n[limits]\nmax_timeout_ms = 1000\n";
    let started = std::time::Instant::now();
    let (_, by_id) = jsonl(
        &env,
        registry,
        &[json!({"id": "long", "command": ["sleep", "20"], "timeout_ms": 1_000_000_000u64})],
        &[],
    );
    let result = &by_id["long"];
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(result["capped"], json!(["max_timeout_ms"]), "{result}");
    assert!(started.elapsed() < Duration::from_secs(10), "{result}");
}
