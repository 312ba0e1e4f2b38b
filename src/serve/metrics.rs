//! Counters for `--metrics-addr`: calls, errors and time per tool, and live
//! sessions, served as Prometheus text over plain HTTP.
//!
//! Hand-written on purpose: one GET, one plain-text answer; an HTTP framework
//! would be most of the binary's size for nothing.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Default, Clone, Copy)]
struct ToolCounters {
    calls: u64,
    errors: u64,
    seconds: f64,
}

/// Per-tool counters, shared by every call.
#[derive(Debug, Default)]
pub struct Metrics {
    tools: Mutex<BTreeMap<String, ToolCounters>>,
}

impl Metrics {
    /// Counts one call of `tool`.
    pub fn record(&self, tool: &str, took: Duration, failed: bool) {
        let mut tools = self
            .tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = tools.entry(tool.to_owned()).or_default();
        c.calls += 1;
        c.errors += u64::from(failed);
        c.seconds += took.as_secs_f64();
    }

    /// The Prometheus text exposition of the counters.
    pub fn render(&self, live_sessions: usize) -> String {
        let tools = self
            .tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = String::new();
        let _ = writeln!(out, "# TYPE agent_reach_tool_calls_total counter");
        for (name, c) in tools.iter() {
            let _ = writeln!(
                out,
                "agent_reach_tool_calls_total{{tool=\"{name}\"}} {}",
                c.calls
            );
        }
        let _ = writeln!(out, "# TYPE agent_reach_tool_errors_total counter");
        for (name, c) in tools.iter() {
            let _ = writeln!(
                out,
                "agent_reach_tool_errors_total{{tool=\"{name}\"}} {}",
                c.errors
            );
        }
        let _ = writeln!(out, "# TYPE agent_reach_tool_seconds_total counter");
        for (name, c) in tools.iter() {
            let _ = writeln!(
                out,
                "agent_reach_tool_seconds_total{{tool=\"{name}\"}} {:.6}",
                c.seconds
            );
        }
        let _ = writeln!(out, "# TYPE agent_reach_sessions gauge");
        let _ = writeln!(out, "agent_reach_sessions {live_sessions}");
        out
    }
}

/// Binds `addr` now (so a bad address fails the start) and returns a task
/// body that answers every connection with the metrics.
pub async fn serve(
    addr: SocketAddr,
    render: impl Fn() -> String + Send + Sync + 'static,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let render = std::sync::Arc::new(render);
    Ok(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let render = render.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = tokio::time::timeout(Duration::from_secs(2), stream.read(&mut buf)).await;
                let body = render();
                let head = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_as_prometheus_text() {
        let m = Metrics::default();
        m.record("exec_command", Duration::from_millis(500), false);
        m.record("exec_command", Duration::from_millis(500), true);
        let text = m.render(3);
        assert!(
            text.contains("agent_reach_tool_calls_total{tool=\"exec_command\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains("agent_reach_tool_errors_total{tool=\"exec_command\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("agent_reach_tool_seconds_total{tool=\"exec_command\"} 1.000000\n"),
            "{text}"
        );
        assert!(text.contains("agent_reach_sessions 3\n"), "{text}");
    }
}
