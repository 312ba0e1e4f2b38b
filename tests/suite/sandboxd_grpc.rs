//! `serve --listen sandboxd-grpc=ADDR`: agent-sandbox's `process.v1.ProcessService`
//! driven by a tonic client built from our proto, against the real binary:
//! Execute, the deadline, Start streams with a PTY, stdin, signals and
//! resizes, what a command leaves behind, floods, the policy and the token.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agent_reach::doors::sandboxd_grpc::proto::process_v1::{
    ExecuteRequest, ExecuteResponse, ProcessConfig, Pty, ResizeTtyRequest, SendSignalRequest,
    Signal, StartRequest, StartResponse, WriteStdinRequest,
    process_service_client::ProcessServiceClient, start_response::Event, write_stdin_request,
};
use tonic::transport::Channel;

use crate::common::{ServerProcess, TestEnv, gone_within, is_alive, pid_in};

/// A `serve` process with one sandboxd-grpc listener on a loopback port of
/// its choosing; killed (and waited for) when dropped.
pub(crate) struct GrpcServer {
    process: ServerProcess,
    addr: String,
}

impl GrpcServer {
    /// A server whose policy allows raw commands.
    pub(crate) fn open(env: &TestEnv) -> Self {
        Self::start(env, "allow_raw_commands = true\n", &[])
    }

    pub(crate) fn start(env: &TestEnv, policy: &str, extra_env: &[(&str, &str)]) -> Self {
        let config_file = env.root.path().join("policy.toml");
        std::fs::write(&config_file, policy).unwrap();
        let mut command = Command::new(crate::common::bin());
        command
            .args(["serve", "--listen", "sandboxd-grpc=127.0.0.1:0", "--root"])
            .arg(env.work())
            .arg("--config")
            .arg(&config_file)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", env.root.path().join("home"))
            .env("AGENT_REACH_HOME", env.ar_home())
            .env("LANG", "C.UTF-8")
            .envs(extra_env.iter().copied())
            .current_dir(env.work())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut sent = false;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent
                    && line.contains("listening")
                    && let Some(addr) = field(&line, "addr")
                {
                    let _ = tx.send(addr);
                    sent = true;
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the server never said where it listens");
        Self {
            process: ServerProcess::new(child),
            addr,
        }
    }

    pub(crate) async fn client(&self) -> ProcessServiceClient<Channel> {
        ProcessServiceClient::connect(format!("http://{}", self.addr))
            .await
            .unwrap()
    }

    fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// SIGTERM, then the exit status (bounded wait).
    fn stop(mut self) -> std::process::ExitStatus {
        self.process
            .stop()
            .expect("the server did not stop within 10 s of SIGTERM")
    }
}

/// The value of `"name":"..."` in a JSON log line.
fn field(line: &str, name: &str) -> Option<String> {
    let key = format!("\"{name}\":\"");
    let start = line.find(&key)? + key.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_owned())
}

