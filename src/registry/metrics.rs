//! Per-tool counters and a latency histogram, readable as Prometheus text
//! (for `--metrics-addr`) and as JSON (for an MCP resource).
//!
//! One [`Metrics`] per process: the dispatcher records the registry's
//! requests into it (and how long each waited in the queue), and `serve`
//! records its built-in tools (and the number of live sessions) into the
//! same one. Gauges of what runs and waits now, and of the sessions of
//! every door, are read from their owners ([`Probe`]s) when the metrics
//! are.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::result::Status;

/// Histogram bucket upper bounds, in seconds.
pub(crate) const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The label for requests that name no known tool (so clients cannot
/// create unbounded label values).
pub(crate) const UNKNOWN_TOOL_LABEL: &str = "_unknown";
/// The label for raw `command` requests.
pub(crate) const RAW_COMMAND_LABEL: &str = "_command";

/// A counter's name, help text and how to read it from [`ToolCounts`].
type CounterDef = (&'static str, &'static str, fn(&ToolCounts) -> u64);

/// One tool's counts.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub(crate) struct ToolCounts {
    /// Requests answered, whatever the answer.
    pub(crate) calls: u64,
    pub(crate) runs: u64,
    pub(crate) successes: u64,
    pub(crate) failures: u64,
    pub(crate) timeouts: u64,
    pub(crate) errors: u64,
    pub(crate) busy: u64,
    pub(crate) rejected: u64,
    pub(crate) cached: u64,
    /// Cumulative counts per bucket of [`BUCKETS`] (plus `+Inf` = `runs`).
    pub(crate) latency_buckets: Vec<u64>,
    pub(crate) latency_sum_seconds: f64,
}

/// A reading taken from its owner each time the metrics are read.
pub(crate) struct Probe<T>(Box<dyn Fn() -> T + Send + Sync>);

impl<T> Probe<T> {
    pub(crate) fn new(read: impl Fn() -> T + Send + Sync + 'static) -> Self {
        Self(Box::new(read))
    }
}

impl<T> std::fmt::Debug for Probe<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Probe(..)")
    }
}

/// Commands running and waiting in this process's scheduler now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Load {
    pub(crate) running: usize,
    pub(crate) queued: usize,
}

/// How long requests waited for a slot of the scheduler.
#[derive(Debug, Clone)]
struct QueueWait {
    /// Cumulative counts per bucket of [`BUCKETS`].
    buckets: Vec<u64>,
    sum_seconds: f64,
    count: u64,
}

impl Default for QueueWait {
    fn default() -> Self {
        Self {
            buckets: vec![0; BUCKETS.len()],
            sum_seconds: 0.0,
            count: 0,
        }
    }
}

/// Counts `seconds` in every cumulative bucket of [`BUCKETS`] it fits.
fn observe(buckets: &mut [u64], seconds: f64) {
    for (bucket, bound) in buckets.iter_mut().zip(BUCKETS) {
        if seconds <= *bound {
            *bucket += 1;
        }
    }
}

/// The metrics of one process.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    /// The scheduler's load, read when the metrics are.
    load: OnceLock<Probe<Load>>,
    /// Live sessions by the door that started them, read when the metrics are.
    sessions_by_door: OnceLock<Probe<BTreeMap<String, usize>>>,
    queue_wait: Mutex<QueueWait>,
    tools: Mutex<BTreeMap<String, ToolCounts>>,
    /// Sessions a server holds (started, not yet ended and taken).
    live_sessions: AtomicU64,
    /// MCP clients over HTTP connected (MCP sessions open).
    clients: AtomicU64,
    /// Live sessions by the client holding them (`stdio`, `mcp-N`).
    sessions_by_client: Mutex<BTreeMap<String, usize>>,
}

impl Metrics {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Counts one answered request and its outcome.
    pub(crate) fn record(&self, tool: &str, status: Status, cached: bool, duration: Duration) {
        self.record_call(tool);
        self.count_outcome(tool, status, cached, duration);
    }

    /// Counts one answered request whose outcome is counted apart (or not
    /// at all): a session's command ends in a later call than its start.
    pub(crate) fn record_call(&self, tool: &str) {
        let mut tools = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        counts_of(&mut tools, tool).calls += 1;
    }

