//! The last stage: a captured window becomes the text the model reads.
//!
//! Binary output is refused with a one-line notice; text is folded to the
//! token budget ([`super::fold`]), colour is removed unless asked for, and
//! anything that is still not UTF-8 is replaced. Never panics. The
//! window's highlights come along, each marked shown or left out.

use super::capture::Captured;
use super::fold::{BYTES_PER_TOKEN, fold};
use super::highlights::Found;
use super::terminal::strip_sgr;

/// The default token budget of one reply or result.
pub const DEFAULT_MAX_OUTPUT_TOKENS: usize = 10_000;

/// How to render a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RenderOptions {
    /// Budget of the shown output, estimated at 4 bytes per token.
    pub max_output_tokens: usize,
    /// Keep SGR colour (only there if the capture kept it).
    pub keep_color: bool,
}

impl Default for RenderOptions {
    fn default() -> Self {
        Self {
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS,
            keep_color: false,
        }
    }
}

/// What the model is shown, with the counts the result reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    /// Something was left out (folded or refused as binary).
    pub truncated: bool,
    /// Raw bytes the command wrote in this window.
    pub original_bytes: u64,
    /// `original_bytes / 4`, rounded up.
    pub original_token_count: u64,
    /// The lines that carry a failure, each marked shown or left out.
    pub highlights: Found,
}

/// Renders `captured` for the model.
pub fn render(captured: &Captured, options: &RenderOptions) -> Rendered {
    let original_bytes = captured.total_bytes;
    let original_token_count = original_bytes.div_ceil(BYTES_PER_TOKEN as u64);
    let mut highlights = captured.highlights.clone();
    if captured.binary {
        highlights.mark_shown(|_| true);
        return Rendered {
            text: binary_notice(captured),
            truncated: true,
            original_bytes,
            original_token_count,
            highlights,
        };
    }
    let budget = options.max_output_tokens.saturating_mul(BYTES_PER_TOKEN);
    let folded = fold(captured, budget);
    highlights.mark_shown(|line| {
        folded
            .left_out
            .is_some_and(|(first, last)| (first..=last).contains(&line))
    });
    let bytes = if options.keep_color || memchr::memchr(0x1B, &folded.text).is_none() {
        folded.text
    } else {
        strip_sgr(&folded.text)
    };
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    };
    Rendered {
        text,
        truncated: folded.truncated,
        original_bytes,
        original_token_count,
        highlights,
    }
}

/// The one line shown instead of binary output.
pub fn binary_notice(captured: &Captured) -> String {
    let size = human_size(captured.total_bytes);
    let bytes = captured.total_bytes;
    match &captured.spill_path {
        Some(path) => format!(
            "[binary output not shown: {size} ({bytes} bytes) containing NUL bytes; its text is in {}; redirect the output to a file to keep the exact bytes]",
            path.display()
        ),
        None => format!(
            "[binary output not shown: {size} ({bytes} bytes) containing NUL bytes; redirect the output to a file to keep it]"
        ),
    }
}

/// `1.5 KiB`, `12.0 MiB`, `17 B`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn binary_output_is_one_line_with_size_and_file() {
        let captured = Captured {
            binary: true,
            total_bytes: 3 * 1024 * 1024,
            spill_path: Some(PathBuf::from("/h/spill/a.log")),
            ..Captured::default()
        };
        let rendered = render(&captured, &RenderOptions::default());
        assert!(rendered.truncated);
        assert_eq!(rendered.text.lines().count(), 1);
        assert!(
            rendered.text.contains("3.0 MiB (3145728 bytes)"),
            "{}",
            rendered.text
        );
        assert!(rendered.text.contains("/h/spill/a.log"));
    }

    #[test]
    fn token_count_rounds_up() {
        let captured = Captured {
            head: b"hello".to_vec(),
            total_bytes: 5,
            ..Captured::default()
        };
        let rendered = render(&captured, &RenderOptions::default());
        assert_eq!(
            (rendered.original_token_count, rendered.text.as_str()),
            (2, "hello")
        );
    }

    #[test]
    fn colour_is_stripped_unless_kept() {
        let captured = Captured {
            head: b"\x1b[31mred\x1b[0m".to_vec(),
            ..Captured::default()
        };
        assert_eq!(render(&captured, &RenderOptions::default()).text, "red");
        let keep = RenderOptions {
            keep_color: true,
            ..RenderOptions::default()
        };
        assert_eq!(render(&captured, &keep).text, "\x1b[31mred\x1b[0m");
    }

    #[test]
    fn highlights_are_marked_shown_or_left_out_by_the_fold() {
        use crate::output::{CaptureConfig, StreamCapture};
        let mut capture = StreamCapture::new(CaptureConfig::default());
        capture.push(b"error: at the top\n");
        for i in 2..1000 {
            if i == 500 {
                capture.push(b"main.c:4:5: error: in the middle\n");
            } else {
                capture.push(format!("line {i}\n").as_bytes());
            }
        }
        capture.finish();
        let rendered = render(
            &capture.whole(),
            &RenderOptions {
                max_output_tokens: 50,
                keep_color: false,
            },
        );
        assert!(rendered.truncated);
        let all: Vec<(u64, bool)> = rendered
            .highlights
            .select()
            .iter()
            .map(|h| (h.line, h.shown))
            .collect();
        assert_eq!(all, [(1, true), (500, false)]);
        let left_out: Vec<u64> = rendered
            .highlights
            .select_left_out()
            .iter()
            .map(|h| h.line)
            .collect();
        assert_eq!(left_out, [500]);
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(17), "17 B");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(5 * 1024 * 1024 * 1024), "5.0 GiB");
    }
}
