//! From a request to a normalized result: policy (profile, max_risk,
//! approval, raw commands), validation (parameters, workdir), the run plan
//! (argv, env, secrets, sandbox, timeout), the cache, the scheduler, the
//! runner, metrics and logs — and every text that leaves redacted.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cache::{CacheKey, Lookup, ResultCache};
use super::confine::confine;
use super::engine_runner::EngineRunner;
use super::env::child_env;
use super::kinds;
use super::metrics::{Metrics, RAW_COMMAND_LABEL, UNKNOWN_TOOL_LABEL};
use super::model::{CwdPolicy, Risk, ToolSpec};
use super::params::{PathContext, expand, validate_extra, validate_named};
use super::request::{Args, Malformed, Request, Target};
use super::runner::{RunPlan, Runner};
use super::secrets::{SECRETS_FILE_VAR, SecretStore, SecretsError, redact_text};
use super::{Availability, Registry};
use crate::result::{NormalizedResult, Status};
use crate::sandbox::{Network, Policy, SandboxSpec};
use crate::scheduler::{Demand, Limits, Scheduler};

/// A tool without `timeout` is killed after this long.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(600);
/// A raw command without `timeout_ms` is killed after this long (as `run`).
pub const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// The output budget when a request names none (as `run`).
pub const DEFAULT_MAX_OUTPUT_TOKENS: usize = 10_000;

/// What the dispatcher needs from the process it runs in.
#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// The server's environment (after the session PATH entry was added).
    pub env: BTreeMap<OsString, OsString>,
    /// `$AGENT_REACH_HOME`.
    pub home: PathBuf,
    /// The argv prefix that starts the sandbox personality (the session's
    /// `agent-reach-sandbox` link, or the executable with `--agent-reach-run-as`).
    pub sandbox_prefix: Vec<OsString>,
}

impl DispatcherConfig {
    /// A config for a process that has a session PATH dir (`Session::start`).
    pub fn for_session(
        env: BTreeMap<OsString, OsString>,
        home: PathBuf,
        sandbox_link: PathBuf,
    ) -> Self {
        Self {
            env,
            home,
            sandbox_prefix: vec![sandbox_link.into_os_string()],
        }
    }
}

/// Why a dispatcher could not be built.
#[derive(Debug, thiserror::Error)]
pub enum DispatcherError {
    #[error(transparent)]
    Secrets(#[from] SecretsError),
}

/// Answers requests; shared by every task of a server (`Send + Sync`).
pub struct Dispatcher {
    registry: Arc<Registry>,
    config: DispatcherConfig,
    secrets: SecretStore,
    all_secrets: Vec<(String, Vec<u8>)>,
    scheduler: Scheduler,
    cache: ResultCache,
    metrics: Arc<Metrics>,
    runner: Arc<dyn Runner>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("root", &self.registry.root)
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

/// A request ready to run.
struct Prepared {
    label: String,
    tool: Option<String>,
    plan: RunPlan,
    demand: Demand,
    cache: Option<(CacheKey, Duration)>,
}

/// A request refused before running.
struct Refusal {
    status: Status,
    kind: &'static str,
    message: String,
    label: String,
}

fn reject(kind: &'static str, label: &str, message: String) -> Refusal {
    Refusal {
        status: Status::Rejected,
        kind,
        message,
        label: label.to_owned(),
    }
}

impl Dispatcher {
    /// A dispatcher that runs commands as child processes.
    pub fn new(registry: Registry, config: DispatcherConfig) -> Result<Self, DispatcherError> {
        Self::with_runner(registry, config, Arc::new(EngineRunner))
    }

