//! `serve --listen sandboxd-rest=ADDR`: the agent-sandbox sandboxd REST
//! filesystem API, spoken to over loopback with reqwest: each route, the
//! 403 of `..` and symbolic-link escapes, the 409 of a full directory, the
//! 401 without the token and the health check that needs none.
//!
//! [`Listening`] (a `serve` process with HTTP listeners) is shared with the
//! python-runtime suite.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::Value;

use crate::common::{ServerProcess, TestEnv, serve_listening};

/// The token the listener tests run with.
pub(crate) const TOKEN: &str = "t0ken-for-tests";
/// How long a server may take to answer its health check.
const START_LIMIT: Duration = Duration::from_secs(20);

/// A `serve` process with `sandboxd-rest` and `python-runtime` listeners on
/// loopback, its work dir the workspace; killed and reaped on drop.
pub(crate) struct Listening {
    // Dropped first: the server stops before its workspace goes.
    _process: ServerProcess,
    pub(crate) env: TestEnv,
    pub(crate) rest: String,
    pub(crate) runtime: String,
    pub(crate) http: reqwest::Client,
    _known: agent_reach::exec::KnownChildGuard,
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

impl Listening {
    /// Starts the server with the token and `extra` flags; returns once
    /// both health checks answer.
    pub(crate) async fn start(extra: &[&str]) -> Self {
        Self::start_in(TestEnv::new(), extra, &[]).await
    }

    pub(crate) async fn start_in(env: TestEnv, extra: &[&str], vars: &[(&str, &str)]) -> Self {
        let (rest_port, runtime_port) = (free_port(), free_port());
        let log = env.root.path().join("serve.log");
        let listens = [
            format!("sandboxd-rest=127.0.0.1:{rest_port}"),
            format!("python-runtime=127.0.0.1:{runtime_port}"),
        ];
        let child = serve_listening(&env, &log, &listens, TOKEN)
            .args(extra)
            .envs(vars.iter().copied())
            .spawn()
            .unwrap();
        let known = agent_reach::exec::KnownChildGuard::register(child.id() as i32);
        let listening = Self {
            env,
            _process: ServerProcess::new(child),
            rest: format!("http://127.0.0.1:{rest_port}"),
            runtime: format!("http://127.0.0.1:{runtime_port}"),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap(),
            _known: known,
        };
        listening.wait_healthy().await;
        listening
    }

