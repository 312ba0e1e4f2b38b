//! Files follow the policy of commands, at every door: spoken to over
//! loopback as the doors' clients speak, a write under a `read-only`
//! policy, a read where every raw command is refused, a path out of the
//! root, a zip bomb, an archive holding a link and a name with a line
//! break are all refused with nothing written; an upload is not held in
//! the server's memory; the SWE-ReX retry cache answers only the caller
//! and request it kept; a killed server's session directories are swept.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::sandboxd_rest::{Listening, run};
use crate::common::{ServerProcess, TestEnv, listening_addrs, serve_listening};

/// The key the SWE-ReX servers of this suite take.
const KEY: &str = "file-policy-key";
/// How long a server may take to listen.
const START_LIMIT: Duration = Duration::from_secs(30);

/// A SWE-ReX listener, killed when dropped.
struct Swerex {
    process: ServerProcess,
    base: String,
    http: reqwest::Client,
}

impl Swerex {
    /// `serve --listen swerex=127.0.0.1:0 --root WORK` with `extra` flags.
    async fn serve(env: &TestEnv, extra: &[&str]) -> Self {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let log = env.root.path().join(format!("swerex-{n}.log"));
        let child = serve_listening(env, &log, &["swerex=127.0.0.1:0".to_owned()], KEY)
            .args(extra)
            .env("TMPDIR", tmp_of(env))
            .spawn()
            .unwrap();
        let process = ServerProcess::new(child);
        let started = Instant::now();
        let addr = loop {
            if let Some(addr) = listening_addrs(&log).remove("swerex") {
                break addr;
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "swerex did not listen; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        Self::at(process, format!("http://{addr}"))
    }

    /// The `swerex-remote` personality (root `/`) on a free port.
    async fn remote(env: &TestEnv) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(env.link("swerex-remote"))
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--auth-token", KEY])
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", env.root.path().join("home"))
            .env("AGENT_REACH_HOME", env.ar_home())
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", tmp_of(env))
            .current_dir(env.work())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let process = ServerProcess::new(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < START_LIMIT,
                "swerex-remote did not listen"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self::at(process, format!("http://127.0.0.1:{port}"))
    }

    fn at(process: ServerProcess, base: String) -> Self {
        Self {
            process,
            base,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
        }
    }

    fn post(&self, route: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{route}", self.base))
            .header("X-API-Key", KEY)
    }

    /// POSTs JSON; the status and the answer.
    async fn json(&self, route: &str, body: Value) -> (StatusCode, Value) {
        let response = self.post(route).json(&body).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// `GET /is_alive`: whether it answers as alive.
    async fn alive(&self) -> bool {
        let answer: Value = self
            .http
            .get(format!("{}/is_alive", self.base))
            .header("X-API-Key", KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap_or(Value::Null);
        answer["is_alive"] == true
    }

    /// `/upload` of `bytes` to `target`, unzipped or not.
    async fn upload(&self, bytes: Vec<u8>, target: &Path, unzip: bool) -> (StatusCode, Value) {
        let form = reqwest::multipart::Form::new()
            .part(
                "file",
                reqwest::multipart::Part::bytes(bytes).file_name("upload.bin"),
            )
            .text("target_path", target.display().to_string())
            .text("unzip", if unzip { "true" } else { "false" });
        let response = self.post("/upload").multipart(form).send().await.unwrap();
        let status = response.status();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

/// The temporary directory the test's servers use (their session dirs).
fn tmp_of(env: &TestEnv) -> PathBuf {
    let tmp = env.root.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    tmp
}

/// A registry file outside the workspace.
fn config(env: &TestEnv, text: &str) -> String {
    let path = env.root.path().join("registry.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn class_of(answer: &Value) -> &str {
    answer["swerexception"]["class_path"].as_str().unwrap_or("")
}

/// Everything under `dir`, for a failure message.
fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in entries {
        writer
            .start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        writer.write_all(bytes).unwrap();
    }
    writer.finish().unwrap().into_inner()
}

const READ_ONLY: &str = "allow_raw_commands = true\n[sandbox]\ndefault = \"read-only\"\n";

#[test]
fn a_swerex_write_under_a_read_only_policy_is_refused_and_writes_nothing() {
    run(async {
        let env = TestEnv::new();
        env.write("kept.txt", "kept");
        let s = Swerex::serve(&env, &["--config", &config(&env, READ_ONLY)]).await;
        let (status, answer) = s
            .json(
                "/write_file",
                json!({"path": env.work().join("made.txt"), "content": "x"}),
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
        assert_eq!(answer["error"]["kind"], "denied_by_policy", "{answer}");
        let (status, answer) = s
            .upload(b"x".to_vec(), &env.work().join("up.txt"), false)
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
        assert_eq!(listing(&env.work()), ["kept.txt"]);
        let (status, read) = s
            .json("/read_file", json!({"path": env.work().join("kept.txt")}))
            .await;
        assert_eq!(
            (status, read["content"].as_str()),
            (StatusCode::OK, Some("kept"))
        );
    });
}

#[test]
fn serve_sandbox_read_only_refuses_writes_at_the_sandboxd_and_runtime_doors() {
    run(async {
        let s = Listening::start(&["--sandbox", "read-only"]).await;
        let put = s
            .with_token(
                reqwest::Method::PUT,
                format!("{}/v1/files/made.txt", s.rest),
            )
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), StatusCode::FORBIDDEN);
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(b"x".to_vec()).file_name("up.txt"),
        );
        let up = s
            .with_token(reqwest::Method::POST, format!("{}/upload", s.runtime))
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(up.status(), StatusCode::FORBIDDEN);
        assert!(!s.work("made.txt").exists() && !s.work("up.txt").exists());
    });
}

#[test]
fn a_read_is_refused_where_every_raw_command_is() {
    run(async {
        let env = TestEnv::new();
        env.write("secret.txt", "inside the root");
        // Above max_risk; and at the approval level, with no person to ask.
        for text in [
            "allow_raw_commands = true\nraw_commands_risk = \"high\"\nmax_risk = \"medium\"\n",
            "allow_raw_commands = true\nraw_commands_risk = \"high\"\n",
        ] {
            let s = Swerex::serve(&env, &["--config", &config(&env, text)]).await;
            for path in [env.work().join("secret.txt"), PathBuf::from("/etc/shadow")] {
                let (status, answer) = s.json("/read_file", json!({"path": path})).await;
                assert_eq!(
                    status,
                    StatusCode::FORBIDDEN,
                    "{text}{}: {answer}",
                    path.display()
                );
                assert!(answer.get("content").is_none(), "{answer}");
            }
            let (status, answer) = s.json("/execute", json!({"command": ["true"]})).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{text}{answer}");
        }
    });
}

#[test]
fn raw_commands_off_refuses_the_file_routes_of_sandboxd_and_the_runtime() {
    run(async {
        let env = TestEnv::new();
        env.write("data.txt", "d");
        let config = config(&env, "allow_raw_commands = false\n");
        let s = Listening::start_in(env, &["--config", &config], &[]).await;
        for url in [
            format!("{}/v1/files/data.txt", s.rest),
            format!("{}/download/data.txt", s.runtime),
            format!("{}/list/", s.runtime),
        ] {
            let r = s
                .with_token(reqwest::Method::GET, url.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{url}");
        }
    });
}

#[test]
fn swerex_paths_stay_under_the_root_whatever_comes_before_a_link() {
    run(async {
        let env = TestEnv::new();
        let outside = env.root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::os::unix::fs::symlink(&outside, env.work().join("up")).unwrap();
        let s = Swerex::serve(&env, &[]).await;
        let work = env.work().display().to_string();
        for path in [
            outside.join("secret").display().to_string(),
            format!("{work}/up/secret"),
            format!("{work}/nope/../up/secret"),
            "../outside/secret".to_owned(),
        ] {
            let (status, answer) = s.json("/read_file", json!({"path": path})).await;
            assert_eq!(status.as_u16(), 511, "{path}: {answer}");
            // `nope/..` fails where the kernel fails it: not found.
            assert!(
                ["builtins.PermissionError", "builtins.FileNotFoundError"]
                    .contains(&class_of(&answer)),
                "{path}: {answer}"
            );
            let (status, _) = s
                .json(
                    "/write_file",
                    json!({"path": format!("{path}-planted"), "content": "x"}),
                )
                .await;
            assert_eq!(status.as_u16(), 511, "{path}");
        }
        assert_eq!(listing(&outside), ["secret"]);
        // A command's working directory too: outside the root (named, or
        // through the link) it is the policy's to refuse, and nothing runs.
        for cwd in [outside.display().to_string(), format!("{work}/nope/../up")] {
            let (status, answer) = s
                .json(
                    "/execute",
                    json!({"command": ["sh", "-c", "pwd > planted"], "cwd": cwd}),
                )
                .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{cwd}: {answer}");
        }
        assert_eq!(listing(&outside), ["secret"]);
        // Inside, a relative path is taken from the root.
        let (status, _) = s
            .json("/write_file", json!({"path": "rel/x.txt", "content": "r"}))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(env.read("rel/x.txt"), "r");
    });
}

#[test]
fn a_zip_bomb_is_refused_and_leaves_nothing() {
    run(async {
        let env = TestEnv::new();
        let s = Swerex::serve(&env, &[]).await;
        // 40 MB of zeros in a 40 KB archive: a ratio of about 1000.
        let zeros = vec![0u8; 40 * 1024 * 1024];
        let bomb = zip_of(&[("ok.txt", b"fine"), ("zeros", &zeros)]);
        drop(zeros);
        assert!(bomb.len() < 1024 * 1024, "{}", bomb.len());
        let target = env.work().join("unzipped");
        let (status, answer) = s.upload(bomb, &target, true).await;
        assert_eq!(status.as_u16(), 511, "{answer}");
        let message = answer["swerexception"]["message"].as_str().unwrap_or("");
        assert!(message.contains("zip bomb"), "{message}");
        assert!(!target.exists(), "{:?}", listing(&env.work()));
        assert!(
            listing(&env.work()).is_empty(),
            "{:?}",
            listing(&env.work())
        );
    });
}

#[test]
fn a_zip_holding_a_symlink_entry_is_refused_and_leaves_nothing() {
    run(async {
        let env = TestEnv::new();
        let s = Swerex::serve(&env, &[]).await;
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default();
        writer.start_file("a.txt", options).unwrap();
        writer.write_all(b"A").unwrap();
        writer.add_symlink("up", "/etc", options).unwrap();
        let archive = writer.finish().unwrap().into_inner();
        let target = env.work().join("unzipped");
        let (status, answer) = s.upload(archive, &target, true).await;
        assert_eq!(status.as_u16(), 511, "{answer}");
        let message = answer["swerexception"]["message"].as_str().unwrap_or("");
        assert!(message.contains("symbolic link"), "{message}");
        assert!(
            listing(&env.work()).is_empty(),
            "{:?}",
            listing(&env.work())
        );
        // An ordinary archive still unzips.
        let (status, _) = s
            .upload(zip_of(&[("pkg/a.txt", b"A")]), &target, true)
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(env.read("unzipped/pkg/a.txt"), "A");
    });
}

#[test]
fn the_retry_cache_answers_only_the_same_request_again() {
    run(async {
        let env = TestEnv::new();
        env.write("secret.txt", "only for the reader");
        let s = Swerex::serve(&env, &[]).await;
        let read = json!({"path": env.work().join("secret.txt")});
        let send = |route: &'static str, body: Option<Value>| {
            let request = match body {
                Some(body) => s.post(route).json(&body),
                None => s
                    .http
                    .get(format!("{}{route}", s.base))
                    .header("X-API-Key", KEY),
            };
            request.header("X-Request-ID", "shared-id").send()
        };
        let first: Value = send("/read_file", Some(read.clone()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(first["content"], "only for the reader");
        let alive: Value = send("/is_alive", None).await.unwrap().json().await.unwrap();
        assert_eq!(alive, json!({"is_alive": true, "message": ""}));
        let other: Value = send("/read_file", Some(json!({"path": env.work().join("nope")})))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_ne!(other["content"], "only for the reader", "{other}");
    });
}

#[test]
fn file_names_with_a_line_break_are_refused_at_every_file_route() {
    run(async {
        let env = TestEnv::new();
        let s = Swerex::serve(&env, &[]).await;
        for name in ["a\nb.txt", "a\rb.txt"] {
            let path = env.work().join(name);
            let (status, answer) = s
                .json("/write_file", json!({"path": path, "content": "x"}))
                .await;
            assert_eq!(status.as_u16(), 511, "{name:?}: {answer}");
            assert_eq!(class_of(&answer), "builtins.ValueError", "{answer}");
            let (status, _) = s.upload(b"x".to_vec(), &path, false).await;
            assert_eq!(status.as_u16(), 511, "{name:?}");
        }
        let bad_entry = zip_of(&[("line\nbreak.txt", b"x")]);
        let (status, _) = s.upload(bad_entry, &env.work().join("z"), true).await;
        assert_eq!(status.as_u16(), 511);
        assert!(
            listing(&env.work()).is_empty(),
            "{:?}",
            listing(&env.work())
        );
        drop(s);

        let l = Listening::start(&[]).await;
        let put = l
            .with_token(reqwest::Method::PUT, format!("{}/v1/files/a%0Ab", l.rest))
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), StatusCode::BAD_REQUEST);
        for route in ["download", "exists", "list"] {
            let r = l
                .with_token(reqwest::Method::GET, format!("{}/{route}/a%0Db", l.runtime))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{route}");
        }
        assert!(listing(&l.env.work()).is_empty());
    });
}

/// The peak resident memory of `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kb * 1024
}

#[test]
fn a_big_upload_is_spooled_to_disk_not_held_in_memory() {
    const SIZE: usize = 200 * 1024 * 1024;
    run(async {
        let env = TestEnv::new();
        let s = Swerex::remote(&env).await;
        let pid = s.process.pid();
        assert!(s.alive().await);
        let before = peak_rss(pid);
        let target = env.work().join("big.bin");
        let (status, answer) = s.upload(vec![7u8; SIZE], &target, false).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(std::fs::metadata(&target).unwrap().len(), SIZE as u64);
        let grown = peak_rss(pid).saturating_sub(before);
        assert!(
            grown < (SIZE / 4) as u64,
            "the server's peak memory grew by {grown} bytes for a {SIZE}-byte upload"
        );
    });
}

#[test]
fn a_killed_servers_session_directories_are_swept_at_the_next_start() {
    run(async {
        let env = TestEnv::new();
        // Session directories live in the state directory, out of every
        // command's reach.
        let tmp = env.ar_home().join("run/scratch");
        let s = Swerex::remote(&env).await;
        let (status, answer) = s
            .json("/create_session", json!({"session_type": "bash"}))
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let left = listing(&tmp);
        assert!(
            left.iter().any(|n| n.starts_with("agent-reach-swerex-")),
            "{left:?}"
        );
        // SAFETY: a signal to the server this test started.
        unsafe { libc::kill(s.process.pid() as i32, libc::SIGKILL) };
        drop(s);
        let again = Swerex::remote(&env).await;
        assert!(again.alive().await);
        let left: Vec<String> = listing(&tmp)
            .into_iter()
            .filter(|n| n.starts_with("agent-reach-swerex-") && !n.contains('/'))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

#[test]
fn a_file_route_reaches_the_policys_writable_roots_and_nothing_else() {
    run(async {
        let env = TestEnv::new();
        let cache = env.root.path().join("cache");
        let elsewhere = env.root.path().join("elsewhere");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let registry = config(
            &env,
            &format!(
                "allow_raw_commands = true\n[sandbox]\ndefault = \"workspace-write\"\nwritable_roots = [{:?}]\n",
                cache.display().to_string()
            ),
        );
        let s = Swerex::serve(&env, &["--config", &registry]).await;
        let (status, answer) = s
            .json(
                "/write_file",
                json!({"path": cache.join("sub/made.txt"), "content": "cached"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(
            std::fs::read_to_string(cache.join("sub/made.txt")).unwrap(),
            "cached"
        );
        let (status, read) = s
            .json("/read_file", json!({"path": cache.join("sub/made.txt")}))
            .await;
        assert_eq!(
            (status, read["content"].as_str()),
            (StatusCode::OK, Some("cached")),
            "{read}"
        );
        // A link in the writable root leading out is still refused.
        std::os::unix::fs::symlink(&elsewhere, cache.join("out")).unwrap();
        let (status, answer) = s
            .json(
                "/write_file",
                json!({"path": cache.join("out/escaped.txt"), "content": "x"}),
            )
            .await;
        assert_ne!(status, StatusCode::OK, "{answer}");
        let (status, answer) = s
            .json(
                "/write_file",
                json!({"path": elsewhere.join("made.txt"), "content": "x"}),
            )
            .await;
        assert_ne!(status, StatusCode::OK, "{answer}");
        assert!(listing(&elsewhere).is_empty(), "{:?}", listing(&elsewhere));
    });
}
