//! What a user gets besides the commands: completion scripts, the man page,
//! help that ends with the exit status, and a doctor whose report says what
//! the machine means for them.

use crate::common::TestEnv;

#[test]
fn completions_print_a_script_for_every_shell() {
    let env = TestEnv::new();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        env.cmd()
            .args(["completions", shell])
            .run()
            .success()
            .stdout_contains("agent-reach")
            .stdout_contains("doctor");
    }
}

#[test]
fn the_bash_script_is_valid_bash_and_completes_subcommands() {
    let env = TestEnv::new();
    let script = env.cmd().args(["completions", "bash"]).run().stdout_str();
    let path = env.write("agent-reach.bash", &script);
    // Source it, then ask it what follows `agent-reach ser`.
    let probe = format!(
        "source {} && COMP_WORDS=(agent-reach ser) COMP_CWORD=1 && _agent__reach agent-reach ser agent-reach && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display()
    );
    env.cmd_at("bash")
        .args(["-c", &probe])
        .run()
        .success()
        .stdout_contains("serve");
}

#[test]
fn run_help_ends_with_its_exit_status_table() {
    let env = TestEnv::new();
    let help = env.cmd().args(["run", "--help"]).run();
    help.success();
    let text = help.stdout_str();
    let table = text.rfind("Exit status:").expect("an exit status table");
    for code in ["124", "125", "126", "127", "128+N"] {
        assert!(text[table..].contains(code), "{code} missing from:\n{text}");
    }
    env.cmd_at(env.link("agent-reach-exec"))
        .arg("--help")
        .run()
        .success()
        .stdout_contains("Exit status:");
}

#[test]
fn the_man_page_is_roff_with_the_exit_status() {
    let env = TestEnv::new();
    env.cmd()
        .arg("man")
        .run()
        .success()
        .stdout_contains(".TH agent-reach 1")
        .stdout_contains("EXIT STATUS");
    env.cmd().args(["man", "--out-dir", "man1"]).run().success();
    assert!(env.work().join("man1/agent-reach-run.1").is_file());
}

#[test]
fn doctor_json_carries_the_probes_and_what_they_mean() {
    let env = TestEnv::new();
    let result = env.cmd().args(["doctor", "--json"]).run();
    let report = result.json();
    let probes = report["probes"].as_array().expect("probes");
    let path = probes
        .iter()
        .find(|p| p["name"] == "path_dir")
        .expect("a path_dir probe");
    assert_eq!(path["ok"], true, "{report:#}");
    assert_eq!(path["needed"], true);
    // The probe made the directory where run makes it, and removed it.
    assert!(env.path_dirs().is_empty(), "{:?}", env.path_dirs());
    let verdict = &report["verdict"];
    assert!(
        ["full", "partial", "unavailable"].contains(&verdict["sandbox"]["state"].as_str().unwrap()),
        "{verdict:#}"
    );
    assert!(["cgroup", "subreaper", "none"].contains(&verdict["escapee_kill"].as_str().unwrap()));
    let ports: Vec<_> = verdict["listeners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_u64().unwrap())
        .collect();
    assert_eq!(ports, [8765, 9090, 8080, 8888, 8000]);
    // Exit 0 exactly when the verdict is ok.
    let ok = verdict["ok"].as_bool().unwrap();
    result.code_is(if ok { 0 } else { 1 });
}

#[test]
fn doctor_fails_a_config_that_needs_a_sandbox_where_the_sandbox_fails() {
    let env = TestEnv::new();
    let config = env.write(
        "sandboxed.toml",
        "[sandbox]\ndefault = \"read-only\"\n[[tools]]\nname = \"t\"\ncommand = [\"true\"]\ncwd = \"project_root\"\n",
    );
    let result = env
        .cmd()
        .args(["doctor", "--json", "--config"])
        .arg(&config)
        .run();
    let report = result.json();
    let sandbox = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "sandbox")
        .expect("a sandbox probe")
        .clone();
    assert_eq!(sandbox["needed"], true, "{report:#}");
    if sandbox["ok"] == true {
        result.code_is(0);
    } else {
        result.code_is(1);
    }
    // A sandbox the kernel cannot give: the home's tmp is a file, so
    // `run --sandbox` could not even write its report there.
    let home = env.root.path().join("ar-home-broken");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join("tmp"), "a file").unwrap();
    env.cmd()
        .args(["doctor", "--config"])
        .arg(&config)
        .env("AGENT_REACH_HOME", &home)
        .run()
        .code_is(1)
        .stdout_contains("FAIL");
}
