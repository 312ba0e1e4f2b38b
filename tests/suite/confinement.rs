//! One confinement at every door: a path or working directory a caller
//! gives is resolved beneath `--root` by the kernel, so a link out stays
//! out whatever comes before it (`nope/../up/shadow` is not `up/shadow`),
//! and a command's working directory is entered from the handle that was
//! checked, so a directory swapped for a link while commands start never
//! puts one outside. Each check goes through a real door on loopback.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_reach::doors::sandboxd_grpc::proto::process_v1::{ExecuteRequest, StartRequest};
use reqwest::Method;
use serde_json::json;

use super::sandboxd_grpc::{GrpcServer, config, runtime};
use super::sandboxd_rest::{Listening, TOKEN, run};
use crate::common::race::swap_until;
use crate::common::{TestEnv, listening_addrs, serve_listening};

/// What the file outside the root holds; no reply may contain it.
const SECRET: &str = "the-secret-outside-the-root";
/// The commands the race test starts while the directory is swapped.
const RACE_COMMANDS: usize = 150;
/// The bound on the whole race test.
const RACE_LIMIT: Duration = Duration::from_secs(240);

/// `outside/` beside the work dir holding the secret, and in the work dir
/// `up/shadow` (an absolute link to the secret), `up/escape` and `lnk_out`
/// (links to `outside/`). Returns `outside/`.
fn plant_links_out(env: &TestEnv) -> PathBuf {
    let outside = env.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), SECRET).unwrap();
    let work = env.work();
    std::fs::create_dir_all(work.join("up")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret"), work.join("up/shadow")).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("up/escape")).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("lnk_out")).unwrap();
    outside
}

/// Nothing but the secret was ever written outside.
#[track_caller]
fn assert_outside_untouched(outside: &Path) {
    let names: Vec<String> = std::fs::read_dir(outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["secret"], "something was written outside the root");
}

#[test]
fn sandboxd_rest_and_python_runtime_refuse_a_link_out_behind_a_missing_directory() {
    let env = TestEnv::new();
    let outside = plant_links_out(&env);
    run(async move {
        let s = Listening::start_in(env, &[], &[]).await;
        let rest = |path: &str| format!("{}/v1/files/{path}", s.rest);
        let runtime = |route: &str| format!("{}/{route}", s.runtime);
        for (method, url) in [
            (Method::GET, rest("nope%2F..%2Fup%2Fshadow")),
            (Method::GET, rest("up%2Fshadow")),
            (Method::GET, rest("nope%2F..%2Flnk_out%2Fsecret")),
            (Method::PUT, rest("nope%2F..%2Fup%2Fescape%2Ff")),
            (Method::PUT, rest("up%2Fescape%2Ff")),
            (Method::DELETE, rest("nope%2F..%2Fup%2Fescape%2Fsecret")),
            (Method::GET, runtime("download/nope%2F..%2Fup%2Fshadow")),
            (Method::GET, runtime("download/up%2Fshadow")),
            (Method::GET, runtime("list/nope%2F..%2Flnk_out")),
        ] {
            let response = s
                .with_token(method.clone(), url.clone())
                .body("planted")
                .send()
                .await
                .unwrap();
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            assert!(status.is_client_error(), "{method} {url}: {status} {body}");
            assert!(!body.contains(SECRET), "{method} {url} leaked: {body}");
        }
        assert_outside_untouched(&outside);
        assert_eq!(
            std::fs::read_to_string(outside.join("secret")).unwrap(),
            SECRET
        );
    });
}

