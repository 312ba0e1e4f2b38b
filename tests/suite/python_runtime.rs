//! `serve --listen python-runtime=ADDR`: agent-sandbox's older runtime API
//! over loopback: `/execute` through the plan stage (output, exit code, the
//! command timeout as exit 124 and `timed_out`, raw commands off as 403),
//! the file routes and their confinement, the token.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::sandboxd_rest::{Listening, run};
use crate::common::TestEnv;

async fn execute(s: &Listening, body: Value) -> (StatusCode, Value) {
    let response = s
        .with_token(Method::POST, format!("{}/execute", s.runtime))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status();
    (status, response.json().await.unwrap())
}

#[test]
fn the_root_answers_without_a_token_and_execute_needs_it() {
    run(async {
        let s = Listening::start(&[]).await;
        let root = s.http.get(format!("{}/", s.runtime)).send().await.unwrap();
        assert_eq!(root.status(), StatusCode::OK);
        let body: Value = root.json().await.unwrap();
        assert_eq!(body["status"], "ok");
        let bare = s
            .http
            .post(format!("{}/execute", s.runtime))
            .json(&json!({"command": "touch ran"}))
            .send()
            .await
            .unwrap();
        assert_eq!(bare.status(), StatusCode::UNAUTHORIZED);
        assert!(!s.work("ran").exists());
    });
}

#[test]
fn a_shell_line_runs_in_the_workspace_with_its_output_and_exit_code() {
    run(async {
        let s = Listening::start(&[]).await;
        let (status, body) = execute(
            &s,
            json!({"command": "echo out; echo err >&2; pwd; echo $((6*7)) | tr 4 X; exit 3"}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let work = s.env.work().canonicalize().unwrap();
        assert_eq!(
            body["stdout"],
            format!("out\n{}\nX2\n", work.display()),
            "{body}"
        );
        assert_eq!(body["stderr"], "err\n");
        assert_eq!(body["exit_code"], 3);
        assert_eq!(body["timed_out"], false);
    });
}

#[test]
fn timeout_seconds_kills_the_command_with_124() {
    run(async {
        let s = Listening::start(&[]).await;
        let started = Instant::now();
        let (status, body) = execute(
            &s,
            json!({"command": "echo started; sleep 30; touch survived", "timeout_seconds": 0.5}),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["exit_code"], 124, "{body}");
        assert_eq!(body["timed_out"], true);
        assert!(started.elapsed() < Duration::from_secs(20));
        let (_, bad) = execute(&s, json!({"command": "true", "timeout_seconds": 0})).await;
        assert!(bad["detail"].is_string(), "{bad}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!s.work("survived").exists());
    });
}

#[test]
fn a_timeout_past_the_limit_is_capped_and_the_answer_says_so() {
    run(async {
        let s = Listening::start(&[]).await;
        let (status, body) = execute(&s, json!({"command": "true", "timeout_seconds": 1e6})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["capped"], json!(["max_timeout_ms"]), "{body}");
        let (_, fair) = execute(&s, json!({"command": "true", "timeout_seconds": 5})).await;
        assert!(fair.get("capped").is_none(), "{fair}");
    });
}

#[test]
fn raw_commands_off_refuses_execute_with_403() {
    run(async {
        let env = TestEnv::new();
        let config = env.write("registry.toml", "allow_raw_commands = false\n");
        let s = Listening::start_in(env, &["--config", config.to_str().unwrap()], &[]).await;
        let (status, body) = execute(&s, json!({"command": "touch ran"})).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(body["kind"], "raw_commands_disabled");
        assert!(!s.work("ran").exists());
    });
}

#[test]
fn upload_download_list_and_exists_share_the_workspace() {
    run(async {
        let s = Listening::start(&[]).await;
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(b"1,2\n".to_vec()).file_name("data/input.csv"),
        );
        let up = s
            .with_token(Method::POST, format!("{}/upload", s.runtime))
            .multipart(form)
            .send()
            .await
            .unwrap();
        assert_eq!(up.status(), StatusCode::OK);
        assert_eq!(std::fs::read(s.work("data/input.csv")).unwrap(), b"1,2\n");

        let get = |p: &str| {
            s.with_token(Method::GET, format!("{}/{p}", s.runtime))
                .send()
        };
        let down = get("download/data%2Finput.csv").await.unwrap();
        assert_eq!(down.status(), StatusCode::OK);
        assert_eq!(down.bytes().await.unwrap().as_ref(), b"1,2\n");
        assert_eq!(
            get("download/data").await.unwrap().status(),
            StatusCode::NOT_FOUND
        );

        let listing: Value = get("list/data").await.unwrap().json().await.unwrap();
        assert_eq!(listing[0]["name"], "input.csv");
        assert_eq!(listing[0]["type"], "file");
        assert_eq!(listing[0]["size"], 4);
        assert!(listing[0]["mod_time"].as_f64().unwrap() > 0.0);
        let root: Value = get("list/").await.unwrap().json().await.unwrap();
        assert_eq!(root[0]["type"], "directory");

        let yes: Value = get("exists/data%2Finput.csv")
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(yes, json!({"path": "data/input.csv", "exists": true}));
        let no: Value = get("exists/nope").await.unwrap().json().await.unwrap();
        assert_eq!(no["exists"], false);
    });
}

#[test]
fn paths_leaving_the_workspace_are_403() {
    run(async {
        let s = Listening::start(&[]).await;
        let outside = s.env.root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        std::os::unix::fs::symlink(&outside, s.work("link")).unwrap();
        for p in [
            "download/..%2Foutside%2Fsecret",
            "download/link%2Fsecret",
            "list/..%2Foutside",
            "list/link",
            "exists/..%2Foutside",
            "exists/link%2Fsecret",
        ] {
            let r = s
                .with_token(Method::GET, format!("{}/{p}", s.runtime))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{p}");
        }
        for name in ["../planted", "link/planted"] {
            let form = reqwest::multipart::Form::new().part(
                "file",
                reqwest::multipart::Part::bytes(b"x".to_vec()).file_name(name),
            );
            let r = s
                .with_token(Method::POST, format!("{}/upload", s.runtime))
                .multipart(form)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::FORBIDDEN, "{name}");
        }
        assert!(!outside.join("planted").exists());
        assert!(!s.env.root.path().join("planted").exists());
    });
}
