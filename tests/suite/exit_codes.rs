//! Exit codes by the contract's rule, one test per subcommand: a bad flag,
//! a missing file or directory named on the command line, a bad config.
//!
//! The wrappers (`run`, `agent-reach-exec`, `agent-reach-sandbox`) keep 125
//! for their own failures; `exec --json` has its own codes (2 usage, 125 a
//! bad config, 1 a request that did not succeed); every other subcommand
//! says 0, 1 (failure) or 2 (usage, a bad config included).

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::common::{TestEnv, bin};

const BAD_CONFIG: &str = "garbage [[\n";
const GOOD_CONFIG: &str = r#"
[[tools]]
name = "say"
command = ["echo", "hi"]
cwd = "project_root"
risk = "low"
"#;

/// A test scenario with a broken and a good registry in the work dir.
fn scenario() -> (TestEnv, PathBuf, PathBuf) {
    let env = TestEnv::new();
    let bad = env.write("bad.toml", BAD_CONFIG);
    let good = env.write("good.toml", GOOD_CONFIG);
    (env, bad, good)
}

/// An `AGENT_REACH_HOME` that cannot hold a session PATH directory: a file.
fn broken_home(env: &TestEnv) -> PathBuf {
    env.write("home-is-a-file", "not a directory")
}

#[test]
fn run_keeps_125_for_a_bad_flag_and_a_missing_workdir() {
    let env = TestEnv::new();
    env.cmd()
        .args(["run", "--bogus", "--", "true"])
        .run()
        .code_is(125);
    env.cmd()
        .args(["run", "--workdir", "/nonexistent/dir", "--", "true"])
        .run()
        .code_is(125)
        .stderr_contains("/nonexistent/dir");
    env.cmd()
        .args(["run", "--sandbox", "sideways", "--", "true"])
        .run()
        .code_is(125);
}

#[test]
fn the_exec_personality_keeps_125_for_a_bad_flag() {
    let env = TestEnv::new();
    let link = env.link("agent-reach-exec");
    env.cmd_at(&link)
        .args(["--bogus", "--", "true"])
        .run()
        .code_is(125);
    env.cmd_at(&link)
        .args(["--workdir", "/nonexistent/dir", "--", "true"])
        .run()
        .code_is(125);
}

#[test]
fn sandbox_keeps_125_for_a_bad_flag_and_a_missing_cwd() {
    let env = TestEnv::new();
    env.cmd()
        .args(["sandbox", "--bogus", "--", "true"])
        .run()
        .code_is(125);
    let link = env.link("agent-reach-sandbox");
    env.cmd_at(&link)
        .args(["--bogus", "--", "true"])
        .run()
        .code_is(125);
    env.cmd_at(&link)
        .args(["--cwd", "/nonexistent/dir", "--", "true"])
        .run()
        .code_is(125)
        .stderr_contains("/nonexistent/dir");
}

