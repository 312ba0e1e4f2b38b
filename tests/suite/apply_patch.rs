//! apply_patch end to end: every fixture under `tests/fixtures/apply_patch`
//! run through a real `apply_patch` link and compared as a whole tree, plus
//! the command line (names, usage errors, stdin, broken pipe) and the shell
//! session that finds `apply_patch` on its PATH.
//!
//! A fixture is a directory `NNN_name/` holding `input/` (the tree before),
//! `patch.txt`, `expected/` (the tree after: equal to `input/` for a failure),
//! and optionally `exit_code` (default 0), `expected_stdout.txt` (exact),
//! `expected_stderr_contains.txt` and `via_stdin` (send the patch on stdin
//! instead of as the argument). In `patch.txt`, `{{CWD}}` stands for the
//! working directory and `{{OUTSIDE}}` for a directory beside it that no
//! fixture may write to. Files named `.keep` only make empty trees exist.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::TestEnv;

const KEEP: &str = ".keep";

fn fixtures_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/apply_patch")
}

fn fixture_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(fixtures_root())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

/// One entry of a tree, as compared: contents, link target or directory,
/// with the executable bit of files.
#[derive(Debug, PartialEq, Eq)]
enum Entry {
    File { bytes: Vec<u8>, executable: bool },
    Link(PathBuf),
    Dir,
}

fn snapshot(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Entry>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().is_some_and(|n| n == KEEP) {
            continue;
        }
        let rel = path.strip_prefix(root).unwrap().display().to_string();
        let meta = fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            out.insert(rel, Entry::Link(fs::read_link(&path).unwrap()));
        } else if meta.is_dir() {
            out.insert(rel, Entry::Dir);
            walk(root, &path, out);
        } else {
            let executable = meta.permissions().mode() & 0o111 != 0;
            out.insert(
                rel,
                Entry::File {
                    bytes: fs::read(&path).unwrap(),
                    executable,
                },
            );
        }
    }
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name == KEEP {
            continue;
        }
        let dest = to.join(name);
        let meta = fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&path).unwrap(), &dest).unwrap();
        } else if meta.is_dir() {
            fs::create_dir_all(&dest).unwrap();
            copy_tree(&path, &dest);
        } else {
            fs::copy(&path, &dest).unwrap();
        }
    }
}

fn describe_diff(expected: &BTreeMap<String, Entry>, actual: &BTreeMap<String, Entry>) -> String {
    let mut lines = Vec::new();
    for (path, want) in expected {
        match actual.get(path) {
            None => lines.push(format!("  missing: {path}")),
            Some(got) if got != want => lines.push(format!(
                "  differs: {path}\n    expected: {}\n    actual:   {}",
                show(want),
                show(got)
            )),
            Some(_) => {}
        }
    }
    for path in actual.keys().filter(|p| !expected.contains_key(*p)) {
        lines.push(format!("  extra: {path}"));
    }
    lines.join("\n")
}

fn show(entry: &Entry) -> String {
    match entry {
        Entry::File { bytes, executable } => format!(
            "{:?}{}",
            String::from_utf8_lossy(bytes),
            if *executable { " (executable)" } else { "" }
        ),
        Entry::Link(target) => format!("link to {}", target.display()),
        Entry::Dir => "directory".to_owned(),
    }
}

/// Runs one fixture; returns what went wrong, if anything.
fn run_fixture(dir: &Path) -> Option<String> {
    let env = TestEnv::new();
    let outside = env.root.path().join("outside");
    fs::create_dir_all(&outside).unwrap();
    copy_tree(&dir.join("input"), &env.work());
    let patch = fs::read_to_string(dir.join("patch.txt"))
        .unwrap()
        .replace("{{CWD}}", &env.work().display().to_string())
        .replace("{{OUTSIDE}}", &outside.display().to_string());
    let read_opt = |name: &str| fs::read_to_string(dir.join(name)).ok();
    let expected_code: i32 = read_opt("exit_code").map_or(0, |c| c.trim().parse().unwrap());
    let link = env.link("apply_patch");
    let command = env.cmd_at(&link).limit(Duration::from_secs(20));
    let command = if dir.join("via_stdin").exists() {
        command.stdin(&patch)
    } else {
        command.arg(&patch)
    };
    let result = command.run();
    let mut problems = Vec::new();
    if result.code != Some(expected_code) {
        problems.push(format!(
            "exit code {:?}, expected {expected_code}",
            result.code
        ));
    }
    if let Some(stdout) = read_opt("expected_stdout.txt")
        && result.stdout_str() != stdout
    {
        problems.push(format!(
            "stdout {:?}, expected {stdout:?}",
            result.stdout_str()
        ));
    }
    if let Some(needle) = read_opt("expected_stderr_contains.txt")
        && !result.stderr_str().contains(needle.trim_end_matches('\n'))
    {
        problems.push(format!("stderr does not contain {needle:?}"));
    }
    if expected_code == 0 && !result.stderr.is_empty() {
        problems.push("stderr not empty on success".to_owned());
    }
    if expected_code != 0 && !result.stderr_str().contains("No files were changed.") {
        problems.push("a failure does not say that no files were changed".to_owned());
    }
    let diff = describe_diff(&snapshot(&dir.join("expected")), &snapshot(&env.work()));
    if !diff.is_empty() {
        problems.push(format!("tree differs from expected/:\n{diff}"));
    }
    if fs::read_dir(&outside).unwrap().next().is_some() {
        problems.push(format!("wrote outside the working directory: {outside:?}"));
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}:\n  {}\n--- stdout ---\n{}--- stderr ---\n{}",
            dir.file_name().unwrap().to_string_lossy(),
            problems.join("\n  "),
            result.stdout_str(),
            result.stderr_str()
        )
    })
}

