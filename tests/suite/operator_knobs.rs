//! The operator's knobs as a user of `exec` meets them: children get a
//! UTF-8 locale whatever ours says.

use serde_json::json;

use crate::common::TestEnv;

const CHARMAP: &str = "[[tools]]\nname = \"charmap\"\ncommand = [\"locale\", \"charmap\"]\ncwd = \"project_root\"\nrisk = \"low\"\n";

fn charmap(env: &TestEnv, registry: &str, vars: &[(&str, &str)]) -> String {
    let config = env.write("registry.toml", registry);
    let mut cmd = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(json!({"tool": "charmap"}).to_string());
    for (name, value) in vars {
        cmd = cmd.env(name, value);
    }
    let run = cmd.run();
    run.success();
    run.json()["stdout"].as_str().unwrap().trim().to_owned()
}

#[test]
fn children_get_utf8_when_started_with_lang_c_or_lc_all_posix() {
    let env = TestEnv::new();
    assert_eq!(charmap(&env, CHARMAP, &[("LANG", "C")]), "UTF-8");
    assert_eq!(
        charmap(&env, CHARMAP, &[("LANG", "C.UTF-8"), ("LC_ALL", "POSIX")]),
        "UTF-8"
    );
}

#[test]
fn the_registrys_env_may_still_choose_another_locale() {
    let env = TestEnv::new();
    let registry = format!("[env]\nLC_ALL = \"POSIX\"\n{CHARMAP}");
    assert_eq!(charmap(&env, &registry, &[("LANG", "C")]), "ANSI_X3.4-1968");
}

#[test]
fn out_of_descriptors_is_busy_never_an_error() {
    let env = TestEnv::new();
    let config = env.write(
        "registry.toml",
        "[scheduler]\nglobal = 40\n[[tools]]\nname = \"nap\"\ncommand = [\"sleep\", \"0.3\"]\ncwd = \"project_root\"\nrisk = \"low\"\n",
    );
    let input: String = (0..40)
        .map(|i| format!("{}\n", json!({"id": i, "tool": "nap"})))
        .collect();
    // `ulimit -n` sets the hard limit too: nothing can be raised past it.
    let run = env
        .cmd_at("/bin/sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 48 && exec {} exec --jsonl --config {}",
            crate::common::bin().display(),
            config.display()
        ))
        .stdin(input)
        .run();
    run.success();
    let results = crate::suite::exec_json::parse_lines(&run.stdout_str());
    assert_eq!(results.len(), 40, "{}", run.stdout_str());
    let mut busy = 0;
    for result in results.values() {
        match result["status"].as_str() {
            Some("success") => {}
            Some("busy") => {
                busy += 1;
                assert!(
                    result["error"]["retry_after_ms"].as_u64().unwrap() > 0,
                    "{result}"
                );
            }
            _ => panic!("load reported as a failure: {result}"),
        }
    }
    assert!(busy < 40, "nothing ran at all");
    if busy == 0 {
        crate::common::skipped(None, "48 descriptors were enough for 40 commands here");
    }
}

/// A tool that appends a line to `runs-NAME` each time it really runs.
fn counting_tool(name: &str, risk: &str, extra: &str, exit: u8) -> String {
    format!(
        "[[tools]]\nname = \"{name}\"\ncommand = [\"sh\", \"-c\", \"echo ran >> runs-{name}; exit {exit}\"]\ncwd = \"project_root\"\nrisk = \"{risk}\"\ncache_ttl = 60\n{extra}\n"
    )
}

