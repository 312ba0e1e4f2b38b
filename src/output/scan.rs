//! The fast scanner of the terminal clean-up: finding the bytes that end a
//! run of plain text (control bytes eight at a time, C1 controls, a
//! character cut off by the end of a push) and reading simple CSI sequences
//! without the parser, plus the SGR helpers. Pure byte functions, apart from
//! the screen model ([`super::screen`]) they feed, so each is tested alone.

/// The first ASCII control byte (below 0x20, or DEL), eight bytes at a time.
pub(crate) fn first_control(bytes: &[u8]) -> Option<usize> {
    first_stop::<false>(bytes)
}

/// The first ASCII control byte other than `\n` and `\t`: what stops plain
/// lines from going straight through.
pub(crate) fn first_control_but_newline_or_tab(bytes: &[u8]) -> Option<usize> {
    first_stop::<true>(bytes)
}

/// Lanes of `x` (high bit set) whose byte is zero, exactly (no carries
/// between lanes).
fn zero_lanes(x: u64) -> u64 {
    const LOWS: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    !(((x & LOWS) + LOWS) | x) & !LOWS
}

/// The first byte below 0x20 or DEL (sparing `\n` and `\t` when
/// `SPARE_LINES`), found a word at a time with exact per-byte masks.
fn first_stop<const SPARE_LINES: bool>(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let stops = |b: u8| (b < 0x20 && !(SPARE_LINES && (b == b'\n' || b == b'\t'))) || b == 0x7F;
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut word = [0_u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        // High bit set where the byte is below 0x20 (and below 0x80).
        let below_space = !((x | HIGHS) - ONES * 0x20) & !x & HIGHS;
        let mut hits = below_space | zero_lanes(x ^ (ONES * 0x7F));
        if SPARE_LINES {
            hits &= !zero_lanes(x ^ (ONES * u64::from(b'\n')));
            hits &= !zero_lanes(x ^ (ONES * u64::from(b'\t')));
        }
        if hits != 0 {
            return Some(offset + (hits.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| stops(b))
        .map(|at| offset + at)
}

/// Where the first C1 control (U+0080..U+009F, `C2 80`..`C2 9F`) starts.
pub(crate) fn first_c1_control(bytes: &[u8]) -> Option<usize> {
    memchr::memchr_iter(0xC2, bytes)
        .find(|&at| bytes.get(at + 1).is_some_and(|b| (0x80..=0x9F).contains(b)))
}

/// How many bytes at the end of `bytes` are the start of a UTF-8 character
/// that is not complete yet.
pub(crate) fn incomplete_char_len(bytes: &[u8]) -> usize {
    let tail_start = bytes.len().saturating_sub(3);
    for at in (tail_start..bytes.len()).rev() {
        let byte = bytes[at];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let width = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        let have = bytes.len() - at;
        return if have < width { have } else { 0 };
    }
    0
}

/// Params of a CSI sequence the fast path handles itself; more go to vte.
pub(crate) const MAX_FAST_PARAMS: usize = 16;

/// Parses `ESC [ (digit | ;)* final` at the start of `bytes`, with values
/// accumulated the way vte does (saturating): (length, values, count, final).
pub(crate) fn simple_csi(bytes: &[u8]) -> Option<(usize, [u16; MAX_FAST_PARAMS], usize, u8)> {
    if bytes.len() < 3 || bytes[0] != 0x1B || bytes[1] != b'[' {
        return None;
    }
    let mut values = [0_u16; MAX_FAST_PARAMS];
    let mut count = 0;
    let mut current: u16 = 0;
    for (i, &byte) in bytes[2..].iter().enumerate().take(64) {
        match byte {
            b'0'..=b'9' => {
                current = current
                    .saturating_mul(10)
                    .saturating_add(u16::from(byte - b'0'));
            }
            b';' => {
                if count + 1 == MAX_FAST_PARAMS {
                    return None;
                }
                values[count] = current;
                count += 1;
                current = 0;
            }
            0x40..=0x7E => {
                values[count] = current;
                return Some((i + 3, values, count + 1, byte));
            }
            _ => return None,
        }
    }
    None
}

/// Re-encodes an SGR sequence from its parsed parameters.
pub(crate) fn sgr_sequence<'a>(params: impl Iterator<Item = &'a [u16]>) -> Vec<u8> {
    let mut out = b"\x1b[".to_vec();
    for (i, param) in params.enumerate() {
        if i > 0 {
            out.push(b';');
        }
        for (j, sub) in param.iter().enumerate() {
            if j > 0 {
                out.push(b':');
            }
            out.extend_from_slice(sub.to_string().as_bytes());
        }
    }
    out.push(b'm');
    out
}

/// Removes SGR sequences (`ESC [ ... m`) from already cleaned text.
pub fn strip_sgr(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut rest = text;
    while let Some(esc) = memchr::memchr(0x1B, rest) {
        out.extend_from_slice(&rest[..esc]);
        let after = &rest[esc + 1..];
        let sgr_len = (after.first() == Some(&b'['))
            .then(|| {
                after[1..]
                    .iter()
                    .position(|b| !(b.is_ascii_digit() || *b == b';' || *b == b':'))
                    .filter(|&end| after[1 + end] == b'm')
                    .map(|end| end + 2)
            })
            .flatten();
        match sgr_len {
            Some(len) => rest = &after[len..],
            None => {
                out.push(0x1B);
                rest = after;
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_control_bytes_at_every_position() {
        for len in 0..20 {
            for at in 0..len {
                for control in [0x00_u8, 0x0A, 0x1B, 0x1F, 0x7F] {
                    let mut bytes = vec![b'x'; len];
                    bytes[at] = control;
                    assert_eq!(first_control(&bytes), Some(at), "{len} {at} {control}");
                }
                let mut bytes = vec![b'x'; len];
                bytes[at] = 0xC3;
                assert_eq!(first_control(&bytes), None);
            }
        }
        assert_eq!(first_control(" ~é".as_bytes()), None);
    }

    #[test]
    fn word_masks_match_a_byte_by_byte_scan_for_every_byte_value() {
        for value in 0..=255_u8 {
            for at in 0..17 {
                let mut bytes = vec![b'x'; 17];
                bytes[at] = value;
                let control = value < 0x20 || value == 0x7F;
                let spared = value == b'\n' || value == b'\t';
                assert_eq!(
                    first_control(&bytes),
                    control.then_some(at),
                    "{value:#x} at {at}"
                );
                assert_eq!(
                    first_control_but_newline_or_tab(&bytes),
                    (control && !spared).then_some(at),
                    "{value:#x} at {at}"
                );
            }
        }
    }

    #[test]
    fn newlines_and_tabs_do_not_stop_plain_lines() {
        assert_eq!(first_control_but_newline_or_tab(b"y\ny\ny\n\ty\n"), None);
        for at in 0..40 {
            let mut bytes = b"y\n".repeat(20);
            bytes[at] = b'\r';
            assert_eq!(first_control_but_newline_or_tab(&bytes), Some(at));
        }
    }

    #[test]
    fn knows_when_a_push_ends_inside_a_character() {
        assert_eq!(incomplete_char_len(b"ab"), 0);
        assert_eq!(incomplete_char_len("é".as_bytes()), 0);
        assert_eq!(incomplete_char_len(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_char_len(&"→".as_bytes()[..2]), 2);
        assert_eq!(incomplete_char_len(&[b'a', 0xF0, 0x9F, 0x98]), 3);
        assert_eq!(incomplete_char_len(&[0xFF]), 0);
    }

    #[test]
    fn strip_sgr_removes_only_colour() {
        assert_eq!(
            strip_sgr(b"\x1b[1;31mred\x1b[0m \x1b[2Kx\x1b"),
            b"red \x1b[2Kx\x1b"
        );
    }
}
