//! The documentation cannot rot silently: its relative links and anchors
//! resolve, the README's quick start runs as shown against the binary under
//! test (and prints what the README says it prints), every flag the docs
//! name exists (`docs/flags.rs`), the agent session of docs/GUIDE.md is
//! what the server answers (`docs/session.rs`), and the lists that mirror the code (the
//! environment variables, the error kinds, what each dependency is for)
//! hold every item the code has.

mod flags;
mod markdown;
mod session;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::json;

use self::markdown::Doc;
use crate::common::{TestEnv, bin};

/// The checkout the tests were built from.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md, CONTRIBUTING.md and every page under docs/.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md"), repo().join("CONTRIBUTING.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    files.extend(pages);
    files
}

fn readme() -> Doc {
    Doc::read(&repo().join("README.md"))
}

/// Every relative link of `docs` that does not resolve: a missing file, or
/// an `#anchor` that no heading of the target page has.
fn broken_links(docs: &[Doc]) -> Vec<String> {
    let mut broken = Vec::new();
    for doc in docs {
        let dir = doc.path.parent().unwrap();
        for link in doc.links() {
            let target = link.text.as_str();
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if path.is_empty() {
                doc.path.clone()
            } else {
                dir.join(path)
            };
            let at = format!("{}:{}: {target}", doc.path.display(), link.line);
            if !file.exists() {
                broken.push(format!("{at}: no such file {}", file.display()));
                continue;
            }
            if anchor.is_empty() {
                continue;
            }
            if file.extension().is_none_or(|x| x != "md") {
                broken.push(format!("{at}: an anchor into a file that is not Markdown"));
                continue;
            }
            let anchors = Doc::read(&file).anchors();
            if !anchors.iter().any(|a| a == anchor) {
                broken.push(format!("{at}: {} has no heading #{anchor}", file.display()));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let docs: Vec<Doc> = doc_files().iter().map(|p| Doc::read(p)).collect();
    let links: usize = docs.iter().map(|d| d.links().len()).sum();
    assert!(
        links > 50,
        "only {links} links found: is the parser broken?"
    );
    let broken = broken_links(&docs);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn a_missing_file_and_a_missing_anchor_are_both_reported() {
    let env = TestEnv::new();
    let page = env.write("docs/PAGE.md", "# Page\n\n## A section\n");
    let other = env.write(
        "README.md",
        "[ok](docs/PAGE.md#a-section) [gone](docs/GONE.md) [bad](docs/PAGE.md#no-such) [self](#page)\n",
    );
    let docs = [Doc::read(&other), Doc::read(&page)];
    let broken = broken_links(&docs);
    assert_eq!(broken.len(), 3, "{broken:#?}");
    assert!(
        broken[0].contains("docs/GONE.md: no such file"),
        "{broken:#?}"
    );
    assert!(broken[1].contains("has no heading #no-such"), "{broken:#?}");
    assert!(broken[2].contains("has no heading #page"), "{broken:#?}");
}

#[test]
fn every_page_says_at_its_top_who_it_is_for() {
    for path in doc_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if [
            "README.md",
            "CONTRIBUTING.md",
            "ARCHITECTURE.md",
            "PERFORMANCE.md",
        ]
        .contains(&name.as_str())
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let top: String = text.lines().take(4).collect::<Vec<_>>().join("\n");
        assert!(
            top.contains("**For:**"),
            "{name} does not open with who it is for:\n{top}"
        );
    }
}

#[test]
fn the_readme_stays_a_five_minute_read() {
    let size = std::fs::metadata(repo().join("README.md")).unwrap().len();
    assert!(
        size < 12 * 1024,
        "README.md is {size} bytes; move detail into docs/"
    );
}

/// The quick start's shell lines, each a command as the reader types it.
fn quick_start() -> Vec<String> {
    let (_, fences) = readme().section("Quick start");
    let lines: Vec<String> = fences
        .iter()
        .filter(|f| f.lang == "sh")
        .flat_map(|f| markdown::joined_lines(&f.body))
        .map(|(_, line)| line.trim().to_owned())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect();
    assert!(
        !lines.is_empty(),
        "the README's quick start has no sh block"
    );
    lines
}

/// A reader's shell: HOME is the test's, where `~/.local/bin/agent-reach`
/// (what `install.sh` installs) is the binary under test, first on PATH.
fn readers_shell(env: &TestEnv, line: &str) -> crate::common::TestCommand {
    let home = env.root.path().join("home");
    let local_bin = home.join(".local/bin");
    std::fs::create_dir_all(&local_bin).unwrap();
    let link = local_bin.join("agent-reach");
    if !link.exists() {
        std::os::unix::fs::symlink(bin(), &link).unwrap();
    }
    env.cmd_at("bash").args(["-c", line]).env(
        "PATH",
        format!("{}:/usr/local/bin:/usr/bin:/bin", local_bin.display()),
    )
}

/// What an MCP host runs for `claude mcp add NAME -- CMD...` or
/// `codex mcp add NAME -- CMD...`: CMD, started as a stdio server.
fn host_server_command(line: &str) -> Option<String> {
    let rest = line
        .strip_prefix("claude mcp add ")
        .or_else(|| line.strip_prefix("codex mcp add "))?;
    Some(rest.split_once(" -- ")?.1.to_owned())
}

/// Starts `command` the way an MCP host does (through a shell, in the
/// project directory) and checks it serves the tools, rooted where the
/// reader stood.
fn serves_mcp_rooted_in_the_work_dir(command: &str) {
    let env = TestEnv::new();
    let _ = readers_shell(&env, "true");
    let home = env.root.path().join("home");
    let mut cmd = tokio::process::Command::new("bash");
    cmd.args(["-c", &format!("exec {command}")])
        .env_clear()
        .env("HOME", &home)
        .env(
            "PATH",
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin",
                home.join(".local/bin").display()
            ),
        )
        .env("AGENT_REACH_HOME", env.ar_home())
        .env("SHELL", "/bin/bash")
        .env("LANG", "C.UTF-8")
        .current_dir(env.work());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let limit = Duration::from_secs(60);
            let (client, _known) =
                crate::common::mcp_stdio_client(cmd, &format!("`{command}`")).await;
            let tools = client.list_all_tools().await.unwrap();
            assert!(
                tools.iter().any(|t| t.name == "exec_command"),
                "`{command}` serves no exec_command"
            );
            let params = CallToolRequestParams::new("exec_command")
                .with_arguments(json!({"cmd": "pwd"}).as_object().cloned().unwrap());
            let result = tokio::time::timeout(limit, client.call_tool(params))
                .await
                .unwrap()
                .unwrap();
            let text = super::serve::text_of(&result);
            let work = env.work().canonicalize().unwrap();
            assert!(
                text.contains(&format!("{}\n", work.display())),
                "`{command}` did not run commands in the project directory:\n{text}"
            );
            let _ = tokio::time::timeout(Duration::from_secs(10), client.cancel()).await;
        });
}

