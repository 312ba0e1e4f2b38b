//! Every `--flag` the docs show in code exists: a flag given to one of
//! agent-reach's commands must be in that command's `--help` (or be one of
//! the few hidden flags, each checked to be accepted); a flag of another
//! program must be in [`FOREIGN`], which says whose it is; a flag named
//! alone (`--max-sessions`) must belong to some command.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::markdown::Doc;
use super::{doc_files, repo};
use crate::common::{TestEnv, bin};

/// agent-reach's names, each with the arguments that print its help
/// (before `--help`).
const OURS: &[(&str, &[&str])] = &[
    ("agent-reach", &[]),
    ("swerex-remote", &["--agent-reach-run-as=swerex-remote"]),
    (
        "agent-reach-sandbox",
        &["--agent-reach-run-as=agent-reach-sandbox"],
    ),
    (
        "agent-reach-exec",
        &["--agent-reach-run-as=agent-reach-exec"],
    ),
    ("apply_patch", &["--agent-reach-run-as=apply_patch"]),
    ("applypatch", &["--agent-reach-run-as=applypatch"]),
];

/// Flags `--help` does not list, each with a command that must accept it
/// and why it is hidden.
const HIDDEN: &[(&str, &[&str], &str)] = &[
    (
        "--agent-reach-run-as",
        &["--agent-reach-run-as=apply_patch", "--help"],
        "picks a personality where a link cannot be used (a renamed copy, Windows shims)",
    ),
    (
        "--hide",
        &[
            "sandbox",
            "--policy",
            "danger-full-access",
            "--hide",
            "/nonexistent",
            "--best-effort",
            "--",
            "true",
        ],
        "set by the engine to hide the token and secrets files from a sandboxed command",
    ),
];

/// Other programs the docs show, with the flags they use and what the
/// program is. Scripts of this repository with a `--help` are read from it
/// instead ([`SCRIPTS`]).
const FOREIGN: &[(&str, &[&str], &str)] = &[
    (
        "cargo",
        &[
            "--locked",
            "--lib",
            "--test",
            "--bench",
            "--all-targets",
            "--all",
            "--check",
            "--release",
            "--profile",
            "--bin",
            "--quiet",
        ],
        "Rust's build tool",
    ),
    ("claude", &["--transport", "--header"], "Claude Code's CLI"),
    ("codex", &["--url", "--bearer-token-env-var"], "Codex's CLI"),
    ("uvx", &["--from"], "uv's tool runner"),
    (
        "bwrap",
        &["--ro-bind", "--dev"],
        "bubblewrap, the sandbox benchmark's baseline",
    ),
    (
        "git",
        &["--porcelain"],
        "in the registry example's `git status` tool",
    ),
    (
        "grep",
        &["--max-count"],
        "in the registry example's `grep` tool",
    ),
    (
        "npm",
        &["--progress", "--color"],
        "recording the output fixtures",
    ),
    (
        "benches/grpcio_start.sh",
        &["--runs"],
        "hands its flags to benches/grpcio_start.py, whose `--runs` it is",
    ),
];

/// Scripts of this repository whose `--help` lists their flags. The other
/// scripts the docs run (`benches/`, `tests/`) are read instead: a flag
/// they take is written in their source.
const SCRIPTS: &[&str] = &["install.sh", "scripts/release.sh"];

/// Any long flag in a text.
fn any_flags(text: &str) -> BTreeSet<String> {
    regex::Regex::new(r"--[a-z][a-z0-9-]*")
        .unwrap()
        .find_iter(text)
        .map(|m| m.as_str().to_owned())
        .collect()
}

/// The flags written in a repository script's source, if `program` is one.
fn flags_in_script(program: &str) -> Option<BTreeSet<String>> {
    let relative = program.trim_start_matches("./");
    if !["benches/", "tests/", "scripts/"]
        .iter()
        .any(|d| relative.starts_with(d))
    {
        return None;
    }
    let text = std::fs::read_to_string(repo().join(relative)).ok()?;
    Some(any_flags(&text))
}

