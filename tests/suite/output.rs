//! The output pipeline against real files and a real `sed`: the fold marker
//! names a spill file and a line range that exist, and printing that range
//! gives back exactly what was left out, for one-shot results, session
//! windows and output larger than the memory cap. Also the spill store cap
//! across runs, binary refusal, and the real cargo capture in the fixtures.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_reach::output::terminal::TerminalCleaner;
use agent_reach::output::{
    CaptureConfig, Captured, Redactor, RenderOptions, SpillStore, StreamCapture, render,
};

use crate::common::TestEnv;

const CARGO_CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/output/cargo-build.pty"
);

const NPM_CAPTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/output/npm-install.pty"
);

fn capture_into(store: &SpillStore, cap_bytes: usize) -> StreamCapture {
    StreamCapture::new(CaptureConfig {
        cap_bytes,
        spill: Some(store.create("test")),
        ..CaptureConfig::default()
    })
}

fn tokens(n: usize) -> RenderOptions {
    RenderOptions {
        max_output_tokens: n,
        keep_color: false,
    }
}

/// Lines with colour, `\r\n` and a redrawn progress line, as a PTY gives them.
fn noisy_output(lines: usize) -> Vec<u8> {
    let mut raw = Vec::new();
    for i in 1..=lines {
        if i % 50 == 0 {
            raw.extend_from_slice(
                format!("step {i}: 0%\r50%\r\x1b[Kstep {i}: done\r\n").as_bytes(),
            );
        } else {
            raw.extend_from_slice(format!("\x1b[32mok\x1b[0m line {i} é\r\n").as_bytes());
        }
    }
    raw
}

/// The `sed` range a marker names: (first, last, file).
fn marker_range(text: &str) -> (u64, u64, PathBuf) {
    let marker = text
        .lines()
        .find(|line| line.starts_with("[… "))
        .unwrap_or_else(|| panic!("no marker in:\n{text}"));
    let command = marker
        .split("print them with: ")
        .nth(1)
        .unwrap_or_else(|| panic!("marker names no command: {marker}"));
    let command = command.trim_end_matches(" …]");
    let words = shlex::split(command).unwrap();
    assert_eq!(words[..2], ["sed", "-n"], "{marker}");
    let range = words[2].trim_end_matches('p');
    let (first, last) = range.split_once(',').unwrap();
    (
        first.parse().unwrap(),
        last.parse().unwrap(),
        PathBuf::from(&words[3]),
    )
}

/// Runs the marker's `sed` and checks that shown head + printed lines +
/// shown tail is exactly `full`.
fn assert_marker_restores(env: &TestEnv, text: &str, full: &[u8]) {
    let (first, last, file) = marker_range(text);
    assert!(file.is_file(), "{} does not exist", file.display());
    let printed = env
        .cmd_at("sed")
        .args(["-n", &format!("{first},{last}p")])
        .arg(&file)
        .limit(Duration::from_secs(20))
        .run();
    printed.success();
    let (head, rest) = text.split_once("[… ").unwrap();
    let tail = rest.split_once(" …]\n").unwrap().1;
    let restored = [head.as_bytes(), &printed.stdout, tail.as_bytes()].concat();
    assert_eq!(
        String::from_utf8_lossy(&restored),
        String::from_utf8_lossy(full),
        "marker: sed -n '{first},{last}p' {}",
        file.display()
    );
}

#[test]
fn the_marker_of_a_one_shot_result_prints_exactly_what_was_left_out() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 64 << 20).unwrap();
    let raw = noisy_output(400);
    let mut capture = capture_into(&store, 1 << 20);
    for chunk in raw.chunks(777) {
        capture.push(chunk);
    }
    capture.finish();
    let rendered = render(&capture.whole(), &tokens(200));
    assert!(rendered.truncated);
    assert!(
        rendered.text.len() < 200 * 4 + 300,
        "{}",
        rendered.text.len()
    );
    let cleaned = TerminalCleaner::clean(&raw, false);
    let spilled = fs::read(capture.spill_path().unwrap()).unwrap();
    assert_eq!(spilled, cleaned, "the spill file holds the cleaned text");
    assert_marker_restores(&env, &rendered.text, &cleaned);
}

