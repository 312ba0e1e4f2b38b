//! What a sandboxed command cannot read, tried through `serve` as a remote
//! caller would: the listeners' token file, the registry's secrets file and
//! the server's own `/proc` entries (`environ` holds `$AGENT_REACH_TOKEN`).
//! Under `read-only` and `workspace-write` each is out of reach, also by
//! `base64` (which redaction cannot see); `danger-full-access` is unconfined
//! by definition and reads all three, which shows that the probes can see.

use std::os::unix::fs::PermissionsExt;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::sandboxd_rest::{Listening, TOKEN, run};
use crate::common::{TestEnv, landlock_abi};
use crate::skip_unless;

/// The secret the registry's secrets file holds.
const SECRET_VALUE: &str = "s3cret-value-for-hiding";

/// A shell line that says, for each of the three, whether its bytes can be
/// read (`base64` of it is not empty), whether the server's descriptors can
/// be listed, and how often `AGENT_REACH_TOKEN` is in the server's
/// environment and in the command's own. `$PPID` is the server: the wrapper
/// exec'd the shell.
fn probes(token_file: &str, secrets_file: &str) -> String {
    format!(
        "probe() {{ if [ -n \"$(base64 \"$2\" 2>/dev/null)\" ]; then echo \"$1 readable\"; else echo \"$1 hidden\"; fi; }}; \
         probe token '{token_file}'; probe secrets '{secrets_file}'; \
         probe environ /proc/$PPID/environ; probe cmdline /proc/$PPID/cmdline; \
         ls /proc/$PPID/fd >/dev/null 2>&1 && echo 'fds listed' || echo 'fds hidden'; \
         grep -c AGENT_REACH_TOKEN /proc/$PPID/environ 2>/dev/null || echo 0; env | grep -c AGENT_REACH_TOKEN; true"
    )
}

/// A private file holding `contents`, outside the workspace.
fn private_file(env: &TestEnv, name: &str, contents: &str) -> String {
    let path = env.root.path().join(name);
    std::fs::write(&path, contents).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Starts `serve --sandbox POLICY --token-file F` with a registry naming a
/// secrets file, runs the probes through python-runtime's `/execute`, and
/// returns its stdout.
fn probe_under(policy: &str) -> String {
    let mut stdout = String::new();
    run(async {
        let env = TestEnv::new();
        let token_file = private_file(&env, "listener.token", &format!("{TOKEN}\n"));
        let secrets_file = private_file(&env, "secrets.env", &format!("HIDDEN={SECRET_VALUE}\n"));
        let config = env.write(
            "registry.toml",
            format!("allow_raw_commands = true\nsecrets_file = \"{secrets_file}\"\n"),
        );
        let config = config.to_str().unwrap().to_owned();
        let s = Listening::start_in(
            env,
            &[
                "--config",
                &config,
                "--sandbox",
                policy,
                "--token-file",
                &token_file,
            ],
            &[],
        )
        .await;
        let response = s
            .with_token(Method::POST, format!("{}/execute", s.runtime))
            .json(&json!({"command": probes(&token_file, &secrets_file)}))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["exit_code"], 0, "{body}");
        stdout = body["stdout"].as_str().unwrap_or_default().to_owned();
    });
    stdout
}

macro_rules! need_landlock_and_mounts {
    () => {
        skip_unless!(
            feature = "landlock",
            landlock_abi() >= 3,
            "Landlock ABI 3 or newer is not available on this kernel"
        );
        skip_unless!(
            feature = "userns",
            nix::unistd::geteuid().is_root(),
            "a private /proc needs root (a user namespace does not own the PID namespace)"
        );
    };
}

const ALL_HIDDEN: &str =
    "token hidden\nsecrets hidden\nenviron hidden\ncmdline hidden\nfds hidden\n0\n0\n";

#[test]
fn a_read_only_command_cannot_read_the_token_the_secrets_or_the_server() {
    need_landlock_and_mounts!();
    assert_eq!(probe_under("read-only"), ALL_HIDDEN);
}

#[test]
fn a_workspace_write_command_cannot_read_the_token_the_secrets_or_the_server() {
    need_landlock_and_mounts!();
    assert_eq!(probe_under("workspace-write"), ALL_HIDDEN);
}

#[test]
fn danger_full_access_is_unconfined_and_reads_all_of_it() {
    let out = probe_under("danger-full-access");
    for line in [
        "token readable",
        "secrets readable",
        "environ readable",
        "cmdline readable",
        "fds listed",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    // $PPID is the server: its environment holds the listeners' token,
    // which the command's own environment does not.
    assert!(out.ends_with("1\n0\n"), "{out}");
}