#[test]
fn every_command_of_the_readme_quick_start_runs_as_shown() {
    for line in quick_start() {
        if let Some(args) = line.strip_prefix("./install.sh") {
            // Building the shipped binary takes minutes: CI runs this very
            // line (and the whole suite against what it installed), and
            // install.sh must know every flag the line gives it.
            let ci = std::fs::read_to_string(repo().join(".ci/run")).unwrap();
            assert!(ci.contains(&line), ".ci/run does not run `{line}`");
            let env = TestEnv::new();
            let help = env.cmd_at(repo().join("install.sh")).arg("--help").run();
            help.success();
            for flag in args.split_whitespace() {
                help.stdout_contains(flag);
            }
        } else if let Some(server) = host_server_command(&line) {
            serves_mcp_rooted_in_the_work_dir(&server);
        } else if line.starts_with("~/.local/bin/agent-reach ") || line.starts_with("agent-reach ")
        {
            let env = TestEnv::new();
            readers_shell(&env, &line).run().success();
        } else {
            panic!("the quick start has a command this test cannot run yet: `{line}`");
        }
    }
}

#[test]
fn the_readme_host_lines_start_a_server_that_serves_mcp() {
    let (prose, _) = readme().section("Plug it into your agent");
    let doc = Doc::parse(Path::new("README.md"), &prose);
    let servers: Vec<String> = doc
        .spans()
        .into_iter()
        .filter_map(|span| host_server_command(&span.text))
        .collect();
    assert_eq!(
        servers.len(),
        2,
        "expected the Claude Code and Codex lines: {servers:?}"
    );
    for server in servers {
        serves_mcp_rooted_in_the_work_dir(&server);
    }
}

