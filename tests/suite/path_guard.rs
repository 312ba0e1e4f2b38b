//! The session PATH directory: created for `shell`, first on PATH, holding
//! the personality links, removed on exit, on signal death and on panic, and
//! swept when its owner was SIGKILLed.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use agent_reach::path_guard::{LOCK_FILE_NAME, PathGuard, path_root};

use crate::common::TestEnv;

#[test]
fn shell_puts_links_first_on_path_and_removes_them_after() {
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args([
            "shell",
            "--",
            "sh",
            "-c",
            "first=${PATH%%:*}; echo $first; ls $first",
        ])
        .run();
    result.success();
    let out = result.stdout_str();
    let mut lines = out.lines();
    let dir = PathBuf::from(lines.next().unwrap());
    assert!(
        dir.starts_with(env.path_root()),
        "PATH dir {dir:?} not under {:?}",
        env.path_root()
    );
    let names: Vec<_> = lines.collect();
    for name in [
        "agent-reach-exec",
        "agent-reach-sandbox",
        "apply_patch",
        "applypatch",
    ] {
        assert!(names.contains(&name), "missing link {name} in {names:?}");
    }
    assert!(!dir.exists(), "{dir:?} left behind");
    assert!(env.path_dirs().is_empty());
}

#[test]
fn shell_passes_exit_code_through() {
    let env = TestEnv::new();
    env.cmd()
        .args(["shell", "--", "sh", "-c", "exit 7"])
        .run()
        .code_is(7);
    assert!(env.path_dirs().is_empty());
}

#[test]
fn shell_child_killed_by_signal_gives_128_plus_n_and_no_dir() {
    let env = TestEnv::new();
    env.cmd()
        .args(["shell", "--", "sh", "-c", "kill -KILL $$"])
        .run()
        .code_is(137);
    assert!(env.path_dirs().is_empty());
}

#[test]
fn shell_defaults_to_dollar_shell() {
    let env = TestEnv::new();
    env.cmd()
        .env("SHELL", "/bin/sh")
        .arg("shell")
        .stdin("echo from-default-shell\n")
        .run()
        .success()
        .stdout_contains("from-default-shell");
}

#[test]
fn missing_shell_command_is_127() {
    let env = TestEnv::new();
    env.cmd()
        .args(["shell", "--", "/no/such/program"])
        .run()
        .code_is(127);
    assert!(env.path_dirs().is_empty());
}

#[test]
fn sweep_removes_dir_of_sigkilled_owner_and_keeps_live_ones() {
    let env = TestEnv::new();
    // An owner that is SIGKILLed cannot clean up after itself.
    use std::os::unix::process::CommandExt;
    let mut owner = std::process::Command::new(crate::common::bin())
        .args(["shell", "--", "sleep", "30"])
        .process_group(0)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AGENT_REACH_HOME", env.ar_home())
        .spawn()
        .unwrap();
    let dead_dir = wait_for_single_dir(&env);
    // SIGKILL the whole group: the owner and its `sleep`.
    unsafe { libc::kill(-(owner.id() as i32), libc::SIGKILL) };
    owner.wait().unwrap();
    assert!(
        dead_dir.exists(),
        "the killed owner's dir should still be there before a sweep"
    );

    // A live owner whose lock is held must survive the sweep.
    let home = env.ar_home();
    let live = PathGuard::create(&path_root(&home, None), &crate::common::bin()).unwrap();

    env.cmd().args(["shell", "--", "true"]).run().success();
    assert!(!dead_dir.exists(), "stale {dead_dir:?} was not swept");
    assert!(live.dir().exists(), "a live dir was swept");
    assert!(live.dir().join(LOCK_FILE_NAME).exists());
    // The orphaned `sleep` was in the killed owner's process group.
    let _ = std::process::Command::new("pkill")
        .args(["-f", "sleep 30"])
        .status();
}

#[test]
fn guard_is_removed_when_its_owner_panics() {
    let env = TestEnv::new();
    let home = env.ar_home();
    let seen = std::sync::Mutex::new(None);
    let outcome = std::panic::catch_unwind(|| {
        let guard = PathGuard::create(&path_root(&home, None), &crate::common::bin()).unwrap();
        *seen.lock().unwrap() = Some(guard.dir().to_path_buf());
        panic!("owner panics while holding the guard");
    });
    assert!(outcome.is_err());
    let dir = seen.lock().unwrap().clone().unwrap();
    assert!(!dir.exists(), "{dir:?} survived a panic");
}

fn wait_for_single_dir(env: &TestEnv) -> PathBuf {
    for _ in 0..500 {
        let dirs = env.path_dirs();
        if let [dir] = dirs.as_slice()
            && dir.join(LOCK_FILE_NAME).exists()
        {
            return dir.clone();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no session PATH dir appeared under {:?}", env.path_root());
}

#[test]
fn dirs_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = TestEnv::new();
    let result = env
        .cmd()
        .args(["shell", "--", "sh", "-c", "stat -c %a ${PATH%%:*}"])
        .run();
    result.success().stdout_is("700\n");
    let mode = fs::metadata(env.path_root()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
}

#[test]
fn the_path_dir_goes_under_a_writable_xdg_runtime_dir_else_under_the_home() {
    let env = TestEnv::new();
    let runtime = env.root.path().join("run-user");
    fs::create_dir(&runtime).unwrap();
    let first_entry = |xdg: &std::path::Path| {
        let result = env
            .cmd()
            .env("XDG_RUNTIME_DIR", xdg)
            .args(["shell", "--", "sh", "-c", "echo ${PATH%%:*}"])
            .run();
        result.success();
        PathBuf::from(result.stdout_str().trim())
    };
    let dir = first_entry(&runtime);
    assert!(
        dir.starts_with(runtime.join("agent-reach").join("path")),
        "{dir:?} is not under the runtime dir"
    );
    assert!(!dir.exists(), "{dir:?} left behind");
    let missing = env.root.path().join("no-such-dir");
    let dir = first_entry(&missing);
    assert!(
        dir.starts_with(env.path_root()),
        "{dir:?}: a runtime dir that is not there falls back to the home"
    );
}
