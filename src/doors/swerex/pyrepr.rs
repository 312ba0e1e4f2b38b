//! Python's `repr()` of the few values the original's error messages embed
//! (`Command 'false' failed ...`, `Timeout (0.3s) exceeded ...`), so a
//! client that shows or matches those messages sees the same text.

use std::fmt::Write;

/// `repr(s)` of a Python `str`.
pub(crate) fn string(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (0x80..0xa0).contains(&(c as u32)) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `repr(list_of_str)`.
pub(crate) fn list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| string(s)).collect();
    format!("[{}]", inner.join(", "))
}

/// `str(f)` of a Python `float` (`5.0`, `0.3`).
pub(crate) fn float(f: f64) -> String {
    if f.is_finite() && f.fract() == 0.0 && f.abs() < 1e16 {
        format!("{f:.1}")
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_quoted_as_python_does() {
        assert_eq!(string("false"), "'false'");
        assert_eq!(string("it's"), "\"it's\"");
        assert_eq!(string("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(string("\r\n\t\\"), "'\\r\\n\\t\\\\'");
        assert_eq!(string("\u{1b}x"), "'\\x1bx'");
        assert_eq!(string("é"), "'é'");
    }

    #[test]
    fn lists_and_floats_print_as_python_does() {
        assert_eq!(list(&["false".into(), "x y".into()]), "['false', 'x y']");
        assert_eq!(float(5.0), "5.0");
        assert_eq!(float(0.3), "0.3");
    }
}
