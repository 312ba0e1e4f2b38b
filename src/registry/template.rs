//! `{name}` placeholders in a tool's command elements.
//!
//! Each element of `command` is one argv element, before and after
//! expansion: a value is never split, joined with other elements or given to
//! a shell, so it cannot become syntax. `{{` and `}}` are literal braces.

use std::fmt;

/// A piece of one command element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Piece {
    Literal(String),
    Placeholder(String),
}

/// One command element with its placeholders found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArgTemplate {
    pub(crate) source: String,
    pub(crate) pieces: Vec<Piece>,
}

/// An element whose braces do not form placeholders.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("command element {element:?}: {reason}")]
pub(crate) struct TemplateError {
    pub(crate) element: String,
    pub(crate) reason: String,
}

impl ArgTemplate {
    /// Finds the placeholders of one element.
    pub(crate) fn parse(element: &str) -> Result<Self, TemplateError> {
        let fail = |reason: &str| TemplateError {
            element: element.to_owned(),
            reason: reason.to_owned(),
        };
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = element.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => return Err(fail("a lone '}' (write '}}' for a literal brace)")),
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
                            Some(_) | None => {
                                return Err(fail(
                                    "'{' must start a placeholder like {name} (write '{{' for a literal brace)",
                                ));
                            }
                        }
                    }
                    if name.is_empty() {
                        return Err(fail("empty placeholder {}"));
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Placeholder(name));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() || pieces.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(Self {
            source: element.to_owned(),
            pieces,
        })
    }

    /// The placeholder names, in order.
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Placeholder(name) => Some(name.as_str()),
            Piece::Literal(_) => None,
        })
    }

    /// The parameter this element consists of entirely, if it is `{name}` alone.
    pub(crate) fn whole_placeholder(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Placeholder(name)] => Some(name),
            _ => None,
        }
    }

    /// The placeholder the element starts with, if any (its value leads the element).
    pub(crate) fn leading_placeholder(&self) -> Option<&str> {
        match self.pieces.first() {
            Some(Piece::Placeholder(name)) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Display for ArgTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_whole_and_embedded_placeholders() {
        let t = ArgTemplate::parse("{path}").unwrap();
        assert_eq!(t.whole_placeholder(), Some("path"));
        let t = ArgTemplate::parse("--max-count={n}").unwrap();
        assert_eq!(t.whole_placeholder(), None);
        assert_eq!(t.placeholders().collect::<Vec<_>>(), ["n"]);
        assert_eq!(t.leading_placeholder(), None);
    }

    #[test]
    fn doubled_braces_are_literal() {
        let t = ArgTemplate::parse("{{x}}").unwrap();
        assert_eq!(t.pieces, [Piece::Literal("{x}".into())]);
        assert_eq!(t.placeholders().count(), 0);
    }

    #[test]
    fn bad_braces_are_refused() {
        for bad in ["{", "}", "{a b}", "{}", "x{y", "{a-b}"] {
            assert!(ArgTemplate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn empty_element_stays_one_literal() {
        let t = ArgTemplate::parse("").unwrap();
        assert_eq!(t.pieces, [Piece::Literal(String::new())]);
    }
}
