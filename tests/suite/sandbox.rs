//! agent-reach-sandbox through a real link: what a confined command can and
//! cannot do. Every test names the escape it tries; kernel features that are
//! missing skip the test loudly.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::{RunResult, TestCommand, TestEnv};
use crate::skip_unless;

/// The Landlock ABI of the running kernel, 0 when unavailable.
use crate::common::landlock_abi;

fn have(program: &str) -> bool {
    ["/usr/local/bin", "/usr/bin", "/bin"]
        .iter()
        .any(|dir| Path::new(dir).join(program).exists())
}

/// Where to make the directory no policy may write to: never below `/tmp`
/// (always writable under workspace-write), where the target dir is when the
/// checkout itself lives in `/tmp`.
fn outside_base() -> PathBuf {
    let target_tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    if !target_tmp.starts_with("/tmp") {
        return target_tmp;
    }
    let var_tmp = PathBuf::from("/var/tmp");
    assert!(
        var_tmp.is_dir(),
        "the checkout is under /tmp and /var/tmp is missing: no place outside the sandbox's writable roots"
    );
    var_tmp
}

/// A work dir (under the temp dir, so `/tmp` rules apply to it too) and an
/// outside dir that no policy makes writable.
struct Scene {
    env: TestEnv,
    outside: tempfile::TempDir,
    sandbox: PathBuf,
}

impl Scene {
    fn new() -> Self {
        let env = TestEnv::new();
        let outside = tempfile::Builder::new()
            .prefix("ar-outside")
            .tempdir_in(outside_base())
            .unwrap();
        let sandbox = env.link("agent-reach-sandbox");
        Self {
            env,
            outside,
            sandbox,
        }
    }

    fn outside(&self, rel: &str) -> PathBuf {
        self.outside.path().join(rel)
    }

    /// `agent-reach-sandbox FLAGS... -- sh -c SCRIPT`.
    fn sh(&self, flags: &[&str], script: &str) -> TestCommand {
        self.env
            .cmd_at(&self.sandbox)
            .args(flags)
            .args(["--", "sh", "-c", script])
            .limit(Duration::from_secs(20))
    }

    fn run_sh(&self, flags: &[&str], script: &str) -> RunResult {
        self.sh(flags, script).run()
    }
}

macro_rules! need_landlock {
    () => {
        skip_unless!(
            feature = "landlock",
            landlock_abi() >= 3,
            "Landlock ABI 3 or newer is not available on this kernel"
        );
    };
}

#[test]
fn write_inside_the_workspace_works() {
    need_landlock!();
    let scene = Scene::new();
    scene
        .run_sh(&[], "mkdir -p src && echo hi > src/a && cat src/a && echo t > /tmp/ar-sb-$$ && rm /tmp/ar-sb-$$")
        .success()
        .stdout_is("hi\n");
    assert_eq!(scene.env.read("src/a"), "hi\n");
}

#[test]
fn write_outside_the_workspace_is_refused() {
    need_landlock!();
    let scene = Scene::new();
    let target = scene.outside("x");
    let result = scene.run_sh(&[], &format!("echo pwned > '{}'", target.display()));
    assert_ne!(result.code, Some(0));
    let stderr = result.stderr_str();
    assert!(
        stderr.contains("Permission denied") || stderr.contains("Read-only file system"),
        "{stderr}"
    );
    assert!(!target.exists());
}

#[test]
fn metadata_outside_the_workspace_cannot_change() {
    need_landlock!();
    skip_unless!(
        feature = "userns",
        mount_namespaces_available(),
        "no mount namespace available: Landlock alone does not cover chmod, chown and utimes"
    );
    let scene = Scene::new();
    let target = scene.outside("existing");
    fs::write(&target, "x").unwrap();
    let before = fs::metadata(&target).unwrap();
    let result = scene.run_sh(
        &[],
        &format!(
            "touch -d 2001-01-01 '{t}' || echo touch-refused; chmod 777 '{t}' || echo chmod-refused; \
             chown 12345 '{t}' || echo chown-refused",
            t = target.display()
        ),
    );
    result
        .success()
        .stdout_is("touch-refused\nchmod-refused\nchown-refused\n");
    let after = fs::metadata(&target).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(before.mode(), after.mode());
    assert_eq!(before.uid(), after.uid());
    assert_eq!(before.mtime(), after.mtime());
}

