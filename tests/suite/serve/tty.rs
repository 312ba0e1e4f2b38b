//! Sessions on a real PTY read like a person reads a terminal (issue 16):
//! REPL prompts end a wait as `awaiting_input`, a full-screen program leaves
//! nothing of its screen behind, and a redrawing monitor's last reply is its
//! screen, not the history of its rows.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Served, run, serve};

/// Whether `program` is on our PATH.
fn installed(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// Starts `cmd` on a tty; returns the reply and how long it took.
async fn start(s: &Served, cmd: &str) -> (Value, Duration) {
    let started = Instant::now();
    let (_, v) = s
        .ok(
            "exec_command",
            json!({"cmd": cmd, "tty": true, "yield_time_ms": 10000}),
        )
        .await;
    (v, started.elapsed())
}

/// Types `chars` into session `id`; returns the reply and how long it took.
async fn type_in(s: &Served, id: u64, chars: &str, yield_ms: u64) -> (Value, Duration) {
    let started = Instant::now();
    let (_, v) = s
        .ok(
            "write_stdin",
            json!({"session_id": id, "chars": chars, "yield_time_ms": yield_ms}),
        )
        .await;
    (v, started.elapsed())
}

fn output(v: &Value) -> &str {
    v["output"].as_str().unwrap_or_default()
}

/// The REPLs of the issue and a line each answers with its next prompt.
const REPLS: &[(&str, &str, &str)] = &[
    ("python3", "python3 -q", "\n"),
    ("node", "node", "\n"),
    ("bash", "bash --norc --noprofile -i", "\n"),
    ("sqlite3", "sqlite3", "\n"),
    ("bc", "bc -q", "\n"),
];

#[test]
fn each_repl_reaches_awaiting_input_within_a_second_of_its_prompt() {
    run(async {
        let s = serve().await;
        let mut tried = 0;
        for &(program, cmd, line) in REPLS {
            if !installed(program) {
                eprintln!("SKIPPED {cmd}: {program} is not installed");
                continue;
            }
            tried += 1;
            let (v, took) = start(&s, cmd).await;
            assert_eq!(v["state"], "awaiting_input", "{cmd} after {took:?}: {v}");
            // Starting the program counts too; its prompt came well before.
            assert!(took < Duration::from_secs(5), "{cmd} took {took:?}");
            let id = v["session_id"].as_u64().unwrap();
            // A new prompt after a line: within a second of it.
            let (v, took) = type_in(&s, id, line, 10000).await;
            assert_eq!(v["state"], "awaiting_input", "{cmd} after {took:?}: {v}");
            assert!(
                took < Duration::from_secs(1),
                "{cmd}: the next prompt was seen after {took:?}"
            );
            s.ok("kill_session", json!({"session_id": id})).await;
        }
        assert!(tried > 0, "none of the REPLs is installed");
        s.close().await;
    });
}

#[test]
fn python_answers_1_plus_41_with_42_and_awaits_input_within_a_second() {
    if !installed("python3") {
        eprintln!("SKIPPED {}: python3 is not installed", module_path!());
        return;
    }
    run(async {
        let s = serve().await;
        let (v, _) = start(&s, "python3 -q").await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(output(&v).contains(">>> "), "{v}");
        let id = v["session_id"].as_u64().unwrap();
        let (v, took) = type_in(&s, id, "1+41\n", 10000).await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(took < Duration::from_secs(1), "took {took:?}");
        let lines: Vec<&str> = output(&v).lines().collect();
        assert!(lines.contains(&"42"), "{v}");
        assert_eq!(lines.last().map(|l| l.trim_end()), Some(">>>"), "{v}");
        s.ok("kill_session", json!({"session_id": id})).await;
        s.close().await;
    });
}

#[test]
fn quitting_vi_returns_only_the_lines_after_vi() {
    if !installed("vi") {
        eprintln!("SKIPPED {}: vi is not installed", module_path!());
        return;
    }
    run(async {
        let s = serve().await;
        let notes: String = (1..=30).map(|i| format!("note line {i}\n")).collect();
        std::fs::write(s.env.work().join("notes.txt"), notes).unwrap();
        let (v, _) = start(&s, "vi notes.txt; echo after vi").await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(
            output(&v).contains("note line 30"),
            "vi drew no screen: {v}"
        );
        let id = v["session_id"].as_u64().unwrap();
        let (v, _) = type_in(&s, id, "\u{1b}:q!\r", 5000).await;
        assert_eq!(v["state"], "exited", "{v}");
        assert_eq!(output(&v).trim(), "after vi", "{v}");
        s.close().await;
    });
}

#[test]
fn an_aborted_git_commit_in_vi_returns_only_what_git_said_after_it() {
    if !installed("git") || !installed("vi") {
        eprintln!("SKIPPED {}: git or vi is not installed", module_path!());
        return;
    }
    run(async {
        let s = serve().await;
        let setup = "git init -q . && git -c user.email=t@example.test -c user.name=T \
                     commit -q --allow-empty -m first && echo hi > a.txt && git add a.txt";
        let (text, v) = s.ok("exec_command", json!({"cmd": setup})).await;
        assert_eq!(v["exit_code"], 0, "{text}");
        let (v, _) = start(
            &s,
            "GIT_EDITOR=vi git -c user.email=t@example.test -c user.name=T commit",
        )
        .await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(
            output(&v).contains("Please enter the commit message"),
            "{v}"
        );
        let id = v["session_id"].as_u64().unwrap();
        let (v, _) = type_in(&s, id, "\u{1b}:q!\r", 5000).await;
        assert_eq!(v["state"], "exited", "{v}");
        let out = output(&v);
        assert!(
            out.contains("Aborting commit due to empty commit message."),
            "{v}"
        );
        assert!(
            !out.contains("Please enter"),
            "vi's screen came back: {out}"
        );
        assert!(!out.contains('▽'), "vim's probe came back: {out}");
        assert!(out.len() < 200, "{} bytes: {out}", out.len());
        s.close().await;
    });
}

#[test]
fn a_killed_top_returns_under_4_kb() {
    if !installed("top") {
        eprintln!("SKIPPED {}: top is not installed", module_path!());
        return;
    }
    run(async {
        let s = serve().await;
        let (_, v) = s
            .ok(
                "exec_command",
                json!({"cmd": "top -d 0.2", "tty": true, "yield_time_ms": 1500}),
            )
            .await;
        assert_eq!(v["state"], "running", "{v}");
        let first = output(&v);
        assert!(first.contains("load average"), "{v}");
        assert!(
            first.lines().all(|row| !row.ends_with(' ')),
            "rows keep their trailing blanks: {first}"
        );
        let id = v["session_id"].as_u64().unwrap();
        let (v, _) = type_in(&s, id, "", 5000).await;
        assert!(!output(&v).contains(" → "), "a redraw history: {v}");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (text, v) = s.ok("kill_session", json!({"session_id": id})).await;
        let out = output(&v);
        assert!(out.len() < 4096, "{} bytes: {text}", out.len());
        assert!(!out.contains(" → "), "a redraw history: {out}");
        s.close().await;
    });
}

#[test]
fn less_waits_for_input_and_quitting_it_leaves_only_what_came_after() {
    if !installed("less") {
        eprintln!("SKIPPED {}: less is not installed", module_path!());
        return;
    }
    run(async {
        let s = serve().await;
        let long: String = (1..=300)
            .map(|i| format!("row {i} of a long file\n"))
            .collect();
        std::fs::write(s.env.work().join("long.txt"), long).unwrap();
        let (v, _) = start(&s, "less long.txt; echo after less").await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(output(&v).contains("row 1 of a long file"), "{v}");
        let id = v["session_id"].as_u64().unwrap();
        let (v, took) = type_in(&s, id, " ", 10000).await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(took < Duration::from_secs(1), "took {took:?}");
        assert!(output(&v).contains("row 60 of a long file"), "{v}");
        let (v, _) = type_in(&s, id, "q", 5000).await;
        assert_eq!(v["state"], "exited", "{v}");
        assert_eq!(output(&v).trim(), "after less", "{v}");
        s.close().await;
    });
}

#[test]
fn man_waits_for_input_in_its_pager() {
    let has_page = std::process::Command::new("man")
        .args(["-w", "ls"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !installed("man") || !installed("less") || !has_page {
        eprintln!(
            "SKIPPED {}: man, less or the ls page is missing",
            module_path!()
        );
        return;
    }
    run(async {
        let s = serve().await;
        // PAGER is cat in sessions; a pager asked for by name still runs.
        let (v, _) = start(&s, "MANPAGER=less man ls").await;
        assert_eq!(v["state"], "awaiting_input", "{v}");
        assert!(output(&v).contains("NAME"), "{v}");
        let id = v["session_id"].as_u64().unwrap();
        let (v, _) = type_in(&s, id, "q", 5000).await;
        assert_eq!(v["state"], "exited", "{v}");
        assert!(!output(&v).contains("NAME"), "man's screen came back: {v}");
        s.close().await;
    });
}
