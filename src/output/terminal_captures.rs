//! The terminal model on real captures (`tests/fixtures/output/*.pty`,
//! recorded on a PTY as `serve` runs programs; the README there says how):
//! what a session's replies carry while a program runs and after it ends.

use super::capture::{CaptureConfig, StreamCapture};
use super::terminal::TerminalCleaner;

const PTY_CHUNK: usize = 4096;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/output/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The replies of a session that is read at each of `cuts` (byte offsets)
/// and once more after the end: each reply's text as the model gets it.
fn replies(raw: &[u8], cuts: &[usize]) -> Vec<String> {
    let mut capture = StreamCapture::new(CaptureConfig::default());
    let mut out = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain(std::iter::once(&raw.len())) {
        for chunk in raw[from..cut].chunks(PTY_CHUNK) {
            capture.push(chunk);
        }
        from = cut;
        if cut == raw.len() {
            capture.finish();
        }
        let w = capture.take_window();
        let text = [w.head, w.tail, w.pending].concat();
        out.push(String::from_utf8_lossy(&text).into_owned());
    }
    out
}

fn last_position(haystack: &[u8], needle: &[u8]) -> usize {
    memchr::memmem::rfind(haystack, needle).unwrap_or_else(|| panic!("no {needle:?}"))
}

/// Where the program leaves the alternate screen.
fn alternate_screen_left(raw: &[u8]) -> usize {
    last_position(raw, b"\x1b[?1049l")
}

#[track_caller]
fn assert_reads_like_a_screen(reply: &str) {
    assert!(!reply.contains(" → "), "a redraw history: {reply}");
    assert!(!reply.contains('▽'), "a terminal probe: {reply}");
    assert!(
        reply.lines().all(|row| !row.ends_with(' ')),
        "rows keep trailing blanks: {reply}"
    );
}

#[test]
fn a_python_prompt_ends_its_reply_and_is_not_repeated_after_the_answer() {
    let raw = fixture("python3-repl.pty");
    let cut = last_position(&raw, b">>> ") + 4;
    let r = replies(&raw, &[cut]);
    assert_eq!(r[0], ">>> 1+41\n42\n>>> ");
    assert_eq!(r[1], "exit()\n");
}

#[test]
fn node_answers_and_its_prompt_is_not_repeated() {
    let raw = fixture("node-repl.pty");
    let cut = last_position(&raw, b"> ") + 2;
    let r = replies(&raw, &[cut]);
    assert!(r[0].contains("\n42\n"), "{r:?}");
    assert!(r[0].ends_with("> "), "{r:?}");
    assert!(r[1].contains(".exit") && !r[1].contains("42"), "{r:?}");
}

#[test]
fn leaving_vim_leaves_nothing_of_its_screen_behind() {
    let raw = fixture("vim.pty");
    let r = replies(&raw, &[alternate_screen_left(&raw)]);
    assert!(
        r[0].contains("line 30 of the notes\nappended by the test\n~"),
        "{}",
        r[0]
    );
    assert_reads_like_a_screen(&r[0]);
    assert_eq!(r[1], "after vim\n");
}

#[test]
fn an_aborted_git_commit_shows_vi_once_then_only_what_git_said() {
    let raw = fixture("git-commit.pty");
    let r = replies(&raw, &[alternate_screen_left(&raw)]);
    assert!(
        r[0].contains("# Please enter the commit message"),
        "{}",
        r[0]
    );
    assert_reads_like_a_screen(&r[0]);
    assert_eq!(r[1], "Aborting commit due to empty commit message.\n");
}

#[test]
fn quitting_less_leaves_only_what_came_after_it() {
    let raw = fixture("less.pty");
    let r = replies(&raw, &[alternate_screen_left(&raw)]);
    assert!(r[0].contains("row 98 of a long file"), "{}", r[0]);
    assert_reads_like_a_screen(&r[0]);
    assert_eq!(r[1], "after less\n");
}

#[test]
fn top_replies_are_its_screen_then_only_the_rows_that_changed() {
    let raw = fixture("top.pty");
    let r = replies(&raw, &[raw.len() / 2]);
    assert_eq!(r[0].matches("load average").count(), 1, "{}", r[0]);
    assert!(r[0].contains("  PID USER"), "{}", r[0]);
    assert_reads_like_a_screen(&r[0]);
    assert!(r[1].len() < 4096, "{} bytes: {}", r[1].len(), r[1]);
    assert!(
        !r[1].contains("  PID USER"),
        "an unchanged row again: {}",
        r[1]
    );
    assert_reads_like_a_screen(&r[1]);
}

#[test]
fn top_read_often_never_shows_a_redraw_history() {
    let raw = fixture("top.pty");
    let cuts: Vec<usize> = (1..raw.len() / PTY_CHUNK).map(|i| i * PTY_CHUNK).collect();
    let r = replies(&raw, &cuts);
    for reply in &r {
        assert_reads_like_a_screen(reply);
    }
    assert!(r.last().is_some_and(|last| last.len() < 4096));
}

#[test]
fn a_finished_top_cleans_to_its_last_frame() {
    let raw = fixture("top.pty");
    let text = String::from_utf8(TerminalCleaner::clean(&raw, false)).unwrap();
    assert_eq!(text.matches("load average").count(), 1, "{text}");
    assert_reads_like_a_screen(&text);
}
