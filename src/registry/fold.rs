//! Output made safe and small for a model: secrets replaced by
//! `[REDACTED:NAME]` (the whole captured buffer at once, so a secret split
//! across reads is still found), then head and tail kept within a byte
//! budget with a marker saying how much was left out.

use aho_corasick::{AhoCorasick, MatchKind};

/// Replaces every secret value in `bytes`; longest match wins.
pub fn redact_bytes(secrets: &[(String, Vec<u8>)], bytes: &[u8]) -> Vec<u8> {
    let secrets: Vec<&(String, Vec<u8>)> = secrets.iter().filter(|(_, v)| !v.is_empty()).collect();
    if secrets.is_empty() || bytes.is_empty() {
        return bytes.to_vec();
    }
    let Ok(matcher) = AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostLongest)
        .build(secrets.iter().map(|(_, v)| v))
    else {
        return bytes.to_vec();
    };
    let replacements: Vec<Vec<u8>> = secrets
        .iter()
        .map(|(name, _)| format!("[REDACTED:{name}]").into_bytes())
        .collect();
    matcher.replace_all_bytes(bytes, &replacements)
}

/// The text of a stream within `budget` bytes: whole when it fits, else its
/// start and end around a marker. `dropped` bytes between `head` and `tail`
/// were never kept. Returns the text and whether anything was left out.
pub fn fold_text(head: &[u8], dropped: u64, tail: &[u8], budget: usize) -> (String, bool) {
    let total = head.len() as u64 + dropped + tail.len() as u64;
    if dropped == 0 && total <= budget as u64 {
        let mut whole = head.to_vec();
        whole.extend_from_slice(tail);
        return (String::from_utf8_lossy(&whole).into_owned(), false);
    }
    let (first, last): (&[u8], &[u8]) = if tail.is_empty() {
        (head, head)
    } else {
        (head, tail)
    };
    let keep_start = (budget / 2).min(first.len());
    let start = cut_back(first, keep_start);
    let keep_end = (budget - budget / 2).min(last.len());
    let end_from = cut_forward(last, last.len() - keep_end);
    let shown_end = &last[end_from..];
    let omitted = total - start.len() as u64 - shown_end.len() as u64;
    let mut text = String::from_utf8_lossy(start).into_owned();
    text.push_str(&format!("\n[... {omitted} bytes omitted ...]\n"));
    text.push_str(&String::from_utf8_lossy(shown_end));
    (text, true)
}

/// `bytes[..n]` shortened to end on a UTF-8 character boundary.
fn cut_back(bytes: &[u8], n: usize) -> &[u8] {
    let mut end = n;
    while end > 0 && end < bytes.len() && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    &bytes[..end]
}

/// An index at or after `from` that starts a UTF-8 character.
fn cut_forward(bytes: &[u8], from: usize) -> usize {
    let mut start = from;
    while start < bytes.len() && (bytes[start] & 0xC0) == 0x80 {
        start += 1;
    }
    start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_replaced_even_overlapping() {
        let secrets = vec![
            ("A".to_owned(), b"hunter2".to_vec()),
            ("B".to_owned(), b"hunter22".to_vec()),
        ];
        assert_eq!(
            redact_bytes(&secrets, b"x hunter22 hunter2"),
            b"x [REDACTED:B] [REDACTED:A]"
        );
    }

    #[test]
    fn small_output_is_whole_and_large_output_folds() {
        assert_eq!(
            fold_text(b"hello", 0, b"", 100),
            ("hello".to_owned(), false)
        );
        let big = "é".repeat(1000);
        let (text, folded) = fold_text(big.as_bytes(), 0, b"", 101);
        assert!(folded);
        assert!(text.contains("bytes omitted"));
        assert!(text.len() < 200);
        assert!(!text.contains('\u{FFFD}'));
        let (text, folded) = fold_text(b"aaaa", 10, b"zzzz", 4);
        assert!(folded);
        assert!(text.starts_with("aa\n") && text.ends_with("\nzz"), "{text}");
        assert!(text.contains("[... 14 bytes omitted ...]"), "{text}");
    }
}
