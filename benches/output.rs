//! Throughput of the output pipeline's in-process stages, each against a
//! baseline measured in the same run:
//! - terminal clean-up + fold of a real cargo PTY capture (the fixture,
//!   repeated to ~1 MiB), against vte parsing alone with a no-op performer;
//! - 200 MB of plain lines through a whole `StreamCapture` (clean-up and the
//!   1 MiB cap), against the bare head/tail cap.
//!
//! Run: `cargo bench --bench output`; criterion prints medians and MB/s.

use std::hint::black_box;

use agent_reach::output::headtail::HeadTail;
use agent_reach::output::terminal::TerminalCleaner;
use agent_reach::output::{CaptureConfig, RenderOptions, StreamCapture, render};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const CARGO_CAPTURE: &[u8] = include_bytes!("../tests/fixtures/output/cargo-build.pty");

/// Reads as a PTY delivers them.
const PTY_CHUNK: usize = 4096;
/// Reads as a pipe delivers them.
const PIPE_CHUNK: usize = 64 * 1024;

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
        b.iter(|| {
            let mut parser = vte::Parser::new();
            for chunk in input.chunks(PTY_CHUNK) {
                parser.advance(&mut Ignore, black_box(chunk));
            }
        });
    });
    group.bench_function("clean", |b| {
        b.iter(|| black_box(TerminalCleaner::clean(black_box(&input), false)));
    });
    group.bench_function("capture_clean_fold_render", |b| {
        b.iter(|| {
            let mut capture = StreamCapture::new(CaptureConfig::default());
            for chunk in input.chunks(PTY_CHUNK) {
                capture.push(black_box(chunk));
            }
            capture.finish();
            black_box(render(&capture.whole(), &RenderOptions::default()))
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
        b.iter(|| {
            let mut cap = HeadTail::new(1 << 20);
            for _ in 0..chunks {
                cap.push(black_box(&block));
            }
            black_box(cap.omitted_bytes())
        });
    });
    group.bench_function("stream_capture", |b| {
        b.iter(|| {
            let mut capture = StreamCapture::new(CaptureConfig::default());
            for _ in 0..chunks {
                capture.push(black_box(&block));
            }
            capture.finish();
            black_box(render(&capture.whole(), &RenderOptions::default()))
        });
    });
    group.finish();
}

criterion_group!(benches, clean_and_fold, plain_lines_through_the_cap);
criterion_main!(benches);
