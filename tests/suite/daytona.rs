//! `serve --listen daytona=ADDR`: Daytona's toolbox and the control-plane
//! routes its SDK reads, spoken to over loopback with raw HTTP (Daytona's
//! own Python SDK drives it in tests/daytona/run.sh): the sandbox record
//! pointing back at the listener, other ids 404, the bearer token, a
//! command's combined output and exit code, the timeout as 408 with the
//! tree killed, files confined beneath the root, bulk download as
//! multipart, sessions keeping state, a followed log over a WebSocket, and
//! a PTY's WebSocket (connected, input, exit code in the close frame).

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ServerProcess, TestEnv, gone_within, is_alive, serve_listening};
use crate::suite::sandboxd_rest::run;

const TOKEN: &str = "daytona-t0ken";
const SANDBOX: &str = "agent-reach";
const START_LIMIT: Duration = Duration::from_secs(20);

/// A `serve` process with a `daytona` listener; killed and reaped on drop.
struct Daytona {
    process: ServerProcess,
    env: TestEnv,
    port: u16,
    http: reqwest::Client,
    _known: agent_reach::exec::KnownChildGuard,
}

impl Daytona {
    async fn start() -> Self {
        let env = TestEnv::new();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let log = env.root.path().join("serve.log");
        let child = serve_listening(&env, &log, &[format!("daytona=127.0.0.1:{port}")], TOKEN)
            .spawn()
            .unwrap();
        let known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
        let daytona = Self {
            process: ServerProcess::new(child),
            env,
            port,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            _known: known,
        };
        let started = Instant::now();
        while !matches!(
            daytona.get("/api/sandbox/agent-reach").await,
            (StatusCode::OK, _)
        ) {
            assert!(started.elapsed() < START_LIMIT, "daytona never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        daytona
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn toolbox(&self, path: &str) -> String {
        self.url(&format!("/toolbox/{SANDBOX}{path}"))
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        match self
            .http
            .get(self.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
        {
            Ok(r) => (r.status(), r.json().await.unwrap_or(Value::Null)),
            Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Value::Null),
        }
    }

    /// A JSON call of the toolbox: the status and the body.
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, self.toolbox(path))
            .bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let r = request.send().await.unwrap();
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    async fn execute(&self, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, "/process/execute", Some(body))
            .await
    }
}

#[test]
fn the_sandbox_record_points_the_sdk_back_at_this_listener_and_other_ids_are_not_found() {
    run(async {
        let d = Daytona::start().await;
        let (status, record) = d.get("/api/sandbox/agent-reach").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(record["state"], "started");
        assert_eq!(record["id"], SANDBOX);
        assert_eq!(
            record["toolboxProxyUrl"],
            format!("http://127.0.0.1:{}/toolbox", d.port)
        );
        for field in [
            "organizationId",
            "user",
            "env",
            "labels",
            "cpu",
            "memory",
            "disk",
            "target",
        ] {
            assert!(!record[field].is_null(), "{field} missing: {record}");
        }
        let (status, page) = d.get("/api/sandbox").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(page["items"][0]["id"], SANDBOX);
        let (status, err) = d.get("/api/sandbox/someone-else").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(err["statusCode"], 404);
        let r = d
            .http
            .post(d.url("/toolbox/someone-else/process/execute"))
            .bearer_auth(TOKEN)
            .json(&json!({"command": "true"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
    });
}

#[test]
fn every_route_needs_the_api_key_as_a_bearer_token() {
    run(async {
        let d = Daytona::start().await;
        let r = d
            .http
            .get(d.url("/api/sandbox/agent-reach"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let r = d
            .http
            .post(d.toolbox("/process/execute"))
            .bearer_auth("wrong")
            .json(&json!({"command": "true"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["statusCode"], 401, "{body}");
    });
}

#[test]
fn execute_answers_stdout_and_stderr_together_with_the_exit_code_cwd_and_env() {
    run(async {
        let d = Daytona::start().await;
        std::fs::create_dir_all(d.env.work().join("sub")).unwrap();
        let (status, body) = d
            .execute(json!({"command": "echo out; echo err >&2; exit 3"}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body, json!({"exitCode": 3, "result": "out\nerr\n"}));
        let (_, body) = d
            .execute(
                json!({"command": "pwd; echo $GREETING", "cwd": "sub", "envs": {"GREETING": "hi"}}),
            )
            .await;
        let root = d.env.work().canonicalize().unwrap();
        assert_eq!(
            body["result"],
            format!("{}\nhi\n", root.join("sub").display())
        );
        let (_, body) = d.execute(json!({"command": "pwd"})).await;
        assert_eq!(body["result"], format!("{}\n", root.display()));
        let (status, _) = d.execute(json!({"command": "pwd", "cwd": "/etc"})).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
    });
}

#[test]
fn a_timeout_is_http_408_and_the_whole_tree_is_gone() {
    run(async {
        let d = Daytona::start().await;
        let pid_file = d.env.work().join("child.pid");
        let script = format!(
            "setsid sleep 300 & echo $! > {}; sleep 60",
            pid_file.display()
        );
        let started = Instant::now();
        let (status, body) = d.execute(json!({"command": script, "timeout": 1})).await;
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{body}");
        assert_eq!(body["statusCode"], 408);
        assert!(started.elapsed() < Duration::from_secs(20));
        let child: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            gone_within(child, Duration::from_secs(5)),
            "the setsid child {child} outlived the timeout"
        );
    });
}

#[test]
fn what_a_command_leaves_in_the_background_lives_on_until_the_server_stops() {
    run(async {
        let mut d = Daytona::start().await;
        let (status, body) = d
            .execute(json!({"command": "sleep 300 >/dev/null 2>&1 & echo $!"}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let child: i32 = body["result"].as_str().unwrap().trim().parse().unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            is_alive(child),
            "the background server {child} did not live on"
        );
        d.process.stop();
        assert!(
            gone_within(child, Duration::from_secs(10)),
            "the background {child} outlived the server"
        );
    });
}

#[test]
fn code_run_runs_python_and_answers_daytonas_shape() {
    run(async {
        let d = Daytona::start().await;
        let (status, body) = d
            .call(
                reqwest::Method::POST,
                "/process/code-run",
                Some(
                    json!({"code": "import sys; print(40 + 2); sys.exit(1)", "language": "python"}),
                ),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["result"], "42\n");
        assert_eq!(body["exitCode"], 1);
        assert_eq!(body["artifacts"]["charts"], json!([]));
    });
}

#[test]
fn files_are_uploaded_listed_downloaded_in_bulk_and_kept_beneath_the_root() {
    run(async {
        let d = Daytona::start().await;
        let form = reqwest::multipart::Form::new()
            .text("files[0].path", "docs/a.txt")
            .part(
                "files[0].file",
                reqwest::multipart::Part::bytes(b"alpha".to_vec()).file_name("docs/a.txt"),
            )
            .text("files[1].path", "docs/b.txt")
            .part(
                "files[1].file",
                reqwest::multipart::Part::bytes(b"beta".to_vec()).file_name("docs/b.txt"),
            );
        let r = d
            .http
            .post(d.toolbox("/files/bulk-upload"))
            .bearer_auth(TOKEN)
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(d.env.read("docs/a.txt"), "alpha");
        let (status, list) = d.call(reqwest::Method::GET, "/files?path=docs", None).await;
        assert_eq!(status, StatusCode::OK);
        let names: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a.txt", "b.txt"]);
        assert_eq!(list[0]["permissions"], "0644");
        assert_eq!(list[0]["isDir"], false);
        let r = d
            .http
            .post(d.toolbox("/files/bulk-download"))
            .bearer_auth(TOKEN)
            .json(&json!({"paths": ["docs/a.txt", "docs/missing.txt"]}))
            .send()
            .await
            .unwrap();
        let kind = r.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(kind.starts_with("multipart/form-data; boundary="), "{kind}");
        let text = r.text().await.unwrap();
        assert!(
            text.contains("name=\"file\"; filename=\"docs/a.txt\""),
            "{text}"
        );
        assert!(text.contains("\r\n\r\nalpha\r\n"), "{text}");
        assert!(
            text.contains("name=\"error\"; filename=\"docs/missing.txt\""),
            "{text}"
        );
        assert!(text.contains("\"statusCode\":404"), "{text}");
        let r = d
            .http
            .get(d.toolbox("/files/download?path=/etc/passwd"))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        let (status, found) = d
            .call(
                reqwest::Method::GET,
                "/files/find?path=docs&pattern=lph",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(found[0]["line"], 1);
        assert_eq!(found[0]["content"], "alpha");
        let (status, _) = d
            .call(reqwest::Method::DELETE, "/files?path=docs", None)
            .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "a directory needs recursive"
        );
        let (status, _) = d
            .call(
                reqwest::Method::DELETE,
                "/files?path=docs&recursive=true",
                None,
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert!(!d.env.work().join("docs").exists());
    });
}

#[test]
fn a_session_keeps_its_directory_and_variables_between_commands() {
    run(async {
        let d = Daytona::start().await;
        std::fs::create_dir_all(d.env.work().join("inner")).unwrap();
        let (status, _) = d
            .call(
                reqwest::Method::POST,
                "/process/session",
                Some(json!({"sessionId": "s1"})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
        let exec = |command: &str| {
            d.call(
                reqwest::Method::POST,
                "/process/session/s1/exec",
                Some(json!({"command": command})),
            )
        };
        let (status, _) = exec("cd inner; export MARK=kept").await;
        assert_eq!(status, StatusCode::OK);
        let (_, body) = exec("basename \"$PWD\"; echo $MARK; echo warn >&2; false").await;
        assert_eq!(body["stdout"], "inner\nkept\n", "{body}");
        assert_eq!(body["stderr"], "warn\n");
        assert_eq!(body["exitCode"], 1);
        let (_, session) = d
            .call(reqwest::Method::GET, "/process/session/s1", None)
            .await;
        assert_eq!(session["commands"].as_array().unwrap().len(), 2);
        let (status, _) = d
            .call(reqwest::Method::DELETE, "/process/session/s1", None)
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        let (status, _) = d
            .call(reqwest::Method::GET, "/process/session/s1", None)
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    });
}

#[test]
fn an_async_commands_log_is_followed_over_a_websocket_until_it_ends() {
    run(async {
        let d = Daytona::start().await;
        d.call(
            reqwest::Method::POST,
            "/process/session",
            Some(json!({"sessionId": "s2"})),
        )
        .await;
        let (status, body) = d
            .call(
                reqwest::Method::POST,
                "/process/session/s2/exec",
                Some(json!({"command": "echo one; sleep 0.3; echo two >&2", "runAsync": true})),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED);
        let id = body["cmdId"].as_str().unwrap().to_owned();
        let url = format!(
            "ws://127.0.0.1:{}/toolbox/{SANDBOX}/process/session/s2/command/{id}/logs?follow=true",
            d.port
        );
        let mut request =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
                .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        let mut frames = Vec::new();
        let mut close = None;
        while let Some(message) = socket.next().await {
            match message.unwrap() {
                tokio_tungstenite::tungstenite::Message::Text(text) => {
                    frames.push(text.to_string())
                }
                tokio_tungstenite::tungstenite::Message::Close(frame) => {
                    close = frame.map(|f| u16::from(f.code));
                    break;
                }
                _ => {}
            }
        }
        assert_eq!(frames, ["\x01\x01\x01one\n", "\x02\x02\x02two\n"]);
        assert_eq!(close, Some(1000));
    });
}

#[test]
fn a_pty_says_connected_takes_input_and_closes_with_its_exit_code() {
    run(async {
        let d = Daytona::start().await;
        let url = format!(
            "ws://127.0.0.1:{}/toolbox/{SANDBOX}/process/pty/create-connect?id=t1&cols=90&rows=20",
            d.port
        );
        let mut request =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
                .unwrap();
        request
            .headers_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        // {"PTYVAR": "on"} as base64url, as the SDK sends its variables.
        request.headers_mut().insert(
            "sec-websocket-protocol",
            "X-Daytona-Pty-Exit-Control, X-Daytona-Pty-Envs~eyJQVFlWQVIiOiAib24ifQ"
                .parse()
                .unwrap(),
        );
        let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        use tokio_tungstenite::tungstenite::Message;
        let first = socket.next().await.unwrap().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(first.to_text().unwrap()).unwrap(),
            json!({"type": "control", "status": "connected"})
        );
        socket
            .send(Message::Binary(b"echo v=$PTYVAR; exit 5\n".to_vec().into()))
            .await
            .unwrap();
        let mut screen = Vec::new();
        let mut exited = None;
        let mut close = None;
        while let Some(message) = socket.next().await {
            match message.unwrap() {
                Message::Binary(bytes) => screen.extend_from_slice(&bytes),
                Message::Text(text) => exited = Some(serde_json::from_str::<Value>(&text).unwrap()),
                Message::Close(frame) => {
                    close = frame.map(|f| (u16::from(f.code), f.reason.to_string()));
                    break;
                }
                _ => {}
            }
        }
        let screen = String::from_utf8_lossy(&screen);
        assert!(screen.contains("v=on"), "{screen}");
        assert_eq!(
            exited,
            Some(json!({"type": "control", "status": "exited", "exitCode": 5}))
        );
        assert_eq!(close, Some((1000, "{\"exitCode\":5}".to_owned())));
        let (_, list) = d.call(reqwest::Method::GET, "/process/pty", None).await;
        assert_eq!(list["sessions"], json!([]));
    });
}
