//! Just enough Markdown for the docs tests: fenced blocks, inline code
//! spans, headings turned into GitHub's anchors, and relative links. Pure
//! functions over a file's text, so each rule has a small test of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One fenced code block: its info string (`sh`, `json`, ...), the line its
/// first content line is on (1-based) and its content.
#[derive(Debug, Clone)]
pub struct Fence {
    pub lang: String,
    pub line: usize,
    pub body: String,
}

/// A piece of code the docs show: a fenced block's line or an inline span.
#[derive(Debug, Clone)]
pub struct Code {
    pub line: usize,
    pub text: String,
}

/// A Markdown file split into its fenced blocks and its prose (the fenced
/// lines blanked, so line numbers stay right).
#[derive(Debug)]
pub struct Doc {
    pub path: PathBuf,
    pub text: String,
    pub prose: String,
    pub fences: Vec<Fence>,
}

impl Doc {
    pub fn read(path: &Path) -> Doc {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Doc::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Doc {
        let mut prose = String::with_capacity(text.len());
        let mut fences = Vec::new();
        let mut open: Option<(String, String, Fence)> = None;
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            match &mut open {
                None => {
                    let marker = fence_marker(trimmed);
                    if let Some(marker) = marker {
                        let lang = trimmed[marker.len()..].trim().to_owned();
                        open = Some((
                            marker.to_owned(),
                            lang.clone(),
                            Fence {
                                lang,
                                line: index + 2,
                                body: String::new(),
                            },
                        ));
                    } else {
                        prose.push_str(line);
                    }
                }
                Some((marker, _, fence)) => {
                    if trimmed.starts_with(marker.as_str()) && trimmed.trim() == marker.as_str() {
                        let (_, _, fence) = open.take().unwrap();
                        fences.push(fence);
                    } else {
                        fence.body.push_str(line);
                        fence.body.push('\n');
                    }
                }
            }
            prose.push('\n');
        }
        if let Some((_, _, fence)) = open {
            panic!(
                "{}: the code block opened before line {} is never closed",
                path.display(),
                fence.line
            );
        }
        Doc {
            path: path.to_path_buf(),
            text: text.to_owned(),
            prose,
            fences,
        }
    }

    /// Inline code spans of the prose (single backticks, which may wrap
    /// across a line break inside a paragraph), with their line.
    pub fn spans(&self) -> Vec<Code> {
        let mut spans = Vec::new();
        let bytes = self.prose.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] != b'`' {
                i += 1;
                continue;
            }
            let ticks = bytes[i..].iter().take_while(|b| **b == b'`').count();
            let start = i + ticks;
            let closing = "`".repeat(ticks);
            let Some(len) = self.prose[start..].find(&closing) else {
                break;
            };
            let inner = &self.prose[start..start + len];
            if !inner.contains("\n\n") {
                spans.push(Code {
                    line: line_of(&self.prose, start),
                    text: inner.split_whitespace().collect::<Vec<_>>().join(" "),
                });
            }
            i = start + len + ticks;
        }
        spans
    }

    /// Every piece of code: each line of each fenced block, and each span.
    pub fn code(&self) -> Vec<Code> {
        let mut code: Vec<Code> = self
            .fences
            .iter()
            .flat_map(|fence| {
                joined_lines(&fence.body)
                    .into_iter()
                    .map(move |(offset, text)| Code {
                        line: fence.line + offset,
                        text,
                    })
            })
            .collect();
        code.extend(self.spans());
        code
    }

    /// The prose with its code spans removed (links inside code are not links).
    fn prose_without_spans(&self) -> String {
        let mut out = String::with_capacity(self.prose.len());
        let mut in_span = false;
        for c in self.prose.chars() {
            if c == '`' {
                in_span = !in_span;
            } else if !in_span || c == '\n' {
                // A span's own line breaks stay, so line numbers stay right.
                out.push(c);
            }
        }
        out
    }

    /// The targets of the prose's inline links `[text](target)`, with their line.
    pub fn links(&self) -> Vec<Code> {
        let prose = self.prose_without_spans();
        let pattern = regex::Regex::new(r#"\]\(([^()\s]+)(?:\s+"[^"]*")?\)"#).unwrap();
        pattern
            .captures_iter(&prose)
            .map(|c| {
                let m = c.get(1).unwrap();
                Code {
                    line: line_of(&prose, m.start()),
                    text: m.as_str().to_owned(),
                }
            })
            .collect()
    }

    /// The anchors GitHub gives this file's headings, in order.
    pub fn anchors(&self) -> Vec<String> {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        self.prose
            .lines()
            .filter_map(heading_text)
            .map(|heading| {
                let base = slug(heading);
                let count = seen.entry(base.clone()).or_insert(0);
                let anchor = if *count == 0 {
                    base.clone()
                } else {
                    format!("{base}-{count}")
                };
                *count += 1;
                anchor
            })
            .collect()
    }

    /// The prose and fences between the `## title` heading and the next
    /// heading of the same or a higher level.
    pub fn section(&self, title: &str) -> (String, Vec<Fence>) {
        let lines: Vec<&str> = self.text.lines().collect();
        let start = lines
            .iter()
            .position(|l| l.trim_end() == format!("## {title}"))
            .unwrap_or_else(|| panic!("{} has no `## {title}`", self.path.display()));
        let end = (start + 1..lines.len())
            .find(|i| lines[*i].starts_with("## ") || lines[*i].starts_with("# "))
            .unwrap_or(lines.len());
        let prose = lines[start..end].join("\n");
        let fences = self
            .fences
            .iter()
            .filter(|f| f.line > start && f.line <= end)
            .cloned()
            .collect();
        (prose, fences)
    }
}

