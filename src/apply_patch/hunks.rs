//! Applying an Update's hunks to a file's lines, in memory.
//!
//! Every hunk is located first (its `@@` contexts, then its lines, each
//! after the previous hunk); only when all are found are the replacements
//! made. Context lines keep the file's own text, so a fuzzy match never
//! rewrites a line the patch did not mean to change.

use std::path::Path;

use super::error::{ClosestRegion, Missing, NoMatch};
use super::parser::{Chunk, ChunkLine};
use super::report::FuzzyMatch;
use super::seek::{Haystack, MatchLevel};
use super::text::{Line, TextFile};

/// How many lines of the file a "closest match" shows at most.
const CLOSEST_MAX_LINES: usize = 12;

struct Replacement {
    start: usize,
    old_len: usize,
    lines: Vec<Line>,
}

/// Applies `chunks` to `file`; `path` is only used in messages.
pub(super) fn apply_chunks(
    file: &TextFile,
    chunks: &[Chunk],
    path: &Path,
    fuzzy: &mut Vec<FuzzyMatch>,
) -> Result<TextFile, Box<NoMatch>> {
    let texts = file.texts();
    let hay = Haystack::new(&texts);
    let mut replacements = Vec::with_capacity(chunks.len());
    let mut line_index = 0usize;
    for (number, chunk) in chunks.iter().enumerate() {
        let hunk = number + 1;
        let fail = |missing: Missing, searched_from: usize, closest_for: &[&str]| {
            Box::new(NoMatch {
                path: path.to_path_buf(),
                hunk,
                patch_line: chunk.patch_line,
                missing,
                searched_after: (searched_from > 0).then_some(searched_from),
                found_earlier_at: None,
                closest: closest_region(&hay, closest_for),
            })
        };
        let mut worst = MatchLevel::Exact;
        let mut anchor = None;
        for context in &chunk.contexts {
            match hay.seek(&[context.as_str()], line_index, false) {
                Some(found) => {
                    anchor = Some(found.index);
                    line_index = found.index + 1;
                    worst = worst.max(found.level);
                }
                None => {
                    return Err(fail(
                        Missing::Context(context.clone()),
                        line_index,
                        &[context.as_str()],
                    ));
                }
            }
        }
        let mut body: Vec<&ChunkLine> = chunk.lines.iter().collect();
        let mut old = chunk.old_lines();
        if old.is_empty() {
            let at = if chunk.at_end_of_file || chunk.contexts.is_empty() {
                hay.len()
            } else {
                line_index
            };
            replacements.push(Replacement {
                start: at,
                old_len: 0,
                lines: render(file, &body, at),
            });
            note_fuzzy(fuzzy, path, hunk, worst);
            continue;
        }
        // Models often repeat the `@@` line as the hunk's first context
        // line; then the lines start at the anchor itself, not after it.
        let locate = |old: &[&str]| {
            hay.seek(old, line_index, chunk.at_end_of_file).or_else(|| {
                anchor
                    .filter(|_| !old.is_empty())
                    .and_then(|at| hay.seek(old, at, chunk.at_end_of_file))
                    .filter(|found| Some(found.index) == anchor)
            })
        };
        let mut found = locate(&old);
        if found.is_none() && old.last().is_some_and(|l| l.is_empty()) {
            // A blank last context line often stands for the end of the
            // file, which has no empty line after the final newline.
            drop_last_old_line(&mut body);
            old.pop();
            found = locate(&old);
        }
        let Some(found) = found else {
            let old_owned: Vec<String> =
                chunk.old_lines().iter().map(|l| (*l).to_owned()).collect();
            let mut error = fail(
                Missing::Lines {
                    lines: old_owned,
                    at_end_of_file: chunk.at_end_of_file,
                },
                line_index,
                &chunk.old_lines(),
            );
            if line_index > 0
                && let Some(earlier) = hay.seek(&old, 0, chunk.at_end_of_file)
                && earlier.index < line_index
            {
                error.found_earlier_at = Some(earlier.index + 1);
            }
            return Err(error);
        };
        worst = worst.max(found.level);
        note_fuzzy(fuzzy, path, hunk, worst);
        replacements.push(Replacement {
            start: found.index,
            old_len: old.len(),
            lines: render(file, &body, found.index),
        });
        line_index = found.index + old.len();
    }
    replacements.sort_by_key(|r| r.start);
    // One pass, front to back: splicing each hunk into a copy would move
    // the rest of the file once per hunk.
    let mut lines = Vec::with_capacity(file.lines.len() + replacements.len());
    let mut cursor = 0usize;
    for replacement in replacements {
        let start = replacement.start.clamp(cursor, file.lines.len());
        lines.extend_from_slice(&file.lines[cursor..start]);
        lines.extend(replacement.lines);
        cursor = (start + replacement.old_len).min(file.lines.len());
    }
    lines.extend_from_slice(&file.lines[cursor..]);
    Ok(TextFile {
        lines,
        dominant_eol: file.dominant_eol,
    })
}