    /// Counts an outcome without a request: a run of `tool` that ended after
    /// `duration` (success, failure, timeout), or a refusal.
    pub(crate) fn record_outcome(&self, tool: &str, status: Status, duration: Duration) {
        self.count_outcome(tool, status, false, duration);
    }

    /// Where the gauges of running and queued commands are read from (the
    /// scheduler); set once.
    pub(crate) fn watch_load(&self, probe: Probe<Load>) {
        let _ = self.load.set(probe);
    }

    /// Where the gauge of live sessions by door is read from (the one
    /// session table of the doors); set once.
    pub(crate) fn watch_sessions_by_door(&self, probe: Probe<BTreeMap<String, usize>>) {
        let _ = self.sessions_by_door.set(probe);
    }

    /// Counts a request's wait for a slot of the scheduler.
    pub(crate) fn record_queue_wait(&self, waited: Duration) {
        let mut wait = crate::sync::lock(&self.queue_wait);
        let seconds = waited.as_secs_f64();
        observe(&mut wait.buckets, seconds);
        wait.sum_seconds += seconds;
        wait.count += 1;
    }

    /// Commands running and queued now (zero where nothing is watched).
    pub(crate) fn load(&self) -> Load {
        self.load.get().map(|probe| (probe.0)()).unwrap_or_default()
    }

    /// Live sessions by door now.
    pub(crate) fn sessions_by_door(&self) -> BTreeMap<String, usize> {
        self.sessions_by_door
            .get()
            .map(|probe| (probe.0)())
            .unwrap_or_default()
    }

    /// Sets the gauge of live sessions.
    pub(crate) fn set_live_sessions(&self, sessions: usize) {
        self.live_sessions.store(sessions as u64, Ordering::Relaxed);
    }

    /// The gauge of live sessions.
    pub(crate) fn live_sessions(&self) -> u64 {
        self.live_sessions.load(Ordering::Relaxed)
    }

    /// Sets the gauges of connected clients and of sessions by client.
    pub(crate) fn set_clients(&self, clients: usize, sessions_by_client: BTreeMap<String, usize>) {
        self.clients.store(clients as u64, Ordering::Relaxed);
        *self
            .sessions_by_client
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = sessions_by_client;
    }

    /// The gauge of connected clients over HTTP.
    pub(crate) fn clients(&self) -> u64 {
        self.clients.load(Ordering::Relaxed)
    }

