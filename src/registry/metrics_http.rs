//! `--metrics-addr`: the metrics in the Prometheus text format over plain
//! HTTP, on a loopback address only (they name tools and load, nothing for
//! the network at large). One tiny request per connection, bounded in size
//! and time, so a slow or hostile client cannot pin anything.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::metrics::Metrics;

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MetricsServeError {
    #[error("metrics address {addr} is not a loopback address; use 127.0.0.1 or [::1]")]
    NotLoopback { addr: SocketAddr },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// Binds `addr` (loopback only) and returns the listener, so a caller learns
/// about a bad address before serving; then call [`serve_listener`].
pub(crate) async fn bind_metrics(addr: SocketAddr) -> Result<TcpListener, MetricsServeError> {
    if !addr.ip().is_loopback() {
        return Err(MetricsServeError::NotLoopback { addr });
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsServeError::Bind { addr, source })
}

/// Binds `addr` (loopback only) and serves `metrics` there on a task of
/// its own (`serve --metrics-addr`, `exec --jsonl --metrics-addr`).
pub(crate) async fn start(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
) -> Result<tokio::task::JoinHandle<()>, MetricsServeError> {
    let listener = bind_metrics(addr).await?;
    Ok(tokio::spawn(serve_listener(listener, metrics)))
}

/// Serves `GET /metrics` on a bound listener, forever.
pub(crate) async fn serve_listener(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), answer(stream, &metrics)).await;
        });
    }
}

async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line = request.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let host = String::from_utf8_lossy(&request)
        .lines()
        .skip(1)
        .find_map(|l| {
            l.split_once(':')
                .filter(|(name, _)| name.trim().eq_ignore_ascii_case("host"))
                .map(|(_, value)| value.trim().to_owned())
        });
    // As at the doors, a request without a Host (HTTP/1.0) is no browser's.
    let foreign = host.is_some_and(|h| !crate::gate::names_loopback(&h));
    let (status, content_type, body) = match (method, path) {
        _ if foreign => (
            "403 Forbidden",
            "text/plain",
            "the Host header must name this machine's loopback (localhost, 127.0.0.1, [::1])\n"
                .to_owned(),
        ),
        ("GET", "/metrics") | ("GET", "/") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.prometheus_text(),
        ),
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "not found; try /metrics\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_non_loopback_and_serves_metrics() {
        let err = bind_metrics("0.0.0.0:0".parse().unwrap())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not a loopback"));
        let listener = bind_metrics("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = Arc::new(Metrics::new());
        metrics.record(
            "t",
            crate::result::Status::Success,
            false,
            Duration::from_millis(1),
        );
        let server = tokio::spawn(serve_listener(listener, metrics));
        let get = |host: &'static str| async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let request = format!("GET /metrics HTTP/1.1\r\nHost: {host}\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut reply = String::new();
            stream.read_to_string(&mut reply).await.unwrap();
            reply
        };
        let reply = get("127.0.0.1").await;
        assert!(reply.starts_with("HTTP/1.1 200 OK"), "{reply}");
        assert!(reply.contains("agent_reach_tool_runs_total{tool=\"t\"} 1"));
        // A page that rebinds its own name to 127.0.0.1 sends that name.
        let reply = get("evil.example:9090").await;
        assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
        assert!(!reply.contains("agent_reach_tool_runs_total"), "{reply}");
        server.abort();
    }
}