pub(crate) fn config(command: &[&str]) -> ProcessConfig {
    ProcessConfig {
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        ..Default::default()
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn execute(
    client: &mut ProcessServiceClient<Channel>,
    config: ProcessConfig,
) -> ExecuteResponse {
    client
        .execute(ExecuteRequest {
            config: Some(config),
        })
        .await
        .unwrap()
        .into_inner()
}

/// Bytes for a process's stdin.
fn input(bytes: &[u8]) -> write_stdin_request::Payload {
    write_stdin_request::Payload::Input(bytes.to_vec())
}

/// `WriteStdin` of `payload` to process `id`: the call's answer.
async fn write_stdin(
    client: &mut ProcessServiceClient<Channel>,
    id: i32,
    payload: write_stdin_request::Payload,
) -> Result<(), tonic::Status> {
    client
        .write_stdin(WriteStdinRequest {
            process_id: id,
            payload: Some(payload),
        })
        .await
        .map(|_| ())
}

/// Reads a Start stream until `until` holds for what came so far, or the
/// stream ends; returns the output and the exit code if it came.
async fn read_until(
    stream: &mut tonic::Streaming<StartResponse>,
    output: &mut Vec<u8>,
    until: impl Fn(&[u8]) -> bool,
) -> Option<i32> {
    let limit = Instant::now() + Duration::from_secs(20);
    while !until(output) {
        let left = limit.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no match in: {}",
            String::from_utf8_lossy(output)
        );
        let message = tokio::time::timeout(left, stream.message()).await;
        match message.expect("the stream went quiet").unwrap() {
            Some(StartResponse {
                event: Some(Event::Stdout(b) | Event::Stderr(b)),
            }) => {
                output.extend(b);
            }
            Some(StartResponse {
                event: Some(Event::Exit(exit)),
            }) => return Some(exit.exit_code),
            Some(_) => {}
            None => return None,
        }
    }
    None
}

/// Starts `request` and returns its process id and the stream after the
/// `InitEvent`.
async fn start(
    client: &mut ProcessServiceClient<Channel>,
    request: StartRequest,
) -> (i32, tonic::Streaming<StartResponse>) {
    let mut stream = client.start(request).await.unwrap().into_inner();
    match stream.message().await.unwrap() {
        Some(StartResponse {
            event: Some(Event::Init(init)),
        }) => (init.process_id, stream),
        other => panic!("the stream began with {other:?}, not an InitEvent"),
    }
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn execute_returns_the_output_exit_code_env_and_cwd() {
    let env = TestEnv::new();
    std::fs::create_dir(env.work().join("sub")).unwrap();
    let server = GrpcServer::start(
        &env,
        "allow_raw_commands = true\n",
        &[("SERVER_ONLY_VAR", "not-for-commands")],
    );
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut cfg = config(&[
            "/bin/sh",
            "-c",
            "echo out $GREETING; pwd; echo err >&2; exit 3",
        ]);
        cfg.env_vars.insert("GREETING".into(), "hello".into());
        cfg.cwd = Some("sub".into());
        let done = execute(&mut client, cfg).await;
        assert_eq!(done.exit_code, 3);
        let stdout = String::from_utf8(done.stdout).unwrap();
        let sub = env.work().join("sub").canonicalize().unwrap();
        assert_eq!(stdout, format!("out hello\n{}\n", sub.display()));
        assert_eq!(String::from_utf8(done.stderr).unwrap(), "err\n");
        // The cleared environment: nothing of the server's own but the whitelist.
        let done = execute(&mut client, config(&["/bin/sh", "-c", "env"])).await;
        let vars = String::from_utf8(done.stdout).unwrap();
        assert!(!vars.contains("SERVER_ONLY_VAR"), "{vars}");
        assert!(vars.contains("PATH="), "{vars}");
    });
}

#[test]
fn execute_folds_a_flood_to_head_and_tail_and_names_the_spill_file() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let done = execute(&mut client, config(&["/usr/bin/seq", "1", "300000"])).await;
        assert_eq!(done.exit_code, 0);
        let stdout = String::from_utf8(done.stdout).unwrap();
        assert!(stdout.starts_with("1\n2\n3\n"), "{}", &stdout[..200]);
        assert!(
            stdout.ends_with("299999\n300000\n"),
            "{}",
            &stdout[stdout.len() - 200..]
        );
        assert!(stdout.len() < 300_000, "not folded: {} bytes", stdout.len());
        let marker = stdout.lines().find(|l| l.contains("omitted")).unwrap();
        let file = marker
            .split_whitespace()
            .find(|w| w.contains("/spill/"))
            .unwrap_or_else(|| panic!("no spill file in {marker}"));
        let spilled = std::fs::read_to_string(file.trim_matches('\'')).unwrap();
        assert!(
            spilled.contains("\n150000\n"),
            "the spill file lacks the middle"
        );
    });
}