/// The lines a hunk leaves in place of the ones it matched at `start`.
fn render(file: &TextFile, body: &[&ChunkLine], start: usize) -> Vec<Line> {
    let mut cursor = start;
    let mut out = Vec::with_capacity(body.len());
    for line in body {
        match line {
            ChunkLine::Context(text) => {
                out.push(
                    file.lines
                        .get(cursor)
                        .cloned()
                        .unwrap_or_else(|| file.new_line(text)),
                );
                cursor += 1;
            }
            ChunkLine::Remove(_) => cursor += 1,
            ChunkLine::Add(text) => out.push(file.new_line(text)),
        }
    }
    out
}

fn drop_last_old_line(body: &mut Vec<&ChunkLine>) {
    if let Some(position) = body
        .iter()
        .rposition(|l| matches!(l, ChunkLine::Context(_) | ChunkLine::Remove(_)))
    {
        body.remove(position);
    }
}

fn note_fuzzy(fuzzy: &mut Vec<FuzzyMatch>, path: &Path, hunk: usize, level: MatchLevel) {
    if level != MatchLevel::Exact {
        fuzzy.push(FuzzyMatch {
            path: path.to_path_buf(),
            hunk,
            level,
        });
    }
}

fn closest_region(hay: &Haystack<'_>, wanted: &[&str]) -> Option<ClosestRegion> {
    let candidate = hay.closest(wanted)?;
    let shown = wanted.len().clamp(1, CLOSEST_MAX_LINES);
    let lines: Vec<String> = (candidate.index..candidate.index + shown)
        .filter_map(|i| hay.line(i).map(str::to_owned))
        .collect();
    (!lines.is_empty()).then(|| ClosestRegion {
        line: candidate.index + 1,
        lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply_patch::parser::{Operation, parse};

    fn update(original: &str, body: &str) -> Result<String, Box<NoMatch>> {
        let patch = format!("*** Begin Patch\n*** Update File: f\n{body}\n*** End Patch");
        let parsed = parse(&patch).unwrap_or_else(|e| panic!("{e}"));
        let Some(Operation::Update { chunks, .. }) = parsed.operations.first() else {
            panic!("no update");
        };
        let file = TextFile::parse(original.as_bytes());
        let mut fuzzy = Vec::new();
        apply_chunks(&file, chunks, Path::new("f"), &mut fuzzy)
            .map(|out| String::from_utf8_lossy(&out.to_bytes()).into_owned())
    }

    #[test]
    fn replaces_in_order_and_keeps_context_bytes() {
        let out = update("a\nb  \nc\nd\n", "@@\n a\n-b\n+B\n c\n@@\n-d\n+D");
        assert_eq!(out.ok().as_deref(), Some("a\nB\nc\nD\n"));
        let fuzzy_context = update("  x\u{2019}s\ny\n", "@@\n x's\n-y\n+z");
        assert_eq!(fuzzy_context.ok().as_deref(), Some("  x\u{2019}s\nz\n"));
    }

    #[test]
    fn contexts_locate_and_pure_additions_go_after_them_or_to_the_end() {
        let file = "fn a\n  x\nfn b\n  x\nend\n";
        assert_eq!(
            update(file, "@@ fn b\n-  x\n+  y").ok().as_deref(),
            Some("fn a\n  x\nfn b\n  y\nend\n")
        );
        assert_eq!(
            update(file, "@@ fn a\n+  new").ok().as_deref(),
            Some("fn a\n  new\n  x\nfn b\n  x\nend\n")
        );
        assert_eq!(
            update(file, "@@\n+tail").ok().as_deref(),
            Some("fn a\n  x\nfn b\n  x\nend\ntail\n")
        );
    }

    #[test]
    fn the_context_line_repeated_as_first_line_still_applies() {
        let file = "fn a() {\n    1\n}\nfn b() {\n    1\n}\n";
        assert_eq!(
            update(file, "@@ fn b() {\n fn b() {\n-    1\n+    2")
                .ok()
                .as_deref(),
            Some("fn a() {\n    1\n}\nfn b() {\n    2\n}\n")
        );
    }

    #[test]
    fn end_of_file_anchor_and_trailing_blank_context() {
        let file = "x\ny\nx\n";
        assert_eq!(
            update(file, "@@\n-x\n+z\n*** End of File").ok().as_deref(),
            Some("x\ny\nz\n")
        );
        assert_eq!(
            update("a\nb", "@@\n b\n+c\n ").ok().as_deref(),
            Some("a\nb\nc\n")
        );
    }

    #[test]
    fn crlf_file_stays_crlf() {
        assert_eq!(
            update("a\r\nb\r\n", "@@\n-a\n+A\n+A2").ok().as_deref(),
            Some("A\r\nA2\r\nb\r\n")
        );
    }

    #[test]
    fn failures_name_hunk_and_closest_region() {
        let Err(error) = update("one\ntwo\nthree\n", "@@\n-one\n+1\n@@\n-twoo\n+2") else {
            panic!("applied");
        };
        assert_eq!(error.hunk, 2);
        assert_eq!(error.searched_after, Some(1));
        assert_eq!(error.closest.as_ref().map(|c| c.line), Some(2));
        let Err(order) = update("one\ntwo\n", "@@\n-two\n+2\n@@\n-one\n+1") else {
            panic!("applied");
        };
        assert_eq!(order.found_earlier_at, Some(1));
        let Err(context) = update("one\n", "@@ nowhere\n-one") else {
            panic!("applied");
        };
        assert_eq!(context.missing, Missing::Context("nowhere".into()));
    }

    fn chunk_of(lines: Vec<ChunkLine>) -> Chunk {
        Chunk {
            contexts: Vec::new(),
            lines,
            at_end_of_file: false,
            patch_line: 1,
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_chunks_never_panic_and_results_end_with_a_newline(
            file in proptest::collection::vec("[ab \t\u{2019}]{0,3}", 0..12),
            crlf in proptest::bool::ANY,
            body in proptest::collection::vec((0..3u8, "[ab \u{2019}]{0,3}"), 0..8),
            contexts in proptest::collection::vec("[ab ]{0,2}", 0..2),
            at_end_of_file in proptest::bool::ANY,
        ) {
            let text = file.join(if crlf { "\r\n" } else { "\n" });
            let lines = body
                .into_iter()
                .map(|(kind, t)| match kind {
                    0 => ChunkLine::Context(t),
                    1 => ChunkLine::Remove(t),
                    _ => ChunkLine::Add(t),
                })
                .collect();
            let chunk = Chunk { contexts, lines, at_end_of_file, patch_line: 1 };
            let parsed = TextFile::parse(text.as_bytes());
            if let Ok(out) = apply_chunks(&parsed, &[chunk], Path::new("f"), &mut Vec::new()) {
                let bytes = out.to_bytes();
                proptest::prop_assert!(bytes.is_empty() || bytes.ends_with(b"\n"));
            }
        }

        #[test]
        fn replacing_a_window_of_the_file_changes_its_first_occurrence(
            file in proptest::collection::vec("[abc]{1,2}", 1..15),
            start_seed in 0usize..100,
            len_seed in 0usize..100,
        ) {
            let start = start_seed % file.len();
            let len = 1 + len_seed % (file.len() - start);
            let window = &file[start..start + len];
            let first = (0..=file.len() - len)
                .find(|&i| &file[i..i + len] == window)
                .unwrap_or(start);
            let mut body: Vec<ChunkLine> =
                window.iter().map(|l| ChunkLine::Remove(l.clone())).collect();
            body.push(ChunkLine::Add("NEW".to_owned()));
            let text = format!("{}\n", file.join("\n"));
            let out = apply_chunks(
                &TextFile::parse(text.as_bytes()),
                &[chunk_of(body)],
                Path::new("f"),
                &mut Vec::new(),
            );
            let mut expected: Vec<String> = file.clone();
            expected.splice(first..first + len, ["NEW".to_owned()]);
            let expected = format!("{}\n", expected.join("\n"));
            proptest::prop_assert_eq!(
                out.ok().map(|o| String::from_utf8_lossy(&o.to_bytes()).into_owned()),
                Some(expected)
            );
        }
    }
}
