//! Whole-process benchmark of `serve --listen sandboxd-grpc`: the round
//! trip of `Execute` for `/bin/true` against a bare fork+exec of the same
//! program, interleaved in the same run; and the throughput of a `Start`
//! stream of `yes | head -c 1G` with the server's RSS sampled along it.
//! Prints medians; asserts nothing.
//!
//! `cargo bench --bench sandboxd_grpc` (release build of the binary).

#![expect(clippy::expect_used, reason = "a benchmark stops at a failed setup")]

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_reach::serve::sandboxd_grpc::proto::process_v1::{
    ExecuteRequest, ProcessConfig, StartRequest, StartResponse,
    process_service_client::ProcessServiceClient, start_response::Event,
};

const ROUND_TRIPS: usize = 400;
const STREAM_RUNS: usize = 3;
const STREAM_BYTES: u64 = 1 << 30;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn fork_exec_true() -> Duration {
    let start = Instant::now();
    let status = Command::new("/bin/true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    start.elapsed()
}

fn rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn config(command: &[&str]) -> Option<ProcessConfig> {
    Some(ProcessConfig {
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    })
}

fn main() {
    let home = tempfile::tempdir().expect("tempdir");
    let policy = home.path().join("policy.toml");
    std::fs::write(&policy, "allow_raw_commands = true\n").expect("policy");
    let mut server = Command::new(env!("CARGO_BIN_EXE_agent-reach"))
        .args(["serve", "--listen", "sandboxd-grpc=127.0.0.1:0", "--root"])
        .arg(home.path())
        .arg("--config")
        .arg(&policy)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home.path())
        .env("AGENT_REACH_HOME", home.path().join("ar"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let server_pid = server.id();
    let stderr = server.stderr.take().expect("stderr");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("the server said nothing").expect("log");
        if let Some(at) = line.find("\"addr\":\"") {
            let rest = &line[at + 8..];
            break rest[..rest.find('"').expect("addr")].to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut client = ProcessServiceClient::connect(format!("http://{addr}"))
            .await
            .expect("connect")
            .max_decoding_message_size(8 << 20);
        // Warm-up: the connection, the first spawn, the spill directory.
        for _ in 0..20 {
            let _ = client.execute(ExecuteRequest { config: config(&["/bin/true"]) }).await;
        }
        let (mut bare, mut grpc) = (Vec::new(), Vec::new());
        for _ in 0..ROUND_TRIPS {
            bare.push(fork_exec_true().as_secs_f64() * 1e3);
            let start = Instant::now();
            let done = client
                .execute(ExecuteRequest { config: config(&["/bin/true"]) })
                .await
                .expect("execute");
            assert_eq!(done.into_inner().exit_code, 0);
            grpc.push(start.elapsed().as_secs_f64() * 1e3);
        }
        let (bare, grpc) = (median(bare), median(grpc));
        println!(
            "Execute /bin/true round trip: median {grpc:.3} ms; bare fork+exec {bare:.3} ms; added {:.3} ms ({ROUND_TRIPS} interleaved)",
            grpc - bare
        );
        let mut rates = Vec::new();
        for run in 0..STREAM_RUNS {
            let command = format!("yes | head -c {STREAM_BYTES}");
            let mut stream = client
                .start(StartRequest { config: config(&["/bin/sh", "-c", &command]), pty: None })
                .await
                .expect("start")
                .into_inner();
            let start = Instant::now();
            let mut bytes = 0u64;
            let mut next_sample = 0u64;
            let (mut low, mut high) = (f64::MAX, 0.0f64);
            while let Some(StartResponse { event }) = stream.message().await.expect("stream") {
                match event {
                    Some(Event::Stdout(b)) => bytes += b.len() as u64,
                    Some(Event::Exit(exit)) => assert_eq!(exit.exit_code, 0),
                    _ => {}
                }
                if bytes >= next_sample {
                    let rss = rss_mib(server_pid);
                    (low, high) = (low.min(rss), high.max(rss));
                    next_sample += 64 << 20;
                }
            }
            let secs = start.elapsed().as_secs_f64();
            assert_eq!(bytes, STREAM_BYTES);
            let rate = bytes as f64 / (1 << 20) as f64 / secs;
            println!("Start stream run {run}: {rate:.0} MiB/s; server RSS {low:.1}..{high:.1} MiB");
            rates.push(rate);
        }
        println!("Start stream of yes | head -c 1G: median {:.0} MiB/s", median(rates));
    });
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(server_pid as i32, libc::SIGTERM) };
    let _ = server.wait();
}