#[test]
fn stopping_the_server_kills_the_processes_of_its_streams() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    let pid_file = env.work().join("pid");
    // The runtime outlives the stream: dropping it would close the
    // connection, and a client going away kills its processes by itself.
    let rt = runtime();
    let stream = rt.block_on(async {
        let mut client = server.client().await;
        let (_id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&[
                    "/bin/sh",
                    "-c",
                    "echo $$ > pid; echo up; exec sleep 60",
                ])),
                pty: None,
            },
        )
        .await;
        let mut output = Vec::new();
        read_until(&mut stream, &mut output, |o| o.ends_with(b"up\n")).await;
        (client, stream)
    });
    let pid = pid_in(&pid_file);
    assert!(is_alive(pid), "the command {pid} is not running");
    let status = server.stop();
    assert!(status.success(), "serve exited with {status}");
    assert!(
        gone_within(pid, Duration::from_secs(1)),
        "{pid} outlived the server"
    );
    drop(stream);
    drop(rt);
}

#[test]
fn execute_of_a_missing_program_or_a_cwd_outside_the_root_is_refused() {
    let env = TestEnv::new();
    std::os::unix::fs::symlink(env.root.path(), env.work().join("out")).unwrap();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let missing = ExecuteRequest {
            config: Some(config(&["no-such-program-anywhere"])),
        };
        let err = client.execute(missing).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
        let mut outside = config(&["/bin/true"]);
        outside.cwd = Some("../..".into());
        let err = client
            .execute(ExecuteRequest {
                config: Some(outside),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
        let mut through_link = config(&["/bin/true"]);
        through_link.cwd = Some("out".into());
        let err = client
            .execute(ExecuteRequest {
                config: Some(through_link),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
        let err = client
            .execute(ExecuteRequest { config: None })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    });
}

#[test]
fn execute_past_its_deadline_is_deadline_exceeded_and_the_command_is_killed() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    let pid_file = env.work().join("pid");
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut request = tonic::Request::new(ExecuteRequest {
            config: Some(config(&["/bin/sh", "-c", "echo $$ > pid; exec sleep 30"])),
        });
        request.set_timeout(Duration::from_millis(1500));
        let started = Instant::now();
        let err = client.execute(request).await.unwrap_err();
        // The server answers DEADLINE_EXCEEDED just before the deadline; on
        // a loaded machine tonic's own client timer may end the call first
        // (CANCELLED "Timeout expired"; other clients say DEADLINE_EXCEEDED).
        let clients_own = err.code() == tonic::Code::Cancelled && err.message().contains("Timeout");
        assert!(
            err.code() == tonic::Code::DeadlineExceeded || clients_own,
            "{err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the call outlived its deadline"
        );
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .expect("the command never ran")
        .trim()
        .parse()
        .unwrap();
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "pid {pid} survived the deadline"
    );
}

#[test]
fn a_start_stream_past_its_deadline_ends_deadline_exceeded_and_kills_the_process() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    let pid_file = env.work().join("pid");
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut request = tonic::Request::new(StartRequest {
            config: Some(config(&[
                "/bin/sh",
                "-c",
                "echo $$ > pid; echo up; exec sleep 30",
            ])),
            pty: None,
        });
        request.set_timeout(Duration::from_millis(1500));
        let mut stream = client.start(request).await.unwrap().into_inner();
        let end = Instant::now() + Duration::from_secs(20);
        let err = loop {
            assert!(Instant::now() < end, "the stream outlived its deadline");
            match stream.message().await {
                Ok(Some(StartResponse {
                    event: Some(Event::Exit(exit)),
                })) => panic!("a normal exit {exit:?} instead of the deadline"),
                Ok(Some(_)) => {}
                Ok(None) => panic!("the stream ended without a status"),
                Err(err) => break err,
            }
        };
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
    });
    let pid = pid_in(&pid_file);
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "{pid} outlived the deadline"
    );
}

