//! The operator's policy at every door (issue 11): raw commands, the
//! default sandbox, risk and approval by a person, through `exec --json`
//! and through `serve` driven by rmcp's client (with and without the
//! elicitation capability).

use std::net::TcpListener;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, FormElicitationCapability,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

use super::serve::{server_command, text_of};
use crate::common::TestEnv;

const LIMIT: Duration = Duration::from_secs(60);

/// How the test's MCP client answers an elicitation, if it can at all.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Person {
    /// The client declares no elicitation capability.
    Absent,
    Accepts,
    Declines,
}

#[derive(Clone)]
struct Client {
    person: Person,
    asked: Arc<AtomicUsize>,
    last_question: Arc<std::sync::Mutex<String>>,
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        if self.person != Person::Absent {
            let mut elicitation = ElicitationCapability::new();
            elicitation.form = Some(FormElicitationCapability::new());
            info.capabilities.elicitation = Some(elicitation);
        }
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            *self.last_question.lock().unwrap() = message;
        }
        Ok(match self.person {
            Person::Accepts => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": true}))
            }
            Person::Absent | Person::Declines => ElicitResult::new(ElicitationAction::Decline),
        })
    }
}

struct Served {
    env: TestEnv,
    client: RunningService<RoleClient, Client>,
    handler: Client,
    _known: agent_reach::exec::KnownChildGuard,
}

/// `serve --config registry.toml` (with `toml` written to it) and extra flags.
async fn serve(toml: Option<&str>, extra: &[&str], person: Person) -> Served {
    let env = TestEnv::new();
    let mut args: Vec<String> = Vec::new();
    if let Some(toml) = toml {
        let config = env.write("registry.toml", toml);
        args.extend(["--config".to_owned(), config.display().to_string()]);
    }
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (transport, _stderr) = TokioChildProcess::builder(server_command(&env, &args))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let known = agent_reach::exec::KnownChildGuard::register(transport.id().unwrap() as i32);
    let handler = Client {
        person,
        asked: Arc::default(),
        last_question: Arc::default(),
    };
    let client = handler.clone().serve(transport).await.unwrap();
    Served {
        env,
        client,
        handler,
        _known: known,
    }
}

impl Served {
    async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let params = CallToolRequestParams::new(tool.to_owned())
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        tokio::time::timeout(LIMIT, self.client.call_tool(params))
            .await
            .unwrap_or_else(|_| panic!("{tool} {args} did not answer in time"))
            .unwrap_or_else(|e| panic!("{tool} {args} failed at the protocol level: {e}"))
    }

    async fn tool_names(&self) -> Vec<String> {
        self.client
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.name.to_string())
            .collect()
    }
}

fn run<F: std::future::Future<Output = ()>>(f: F) {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            tokio::time::timeout(LIMIT * 2, f)
                .await
                .expect("test timed out")
        });
}

const RAW_OFF: &str = "[[tools]]\nname = \"hello\"\ncommand = [\"echo\", \"hi\"]\ncwd = \"project_root\"\nrisk = \"low\"\n";

#[test]
fn a_config_with_raw_commands_off_hides_and_refuses_the_shell_tools_and_apply_patch() {
    run(async {
        let s = serve(Some(RAW_OFF), &[], Person::Absent).await;
        let names = s.tool_names().await;
        for raw in [
            "exec_command",
            "write_stdin",
            "list_sessions",
            "kill_session",
            "apply_patch",
        ] {
            assert!(
                !names.contains(&raw.to_owned()),
                "{raw} is listed: {names:?}"
            );
        }
        assert!(names.contains(&"hello".to_owned()), "{names:?}");
        let patch = "*** Begin Patch\n*** Add File: made-by-patch.txt\n+x\n*** End Patch\n";
        let refused = s.call("apply_patch", json!({"input": patch})).await;
        assert_eq!(refused.is_error, Some(true));
        assert!(
            text_of(&refused).contains("raw_commands_disabled"),
            "{}",
            text_of(&refused)
        );
        assert!(!s.env.work().join("made-by-patch.txt").exists());
        let refused = s
            .call("exec_command", json!({"cmd": "touch made-by-model"}))
            .await;
        assert_eq!(refused.is_error, Some(true));
        assert!(
            text_of(&refused).contains("raw_commands_disabled"),
            "{}",
            text_of(&refused)
        );
        assert!(!s.env.work().join("made-by-model").exists());
    });
}

