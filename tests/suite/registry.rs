//! `agent-reach tools`: the seed example, `check` with file:line for every
//! problem, `list`, `show` and `schema`.

use std::path::PathBuf;

use crate::common::TestEnv;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/registry")
        .join(name)
}

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

#[test]
fn the_seed_example_checks_clean_and_lists() {
    let env = TestEnv::new();
    env.cmd()
        .args(["tools", "check"])
        .arg(example("seed.toml"))
        .run()
        .success()
        .stdout_contains("1 tool");
    env.cmd()
        .args(["tools", "list", "--config"])
        .arg(example("seed.toml"))
        .run()
        .success()
        .stdout_contains("git_status")
        .stdout_contains("List changed files");
}

#[test]
fn the_full_example_checks_clean() {
    let env = TestEnv::new();
    env.cmd()
        .args(["tools", "check"])
        .arg(example("registry.toml"))
        .run()
        .success();
}

#[test]
fn check_reports_every_problem_with_file_and_line() {
    let env = TestEnv::new();
    let file = fixture("broken.toml");
    let result = env.cmd().args(["tools", "check"]).arg(&file).run();
    result.code_is(1).stderr_contains("problems in");
    let out = result.stdout_str();
    let at = |line: u32| format!("{}:{line}:", file.display());
    for (line, needle) in [
        (2, "unknown key `colour`"),
        (3, "`max_risk` must be"),
        (5, "no `cwd` policy"),
        (11, "`command` must be an array"),
        (13, "`timeout` must be a number"),
        (14, "`network` must be true or false"),
        (15, "unknown key `retries`"),
        (19, "unknown placeholder {missing}"),
        (26, "unknown type \"integr\""),
        (28, "duplicate tool name \"no_cwd\""),
    ] {
        let expected = format!("{}{}", at(line), "");
        assert!(
            out.lines()
                .any(|l| l.starts_with(&expected) && l.contains(needle)),
            "no line {line} problem containing {needle:?} in:\n{out}"
        );
    }
}

#[test]
fn check_reports_include_cycles_at_the_include_line() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args(["tools", "check"])
        .arg(fixture("cycle_a.toml"))
        .run();
    result.code_is(1).stdout_contains("include cycle");
    assert!(
        result.stdout_str().contains("cycle_b.toml:2:"),
        "{}",
        result.stdout_str()
    );
}

#[test]
fn check_of_a_missing_file_is_a_usage_error() {
    let env = TestEnv::new();
    env.cmd()
        .args(["tools", "check", "nope.toml"])
        .run()
        .code_is(2)
        .stderr_contains("no such file");
}

#[test]
fn loading_a_broken_registry_refuses_to_start() {
    let env = TestEnv::new();
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(fixture("broken.toml"))
        .stdin(r#"{"tool":"no_cwd"}"#)
        .run()
        .code_is(125)
        .stderr_contains("problems");
}

#[test]
fn schema_lists_functions_with_parameters() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args(["tools", "schema", "--config"])
        .arg(example("registry.toml"))
        .run();
    result.success();
    let schema = result.json();
    let grep = schema
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "grep")
        .expect("grep in schema");
    let params = &grep["function"]["parameters"];
    assert_eq!(params["required"], serde_json::json!(["pattern"]));
    assert_eq!(params["properties"]["paths"]["type"], "array");
    assert_eq!(params["properties"]["max"]["maximum"], 1000);
}

#[test]
fn show_prints_one_tool_and_unknown_names_fail() {
    let env = TestEnv::new();
    env.cmd()
        .args(["tools", "show", "grep", "--config"])
        .arg(example("registry.toml"))
        .run()
        .success()
        .stdout_contains("cwd:         caller")
        .stdout_contains("pattern: string, required");
    env.cmd()
        .args(["tools", "show", "nope", "--config"])
        .arg(example("registry.toml"))
        .run()
        .code_is(1)
        .stderr_contains("no tool named");
}

#[test]
fn builtin_registry_serves_without_a_file_and_detects_tests() {
    let env = TestEnv::new();
    env.cmd()
        .args(["tools", "list"])
        .run()
        .success()
        .stdout_contains("git_status");
    env.write("Cargo.toml", "[package]\nname = \"x\"\n");
    env.cmd()
        .args(["tools", "list"])
        .run()
        .success()
        .stdout_contains("run_tests");
}

#[test]
fn unknown_profile_is_a_usage_error() {
    let env = TestEnv::new();
    env.cmd()
        .args(["tools", "list", "--profile", "nope", "--config"])
        .arg(example("registry.toml"))
        .run()
        .code_is(2)
        .stderr_contains("known: ci, prod");
}