/// The spill file's name differs per run; everything else must not.
fn without_spill_names(text: &str) -> String {
    regex::Regex::new(r"spill/\S+\.log")
        .unwrap()
        .replace_all(text, "spill/FILE.log")
        .into_owned()
}

#[test]
fn the_fold_the_readme_shows_is_what_the_transcript_script_prints_now() {
    let readme = readme();
    let (_, fences) = readme.section("Quick start");
    let shown = fences
        .iter()
        .position(|f| f.lang == "sh" && f.body.starts_with("~/.local/bin/agent-reach run "))
        .and_then(|i| fences.get(i + 1))
        .filter(|f| f.lang == "text")
        .expect(
            "the quick start's `agent-reach run` line is followed by its output in a text block",
        );
    let env = TestEnv::new();
    let now = env
        .cmd_at(repo().join("scripts/readme_transcript.sh"))
        .env("AGENT_REACH_BIN", bin())
        .env("TMPDIR", env.root.path())
        .run();
    now.success();
    assert_eq!(
        without_spill_names(&shown.body),
        without_spill_names(&now.stdout_str()),
        "README.md's fold output is stale: paste scripts/readme_transcript.sh's output"
    );
}

/// `"AGENT_REACH_*"` string literals in the sources under `dir`.
fn variables_named_in(dir: &Path, names: &mut BTreeSet<String>) {
    let pattern = regex::Regex::new(r#""(AGENT_REACH_[A-Z][A-Z_]*[A-Z])""#).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            variables_named_in(&path, names);
        } else if path.extension().is_some_and(|x| x == "rs" || x == "py") {
            let text = std::fs::read_to_string(&path).unwrap();
            names.extend(pattern.captures_iter(&text).map(|c| c[1].to_owned()));
        }
    }
}

#[test]
fn every_environment_variable_agent_reach_reads_is_in_the_reference() {
    let mut in_code = BTreeSet::new();
    variables_named_in(&repo().join("src"), &mut in_code);
    variables_named_in(&repo().join("python"), &mut in_code);
    assert!(in_code.contains("AGENT_REACH_TOKEN"), "{in_code:?}");
    let reference = Doc::read(&repo().join("docs/REFERENCE.md"));
    let (table, _) = reference.section("Environment variables");
    let pattern = regex::Regex::new(r"(?m)^\| `(AGENT_REACH_[A-Z_]+)").unwrap();
    let documented: BTreeSet<String> = pattern
        .captures_iter(&table)
        .map(|c| c[1].to_owned())
        .collect();
    let missing: Vec<_> = in_code.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "not in docs/REFERENCE.md's table: {missing:?}"
    );
    let stale: Vec<_> = documented.difference(&in_code).collect();
    assert!(stale.is_empty(), "documented but read nowhere: {stale:?}");
}

