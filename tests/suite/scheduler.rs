//! The scheduler through `exec --jsonl`: a full queue answers `busy` at once,
//! and under a hammer of mixed groups and exclusive keys no limit is ever
//! exceeded, as the children's own timestamps show.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::TestEnv;
use crate::suite::exec_json::{Stream, exec_process, jsonl};

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

/// A registry whose tool `stamp` appends `start|end NANOS` around a nap of
/// `nap` seconds to `log`, with `[scheduler] global = 1`.
fn stamping_registry(log: &std::path::Path, nap: &str, queue: usize) -> String {
    format!(
        "[scheduler]\nglobal = 1\nqueue = {queue}\n[[tools]]\nname = \"stamp\"\ncommand = [\"sh\", \"-c\", \"echo \\\"$1 start $(date +%s%N)\\\" >> {log}; sleep {nap}; echo \\\"$1 end $(date +%s%N)\\\" >> {log}\", \"sh\", \"{{n}}\"]\ncwd = \"project_root\"\nrisk = \"low\"\nparams = [{{ name = \"n\", type = \"integer\", default = 0 }}]\n",
        log = log.display()
    )
}

/// The `(name, start, end)` intervals the stamping tool wrote, by start.
fn intervals(log: &std::path::Path) -> Vec<(String, u128, u128)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = BTreeMap::new();
    let mut spans = Vec::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let at: u128 = parts[2].parse().unwrap();
        if parts[1] == "start" {
            starts.insert(parts[0].to_owned(), at);
        } else {
            let start = starts.remove(parts[0]).expect("an end after its start");
            spans.push((parts[0].to_owned(), start, at));
        }
    }
    spans.sort_by_key(|span| span.1);
    spans
}

#[track_caller]
fn assert_one_after_the_other(spans: &[(String, u128, u128)]) {
    for pair in spans.windows(2) {
        assert!(
            pair[1].1 >= pair[0].2,
            "{} started before {} ended: {spans:?}",
            pair[1].0,
            pair[0].0
        );
    }
}

