//! `serve --listen envd=ADDR`: E2B's envd spoken to over loopback with raw
//! HTTP and Connect requests (E2B's own Python SDK drives it in
//! tests/envd/run.sh): the health check without a token and everything
//! else refused without it, a `Start` stream's events, the binary codec,
//! the timeout killing the tree as `deadline_exceeded`, the files routes
//! and RPCs, a path outside the root refused, an unknown process not found;
//! directory watchers, streamed (`WatchDir`) and polled, the ones outside
//! the root refused and the number a caller holds bounded.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ServerProcess, TestEnv, gone_within, serve_listening};
use crate::suite::sandboxd_rest::run;

const TOKEN: &str = "envd-t0ken";
const START_LIMIT: Duration = Duration::from_secs(20);

/// A `serve` process with an `envd` listener; killed and reaped on drop.
struct Envd {
    _process: ServerProcess,
    env: TestEnv,
    base: String,
    http: reqwest::Client,
    _known: agent_reach::exec::KnownChildGuard,
}

impl Envd {
    async fn start() -> Self {
        Self::start_with(None).await
    }

    /// With the registry `registry` (written outside the workspace).
    async fn start_with(registry: Option<&str>) -> Self {
        let env = TestEnv::new();
        let mut extra = Vec::new();
        if let Some(text) = registry {
            let config = env.root.path().join("registry.toml");
            std::fs::write(&config, text).unwrap();
            extra = vec!["--config".to_owned(), config.display().to_string()];
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let log = env.root.path().join("serve.log");
        let child = serve_listening(&env, &log, &[format!("envd=127.0.0.1:{port}")], TOKEN)
            .args(&extra)
            .spawn()
            .unwrap();
        let known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
        let envd = Self {
            _process: ServerProcess::new(child),
            env,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            _known: known,
        };
        let started = Instant::now();
        while !matches!(envd.http.get(envd.url("/health")).send().await, Ok(r) if r.status() == StatusCode::NO_CONTENT)
        {
            assert!(
                started.elapsed() < START_LIMIT,
                "envd never answered /health"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        envd
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The workspace's absolute path of `rel`, as E2B programs name it.
    fn path(&self, rel: &str) -> PathBuf {
        self.env.work().canonicalize().unwrap().join(rel)
    }

    /// A unary Connect call in JSON: the status and the body.
    async fn unary(&self, method: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.url(&format!("/{method}")))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// A server-stream Connect call in JSON: its messages, then its end.
    async fn stream(
        &self,
        method: &str,
        body: Value,
        timeout_ms: Option<u64>,
    ) -> (Vec<Value>, Value) {
        let mut request = self
            .http
            .post(self.url(&format!("/{method}")))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/connect+json")
            .body(envelope(0, body.to_string().as_bytes()));
        if let Some(ms) = timeout_ms {
            request = request.header("connect-timeout-ms", ms.to_string());
        }
        let r = request.send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-type"], "application/connect+json");
        let frames = frames(&r.bytes().await.unwrap());
        let (last_flags, last) = frames.last().cloned().expect("an end frame");
        assert_eq!(last_flags, 2, "the stream ends with its end frame");
        let messages = frames[..frames.len() - 1]
            .iter()
            .map(|(_, m)| serde_json::from_slice(m).unwrap())
            .collect();
        (messages, serde_json::from_slice(&last).unwrap())
    }
}

fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![flags];
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

fn frames(mut body: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while body.len() >= 5 {
        let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
        out.push((body[0], body[5..5 + len].to_vec()));
        body = &body[5 + len..];
    }
    out
}

fn decoded(b64: &Value) -> String {
    String::from_utf8(crate::common::base64_decode(b64.as_str().unwrap())).unwrap()
}

fn bash(script: &str) -> Value {
    json!({"process": {"cmd": "/bin/bash", "args": ["-c", script]}})
}

#[test]
fn the_health_check_needs_no_token_and_every_other_route_does() {
    run(async {
        let envd = Envd::start().await;
        let r = envd.http.get(envd.url("/health")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::NO_CONTENT);
        let r = envd
            .http
            .post(envd.url("/process.Process/List"))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["code"], "unauthenticated");
        let r = envd
            .http
            .get(envd.url("/files?path=x"))
            .header("x-access-token", "wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    });
}

#[test]
fn a_start_stream_carries_the_pid_the_output_and_the_exit() {
    run(async {
        let envd = Envd::start().await;
        let (messages, end) = envd
            .stream(
                "process.Process/Start",
                bash("echo out; echo err >&2; exit 3"),
                None,
            )
            .await;
        assert_eq!(end, json!({}));
        let events: Vec<&Value> = messages.iter().map(|m| &m["event"]).collect();
        assert!(
            events[0]["start"]["pid"].as_u64().unwrap() > 0,
            "{events:?}"
        );
        let stdout: String = events
            .iter()
            .filter(|e| e["data"]["stdout"].is_string())
            .map(|e| decoded(&e["data"]["stdout"]))
            .collect();
        let stderr: String = events
            .iter()
            .filter(|e| e["data"]["stderr"].is_string())
            .map(|e| decoded(&e["data"]["stderr"]))
            .collect();
        assert_eq!((stdout.as_str(), stderr.as_str()), ("out\n", "err\n"));
        let last = events.last().unwrap();
        assert_eq!(last["end"]["exitCode"], 3);
        assert_eq!(last["end"]["status"], "exit status 3");
    });
}

#[test]
fn the_timeout_kills_the_tree_and_ends_the_stream_with_deadline_exceeded() {
    run(async {
        let envd = Envd::start().await;
        let pid_file = envd.path("child.pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
        let started = Instant::now();
        let (_, end) = envd
            .stream("process.Process/Start", bash(&script), Some(3000))
            .await;
        assert_eq!(end["error"]["code"], "deadline_exceeded", "{end}");
        assert!(started.elapsed() < Duration::from_secs(20));
        let child: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            gone_within(child, Duration::from_secs(5)),
            "the background child {child} survived"
        );
        let (status, list) = envd.unary("process.Process/List", json!({})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list, json!({}), "the killed process is no longer listed");
    });
}

#[test]
fn an_unknown_process_is_not_found_in_connects_error_shape() {
    run(async {
        let envd = Envd::start().await;
        let (status, body) = envd
            .unary(
                "process.Process/SendSignal",
                json!({"process": {"pid": 999_999}, "signal": "SIGNAL_SIGKILL"}),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["code"], "not_found");
        let (_, end) = envd
            .stream(
                "process.Process/Connect",
                json!({"process": {"pid": 999_999}}),
                None,
            )
            .await;
        assert_eq!(end["error"]["code"], "not_found");
    });
}

#[test]
fn the_binary_codec_answers_in_protobuf() {
    run(async {
        let envd = Envd::start().await;
        let r = envd
            .http
            .post(envd.url("/process.Process/List"))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/proto")
            .body(Vec::new())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()["content-type"], "application/proto");
        assert!(
            r.bytes().await.unwrap().is_empty(),
            "an empty ListResponse is no bytes"
        );
    });
}

#[test]
fn files_go_up_and_down_and_the_filesystem_rpcs_see_them() {
    run(async {
        let envd = Envd::start().await;
        let file = envd.path("sub/dir/data.bin");
        let bytes: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        let r = envd
            .http
            .post(envd.url(&format!("/files?path={}", file.display())))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/octet-stream")
            .body(bytes.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let written: Value = r.json().await.unwrap();
        assert_eq!(written[0]["path"], file.display().to_string());
        let r = envd
            .http
            .get(envd.url(&format!("/files?path={}", file.display())))
            .header("x-access-token", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.bytes().await.unwrap().to_vec(), bytes);

        let (status, listed) = envd
            .unary(
                "filesystem.Filesystem/ListDir",
                json!({"path": envd.path("sub").display().to_string(), "depth": 2}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let names: Vec<&str> = listed["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dir", "data.bin"]);
        let (_, stat) = envd
            .unary(
                "filesystem.Filesystem/Stat",
                json!({"path": file.display().to_string()}),
            )
            .await;
        assert_eq!(stat["entry"]["size"], "300000");
        assert_eq!(stat["entry"]["type"], "FILE_TYPE_FILE");
        let moved = envd.path("moved.bin");
        let (status, _) = envd
            .unary(
                "filesystem.Filesystem/Move",
                json!({"source": file.display().to_string(), "destination": moved.display().to_string()}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert!(moved.exists() && !file.exists());
        let (status, _) = envd
            .unary(
                "filesystem.Filesystem/MakeDir",
                json!({"path": envd.path("sub").display().to_string()}),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::CONFLICT,
            "an existing directory is already_exists"
        );
        let (status, _) = envd
            .unary(
                "filesystem.Filesystem/Remove",
                json!({"path": envd.path("sub").display().to_string()}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert!(!envd.path("sub").exists());
    });
}

#[test]
fn a_path_outside_the_root_is_refused_by_every_file_route() {
    run(async {
        let envd = Envd::start().await;
        let r = envd
            .http
            .get(envd.url("/files?path=/etc/passwd"))
            .header("x-access-token", TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let (status, body) = envd
            .unary("filesystem.Filesystem/Stat", json!({"path": "/etc"}))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(body["code"], "permission_denied");
        let (status, _) = envd
            .unary("filesystem.Filesystem/ListDir", json!({"path": "../.."}))
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (_, end) = envd
            .stream(
                "process.Process/Start",
                json!({"process": {"cmd": "/bin/true", "cwd": "/etc"}}),
                None,
            )
            .await;
        assert_eq!(end["error"]["code"], "permission_denied");
    });
}

#[test]
fn stream_input_reaches_a_running_process_in_order() {
    run(async {
        let envd = Envd::start().await;
        let mut start = envd
            .http
            .post(envd.url("/process.Process/Start"))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/connect+json")
            .body(envelope(
                0,
                bash("read a; read b; echo got:$a$b").to_string().as_bytes(),
            ))
            .send()
            .await
            .unwrap();
        let mut seen = Vec::new();
        while frames(&seen).is_empty() {
            seen.extend_from_slice(&start.chunk().await.unwrap().unwrap());
        }
        let first: Value = serde_json::from_slice(&frames(&seen)[0].1).unwrap();
        let pid = first["event"]["start"]["pid"].as_u64().unwrap();
        let mut input = envelope(
            0,
            json!({"start": {"process": {"pid": pid}}})
                .to_string()
                .as_bytes(),
        );
        // "x\n" and "y\n", base64.
        input.extend(envelope(
            0,
            json!({"data": {"input": {"stdin": "eAo="}}})
                .to_string()
                .as_bytes(),
        ));
        input.extend(envelope(
            0,
            json!({"data": {"input": {"stdin": "eQo="}}})
                .to_string()
                .as_bytes(),
        ));
        let r = envd
            .http
            .post(envd.url("/process.Process/StreamInput"))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/connect+json")
            .body(input)
            .send()
            .await
            .unwrap();
        let answer = frames(&r.bytes().await.unwrap());
        assert_eq!(answer.last().unwrap().1, b"{}", "StreamInput ends cleanly");
        while let Some(chunk) = start.chunk().await.unwrap() {
            seen.extend_from_slice(&chunk);
        }
        let stdout: String = frames(&seen)
            .iter()
            .filter(|(flags, _)| *flags == 0)
            .map(|(_, m)| serde_json::from_slice::<Value>(m).unwrap())
            .filter(|m| m["event"]["data"]["stdout"].is_string())
            .map(|m| decoded(&m["event"]["data"]["stdout"]))
            .collect();
        assert_eq!(stdout, "got:xy\n");
    });
}

#[test]
fn what_a_command_leaves_in_the_background_lives_on_listed_until_it_is_killed() {
    run(async {
        let envd = Envd::start().await;
        let pid_file = envd.path("server.pid");
        let script = format!(
            "sleep 60 > /dev/null 2>&1 & echo $! > {}",
            pid_file.display()
        );
        let started = Instant::now();
        let (messages, end) = envd
            .stream("process.Process/Start", bash(&script), None)
            .await;
        assert_eq!(end, json!({}));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the stream waited for the background"
        );
        let events: Vec<&Value> = messages.iter().map(|m| &m["event"]).collect();
        assert_eq!(events.last().unwrap()["end"]["exited"], true, "{events:?}");
        let pid = events[0]["start"]["pid"].as_u64().unwrap();
        let child: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            std::path::Path::new(&format!("/proc/{child}")).exists(),
            "the background server {child} was killed with its command"
        );
        let (status, list) = envd.unary("process.Process/List", json!({})).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["processes"][0]["pid"], pid, "{list}");
        let (status, body) = envd
            .unary(
                "process.Process/SendSignal",
                json!({"process": {"pid": pid}, "signal": "SIGNAL_SIGKILL"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert!(
            gone_within(child, Duration::from_secs(5)),
            "the background server {child} survived its kill"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let (_, list) = envd.unary("process.Process/List", json!({})).await;
            if list == json!({}) {
                break;
            }
            assert!(Instant::now() < deadline, "still listed: {list}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn a_live_process_holds_a_slot_of_the_scheduler_while_it_runs() {
    run(async {
        let envd =
            Envd::start_with(Some("allow_raw_commands = true\n[scheduler]\nglobal = 1\n")).await;
        let first = envd.stream("process.Process/Start", bash("sleep 2; echo first"), None);
        let second = async {
            // Asked once the first holds the only slot.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let asked = Instant::now();
            let (messages, _) = envd
                .stream("process.Process/Start", bash("echo second"), None)
                .await;
            (asked.elapsed(), messages)
        };
        let ((first, _), (waited, second)) = tokio::join!(first, second);
        let ended = |messages: &[Value]| messages.iter().any(|m| m["event"]["end"].is_object());
        assert!(ended(&first) && ended(&second), "{first:?} {second:?}");
        assert!(
            waited >= Duration::from_millis(1000),
            "the second process started at once ({waited:?}) while the first held the only slot"
        );
    });
}

/// The `FilesystemEvent`s among a watch stream's `frames`, as `(type, name)`.
fn watch_events(frames: &[(u8, Vec<u8>)]) -> Vec<(String, String)> {
    frames
        .iter()
        .filter(|(flags, _)| *flags == 0)
        .map(|(_, m)| serde_json::from_slice::<Value>(m).unwrap())
        .filter_map(|m| {
            let event = &m["filesystem"];
            Some((
                event["type"].as_str()?.to_owned(),
                event["name"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

fn event(kind: &str, name: &str) -> (String, String) {
    (format!("EVENT_TYPE_{kind}"), name.to_owned())
}

#[test]
fn a_watch_stream_tells_what_happens_beneath_the_directory_named_relative_to_it() {
    run(async {
        let envd = Envd::start().await;
        std::fs::create_dir_all(envd.path("w/sub")).unwrap();
        let request = json!({"path": envd.path("w"), "recursive": true});
        let mut watch = envd
            .http
            .post(envd.url("/filesystem.Filesystem/WatchDir"))
            .header("x-access-token", TOKEN)
            .header("content-type", "application/connect+json")
            .header("connect-timeout-ms", "4000")
            .body(envelope(0, request.to_string().as_bytes()))
            .send()
            .await
            .unwrap();
        assert_eq!(watch.status(), StatusCode::OK);
        let mut seen = Vec::new();
        while frames(&seen).is_empty() {
            seen.extend_from_slice(&watch.chunk().await.unwrap().unwrap());
        }
        let first: Value = serde_json::from_slice(&frames(&seen)[0].1).unwrap();
        assert_eq!(first, json!({"start": {}}), "the watch starts first");
        std::fs::write(envd.path("w/a.txt"), "one").unwrap();
        std::fs::write(envd.path("w/sub/b.txt"), "two").unwrap();
        std::fs::remove_file(envd.path("w/a.txt")).unwrap();
        std::fs::write(envd.path("outside-the-watch.txt"), "x").unwrap();
        while let Some(chunk) = watch.chunk().await.unwrap() {
            seen.extend_from_slice(&chunk);
        }
        let all = frames(&seen);
        let events = watch_events(&all);
        for want in [
            event("CREATE", "a.txt"),
            event("WRITE", "a.txt"),
            event("CREATE", "sub/b.txt"),
            event("REMOVE", "a.txt"),
        ] {
            assert!(events.contains(&want), "{want:?} not in {events:?}");
        }
        assert!(
            !events.iter().any(|(_, name)| name.contains("outside")),
            "{events:?}"
        );
        let (flags, end) = all.last().unwrap();
        assert_eq!(*flags, 2);
        let end: Value = serde_json::from_slice(end).unwrap();
        assert_eq!(end["error"]["code"], "deadline_exceeded", "{end}");
    });
}

#[test]
fn a_polled_watcher_collects_events_between_polls_until_it_is_removed() {
    run(async {
        let envd = Envd::start().await;
        std::fs::create_dir_all(envd.path("polled/sub")).unwrap();
        let (status, created) = envd
            .unary(
                "filesystem.Filesystem/CreateWatcher",
                json!({"path": envd.path("polled"), "includeEntry": true}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{created}");
        let id = created["watcherId"].as_str().unwrap().to_owned();
        std::fs::write(envd.path("polled/f.txt"), "hello").unwrap();
        std::fs::write(envd.path("polled/sub/not-recursive.txt"), "x").unwrap();
        let mut events: Vec<Value> = Vec::new();
        let seen = |events: &[Value], kind: &str| {
            events
                .iter()
                .any(|e| e["type"] == kind && e["name"] == "f.txt")
        };
        // The entry of a creation is the file as the watcher finds it: it
        // stays until the creation was seen, then goes.
        let mut removed_file = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !seen(&events, "EVENT_TYPE_REMOVE") {
            assert!(Instant::now() < deadline, "no removal among {events:?}");
            if !removed_file && seen(&events, "EVENT_TYPE_CREATE") {
                std::fs::remove_file(envd.path("polled/f.txt")).unwrap();
                removed_file = true;
            }
            let (status, got) = envd
                .unary(
                    "filesystem.Filesystem/GetWatcherEvents",
                    json!({"watcherId": id}),
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{got}");
            events.extend(got["events"].as_array().cloned().unwrap_or_default());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let create = events
            .iter()
            .find(|e| e["type"] == "EVENT_TYPE_CREATE" && e["name"] == "f.txt")
            .unwrap_or_else(|| panic!("no creation among {events:?}"));
        assert_eq!(
            create["entry"]["path"],
            envd.path("polled/f.txt").to_str().unwrap(),
            "include_entry gives the entry: {create}"
        );
        assert!(
            !events.iter().any(|e| e["name"] == "sub/not-recursive.txt"),
            "a plain watcher saw beneath its directory: {events:?}"
        );
        let (status, body) = envd
            .unary(
                "filesystem.Filesystem/RemoveWatcher",
                json!({"watcherId": id}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (status, body) = envd
            .unary(
                "filesystem.Filesystem/GetWatcherEvents",
                json!({"watcherId": id}),
            )
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
        assert_eq!(body["code"], "not_found");
    });
}

#[test]
fn a_watch_outside_the_root_on_a_missing_directory_or_on_a_file_is_refused() {
    run(async {
        let envd = Envd::start().await;
        std::fs::write(envd.path("plain.txt"), "x").unwrap();
        for (path, status, code) in [
            (
                "/etc".to_owned(),
                StatusCode::FORBIDDEN,
                "permission_denied",
            ),
            (
                envd.path("../").to_string_lossy().into_owned(),
                StatusCode::FORBIDDEN,
                "permission_denied",
            ),
            (
                envd.path("missing").to_string_lossy().into_owned(),
                StatusCode::NOT_FOUND,
                "not_found",
            ),
            (
                envd.path("plain.txt").to_string_lossy().into_owned(),
                StatusCode::BAD_REQUEST,
                "invalid_argument",
            ),
        ] {
            let (got, body) = envd
                .unary("filesystem.Filesystem/CreateWatcher", json!({"path": path}))
                .await;
            assert_eq!(
                (got, body["code"].as_str()),
                (status, Some(code)),
                "{path}: {body}"
            );
        }
        let (messages, end) = envd
            .stream(
                "filesystem.Filesystem/WatchDir",
                json!({"path": "/etc"}),
                None,
            )
            .await;
        assert!(messages.is_empty(), "{messages:?}");
        assert_eq!(end["error"]["code"], "permission_denied", "{end}");
    });
}

#[test]
fn a_caller_holds_a_bounded_number_of_watchers() {
    run(async {
        let envd = Envd::start().await;
        let dir = envd.path("");
        let mut ids = Vec::new();
        loop {
            let (status, body) = envd
                .unary("filesystem.Filesystem/CreateWatcher", json!({"path": dir}))
                .await;
            if status != StatusCode::OK {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
                assert_eq!(body["code"], "resource_exhausted");
                break;
            }
            ids.push(body["watcherId"].as_str().unwrap().to_owned());
            assert!(ids.len() <= 1000, "no cap on watchers");
        }
        assert!(!ids.is_empty());
        let (status, _) = envd
            .unary(
                "filesystem.Filesystem/RemoveWatcher",
                json!({"watcherId": ids[0]}),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let (status, body) = envd
            .unary("filesystem.Filesystem/CreateWatcher", json!({"path": dir}))
            .await;
        assert_eq!(
            status,
            StatusCode::OK,
            "a removed watcher frees its seat: {body}"
        );
    });
}
