//! Highlights from outside (issue 40): a failed command's result names the
//! line that carries its failure, with its line number in the stream's
//! whole output, although the fold left it out of `stdout`; a timeout's
//! result says so in `error.kind`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::TestEnv;

/// 20,000 lines on stdout, `error[E0308]` as line 8,000, then exit 1.
pub(crate) const FAILING_BUILD: &str = "seq 1 20000 | sed -e 's/^/compiling unit /' -e '8000s/.*/error[E0308]: mismatched types/'; exit 1";

#[test]
fn a_failure_names_its_error_line_from_the_part_the_fold_left_out() {
    let env = TestEnv::new();
    let request = json!({"id": "build", "command": ["sh", "-c", FAILING_BUILD]});
    let run = env
        .cmd()
        .args(["exec", "--json"])
        .stdin(request.to_string())
        .limit(Duration::from_secs(30))
        .run();
    run.code_is(1);
    let result = run.json();
    assert_eq!(result["status"], "failure", "{result}");
    assert_eq!(result["exit_code"], 1);
    assert_eq!(result["truncated"], true);
    let stdout = result["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("omitted"), "the fold left the middle out");
    assert!(
        !stdout.contains("error[E0308]"),
        "the error line is not among the lines shown: {stdout}"
    );
    assert_eq!(
        result["highlights"],
        json!([{"stream": "stdout", "line": 8000, "text": "error[E0308]: mismatched types"}]),
        "{result}"
    );
    // The line number is the spill file's: the full output has it there.
    let spill = result["full_output_paths"]["stdout"].as_str().unwrap();
    let full = std::fs::read_to_string(spill).unwrap();
    assert_eq!(
        full.lines().nth(7999),
        Some("error[E0308]: mismatched types")
    );
}

#[test]
fn a_success_or_a_quiet_failure_has_no_highlights() {
    let env = TestEnv::new();
    let input = format!(
        "{}\n{}\n",
        json!({"id": "ok", "command": ["sh", "-c", "echo 'error: printed but fine'"]}),
        json!({"id": "quiet", "command": ["sh", "-c", "echo nothing to see; exit 3"]}),
    );
    let run = env
        .cmd()
        .args(["exec", "--jsonl"])
        .stdin(input)
        .limit(Duration::from_secs(30))
        .run();
    let results = crate::suite::exec_json::parse_lines(&run.stdout_str());
    for id in ["ok", "quiet"] {
        assert!(
            results[id].get("highlights").is_none(),
            "{id}: {}",
            results[id]
        );
    }
    assert_eq!(results["quiet"]["status"], "failure");
}

#[test]
fn a_timeout_has_its_error_kind_exit_code_and_highlights() {
    let env = TestEnv::new();
    let request = json!({
        "id": "slow",
        "command": ["sh", "-c", "echo 'FAILED to connect, retrying' >&2; sleep 30"],
        "timeout_ms": 500,
    });
    let run = env
        .cmd()
        .args(["exec", "--json"])
        .stdin(request.to_string())
        .limit(Duration::from_secs(30))
        .run();
    run.code_is(1);
    let result: Value = run.json();
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(result["exit_code"], 124);
    assert_eq!(result["error"]["kind"], "timeout", "{result}");
    assert!(
        result["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("500 ms"),
        "{result}"
    );
    assert_eq!(
        result["highlights"],
        json!([{"stream": "stderr", "line": 1, "text": "FAILED to connect, retrying"}]),
        "{result}"
    );
}
