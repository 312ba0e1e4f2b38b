//! The reply of `exec_command` and `write_stdin`: the contract's text block
//! and the same fields as structured content, built from plain values.
//!
//! A command that exited with a code other than 0 also gets the lines that
//! carry its failure which the fold left out, under `Highlights:` (line
//! numbers of the spill file the fold marker names), so the model sees an
//! `error[E0308]` from the omitted middle without reading the file.

use std::time::Duration;

use serde::Serialize;

/// Why the wait of a call ended, as the reply names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReplyState {
    /// The command ended; the reply carries its exit code.
    Exited,
    /// The yield ran out; the command keeps running as a session.
    Running,
    /// `wait_for` matched the new output.
    Matched,
    /// On a PTY, the foreground process is blocked reading the terminal.
    AwaitingInput,
}

/// A line that carries the failure, left out of the reply's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct LeftOutHighlight {
    /// `stdout` or `stderr`; omitted for a session's one merged stream.
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) stream: &'static str,
    /// The spill file's line (1-based).
    pub(crate) line: u64,
    pub(crate) text: String,
}

impl LeftOutHighlight {
    /// Those of `rendered`'s highlights the fold left out, for a command
    /// that ended with `exit_code` (none for a success or a running one).
    pub(crate) fn of(rendered: &crate::output::Rendered, exit_code: Option<i32>) -> Vec<Self> {
        if exit_code.is_none_or(|code| code == 0) {
            return Vec::new();
        }
        rendered
            .highlights
            .select_left_out()
            .into_iter()
            .map(|h| Self {
                stream: h.stream,
                line: h.line,
                text: h.text,
            })
            .collect()
    }
}

/// Everything a reply says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Reply {
    pub(crate) wall_time_seconds: f64,
    pub(crate) exit_code: Option<i32>,
    pub(crate) session_id: Option<u64>,
    pub(crate) state: ReplyState,
    pub(crate) original_token_count: u64,
    pub(crate) output: String,
    pub(crate) truncated: bool,
    pub(crate) full_output_path: Option<String>,
    /// What the sandbox enforced, for a confined command (as `run --json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) sandbox: Option<crate::result::SandboxAttestation>,
    /// Things the caller must know that are not about this command, such as
    /// a session pruned to make room. Omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) notes: Vec<String>,
    /// The operator's `[limits]` that cut what the call asked, each as
    /// `max_output_tokens (asked N, limit M)`. Omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) capped: Vec<String>,
    /// Lines that carry the failure which the fold left out of `output`.
    /// Omitted when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) highlights: Vec<LeftOutHighlight>,
}

impl Reply {
    /// The wall time as the reply spells it.
    pub(crate) fn wall_time(elapsed: Duration) -> f64 {
        (elapsed.as_secs_f64() * 10_000.0).round() / 10_000.0
    }

    /// The contract's text form.
    pub(crate) fn to_text(&self) -> String {
        let mut text = format!("Wall time: {:.4} seconds\n", self.wall_time_seconds);
        match (self.state, self.exit_code, self.session_id) {
            (ReplyState::Exited, code, _) => {
                text.push_str(&format!(
                    "Process exited with code {}\n",
                    code.unwrap_or(-1)
                ));
            }
            (_, _, id) => {
                text.push_str(&format!(
                    "Process running with session ID {}\n",
                    id.unwrap_or_default()
                ));
            }
        }
        if self.state == ReplyState::AwaitingInput {
            text.push_str("Process is waiting for input\n");
        }
        if let Some(sandbox) = &self.sandbox {
            text.push_str(&format!(
                "Sandbox: fs {}, net {}{}\n",
                sandbox.fs,
                sandbox.net,
                sandbox
                    .abi
                    .map(|abi| format!(", Landlock ABI {abi}"))
                    .unwrap_or_default()
            ));
        }
        for cap in &self.capped {
            text.push_str(&format!("Capped: {cap}\n"));
        }
        for note in &self.notes {
            text.push_str(&format!("Note: {note}\n"));
        }
        if !self.highlights.is_empty() {
            text.push_str("Highlights:\n");
            for highlight in &self.highlights {
                let stream = if highlight.stream.is_empty() {
                    String::new()
                } else {
                    format!("{} ", highlight.stream)
                };
                text.push_str(&format!(
                    "  {stream}line {}: {}\n",
                    highlight.line, highlight.text
                ));
            }
        }
        text.push_str(&format!(
            "Original token count: {}\nOutput:\n",
            self.original_token_count
        ));
        text.push_str(&self.output);
        text
    }