#[test]
fn git_hooks_and_config_stay_read_only() {
    need_landlock!();
    let scene = Scene::new();
    scene.env.write(".git/hooks/.keep", "");
    scene.env.write(".git/config", "[core]\n");
    scene.env.write("src/lib.rs", "old\n");
    let result = scene.run_sh(
        &[],
        "echo evil > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
         echo '[core] hooksPath = /x' >> .git/config; \
         mv .git .git-old; rm -rf .git; \
         echo new > src/lib.rs && echo top-level-write-ok",
    );
    result.stdout_contains("top-level-write-ok");
    assert!(!scene.env.work().join(".git/hooks/pre-commit").exists());
    assert_eq!(scene.env.read(".git/config"), "[core]\n");
    assert!(scene.env.work().join(".git/hooks").is_dir());
    assert_eq!(scene.env.read("src/lib.rs"), "new\n");
}

#[test]
fn git_named_as_a_writable_root_is_writable() {
    need_landlock!();
    let scene = Scene::new();
    scene.env.write(".git/hooks/.keep", "");
    let git = scene.env.work().join(".git");
    scene
        .run_sh(
            &["--writable-root", git.to_str().unwrap()],
            "echo ok > .git/hooks/pre-commit",
        )
        .success();
    assert_eq!(scene.env.read(".git/hooks/pre-commit"), "ok\n");
}

