//! `exec --json` and `exec --jsonl`: hostile requests, every refusal kind,
//! secrets redacted everywhere, the cache, and the stream's behaviour.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{RunResult, TestEnv, bin};

/// Runs `exec --jsonl` over `lines` with `registry` as the config.
pub fn jsonl(
    env: &TestEnv,
    registry: &str,
    lines: &[Value],
    extra: &[&str],
) -> (RunResult, BTreeMap<String, Value>) {
    let config = env.write("registry.toml", registry);
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let result = env
        .cmd()
        .args(["exec", "--jsonl", "--config"])
        .arg(&config)
        .args(extra)
        .stdin(input)
        .run();
    let by_id = parse_lines(&result.stdout_str());
    (result, by_id)
}

pub fn parse_lines(out: &str) -> BTreeMap<String, Value> {
    out.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .map(|v| {
            (
                v["id"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v["id"].to_string()),
                v,
            )
        })
        .collect()
}

const ECHO: &str = r#"
[[tools]]
name = "echo"
command = ["printf", "%s|", "{msg}"]
cwd = "project_root"
risk = "low"
params = [{ name = "msg", type = "string", required = true }]

[[tools]]
name = "echo_args"
command = ["printf", "%s|"]
cwd = "project_root"
risk = "low"
"#;

