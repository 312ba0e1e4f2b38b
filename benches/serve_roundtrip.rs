//! Whole-process benchmark of `agent-reach serve`: the round trip of
//! `exec_command` for `true` and calls per second with 1, 8 and 32 requests in
//! flight from one client, against a bare fork+exec of the same shell command
//! measured in the same run. Prints medians and ratios; asserts nothing.
//!
//! `cargo bench --bench serve_roundtrip` (release build of the binary;
//! `AGENT_REACH_BIN=PATH` measures another build, such as an older
//! commit's, against the same baseline).

#![expect(clippy::expect_used, reason = "a benchmark stops at a failed setup")]

mod common;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;

/// The command the bare baseline forks and execs (the shell the server runs `true` with).
const BARE: &[&str] = &["/bin/bash", "-c", "true"];

const SEQUENTIAL_CALLS: usize = 300;
const CONCURRENT_CALLS: usize = 640;

/// Median, 90th percentile and mean, in milliseconds.
fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    (ms(v[v.len() / 2]), ms(v[v.len() * 9 / 10]), mean)
}

fn bare_rate(in_flight: usize) -> f64 {
    let start = Instant::now();
    let per_thread = CONCURRENT_CALLS / in_flight;
    let threads: Vec<_> = (0..in_flight)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..per_thread {
                    common::fork_exec(BARE);
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    (per_thread * in_flight) as f64 / start.elapsed().as_secs_f64()
}

fn exec_true() -> CallToolRequestParams {
    let args = serde_json::json!({"cmd": "true"});
    CallToolRequestParams::new("exec_command")
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let home = tempfile::tempdir().expect("tempdir");
        let mut cmd = tokio::process::Command::new(
            common::server_bin(),
        );
        cmd.arg("serve")
            .arg("--root")
            .arg(home.path())
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", home.path())
            .env("AGENT_REACH_HOME", home.path().join("ar"))
            .env("SHELL", "/bin/bash")
            .env("AGENT_REACH_LOG", "warn");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server");
        let client = Arc::new(().serve(transport).await.expect("handshake"));

        // Warm up both paths.
        for _ in 0..20 {
            common::fork_exec(BARE);
            let _ = client.call_tool(exec_true()).await;
        }

        let bare: Vec<Duration> = (0..SEQUENTIAL_CALLS).map(|_| common::fork_exec(BARE)).collect();
        let mut served = Vec::with_capacity(SEQUENTIAL_CALLS);
        for _ in 0..SEQUENTIAL_CALLS {
            let start = Instant::now();
            let r = client.call_tool(exec_true()).await.expect("call");
            assert_ne!(r.is_error, Some(true));
            served.push(start.elapsed());
        }
        let (bare, served) = (stats(bare), stats(served));
        println!("round trip of `true` (bash -c true), {SEQUENTIAL_CALLS} calls, ms:");
        println!("  bare fork+exec+wait : median {:>7.3}  p90 {:>7.3}  mean {:>7.3}", bare.0, bare.1, bare.2);
        println!("  serve exec_command  : median {:>7.3}  p90 {:>7.3}  mean {:>7.3}", served.0, served.1, served.2);
        println!(
            "  added per call      : median {:>7.3}  (ratio {:.2}x)",
            served.0 - bare.0,
            served.0 / bare.0
        );
        println!("calls per second, {CONCURRENT_CALLS} calls:");
        for in_flight in [1usize, 8, 32] {
            let bare = bare_rate(in_flight);
            let start = Instant::now();
            let per_task = CONCURRENT_CALLS / in_flight;
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..in_flight {
                let client = client.clone();
                tasks.spawn(async move {
                    for _ in 0..per_task {
                        let _ = client.call_tool(exec_true()).await;
                    }
                });
            }
            while tasks.join_next().await.is_some() {}
            let served = (per_task * in_flight) as f64 / start.elapsed().as_secs_f64();
            println!(
                "  {in_flight:>2} in flight: bare {bare:>8.1}/s  serve {served:>8.1}/s  ratio {:.2}",
                served / bare
            );
        }
        drop(client);
    });
}
