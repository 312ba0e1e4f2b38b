//! Throughput of the output pipeline's in-process stages, each against a
//! baseline measured in the same run:
//! - terminal clean-up + fold of a real cargo PTY capture (the fixture,
//!   repeated to ~1 MiB), against vte parsing alone with a no-op performer;
//! - 200 MB of plain lines through a whole `StreamCapture` (clean-up and the
//!   1 MiB cap), against the bare head/tail cap and against vte parsing
//!   alone;
//! - the interactive captures (REPLs, vim, less, top, git commit in vi):
//!   cleaned whole and read in session windows, against vte parsing alone;
//! - the spill file a run creates when the store already holds its maximum
//!   number of files (with the default scan interval, and scanning the
//!   directory every time), against a write to an open file.
//!
//! Times are the benchmark thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`),
//! not wall time: the build machine is shared, and CPU time is what the
//! pipeline costs a command. Run: `cargo bench --bench output`; criterion
//! prints medians and MB/s.

use std::hint::black_box;
use std::time::Duration;

use agent_reach::output::headtail::HeadTail;
use agent_reach::output::spill::MAX_SPILL_FILES;
use agent_reach::output::terminal::TerminalCleaner;
use agent_reach::output::{
    CaptureConfig, Redactor, RenderOptions, SpillStore, StreamCapture, render,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const CARGO_CAPTURE: &[u8] = include_bytes!("../tests/fixtures/output/cargo-build.pty");

/// Reads as a PTY delivers them.
const PTY_CHUNK: usize = 4096;
/// Reads as a pipe delivers them.
const PIPE_CHUNK: usize = 64 * 1024;

/// CPU time this thread has used so far.
fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call's duration.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(
        u64::try_from(now.tv_sec).unwrap_or(0),
        u32::try_from(now.tv_nsec).unwrap_or(0),
    )
}

/// Runs `routine` `iters` times and returns the CPU time it took.
fn cpu_time<R>(iters: u64, mut routine: impl FnMut() -> R) -> Duration {
    let start = thread_cpu_time();
    for _ in 0..iters {
        black_box(routine());
    }
    thread_cpu_time() - start
}

struct Ignore;
impl vte::Perform for Ignore {}

fn repeated_capture(target: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(target + CARGO_CAPTURE.len());
    while out.len() < target {
        out.extend_from_slice(CARGO_CAPTURE);
    }
    out
}

fn clean_and_fold(c: &mut Criterion) {
    let input = repeated_capture(1 << 20);
    let mut group = c.benchmark_group("cargo_capture");
    group.throughput(Throughput::Bytes(input.len() as u64));
    group.bench_function("baseline_vte_parse_only", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut parser = vte::Parser::new();
                for chunk in input.chunks(PTY_CHUNK) {
                    parser.advance(&mut Ignore, black_box(chunk));
                }
            })
        });
    });
    group.bench_function("clean", |b| {
        b.iter_custom(|iters| cpu_time(iters, || TerminalCleaner::clean(black_box(&input), false)));
    });
    group.bench_function("capture_clean_fold_render", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut capture = StreamCapture::new(CaptureConfig::default());
                for chunk in input.chunks(PTY_CHUNK) {
                    capture.push(black_box(chunk));
                }
                capture.finish();
                render(&capture.whole(), &RenderOptions::default())
            })
        });
    });
    group.finish();
}

/// The interactive captures of issue 16 (REPLs, vim, less, top, git commit
/// in vi), each through its own cleaner as one session would be.
const INTERACTIVE_CAPTURES: [&[u8]; 6] = [
    include_bytes!("../tests/fixtures/output/python3-repl.pty"),
    include_bytes!("../tests/fixtures/output/node-repl.pty"),
    include_bytes!("../tests/fixtures/output/vim.pty"),
    include_bytes!("../tests/fixtures/output/less.pty"),
    include_bytes!("../tests/fixtures/output/top.pty"),
    include_bytes!("../tests/fixtures/output/git-commit.pty"),
];