#[test]
fn a_pty_prompt_is_answered_through_write_stdin() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let (id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&[
                    "/bin/sh",
                    "-c",
                    "[ -t 0 ] && printf 'name? '; read name; echo \"hello $name\"",
                ])),
                pty: Some(Pty { cols: 80, rows: 24 }),
            },
        )
        .await;
        let mut output = Vec::new();
        read_until(&mut stream, &mut output, |o| o.ends_with(b"name? ")).await;
        write_stdin(&mut client, id, input(b"world\n"))
            .await
            .unwrap();
        let exit = read_until(&mut stream, &mut output, |_| false).await;
        let text = String::from_utf8_lossy(&output);
        assert!(text.contains("hello world"), "{text}");
        assert_eq!(exit, Some(0), "{text}");
    });
}

#[test]
fn stdin_on_pipes_takes_bytes_and_then_eof() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let (id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&["/bin/sh", "-c", "echo ready; tr a-z A-Z"])),
                pty: None,
            },
        )
        .await;
        let mut output = Vec::new();
        read_until(&mut stream, &mut output, |o| o.ends_with(b"ready\n")).await;
        for payload in [input(b"shout\n"), write_stdin_request::Payload::Eof(())] {
            write_stdin(&mut client, id, payload).await.unwrap();
        }
        let exit = read_until(&mut stream, &mut output, |_| false).await;
        assert_eq!(String::from_utf8_lossy(&output), "ready\nSHOUT\n");
        assert_eq!(exit, Some(0));
        let err = write_stdin(&mut client, id, input(b"late"))
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    });
}

#[test]
fn send_signal_reaches_the_whole_process_group() {
    let env = TestEnv::new();
    env.write(
        "inner.sh",
        "trap 'echo inner-int; exit 3' INT\necho ready\nwhile :; do sleep 0.05; done\n",
    );
    env.write(
        "outer.sh",
        "trap 'echo outer-int' INT\nsh ./inner.sh\necho \"inner exited $?\"\n",
    );
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let (id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&["/bin/sh", "./outer.sh"])),
                pty: None,
            },
        )
        .await;
        let mut output = Vec::new();
        read_until(&mut stream, &mut output, |o| o.ends_with(b"ready\n")).await;
        client
            .send_signal(SendSignalRequest {
                process_id: id,
                signal: Signal::Sigint as i32,
            })
            .await
            .unwrap();
        let exit = read_until(&mut stream, &mut output, |_| false).await;
        let text = String::from_utf8_lossy(&output);
        // The inner shell is not the group's leader: only a signal to the
        // group reaches it.
        assert!(text.contains("inner-int"), "{text}");
        assert!(text.contains("inner exited 3"), "{text}");
        assert_eq!(exit, Some(0), "{text}");
        let err = client
            .send_signal(SendSignalRequest {
                process_id: id,
                signal: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    });
}

#[test]
fn resize_tty_is_seen_by_stty_size() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let (id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&[
                    "/bin/sh",
                    "-c",
                    "echo \"size $(stty size)\"; read x; echo \"size $(stty size)\"",
                ])),
                pty: Some(Pty { cols: 80, rows: 24 }),
            },
        )
        .await;
        let mut output = Vec::new();
        read_until(&mut stream, &mut output, |o| {
            String::from_utf8_lossy(o).contains("size 24 80")
        })
        .await;
        client
            .resize_tty(ResizeTtyRequest {
                process_id: id,
                cols: 100,
                rows: 40,
            })
            .await
            .unwrap();
        write_stdin(&mut client, id, input(b"\n")).await.unwrap();
        let exit = read_until(&mut stream, &mut output, |_| false).await;
        let text = String::from_utf8_lossy(&output);
        assert!(text.contains("size 40 100"), "{text}");
        assert_eq!(exit, Some(0), "{text}");
    });
}

