//! One registry file, read into validated values while collecting every
//! problem with its line: unknown keys, bad types, bad values, unknown
//! placeholders, duplicate names. Nothing stops at the first problem.
//!
//! The reading goes in layers, low to high (as ripgrep turns raw flags into
//! validated settings): [`read`] holds the typed readers of one TOML node
//! (a string, a risk, a duration, a policy), each recording its own problem
//! with its span; [`settings`] reads the top-level keys, `[scheduler]`,
//! `[sandbox]`, `[env]` and `[profiles]`; [`tool`] turns one `[[tools]]`
//! table into a [`ToolSpec`]; [`param`] turns one `params = [...]` entry
//! into a [`ParamSpec`](super::model::ParamSpec), whose own
//! [`problems`](super::model::ParamSpec::problems) (in [`param_rules`])
//! are the checks between its fields.

mod param;
mod param_rules;
mod read;
mod settings;
mod tool;

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml_edit::ImDocument;

use super::location::{LineIndex, Location, Problem};
use super::model::{Profile, Risk, ToolSpec};
use crate::sandbox::{Network, Policy};

/// Settings one file sets; `None` = not set here (an earlier file's value stays).
#[derive(Debug, Clone, Default)]
pub(crate) struct FileSettings {
    pub(crate) max_risk: Option<Risk>,
    pub(crate) approval: Option<Risk>,
    pub(crate) allow_raw_commands: Option<bool>,
    pub(crate) raw_commands_risk: Option<Risk>,
    pub(crate) secrets_file: Option<PathBuf>,
    pub(crate) scheduler_global: Option<usize>,
    pub(crate) scheduler_queue: Option<usize>,
    pub(crate) scheduler_per_caller: Option<usize>,
    pub(crate) groups: BTreeMap<String, usize>,
    pub(crate) sandbox_default: Option<Policy>,
    pub(crate) sandbox_network: Option<Network>,
    pub(crate) writable_roots: Option<Vec<PathBuf>>,
    pub(crate) best_effort: Option<bool>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) limits: crate::registry::model::LimitOverrides,
}

/// What one file says, plus its problems.
#[derive(Debug, Default)]
pub(crate) struct ParsedFile {
    pub(crate) includes: Vec<(PathBuf, Location)>,
    pub(crate) settings: FileSettings,
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) profiles: Vec<Profile>,
    pub(crate) problems: Vec<Problem>,
}

/// Parses one registry file's text. `file` names it in problems; relative
/// paths in it (includes, secrets file) are taken from its directory.
pub(crate) fn parse_file(file: &Path, text: &str) -> ParsedFile {
    let index = LineIndex::new(file, text);
    let mut walker = Walker {
        index: &index,
        base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        out: ParsedFile::default(),
    };
    match ImDocument::parse(text) {
        Ok(doc) => walker.top(doc.as_table()),
        Err(err) => {
            let message = err.message().trim().to_owned();
            walker.problem(err.span(), format!("invalid TOML: {message}"));
        }
    }
    walker.out
}

/// The state of one file's reading: where spans are located, where relative
/// paths start, and what has been read (problems included) so far. Its
/// methods live with the layer they belong to (the submodules).
struct Walker<'i> {
    index: &'i LineIndex,
    base_dir: PathBuf,
    out: ParsedFile,
}

impl Walker<'_> {
    /// Records one problem at `span` (`None`: the start of the file).
    fn problem(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        self.out.problems.push(Problem {
            location: self.index.locate_span(span),
            message: message.into(),
        });
    }
}

/// Helpers the submodules' unit tests share.
#[cfg(test)]
mod testing {
    use std::path::Path;

    use super::{ParsedFile, parse_file};

    /// `text` parsed as the file `r.toml`.
    pub(super) fn parse(text: &str) -> ParsedFile {
        parse_file(Path::new("r.toml"), text)
    }

    /// Every problem as `file:line:col: message`.
    pub(super) fn messages(parsed: &ParsedFile) -> Vec<String> {
        parsed.problems.iter().map(|p| p.to_string()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{messages, parse};

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let parsed = parse(
            r#"colour = 1
[[tools]]
name = "a"
command = ["echo", "{nope}"]

[[tools]]
name = "b"
command = "echo"
cwd = "project_root"
timeout = "ten"
risk = "extreme"
params = [{ name = "x", type = "integr" }]

[[tools]]
name = "a"
command = ["true"]
cwd = "caller"
"#,
        );
        let all = messages(&parsed).join("\n");
        assert!(all.contains("r.toml:1:1: unknown key `colour`"), "{all}");
        assert!(
            all.contains("r.toml:2:") && all.contains("no `cwd` policy"),
            "{all}"
        );
        assert!(all.contains("unknown placeholder {nope}"), "{all}");
        assert!(
            all.contains("r.toml:8:11: `command` must be an array"),
            "{all}"
        );
        assert!(
            all.contains("r.toml:10:11: `timeout` must be a number"),
            "{all}"
        );
        assert!(all.contains("r.toml:11:8: `risk` must be"), "{all}");
        assert!(all.contains("unknown type \"integr\""), "{all}");
        assert!(
            all.contains("r.toml:14:1: duplicate tool name \"a\""),
            "{all}"
        );
        assert!(parsed.problems.len() >= 8, "{all}");
    }

    #[test]
    fn limits_are_read_at_the_top_and_in_profiles_and_unknown_keys_refused() {
        let parsed = parse(
            "[limits]\npids = 50\nmax_timeout_ms = 1000\n[profiles.p.limits]\nmax_output_tokens = 7\n",
        );
        assert!(parsed.problems.is_empty(), "{:?}", messages(&parsed));
        assert_eq!(parsed.settings.limits.pids, Some(50));
        assert_eq!(parsed.settings.limits.max_timeout_ms, Some(1000));
        assert_eq!(parsed.settings.limits.max_output_tokens, None);
        assert_eq!(parsed.profiles[0].limits.max_output_tokens, Some(7));
        let bad = parse("[limits]\npid = 5\nmax_timeout_ms = 0\n");
        let all = messages(&bad).join("\n");
        assert!(all.contains("unknown key `pid` in [limits]"), "{all}");
        assert!(
            all.contains("`limits.max_timeout_ms` must be at least 1"),
            "{all}"
        );
    }

    #[test]
    fn parse_errors_have_a_line() {
        let parsed = parse("a = 1\n[[tools]\n");
        assert_eq!(parsed.problems.len(), 1);
        assert_eq!(parsed.problems[0].location.line, 2);
        assert!(parsed.problems[0].message.starts_with("invalid TOML"));
    }
}
