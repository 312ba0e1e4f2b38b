//! Head+tail folding to the token budget, with a marker that says how much
//! was left out and exactly where to find it.
//!
//! Tokens are estimated at 4 bytes each. The budget is split between the
//! start of the output and its end (what the model needs most: the command
//! line echo and the error summary); cuts fall on line boundaries when that
//! loses at most half a side's budget, and always on UTF-8 boundaries. The
//! marker names the spill file's lines that were left out as a
//! `sed -n 'A,Bp' FILE` command that prints them.

use std::path::Path;

use super::capture::Captured;

/// Bytes per estimated token.
pub const BYTES_PER_TOKEN: usize = 4;

/// The result of folding a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folded {
    /// The text to show: everything, or head + marker + tail.
    pub text: Vec<u8>,
    /// Something was left out.
    pub truncated: bool,
    /// The marker line, when something was left out (also inside `text`).
    pub marker: Option<String>,
    /// The spill lines left out, first and last (lines partly shown
    /// included), when something was.
    pub left_out: Option<(u64, u64)>,
}

/// Folds `captured` so that its shown bytes fit `budget_bytes` (the marker
/// comes on top).
pub fn fold(captured: &Captured, budget_bytes: usize) -> Folded {
    let head = captured.head.as_slice();
    let tail_owned;
    let tail: &[u8] = if captured.pending.is_empty() {
        &captured.tail
    } else {
        tail_owned = [captured.tail.as_slice(), captured.pending.as_slice()].concat();
        &tail_owned
    };
    if captured.omitted_bytes == 0 && head.len() + tail.len() <= budget_bytes {
        return Folded {
            text: [head, tail].concat(),
            truncated: false,
            marker: None,
            left_out: None,
        };
    }
    // When memory dropped nothing, head and tail are one contiguous text:
    // fold that whole; otherwise each side is cut from its own part.
    let contiguous_owned;
    let (front, back, gap) = if captured.omitted_bytes == 0 {
        contiguous_owned = [head, tail].concat();
        (
            contiguous_owned.as_slice(),
            contiguous_owned.as_slice(),
            None,
        )
    } else {
        (head, tail, Some(captured.omitted_bytes))
    };
    let back_wanted = match gap {
        None => budget_bytes - budget_bytes / 2,
        Some(_) => back
            .len()
            .min(budget_bytes - front.len().min(budget_bytes / 2)),
    };
    let head_end = cut_end(front, front.len().min(budget_bytes - back_wanted));
    let tail_budget = budget_bytes - head_end;
    let tail_start = cut_start(back, back.len().saturating_sub(tail_budget));
    let head_shown = &front[..head_end];
    let tail_shown = &back[tail_start..];

    let omitted_bytes = match gap {
        None => (tail_start - head_end) as u64,
        Some(gap) => (front.len() - head_end) as u64 + gap + tail_start as u64,
    };
    let head_aligned = head_shown.last().is_none_or(|&b| b == b'\n');
    let tail_aligned = if tail_start > 0 {
        back[tail_start - 1] == b'\n'
    } else {
        captured.tail_starts_line
    };
    let head_newlines = count_newlines(head_shown);
    let tail_newlines = count_newlines(tail_shown);
    let first = captured.spill_line(head_newlines);
    let tail_line = captured.spill_line(captured.lines.saturating_sub(tail_newlines));
    let last = if tail_aligned {
        tail_line.saturating_sub(1)
    } else {
        tail_line
    };
    let finished_ends_line = captured
        .tail
        .last()
        .or(captured.head.last())
        .is_none_or(|&b| b == b'\n');
    let last_in_file = captured
        .spill_line(captured.lines)
        .saturating_sub(u64::from(finished_ends_line));
    let range = LeftOut {
        bytes: omitted_bytes,
        first,
        last: last.min(last_in_file),
        partly_shown: !head_aligned || !tail_aligned,
    };
    let marker = marker_text(&range, captured);
    let left_out = Some((range.first, range.last));

    let mut text = Vec::with_capacity(head_shown.len() + marker.len() + tail_shown.len() + 2);
    text.extend_from_slice(head_shown);
    if !head_aligned {
        text.push(b'\n');
    }
    text.extend_from_slice(marker.as_bytes());
    text.push(b'\n');
    text.extend_from_slice(tail_shown);
    Folded {
        text,
        truncated: true,
        marker: Some(marker),
        left_out,
    }
}