#[test]
fn every_fixture_gives_its_expected_tree_output_and_exit_code() {
    let dirs = fixture_dirs();
    assert!(
        dirs.len() >= 40,
        "expected at least 40 fixtures, found {}",
        dirs.len()
    );
    let failures: Vec<String> = dirs.iter().filter_map(|d| run_fixture(d)).collect();
    assert!(
        failures.is_empty(),
        "{} of {} fixtures failed:\n\n{}",
        failures.len(),
        dirs.len(),
        failures.join("\n\n")
    );
}

#[test]
fn fixtures_cover_success_and_failure_and_failures_leave_input_unchanged() {
    let mut successes = 0;
    let mut failures = 0;
    for dir in fixture_dirs() {
        if dir.join("exit_code").exists() {
            failures += 1;
            assert_eq!(
                snapshot(&dir.join("input")),
                snapshot(&dir.join("expected")),
                "failure fixture {dir:?} must expect its input tree"
            );
        } else {
            successes += 1;
        }
    }
    assert!(
        successes >= 20 && failures >= 15,
        "{successes} successes, {failures} failures"
    );
}

const SIMPLE_ADD: &str = "*** Begin Patch\n*** Add File: out.txt\n+hi\n*** End Patch\n";

#[test]
fn every_name_applies_a_patch() {
    for how in ["applypatch", "subcommand", "run-as"] {
        let env = TestEnv::new();
        let result = match how {
            "applypatch" => env.cmd_at(env.link("applypatch")).arg(SIMPLE_ADD).run(),
            "subcommand" => env.cmd().args(["apply-patch", SIMPLE_ADD]).run(),
            _ => env
                .cmd()
                .args(["--agent-reach-run-as=apply_patch", SIMPLE_ADD])
                .run(),
        };
        result
            .success()
            .stdout_is("Success. Updated the following files:\nA out.txt\n");
        assert_eq!(env.read("out.txt"), "hi\n", "via {how}");
    }
}

#[test]
fn usage_errors_exit_2_with_usage_on_stderr() {
    let env = TestEnv::new();
    let link = env.link("apply_patch");
    for args in [
        vec!["--frobnicate"],
        vec![SIMPLE_ADD, SIMPLE_ADD],
        vec![],
        vec!["   \n"],
    ] {
        env.cmd_at(&link)
            .args(&args)
            .run()
            .code_is(2)
            .stderr_contains("usage: apply_patch");
    }
    env.cmd_at(&link)
        .stdin("")
        .run()
        .code_is(2)
        .stderr_contains("no patch given");
    assert!(!env.work().join("out.txt").exists());
}

#[test]
fn help_goes_to_stdout_and_exits_0() {
    let env = TestEnv::new();
    env.cmd_at(env.link("apply_patch"))
        .arg("--help")
        .run()
        .success()
        .stdout_contains("--allow-outside");
}

#[test]
fn allow_outside_permits_an_absolute_path_outside() {
    let env = TestEnv::new();
    let outside = env.root.path().join("elsewhere.txt");
    let patch = format!(
        "*** Begin Patch\n*** Add File: {}\n+out there\n*** End Patch\n",
        outside.display()
    );
    let link = env.link("apply_patch");
    env.cmd_at(&link)
        .arg(&patch)
        .run()
        .code_is(1)
        .stderr_contains("--allow-outside");
    assert!(!outside.exists());
    env.cmd_at(&link)
        .args(["--allow-outside", &patch])
        .run()
        .success();
    assert_eq!(fs::read_to_string(&outside).unwrap(), "out there\n");
}