    /// The structured content: the same fields as a JSON object.
    pub(crate) fn to_structured(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(state: ReplyState) -> Reply {
        Reply {
            wall_time_seconds: Reply::wall_time(Duration::from_micros(12_345)),
            exit_code: (state == ReplyState::Exited).then_some(0),
            session_id: (state != ReplyState::Exited).then_some(3),
            state,
            original_token_count: 57,
            output: "hello\n".into(),
            truncated: false,
            full_output_path: None,
            sandbox: None,
            notes: Vec::new(),
            capped: Vec::new(),
            highlights: Vec::new(),
        }
    }

    #[test]
    fn exited_reply_has_the_contract_block() {
        assert_eq!(
            reply(ReplyState::Exited).to_text(),
            "Wall time: 0.0123 seconds\nProcess exited with code 0\nOriginal token count: 57\nOutput:\nhello\n"
        );
    }

    #[test]
    fn awaiting_input_adds_its_line() {
        let text = reply(ReplyState::AwaitingInput).to_text();
        assert_eq!(
            text,
            "Wall time: 0.0123 seconds\nProcess running with session ID 3\nProcess is waiting for input\nOriginal token count: 57\nOutput:\nhello\n"
        );
    }

    #[test]
    fn a_failed_command_lists_the_highlights_the_fold_left_out() {
        let mut r = reply(ReplyState::Exited);
        r.exit_code = Some(101);
        r.highlights = vec![LeftOutHighlight {
            stream: "",
            line: 8000,
            text: "error[E0308]: mismatched types".into(),
        }];
        assert_eq!(
            r.to_text(),
            "Wall time: 0.0123 seconds\nProcess exited with code 101\nHighlights:\n  line 8000: error[E0308]: mismatched types\nOriginal token count: 57\nOutput:\nhello\n"
        );
        assert_eq!(r.to_structured()["highlights"][0]["line"], 8000);
        assert!(r.to_structured()["highlights"][0].get("stream").is_none());
    }

    #[test]
    fn only_a_command_that_failed_gets_highlights() {
        let mut capture =
            crate::output::StreamCapture::new(crate::output::CaptureConfig::default());
        capture.push(b"error: one\n");
        for i in 0..2000 {
            capture.push(format!("line {i}\n").as_bytes());
        }
        capture.push(b"error: two\n");
        for i in 0..2000 {
            capture.push(format!("line {i}\n").as_bytes());
        }
        capture.finish();
        let rendered = crate::output::render(
            &capture.whole(),
            &crate::output::RenderOptions {
                max_output_tokens: 100,
                keep_color: false,
            },
        );
        let lines = |code| -> Vec<u64> {
            LeftOutHighlight::of(&rendered, code)
                .iter()
                .map(|h| h.line)
                .collect()
        };
        assert_eq!(lines(Some(1)), [2002], "the first is shown in the head");
        assert!(lines(Some(0)).is_empty());
        assert!(lines(None).is_empty(), "still running");
    }

    #[test]
    fn structured_content_names_the_contract_fields() {
        let mut r = reply(ReplyState::Matched);
        let v = r.to_structured();
        assert_eq!(v["state"], "matched");
        assert_eq!(v["session_id"], 3);
        assert!(v["exit_code"].is_null());
        assert_eq!(v["wall_time_seconds"], 0.0123);
        for field in [
            "original_token_count",
            "output",
            "truncated",
            "full_output_path",
        ] {
            assert!(v.get(field).is_some(), "{field}");
        }
        assert!(v.get("notes").is_none());
        r.notes.push("session 1 (sleep 100) was killed".into());
        assert!(
            r.to_text()
                .contains("Note: session 1 (sleep 100) was killed\n")
        );
        assert_eq!(
            r.to_structured()["notes"][0],
            "session 1 (sleep 100) was killed"
        );
    }
}
