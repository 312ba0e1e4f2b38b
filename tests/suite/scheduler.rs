//! The scheduler through `exec --jsonl`: a full queue answers `busy` at once,
//! and under a hammer of mixed groups and exclusive keys no limit is ever
//! exceeded, as the children's own timestamps show.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::TestEnv;
use crate::suite::exec_json::{Stream, jsonl};

#[test]
fn a_full_queue_answers_busy_at_once_with_retry_after() {
    let env = TestEnv::new();
    let config = env.write(
        "registry.toml",
        "[scheduler]\nglobal = 1\nqueue = 1\n[[tools]]\nname = \"nap\"\ncommand = [\"sleep\", \"2\"]\ncwd = \"project_root\"\nrisk = \"low\"\n",
    );
    let mut stream = Stream::start(&env, &config);
    stream.send(&json!({"id": "running", "tool": "nap"}));
    stream.send(&json!({"id": "queued", "tool": "nap"}));
    // Let both reach the scheduler before the third arrives.
    std::thread::sleep(Duration::from_millis(300));
    let sent = Instant::now();
    stream.send(&json!({"id": "refused", "tool": "nap"}));
    let answer = stream.next(Duration::from_secs(10));
    let waited = sent.elapsed();
    assert_eq!(answer["id"], "refused", "{answer}");
    assert_eq!(answer["status"], "busy");
    assert_eq!(answer["error"]["kind"], "queue_full");
    assert!(
        answer["error"]["retry_after_ms"].as_u64().unwrap() >= 10,
        "{answer}"
    );
    // Includes the pipe round trip; the scheduler's own answer is measured in
    // its unit tests (< 10 ms).
    assert!(waited < Duration::from_millis(500), "busy took {waited:?}");
}

/// Each child appends `NAME start|end NANOS` to the log.
fn hammer_registry(log: &str) -> String {
    let tool = |name: &str, extra: &str| {
        format!(
            "[[tools]]\nname = \"{name}\"\ncommand = [\"sh\", \"-c\", \"echo \\\"$0 start $(date +%s%N)\\\" >> {log}; sleep 0.05; echo \\\"$0 end $(date +%s%N)\\\" >> {log}\", \"{name}\"]\ncwd = \"project_root\"\nrisk = \"low\"\n{extra}\n"
        )
    };
    [
        "[scheduler]\nglobal = 4\nqueue = 200\n[scheduler.groups]\ncpu = 2\n".to_owned(),
        tool("cpu_a", "group = \"cpu\""),
        tool("cpu_b", "group = \"cpu\""),
        tool("db_read", "exclusive = \"db\""),
        tool("db_write", "exclusive = \"db\"\ngroup = \"cpu\""),
        tool("solo", "exclusive = true"),
        tool("free", ""),
    ]
    .concat()
}

#[test]
fn hammer_with_mixed_groups_and_exclusives_never_exceeds_a_limit() {
    let env = TestEnv::new();
    let log = env.work().join("events.log");
    let registry = hammer_registry(&log.display().to_string());
    let names = ["cpu_a", "cpu_b", "db_read", "db_write", "solo", "free"];
    let priorities = ["high", "normal", "low"];
    let requests: Vec<_> = (0..90)
        .map(|i| json!({"id": i, "tool": names[i % names.len()], "priority": priorities[i % 3]}))
        .collect();
    let (run, results) = jsonl(&env, &registry, &requests, &[]);
    run.success();
    assert_eq!(results.len(), 90);
    assert!(
        results.values().all(|r| r["status"] == "success"),
        "{}",
        run.stdout_str()
    );

    let text = std::fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, bool, String)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (
                parts[2].parse().unwrap(),
                parts[1] == "start",
                parts[0].to_owned(),
            )
        })
        .collect();
    assert_eq!(events.len(), 180, "every child wrote a start and an end");
    // Ends before starts at the same instant: touching intervals do not overlap.
    events.sort_by_key(|(t, start, _)| (*t, *start));
    let mut running: BTreeMap<&str, i32> = BTreeMap::new();
    let mut peak: BTreeMap<&str, i32> = BTreeMap::new();
    for (_, start, name) in &events {
        let mut keys = vec!["global"];
        if ["cpu_a", "cpu_b", "db_write"].contains(&name.as_str()) {
            keys.push("cpu");
        }
        if ["db_read", "db_write"].contains(&name.as_str()) {
            keys.push("db");
        }
        if name == "solo" {
            keys.push("solo");
        }
        for key in keys {
            let count = running.entry(key).or_insert(0);
            *count += if *start { 1 } else { -1 };
            let top = peak.entry(key).or_insert(0);
            *top = (*top).max(*count);
        }
    }
    assert!(peak["global"] <= 4, "global limit exceeded: {peak:?}");
    assert!(peak["cpu"] <= 2, "group cpu exceeded: {peak:?}");
    assert_eq!(peak["db"], 1, "exclusive key db overlapped: {peak:?}");
    assert_eq!(peak["solo"], 1, "exclusive tool overlapped: {peak:?}");
    assert!(
        peak["global"] >= 2,
        "the hammer should run things concurrently: {peak:?}"
    );
}