fn runs_of(env: &TestEnv, name: &str) -> usize {
    std::fs::read_to_string(env.work().join(format!("runs-{name}")))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn the_cache_never_skips_a_risky_approved_failed_or_fresh_run() {
    let env = TestEnv::new();
    let registry = [
        counting_tool("high", "high", "", 0),
        counting_tool("low", "low", "", 0),
        counting_tool("fresh", "low", "", 0),
        counting_tool("approved", "low", "", 0),
        counting_tool("fails", "low", "", 3),
        counting_tool("fails_kept", "low", "cache_failures = true", 3),
        counting_tool("idem", "medium", "idempotent = true", 0),
    ]
    .concat();
    let mut requests = Vec::new();
    for round in 0..2 {
        requests.push(json!({"id": format!("high{round}"), "tool": "high", "approve": true}));
        requests.push(json!({"id": format!("low{round}"), "tool": "low"}));
        requests.push(json!({"id": format!("fresh{round}"), "tool": "fresh", "no_cache": true}));
        requests
            .push(json!({"id": format!("approved{round}"), "tool": "approved", "approve": true}));
        requests.push(json!({"id": format!("fails{round}"), "tool": "fails"}));
        requests.push(json!({"id": format!("fails_kept{round}"), "tool": "fails_kept"}));
        requests.push(json!({"id": format!("idem{round}"), "tool": "idem"}));
    }
    let (run, results) = crate::suite::exec_json::jsonl(&env, &registry, &requests, &[]);
    run.success();
    assert_eq!(results.len(), requests.len(), "{}", run.stdout_str());
    for (tool, runs) in [
        ("high", 2),
        ("low", 1),
        ("fresh", 2),
        ("approved", 2),
        ("fails", 2),
        ("fails_kept", 1),
        ("idem", 1),
    ] {
        assert_eq!(
            runs_of(&env, tool),
            runs,
            "runs of {tool}: {}",
            run.stdout_str()
        );
    }
    assert_eq!(results["high1"]["cached"], false);
    assert_eq!(results["fails1"]["status"], "failure");
}

#[test]
fn tools_check_reports_a_cache_on_a_tool_above_low_risk() {
    let env = TestEnv::new();
    let risky = env.write("risky.toml", counting_tool("deploy", "high", "", 0));
    let run = env.cmd().args(["tools", "check"]).arg(&risky).run();
    run.code_is(1).stdout_contains("cache_ttl");
    let marked = env.write(
        "marked.toml",
        counting_tool("query", "medium", "idempotent = true", 0),
    );
    env.cmd()
        .args(["tools", "check"])
        .arg(&marked)
        .run()
        .success();
}

#[test]
fn one_shot_exec_json_processes_share_the_cache_and_its_rules() {
    let env = TestEnv::new();
    let registry = env.write(
        "registry.toml",
        [
            counting_tool("low", "low", "", 0),
            counting_tool("fails", "low", "", 3),
        ]
        .concat(),
    );
    let call = |request: serde_json::Value| -> serde_json::Value {
        let run = env
            .cmd()
            .args(["exec", "--json", "--config"])
            .arg(&registry)
            .stdin(request.to_string())
            .run();
        serde_json::from_str(run.stdout_str().trim())
            .unwrap_or_else(|e| panic!("{e}: {}", run.stdout_str()))
    };
    let first = call(json!({"tool": "low"}));
    let second = call(json!({"tool": "low"}));
    assert_eq!(
        (first["cached"].clone(), second["cached"].clone()),
        (json!(false), json!(true)),
        "{second}"
    );
    assert_eq!(second["exit_code"], 0);
    assert_eq!(
        runs_of(&env, "low"),
        1,
        "the second process took the first one's result"
    );
    let fresh = call(json!({"tool": "low", "no_cache": true}));
    assert_eq!(fresh["cached"], false);
    assert_eq!(runs_of(&env, "low"), 2);
    for _ in 0..2 {
        assert_eq!(call(json!({"tool": "fails"}))["cached"], false);
    }
    assert_eq!(
        runs_of(&env, "fails"),
        2,
        "a failure is not kept for another process"
    );
    let store = env.ar_home().join("cache/results");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&store).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "the shared store is private");
}

