//! Strips what a model wraps around a patch before it reaches us.
//!
//! Models call `apply_patch` through tools that do not run a shell, so the
//! argument often still carries the heredoc the model meant for one
//! (`<<'EOF'` ... `EOF`, `cat <<EOF | apply_patch`), or a Markdown code
//! fence. Only those exact shapes are removed: anything else before
//! `*** Begin Patch` stays and the parser reports it.

/// A patch line with its 1-based line number in the text as it was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NumberedLine<'a> {
    /// 1-based line number in the original text.
    pub(crate) number: usize,
    /// The line without its `\n` or `\r\n`.
    pub(crate) text: &'a str,
}

/// Splits `input` into numbered lines and removes surrounding blank lines,
/// a heredoc wrapper and a Markdown code fence, in any nesting.
pub(super) fn unwrap_patch(input: &str) -> Vec<NumberedLine<'_>> {
    let mut lines: Vec<NumberedLine<'_>> = input
        .lines()
        .enumerate()
        .map(|(index, text)| NumberedLine {
            number: index + 1,
            text,
        })
        .collect();
    loop {
        trim_blank_lines(&mut lines);
        if !strip_heredoc(&mut lines) && !strip_code_fence(&mut lines) {
            return lines;
        }
    }
}

fn trim_blank_lines(lines: &mut Vec<NumberedLine<'_>>) {
    while lines.last().is_some_and(|l| l.text.trim().is_empty()) {
        lines.pop();
    }
    let leading = lines
        .iter()
        .take_while(|l| l.text.trim().is_empty())
        .count();
    lines.drain(..leading);
}

/// Removes `... <<'WORD' ...` as the first line and `WORD` as the last.
fn strip_heredoc(lines: &mut Vec<NumberedLine<'_>>) -> bool {
    let Some(first) = lines.first() else {
        return false;
    };
    let Some(word) = heredoc_delimiter(first.text) else {
        return false;
    };
    lines.remove(0);
    if lines.last().is_some_and(|l| l.text.trim() == word) {
        lines.pop();
    }
    true
}

/// The delimiter of a heredoc opened on this line (`<<EOF`, `<<'EOF'`,
/// `<< "EOF"`, `<<-EOF`), when the line holds nothing but a command
/// around it and is not itself a patch line.
pub(super) fn heredoc_delimiter(line: &str) -> Option<&str> {
    let line = line.trim();
    if line.starts_with("***") {
        return None;
    }
    let (_, after) = line.split_once("<<")?;
    let after = after.strip_prefix('-').unwrap_or(after).trim_start();
    let (quote, rest) = match after.chars().next()? {
        q @ ('\'' | '"') => (Some(q), &after[1..]),
        _ => (None, after),
    };
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(rest.len());
    let word = &rest[..end];
    if word.is_empty() {
        return None;
    }
    match quote {
        Some(q) if !rest[end..].starts_with(q) => None,
        _ => Some(word),
    }
}

/// Removes a Markdown fence (```` ``` ```` or ```` ```diff ````) around the patch.
fn strip_code_fence(lines: &mut Vec<NumberedLine<'_>>) -> bool {
    let opens = lines.first().is_some_and(|l| {
        let t = l.text.trim();
        t.starts_with("```") && !t[3..].contains('`')
    });
    let closes = lines.len() >= 2 && lines.last().is_some_and(|l| l.text.trim() == "```");
    if !(opens && closes) {
        return false;
    }
    lines.remove(0);
    lines.pop();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(input: &str) -> Vec<&str> {
        unwrap_patch(input).into_iter().map(|l| l.text).collect()
    }

    #[test]
    fn plain_patch_only_loses_blank_edges() {
        assert_eq!(
            texts("\n\n*** Begin Patch\n*** End Patch\n\n"),
            ["*** Begin Patch", "*** End Patch"]
        );
    }

    #[test]
    fn heredoc_forms_are_stripped() {
        for opener in [
            "<<EOF",
            "<<'EOF'",
            "<< \"EOF\"",
            "<<-EOF",
            "apply_patch <<'EOF'",
            "cat <<'EOF' | apply_patch",
        ] {
            let input = format!("{opener}\n*** Begin Patch\n*** End Patch\nEOF\n");
            assert_eq!(
                texts(&input),
                ["*** Begin Patch", "*** End Patch"],
                "opener {opener:?}"
            );
        }
    }

    #[test]
    fn heredoc_with_other_word_and_fence_inside() {
        let input = "<<'PATCH'\n```diff\n*** Begin Patch\n*** End Patch\n```\nPATCH";
        assert_eq!(texts(input), ["*** Begin Patch", "*** End Patch"]);
    }

    #[test]
    fn line_numbers_survive_stripping() {
        let lines = unwrap_patch("\n<<EOF\n*** Begin Patch\n*** End Patch\nEOF");
        assert_eq!(lines[0].number, 3);
        assert_eq!(lines[1].number, 4);
    }

    #[test]
    fn unbalanced_quote_is_not_a_heredoc() {
        assert_eq!(heredoc_delimiter("<<'EOF"), None);
        assert_eq!(heredoc_delimiter("*** Add File: a<<b"), None);
        assert_eq!(heredoc_delimiter("<<"), None);
    }
}