#[test]
fn the_marker_stays_exact_when_memory_dropped_the_middle() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 64 << 20).unwrap();
    let mut capture = capture_into(&store, 4096);
    let mut full = Vec::new();
    let mut raw_bytes = 0;
    for i in 0..20_000 {
        let line = format!("record {i:05} {}\n", "x".repeat(i % 37));
        capture.push(line.as_bytes());
        raw_bytes += line.len();
        // Rows lose trailing blanks ("record 00000 ").
        full.extend_from_slice(line.replace(" \n", "\n").as_bytes());
    }
    capture.push(b"3 failed\n");
    raw_bytes += 9;
    full.extend_from_slice(b"3 failed\n");
    capture.finish();
    let window = capture.whole();
    assert!(window.head.len() + window.tail.len() <= 4096);
    let rendered = render(&window, &tokens(300));
    assert!(rendered.text.ends_with("3 failed\n"), "the tail survives");
    assert_eq!(rendered.original_bytes, raw_bytes as u64);
    assert_marker_restores(&env, &rendered.text, &full);
}

#[test]
fn each_session_window_names_its_own_lines() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 64 << 20).unwrap();
    let mut capture = capture_into(&store, 1 << 20);
    let mut windows: Vec<(Captured, Vec<u8>)> = Vec::new();
    for round in 0..3 {
        let raw = noisy_output(120 + round * 10);
        capture.push(&raw);
        windows.push((capture.take_window(), TerminalCleaner::clean(&raw, false)));
    }
    for (window, cleaned) in &windows {
        let rendered = render(window, &tokens(100));
        assert_marker_restores(&env, &rendered.text, cleaned);
    }
    assert_eq!(windows[1].0.first_line, 121);
    assert_eq!(windows[2].0.first_line, 121 + 130);
}

#[test]
fn an_answered_prompt_is_not_shown_twice_and_the_file_has_it_once() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 64 << 20).unwrap();
    let mut capture = capture_into(&store, 1 << 20);
    capture.push(b"Continue? [y/N] ");
    let asked = render(&capture.take_window(), &tokens(100));
    assert_eq!(asked.text, "Continue? [y/N] ");
    capture.push(b"y\r\nbye\r\n");
    let answered = render(&capture.take_window(), &tokens(100));
    assert_eq!(answered.text, "y\nbye\n");
    let spilled = fs::read_to_string(capture.spill_path().unwrap()).unwrap();
    assert_eq!(spilled, "Continue? [y/N] y\nbye\n");
}

#[test]
fn secrets_never_reach_the_spill_file() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 64 << 20).unwrap();
    let mut capture = StreamCapture::new(CaptureConfig {
        spill: Some(store.create("secret")),
        redactor: Some(Redactor::new(vec![(
            "GITHUB_TOKEN".into(),
            b"ghp_abcdefghijklmnop".to_vec(),
        )])),
        ..CaptureConfig::default()
    });
    let raw = b"token=ghp_abcdefghijklmnop\nagain ghp_abcdefghijklmnop\n";
    for byte in raw.chunks(1) {
        capture.push(byte);
    }
    capture.finish();
    let spilled = fs::read_to_string(capture.spill_path().unwrap()).unwrap();
    assert_eq!(
        spilled,
        "token=[REDACTED:GITHUB_TOKEN]\nagain [REDACTED:GITHUB_TOKEN]\n"
    );
    assert!(!render(&capture.whole(), &tokens(100)).text.contains("ghp_"));
}