/// The terminal stage on the interactive captures, the set repeated to
/// about 1 MiB: cleaning each whole, and a session reading each in windows
/// (one take per 4 KiB read), against vte parsing alone.
fn interactive_captures(c: &mut Criterion) {
    let set: usize = INTERACTIVE_CAPTURES.iter().map(|c| c.len()).sum();
    let rounds = (1 << 20) / set + 1;
    let mut group = c.benchmark_group("interactive_captures");
    group.throughput(Throughput::Bytes((rounds * set) as u64));
    group.bench_function("baseline_vte_parse_only", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                for _ in 0..rounds {
                    for capture in INTERACTIVE_CAPTURES {
                        let mut parser = vte::Parser::new();
                        for chunk in capture.chunks(PTY_CHUNK) {
                            parser.advance(&mut Ignore, black_box(chunk));
                        }
                    }
                }
            })
        });
    });
    group.bench_function("clean", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                for _ in 0..rounds {
                    for capture in INTERACTIVE_CAPTURES {
                        black_box(TerminalCleaner::clean(black_box(capture), false));
                    }
                }
            })
        });
    });
    group.bench_function("session_windows", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                for _ in 0..rounds {
                    for capture in INTERACTIVE_CAPTURES {
                        let mut session = StreamCapture::new(CaptureConfig::default());
                        for chunk in capture.chunks(PTY_CHUNK) {
                            session.push(black_box(chunk));
                            black_box(session.take_window());
                        }
                        session.finish();
                        black_box(session.take_window());
                    }
                }
            })
        });
    });
    group.finish();
}

fn plain_lines_through_the_cap(c: &mut Criterion) {
    let mut block = Vec::with_capacity(PIPE_CHUNK + 100);
    let mut i = 0_u64;
    while block.len() < PIPE_CHUNK {
        block.extend_from_slice(format!("test module::case_{i} ... ok\n").as_bytes());
        i += 1;
    }
    block.truncate(PIPE_CHUNK);
    let total: usize = 200 * 1000 * 1000;
    let chunks = total / block.len();
    let mut group = c.benchmark_group("plain_lines_200MB");
    group.sample_size(10);
    group.throughput(Throughput::Bytes((chunks * block.len()) as u64));
    group.bench_function("baseline_head_tail_cap_only", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut cap = HeadTail::new(1 << 20);
                for _ in 0..chunks {
                    cap.push(black_box(&block));
                }
                cap.omitted_bytes()
            })
        });
    });
    group.bench_function("baseline_vte_parse_only", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut parser = vte::Parser::new();
                for _ in 0..chunks {
                    parser.advance(&mut Ignore, black_box(&block));
                }
            })
        });
    });
    group.bench_function("stream_capture", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut capture = StreamCapture::new(CaptureConfig::default());
                for _ in 0..chunks {
                    capture.push(black_box(&block));
                }
                capture.finish();
                render(&capture.whole(), &RenderOptions::default())
            })
        });
    });
    let yes_block: Vec<u8> = b"y\n".iter().copied().cycle().take(block.len()).collect();
    group.bench_function("stream_capture_yes_lines", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut capture = StreamCapture::new(CaptureConfig::default());
                for _ in 0..chunks {
                    capture.push(black_box(&yes_block));
                }
                capture.finish();
                render(&capture.whole(), &RenderOptions::default())
            })
        });
    });
    group.bench_function("stream_capture_with_3_secrets", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let redactor = Redactor::new(vec![
                    ("GITHUB_TOKEN".into(), b"ghp_0123456789abcdefghij".to_vec()),
                    ("NPM_TOKEN".into(), b"npm_abcdefghij0123456789".to_vec()),
                    ("API_KEY".into(), b"sk-test-0123456789".to_vec()),
                ]);
                let mut capture = StreamCapture::new(CaptureConfig {
                    redactor: Some(redactor),
                    ..CaptureConfig::default()
                });
                for _ in 0..chunks {
                    capture.push(black_box(&block));
                }
                capture.finish();
                render(&capture.whole(), &RenderOptions::default())
            })
        });
    });
    group.finish();
}

/// The cost a run pays for its spill file when the store is full of small
/// files (the cap check scans the directory), against writing one line to
/// an already open file.
fn spill_file_per_run(c: &mut Criterion) {
    let Ok(home) = tempfile::tempdir() else {
        return;
    };
    let Ok(store) = SpillStore::open(home.path(), 64 << 20) else {
        return;
    };
    for i in 0..MAX_SPILL_FILES {
        store.create(&format!("old{i}")).write(b"old output\n");
    }
    let mut group = c.benchmark_group("spill_file_per_run");
    group.bench_function("baseline_write_to_open_file", |b| {
        let mut open = store.create("open");
        b.iter_custom(|iters| cpu_time(iters, || open.write(b"one line of output\n")));
    });
    group.bench_function("create_write_close_with_full_store", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut writer = store.create("run");
                writer.write(b"one line of output\n");
            })
        });
    });
    let scanning = store.clone().with_scan_interval(Duration::ZERO);
    group.bench_function("create_write_close_scanning_every_time", |b| {
        b.iter_custom(|iters| {
            cpu_time(iters, || {
                let mut writer = scanning.create("run");
                writer.write(b"one line of output\n");
            })
        });
    });
    group.finish();
}

criterion_group!(
    benches,
    clean_and_fold,
    interactive_captures,
    plain_lines_through_the_cap,
    spill_file_per_run
);
criterion_main!(benches);