/// What a marker describes.
struct LeftOut {
    bytes: u64,
    first: u64,
    last: u64,
    partly_shown: bool,
}

fn marker_text(left_out: &LeftOut, captured: &Captured) -> String {
    let LeftOut {
        bytes,
        first,
        mut last,
        partly_shown,
    } = *left_out;
    let plural = if bytes == 1 { "" } else { "s" };
    if first > last {
        return format!("[… {bytes} byte{plural} omitted …]");
    }
    let lines = if first == last {
        format!("line {first}")
    } else {
        format!("lines {first}-{last}")
    };
    let partly = if partly_shown {
        ", partly shown here"
    } else {
        ""
    };
    let Some(path) = &captured.spill_path else {
        return format!(
            "[… {bytes} byte{plural} omitted ({lines}{partly}); the full output was not saved …]"
        );
    };
    let mut unsaved = String::new();
    if let Some((complete_lines, reason)) = &captured.spill_stopped {
        if first > *complete_lines {
            return format!(
                "[… {bytes} byte{plural} omitted ({lines}{partly}); not saved: {reason} …]"
            );
        }
        if last > *complete_lines {
            last = *complete_lines;
            unsaved = format!("; lines after {last} not saved: {reason}");
        }
    }
    format!(
        "[… {bytes} byte{plural} omitted ({lines}{partly}{unsaved}); print them with: sed -n '{first},{last}p' {file} …]",
        file = shell_quoted(path)
    )
}

fn shell_quoted(path: &Path) -> String {
    let text = path.to_string_lossy();
    shlex::try_quote(&text).map_or_else(|_| text.to_string(), |quoted| quoted.into_owned())
}

fn count_newlines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// Where to end a shown head of at most `limit` bytes: after the last
/// newline when that keeps at least half, else on a char boundary.
fn cut_end(bytes: &[u8], limit: usize) -> usize {
    if limit >= bytes.len() {
        // The kept head itself may end inside a character.
        return utf8_floor(bytes, bytes.len());
    }
    if let Some(newline) = memchr::memrchr(b'\n', &bytes[..limit])
        && newline + 1 >= limit / 2
    {
        return newline + 1;
    }
    let mut end = limit;
    while end > 0 && is_continuation(bytes[end]) {
        end -= 1;
    }
    end
}

/// `end`, moved back so that `bytes[..end]` does not stop inside a
/// character.
fn utf8_floor(bytes: &[u8], end: usize) -> usize {
    let mut start = end;
    while start > 0 && end - start < 3 && is_continuation(bytes[start - 1]) {
        start -= 1;
    }
    let Some(lead_at) = start.checked_sub(1) else {
        return end;
    };
    let width = match bytes[lead_at] {
        0xF0..=0xF7 => 4,
        0xE0..=0xEF => 3,
        0xC0..=0xDF => 2,
        _ => 1,
    };
    if end - lead_at < width { lead_at } else { end }
}