#[test]
fn binary_output_is_refused_with_its_size_and_an_existing_file() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 64 << 20).unwrap();
    let mut capture = capture_into(&store, 1 << 20);
    let blob: Vec<u8> = (0..300_000_u32).map(|i| (i % 251) as u8).collect();
    capture.push(&blob);
    capture.finish();
    let rendered = render(&capture.whole(), &tokens(10_000));
    assert_eq!(rendered.text.lines().count(), 1, "{}", rendered.text);
    assert!(
        rendered.text.contains("(300000 bytes)"),
        "{}",
        rendered.text
    );
    let path = capture.spill_path().unwrap();
    assert!(rendered.text.contains(&path.display().to_string()));
    assert!(path.is_file());
}

#[test]
fn the_store_removes_the_oldest_runs_first_and_stays_under_its_cap() {
    let env = TestEnv::new();
    let cap = 100_000;
    // Every new file checks the cap (by default only once a second).
    let store = SpillStore::open(&env.ar_home(), cap)
        .unwrap()
        .with_scan_interval(Duration::ZERO);
    let mut paths = Vec::new();
    for run in 0..5 {
        let mut capture = capture_into(&store, 1024);
        capture.push(format!("run {run}\n").repeat(4000).as_bytes());
        capture.finish();
        paths.push(capture.spill_path().unwrap());
        drop(capture);
        std::thread::sleep(Duration::from_millis(20));
    }
    let total: u64 = fs::read_dir(store.dir())
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum();

    assert!(total <= cap, "store holds {total} > {cap}");
    assert!(!paths[0].exists(), "the oldest run was removed");
    assert!(paths[4].exists(), "the newest run stays");
}

#[test]
fn a_run_bigger_than_the_store_names_only_lines_on_disk() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 50_000).unwrap();
    let mut capture = capture_into(&store, 4096);
    for i in 0..20_000 {
        capture.push(format!("line {i:06}\n").as_bytes());
    }
    capture.finish();
    let text = render(&capture.whole(), &tokens(100)).text;
    let (first, last, file) = marker_range(&text);
    let on_disk = fs::read_to_string(&file).unwrap();
    let complete_lines = on_disk.matches('\n').count() as u64;
    assert!(last <= complete_lines, "{last} > {complete_lines}: {text}");
    assert!(first < last);
    assert!(
        text.contains(&format!("lines after {last} not saved")),
        "{text}"
    );
}

#[test]
fn the_real_cargo_capture_cleans_to_its_log_lines() {
    let raw = fs::read(CARGO_CAPTURE).unwrap();
    assert!(
        raw.contains(&b'\r') && raw.contains(&0x1B),
        "a real PTY capture"
    );
    let cleaned = String::from_utf8(TerminalCleaner::clean(&raw, false)).unwrap();
    assert!(!cleaned.contains('\x1b') && !cleaned.contains('\r'));
    assert!(
        !cleaned.contains("Building ["),
        "progress bar left:\n{cleaned}"
    );
    let compiling = cleaned
        .lines()
        .filter(|l| l.trim_start().starts_with("Compiling"))
        .count();
    let raw_compiling = String::from_utf8_lossy(&raw).matches("Compiling").count();
    assert_eq!(compiling, raw_compiling, "every log line kept:\n{cleaned}");
    assert!(
        cleaned
            .lines()
            .last()
            .unwrap()
            .trim_start()
            .starts_with("Finished")
    );
}

#[test]
fn the_real_npm_capture_loses_its_spinner_and_keeps_the_summary() {
    let raw = fs::read(NPM_CAPTURE).unwrap();
    assert!(
        raw.windows(4).any(|w| w == b"\x1b[1G"),
        "a real spinner capture"
    );
    let cleaned = String::from_utf8(TerminalCleaner::clean(&raw, false)).unwrap();
    assert_eq!(cleaned.trim(), "added 77 packages in 10s");
}

#[test]
fn spill_files_are_created_under_the_agent_reach_home() {
    let env = TestEnv::new();
    let store = SpillStore::open(&env.ar_home(), 1 << 20).unwrap();
    let mut capture = capture_into(&store, 1024);
    capture.push(b"hello\n");
    let path = capture.spill_path().unwrap();
    assert_eq!(path.parent(), Some(Path::new(&env.ar_home().join("spill"))));
}