#[test]
fn worktree_gitdir_and_common_dir_stay_read_only() {
    need_landlock!();
    let scene = Scene::new();
    // The main repository lives inside a writable root (/tmp), the worktree
    // is the working directory.
    let main = scene.env.root.path().join("main");
    fs::create_dir_all(main.join(".git/worktrees/wt")).unwrap();
    fs::create_dir_all(main.join(".git/hooks")).unwrap();
    fs::write(main.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
    scene.env.write(
        ".git",
        format!("gitdir: {}\n", main.join(".git/worktrees/wt").display()),
    );
    let result = scene.run_sh(
        &[],
        &format!(
            "echo x > '{hooks}/post-checkout'; echo x > '{wt}/HEAD'; echo 'gitdir: /x' > .git",
            hooks = main.join(".git/hooks").display(),
            wt = main.join(".git/worktrees/wt").display()
        ),
    );
    assert_ne!(result.code, Some(0));
    assert!(!main.join(".git/hooks/post-checkout").exists());
    assert!(!main.join(".git/worktrees/wt/HEAD").exists());
    assert!(scene.env.read(".git").starts_with("gitdir: /"));
    assert!(!scene.env.read(".git").contains("/x"));
}

#[test]
fn symlink_pointing_out_does_not_lead_out() {
    need_landlock!();
    let scene = Scene::new();
    std::os::unix::fs::symlink(scene.outside.path(), scene.env.work().join("out")).unwrap();
    let result = scene.run_sh(&[], "echo pwned > out/x");
    assert_ne!(result.code, Some(0));
    assert!(!scene.outside("x").exists());
}

#[test]
fn renaming_a_file_out_is_refused() {
    need_landlock!();
    let scene = Scene::new();
    scene.env.write("f", "data");
    let result = scene.run_sh(&[], &format!("mv f '{}'", scene.outside("f").display()));
    assert_ne!(result.code, Some(0));
    assert!(!scene.outside("f").exists());
    assert_eq!(scene.env.read("f"), "data");
}

#[test]
fn hard_links_out_and_in_are_refused() {
    need_landlock!();
    let scene = Scene::new();
    scene.env.write("f", "data");
    fs::write(scene.outside("secret"), "outside").unwrap();
    let result = scene.run_sh(
        &[],
        &format!(
            "ln f '{out}/f'; ln '{out}/secret' in && echo pwned > in",
            out = scene.outside.path().display()
        ),
    );
    assert_ne!(result.code, Some(0));
    assert!(!scene.outside("f").exists());
    assert_eq!(
        fs::read_to_string(scene.outside("secret")).unwrap(),
        "outside"
    );
}

#[test]
fn read_only_refuses_every_write_but_the_devices() {
    need_landlock!();
    let scene = Scene::new();
    scene.env.write("f", "data");
    let result = scene.run_sh(
        &["--policy", "read-only"],
        "cat f; for t in f new /tmp/ar-ro-$$; do (echo x > $t) 2>/dev/null && echo wrote-$t; done; \
         echo x > /dev/null && head -c1 /dev/zero >/dev/null && head -c1 /dev/urandom >/dev/null && echo devices-ok",
    );
    result.success().stdout_is("datadevices-ok\n");
    assert_eq!(scene.env.read("f"), "data");
    assert!(!scene.env.work().join("new").exists());
}

#[test]
fn network_is_denied_but_unix_sockets_work() {
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    let script = r#"
import socket, errno
for name, fam, kind in [("ipv4", socket.AF_INET, socket.SOCK_STREAM),
                        ("ipv6", socket.AF_INET6, socket.SOCK_STREAM),
                        ("udp", socket.AF_INET, socket.SOCK_DGRAM),
                        ("raw", socket.AF_INET, socket.SOCK_RAW),
                        ("packet", 17, socket.SOCK_RAW),
                        ("netlink", 16, socket.SOCK_RAW)]:
    try:
        socket.socket(fam, kind)
        print(name, "OPEN")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
a, b = socket.socketpair()
a.sendall(b"ping"); print("unix", b.recv(4).decode())
try:
    socket.create_connection(("127.0.0.1", 9), timeout=5)
except OSError as e:
    print("connect", e)
"#;
    let result = scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--", "python3", "-c", script])
        .limit(Duration::from_secs(20))
        .run();
    result
        .success()
        .stdout_contains("ipv4 EPERM\n")
        .stdout_contains("ipv6 EPERM\n")
        .stdout_contains("udp EPERM\n")
        .stdout_contains("raw EPERM\n")
        .stdout_contains("packet EPERM\n")
        .stdout_contains("unix ping\n")
        .stdout_contains("connect [Errno 1] Operation not permitted")
        .elapsed_under(Duration::from_secs(10));
    assert!(
        !result.stdout_str().contains("OPEN"),
        "{}",
        result.stdout_str()
    );
}

#[test]
fn network_allow_lets_sockets_open() {
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--network", "allow", "--", "python3", "-c"])
        .arg("import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM); print('open')")
        .run()
        .success()
        .stdout_is("open\n");
}

#[test]
fn curl_fails_fast_with_a_clear_error() {
    skip_unless!(have("curl"), "curl is not installed");
    let scene = Scene::new();
    let result = scene
        .env
        .cmd_at(&scene.sandbox)
        .args([
            "--",
            "curl",
            "-sS",
            "--max-time",
            "30",
            "http://93.184.215.14/",
        ])
        .limit(Duration::from_secs(40))
        .run();
    assert_eq!(result.code, Some(7), "{}", result.stderr_str());
    result.elapsed_under(Duration::from_secs(5));
    result.stderr_contains("Failed to connect");
}

#[test]
fn ptrace_of_a_sibling_fails() {
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    let script = r#"
import ctypes, os, subprocess, errno
libc = ctypes.CDLL(None, use_errno=True)
sib = subprocess.Popen(["sleep", "30"])
try:
    rc = libc.ptrace(16, sib.pid, None, None)  # PTRACE_ATTACH
    print("attach", rc, errno.errorcode.get(ctypes.get_errno()))
    try:
        with open(f"/proc/{sib.pid}/mem", "r+b") as m:
            print("mem OPEN")
    except OSError as e:
        print("mem", errno.errorcode[e.errno])
finally:
    sib.kill(); sib.wait()
"#;
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--", "python3", "-c", script])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_contains("attach -1 EPERM\n");
}

#[test]
fn user_namespaces_and_mounts_are_refused() {
    skip_unless!(have("unshare"), "unshare is not installed");
    let scene = Scene::new();
    let result = scene.run_sh(&[], "unshare -U true && echo userns-OPEN; unshare -Ur true && echo map-OPEN; mount -t tmpfs none /mnt 2>/dev/null && echo mount-OPEN; echo done");
    result.success().stdout_is("done\n");
}

#[test]
fn nested_danger_full_access_stays_confined() {
    need_landlock!();
    let scene = Scene::new();
    let target = scene.outside("x");
    let script = format!(
        "'{sandbox}' --policy danger-full-access --network allow -- sh -c \"echo pwned > '{target}'\"; \
         '{sandbox}' --policy danger-full-access --network allow -- python3 -c \
         'import socket; socket.socket(socket.AF_INET)' 2>/dev/null || echo net-still-denied",
        sandbox = scene.sandbox.display(),
        target = target.display()
    );
    let result = scene.run_sh(&[], &script);
    assert!(!target.exists(), "nested sandbox wrote outside");
    if have("python3") {
        result.stdout_contains("net-still-denied");
    }
}

#[test]
fn exit_codes_and_signals_pass_through() {
    let scene = Scene::new();
    scene.run_sh(&[], "exit 42").code_is(42);
    let killed = scene.run_sh(&[], "kill -TERM $$");
    assert_eq!(killed.signal, Some(libc::SIGTERM), "code {:?}", killed.code);
    scene.run_sh(&[], "true").success();
}

#[test]
fn missing_and_unrunnable_commands_get_127_and_126() {
    let scene = Scene::new();
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--", "no-such-command-anywhere"])
        .run()
        .code_is(127)
        .stderr_contains("no-such-command-anywhere: command not found");
    scene.env.write("plain.txt", "not a program");
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--", "./plain.txt"])
        .run()
        .code_is(126);
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--", "./absent"])
        .run()
        .code_is(127);
}

#[test]
fn bad_flags_are_exit_125() {
    let scene = Scene::new();
    for flags in [
        &["--policy", "nope", "--", "true"][..],
        &["--network", "maybe", "--", "true"],
        &["--bogus", "--", "true"],
        &["--policy", "read-only"],
        &["--cwd", "/no/such/dir", "--", "true"],
        &["--writable-root", "/no/such/dir", "--", "true"],
    ] {
        scene
            .env
            .cmd_at(&scene.sandbox)
            .args(flags)
            .run()
            .code_is(125);
    }
    scene
        .env
        .cmd_at(&scene.sandbox)
        .arg("--help")
        .run()
        .success()
        .stdout_contains("--writable-root");
}

#[test]
fn the_cli_subcommand_is_the_same_personality() {
    let scene = Scene::new();
    scene
        .env
        .cmd()
        .args(["sandbox", "--", "sh", "-c", "exit 3"])
        .run()
        .code_is(3);
}

#[test]
fn report_says_what_was_enforced() {
    need_landlock!();
    let scene = Scene::new();
    let report = scene.env.root.path().join("report.json");
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--report", report.to_str().unwrap(), "--", "true"])
        .run()
        .success();
    let value: serde_json::Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
    assert_eq!(value["fs"], "enforced");
    assert_eq!(value["net"], "enforced");
    assert_eq!(value["abi"], landlock_abi());

    let from_env = scene.env.root.path().join("env-report.json");
    scene
        .env
        .cmd_at(&scene.sandbox)
        .env("AGENT_REACH_SANDBOX_REPORT", &from_env)
        .args(["--policy", "danger-full-access", "--network", "allow", "--"])
        .args(["sh", "-c", "echo ${AGENT_REACH_SANDBOX_REPORT:-unset}"])
        .run()
        .success()
        .stdout_is("unset\n");
    let value: serde_json::Value = serde_json::from_slice(&fs::read(&from_env).unwrap()).unwrap();
    assert_eq!(value["fs"], "none");
    assert_eq!(value["net"], "none");
}

#[test]
fn cwd_flag_moves_the_command_and_its_writable_root() {
    need_landlock!();
    let scene = Scene::new();
    let elsewhere = scene.outside("ws");
    fs::create_dir(&elsewhere).unwrap();
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args([
            "--cwd",
            elsewhere.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "pwd; echo ok > f",
        ])
        .run()
        .success()
        .stdout_is(&format!(
            "{}\n",
            elsewhere.canonicalize().unwrap().display()
        ));
    assert_eq!(fs::read_to_string(elsewhere.join("f")).unwrap(), "ok\n");
}

/// Whether this process could make a private mount namespace, as root or
/// through an unprivileged user namespace.
fn mount_namespaces_available() -> bool {
    let works = |args: &[&str]| {
        std::process::Command::new("unshare")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    have("unshare")
        && (works(&["-m", "mount", "--make-rslave", "/"])
            || works(&["-Urm", "mount", "--make-rslave", "/"]))
}

#[test]
fn repository_root_stays_fully_usable_while_git_is_read_only() {
    need_landlock!();
    skip_unless!(
        feature = "userns",
        mount_namespaces_available(),
        "no mount namespace available (not root, user namespaces disabled)"
    );
    let scene = Scene::new();
    scene.env.write(".git/hooks/.keep", "");
    scene.env.write("top.txt", "a\n");
    let result = scene.run_sh(
        &[],
        "touch newtop && sed -i s/a/b/ top.txt && mv newtop renamed && echo usable; \
         echo x > .git/hooks/pre-commit || echo hooks-refused; \
         mv .git elsewhere 2>/dev/null || echo git-pinned",
    );
    result
        .success()
        .stdout_is("usable\nhooks-refused\ngit-pinned\n")
        .stderr_contains("Read-only file system");
    assert_eq!(scene.env.read("top.txt"), "b\n");
    assert!(scene.env.work().join("renamed").exists());
    assert!(!scene.env.work().join(".git/hooks/pre-commit").exists());
}

#[test]
fn without_mounts_the_fallback_still_protects_git() {
    need_landlock!();
    // The outer sandbox's seccomp filter refuses mounts and user namespaces,
    // so the inner one must fall back to splitting the root with Landlock.
    let scene = Scene::new();
    scene.env.write(".git/hooks/.keep", "");
    fs::create_dir(scene.env.work().join("src")).unwrap();
    let script = format!(
        "'{sandbox}' -- sh -c 'echo x > .git/hooks/pre-commit || echo hooks-refused; \
         echo ok > src/f && echo subdir-ok; touch newtop 2>/dev/null || echo top-level-refused'",
        sandbox = scene.sandbox.display()
    );
    let result = scene.run_sh(&["--policy", "danger-full-access"], &script);
    result
        .success()
        .stdout_is("hooks-refused\nsubdir-ok\ntop-level-refused\n");
    assert!(!scene.env.work().join(".git/hooks/pre-commit").exists());
    assert_eq!(scene.env.read("src/f"), "ok\n");
}

#[test]
fn the_terminal_can_be_reopened_by_name() {
    need_landlock!();
    skip_unless!(
        feature = "pty",
        have("script"),
        "script (util-linux) is not installed to provide a PTY"
    );
    let scene = Scene::new();
    let inner = format!(
        "'{}' -- sh -c 'echo via-tty > /dev/tty && stty size < /dev/tty > /dev/null && echo x > $(tty) && echo tty-ok'",
        scene.sandbox.display()
    );
    scene
        .env
        .cmd_at("script")
        .args(["-qec", &inner, "/dev/null"])
        .limit(Duration::from_secs(20))
        .run()
        .success()
        .stdout_contains("via-tty")
        .stdout_contains("tty-ok");
}

#[test]
fn processes_outside_cannot_be_signalled() {
    need_landlock!();
    skip_unless!(
        feature = "landlock",
        landlock_abi() >= 6,
        "Landlock signal scoping needs ABI 6"
    );
    let scene = Scene::new();
    let mut outside = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let result = scene.run_sh(
        &[],
        &format!(
            "kill -KILL {pid} || echo refused; cat /proc/{pid}/environ > /dev/null || echo environ-refused",
            pid = outside.id()
        ),
    );
    let still_running = outside.try_wait().unwrap().is_none();
    let _ = outside.kill();
    let _ = outside.wait();
    // Its /proc entry is not even there for the command (a private /proc
    // where the wrapper could mount one).
    let hidden = if nix::unistd::geteuid().is_root() {
        "environ-refused\n"
    } else {
        ""
    };
    result.success().stdout_is(&format!("refused\n{hidden}"));
    assert!(
        still_running,
        "the sandboxed command killed a process outside"
    );
}

#[test]
fn no_new_privs_is_always_set() {
    let scene = Scene::new();
    for policy in ["read-only", "workspace-write", "danger-full-access"] {
        scene
            .run_sh(&["--policy", policy], "grep NoNewPrivs /proc/self/status")
            .success()
            .stdout_contains("NoNewPrivs:\t1");
    }
}

#[test]
fn python_multiprocessing_works_under_workspace_write() {
    need_landlock!();
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    let script = "import multiprocessing as mp\n\
                  if __name__ == '__main__':\n    \
                  with mp.Pool(2) as pool: print(sum(pool.map(abs, [-1, -2, 3])))\n";
    scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--", "python3", "-c", script])
        .limit(Duration::from_secs(30))
        .run()
        .success()
        .stdout_is("6\n");
}

#[cfg(target_arch = "x86_64")]
#[test]
fn privileged_syscalls_are_refused() {
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    // x86_64 numbers, each called with arguments that would fail harmlessly
    // (EINVAL, EFAULT, EBADF) if the filter let it through.
    let script = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
calls = {"io_uring_setup": (425, 0, 0), "bpf": (321, -1, 0, 0), "perf_event_open": (298, 0, 0, -1, -1, 0),
         "process_vm_readv": (310, 1, 0, 0, 0, 0, 0), "kexec_load": (246, 0, 0, 0, -1),
         "init_module": (175, 0, 0, 0), "finit_module": (313, -1, 0, 0), "open_by_handle_at": (304, -1, 0, 0),
         "setns": (308, -1, 0), "mount": (165, 0, 0, 0, 0, 0), "umount2": (166, 0, 0), "pivot_root": (155, 0, 0),
         "iopl": (172, 9), "userfaultfd": (323, -1), "clone3": (435, 0, 0), "x32 getpid": (0x40000000 | 39,),
         "sethostname": (170, 0, -1), "settimeofday": (164, 0, 0), "syslog": (103, 10, 0, 0),
         "TIOCSTI": (16, 0, 0x5412, 0), "TIOCLINUX": (16, 0, 0x541C, 0)}
for name, (nr, *args) in calls.items():
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), "0") if rc == -1 else "ALLOWED")
"#;
    let result = scene
        .env
        .cmd_at(&scene.sandbox)
        .args(["--network", "allow", "--", "python3", "-c", script])
        .limit(Duration::from_secs(20))
        .run();
    result.success();
    for line in result.stdout_str().lines() {
        let expected = if line.starts_with("clone3") || line.starts_with("x32") {
            "-1 ENOSYS"
        } else {
            "-1 EPERM"
        };
        assert!(line.ends_with(expected), "{line}\n{}", result.stdout_str());
    }
    assert_eq!(result.stdout_str().lines().count(), 21);
}