#[test]
fn every_error_kind_is_in_the_reference() {
    let kinds = std::fs::read_to_string(repo().join("src/registry/kinds.rs")).unwrap();
    let pattern = regex::Regex::new(r#"&str = "([a-z_]+)";"#).unwrap();
    let mut in_code: BTreeSet<String> = pattern
        .captures_iter(&kinds)
        .map(|c| c[1].to_owned())
        .collect();
    assert!(in_code.len() > 10, "{in_code:?}");
    in_code.insert("survivors".to_owned());
    let reference = Doc::read(&repo().join("docs/REFERENCE.md"));
    let (table, _) = reference.section("Error kinds");
    let missing: Vec<_> = in_code
        .iter()
        .filter(|kind| !table.contains(&format!("| `{kind}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/REFERENCE.md's error kinds: {missing:?}"
    );
}

/// Whether `comment` names `krate` as a word (`-` and `_` belong to words).
fn names_crate(comment: &str, krate: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    comment.match_indices(krate).any(|(at, _)| {
        let before = comment[..at].chars().next_back();
        let after = comment[at + krate.len()..].chars().next();
        !before.is_some_and(word) && !after.is_some_and(word)
    })
}

/// The dependencies of a manifest that no comment explains: a dependency
/// is explained by the comment right above it, or, in a group of lines
/// under one comment, by that comment naming it.
fn unexplained_dependencies(manifest: &str) -> Vec<String> {
    let mut section = String::new();
    let mut comment = String::new();
    let mut right_above = false;
    let mut silent = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            comment.clear();
            right_above = false;
        } else if let Some(text) = line.strip_prefix('#') {
            if !right_above {
                comment.clear();
            }
            comment.push_str(text);
            comment.push(' ');
            right_above = true;
        } else if line.is_empty() {
            comment.clear();
            right_above = false;
        } else if section.ends_with("dependencies]") {
            let krate = line.split(['=', ' ']).next().unwrap_or_default();
            if !right_above && !names_crate(&comment, krate) {
                silent.push(format!("{section} {krate}"));
            }
            right_above = false;
        }
    }
    silent
}

#[test]
fn every_dependency_in_cargo_toml_says_what_it_is_for() {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let silent = unexplained_dependencies(&manifest);
    assert!(
        silent.is_empty(),
        "dependencies no comment explains (write one above it, or name it in its group's comment):\n{}",
        silent.join("\n")
    );
}

#[test]
fn a_dependency_without_a_comment_is_reported_and_a_named_one_in_a_group_is_not() {
    let manifest = "[dependencies]\n# Logs: tracing, and tracing-subscriber to write them.\ntracing = \"0.1\"\ntracing-subscriber = \"0.3\"\nregex = \"1\"\n\n[dev-dependencies]\nproptest = \"1\"\n";
    assert_eq!(
        unexplained_dependencies(manifest),
        ["[dependencies] regex", "[dev-dependencies] proptest"]
    );
}

#[test]
fn every_protocol_serve_takes_is_in_the_doors_table_and_no_other_is_called_served() {
    let env = TestEnv::new();
    let refused = env
        .cmd()
        .args(["serve", "--listen", "no-such-door=127.0.0.1:0"])
        .run();
    refused.code_is(2);
    let stderr = refused.stderr_str();
    let known: BTreeSet<String> = stderr
        .split_once("known: ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .unwrap_or_else(|| panic!("no list of known protocols in:\n{stderr}"))
        .0
        .split(", ")
        .map(str::to_owned)
        .collect();
    assert!(known.contains("mcp"), "{known:?}");
    let doors = Doc::read(&repo().join("docs/DOORS.md"));
    let names = |section: &str, pattern: &str| -> BTreeSet<String> {
        let (text, _) = doors.section(section);
        regex::Regex::new(pattern)
            .unwrap()
            .captures_iter(&text)
            .map(|c| c[1].to_owned())
            .collect()
    };
    let table = names("Starting listeners", r"(?m)^\| `([a-z-]+)` \|");
    assert_eq!(
        table, known,
        "docs/DOORS.md's listener table is not the protocols `serve --listen` takes"
    );
    let later = names("In the contract, not served yet", r"(?m)^- `([a-z-]+)`:");
    let served: Vec<_> = later.intersection(&known).collect();
    assert!(
        served.is_empty(),
        "docs/DOORS.md says {served:?} are not served yet, but `serve --listen` takes them: give each its section"
    );
}