#[test]
fn resize_tty_without_a_pty_is_a_failed_precondition() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let (id, _stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&["/bin/sleep", "30"])),
                pty: None,
            },
        )
        .await;
        let err = client
            .resize_tty(ResizeTtyRequest {
                process_id: id,
                cols: 100,
                rows: 40,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    });
}

#[test]
fn a_grandchild_is_killed_when_the_started_command_exits() {
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    runtime().block_on(async {
        let mut client = server.client().await;
        let (id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&[
                    "/bin/sh",
                    "-c",
                    "sleep 60 & echo $!; read x; exit 0",
                ])),
                pty: None,
            },
        )
        .await;
        let mut output = Vec::new();
        read_until(&mut stream, &mut output, |o| o.ends_with(b"\n")).await;
        let pid: i32 = String::from_utf8_lossy(&output).trim().parse().unwrap();
        // `$!` is known as soon as the shell forks; the child may not have
        // exec'd `sleep` yet.
        let started = Instant::now();
        let cmdline = loop {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
            if cmdline.starts_with(b"sleep") || started.elapsed() > Duration::from_secs(5) {
                break cmdline;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            cmdline.starts_with(b"sleep"),
            "pid {pid} is not the grandchild"
        );
        write_stdin(&mut client, id, write_stdin_request::Payload::Eof(()))
            .await
            .unwrap();
        let exit = read_until(&mut stream, &mut output, |_| false).await;
        assert_eq!(exit, Some(0));
        assert!(
            gone_within(pid, Duration::from_secs(1)),
            "the grandchild {pid} outlived the command"
        );
    });
}

#[test]
fn an_endless_flood_streams_in_flat_memory_and_stops_with_the_client() {
    const READ: usize = 96 * 1024 * 1024;
    let env = TestEnv::new();
    let server = GrpcServer::open(&env);
    let pid_file = env.work().join("pid");
    runtime().block_on(async {
        let mut client = server.client().await;
        let (_id, mut stream) = start(
            &mut client,
            StartRequest {
                config: Some(config(&["/bin/sh", "-c", "echo $$ > pid; exec yes"])),
                pty: None,
            },
        )
        .await;
        let mut read = 0;
        let mut baseline = None;
        let mut peak = 0;
        while read < READ {
            match stream.message().await.unwrap() {
                Some(StartResponse {
                    event: Some(Event::Stdout(b)),
                }) => read += b.len(),
                other => panic!("the flood ended with {other:?}"),
            }
            if baseline.is_none() && read > 4 * 1024 * 1024 {
                baseline = Some(rss_kib(server.pid()));
            }
            peak = peak.max(rss_kib(server.pid()));
        }
        // A client that stops reading holds the command back, not the
        // server's memory.
        tokio::time::sleep(Duration::from_millis(500)).await;
        peak = peak.max(rss_kib(server.pid()));
        let baseline = baseline.unwrap();
        assert!(
            peak < baseline + 32 * 1024,
            "RSS grew from {baseline} KiB to {peak} KiB over a {READ}-byte flood"
        );
        drop(stream);
    });
    let pid = pid_in(&pid_file);
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "the flood {pid} outlived its stream"
    );
}

