//! Whole-process benchmark of `serve --listen sandboxd-grpc`: the round
//! trip of `Execute` for `/bin/true` against a bare fork+exec of the same
//! program, interleaved in the same run; and the throughput of a `Start`
//! stream of `yes | head -c 1G` with the server's RSS sampled along it,
//! against the same pipeline into `cat >/dev/null`, run by run. Prints
//! medians; asserts nothing.
//!
//! `cargo bench --bench sandboxd_grpc` (release build of the binary;
//! `AGENT_REACH_BIN=PATH` measures another build of the server, such as
//! the static one `install.sh` ships). The stream is measured with two
//! clients, run by run: one with the HTTP/2 settings of gRPC's C core (the
//! published Python client's grpcio: 4 MiB frames) and one with tonic's
//! default 16 KiB frames.

#![expect(clippy::expect_used, reason = "a benchmark stops at a failed setup")]

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Instant;

use agent_reach::doors::sandboxd_grpc::proto::process_v1::{
    ExecuteRequest, ProcessConfig, StartRequest, StartResponse,
    process_service_client::ProcessServiceClient, start_response::Event,
};

const ROUND_TRIPS: usize = 400;
const STREAM_RUNS: usize = 5;
const STREAM_BYTES: u64 = 1 << 30;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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

/// The baseline of a stream: the same pipeline into `cat >/dev/null`.
fn cat_rate(command: &str) -> f64 {
    let start = Instant::now();
    let status = Command::new("/bin/sh")
        .args(["-c", &format!("{command} | cat >/dev/null")])
        .status();
    assert!(status.is_ok_and(|s| s.success()));
    STREAM_BYTES as f64 / (1 << 20) as f64 / start.elapsed().as_secs_f64()
}

/// The CPU time the server process has used so far (its threads, not its
/// children), in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // utime and stime are fields 14 and 15 of stat(5), 12 and 13 after the name.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf has no memory-safety preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn config(command: &[&str]) -> Option<ProcessConfig> {
    Some(ProcessConfig {
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    })
}

/// The `SETTINGS_MAX_FRAME_SIZE` gRPC's C core advertises (grpcio, the
/// Python client's transport): 4 MiB.
const GRPC_CORE_MAX_FRAME: u32 = 4 << 20;
/// tonic's (hyper's) default: 16 KiB, so the server writes a frame, and
/// makes a system call, per 16 KiB.
const TONIC_MAX_FRAME: u32 = 16 << 10;

/// A channel with HTTP/2 windows as gRPC's C core reaches them by BDP
/// probing (the 64 KiB default would measure round trips, not the
/// server) and the given largest frame.
async fn connect(addr: &str, max_frame: u32) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .initial_stream_window_size(8 << 20)
        .initial_connection_window_size(16 << 20)
        .max_frame_size(max_frame)
        .connect()
        .await
        .expect("connect")
}

fn stream_command() -> String {
    format!("yes | head -c {STREAM_BYTES}")
}

/// The rates and server CPU of one client's streams.
#[derive(Default)]
struct Runs {
    rates: Vec<f64>,
    cpu: Vec<f64>,
}

impl Runs {
    /// Streams `yes | head -c 1G` once, sampling the server's RSS.
    async fn stream(
        &mut self,
        client: &mut ProcessServiceClient<tonic::transport::Channel>,
        server_pid: u32,
        label: &str,
    ) {
        let command = stream_command();
        let mut stream = client
            .start(StartRequest {
                config: config(&["/bin/sh", "-c", &command]),
                pty: None,
            })
            .await
            .expect("start")
            .into_inner();
        let start = Instant::now();
        let cpu_before = cpu_secs(server_pid);
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
        let cpu = cpu_secs(server_pid) - cpu_before;
        assert_eq!(bytes, STREAM_BYTES);
        let rate = bytes as f64 / (1 << 20) as f64 / secs;
        println!(
            "  {label}: {rate:.0} MiB/s; server CPU {cpu:.2} s; server RSS {low:.1}..{high:.1} MiB"
        );
        self.rates.push(rate);
        self.cpu.push(cpu);
    }

    fn report(self, label: &str, cat: f64) {
        let rate = median(self.rates);
        println!(
            "  {label}: {rate:.0} MiB/s ({:.1} % of cat); server CPU {:.2} s per GiB",
            100.0 * rate / cat,
            median(self.cpu)
        );
    }
}

fn main() {
    let home = tempfile::tempdir().expect("tempdir");
    let policy = home.path().join("policy.toml");
    std::fs::write(&policy, "allow_raw_commands = true\n").expect("policy");
    let bin = common::server_bin();
    let mut server = Command::new(bin)
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
        let mut client = ProcessServiceClient::new(connect(&addr, GRPC_CORE_MAX_FRAME).await)
            .max_decoding_message_size(8 << 20);
        let mut tonic_framed =
            ProcessServiceClient::new(connect(&addr, TONIC_MAX_FRAME).await)
                .max_decoding_message_size(8 << 20);
        // Warm-up: the connection, the first spawn, the spill directory.
        for _ in 0..20 {
            let _ = client.execute(ExecuteRequest { config: config(&["/bin/true"]) }).await;
        }
        let (mut bare, mut grpc) = (Vec::new(), Vec::new());
        for _ in 0..ROUND_TRIPS {
            bare.push(common::fork_exec(&["/bin/true"]).as_secs_f64() * 1e3);
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
        // Run by run: the pipeline into cat, then the stream to each client.
        let (mut cat_rates, mut core, mut framed) = (Vec::new(), Runs::default(), Runs::default());
        for run in 0..STREAM_RUNS {
            let cat = cat_rate(&stream_command());
            cat_rates.push(cat);
            println!("Start stream run {run}: into cat {cat:.0} MiB/s");
            core.stream(&mut client, server_pid, "4 MiB frames").await;
            framed.stream(&mut tonic_framed, server_pid, "16 KiB frames").await;
        }
        let cat = median(cat_rates);
        println!("Start stream of yes | head -c 1G, medians of {STREAM_RUNS}; into cat {cat:.0} MiB/s:");
        core.report("client with gRPC core's 4 MiB frames", cat);
        framed.report("client with tonic's 16 KiB frames", cat);
    });
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(server_pid as i32, libc::SIGTERM) };
    let _ = server.wait();
}
