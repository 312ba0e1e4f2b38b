//! The metrics an operator scrapes: `exec --jsonl --metrics-addr` serves
//! the gauges of what runs and waits now and the queue wait histogram,
//! read while two commands share one slot.

use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::json;

use super::exec_json::Stream;
use crate::common::TestEnv;

/// How long the gauges may take to show a state.
const SETTLE: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The metric `name` (no labels) in Prometheus text, if served.
fn value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}

fn scrape(port: u16) -> Option<String> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text).ok()?;
    Some(text)
}

/// Scrapes until `ready` holds of the text, bounded.
fn scrape_until(port: u16, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        if let Some(text) = scrape(port)
            && ready(&text)
        {
            return text;
        }
        assert!(
            started.elapsed() < SETTLE,
            "the metrics never showed {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn exec_jsonl_serves_the_running_and_queued_gauges_and_the_queue_wait() {
    let env = TestEnv::new();
    let config = env.root.path().join("registry.toml");
    std::fs::write(
        &config,
        "[scheduler]\nglobal = 1\n[[tools]]\nname = \"nap\"\ncommand = [\"sleep\", \"2\"]\ncwd = \"project_root\"\nrisk = \"low\"\n",
    )
    .unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let mut stream = Stream::start_with(&env, &config, &["--metrics-addr", &addr]);
    for id in 0..2 {
        stream.send(&json!({"id": id, "tool": "nap"}));
    }
    let busy = scrape_until(port, "one running and one queued", |text| {
        value(text, "agent_reach_running") == Some(1.0)
            && value(text, "agent_reach_queued") == Some(1.0)
    });
    assert!(
        busy.contains("# TYPE agent_reach_queue_wait_seconds histogram"),
        "{busy}"
    );
    for _ in 0..2 {
        let answer = stream.next(SETTLE);
        assert_eq!(answer["status"], "success", "{answer}");
    }
    assert_eq!(stream.close(), 0);
    let waited: Vec<&str> = busy
        .lines()
        .filter(|l| l.starts_with("agent_reach_queue_wait_seconds_count"))
        .collect();
    assert_eq!(waited.len(), 1, "{busy}");
}

#[test]
fn metrics_addr_is_refused_for_exec_json_and_off_loopback() {
    let env = TestEnv::new();
    let run = env
        .cmd()
        .args(["exec", "--json", "--metrics-addr", "127.0.0.1:1"])
        .stdin("{}")
        .run();
    assert_eq!(run.code, Some(2), "{}", run.stderr_str());
    let run = env
        .cmd()
        .args(["exec", "--jsonl", "--metrics-addr", "0.0.0.0:0"])
        .stdin("")
        .run();
    assert_eq!(run.code, Some(2), "{}", run.stderr_str());
    assert!(
        run.stderr_str().contains("loopback"),
        "{}",
        run.stderr_str()
    );
}
