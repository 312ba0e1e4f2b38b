//! Output that is not UTF-8, decoded from the code page the child wrote in.
//!
//! A Windows program writing to a pipe writes bytes in whatever code page it
//! chose: UTF-8 when it follows the console's 65001, the active ANSI or OEM
//! code page otherwise (`type` of a GBK file writes GBK). Each stream is read
//! as UTF-8 until its first byte that cannot be UTF-8; from there on it is
//! decoded from the child's code page with `encoding_rs`. Only bytes that are
//! not valid in that code page either become U+FFFD, and the stream says so
//! ([`StreamDecoder::lossy`]).

use encoding_rs::{Decoder, Encoding};

/// The code page the child most likely wrote in: the console's output code
/// page when there is a console and it is not UTF-8, else the active ANSI
/// code page, else the OEM one.
pub(crate) fn child_code_page() -> u32 {
    // SAFETY: these calls take no arguments and only read process state.
    let (console, ansi, oem) = unsafe {
        (
            windows_sys::Win32::System::Console::GetConsoleOutputCP(),
            windows_sys::Win32::Globalization::GetACP(),
            windows_sys::Win32::Globalization::GetOEMCP(),
        )
    };
    [console, ansi, oem]
        .into_iter()
        .find(|cp| *cp != 0 && *cp != UTF8_CODE_PAGE)
        .unwrap_or(UTF8_CODE_PAGE)
}

/// Windows' number for UTF-8.
pub(crate) const UTF8_CODE_PAGE: u32 = 65001;

/// The encoding `encoding_rs` has for a Windows code page, if any.
pub(crate) fn encoding_for_code_page(code_page: u32) -> Option<&'static Encoding> {
    let label: &[u8] = match code_page {
        UTF8_CODE_PAGE => b"utf-8",
        936 => b"gbk",
        54936 => b"gb18030",
        950 => b"big5",
        932 => b"shift_jis",
        949 => b"euc-kr",
        866 => b"ibm866",
        874 => b"windows-874",
        1250 => b"windows-1250",
        1251 => b"windows-1251",
        1252 => b"windows-1252",
        1253 => b"windows-1253",
        1254 => b"windows-1254",
        1255 => b"windows-1255",
        1256 => b"windows-1256",
        1257 => b"windows-1257",
        1258 => b"windows-1258",
        20866 => b"koi8-r",
        21866 => b"koi8-u",
        28591 => b"iso-8859-1",
        28592 => b"iso-8859-2",
        28595 => b"iso-8859-5",
        28597 => b"iso-8859-7",
        28605 => b"iso-8859-15",
        10000 => b"macintosh",
        _ => return None,
    };
    Encoding::for_label(label)
}

/// One stream's decoder: UTF-8 until proven otherwise, then the code page.
#[derive(Debug)]
pub(crate) struct StreamDecoder {
    code_page: u32,
    /// The tail of the UTF-8 stretch that may be the start of a character.
    pending: Vec<u8>,
    legacy: Option<Decoder>,
    lossy: bool,
}

impl StreamDecoder {
    /// A decoder that falls back to `code_page`.
    pub(crate) fn new(code_page: u32) -> Self {
        Self {
            code_page,
            pending: Vec::new(),
            legacy: None,
            lossy: false,
        }
    }

    /// Some bytes could not be decoded in either UTF-8 or the code page and
    /// were replaced by U+FFFD.
    pub(crate) fn lossy(&self) -> bool {
        self.lossy
    }

    /// The code page the stream switched to, once it did.
    pub(crate) fn decoded_from(&self) -> Option<u32> {
        self.legacy.as_ref().map(|_| self.code_page)
    }

    /// Takes a chunk and returns it as UTF-8.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<u8> {
        if self.legacy.is_some() {
            return self.decode_legacy(bytes, false);
        }
        self.pending.extend_from_slice(bytes);
        match std::str::from_utf8(&self.pending) {
            Ok(_) => std::mem::take(&mut self.pending),
            Err(error) => {
                let valid = error.valid_up_to();
                let rest = self.pending.split_off(valid);
                let mut out = std::mem::take(&mut self.pending);
                if error.error_len().is_none() {
                    // An incomplete character at the end: wait for the rest.
                    self.pending = rest;
                    return out;
                }
                self.legacy = Some(self.legacy_encoding().new_decoder_without_bom_handling());
                out.extend(self.decode_legacy(&rest, false));
                out
            }
        }
    }

    /// The stream ended: whatever is pending, decoded.
    pub(crate) fn finish(&mut self) -> Vec<u8> {
        if self.legacy.is_none() {
            if self.pending.is_empty() {
                return Vec::new();
            }
            self.legacy = Some(self.legacy_encoding().new_decoder_without_bom_handling());
            let pending = std::mem::take(&mut self.pending);
            return self.decode_legacy(&pending, true);
        }
        self.decode_legacy(&[], true)
    }

    fn legacy_encoding(&self) -> &'static Encoding {
        encoding_for_code_page(self.code_page).unwrap_or(encoding_rs::UTF_8)
    }

    fn decode_legacy(&mut self, bytes: &[u8], last: bool) -> Vec<u8> {
        let Some(decoder) = self.legacy.as_mut() else {
            return bytes.to_vec();
        };
        let mut out = String::with_capacity(
            decoder
                .max_utf8_buffer_length(bytes.len())
                .unwrap_or(bytes.len() * 3 + 16),
        );
        let (_, _, replaced) = decoder.decode_to_string(bytes, &mut out, last);
        self.lossy |= replaced;
        out.into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_output_passes_through_even_split_mid_character() {
        let mut decoder = StreamDecoder::new(936);
        let text = "héllo 世界\n".as_bytes();
        let mut out = decoder.push(&text[..2]);
        out.extend(decoder.push(&text[2..8]));
        out.extend(decoder.push(&text[8..]));
        out.extend(decoder.finish());
        assert_eq!(out, text);
        assert_eq!(decoder.decoded_from(), None);
        assert!(!decoder.lossy());
    }

    #[test]
    fn gbk_output_comes_back_as_utf8() {
        let mut decoder = StreamDecoder::new(936);
        // "中文" in GBK, then a newline.
        let mut out = decoder.push(b"ok \xd6\xd0");
        out.extend(decoder.push(b"\xce\xc4\n"));
        out.extend(decoder.finish());
        assert_eq!(String::from_utf8(out).unwrap(), "ok 中文\n");
        assert_eq!(decoder.decoded_from(), Some(936));
        assert!(!decoder.lossy());
    }

    #[test]
    fn bytes_invalid_in_the_code_page_too_are_replaced_and_said() {
        let mut decoder = StreamDecoder::new(936);
        let mut out = decoder.push(b"a\xff\n");
        out.extend(decoder.finish());
        assert!(String::from_utf8(out).unwrap().contains('\u{fffd}'));
        assert!(decoder.lossy());
    }

    #[test]
    fn known_code_pages_have_an_encoding() {
        assert_eq!(encoding_for_code_page(936), Some(encoding_rs::GBK));
        assert_eq!(encoding_for_code_page(65001), Some(encoding_rs::UTF_8));
        assert_eq!(encoding_for_code_page(1), None);
    }
}