#[test]
fn the_command_can_open_its_own_pseudo_terminal() {
    need_landlock!();
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    for policy in ["read-only", "workspace-write"] {
        scene
            .env
            .cmd_at(&scene.sandbox)
            .args(["--policy", policy, "--", "python3", "-c"])
            .arg("import os; m, s = os.openpty(); os.write(s, b'x'); print(os.read(m, 1).decode())")
            .run()
            .success()
            .stdout_is("x\n");
    }
}

#[test]
fn device_nodes_cannot_be_made_even_in_the_workspace() {
    need_landlock!();
    // SAFETY: geteuid has no preconditions.
    skip_unless!(
        unsafe { libc::geteuid() } == 0,
        "only root can make device nodes, so only as root does refusing them mean anything"
    );
    let scene = Scene::new();
    scene
        .run_sh(
            &[],
            "mknod ./blk b 7 0 2>/dev/null && echo MADE; mknod ./mem c 1 1 2>/dev/null && echo MADE; \
             mkfifo ./fifo && echo fifo-ok",
        )
        .success()
        .stdout_is("fifo-ok\n");
    assert!(!scene.env.work().join("blk").exists());
}

#[test]
fn inherited_network_sockets_are_closed_when_the_network_is_denied() {
    skip_unless!(have("python3"), "python3 is not installed");
    let scene = Scene::new();
    // Outside the sandbox: open a TCP socket and a Unix socket pair, hand
    // both to the sandboxed command, which reports which survived.
    let script = format!(
        r#"
import os, socket, subprocess, sys
tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
unix, _peer = socket.socketpair()
fds = (tcp.fileno(), unix.fileno())
probe = "import os, sys\nfor fd in sys.argv[1:]:\n    try: os.fstat(int(fd)); print(fd, 'open')\n    except OSError: print(fd, 'closed')"
for network in ("deny", "allow"):
    out = subprocess.run(["{sandbox}", "--network", network, "--", "python3", "-c", probe, *map(str, fds)],
                         pass_fds=fds, capture_output=True, text=True, timeout=20)
    print(network, out.stdout.replace(str(fds[0]), "tcp").replace(str(fds[1]), "unix").split())
"#,
        sandbox = scene.sandbox.display()
    );
    scene
        .env
        .cmd_at("python3")
        .args(["-c", &script])
        .run()
        .success()
        .stdout_contains("deny ['tcp', 'closed', 'unix', 'open']")
        .stdout_contains("allow ['tcp', 'open', 'unix', 'open']");
}