#[test]
fn exec_json_refuses_a_raw_command_when_raw_commands_are_off() {
    let env = TestEnv::new();
    let config = env.write("registry.toml", RAW_OFF);
    let out = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .arg("--root")
        .arg(env.work())
        .stdin(r#"{"id": 1, "command": ["touch", "made"]}"#)
        .run();
    out.code_is(1);
    let v = out.json();
    assert_eq!(v["status"], "rejected", "{v}");
    assert_eq!(v["error"]["kind"], "raw_commands_disabled", "{v}");
    assert!(!env.work().join("made").exists());
}

const READ_ONLY: &str = "allow_raw_commands = true\n[sandbox]\ndefault = \"read-only\"\n";

#[test]
fn a_read_only_default_sandbox_keeps_exec_command_from_writing_or_connecting() {
    crate::skip_unless!(
        feature = "landlock",
        crate::common::landlock_abi() >= 1,
        "the kernel has no Landlock"
    );
    run(async {
        let s = serve(Some(READ_ONLY), &[], Person::Absent).await;
        let write = s
            .call(
                "exec_command",
                json!({"cmd": "echo x > written.txt; echo rc=$?"}),
            )
            .await;
        let text = text_of(&write);
        assert!(text.contains("rc=1"), "{text}");
        assert!(
            !s.env.work().join("written.txt").exists(),
            "the project was written"
        );
        let sandbox = &write.structured_content.clone().unwrap()["sandbox"];
        assert_eq!(sandbox["fs"], "enforced", "{sandbox}");
        assert_eq!(sandbox["net"], "enforced", "{sandbox}");
        assert!(
            text.contains("Sandbox: fs enforced, net enforced"),
            "{text}"
        );
        // A listener the command could reach without the sandbox.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = s
            .call(
                "exec_command",
                json!({"cmd": format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected || echo refused")}),
            )
            .await;
        let text = text_of(&connect);
        assert!(
            text.contains("refused") && !text.contains("connected\n"),
            "{text}"
        );
        listener.set_nonblocking(true).unwrap();
        assert!(
            listener.accept().is_err(),
            "a connection reached the listener"
        );
    });
}

#[test]
fn apply_patch_under_a_read_only_policy_is_refused_and_writes_nothing() {
    run(async {
        let s = serve(Some(READ_ONLY), &[], Person::Absent).await;
        let patch = "*** Begin Patch\n*** Add File: patched.txt\n+x\n*** End Patch\n";
        let refused = s.call("apply_patch", json!({"input": patch})).await;
        assert_eq!(refused.is_error, Some(true));
        let text = text_of(&refused);
        assert!(text.contains("denied_by_policy"), "{text}");
        assert!(!s.env.work().join("patched.txt").exists());
    });
}

#[test]
fn apply_patch_cannot_be_pointed_out_of_the_root() {
    run(async {
        let s = serve(None, &[], Person::Absent).await;
        let outside = s.env.root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let patch = "*** Begin Patch\n*** Add File: planted.txt\n+x\n*** End Patch\n";
        for workdir in [outside.display().to_string(), "../outside".to_owned()] {
            let refused = s
                .call("apply_patch", json!({"input": patch, "workdir": workdir}))
                .await;
            assert_eq!(refused.is_error, Some(true), "{workdir}");
        }
        assert!(!outside.join("planted.txt").exists());
        let done = s.call("apply_patch", json!({"input": patch})).await;
        assert_ne!(done.is_error, Some(true), "{}", text_of(&done));
        assert!(s.env.work().join("planted.txt").exists());
    });
}

#[test]
fn a_request_for_a_wider_sandbox_than_the_default_is_refused() {
    crate::skip_unless!(
        feature = "landlock",
        crate::common::landlock_abi() >= 1,
        "the kernel has no Landlock"
    );
    run(async {
        let toml = "allow_raw_commands = true\n[sandbox]\ndefault = \"workspace-write\"\n";
        let s = serve(Some(toml), &[], Person::Absent).await;
        let wider = s
            .call(
                "exec_command",
                json!({"cmd": "touch /tmp/ar-widened", "sandbox": "danger-full-access"}),
            )
            .await;
        assert_eq!(wider.is_error, Some(true));
        assert!(
            text_of(&wider).contains("denied_by_policy"),
            "{}",
            text_of(&wider)
        );
        let narrower = s
            .call(
                "exec_command",
                json!({"cmd": "touch inside 2>/dev/null; echo rc=$?", "sandbox": "read-only"}),
            )
            .await;
        assert!(
            text_of(&narrower).contains("rc=1"),
            "{}",
            text_of(&narrower)
        );
        let default = s
            .call("exec_command", json!({"cmd": "touch inside && echo ok"}))
            .await;
        assert!(text_of(&default).contains("ok"), "{}", text_of(&default));
        assert!(s.env.work().join("inside").exists());
    });
}

#[test]
fn serve_sandbox_flag_is_the_default_of_exec_command() {
    crate::skip_unless!(
        feature = "landlock",
        crate::common::landlock_abi() >= 1,
        "the kernel has no Landlock"
    );
    run(async {
        let s = serve(None, &["--sandbox", "read-only"], Person::Absent).await;
        let write = s
            .call(
                "exec_command",
                json!({"cmd": "echo x > f 2>/dev/null; echo rc=$?"}),
            )
            .await;
        assert!(text_of(&write).contains("rc=1"), "{}", text_of(&write));
        assert!(!s.env.work().join("f").exists());
    });
}

fn deploy_registry(marker: &std::path::Path) -> String {
    format!(
        "[[tools]]\nname = \"deploy\"\ncommand = [\"touch\", \"{}\"]\ncwd = \"project_root\"\nrisk = \"high\"\ndescription = \"Deploy\"\n",
        marker.display()
    )
}

#[test]
fn the_models_own_approve_never_runs_a_high_risk_tool() {
    run(async {
        let marker = std::env::temp_dir().join(format!("ar-deploy-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let s = serve(Some(&deploy_registry(&marker)), &[], Person::Absent).await;
        let result = s.call("deploy", json!({"approve": true})).await;
        assert_eq!(result.is_error, Some(true));
        let v = result.structured_content.unwrap();
        assert_eq!(v["status"], "rejected", "{v}");
        assert_eq!(v["error"]["kind"], "approval_required", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("operator"),
            "{v}"
        );
        assert!(!marker.exists(), "the tool ran");
        assert_eq!(s.handler.asked.load(Ordering::SeqCst), 0);
    });
}

#[test]
fn a_high_risk_tool_runs_after_a_person_accepts_and_not_after_they_decline() {
    run(async {
        let marker = std::env::temp_dir().join(format!("ar-deploy-e-{}", std::process::id()));
        let _ = std::fs::remove_file(&marker);
        let declined = serve(Some(&deploy_registry(&marker)), &[], Person::Declines).await;
        let result = declined.call("deploy", json!({})).await;
        assert_eq!(result.is_error, Some(true), "{}", text_of(&result));
        assert_eq!(declined.handler.asked.load(Ordering::SeqCst), 1);
        assert!(!marker.exists(), "the tool ran after a decline");

        let accepted = serve(Some(&deploy_registry(&marker)), &[], Person::Accepts).await;
        let result = accepted.call("deploy", json!({})).await;
        assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
        assert_eq!(result.structured_content.unwrap()["status"], "success");
        assert_eq!(accepted.handler.asked.load(Ordering::SeqCst), 1);
        let question = accepted.handler.last_question.lock().unwrap().clone();
        assert!(
            question.contains("tool deploy") && question.contains("high"),
            "{question}"
        );
        assert!(
            question.contains(&marker.display().to_string()),
            "{question}"
        );
        assert!(marker.exists(), "the tool did not run after an accept");
        let _ = std::fs::remove_file(&marker);
    });
}

#[test]
fn raw_commands_risk_is_weighed_like_a_tools() {
    run(async {
        let toml = "allow_raw_commands = true\nraw_commands_risk = \"high\"\n";
        let absent = serve(Some(toml), &[], Person::Absent).await;
        let refused = absent.call("exec_command", json!({"cmd": "touch r"})).await;
        assert!(
            text_of(&refused).contains("approval_required"),
            "{}",
            text_of(&refused)
        );
        assert!(!absent.env.work().join("r").exists());
        let accepted = serve(Some(toml), &[], Person::Accepts).await;
        let ran = accepted
            .call("exec_command", json!({"cmd": "touch r && echo done"}))
            .await;
        assert!(text_of(&ran).contains("done"), "{}", text_of(&ran));
        let low = "allow_raw_commands = true\nmax_risk = \"low\"\n";
        let capped = serve(Some(low), &[], Person::Accepts).await;
        let denied = capped.call("exec_command", json!({"cmd": "true"})).await;
        assert!(
            text_of(&denied).contains("denied_by_policy"),
            "{}",
            text_of(&denied)
        );
    });
}

#[test]
fn exec_json_honours_approve_from_the_calling_program() {
    let env = TestEnv::new();
    let marker = env.work().join("deployed");
    let config = env.write("registry.toml", deploy_registry(&marker));
    let without = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .arg("--root")
        .arg(env.work())
        .stdin(r#"{"id": 1, "tool": "deploy"}"#)
        .run();
    assert_eq!(without.json()["error"]["kind"], "approval_required");
    assert!(!marker.exists());
    let with = env
        .cmd()
        .args(["exec", "--json", "--config"])
        .arg(&config)
        .arg("--root")
        .arg(env.work())
        .stdin(r#"{"id": 2, "tool": "deploy", "approve": true}"#)
        .run();
    with.success();
    assert!(marker.exists());
}

#[test]
fn the_built_in_registry_keeps_exec_command_unsandboxed() {
    run(async {
        let s = serve(None, &[], Person::Absent).await;
        assert!(s.tool_names().await.contains(&"exec_command".to_owned()));
        let result = s
            .call("exec_command", json!({"cmd": "touch here && echo made"}))
            .await;
        assert!(text_of(&result).contains("made"), "{}", text_of(&result));
        assert!(s.env.work().join("here").exists());
        assert!(result.structured_content.unwrap().get("sandbox").is_none());
    });
}