#[test]
fn exec_json_processes_side_by_side_with_global_1_run_one_after_the_other() {
    let env = TestEnv::new();
    let log = env.work().join("stamps.log");
    let config = env.write("registry.toml", stamping_registry(&log, "0.3", 8));
    let runs: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..=4)
            .map(|n| {
                let env = &env;
                let config = &config;
                scope.spawn(move || {
                    env.cmd()
                        .args(["exec", "--json", "--config"])
                        .arg(config)
                        .stdin(json!({"id": n, "tool": "stamp", "args": {"n": n}}).to_string())
                        .run()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for run in &runs {
        run.success();
    }
    let spans = intervals(&log);
    assert_eq!(spans.len(), 4, "every process ran its command: {spans:?}");
    assert_one_after_the_other(&spans);
}

#[test]
fn a_holder_killed_with_sigkill_leaks_no_slot() {
    let env = TestEnv::new();
    let log = env.work().join("stamps.log");
    let config = env.write("registry.toml", stamping_registry(&log, "30", 8));
    let mut holder = exec_process(&env, "--json", &config)
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = holder.stdin.take().unwrap();
        writeln!(stdin, "{}", json!({"tool": "stamp", "args": {"n": 1}})).unwrap();
    }
    wait_for_the_holder(&log);
    // The holder (not its command) dies without a word.
    unsafe { libc::kill(holder.id() as i32, libc::SIGKILL) };
    let _ = holder.wait();
    let quick = std::fs::read_to_string(&config)
        .unwrap()
        .replace("sleep 30", "sleep 0");
    let quick = env.write("quick.toml", quick);
    let started = Instant::now();
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(&quick)
        .stdin(json!({"tool": "stamp", "args": {"n": 2}}).to_string())
        .run()
        .success();
    // Whatever is left of the holder's group goes now.
    unsafe { libc::kill(-(holder.id() as i32), libc::SIGKILL) };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the next command waited {:?} for a dead holder's slot",
        started.elapsed()
    );
}

/// Waits (up to 20 s) until the first command has stamped its start.
fn wait_for_the_holder(log: &std::path::Path) {
    let waiting = Instant::now();
    while intervals_started(log) == 0 {
        assert!(
            waiting.elapsed() < Duration::from_secs(20),
            "the holder never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn intervals_started(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" start "))
        .count()
}

#[test]
fn jsonl_with_global_1_runs_and_answers_one_tool_in_arrival_order() {
    let env = TestEnv::new();
    let log = env.work().join("stamps.log");
    let registry = stamping_registry(&log.clone(), "0.02", 64);
    let requests: Vec<_> = (1..=8)
        .map(|n| json!({"id": n, "tool": "stamp", "args": {"n": n}}))
        .collect();
    let (run, _) = jsonl(&env, &registry, &requests, &[]);
    run.success();
    let answered: Vec<u64> = run
        .stdout_str()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(answered, [1, 2, 3, 4, 5, 6, 7, 8]);
    let ran: Vec<String> = intervals(&log).into_iter().map(|span| span.0).collect();
    assert_eq!(ran, ["1", "2", "3", "4", "5", "6", "7", "8"]);
}

#[test]
fn when_the_queue_is_full_the_newest_requests_get_busy() {
    let env = TestEnv::new();
    let log = env.work().join("stamps.log");
    let registry = stamping_registry(&log.clone(), "0.3", 2);
    let requests: Vec<_> = (1..=6)
        .map(|n| json!({"id": n, "tool": "stamp", "args": {"n": n}}))
        .collect();
    let (run, results) = jsonl(&env, &registry, &requests, &[]);
    run.success();
    let status = |n: u64| {
        results[&n.to_string()]["status"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let statuses: Vec<String> = (1..=6).map(status).collect();
    assert_eq!(
        statuses,
        ["success", "success", "success", "busy", "busy", "busy"],
        "one runs, two wait, the three newest are refused"
    );
}

/// Starts `exec --json` of the stamping tool with argument `n`, its answer
/// on a pipe, in a process group of its own.
fn spawn_stamp(env: &TestEnv, config: &std::path::Path, n: u64) -> std::process::Child {
    let mut child = exec_process(env, "--json", config)
        .stdout(std::process::Stdio::piped())
        // A group of its own: a test can kill it with its command.
        .process_group(0)
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(
            stdin,
            "{}",
            json!({"id": n, "tool": "stamp", "args": {"n": n}})
        )
        .unwrap();
    }
    child
}

/// The status of an `exec --json` answer, the process killed (and the test
/// failed) if it has not answered within a minute.
fn status_of(mut child: std::process::Child) -> String {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            panic!("exec --json did not answer within a minute");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    answer["status"].as_str().unwrap().to_owned()
}

/// Tickets in the machine-wide queue now.
fn tickets(env: &TestEnv) -> usize {
    std::fs::read_dir(env.ar_home().join("run/queue"))
        .map(|dir| {
            dir.flatten()
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn processes_waiting_side_by_side_run_in_arrival_order_and_share_one_queue_bound() {
    let env = TestEnv::new();
    let log = env.work().join("stamps.log");
    let release = env.work().join("release");
    // `stamp` with n = 0 holds its slot until the test creates `release`.
    let registry = stamping_registry(&log, "0.2", 4).replace(
        "sleep 0.2",
        &format!(
            "if [ $1 = 0 ]; then while [ ! -e {} ]; do sleep 0.02; done; else sleep 0.2; fi",
            release.display()
        ),
    );
    let config = env.write("registry.toml", registry);
    let holder = spawn_stamp(&env, &config, 0);
    wait_for_the_holder(&log);
    // Four processes arrive one after the other while the slot is held,
    // each once the one before has its place in the queue.
    let mut waiters = Vec::new();
    for n in 1..=4 {
        waiters.push(spawn_stamp(&env, &config, n));
        let queued = Instant::now();
        while tickets(&env) < n as usize {
            assert!(
                queued.elapsed() < Duration::from_secs(20),
                "process {n} never queued"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    // The queue (bound 4) is full machine-wide: the newest is refused at once.
    let refused = spawn_stamp(&env, &config, 5);
    assert_eq!(status_of(refused), "busy");
    std::fs::write(&release, "").unwrap();
    assert_eq!(status_of(holder), "success");
    for waiter in waiters {
        assert_eq!(status_of(waiter), "success");
    }
    let spans = intervals(&log);
    let ran: Vec<&str> = spans.iter().map(|span| span.0.as_str()).collect();
    assert_eq!(ran, ["0", "1", "2", "3", "4"], "{spans:?}");
    assert_one_after_the_other(&spans);
    assert_eq!(tickets(&env), 0, "no ticket is left behind");
}

#[test]
fn processes_killed_at_random_while_holding_or_waiting_leak_nothing() {
    let env = TestEnv::new();
    let log = env.work().join("stamps.log");
    let registry = stamping_registry(&log, "0.3", 16).replace("global = 1", "global = 2");
    let config = env.write("registry.toml", registry);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    println!("seed {seed}");
    let mut state = seed | 1;
    let mut next = move || {
        // xorshift64: enough to pick victims, and the seed says which.
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut children: Vec<(u64, Option<std::process::Child>)> = (1..=8)
        .map(|n| (n, Some(spawn_stamp(&env, &config, n))))
        .collect();
    std::thread::sleep(Duration::from_millis(150 + next() % 300));
    // Three of them die with their commands, holders or waiters alike.
    let mut killed = Vec::new();
    while killed.len() < 3 {
        let pick = (next() % 8) as usize;
        if let (n, Some(child)) = &mut children[pick] {
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            killed.push(*n);
            children[pick].1 = None;
        }
    }
    for (n, child) in children {
        if let Some(child) = child {
            assert_eq!(
                status_of(child),
                "success",
                "process {n} (seed {seed}, killed {killed:?})"
            );
        }
    }
    let spans = intervals(&log);
    let mut events: Vec<(u128, i32)> = spans
        .iter()
        .flat_map(|(_, start, end)| [(*start, 1), (*end, -1)])
        .collect();
    events.sort_by_key(|(at, change)| (*at, *change));
    let mut running = 0;
    for (_, change) in events {
        running += change;
        assert!(
            running <= 2,
            "more than global = 2 ran at once (seed {seed}): {spans:?}"
        );
    }
    // Nothing of the dead is held: a newcomer starts at once, and the
    // dead waiters' tickets are gone once it has looked.
    let started = Instant::now();
    assert_eq!(status_of(spawn_stamp(&env, &config, 9)), "success");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a newcomer waited {:?} (seed {seed}, killed {killed:?})",
        started.elapsed()
    );
    assert_eq!(tickets(&env), 0, "tickets left (seed {seed})");
}