/// The option flags a help text lists (one per option line).
fn listed_flags(help: &str) -> BTreeSet<String> {
    let pattern = regex::Regex::new(r"(?m)^\s+(?:-[A-Za-z], )?(--[a-z][a-z0-9-]*)").unwrap();
    pattern
        .captures_iter(help)
        .map(|c| c[1].to_owned())
        .collect()
}

/// The command names a clap help lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

fn help_of(env: &TestEnv, program: &Path, args: &[&str]) -> String {
    let result = env.cmd_at(program).args(args).arg("--help").run();
    result.success();
    result.stdout_str()
}

/// What each command accepts: `agent-reach`, `agent-reach SUB`, each
/// personality and each script, by the name the docs write it with.
struct Known {
    by_command: BTreeMap<String, BTreeSet<String>>,
    everything: BTreeSet<String>,
}

impl Known {
    fn gather() -> Known {
        let env = TestEnv::new();
        let mut by_command = BTreeMap::new();
        for (name, args) in OURS {
            let help = help_of(&env, &bin(), args);
            by_command.insert((*name).to_owned(), listed_flags(&help));
        }
        let top = help_of(&env, &bin(), &[]);
        let mut subs = subcommands(&top);
        subs.push("man".to_owned()); // hidden from the list; its page is its help
        for sub in subs {
            let help = help_of(&env, &bin(), &[&sub]);
            let mut flags = listed_flags(&help);
            for child in subcommands(&help) {
                flags.extend(listed_flags(&help_of(&env, &bin(), &[&sub, &child])));
            }
            by_command.insert(format!("agent-reach {sub}"), flags);
        }
        for script in SCRIPTS {
            let help = help_of(&env, &repo().join(script), &[]);
            by_command.insert((*script).to_owned(), any_flags(&help));
        }
        for (program, flags, _) in FOREIGN {
            by_command.insert(
                (*program).to_owned(),
                flags.iter().map(|f| (*f).to_owned()).collect(),
            );
        }
        let mut everything: BTreeSet<String> = by_command.values().flatten().cloned().collect();
        everything.extend(HIDDEN.iter().map(|(flag, _, _)| (*flag).to_owned()));
        Known {
            by_command,
            everything,
        }
    }

    /// The flags `program` may be given, if the docs' `program` is one we know.
    fn of(&self, words: &[&str]) -> Option<BTreeSet<String>> {
        let first = words.first()?.trim_start_matches("./");
        let name = first.rsplit('/').next().unwrap_or(first);
        let is_ours = OURS.iter().any(|(n, _)| *n == name);
        let sub = words.get(1).map(|sub| format!("agent-reach {sub}"));
        if let Some(flags) = sub.and_then(|sub| self.by_command.get(&sub))
            && name == "agent-reach"
        {
            return Some(flags.clone());
        }
        if is_ours {
            return self.by_command.get(name).cloned();
        }
        if let Some(flags) = self.by_command.get(first) {
            return Some(flags.clone());
        }
        if let Some(flags) = flags_in_script(first) {
            return Some(flags);
        }
        // A subcommand named on its own: `serve --listen`, `run --json`.
        self.by_command
            .get(&format!("agent-reach {first}"))
            .cloned()
    }
}

/// The commands in one piece of code: split at pipes, `;`, `&&`, `$(` and
/// a standalone `--` (after which a wrapped command starts), leading
/// `NAME=value` assignments dropped.
fn segments(code: &str) -> Vec<Vec<&str>> {
    let mut out = Vec::new();
    for part in regex::Regex::new(r"\|\||&&|\||;|\$\(").unwrap().split(code) {
        let mut words: Vec<&str> = Vec::new();
        for word in part.split_whitespace() {
            if word == "--" {
                out.push(std::mem::take(&mut words));
            } else if words.is_empty() && is_assignment(word) {
                continue;
            } else {
                words.push(word);
            }
        }
        out.push(words);
    }
    out.retain(|w| !w.is_empty());
    out
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    })
}