#[test]
fn injection_attempts_reach_the_program_as_literal_text() {
    let env = TestEnv::new();
    let hostile = [
        "; rm -rf /",
        "$(touch pwned)",
        "`touch pwned2`",
        "a\nb; touch pwned3",
        "it's \"quoted\" && touch pwned4",
        "*",
        "| tee pwned5",
        "${HOME}",
    ];
    let mut lines: Vec<Value> = hostile
        .iter()
        .enumerate()
        .map(|(i, msg)| json!({"id": format!("h{i}"), "tool": "echo", "args": {"msg": msg}}))
        .collect();
    lines.push(
        json!({"id": "list", "tool": "echo_args", "args": ["; rm -rf /", "$(touch pwned6)"]}),
    );
    lines.push(json!({"id": "flag", "tool": "echo", "args": {"msg": "--version"}}));
    lines.push(json!({"id": "listflag", "tool": "echo_args", "args": ["--help"]}));
    lines.push(json!({"id": "nul", "tool": "echo", "args": {"msg": "a\u{0}b"}}));
    let (run, results) = jsonl(&env, ECHO, &lines, &[]);
    run.success();
    for (i, msg) in hostile.iter().enumerate() {
        let r = &results[&format!("h{i}")];
        assert_eq!(r["status"], "success", "{r}");
        assert_eq!(r["stdout"], format!("{msg}|"), "{r}");
    }
    assert_eq!(results["list"]["stdout"], "; rm -rf /|$(touch pwned6)|");
    for id in ["flag", "listflag", "nul"] {
        assert_eq!(results[id]["status"], "rejected", "{}", results[id]);
        assert_eq!(
            results[id]["error"]["kind"], "invalid_params",
            "{}",
            results[id]
        );
    }
    assert!(
        results["flag"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("option")
    );
    assert!(
        results["nul"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("NUL")
    );
    let created: Vec<_> = std::fs::read_dir(env.work())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect();
    assert!(created.is_empty(), "a value ran as code: {created:?}");
}

const POLICY: &str = r#"
max_risk = "medium"
approval = "medium"

[profiles.lowonly]
max_risk = "low"

[[tools]]
name = "low"
command = ["printf", "%s\n", "{n}", "{mode}", "{where}"]
cwd = "project_root"
risk = "low"
params = [
  { name = "n", type = "integer", min = 1, max = 10, required = true },
  { name = "mode", type = "enum", enum = ["a", "b"] },
  { name = "where", type = "path" },
]

[[tools]]
name = "mid"
command = ["true"]
cwd = "project_root"
risk = "medium"

[[tools]]
name = "high"
command = ["true"]
cwd = "project_root"
risk = "high"

[[tools]]
name = "in_caller"
command = ["pwd"]
cwd = "caller"
risk = "low"

[[tools]]
name = "needs_secret"
command = ["true"]
cwd = "project_root"
risk = "low"
secrets = ["NOT_SET_ANYWHERE"]
"#;

#[test]
fn every_refusal_has_its_stable_kind() {
    let env = TestEnv::new();
    std::fs::create_dir_all(env.work().join("sub")).unwrap();
    let lines = [
        json!({"id": "unknown", "tool": "nope"}),
        json!({"id": "type", "tool": "low", "args": {"n": "three"}}),
        json!({"id": "bounds", "tool": "low", "args": {"n": 11}}),
        json!({"id": "missing", "tool": "low", "args": {}}),
        json!({"id": "extra", "tool": "low", "args": {"n": 1, "zzz": 1}}),
        json!({"id": "enum", "tool": "low", "args": {"n": 1, "mode": "c"}}),
        json!({"id": "escape", "tool": "low", "args": {"n": 1, "where": "../../etc"}}),
        json!({"id": "ok", "tool": "low", "args": {"n": 7, "where": "sub"}}),
        json!({"id": "approval", "tool": "mid"}),
        json!({"id": "approved", "tool": "mid", "approve": true}),
        json!({"id": "policy", "tool": "high", "approve": true}),
        json!({"id": "raw", "command": ["id"]}),
        json!({"id": "malformed", "tool": "low", "args": 5}),
        json!({"id": "workdir", "tool": "in_caller", "workdir": "../"}),
        json!({"id": "caller", "tool": "in_caller", "workdir": "sub"}),
        json!({"id": "secret", "tool": "needs_secret"}),
    ];
    let (run, r) = jsonl(&env, POLICY, &lines, &[]);
    run.success();
    let kind = |id: &str| r[id]["error"]["kind"].as_str().unwrap_or("").to_owned();
    assert_eq!(kind("unknown"), "unknown_tool");
    for id in ["type", "bounds", "missing", "extra", "enum", "escape"] {
        assert_eq!(r[id]["status"], "rejected", "{}", r[id]);
        assert_eq!(kind(id), "invalid_params", "{}", r[id]);
    }
    assert_eq!(r["ok"]["status"], "success", "{}", r["ok"]);
    assert!(
        r["ok"]["stdout"].as_str().unwrap().starts_with("7\n"),
        "{}",
        r["ok"]
    );
    assert_eq!(kind("approval"), "approval_required");
    assert_eq!(r["approved"]["status"], "success");
    assert_eq!(kind("policy"), "denied_by_policy");
    assert_eq!(kind("raw"), "raw_commands_disabled");
    assert_eq!(kind("malformed"), "malformed_request");
    assert_eq!(kind("workdir"), "invalid_workdir");
    assert!(
        r["caller"]["stdout"]
            .as_str()
            .unwrap()
            .trim_end()
            .ends_with("/sub"),
        "{}",
        r["caller"]
    );
    assert_eq!(r["secret"]["status"], "error");
    assert_eq!(kind("secret"), "secret_unavailable");

    let (_, r) = jsonl(
        &env,
        POLICY,
        &[json!({"id": "p", "tool": "mid", "approve": true})],
        &["--profile", "lowonly"],
    );
    assert_eq!(r["p"]["error"]["kind"], "denied_by_profile", "{}", r["p"]);
}

#[test]
fn malformed_lines_are_answered_and_the_stream_goes_on() {
    let env = TestEnv::new();
    let config = env.write("registry.toml", ECHO);
    let input = "not json\n\n{\"id\": 1, \"tool\": \"echo\", \"args\": {\"msg\": \"x\"}}\n[1,2]\n{\"id\": {\"a\": 1}, \"tool\": \"echo\"}\n\u{ff}\n";
    let run = env
        .cmd()
        .args(["exec", "--jsonl", "--config"])
        .arg(&config)
        .stdin(input)
        .run();
    run.success();
    let lines: Vec<Value> = run
        .stdout_str()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{}", run.stdout_str());
    assert_eq!(
        lines.iter().filter(|l| l["status"] == "rejected").count(),
        4
    );
    assert!(lines.iter().any(|l| l["id"] == 1 && l["stdout"] == "x|"));
}

/// `exec MODE --config CONFIG` as a process of its own in the test's
/// environment, its stdin a pipe, its stderr dropped.
pub fn exec_process(env: &TestEnv, mode: &str, config: &Path) -> Command {
    let mut command = Command::new(bin());
    command
        .args(["exec", mode, "--config"])
        .arg(config)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", env.root.path().join("home"))
        .env("AGENT_REACH_HOME", env.ar_home())
        .current_dir(env.work())
        .stdin(Stdio::piped())
        .stderr(Stdio::null());
    command
}

/// A running `exec --jsonl` we can talk to line by line; killed on drop.
pub struct Stream {
    child: Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Stream {
    pub fn start(env: &TestEnv, config: &Path) -> Self {
        Self::start_with(env, config, &[])
    }

    /// With `extra` flags after the config.
    pub fn start_with(env: &TestEnv, config: &Path, extra: &[&str]) -> Self {
        let mut child = exec_process(env, "--jsonl", config)
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Self { child, out }
    }

    /// The process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&mut self, line: &Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next result line, failing the test after `limit`.
    pub fn next(&mut self, limit: Duration) -> Value {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut line = String::new();
        // A bounded read: a helper thread reads, we wait with a timeout.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let _ = self.out.read_line(&mut line);
                let _ = tx.send(());
            });
            if rx.recv_timeout(limit).is_err() {
                let _ = self.child.kill();
                panic!("no result line within {limit:?}");
            }
        });
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad line {line:?}: {e}"))
    }

    pub fn close(mut self) -> i32 {
        drop(self.child.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "exec --jsonl did not exit at EOF"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn results_come_as_they_finish_and_eof_waits_for_in_flight() {
    let env = TestEnv::new();
    let config = env.write(
        "registry.toml",
        "[[tools]]\nname = \"nap\"\ncommand = [\"sleep\", \"{s}\"]\ncwd = \"project_root\"\nrisk = \"low\"\nparams = [{ name = \"s\", type = \"number\", min = 0, max = 5, required = true }]\n",
    );
    let mut stream = Stream::start(&env, &config);
    stream.send(&json!({"id": "slow", "tool": "nap", "args": {"s": 1.0}}));
    stream.send(&json!({"id": "fast", "tool": "nap", "args": {"s": 0}}));
    let first = stream.next(Duration::from_secs(10));
    assert_eq!(first["id"], "fast", "{first}");
    drop(stream.child.stdin.take());
    let second = stream.next(Duration::from_secs(10));
    assert_eq!(second["id"], "slow");
    assert_eq!(second["status"], "success");
    assert_eq!(stream.close(), 0);
}

#[test]
fn cache_ttl_answers_an_identical_request_from_the_cache() {
    let env = TestEnv::new();
    let config = env.write(
        "registry.toml",
        "[[tools]]\nname = \"now\"\ncommand = [\"date\", \"+%s%N {tag}\"]\ncwd = \"project_root\"\nrisk = \"low\"\ncache_ttl = 60\nparams = [{ name = \"tag\", type = \"string\", default = \"a\" }]\n",
    );
    let mut stream = Stream::start(&env, &config);
    stream.send(&json!({"id": 1, "tool": "now"}));
    let first = stream.next(Duration::from_secs(10));
    stream.send(&json!({"id": 2, "tool": "now"}));
    let second = stream.next(Duration::from_secs(10));
    stream.send(&json!({"id": 3, "tool": "now", "args": {"tag": "b"}}));
    let other = stream.next(Duration::from_secs(10));
    assert_eq!(first["cached"], false);
    assert_eq!(second["cached"], true, "{second}");
    assert_eq!(second["id"], 2);
    assert_eq!(second["stdout"], first["stdout"]);
    assert_eq!(
        other["cached"], false,
        "different arguments are a different request"
    );
    assert_eq!(stream.close(), 0);
}

#[test]
fn exec_json_answers_one_request_and_exits_by_status() {
    let env = TestEnv::new();
    let config = env.write("registry.toml", ECHO);
    let run = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(r#"{"id": "req-7", "tool": "echo", "args": {"msg": "hi"}}"#)
        .run();
    run.success();
    let result = run.json();
    for field in agent_reach::result::FIELDS {
        assert!(result.get(field).is_some(), "missing {field}: {result}");
    }
    assert_eq!(result["id"], "req-7");
    assert_eq!(result["stdout"], "hi|");
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(r#"{"id": 1, "tool": "nope"}"#)
        .run()
        .code_is(1)
        .stdout_contains("unknown_tool");
}

const SECRET: &str = "hunter2-very-secret-value";

fn secret_registry(extra_top: &str) -> String {
    format!(
        r#"{extra_top}
[[tools]]
name = "leak"
command = ["sh", "-c", "v=$API_TOKEN; printf 'out %s\n' \"$v\"; printf 'err %s\n' \"$v\" >&2; printf '%s' \"$v\" | head -c 14; sleep 0.3; printf '%s\n' \"$v\" | tail -c +15"]
cwd = "project_root"
risk = "low"
secrets = ["API_TOKEN"]

[[tools]]
name = "flood"
command = ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do echo \"line $i $API_TOKEN\"; i=$((i+1)); done"]
cwd = "project_root"
risk = "low"
secrets = ["API_TOKEN"]

[[tools]]
name = "no_secrets"
command = ["env"]
cwd = "project_root"
risk = "low"

[[tools]]
name = "say"
command = ["printf", "%s", "{{word}}"]
cwd = "project_root"
risk = "low"
params = [{{ name = "word", type = "string", pattern = "[a-z0-9-]+", max = 30 }}]
"#
    )
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} leaks the secret:\n{text}");
    assert!(
        !text.contains("hunter2-very"),
        "{what} leaks part of the secret:\n{text}"
    );
}

#[test]
fn secrets_are_redacted_from_output_spill_files_errors_and_logs() {
    let env = TestEnv::new();
    let config = env.write("registry.toml", secret_registry(""));
    let requests = [
        json!({"id": "leak", "tool": "leak"}),
        json!({"id": "flood", "tool": "flood", "max_output_tokens": 200}),
        json!({"id": "env", "tool": "no_secrets"}),
        json!({"id": "bad", "tool": "say", "args": {"word": format!("{SECRET}!")}}),
        json!({"id": "echoed", "tool": "say", "args": {"word": SECRET}}),
    ];
    let input: String = requests.iter().map(|r| format!("{r}\n")).collect();
    let run = env
        .cmd()
        .args(["exec", "--jsonl", "--config"])
        .arg(&config)
        .env("API_TOKEN", SECRET)
        .env("AGENT_REACH_LOG", "debug")
        .stdin(input)
        .run();
    run.success();
    assert_no_secret("stdout", &run.stdout_str());
    assert_no_secret("the log on stderr", &run.stderr_str());
    assert!(
        run.stderr_str().contains("\"door\":\"exec\""),
        "logging is on (one record per execution): {}",
        run.stderr_str()
    );
    let r = parse_lines(&run.stdout_str());
    assert_eq!(
        r["leak"]["stdout"], "out [REDACTED:API_TOKEN]\n[REDACTED:API_TOKEN]\n",
        "a secret split across two writes is still found: {}",
        r["leak"]
    );
    assert_eq!(r["leak"]["stderr"], "err [REDACTED:API_TOKEN]\n");
    assert!(
        !r["env"]["stdout"].as_str().unwrap().contains("API_TOKEN"),
        "a tool without the secret does not get it"
    );
    assert_eq!(r["bad"]["status"], "rejected");
    assert!(
        r["bad"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:API_TOKEN]")
    );
    assert_eq!(r["echoed"]["stdout"], "[REDACTED:API_TOKEN]");
    let flood = &r["flood"];
    assert_eq!(flood["truncated"], true, "{flood}");
    let spill = flood["full_output_path"]
        .as_str()
        .unwrap_or_else(|| panic!("a folded result names its spill file: {flood}"));
    let text = std::fs::read_to_string(spill).unwrap();
    assert!(
        text.contains("line 19999 [REDACTED:API_TOKEN]"),
        "spill file is complete"
    );
    assert_no_secret("the spill file", &text);
    for entry in walk(&env.ar_home()) {
        if let Ok(text) = std::fs::read_to_string(&entry) {
            assert_no_secret(&entry.display().to_string(), &text);
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn a_secrets_file_must_be_private() {
    let env = TestEnv::new();
    let secrets = env.write("secrets.env", format!("# tokens\nAPI_TOKEN={SECRET}\n"));
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    let config = env.write(
        "registry.toml",
        secret_registry("secrets_file = \"secrets.env\""),
    );
    let request = r#"{"id": 1, "tool": "leak"}"#;
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(request)
        .run()
        .code_is(125)
        .stderr_contains("chmod 600");
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
    let run = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(request)
        .run();
    run.success();
    assert_no_secret("stdout", &run.stdout_str());
    assert!(
        run.stdout_str().contains("out [REDACTED:API_TOKEN]"),
        "{}",
        run.stdout_str()
    );
}

#[test]
fn a_result_names_the_spill_file_of_each_folded_stream() {
    let env = TestEnv::new();
    let flood = "for i in $(seq 1 5000); do echo out $i; echo err $i >&2; done";
    let only_err = "echo short; for i in $(seq 1 5000); do echo err $i >&2; done";
    let input = format!(
        "{}\n{}\n",
        json!({"id": "both", "command": ["sh", "-c", flood], "max_output_tokens": 100}),
        json!({"id": "err", "command": ["sh", "-c", only_err], "max_output_tokens": 100}),
    );
    let run = env.cmd().args(["exec", "--jsonl"]).stdin(input).run();
    run.success();
    let r = parse_lines(&run.stdout_str());
    let both = &r["both"];
    let out = both["full_output_paths"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{both}"));
    let err = both["full_output_paths"]["stderr"]
        .as_str()
        .unwrap_or_else(|| panic!("{both}"));
    assert_ne!(out, err, "{both}");
    assert!(std::fs::read_to_string(out).unwrap().contains("out 5000\n"));
    assert!(std::fs::read_to_string(err).unwrap().contains("err 5000\n"));
    assert_eq!(both["full_output_path"], out, "stdout's when it was folded");
    let only = &r["err"];
    assert_eq!(only["full_output_paths"]["stdout"], Value::Null, "{only}");
    let err = only["full_output_paths"]["stderr"]
        .as_str()
        .unwrap_or_else(|| panic!("{only}"));
    assert_eq!(only["full_output_path"], err, "else stderr's");
}