    async fn wait_healthy(&self) {
        let started = Instant::now();
        for url in [
            format!("{}/v1/health", self.rest),
            format!("{}/", self.runtime),
        ] {
            loop {
                if let Ok(r) = self.http.get(&url).send().await
                    && r.status().is_success()
                {
                    break;
                }
                assert!(
                    started.elapsed() < START_LIMIT,
                    "no answer from {url}; log:\n{}",
                    std::fs::read_to_string(self.env.root.path().join("serve.log"))
                        .unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// A request to `base` + `path` with the token.
    pub(crate) fn with_token(
        &self,
        method: reqwest::Method,
        url: String,
    ) -> reqwest::RequestBuilder {
        self.http.request(method, url).bearer_auth(TOKEN)
    }

    /// `path` under the workspace.
    pub(crate) fn work(&self, rel: &str) -> PathBuf {
        self.env.work().join(rel)
    }

    fn files(&self, encoded: &str) -> String {
        format!("{}/v1/files/{encoded}", self.rest)
    }

    async fn send(&self, method: reqwest::Method, encoded: &str) -> reqwest::Response {
        self.with_token(method, self.files(encoded))
            .send()
            .await
            .unwrap()
    }
}

/// Runs an async test on its own runtime.
pub(crate) fn run<F: std::future::Future<Output = ()>>(test: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

/// The `{code, message}` body of an error, with its status checked.
async fn error_of(response: reqwest::Response, status: StatusCode) -> (String, String) {
    assert_eq!(response.status(), status, "{response:?}");
    let body: Value = response.json().await.unwrap();
    (
        body["code"].as_str().unwrap_or_default().to_owned(),
        body["message"].as_str().unwrap_or_default().to_owned(),
    )
}

use reqwest::Method;

#[test]
fn health_answers_ok_without_a_token_and_metadata_shows_sandbox_variables() {
    run(async {
        let s = Listening::start_in(
            TestEnv::new(),
            &[],
            &[("SANDBOX_ID", "sb-7"), ("SANDBOX_API_TOKEN", "hidden")],
        )
        .await;
        let health = s
            .http
            .get(format!("{}/v1/health", s.rest))
            .send()
            .await
            .unwrap();
        assert_eq!(health.status(), StatusCode::OK);
        let body: Value = health.json().await.unwrap();
        assert_eq!(body["status"], "ok");
        let meta: Value = s
            .with_token(Method::GET, format!("{}/v1/metadata", s.rest))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(meta["env"], serde_json::json!({"SANDBOX_ID": "sb-7"}));
    });
}

#[test]
fn every_other_route_needs_the_token() {
    run(async {
        let s = Listening::start(&[]).await;
        std::fs::write(s.work("a.txt"), "a").unwrap();
        for url in [s.files("a.txt"), format!("{}/v1/metadata", s.rest)] {
            let none = s.http.get(&url).send().await.unwrap();
            assert_eq!(none.status(), StatusCode::UNAUTHORIZED, "{url}");
            let wrong = s.http.get(&url).bearer_auth("nope").send().await.unwrap();
            assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED, "{url}");
        }
        let put = s.http.put(s.files("b.txt")).body("b").send().await.unwrap();
        assert_eq!(put.status(), StatusCode::UNAUTHORIZED);
        assert!(!s.work("b.txt").exists());
    });
}

#[test]
fn a_file_is_written_read_probed_listed_and_deleted() {
    run(async {
        let s = Listening::start(&[]).await;
        let put = s
            .with_token(Method::PUT, s.files("src%2Fmain.py?mode=0755"))
            .header("content-type", "application/octet-stream")
            .body("print('hi')\n")
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), StatusCode::NO_CONTENT);
        let mode = std::fs::metadata(s.work("src/main.py"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);

        let get = s.send(Method::GET, "src%2Fmain.py").await;
        assert_eq!(get.status(), StatusCode::OK);
        assert_eq!(get.headers()["content-type"], "application/octet-stream");
        assert_eq!(get.bytes().await.unwrap().as_ref(), b"print('hi')\n");

        assert_eq!(
            s.send(Method::HEAD, "src%2Fmain.py").await.status(),
            StatusCode::OK
        );
        assert_eq!(
            s.send(Method::HEAD, "src%2Fnope.py").await.status(),
            StatusCode::NOT_FOUND
        );

        let listing: Value = s.send(Method::GET, "src").await.json().await.unwrap();
        assert_eq!(listing["path"], "/src");
        let entries = listing["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1, "{listing}");
        assert_eq!(entries[0]["name"], "main.py");
        assert_eq!(entries[0]["type"], "file");
        assert_eq!(entries[0]["size"], 12);
        assert_eq!(entries[0]["mode"], "0755");
        assert!(entries[0]["modified_at"].as_str().unwrap().ends_with('Z'));
        let root: Value = s.send(Method::GET, "").await.json().await.unwrap();
        assert_eq!(root["entries"][0]["type"], "directory");

        let delete = s.send(Method::DELETE, "src%2Fmain.py").await;
        assert_eq!(delete.status(), StatusCode::NO_CONTENT);
        assert!(!s.work("src/main.py").exists());
        let again = s.send(Method::GET, "src%2Fmain.py").await;
        let (code, _) = error_of(again, StatusCode::NOT_FOUND).await;
        assert_eq!(code, "NOT_FOUND");
    });
}

#[test]
fn a_multipart_put_writes_its_file_part() {
    run(async {
        let s = Listening::start(&[]).await;
        let form = reqwest::multipart::Form::new()
            .text("other", "ignored")
            .part(
                "file",
                reqwest::multipart::Part::bytes(b"data".to_vec()).file_name("x"),
            );
        let put = s
            .with_token(Method::PUT, s.files("up%2Fload.bin"))
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), StatusCode::NO_CONTENT);
        assert_eq!(std::fs::read(s.work("up/load.bin")).unwrap(), b"data");
    });
}

#[test]
fn a_directory_that_is_not_empty_needs_recursive() {
    run(async {
        let s = Listening::start(&[]).await;
        std::fs::create_dir_all(s.work("d/e")).unwrap();
        std::fs::write(s.work("d/e/f"), "f").unwrap();
        let (code, _) = error_of(s.send(Method::DELETE, "d").await, StatusCode::CONFLICT).await;
        assert_eq!(code, "CONFLICT");
        assert!(s.work("d/e/f").exists());
        let bad = s.send(Method::DELETE, "d?recursive=maybe").await;
        error_of(bad, StatusCode::BAD_REQUEST).await;
        let ok = s.send(Method::DELETE, "d?recursive=true").await;
        assert_eq!(ok.status(), StatusCode::NO_CONTENT);
        assert!(!s.work("d").exists());
        assert!(s.env.work().is_dir());
    });
}

#[test]
fn dot_dot_and_symlink_escapes_are_permission_denied() {
    run(async {
        let s = Listening::start(&[]).await;
        let outside = s.env.root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::os::unix::fs::symlink(&outside, s.work("link")).unwrap();
        for (method, path) in [
            (Method::GET, "%2E%2E%2Foutside%2Fsecret"),
            (Method::HEAD, "%2E%2E%2Foutside%2Fsecret"),
            (Method::GET, "a%2F%2E%2E%2F%2E%2E%2Foutside"),
            (Method::GET, "link%2Fsecret"),
            (Method::GET, "link"),
            (Method::PUT, "link%2Fplanted"),
            (Method::PUT, "%2E%2E%2Fplanted"),
            (Method::DELETE, "link%2Fsecret"),
            (Method::DELETE, "%2E%2E%2Foutside"),
        ] {
            let response = s
                .with_token(method.clone(), s.files(path))
                .body("x")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {path}");
            if method != Method::HEAD {
                let (code, _) = error_of(response, StatusCode::FORBIDDEN).await;
                assert_eq!(code, "PERMISSION_DENIED", "{method} {path}");
            }
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            "secret"
        );
        assert!(!outside.join("planted").exists());
        assert!(!s.env.root.path().join("planted").exists());
    });
}

#[test]
fn a_bad_mode_or_a_directory_target_is_a_bad_request() {
    run(async {
        let s = Listening::start(&[]).await;
        std::fs::create_dir_all(s.work("dir")).unwrap();
        for path in ["f?mode=755", "f?mode=0999", "dir", ""] {
            let response = s
                .with_token(Method::PUT, s.files(path))
                .body("x")
                .send()
                .await
                .unwrap();
            let (code, _) = error_of(response, StatusCode::BAD_REQUEST).await;
            assert_eq!(code, "INVALID_ARGUMENT", "{path}");
        }
        assert!(!s.work("f").exists());
    });
}

#[test]
fn health_is_unavailable_without_the_workspace() {
    run(async {
        let s = Listening::start(&[]).await;
        std::fs::remove_dir_all(s.env.work()).unwrap();
        let health = s
            .http
            .get(format!("{}/v1/health", s.rest))
            .send()
            .await
            .unwrap();
        let (code, _) = error_of(health, StatusCode::SERVICE_UNAVAILABLE).await;
        assert_eq!(code, "UNAVAILABLE");
        std::fs::create_dir_all(s.env.work()).unwrap();
    });
}
