//! The metrics an operator scrapes: `exec --jsonl --metrics-addr` serves
//! the gauges of what runs and waits now and the queue wait histogram,
//! read while two commands share one slot.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::common::{TestEnv, bin};

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
    let mut child = std::process::Command::new(bin())
        .args(["exec", "--jsonl", "--metrics-addr"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--config")
        .arg(&config)
        .arg("--root")
        .arg(env.work())
        .env("AGENT_REACH_HOME", env.ar_home())
        .current_dir(env.work())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
    let mut input = child.stdin.take().unwrap();
    for id in 0..2 {
        writeln!(input, "{}", json!({"id": id, "tool": "nap"})).unwrap();
    }
    input.flush().unwrap();
    let busy = scrape_until(port, "one running and one queued", |text| {
        value(text, "agent_reach_running") == Some(1.0)
            && value(text, "agent_reach_queued") == Some(1.0)
    });
    assert!(
        busy.contains("# TYPE agent_reach_queue_wait_seconds histogram"),
        "{busy}"
    );
    drop(input);
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    for _ in 0..2 {
        line.clear();
        output.read_line(&mut line).unwrap();
        assert!(line.contains("\"success\""), "{line}");
    }
    // The stream ended with its input: the last scrape is from before.
    assert!(child.wait().unwrap().success());
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
