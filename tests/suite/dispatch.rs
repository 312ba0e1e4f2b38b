//! argv[0] dispatch, tested through real links made in a temp dir.

use crate::common::TestEnv;

#[test]
fn cli_under_its_own_name_prints_version() {
    let env = TestEnv::new();
    env.cmd()
        .arg("--version")
        .run()
        .success()
        .stdout_contains("agent-reach");
}

#[test]
fn unknown_link_name_is_the_cli() {
    let env = TestEnv::new();
    let link = env.link("my-renamed-tool");
    env.cmd_at(link)
        .arg("--version")
        .run()
        .success()
        .stdout_contains("agent-reach");
}

#[test]
fn non_utf8_link_name_is_the_cli_without_panic() {
    use std::os::unix::ffi::OsStrExt;
    let env = TestEnv::new();
    let link = env.link(std::ffi::OsStr::from_bytes(b"agent\xff\xfe-reach"));
    env.cmd_at(link)
        .arg("--version")
        .run()
        .success()
        .stdout_contains("agent-reach");
}

#[test]
fn exe_suffix_is_stripped() {
    let env = TestEnv::new();
    let link = env.link("agent-reach.exe");
    env.cmd_at(link).arg("--version").run().success();
}

#[test]
fn run_as_unknown_personality_is_exit_125() {
    let env = TestEnv::new();
    env.cmd()
        .arg("--agent-reach-run-as=nonsense")
        .run()
        .code_is(125)
        .stderr_contains("unknown personality");
}

#[test]
fn run_as_cli_from_a_personality_link() {
    let env = TestEnv::new();
    let link = env.link("apply_patch");
    env.cmd_at(link)
        .args(["--agent-reach-run-as=agent-reach", "--version"])
        .run()
        .success()
        .stdout_contains("agent-reach");
}

#[test]
fn recursion_guard_refuses_deep_nesting() {
    let env = TestEnv::new();
    env.cmd()
        .env("AGENT_REACH_DEPTH", "32")
        .arg("--version")
        .run()
        .code_is(125)
        .stderr_contains("nested");
}

#[test]
fn unknown_subcommand_is_usage_error() {
    let env = TestEnv::new();
    env.cmd().arg("frobnicate").run().code_is(2);
}

#[test]
fn doctor_json_lists_probes() {
    let env = TestEnv::new();
    let result = env.cmd().args(["doctor", "--json"]).run();
    let json = result.success().json();
    let probes = json["probes"].as_array().unwrap();
    assert!(probes.iter().any(|p| p["name"] == "landlock"));
    assert!(json["default_concurrency"].as_u64().unwrap() >= 3);
}

#[test]
fn broken_pipe_on_stdout_is_exit_zero() {
    let env = TestEnv::new();
    // `head -c1` closes the pipe after one byte; doctor keeps writing.
    let script = format!(
        "{} doctor | head -c1 >/dev/null; echo ${{PIPESTATUS[0]}}",
        crate::common::bin().display()
    );
    env.cmd_at("/bin/bash")
        .args(["-c", &script])
        .run()
        .success()
        .stdout_is("0\n");
}
