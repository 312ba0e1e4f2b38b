//! Secret redaction: every occurrence of an injected secret's value becomes
//! `[REDACTED:NAME]` before output is kept in memory, written to the spill
//! file or shown to the model.
//!
//! Output arrives in arbitrary chunks, so a value can be split across two
//! pushes. The redactor therefore holds back the longest end of a chunk that
//! could still grow into a secret, and a match that could still grow into a
//! longer secret, until the next push (or [`Redactor::finish`]) settles it.
//! Overlapping secrets resolve longest first (leftmost-longest matching).

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// Replaces secret values in a stream of bytes.
#[derive(Debug, Clone)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
    /// Secret values in pattern order (the matcher's pattern ids index it).
    values: Vec<Vec<u8>>,
    /// `[REDACTED:NAME]` for each pattern.
    replacements: Vec<Vec<u8>>,
    /// Bytes held back from the previous push: they may start a secret.
    held: Vec<u8>,
}

impl Redactor {
    /// A redactor for `secrets` (name, value). Empty values are ignored: they
    /// would match everywhere and hide nothing.
    pub fn new(secrets: Vec<(String, Vec<u8>)>) -> Self {
        let mut pairs: Vec<(String, Vec<u8>)> = secrets
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
        // Longest first, so that of two identical-prefix secrets the longer
        // one wins on ties in the builder as well as in leftmost-longest.
        pairs.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
        pairs.dedup_by(|a, b| a.1 == b.1);
        let values: Vec<Vec<u8>> = pairs.iter().map(|(_, v)| v.clone()).collect();
        let replacements = pairs
            .iter()
            .map(|(name, _)| format!("[REDACTED:{name}]").into_bytes())
            .collect();
        let matcher = if values.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::LeftmostLongest)
                .build(&values)
                .ok()
        };
        Self {
            matcher,
            values,
            replacements,
            held: Vec::new(),
        }
    }

    /// True when there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// Redacts the next chunk; returns what is safe to pass on now.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        let Some(matcher) = &self.matcher else {
            return chunk.to_vec();
        };
        let mut buffer = std::mem::take(&mut self.held);
        buffer.extend_from_slice(chunk);
        let mut out = Vec::with_capacity(buffer.len());
        let mut emitted = 0;
        // Everything from `hold` on may still become (part of) a secret.
        let mut hold = self.partial_secret_start(&buffer, 0);
        for found in matcher.find_iter(&buffer) {
            if found.start() >= hold {
                break;
            }
            out.extend_from_slice(&buffer[emitted..found.start()]);
            out.extend_from_slice(&self.replacements[found.pattern().as_usize()]);
            emitted = found.end();
            if emitted > hold {
                hold = self.partial_secret_start(&buffer, emitted);
            }
        }
        out.extend_from_slice(&buffer[emitted..hold]);
        self.held = buffer[hold..].to_vec();
        out
    }

    /// Flushes what was held back: the stream ended, nothing can complete it.
    pub fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.redact_bytes(&held)
    }

    /// Redacts a whole string at once (logs, error messages).
    pub fn redact_str(&self, text: &str) -> String {
        String::from_utf8_lossy(&self.redact_bytes(text.as_bytes())).into_owned()
    }

    /// Redacts a complete byte string at once.
    pub fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let Some(matcher) = &self.matcher else {
            return bytes.to_vec();
        };
        let mut out = Vec::with_capacity(bytes.len());
        let mut emitted = 0;
        for found in matcher.find_iter(bytes) {
            out.extend_from_slice(&bytes[emitted..found.start()]);
            out.extend_from_slice(&self.replacements[found.pattern().as_usize()]);
            emitted = found.end();
        }
        out.extend_from_slice(&bytes[emitted..]);
        out
    }

    /// Redacts the start of a longer text that was cut: an end that could
    /// begin a secret is dropped, since the rest of the secret was not seen.
    pub fn redact_cut(&self, bytes: &[u8]) -> Vec<u8> {
        if self.matcher.is_none() {
            return bytes.to_vec();
        }
        let keep = self.partial_secret_start(bytes, 0);
        self.redact_bytes(&bytes[..keep])
    }

    /// Where the longest end of `buffer[from..]` that is a proper prefix of
    /// some secret starts (`buffer.len()` when there is none).
    fn partial_secret_start(&self, buffer: &[u8], from: usize) -> usize {
        let longest = self.values.first().map_or(0, Vec::len);
        let earliest = buffer
            .len()
            .saturating_sub(longest.saturating_sub(1))
            .max(from);
        (earliest..buffer.len())
            .find(|&start| {
                let suffix = &buffer[start..];
                self.values
                    .iter()
                    .any(|value| value.len() > suffix.len() && value.starts_with(suffix))
            })
            .unwrap_or(buffer.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redactor(secrets: &[(&str, &str)]) -> Redactor {
        Redactor::new(
            secrets
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn streamed(redactor: &mut Redactor, pieces: &[&[u8]]) -> String {
        let mut out = Vec::new();
        for piece in pieces {
            out.extend(redactor.push(piece));
        }
        out.extend(redactor.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn replaces_every_occurrence_in_one_push() {
        let mut r = redactor(&[("TOKEN", "s3cr3t-value")]);
        let out = streamed(&mut r, &[b"a s3cr3t-value b s3cr3t-value\n"]);
        assert_eq!(out, "a [REDACTED:TOKEN] b [REDACTED:TOKEN]\n");
    }

    #[test]
    fn replaces_a_value_split_at_every_point_between_two_pushes() {
        let text = b"before hunter2-secret after";
        for split in 0..=text.len() {
            let mut r = redactor(&[("PW", "hunter2-secret")]);
            let out = streamed(&mut r, &[&text[..split], &text[split..]]);
            assert_eq!(out, "before [REDACTED:PW] after", "split at {split}");
        }
    }

    #[test]
    fn replaces_a_value_pushed_one_byte_at_a_time() {
        let text = b"xx hunter2-secret hunter2-secre hunter2-secret";
        let mut r = redactor(&[("PW", "hunter2-secret")]);
        let pieces: Vec<&[u8]> = text.chunks(1).collect();
        let out = streamed(&mut r, &pieces);
        assert_eq!(out, "xx [REDACTED:PW] hunter2-secre [REDACTED:PW]");
    }

    #[test]
    fn prefers_the_longest_of_overlapping_secrets_at_every_split() {
        let text = b"k=abcdef; k=abc;";
        for split in 0..=text.len() {
            let mut r = redactor(&[("SHORT", "abc"), ("LONG", "abcdef")]);
            let out = streamed(&mut r, &[&text[..split], &text[split..]]);
            assert_eq!(
                out, "k=[REDACTED:LONG]; k=[REDACTED:SHORT];",
                "split at {split}"
            );
        }
    }

    #[test]
    fn a_held_back_prefix_is_released_when_the_stream_ends() {
        let mut r = redactor(&[("PW", "hunter2")]);
        assert_eq!(r.push(b"hello hunt"), b"hello ");
        assert_eq!(r.finish(), b"hunt");
    }

    #[test]
    fn a_short_secret_inside_a_longer_one_is_still_found() {
        let mut r = redactor(&[("A", "xyz"), ("B", "axyzb")]);
        assert_eq!(streamed(&mut r, &[b"axyzc"]), "a[REDACTED:A]c");
    }

    #[test]
    fn ignores_empty_values_and_passes_everything_through_without_secrets() {
        let mut r = redactor(&[("EMPTY", "")]);
        assert!(r.is_empty());
        assert_eq!(r.push(b"plain"), b"plain");
    }

    #[test]
    fn redact_str_replaces_in_messages() {
        let r = redactor(&[("API_KEY", "sk-123456")]);
        assert_eq!(
            r.redact_str("curl -H 'Authorization: sk-123456' failed"),
            "curl -H 'Authorization: [REDACTED:API_KEY]' failed"
        );
    }

    #[test]
    fn binary_secret_values_are_redacted_too() {
        let mut r = Redactor::new(vec![("BIN".into(), vec![0xff, 0x00, 0xfe])]);
        let out = [r.push(&[1, 0xff]), r.push(&[0x00, 0xfe, 2]), r.finish()].concat();
        assert_eq!(out, b"\x01[REDACTED:BIN]\x02");
    }

    #[test]
    fn a_short_secret_inside_an_unfinished_longer_one_reveals_nothing_of_it() {
        let text = b"x abcdef y";
        for split in 0..=text.len() {
            let mut r = redactor(&[("SHORT", "bcd"), ("LONG", "abcdef")]);
            let out = streamed(&mut r, &[&text[..split], &text[split..]]);
            assert_eq!(out, "x [REDACTED:LONG] y", "split at {split}");
        }
    }

    proptest::proptest! {
        /// Whatever the chunking, streaming gives exactly what redacting the
        /// whole text at once gives.
        #[test]
        fn streaming_equals_one_shot(
            secrets in proptest::collection::vec("[abc]{1,5}", 1..4),
            text in "[abcx]{0,60}",
            cuts in proptest::collection::vec(0_usize..61, 0..6),
        ) {
            let pairs: Vec<(String, Vec<u8>)> = secrets
                .iter()
                .enumerate()
                .map(|(i, s)| (format!("S{i}"), s.as_bytes().to_vec()))
                .collect();
            let one_shot = Redactor::new(pairs.clone()).redact_bytes(text.as_bytes());
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(text.len())).collect();
            cuts.sort_unstable();
            let mut streaming = Redactor::new(pairs);
            let mut out = Vec::new();
            let mut from = 0;
            for cut in cuts {
                out.extend(streaming.push(&text.as_bytes()[from..cut]));
                from = cut;
            }
            out.extend(streaming.push(&text.as_bytes()[from..]));
            out.extend(streaming.finish());
            proptest::prop_assert_eq!(out, one_shot);
        }
    }
}