#[test]
fn agent_reach_state_stays_read_only_even_under_tmp() {
    need_landlock!();
    let scene = Scene::new();
    // TestEnv puts $AGENT_REACH_HOME under the temp dir, a writable root.
    let home = scene.env.ar_home();
    fs::create_dir_all(home.join("tmp/path/session")).unwrap();
    fs::write(home.join("tmp/path/session/apply_patch"), "real").unwrap();
    let result = scene.run_sh(
        &[],
        "echo evil > \"$AGENT_REACH_HOME/tmp/path/session/apply_patch\" || echo refused; \
         touch \"$AGENT_REACH_HOME/new\" 2>/dev/null || echo refused; echo x > /tmp/ar-sb-ok-$$ && rm /tmp/ar-sb-ok-$$ && echo tmp-ok",
    );
    result.success().stdout_is("refused\nrefused\ntmp-ok\n");
    assert_eq!(
        fs::read_to_string(home.join("tmp/path/session/apply_patch")).unwrap(),
        "real"
    );
}

#[test]
fn hidden_files_read_as_empty_also_in_a_nested_sandbox() {
    need_landlock!();
    skip_unless!(
        feature = "userns",
        mount_namespaces_available(),
        "no mount namespace available (not root, user namespaces disabled)"
    );
    let scene = Scene::new();
    let secret = scene.outside("token");
    fs::write(&secret, "t0p-secret\n").unwrap();
    let script = format!(
        "base64 '{secret}'; echo end; \
         '{sandbox}' --policy read-only --hide '{secret}' -- cat '{secret}'; echo nested=$?",
        sandbox = scene.sandbox.display(),
        secret = secret.display()
    );
    let secret_flag = secret.to_str().unwrap();
    for policy in ["read-only", "workspace-write"] {
        scene
            .run_sh(&["--policy", policy, "--hide", secret_flag], &script)
            .success()
            .stdout_is("end\nnested=0\n");
    }
    assert_eq!(fs::read_to_string(&secret).unwrap(), "t0p-secret\n");
}

#[test]
fn a_file_that_cannot_be_hidden_stops_the_wrapper_with_125() {
    need_landlock!();
    // Inside danger-full-access nothing is hidden, and the outer seccomp
    // filter refuses the inner wrapper a mount namespace of its own.
    let scene = Scene::new();
    let secret = scene.outside("token");
    fs::write(&secret, "t0p-secret\n").unwrap();
    let script = format!(
        "'{sandbox}' --policy read-only --hide '{secret}' -- cat '{secret}'; echo strict=$?; \
         '{sandbox}' --policy read-only --best-effort --hide '{secret}' -- true; echo lenient=$?",
        sandbox = scene.sandbox.display(),
        secret = secret.display()
    );
    scene
        .run_sh(&["--policy", "danger-full-access"], &script)
        .success()
        .stdout_is("strict=125\nlenient=0\n")
        .stderr_contains(&format!("cannot cover {}", secret.display()))
        .stderr_contains("not enforced: hiding a secret");
}