#[test]
fn swerex_file_routes_with_a_root_refuse_a_link_out_behind_a_missing_directory() {
    let env = TestEnv::new();
    let outside = plant_links_out(&env);
    let policy = env.root.path().join("policy.toml");
    std::fs::write(&policy, "allow_raw_commands = false\n").unwrap();
    let log = env.root.path().join("serve.log");
    let child = serve_listening(&env, &log, &["swerex=127.0.0.1:0".to_owned()], TOKEN)
        .arg("--config")
        .arg(&policy)
        .spawn()
        .unwrap();
    let _server = crate::common::ServerProcess::new(child);
    let started = Instant::now();
    let addr = loop {
        if let Some(addr) = listening_addrs(&log).get("swerex") {
            break *addr;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "swerex never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let work = env.work();
    let absolute = work
        .join("nope/../up/shadow")
        .to_string_lossy()
        .into_owned();
    run(async move {
        let client = reqwest::Client::new();
        for (route, body) in [
            ("/read_file", json!({"path": "nope/../up/shadow"})),
            ("/read_file", json!({"path": absolute})),
            ("/read_file", json!({"path": "up/shadow"})),
            (
                "/write_file",
                json!({"path": "nope/../up/escape/f", "content": "planted"}),
            ),
            (
                "/write_file",
                json!({"path": "up/escape/f", "content": "planted"}),
            ),
        ] {
            let response = client
                .post(format!("http://{addr}{route}"))
                .header("X-API-Key", TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = response.status();
            let text = response.text().await.unwrap_or_default();
            assert_ne!(status.as_u16(), 200, "{route} {body}: {text}");
            assert!(!text.contains(SECRET), "{route} {body} leaked: {text}");
        }
    });
    assert_outside_untouched(&outside);
}

#[test]
fn grpc_execute_and_start_refuse_a_cwd_through_a_missing_directory_to_a_link_out() {
    let env = TestEnv::new();
    let outside = plant_links_out(&env);
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        for cwd in ["nope/../lnk_out", "lnk_out", "up/escape"] {
            let mut cfg = config(&["/bin/sh", "-c", "touch ran"]);
            cfg.cwd = Some(cwd.into());
            let err = client
                .execute(ExecuteRequest {
                    config: Some(cfg.clone()),
                })
                .await
                .unwrap_err();
            assert_eq!(err.code(), tonic::Code::PermissionDenied, "{cwd}: {err:?}");
            let started = client
                .start(StartRequest {
                    config: Some(cfg),
                    pty: None,
                })
                .await;
            let refused = match started {
                Err(status) => status.code() == tonic::Code::PermissionDenied,
                Ok(response) => matches!(
                    response.into_inner().message().await,
                    Err(status) if status.code() == tonic::Code::PermissionDenied
                ),
            };
            assert!(refused, "Start with cwd {cwd} was not refused");
        }
    });
    assert_outside_untouched(&outside);
}

#[test]
fn a_directory_swapped_for_a_link_out_while_commands_start_never_puts_a_write_outside() {
    let env = TestEnv::new();
    let outside = plant_links_out(&env);
    let work = env.work();
    std::fs::create_dir(work.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, work.join("d_swap")).unwrap();
    let server = GrpcServer::start(
        &env,
        "allow_raw_commands = true\n[sandbox]\ndefault = \"workspace-write\"\n",
        &[],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = swap_until(work.join("d"), work.join("d_swap"), Arc::clone(&stop));
    let started = Instant::now();
    let (written, refused) = runtime().block_on(async {
        let mut client = server.client().await;
        let (mut written, mut refused) = (0, 0);
        for _ in 0..RACE_COMMANDS {
            assert!(
                started.elapsed() < RACE_LIMIT,
                "the race test took too long"
            );
            let mut cfg = config(&["/bin/sh", "-c", "echo x >> f"]);
            cfg.cwd = Some("d".into());
            match client.execute(ExecuteRequest { config: Some(cfg) }).await {
                Ok(done) if done.get_ref().exit_code == 0 => written += 1,
                Ok(_) | Err(_) => refused += 1,
            }
        }
        (written, refused)
    });
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    assert_outside_untouched(&outside);
    // The writes that ran landed in the real directory, under either name.
    let real = if work.join("d").is_symlink() {
        work.join("d_swap")
    } else {
        work.join("d")
    };
    let lines = std::fs::read_to_string(real.join("f"))
        .unwrap_or_default()
        .lines()
        .count();
    assert_eq!(
        lines, written,
        "{written} written, {refused} refused, {swaps} swaps"
    );
    eprintln!("race: {written} written, {refused} refused, {swaps} swaps");
    assert!(swaps > 0);
    // Under a fast swapper every command may have met the link; with the
    // directory back in place, one must run (the refusals were the race's,
    // not a door that refuses everything).
    if work.join("d").is_symlink() {
        std::fs::rename(work.join("d"), work.join("d_link")).unwrap();
        std::fs::rename(work.join("d_swap"), work.join("d")).unwrap();
    }
    let ran = runtime().block_on(async {
        let mut client = server.client().await;
        let mut cfg = config(&["/bin/sh", "-c", "echo x >> f"]);
        cfg.cwd = Some("d".into());
        client.execute(ExecuteRequest { config: Some(cfg) }).await
    });
    assert_eq!(
        ran.map(|done| done.get_ref().exit_code).ok(),
        Some(0),
        "with the directory in place the command must run ({written} written, {refused} refused in the race)"
    );
    assert_outside_untouched(&outside);
}