    /// A dispatcher with its own runner (tests, other engines).
    pub fn with_runner(
        registry: Registry,
        config: DispatcherConfig,
        runner: Arc<dyn Runner>,
    ) -> Result<Self, DispatcherError> {
        let secrets_file = registry.settings.secrets_file.clone().or_else(|| {
            config
                .env
                .get(&OsString::from(SECRETS_FILE_VAR))
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        });
        let wanted: Vec<String> = registry
            .all_tools()
            .flat_map(|(tool, _)| tool.secrets.iter().cloned())
            .collect();
        let secrets = SecretStore::load(secrets_file.as_deref(), &config.env, wanted)?;
        let all_secrets = secrets.all();
        let scheduler_settings = &registry.settings.scheduler;
        let global = scheduler_settings
            .global
            .unwrap_or_else(Scheduler::default_global);
        let limits = Limits {
            global,
            queue: scheduler_settings.queue.unwrap_or(global * 8),
            groups: scheduler_settings.groups.clone(),
        };
        Ok(Self {
            registry: Arc::new(registry),
            config,
            secrets,
            all_secrets,
            scheduler: Scheduler::new(limits),
            cache: ResultCache::default(),
            metrics: Arc::new(Metrics::new()),
            runner,
        })
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    pub fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    /// Redacts every known secret from a text (for logs and messages).
    pub fn redact(&self, text: &str) -> String {
        redact_text(&self.all_secrets, text)
    }

    /// Answers one request line (JSON); a malformed line gets a `rejected` result.
    pub async fn handle_line(&self, line: &str) -> NormalizedResult {
        self.handle_parsed(Request::from_line(line)).await
    }

    /// Answers one JSON request.
    pub async fn handle_json(&self, value: &Value) -> NormalizedResult {
        self.handle_parsed(Request::from_json(value)).await
    }

    async fn handle_parsed(&self, parsed: Result<Request, Malformed>) -> NormalizedResult {
        match parsed {
            Ok(request) => self.handle(request).await,
            Err(malformed) => self.finish_refused(
                malformed.id,
                malformed.tool,
                reject(malformed.kind, UNKNOWN_TOOL_LABEL, malformed.message),
            ),
        }
    }

    /// Answers one request: always a normalized result, never a panic or a hang
    /// beyond the command's timeout.
    pub async fn handle(&self, request: Request) -> NormalizedResult {
        let tool_name = request.tool_name().map(str::to_owned);
        let prepared = match self.prepare(&request) {
            Ok(prepared) => prepared,
            Err(refusal) => return self.finish_refused(request.id, tool_name, refusal),
        };
        let mut leader = None;
        if let Some((key, ttl)) = &prepared.cache {
            let shared = match self.cache.lookup(key, *ttl) {
                Lookup::Hit(hit) => Some(*hit),
                Lookup::Wait(receiver) => receiver.await.ok(),
                Lookup::Lead(guard) => {
                    leader = Some(guard);
                    None
                }
            };
            if let Some(mut hit) = shared {
                hit.id = request.id;
                hit.cached = true;
                self.metrics
                    .record(&prepared.label, hit.status, true, Duration::ZERO);
                return hit;
            }
        }
        let permit = match self.scheduler.acquire(prepared.demand.clone()).await {
            Ok(permit) => permit,
            Err(busy) => {
                let mut result = self.finish_refused(
                    request.id,
                    tool_name,
                    Refusal {
                        status: Status::Busy,
                        kind: kinds::QUEUE_FULL,
                        message: busy.to_string(),
                        label: prepared.label,
                    },
                );
                if let Some(error) = &mut result.error {
                    error.retry_after_ms = Some(busy.retry_after_ms);
                }
                return result;
            }
        };
        tracing::debug!(
            tool = %prepared.label,
            argv = %self.redact(&format!("{:?}", prepared.plan.argv)),
            cwd = %prepared.plan.cwd.display(),
            "starting"
        );
        let started = Instant::now();
        let mut result = self.runner.run(prepared.plan).await;
        drop(permit);
        result.id = request.id;
        result.tool = prepared.tool;
        result.cached = false;
        self.scrub(&mut result);
        if let (Some(guard), Some((_, ttl))) = (leader, prepared.cache) {
            let keep = matches!(result.status, Status::Success | Status::Failure);
            guard.complete(ttl, &result, keep);
        }
        self.metrics
            .record(&prepared.label, result.status, false, started.elapsed());
        tracing::info!(
            tool = %prepared.label,
            status = ?result.status,
            exit_code = ?result.exit_code,
            duration_ms = result.duration_ms,
            "finished"
        );
        result
    }

    /// Redaction again at the edge: whatever produced the text, no known
    /// secret leaves in any field.
    fn scrub(&self, result: &mut NormalizedResult) {
        if self.all_secrets.is_empty() {
            return;
        }
        result.stdout = self.redact(&result.stdout);
        result.stderr = self.redact(&result.stderr);
        if let Some(error) = &mut result.error {
            error.message = self.redact(&error.message);
        }
    }

    fn finish_refused(
        &self,
        id: Option<Value>,
        tool: Option<String>,
        refusal: Refusal,
    ) -> NormalizedResult {
        let message = self.redact(&refusal.message);
        let label = if refusal.label == UNKNOWN_TOOL_LABEL {
            tool.as_deref()
                .filter(|name| self.registry.lookup(name).is_some())
                .unwrap_or(UNKNOWN_TOOL_LABEL)
                .to_owned()
        } else {
            refusal.label
        };
        self.metrics
            .record(&label, refusal.status, false, Duration::ZERO);
        tracing::info!(tool = %label, kind = refusal.kind, message = %message, "refused");
        let tool = tool.map(|t| self.redact(&t));
        NormalizedResult::refused(id, tool, refusal.status, refusal.kind, message)
    }

    fn prepare(&self, request: &Request) -> Result<Prepared, Refusal> {
        match &request.target {
            Target::Tool { name, args } => self.prepare_tool(request, name, args),
            Target::Command(argv) => self.prepare_command(request, argv),
        }
    }

    fn check_approval(
        &self,
        label: &str,
        what: &str,
        risk: Risk,
        approve: bool,
    ) -> Result<(), Refusal> {
        if risk >= self.registry.settings.approval && !approve {
            return Err(reject(
                kinds::APPROVAL_REQUIRED,
                label,
                format!(
                    "{what} has risk {risk}, which needs approval: resend the request with \"approve\": true"
                ),
            ));
        }
        Ok(())
    }

    fn prepare_tool(
        &self,
        request: &Request,
        name: &str,
        args: &Args,
    ) -> Result<Prepared, Refusal> {
        let settings = &self.registry.settings;
        let Some((tool, availability)) = self.registry.lookup(name) else {
            let known: Vec<&str> = self
                .registry
                .tools()
                .map(|t| t.name.as_str())
                .take(30)
                .collect();
            return Err(reject(
                kinds::UNKNOWN_TOOL,
                UNKNOWN_TOOL_LABEL,
                format!("no tool named {name:?} (tools: {})", known.join(", ")),
            ));
        };
        let label = tool.name.as_str();
        match availability {
            Availability::Available => {}
            Availability::DeniedByProfile(why) => {
                return Err(reject(kinds::DENIED_BY_PROFILE, label, why.clone()));
            }
            Availability::DeniedByPolicy(why) => {
                return Err(reject(kinds::DENIED_BY_POLICY, label, why.clone()));
            }
        }
        self.check_approval(label, &format!("tool {label}"), tool.risk, request.approve)?;
        let cwd = self.tool_cwd(tool, request.workdir.as_deref())?;
        let paths = PathContext {
            root: &self.registry.root,
            cwd: &cwd,
        };
        let empty = serde_json::Map::new();
        let (named, extra): (&serde_json::Map<String, Value>, &[String]) = match args {
            Args::Named(map) => (map, &[]),
            Args::List(list) => (&empty, list),
        };
        let values = validate_named(tool, named, paths)
            .map_err(|why| reject(kinds::INVALID_PARAMS, label, why))?;
        validate_extra(tool, extra).map_err(|why| reject(kinds::INVALID_PARAMS, label, why))?;
        let argv: Vec<OsString> = expand(tool, &values, extra)
            .into_iter()
            .map(OsString::from)
            .collect();
        let mut secrets = Vec::new();
        for secret in &tool.secrets {
            match self.secrets.get(secret) {
                Some(value) => secrets.push((secret.clone(), value.to_vec())),
                None => {
                    return Err(Refusal {
                        status: Status::Error,
                        kind: kinds::SECRET_UNAVAILABLE,
                        message: format!(
                            "tool {label} needs secret {secret}, which is set neither in the secrets file nor in the server's environment"
                        ),
                        label: label.to_owned(),
                    });
                }
            }
        }
        let tty = request.tty.unwrap_or(tool.interactive);
        let tag = crate::exec::new_session_tag();
        let env = child_env(
            &self.config.env,
            &tool.env,
            &settings.env,
            &secrets,
            tty,
            &tag,
        );
        let tool_timeout = tool.timeout.unwrap_or(DEFAULT_TOOL_TIMEOUT);
        let timeout = match request.timeout_ms {
            Some(ms) if ms > 0 => Duration::from_millis(ms).min(tool_timeout),
            _ => tool_timeout,
        };
        let policy = tool
            .sandbox
            .clone()
            .or_else(|| settings.sandbox.default.clone());
        let (wrapper, attestation_file) = self
            .sandbox_wrapper(policy.as_deref(), tool.network, &cwd, &tag)
            .map_err(|r| Refusal {
                label: label.to_owned(),
                ..r
            })?;
        let cache = tool.cache_ttl.map(|ttl| {
            (
                CacheKey {
                    tool: tool.name.clone(),
                    argv: argv.clone(),
                    cwd: cwd.clone(),
                    tty,
                },
                ttl,
            )
        });
        let mut all_secrets = self.all_secrets.clone();
        all_secrets.extend(secrets);
        Ok(Prepared {
            label: label.to_owned(),
            tool: Some(tool.name.clone()),
            plan: RunPlan {
                argv,
                cwd,
                env,
                tty,
                timeout: Some(timeout),
                wrapper,
                attestation_file,
                secrets: all_secrets,
                max_output_tokens: request
                    .max_output_tokens
                    .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
                home: self.config.home.clone(),
                session_tag: tag,
            },
            demand: Demand {
                group: tool.group.clone(),
                exclusive: tool.exclusive.clone(),
                priority: request.priority,
            },
            cache,
        })
    }

    fn prepare_command(&self, request: &Request, argv: &[String]) -> Result<Prepared, Refusal> {
        let settings = &self.registry.settings;
        let label = RAW_COMMAND_LABEL;
        if !settings.allow_raw_commands {
            return Err(reject(
                kinds::RAW_COMMANDS_DISABLED,
                label,
                "raw `command` requests are disabled; use a registry tool (the operator can set allow_raw_commands = true)".to_owned(),
            ));
        }
        if settings.raw_commands_risk > settings.max_risk {
            return Err(reject(
                kinds::DENIED_BY_POLICY,
                label,
                format!(
                    "raw commands count as risk {} and the active policy allows at most {}",
                    settings.raw_commands_risk, settings.max_risk
                ),
            ));
        }
        self.check_approval(
            label,
            "a raw command",
            settings.raw_commands_risk,
            request.approve,
        )?;
        let cwd = self.caller_cwd(request.workdir.as_deref(), label)?;
        let tty = request.tty.unwrap_or(false);
        let tag = crate::exec::new_session_tag();
        let env = child_env(&self.config.env, &[], &settings.env, &[], tty, &tag);
        let timeout = match request.timeout_ms {
            None => Some(DEFAULT_COMMAND_TIMEOUT),
            Some(0) => None,
            Some(ms) => Some(Duration::from_millis(ms)),
        };
        let (wrapper, attestation_file) = self
            .sandbox_wrapper(settings.sandbox.default.as_deref(), false, &cwd, &tag)
            .map_err(|r| Refusal {
                label: label.to_owned(),
                ..r
            })?;
        Ok(Prepared {
            label: label.to_owned(),
            tool: None,
            plan: RunPlan {
                argv: argv.iter().map(OsString::from).collect(),
                cwd,
                env,
                tty,
                timeout,
                wrapper,
                attestation_file,
                secrets: self.all_secrets.clone(),
                max_output_tokens: request
                    .max_output_tokens
                    .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
                home: self.config.home.clone(),
                session_tag: tag,
            },
            demand: Demand {
                group: None,
                exclusive: None,
                priority: request.priority,
            },
            cache: None,
        })
    }

    /// A directory given by the caller, inside the project root.
    fn caller_cwd(&self, workdir: Option<&Path>, label: &str) -> Result<PathBuf, Refusal> {
        let root = &self.registry.root;
        let Some(workdir) = workdir else {
            return Ok(root.clone());
        };
        let dir = confine(root, root, workdir)
            .map_err(|e| reject(kinds::INVALID_WORKDIR, label, format!("workdir: {e}")))?;
        if !dir.is_dir() {
            return Err(reject(
                kinds::INVALID_WORKDIR,
                label,
                format!("workdir {} is not an existing directory", workdir.display()),
            ));
        }
        Ok(dir)
    }

    fn tool_cwd(&self, tool: &ToolSpec, workdir: Option<&Path>) -> Result<PathBuf, Refusal> {
        let root = &self.registry.root;
        let label = tool.name.as_str();
        let fixed = match &tool.cwd {
            CwdPolicy::Caller => return self.caller_cwd(workdir, label),
            CwdPolicy::ProjectRoot => root.clone(),
            CwdPolicy::Fixed(path) => {
                let dir = root.join(path);
                dir.canonicalize()
                    .ok()
                    .filter(|d| d.is_dir())
                    .ok_or_else(|| Refusal {
                        status: Status::Error,
                        kind: kinds::INVALID_WORKDIR,
                        message: format!(
                            "tool {label} runs in {}, which is not an existing directory",
                            dir.display()
                        ),
                        label: label.to_owned(),
                    })?
            }
        };
        if let Some(workdir) = workdir {
            let asked = confine(root, root, workdir).ok();
            if asked.as_deref() != Some(fixed.as_path()) {
                return Err(reject(
                    kinds::INVALID_WORKDIR,
                    label,
                    format!(
                        "tool {label} always runs in {} (cwd = {}); leave out workdir",
                        fixed.display(),
                        tool.cwd
                    ),
                ));
            }
        }
        Ok(fixed)
    }

    /// The sandbox argv prefix and its report file, when a policy applies.
    fn sandbox_wrapper(
        &self,
        policy: Option<&str>,
        network: bool,
        cwd: &Path,
        tag: &str,
    ) -> Result<(Vec<OsString>, Option<PathBuf>), Refusal> {
        let Some(policy) = policy else {
            return Ok((Vec::new(), None));
        };
        let settings = &self.registry.settings.sandbox;
        let policy: Policy =
            policy
                .parse()
                .map_err(|err: crate::sandbox::UnknownName| Refusal {
                    status: Status::Error,
                    kind: kinds::SPAWN_FAILED,
                    message: err.to_string(),
                    label: String::new(),
                })?;
        let spec = SandboxSpec {
            policy,
            writable_roots: settings
                .writable_roots
                .iter()
                .map(|r| self.registry.root.join(r))
                .collect(),
            network: if network {
                Network::Allow
            } else {
                Network::Deny
            },
            best_effort: settings.best_effort,
        };
        let report = self
            .config
            .home
            .join("tmp")
            .join(format!("sandbox-{tag}.json"));
        let _ = std::fs::create_dir_all(self.config.home.join("tmp"));
        let Some((link, extra)) = self.config.sandbox_prefix.split_first() else {
            return Ok((Vec::new(), None));
        };
        let mut argv = spec.wrapper_argv(Path::new(link), cwd, Some(&report));
        // A prefix like `exe --agent-reach-run-as=agent-reach-sandbox` keeps its
        // extra words right after the program.
        for (i, word) in extra.iter().enumerate() {
            argv.insert(1 + i, word.clone());
        }
        Ok((argv, Some(report)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::runner::RunFuture;
    use serde_json::json;
    use std::sync::Mutex;

    /// Records plans and answers after a delay, without processes.
    #[derive(Default)]
    struct FakeRunner {
        plans: Mutex<Vec<RunPlan>>,
        delay: Duration,
    }

    impl Runner for FakeRunner {
        fn run(&self, plan: RunPlan) -> RunFuture<'_> {
            Box::pin(async move {
                self.plans.lock().unwrap().push(plan.clone());
                tokio::time::sleep(self.delay).await;
                let mut result = NormalizedResult::refused(None, None, Status::Success, "", "");
                result.error = None;
                result.exit_code = Some(0);
                result.stdout = format!("ran {:?}", plan.argv);
                result
            })
        }
    }

    fn dispatcher(toml: &str, runner: Arc<FakeRunner>) -> (tempfile::TempDir, Dispatcher) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.toml");
        std::fs::write(&file, toml).unwrap();
        let registry = Registry::load(Some(&file), None, dir.path()).unwrap();
        let env: BTreeMap<OsString, OsString> = [
            ("PATH".into(), "/bin".into()),
            ("TOKEN".into(), "s3cr3t-token".into()),
        ]
        .into();
        let config = DispatcherConfig {
            env,
            home: dir.path().join("home"),
            sandbox_prefix: vec!["/s/agent-reach-sandbox".into()],
        };
        (
            dir,
            Dispatcher::with_runner(registry, config, runner).unwrap(),
        )
    }

    const TOOLS: &str = r#"
[scheduler]
global = 1
queue = 2
[[tools]]
name = "t"
command = ["prog", "--n={n}", "{files}"]
cwd = "project_root"
risk = "low"
secrets = ["TOKEN"]
sandbox = "read-only"
timeout = 5
params = [{ name = "n", type = "integer", default = 3 }, { name = "files", type = "list" }]
"#;

    #[test]
    fn dispatcher_can_be_shared_across_tasks() {
        fn shared<T: Send + Sync + 'static>() {}
        shared::<Dispatcher>();
        shared::<Request>();
    }

    #[tokio::test]
    async fn a_plan_carries_argv_env_secrets_sandbox_and_timeout() {
        let runner = Arc::new(FakeRunner::default());
        let (dir, d) = dispatcher(TOOLS, runner.clone());
        let result = d
            .handle_json(
                &json!({"id": 1, "tool": "t", "args": {"files": ["a", "b"]}, "timeout_ms": 60000}),
            )
            .await;
        assert_eq!(result.status, Status::Success, "{result:?}");
        let plan = runner.plans.lock().unwrap()[0].clone();
        assert_eq!(plan.argv, ["prog", "--n=3", "a", "b"].map(OsString::from));
        assert_eq!(
            plan.env.get(&OsString::from("TOKEN")),
            Some(&OsString::from("s3cr3t-token"))
        );
        assert!(plan.secrets.iter().any(|(n, _)| n == "TOKEN"));
        assert_eq!(
            plan.timeout,
            Some(Duration::from_secs(5)),
            "a request cannot raise the tool's timeout"
        );
        assert_eq!(plan.wrapper[0], "/s/agent-reach-sandbox");
        assert!(plan.wrapper.contains(&OsString::from("read-only")));
        assert_eq!(plan.wrapper.last().unwrap(), "--");
        assert_eq!(plan.cwd, dir.path().canonicalize().unwrap());
    }

    #[tokio::test]
    async fn busy_is_answered_in_under_ten_milliseconds() {
        let runner = Arc::new(FakeRunner {
            delay: Duration::from_millis(500),
            ..FakeRunner::default()
        });
        let (_dir, d) = dispatcher(TOOLS, runner);
        let d = Arc::new(d);
        let mut held = Vec::new();
        for i in 0..3 {
            let d = d.clone();
            held.push(tokio::spawn(async move {
                d.handle_json(&json!({"id": i, "tool": "t"})).await
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = Instant::now();
        let busy = d.handle_json(&json!({"id": "x", "tool": "t"})).await;
        let took = started.elapsed();
        assert_eq!(busy.status, Status::Busy);
        assert!(took < Duration::from_millis(10), "busy took {took:?}");
        assert!(busy.error.unwrap().retry_after_ms.unwrap() > 0);
        for task in held {
            assert_eq!(task.await.unwrap().status, Status::Success);
        }
        let counts = &d.metrics().snapshot()["t"];
        assert_eq!((counts.runs, counts.busy), (3, 1));
    }

    #[tokio::test]
    async fn identical_requests_in_flight_share_one_run() {
        let toml = "[[tools]]\nname = \"c\"\ncommand = [\"x\"]\ncwd = \"project_root\"\nrisk = \"low\"\ncache_ttl = 60\n";
        let runner = Arc::new(FakeRunner {
            delay: Duration::from_millis(200),
            ..FakeRunner::default()
        });
        let (_dir, d) = dispatcher(toml, runner.clone());
        let d = Arc::new(d);
        let tasks: Vec<_> = (0..5)
            .map(|i| {
                let d = d.clone();
                tokio::spawn(async move { d.handle_json(&json!({"id": i, "tool": "c"})).await })
            })
            .collect();
        let mut cached = 0;
        for (i, task) in tasks.into_iter().enumerate() {
            let result = task.await.unwrap();
            assert_eq!(result.status, Status::Success);
            assert_eq!(result.id, Some(json!(i)));
            cached += usize::from(result.cached);
        }
        assert_eq!(
            runner.plans.lock().unwrap().len(),
            1,
            "one run for five identical requests"
        );
        assert_eq!(cached, 4);
        let later = d.handle_json(&json!({"id": "later", "tool": "c"})).await;
        assert!(later.cached);
    }

    #[tokio::test]
    async fn secrets_never_appear_in_messages() {
        let runner = Arc::new(FakeRunner::default());
        let (_dir, d) = dispatcher(TOOLS, runner);
        let result = d
            .handle_json(&json!({"id": 1, "tool": "t", "args": {"n": "s3cr3t-token"}}))
            .await;
        let message = result.error.unwrap().message;
        assert!(!message.contains("s3cr3t-token") || message.contains("[REDACTED:TOKEN]"));
        assert!(!message.contains("s3cr3t-token"), "{message}");
        let unknown = d.handle_json(&json!({"tool": "s3cr3t-token"})).await;
        assert_eq!(unknown.tool.as_deref(), Some("[REDACTED:TOKEN]"));
        assert!(!unknown.error.unwrap().message.contains("s3cr3t-token"));
    }
}