#[test]
fn raw_commands_off_are_permission_denied() {
    let env = TestEnv::new();
    let server = GrpcServer::start(&env, "allow_raw_commands = false\n", &[]);
    runtime().block_on(async {
        let mut client = server.client().await;
        let err = client
            .execute(ExecuteRequest {
                config: Some(config(&["/bin/true"])),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
        let err = client
            .start(StartRequest {
                config: Some(config(&["/bin/true"])),
                pty: None,
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err:?}");
    });
}

#[test]
fn only_the_right_bearer_token_is_let_in() {
    let env = TestEnv::new();
    let server = GrpcServer::start(
        &env,
        "allow_raw_commands = true\n",
        &[("AGENT_REACH_TOKEN", "s3cret")],
    );
    runtime().block_on(async {
        let channel = Channel::from_shared(format!("http://{}", server.addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        for (token, expected) in [
            (None, Some(tonic::Code::Unauthenticated)),
            (Some("Bearer wrong"), Some(tonic::Code::Unauthenticated)),
            (Some("Bearer s3cret"), None),
        ] {
            let mut client = ProcessServiceClient::with_interceptor(
                channel.clone(),
                move |mut request: tonic::Request<()>| {
                    if let Some(token) = token {
                        request
                            .metadata_mut()
                            .insert("authorization", token.parse().unwrap());
                    }
                    Ok(request)
                },
            );
            let answer = client
                .execute(ExecuteRequest {
                    config: Some(config(&["/bin/echo", "in"])),
                })
                .await;
            match expected {
                Some(code) => assert_eq!(answer.unwrap_err().code(), code, "{token:?}"),
                None => assert_eq!(answer.unwrap().into_inner().stdout, b"in\n"),
            }
        }
    });
}

#[test]
fn request_variables_reach_the_sandboxed_command_but_never_the_wrapper() {
    let env = TestEnv::new();
    let garbage = env.work().join("uploaded.so");
    std::fs::write(&garbage, "not an ELF object").unwrap();
    let server = GrpcServer::start(
        &env,
        "allow_raw_commands = true\n[sandbox]\ndefault = \"read-only\"\n",
        &[],
    );
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut cfg = config(&[
            "/bin/sh",
            "-c",
            "echo \"$X|$LD_PRELOAD|${AGENT_REACH_SANDBOX_ENV_FD:-none}\"; unset LD_PRELOAD; ls -l /proc/$$/fd | grep -c memfd || true",
        ]);
        cfg.env_vars.insert("X".into(), "from-request".into());
        cfg.env_vars
            .insert("LD_PRELOAD".into(), garbage.display().to_string());
        let done = execute(&mut client, cfg).await;
        let stdout = String::from_utf8(done.stdout).unwrap();
        let stderr = String::from_utf8(done.stderr).unwrap();
        assert_eq!(done.exit_code, 0, "{stdout}{stderr}");
        // The hand-over descriptor was closed before the command ran.
        assert_eq!(stdout, format!("from-request|{}|none\n0\n", garbage.display()));
        // The loader complains once per process started with the garbage
        // preload: the command's own sh, not the wrapper before it.
        let complaints = stderr.matches("cannot be preloaded").count();
        assert_eq!(complaints, 1, "the wrapper saw LD_PRELOAD: {stderr}");
        assert!(!stderr.contains("agent-reach-sandbox"), "{stderr}");
    });
}

#[test]
fn a_reserved_name_in_env_vars_is_an_invalid_argument_naming_it() {
    let env = TestEnv::new();
    let server = GrpcServer::start(
        &env,
        "allow_raw_commands = true\n[sandbox]\ndefault = \"workspace-write\"\n",
        &[],
    );
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut cfg = config(&["/bin/true"]);
        cfg.env_vars
            .insert("AGENT_REACH_HOME".into(), "/nonexistent".into());
        let err = client
            .execute(ExecuteRequest { config: Some(cfg) })
            .await
            .unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains("AGENT_REACH_HOME"), "{err:?}");
        assert!(err.message().contains("invalid_params"), "{err:?}");
    });
}

#[test]
fn a_deadline_past_max_timeout_ms_is_capped_to_it() {
    let env = TestEnv::new();
    let server = GrpcServer::start(
        &env,
        "allow_raw_commands = true\n[limits]\nmax_timeout_ms = 1000\n",
        &[],
    );
    runtime().block_on(async {
        let mut client = server.client().await;
        let mut request = tonic::Request::new(ExecuteRequest {
            config: Some(config(&["sleep", "20"])),
        });
        request.set_timeout(Duration::from_secs(1_000_000));
        let started = Instant::now();
        let err = client.execute(request).await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        assert!(err.message().contains("max_timeout_ms"), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "{err:?}");
    });
}