    /// Live sessions by client (clients holding none left out).
    pub(crate) fn sessions_by_client(&self) -> BTreeMap<String, usize> {
        self.sessions_by_client
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn count_outcome(&self, tool: &str, status: Status, cached: bool, duration: Duration) {
        let mut tools = self.tools.lock().unwrap_or_else(|p| p.into_inner());
        let counts = counts_of(&mut tools, tool);
        if cached {
            counts.cached += 1;
        }
        match status {
            Status::Busy => counts.busy += 1,
            Status::Rejected => counts.rejected += 1,
            Status::Error => counts.errors += 1,
            ran => {
                if cached {
                    return;
                }
                counts.runs += 1;
                match ran {
                    Status::Success => counts.successes += 1,
                    Status::Timeout => counts.timeouts += 1,
                    _ => counts.failures += 1,
                }
                let seconds = duration.as_secs_f64();
                counts.latency_sum_seconds += seconds;
                observe(&mut counts.latency_buckets, seconds);
            }
        }
    }

    /// A copy of every tool's counts.
    pub(crate) fn snapshot(&self) -> BTreeMap<String, ToolCounts> {
        self.tools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The counts as JSON:
    /// `{"tools": {NAME: {...}}, "buckets_seconds": [...], "live_sessions": N,
    /// "clients": N, "live_sessions_by_client": {CLIENT: N}}`.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let load = self.load();
        serde_json::json!({
            "buckets_seconds": BUCKETS,
            "tools": self.snapshot(),
            "live_sessions": self.live_sessions(),
            "clients": self.clients(),
            "live_sessions_by_client": self.sessions_by_client(),
            "live_sessions_by_door": self.sessions_by_door(),
            "running": load.running,
            "queued": load.queued,
        })
    }

    /// The Prometheus text exposition format (version 0.0.4).
    pub(crate) fn prometheus_text(&self) -> String {
        let tools = self.snapshot();
        let mut out = String::new();
        let counters: [CounterDef; 9] = [
            ("calls", "Requests answered", |c| c.calls),
            ("runs", "Commands run to an end", |c| c.runs),
            ("successes", "Runs that exited 0", |c| c.successes),
            ("failures", "Runs that exited non-zero", |c| c.failures),
            ("timeouts", "Runs killed at their timeout", |c| c.timeouts),
            ("errors", "Requests agent-reach failed to serve", |c| {
                c.errors
            }),
            ("busy", "Requests refused because the queue was full", |c| {
                c.busy
            }),
            (
                "rejected",
                "Requests refused as invalid or not allowed",
                |c| c.rejected,
            ),
            ("cached", "Requests answered from the cache", |c| c.cached),
        ];
        for (name, help, get) in counters {
            let _ = writeln!(out, "# HELP agent_reach_tool_{name}_total {help}.");
            let _ = writeln!(out, "# TYPE agent_reach_tool_{name}_total counter");
            for (tool, counts) in &tools {
                let _ = writeln!(
                    out,
                    "agent_reach_tool_{name}_total{{tool=\"{}\"}} {}",
                    escape(tool),
                    get(counts)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP agent_reach_tool_duration_seconds Run time of commands."
        );
        let _ = writeln!(out, "# TYPE agent_reach_tool_duration_seconds histogram");
        for (tool, counts) in &tools {
            let tool = escape(tool);
            for (bound, count) in BUCKETS.iter().zip(&counts.latency_buckets) {
                let _ = writeln!(
                    out,
                    "agent_reach_tool_duration_seconds_bucket{{tool=\"{tool}\",le=\"{bound}\"}} {count}"
                );
            }
            let _ = writeln!(
                out,
                "agent_reach_tool_duration_seconds_bucket{{tool=\"{tool}\",le=\"+Inf\"}} {}",
                counts.runs
            );
            let _ = writeln!(
                out,
                "agent_reach_tool_duration_seconds_sum{{tool=\"{tool}\"}} {}",
                counts.latency_sum_seconds
            );
            let _ = writeln!(
                out,
                "agent_reach_tool_duration_seconds_count{{tool=\"{tool}\"}} {}",
                counts.runs
            );
        }
        let _ = writeln!(
            out,
            "# HELP agent_reach_sessions Sessions the server holds."
        );
        let _ = writeln!(out, "# TYPE agent_reach_sessions gauge");
        let _ = writeln!(out, "agent_reach_sessions {}", self.live_sessions());
        let _ = writeln!(
            out,
            "# HELP agent_reach_clients MCP clients connected over HTTP."
        );
        let _ = writeln!(out, "# TYPE agent_reach_clients gauge");
        let _ = writeln!(out, "agent_reach_clients {}", self.clients());
        let _ = writeln!(
            out,
            "# HELP agent_reach_client_sessions Sessions the server holds, by the client holding them."
        );
        let _ = writeln!(out, "# TYPE agent_reach_client_sessions gauge");
        for (client, n) in self.sessions_by_client() {
            let client = escape(&client);
            let _ = writeln!(
                out,
                "agent_reach_client_sessions{{client=\"{client}\"}} {n}"
            );
        }
        self.live_text(&mut out);
        out
    }

    /// The gauges read now and the queue wait histogram.
    fn live_text(&self, out: &mut String) {
        let load = self.load();
        let _ = writeln!(
            out,
            "# HELP agent_reach_running Commands running now (one-shot and sessions' commands holding a slot)."
        );
        let _ = writeln!(out, "# TYPE agent_reach_running gauge");
        let _ = writeln!(out, "agent_reach_running {}", load.running);
        let _ = writeln!(
            out,
            "# HELP agent_reach_queued Requests waiting for a slot of the scheduler now."
        );
        let _ = writeln!(out, "# TYPE agent_reach_queued gauge");
        let _ = writeln!(out, "agent_reach_queued {}", load.queued);
        let _ = writeln!(
            out,
            "# HELP agent_reach_door_sessions Live sessions, by the door that started them."
        );
        let _ = writeln!(out, "# TYPE agent_reach_door_sessions gauge");
        for (door, n) in self.sessions_by_door() {
            let door = escape(&door);
            let _ = writeln!(out, "agent_reach_door_sessions{{door=\"{door}\"}} {n}");
        }
        let wait = crate::sync::lock(&self.queue_wait).clone();
        let _ = writeln!(
            out,
            "# HELP agent_reach_queue_wait_seconds Time requests waited for a slot of the scheduler."
        );
        let _ = writeln!(out, "# TYPE agent_reach_queue_wait_seconds histogram");
        for (bound, count) in BUCKETS.iter().zip(&wait.buckets) {
            let _ = writeln!(
                out,
                "agent_reach_queue_wait_seconds_bucket{{le=\"{bound}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "agent_reach_queue_wait_seconds_bucket{{le=\"+Inf\"}} {}",
            wait.count
        );
        let _ = writeln!(
            out,
            "agent_reach_queue_wait_seconds_sum {}",
            wait.sum_seconds
        );
        let _ = writeln!(out, "agent_reach_queue_wait_seconds_count {}", wait.count);
    }
}

fn counts_of<'a>(tools: &'a mut BTreeMap<String, ToolCounts>, tool: &str) -> &'a mut ToolCounts {
    let counts = tools.entry(tool.to_owned()).or_default();
    if counts.latency_buckets.is_empty() {
        counts.latency_buckets = vec![0; BUCKETS.len()];
    }
    counts
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_histogram_add_up() {
        let m = Metrics::new();
        m.record("t", Status::Success, false, Duration::from_millis(3));
        m.record("t", Status::Failure, false, Duration::from_millis(200));
        m.record("t", Status::Timeout, false, Duration::from_secs(2));
        m.record("t", Status::Busy, false, Duration::ZERO);
        m.record("t", Status::Rejected, false, Duration::ZERO);
        m.record("t", Status::Success, true, Duration::ZERO);
        let c = &m.snapshot()["t"];
        assert_eq!(
            (c.runs, c.failures, c.timeouts, c.busy, c.rejected, c.cached),
            (3, 1, 1, 1, 1, 1)
        );
        assert_eq!(c.latency_buckets[0], 1);
        assert_eq!(*c.latency_buckets.last().unwrap(), 3);
        let text = m.prometheus_text();
        assert!(
            text.contains("agent_reach_tool_runs_total{tool=\"t\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("agent_reach_tool_duration_seconds_bucket{tool=\"t\",le=\"+Inf\"} 3")
        );
        assert_eq!(m.to_json()["tools"]["t"]["busy"], 1);
        assert_eq!(c.calls, 6);
    }

    #[test]
    fn outcomes_apart_from_calls_and_the_sessions_gauge() {
        let m = Metrics::new();
        m.record_call("exec_command");
        m.record_call("exec_command");
        m.record_outcome("exec_command", Status::Failure, Duration::from_millis(30));
        m.record_outcome("exec_command", Status::Rejected, Duration::ZERO);
        m.set_live_sessions(2);
        let c = &m.snapshot()["exec_command"];
        assert_eq!((c.calls, c.runs, c.failures, c.rejected), (2, 1, 1, 1));
        let text = m.prometheus_text();
        assert!(
            text.contains("agent_reach_tool_calls_total{tool=\"exec_command\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("agent_reach_sessions 2\n"), "{text}");
        assert_eq!(m.to_json()["live_sessions"], 2);
    }

    #[test]
    fn clients_and_their_sessions_are_gauges() {
        let m = Metrics::new();
        m.set_clients(
            2,
            BTreeMap::from([("mcp-1".to_owned(), 3), ("stdio".to_owned(), 1)]),
        );
        let text = m.prometheus_text();
        assert!(text.contains("agent_reach_clients 2\n"), "{text}");
        assert!(
            text.contains("agent_reach_client_sessions{client=\"mcp-1\"} 3\n"),
            "{text}"
        );
        let json = m.to_json();
        assert_eq!(json["clients"], 2);
        assert_eq!(json["live_sessions_by_client"]["mcp-1"], 3);
    }
}
