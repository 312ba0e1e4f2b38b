//! The registry that serves when no file is given: read-only git and file
//! inspection, and the project's test command when one is detected.
//!
//! It is TOML like any operator's file, so it goes through the same checks.

use std::path::Path;

/// The inspection tools, all `risk = "low"` and read-only: git's here,
/// the file tools per platform ([`FILES`]).
const INSPECTION: &str = r#"
# The built-in registry is the local user's own: raw commands (the shell
# tools of `serve`, `command` requests of `exec`) are allowed.
allow_raw_commands = true

[[tools]]
name = "git_status"
description = "List changed files (git status --porcelain)"
command = ["git", "status", "--porcelain"]
cwd = "project_root"
risk = "low"
timeout = 10

[[tools]]
name = "git_diff"
description = "Show changes: unstaged by default, staged with `staged`, or against a revision; optionally for one path"
command = ["git", "--no-pager", "diff", "--no-color", "--no-ext-diff", "{staged}", "{rev}", "--", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 30
params = [
  { name = "staged", type = "boolean", flag = "--cached", default = false, description = "Show staged changes" },
  { name = "rev", type = "string", pattern = "[A-Za-z0-9._/~^@{}:-]+", description = "A revision or range, e.g. HEAD~1 or main..HEAD" },
  { name = "path", type = "path", description = "Only this file or directory" },
]

[[tools]]
name = "git_log"
description = "Recent commits, one line each"
command = ["git", "--no-pager", "log", "--no-color", "--oneline", "--decorate", "--max-count={count}", "{rev}", "--", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 30
params = [
  { name = "count", type = "integer", min = 1, max = 1000, default = 20, description = "How many commits" },
  { name = "rev", type = "string", pattern = "[A-Za-z0-9._/~^@{}:-]+", description = "Start from this revision or range" },
  { name = "path", type = "path", description = "Only commits touching this path" },
]

[[tools]]
name = "git_show"
description = "One commit: message, stat and patch"
command = ["git", "--no-pager", "show", "--no-color", "--no-ext-diff", "--stat", "--patch", "{rev}"]
cwd = "project_root"
risk = "low"
timeout = 30
params = [
  { name = "rev", type = "string", required = true, pattern = "[A-Za-z0-9._/~^@{}:-]+", description = "The commit, e.g. HEAD or a hash" },
]

"#;

/// The file tools on Linux: `ls`, `cat`, `grep`.
#[cfg(unix)]
const FILES: &str = r#"
[[tools]]
name = "list_files"
description = "List a directory of the project (ls -la)"
command = ["ls", "-la", "--", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 10
params = [
  { name = "path", type = "path", default = ".", description = "Directory inside the project" },
]

[[tools]]
name = "read_file"
description = "Print a file of the project"
command = ["cat", "--", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 10
params = [
  { name = "path", type = "path", required = true, description = "File inside the project" },
]

[[tools]]
name = "search_files"
description = "Search file contents with a regular expression (grep -rnI), skipping .git"
command = ["grep", "-rnI", "--exclude-dir=.git", "{ignore_case}", "-e", "{pattern}", "--", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 30
params = [
  { name = "pattern", type = "string", required = true, allow_leading_dash = true, description = "A basic regular expression" },
  { name = "path", type = "path", default = ".", description = "Where to search" },
  { name = "ignore_case", type = "boolean", flag = "-i", default = false, description = "Case-insensitive" },
]
"#;

/// The file tools on Windows: cmd's `dir` and `type`, and `findstr` (a
/// literal string, as findstr's regular expressions are too poor to offer).
/// cmd reads its own command line, so a path naming one of cmd's special
/// characters is refused by the parameter's pattern.
#[cfg(windows)]
const FILES: &str = r#"
[[tools]]
name = "list_files"
description = "List a directory of the project (dir)"
command = ["cmd", "/d", "/c", "dir", "/-c", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 10
params = [
  { name = "path", type = "path", default = ".", pattern = '[^%!&|<>^"]+', description = "Directory inside the project" },
]

[[tools]]
name = "read_file"
description = "Print a file of the project (type)"
command = ["cmd", "/d", "/c", "type", "{path}"]
cwd = "project_root"
risk = "low"
timeout = 10
params = [
  { name = "path", type = "path", required = true, pattern = '[^%!&|<>^"]+', description = "File inside the project" },
]

[[tools]]
name = "search_files"
description = "Search file contents for a literal string (findstr /s /n), recursively from a directory"
command = ["findstr", "/s", "/n", "/p", "/l", "{ignore_case}", "/c:{pattern}", "{path}\\*"]
cwd = "project_root"
risk = "low"
timeout = 30
params = [
  { name = "pattern", type = "string", required = true, allow_leading_dash = true, pattern = '[^"]+', description = "The text to find" },
  { name = "path", type = "path", default = ".", description = "Directory to search" },
  { name = "ignore_case", type = "boolean", flag = "/i", default = false, description = "Case-insensitive" },
]
"#;

/// The test command for the project at `root`, by the files that mark it.
pub(crate) fn detect_test_command(root: &Path) -> Option<(&'static str, &'static str)> {
    let has = |name: &str| root.join(name).is_file();
    if has("Cargo.toml") {
        return Some((r#"["cargo", "test"]"#, "positional"));
    }
    if let Ok(package) = std::fs::read_to_string(root.join("package.json")) {
        let has_script = serde_json::from_str::<serde_json::Value>(&package)
            .ok()
            .is_some_and(|v| v["scripts"]["test"].is_string());
        if has_script {
            return Some((r#"["npm", "test"]"#, "none"));
        }
    }
    if has("go.mod") {
        return Some((r#"["go", "test", "./..."]"#, "none"));
    }
    if [
        "pyproject.toml",
        "setup.py",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
    ]
    .iter()
    .any(|f| has(f))
    {
        return Some((r#"["python3", "-m", "pytest", "-q"]"#, "positional"));
    }
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap_or_default();
    if makefile.lines().any(|l| l.starts_with("test:")) {
        return Some((r#"["make", "test"]"#, "none"));
    }
    None
}

/// The built-in registry's TOML for a project root.
pub(crate) fn builtin_toml(root: &Path) -> String {
    let mut text = INSPECTION.to_owned();
    text.push_str(FILES);
    if let Some((command, extra_args)) = detect_test_command(root) {
        text.push_str(&format!(
            r#"
[[tools]]
name = "run_tests"
description = "Run the project's tests ({})"
command = {command}
cwd = "project_root"
risk = "medium"
timeout = 1800
exclusive = "tests"
extra_args = "{extra_args}"
"#,
            command.trim_matches(['[', ']']).replace('"', "")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::parse::parse_file;

    #[test]
    fn builtin_registry_is_clean_with_and_without_tests() {
        let dir = tempfile::tempdir().unwrap();
        let parsed = parse_file(Path::new("<built-in>"), &builtin_toml(dir.path()));
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert!(parsed.tools.iter().all(|t| t.name != "run_tests"));
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        let parsed = parse_file(Path::new("<built-in>"), &builtin_toml(dir.path()));
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert!(parsed.tools.iter().any(|t| t.name == "run_tests"));
    }
}