/// Every flag of `doc`'s code that the command it is given to does not take.
fn unknown_flags(doc: &Doc, known: &Known) -> Vec<String> {
    let flag = regex::Regex::new(r"(?:^|[\s\[(|,{=])(--[a-z][a-z0-9-]*)").unwrap();
    let mut unknown = Vec::new();
    for code in doc.code() {
        for words in segments(&code.text) {
            let text = words.join(" ");
            let allowed = known.of(&words);
            for m in flag.captures_iter(&text) {
                let name = &m[1];
                let hidden = HIDDEN.iter().any(|(h, _, _)| *h == name);
                let ok = match &allowed {
                    Some(flags) => {
                        flags.contains(name) || hidden || name == "--help" || name == "--version"
                    }
                    None => known.everything.contains(name),
                };
                if !ok {
                    unknown.push(format!(
                        "{}:{}: {name} in `{text}`",
                        doc.path.display(),
                        code.line
                    ));
                }
            }
        }
    }
    unknown
}

#[test]
fn every_flag_the_docs_name_exists_in_the_help_of_its_command() {
    let known = Known::gather();
    assert!(
        known.by_command["agent-reach serve"].contains("--listen"),
        "serve's help was not read: {:?}",
        known.by_command.keys()
    );
    let mut unknown = Vec::new();
    let mut seen = 0;
    for path in doc_files() {
        let doc = Doc::read(&path);
        seen += doc.code().len();
        unknown.extend(unknown_flags(&doc, &known));
    }
    assert!(
        seen > 200,
        "only {seen} pieces of code found: is the parser broken?"
    );
    assert!(
        unknown.is_empty(),
        "flags the docs name that no --help lists (a program of someone else's goes into FOREIGN with its reason):\n{}",
        unknown.join("\n")
    );
}

#[test]
fn a_flag_that_does_not_exist_is_reported_where_it_is_written() {
    let known = Known::gather();
    let doc = Doc::parse(
        Path::new("X.md"),
        "Run `agent-reach serve --max-sessions 4 --max-bogus 5`, or\n\n```sh\nagent-reach run --json -- grep --max-count 1 x\n~/.local/bin/agent-reach exec --listen mcp=:1\n```\n\nand `--no-such-flag`.\n",
    );
    let unknown = unknown_flags(&doc, &known);
    assert_eq!(
        unknown,
        [
            "X.md:5: --listen in `~/.local/bin/agent-reach exec --listen mcp=:1`",
            "X.md:1: --max-bogus in `agent-reach serve --max-sessions 4 --max-bogus 5`",
            "X.md:8: --no-such-flag in `--no-such-flag`",
        ]
    );
}

#[test]
fn every_flag_of_every_help_is_in_the_reference() {
    let known = Known::gather();
    let reference = Doc::read(&repo().join("docs/REFERENCE.md"));
    let (table, _) = reference.section("Commands and flags");
    let mut missing = Vec::new();
    for (command, flags) in &known.by_command {
        let ours = command.starts_with("agent-reach") || OURS.iter().any(|(n, _)| n == command);
        for flag in flags.iter().filter(|_| ours) {
            if !["--help", "--version"].contains(&flag.as_str())
                && !table.contains(&format!("`{flag}"))
            {
                missing.push(format!("{command} {flag}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags of --help that docs/REFERENCE.md's \"Commands and flags\" does not list:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_hidden_flag_is_accepted() {
    let env = TestEnv::new();
    for (flag, args, why) in HIDDEN {
        let result = env.cmd().args(*args).run();
        let stderr = result.stderr_str();
        assert!(
            !stderr.contains("unexpected argument") && !stderr.contains("unknown"),
            "{flag} ({why}) is refused by `agent-reach {}`:\n{stderr}",
            args.join(" ")
        );
    }
}