#[test]
fn broken_stdout_pipe_is_exit_0_and_the_patch_is_applied() {
    let env = TestEnv::new();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let status = std::process::Command::new(env.link("apply_patch"))
        .arg(SIMPLE_ADD)
        .current_dir(env.work())
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(
        status.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(env.read("out.txt"), "hi\n");
}

#[test]
fn a_shell_from_agent_reach_finds_apply_patch_and_applies_a_heredoc() {
    let env = TestEnv::new();
    env.write("greeting.txt", "hello\nworld\n");
    let script = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: greeting.txt\n@@\n hello\n-world\n+there\n*** Add File: notes/new.md\n+# New\n*** End Patch\nEOF\n";
    env.cmd()
        .args(["shell", "--", "bash", "-c", script])
        .run()
        .success()
        .stdout_is("Success. Updated the following files:\nA notes/new.md\nM greeting.txt\n");
    assert_eq!(env.read("greeting.txt"), "hello\nthere\n");
    assert_eq!(env.read("notes/new.md"), "# New\n");
    assert!(env.path_dirs().is_empty(), "session PATH dir left behind");
}

#[test]
fn a_failed_patch_in_the_shell_passes_exit_1_through() {
    let env = TestEnv::new();
    env.write("f.txt", "a\n");
    let script = "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: f.txt\n@@\n-nope\n+x\n*** End Patch\nEOF\n";
    env.cmd()
        .args(["shell", "--", "bash", "-c", script])
        .run()
        .code_is(1)
        .stderr_contains("f.txt: hunk 1");
    assert_eq!(env.read("f.txt"), "a\n");
}

#[test]
fn a_large_patch_applies_quickly() {
    let env = TestEnv::new();
    let original: String = (0..5000).map(|i| format!("line {i}\n")).collect();
    env.write("big.txt", &original);
    let mut patch = String::from("*** Begin Patch\n*** Update File: big.txt\n");
    for hunk in 0..200 {
        let i = hunk * 25 + 10;
        patch.push_str(&format!(
            "@@\n line {}\n-line {i}\n+changed {i}\n line {}\n",
            i - 1,
            i + 1
        ));
    }
    patch.push_str("*** End Patch\n");
    env.cmd_at(env.link("apply_patch"))
        .stdin(&patch)
        .run()
        .success()
        .elapsed_under(Duration::from_secs(10));
    let updated = env.read("big.txt");
    assert_eq!(updated.lines().count(), 5000);
    assert_eq!(updated.matches("changed ").count(), 200);
}

#[test]
fn the_library_api_reports_changes_and_typed_errors() {
    use agent_reach::apply_patch::{ApplyOptions, ChangeKind, apply, check};
    let env = TestEnv::new();
    env.write("a.txt", "one\n");
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+two\n*** Add File: b.txt\n+b\n*** End Patch";
    let options = ApplyOptions::default();
    let preview = check(patch, &env.work(), &options).unwrap();
    assert_eq!(env.read("a.txt"), "one\n", "check must not write");
    let report = apply(patch, &env.work(), &options).unwrap();
    assert_eq!(report, preview);
    let kinds: Vec<ChangeKind> = report.changes.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ChangeKind::Modified, ChangeKind::Added]);
    assert_eq!(
        report.to_string(),
        "Success. Updated the following files:\nA b.txt\nM a.txt\n"
    );
    let again = apply(patch, &env.work(), &options).unwrap_err();
    assert_eq!(again.kind(), "hunk_not_found");
    assert_eq!(again.exit_code(), 1);
    assert!(again.tree_untouched());
    assert_eq!(env.read("a.txt"), "two\n");
}

#[test]
fn a_patch_touching_more_files_than_open_file_limit_applies() {
    let env = TestEnv::new();
    let mut patch = String::from("*** Begin Patch\n");
    for n in 0..300 {
        env.write(&format!("d/f{n}.txt"), format!("value {n}\n"));
        patch.push_str(&format!(
            "*** Update File: d/f{n}.txt\n@@\n-value {n}\n+value {}\n",
            n + 1
        ));
    }
    patch.push_str("*** End Patch\n");
    env.write("patch.txt", &patch);
    let link = env.link("apply_patch");
    let script = format!("ulimit -n 64 && exec '{}' < patch.txt", link.display());
    env.cmd_at("/bin/sh").args(["-c", &script]).run().success();
    assert_eq!(env.read("d/f299.txt"), "value 300\n");
}

#[test]
fn an_update_keeps_the_owner_of_someone_elses_file() {
    use std::os::unix::fs::MetadataExt;
    crate::skip_unless!(
        unsafe { libc::geteuid() } == 0,
        "changing a file's owner needs root"
    );
    let env = TestEnv::new();
    let file = env.write("theirs.txt", "a\n");
    std::os::unix::fs::chown(&file, Some(4321), Some(4321)).unwrap();
    env.cmd_at(env.link("apply_patch"))
        .arg("*** Begin Patch\n*** Update File: theirs.txt\n@@\n-a\n+b\n*** End Patch")
        .run()
        .success();
    let meta = fs::metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4321, 4321));
    assert_eq!(env.read("theirs.txt"), "b\n");
}