#[test]
fn exec_json_says_2_for_usage_and_a_missing_config_125_for_a_bad_config_and_1_for_a_failed_request()
{
    let (env, bad, good) = scenario();
    env.cmd().args(["exec", "--bogus"]).run().code_is(2);
    env.cmd().args(["exec"]).run().code_is(2);
    env.cmd()
        .args(["exec", "--json", "--root", "/nonexistent/dir"])
        .stdin("{}")
        .run()
        .code_is(2);
    env.cmd()
        .args(["exec", "--json", "--config", "/nonexistent/reg.toml"])
        .stdin("{}")
        .run()
        .code_is(2);
    env.cmd()
        .args(["exec", "--jsonl", "--profile", "nope", "--config"])
        .arg(&good)
        .stdin("")
        .run()
        .code_is(2);
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(&bad)
        .stdin("{}")
        .run()
        .code_is(125);
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(&good)
        .stdin(r#"{"id":"a","tool":"nope"}"#)
        .run()
        .code_is(1);
    env.cmd()
        .args(["exec", "--json", "--config"])
        .arg(&good)
        .stdin(r#"{"id":"a","tool":"say"}"#)
        .run()
        .success();
}

#[test]
fn serve_says_2_for_a_bad_flag_a_missing_file_and_a_bad_config() {
    let (env, bad, _) = scenario();
    env.cmd().args(["serve", "--bogus"]).run().code_is(2);
    env.cmd()
        .args(["serve", "--config", "/nonexistent/reg.toml"])
        .stdin("")
        .run()
        .code_is(2)
        .stderr_contains("/nonexistent/reg.toml");
    env.cmd()
        .args(["serve", "--config"])
        .arg(&bad)
        .stdin("")
        .run()
        .code_is(2)
        .stderr_contains("problem");
    env.cmd()
        .args(["serve", "--root", "/nonexistent/dir"])
        .stdin("")
        .run()
        .code_is(2);
}

#[test]
fn serve_and_shell_say_1_when_the_session_cannot_be_set_up() {
    let env = TestEnv::new();
    let home = broken_home(&env);
    env.cmd()
        .arg("serve")
        .env("AGENT_REACH_HOME", &home)
        .stdin("")
        .run()
        .code_is(1)
        .stderr_contains("session PATH directory");
    env.cmd()
        .args(["shell", "--", "true"])
        .env("AGENT_REACH_HOME", &home)
        .run()
        .code_is(1);
}

#[test]
fn shell_says_2_for_a_bad_flag_and_127_for_a_missing_command() {
    let env = TestEnv::new();
    env.cmd().args(["shell", "--bogus"]).run().code_is(2);
    env.cmd()
        .args(["shell", "--", "/nonexistent/program"])
        .run()
        .code_is(127);
}

#[test]
fn apply_patch_says_2_for_a_bad_flag_and_1_for_a_patch_naming_a_missing_file() {
    let env = TestEnv::new();
    env.cmd().args(["apply-patch", "--bogus"]).run().code_is(2);
    env.cmd_at(env.link("apply_patch"))
        .arg("--bogus")
        .run()
        .code_is(2);
    let patch = "*** Begin Patch\n*** Update File: missing.txt\n@@\n-a\n+b\n*** End Patch\n";
    env.cmd()
        .args(["apply-patch", patch])
        .run()
        .code_is(1)
        .stderr_contains("missing.txt");
}

#[test]
fn tools_list_show_and_schema_say_2_for_a_bad_flag_a_missing_file_and_a_bad_config() {
    let (env, bad, good) = scenario();
    env.cmd()
        .args(["tools", "--bogus", "list"])
        .run()
        .code_is(2);
    env.cmd().args(["tools", "frobnicate"]).run().code_is(2);
    for sub in [&["list"][..], &["show", "say"], &["schema"]] {
        env.cmd()
            .arg("tools")
            .args(sub)
            .args(["--config", "/nonexistent/reg.toml"])
            .run()
            .code_is(2);
        env.cmd()
            .arg("tools")
            .args(sub)
            .arg("--config")
            .arg(&bad)
            .run()
            .code_is(2)
            .stderr_contains("problem");
        env.cmd()
            .arg("tools")
            .args(sub)
            .arg("--config")
            .arg(env.work())
            .run()
            .code_is(2);
        env.cmd()
            .arg("tools")
            .args(sub)
            .args(["--root", "/nonexistent/dir"])
            .run()
            .code_is(2);
        env.cmd()
            .arg("tools")
            .args(sub)
            .arg("--config")
            .arg(&good)
            .run()
            .success();
    }
    env.cmd()
        .args(["tools", "show", "nope", "--config"])
        .arg(&good)
        .run()
        .code_is(1);
}

#[test]
fn tools_check_says_1_for_problems_and_2_for_a_file_it_cannot_read() {
    let (env, bad, good) = scenario();
    env.cmd()
        .args(["tools", "check"])
        .arg(&bad)
        .run()
        .code_is(1);
    env.cmd()
        .args(["tools", "check", "/nonexistent/reg.toml"])
        .run()
        .code_is(2);
    env.cmd()
        .args(["tools", "check"])
        .arg(env.work())
        .run()
        .code_is(2);
    env.cmd()
        .args(["tools", "check"])
        .arg(&good)
        .run()
        .success();
}

#[test]
fn doctor_says_2_for_a_bad_flag_and_1_when_the_session_path_cannot_be_made() {
    let env = TestEnv::new();
    env.cmd().args(["doctor", "--bogus"]).run().code_is(2);
    let result = env
        .cmd()
        .arg("doctor")
        .env("AGENT_REACH_HOME", broken_home(&env))
        .run();
    result.code_is(1).stdout_contains("path_dir");
}

#[test]
fn completions_say_2_for_an_unknown_or_missing_shell() {
    let env = TestEnv::new();
    env.cmd()
        .args(["completions", "tcsh"])
        .run()
        .code_is(2)
        .stderr_contains("bash");
    env.cmd().arg("completions").run().code_is(2);
}

#[test]
fn the_cli_says_2_for_an_unknown_subcommand_or_none() {
    let env = TestEnv::new();
    env.cmd().arg("frobnicate").run().code_is(2);
    env.cmd().run().code_is(2);
    env.cmd().arg("--bogus").run().code_is(2);
}

#[test]
fn a_stdout_that_fails_is_1_for_tools() {
    let env = TestEnv::new();
    let status = Command::new(bin())
        .args(["tools", "list"])
        .current_dir(env.work())
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AGENT_REACH_HOME", env.ar_home())
        .stdin(Stdio::null())
        .stdout(File::create("/dev/full").unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1), "tools list > /dev/full");
}