/// Where to start a shown tail from at least `from`: after a newline when
/// that keeps at least half, else on a char boundary (the kept tail itself
/// may start inside a character).
fn cut_start(bytes: &[u8], from: usize) -> usize {
    if from > 0
        && let Some(offset) = memchr::memchr(b'\n', &bytes[from - 1..])
        && offset <= (bytes.len() - from) / 2
    {
        return from + offset;
    }
    let mut start = from;
    while start < bytes.len() && is_continuation(bytes[start]) {
        start += 1;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn window(text: &str) -> Captured {
        Captured {
            head: text.as_bytes().to_vec(),
            cleaned_bytes: text.len() as u64,
            total_bytes: text.len() as u64,
            first_line: 1,
            lines: text.matches('\n').count() as u64,
            tail_starts_line: true,
            spill_path: Some(PathBuf::from("/h/spill/run.log")),
            ..Captured::default()
        }
    }

    fn numbered(lines: usize) -> String {
        (1..=lines).map(|i| format!("line {i:03}\n")).collect()
    }

    #[test]
    fn output_within_the_budget_is_untouched() {
        let folded = fold(&window("a\nb\n"), 100);
        assert_eq!(folded.text, b"a\nb\n");
        assert!(!folded.truncated);
    }

    #[test]
    fn folds_on_line_boundaries_and_names_the_left_out_lines() {
        // 100 lines of 9 bytes; 90 bytes of budget: 5 head lines, 5 tail lines.
        let folded = fold(&window(&numbered(100)), 90);
        let text = String::from_utf8(folded.text).unwrap();
        let expected_marker = "[… 810 bytes omitted (lines 6-95); print them with: sed -n '6,95p' /h/spill/run.log …]";
        assert_eq!(
            text,
            format!(
                "{}{expected_marker}\n{}",
                numbered(5),
                (96..=100)
                    .map(|i| format!("line {i:03}\n"))
                    .collect::<String>()
            )
        );
    }

    #[test]
    fn line_numbers_count_from_the_window_start() {
        let mut w = window(&numbered(100));
        w.first_line = 1001;
        let marker = fold(&w, 90).marker.unwrap();
        assert!(marker.contains("sed -n '1006,1095p'"), "{marker}");
    }

    #[test]
    fn lines_an_earlier_window_showed_are_skipped_in_the_count() {
        // Window lines 0..50 are spill lines 1..50; then 20 spill lines the
        // model saw before are left out; window line 50 is spill line 71.
        let mut w = window(&numbered(100));
        w.skipped_lines = vec![(50, 20)];
        assert_eq!((w.spill_line(49), w.spill_line(50)), (50, 71));
        let marker = fold(&w, 90).marker.unwrap();
        assert!(marker.contains("sed -n '6,115p'"), "{marker}");
    }

    #[test]
    fn a_huge_single_line_is_cut_on_char_boundaries() {
        let text = "é".repeat(1000);
        let folded = fold(&window(&text), 101);
        let shown = String::from_utf8(folded.text).unwrap();
        assert!(shown.contains("(line 1, partly shown here)"), "{shown}");
        assert!(shown.len() < 101 + 200);
    }

    #[test]
    fn counts_what_memory_dropped_between_head_and_tail() {
        let w = Captured {
            head: b"h1\nh2\n".to_vec(),
            tail: b"t1\nt2\n".to_vec(),
            omitted_bytes: 1000,
            cleaned_bytes: 1012,
            first_line: 1,
            lines: 104,
            tail_starts_line: true,
            spill_path: Some(PathBuf::from("/s.log")),
            ..Captured::default()
        };
        let marker = fold(&w, 1000).marker.unwrap();
        assert!(
            marker.contains("1000 bytes omitted (lines 3-102)"),
            "{marker}"
        );
    }

    #[test]
    fn says_when_no_file_holds_the_rest() {
        let mut w = window(&numbered(100));
        w.spill_path = None;
        let marker = fold(&w, 90).marker.unwrap();
        assert!(marker.contains("the full output was not saved"), "{marker}");
    }

    #[test]
    fn names_only_the_lines_a_stopped_spill_file_holds() {
        let mut w = window(&numbered(100));
        w.spill_stopped = Some((50, "the spill store is capped at 450 bytes".into()));
        let marker = fold(&w, 90).marker.unwrap();
        assert!(marker.contains("sed -n '6,50p'"), "{marker}");
        assert!(marker.contains("lines after 50 not saved"), "{marker}");
    }

    #[test]
    fn a_zero_budget_shows_only_the_marker() {
        let folded = fold(&window(&numbered(3)), 0);
        let text = String::from_utf8(folded.text).unwrap();
        assert!(
            text.starts_with("[… 27 bytes omitted (lines 1-3)"),
            "{text}"
        );
    }

    #[test]
    fn the_unfinished_line_follows_the_tail() {
        let mut w = window(&numbered(100));
        w.pending = b"Password: ".to_vec();
        let text = String::from_utf8(fold(&w, 90).text).unwrap();
        assert!(text.ends_with("line 100\nPassword: "), "{text}");
    }
}