/// The contract's fields of an execution record, exactly.
const RECORD_FIELDS: [&str; 15] = [
    "time",
    "door",
    "caller",
    "cwd",
    "status",
    "exit_code",
    "signal",
    "duration_ms",
    "queue_ms",
    "bytes_out",
    "truncated",
    "cached",
    "summary",
    "tool",
    "argv",
];

#[test]
fn exec_logs_one_json_record_per_execution_when_asked() {
    let env = TestEnv::new();
    let config = env.write(
        "registry.toml",
        "allow_raw_commands = true\n[[tools]]\nname = \"two_lines\"\ncommand = [\"sh\", \"-c\", \"echo first; echo middle; echo $TOKEN last\"]\ncwd = \"project_root\"\nrisk = \"low\"\nsecrets = [\"TOKEN\"]\n",
    );
    let input = [
        json!({"id": 1, "tool": "two_lines"}),
        json!({"id": 2, "command": ["sh", "-c", "exit 3"]}),
        json!({"id": 3, "tool": "missing"}),
    ]
    .iter()
    .map(|l| format!("{l}\n"))
    .collect::<String>();
    let run = env
        .cmd()
        .args(["exec", "--jsonl", "--config"])
        .arg(&config)
        .env("AGENT_REACH_LOG", "info")
        .env("TOKEN", "s3cr3t-value")
        .stdin(input)
        .run();
    run.success();
    let records: Vec<serde_json::Value> = run
        .stderr_str()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v.get("door").is_some())
        .collect();
    assert_eq!(
        records.len(),
        3,
        "one record per request:\n{}",
        run.stderr_str()
    );
    for record in &records {
        let object = record.as_object().unwrap();
        assert!(
            object.keys().all(|k| RECORD_FIELDS.contains(&k.as_str())),
            "{record}"
        );
        assert_eq!(record["door"], "exec");
        assert_eq!(record["caller"], "local");
        assert!(!record.to_string().contains("Some("), "{record}");
    }
    let tool = records.iter().find(|r| r["tool"] == "two_lines").unwrap();
    assert_eq!(tool["status"], "success");
    assert_eq!(tool["exit_code"], 0);
    assert_eq!(tool["summary"], "first … [REDACTED:TOKEN] last");
    assert!(tool["bytes_out"].as_u64().unwrap() > 0);
    let raw = records.iter().find(|r| r.get("argv").is_some()).unwrap();
    assert_eq!(raw["status"], "failure");
    assert_eq!(raw["exit_code"], 3);
    assert_eq!(raw["argv"], json!(["sh", "-c", "exit 3"]));
    let missing = records.iter().find(|r| r["tool"] == "missing").unwrap();
    assert_eq!(missing["status"], "rejected");
    assert_eq!(missing["exit_code"], serde_json::Value::Null);
    assert!(!run.stderr_str().contains("s3cr3t-value"));
}

#[test]
fn an_interactive_tool_through_exec_is_refused_at_once_and_the_model_is_told() {
    let env = TestEnv::new();
    let config = env.write(
        "registry.toml",
        "[[tools]]\nname = \"repl\"\ndescription = \"A prompt\"\ncommand = [\"sh\", \"-c\", \"read answer\"]\ncwd = \"project_root\"\nrisk = \"low\"\ninteractive = true\nnetwork = true\ntimeout = 30\n",
    );
    let run = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .stdin(json!({"tool": "repl"}).to_string())
        .run();
    run.code_is(1)
        .elapsed_under(std::time::Duration::from_secs(5));
    let result = run.json();
    assert_eq!(result["status"], "rejected");
    assert_eq!(result["error"]["kind"], "needs_session");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap()
            .contains("interactive"),
        "{result}"
    );
    let schema = env
        .cmd()
        .args(["tools", "schema", "--config"])
        .arg(&config)
        .run();
    schema.success();
    let text = schema.stdout_str();
    for fact in ["Timeout: 30 s", "needs the network", "Interactive"] {
        assert!(text.contains(fact), "{fact:?} missing from {text}");
    }
}