/// ```` ``` ```` or `~~~` (or longer) when `line` opens or closes a fence.
fn fence_marker(line: &str) -> Option<&str> {
    for c in ['`', '~'] {
        let n = line.chars().take_while(|x| *x == c).count();
        if n >= 3 {
            return Some(&line[..n]);
        }
    }
    None
}

/// A code block's logical lines (a trailing `\` continues a line), each
/// with the offset of its first physical line.
pub fn joined_lines(body: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (offset, line) in body.lines().enumerate() {
        let (first, mut text) = current.take().unwrap_or((offset, String::new()));
        match line.trim_end().strip_suffix('\\') {
            Some(head) => {
                text.push_str(head);
                text.push(' ');
                current = Some((first, text));
            }
            None => {
                text.push_str(line);
                out.push((first, text));
            }
        }
    }
    out.extend(current);
    out
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].matches('\n').count() + 1
}

/// The text of an ATX heading line (`## Title`), if it is one.
fn heading_text(line: &str) -> Option<&str> {
    let hashes = line.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    rest.starts_with(' ')
        .then(|| rest.trim().trim_end_matches('#').trim())
}

/// GitHub's anchor for a heading: the rendered text (link text kept,
/// markup dropped), lower-cased, every character that is not a letter,
/// digit, `-`, `_` or space removed, spaces turned into `-`.
pub fn slug(heading: &str) -> String {
    let links = regex::Regex::new(r"\[([^\]]*)\]\([^)]*\)").unwrap();
    let text = links.replace_all(heading, "$1");
    text.chars()
        .filter(|c| !matches!(c, '`' | '*'))
        .flat_map(char::to_lowercase)
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn slugs_follow_githubs_rules() {
    assert_eq!(slug("Four words"), "four-words");
    assert_eq!(
        slug("`agent-reach run` (and `agent-reach-exec`)"),
        "agent-reach-run-and-agent-reach-exec"
    );
    assert_eq!(
        slug("The sandbox: `agent-reach-sandbox` (Linux)"),
        "the-sandbox-agent-reach-sandbox-linux"
    );
    assert_eq!(slug("apply_patch"), "apply_patch");
    assert_eq!(
        slug("Headline figures (stop 9, the last measured state)"),
        "headline-figures-stop-9-the-last-measured-state"
    );
    assert_eq!(slug("See [the guide](GUIDE.md) now"), "see-the-guide-now");
}

#[test]
fn repeated_headings_get_numbered_anchors_and_code_blocks_hold_no_headings() {
    let doc = Doc::parse(
        Path::new("x.md"),
        "# Top\n## Tests\n```sh\n# not a heading\n```\n## Tests\n",
    );
    assert_eq!(doc.anchors(), ["top", "tests", "tests-1"]);
}

#[test]
fn spans_wrap_across_lines_and_links_inside_code_are_not_links() {
    let doc = Doc::parse(
        Path::new("x.md"),
        "See `--client-idle-timeout\nSECONDS` and [a](b.md#c), not `[x](y.md)`.\n",
    );
    let spans: Vec<String> = doc.spans().into_iter().map(|c| c.text).collect();
    assert_eq!(spans, ["--client-idle-timeout SECONDS", "[x](y.md)"]);
    let links: Vec<String> = doc.links().into_iter().map(|c| c.text).collect();
    assert_eq!(links, ["b.md#c"]);
}
