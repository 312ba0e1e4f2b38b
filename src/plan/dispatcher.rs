//! One-shot requests from start to result: the plan stage
//! ([`super::Planner`]), the cache, the scheduler, the runner, metrics and
//! logs — and every text that leaves redacted.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::request::{Malformed, Request};
use super::runner::{EngineRunner, Runner};
use super::{Door, Planner, PlannerConfig, Rejection};
use crate::logging::{self, ExecutionRecord};
use crate::registry::Registry;
use crate::registry::cache::{Lookup, ResultCache};
use crate::registry::kinds;
use crate::registry::metrics::{Metrics, Probe, UNKNOWN_TOOL_LABEL};
use crate::registry::secrets::{SecretStore, SecretsError, redact_text};
use crate::result::{NormalizedResult, Status};
use crate::scheduler::{Admission, Busy, Limits, Scheduler};

/// What the dispatcher needs from the process it runs in.
#[derive(Debug, Clone)]
pub(crate) struct DispatcherConfig {
    /// The server's environment (after the session PATH entry was added).
    pub(crate) env: BTreeMap<OsString, OsString>,
    /// `$AGENT_REACH_HOME`.
    pub(crate) home: PathBuf,
    /// The argv prefix that starts the sandbox personality (the session's
    /// `agent-reach-sandbox` link, or the executable with `--agent-reach-run-as`).
    pub(crate) sandbox_prefix: Vec<OsString>,
    /// The argv prefix that starts the apply_patch personality.
    pub(crate) apply_patch_prefix: Vec<OsString>,
    /// A cgroup per command where the machine allows.
    pub(crate) use_cgroup: bool,
    /// `serve --sandbox`: replaces the registry's `[sandbox] default`.
    pub(crate) sandbox_override: Option<crate::sandbox::Policy>,
    /// Files a sandboxed command must not read besides the secrets file
    /// (`serve --token-file`).
    pub(crate) hidden_paths: Vec<PathBuf>,
}

impl DispatcherConfig {
    /// A config for a process that has a session PATH dir (`ProcessSession::start`).
    pub(crate) fn for_session(
        env: BTreeMap<OsString, OsString>,
        home: PathBuf,
        path_dir: &std::path::Path,
        use_cgroup: bool,
    ) -> Self {
        Self {
            env,
            home,
            sandbox_prefix: vec![path_dir.join("agent-reach-sandbox").into_os_string()],
            apply_patch_prefix: vec![path_dir.join("apply_patch").into_os_string()],
            use_cgroup,
            sandbox_override: None,
            hidden_paths: Vec::new(),
        }
    }
}

/// Why a dispatcher could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DispatcherError {
    #[error(transparent)]
    Secrets(#[from] SecretsError),
}

/// Answers requests; shared by every task of a server (`Send + Sync`).
pub(crate) struct Dispatcher {
    /// The registry and the planner over it, swapped whole by a reload
    /// (`SIGHUP`): a request plans under one or the other, never a mix, and
    /// a command keeps the plan it started with.
    loaded: RwLock<Loaded>,
    /// What a reload builds the next planner with.
    config: DispatcherConfig,
    scheduler: Scheduler,
    cache: Arc<ResultCache>,
    metrics: Arc<Metrics>,
    runner: Arc<dyn Runner>,
}

/// One loaded registry and the planner over it.
struct Loaded {
    registry: Arc<Registry>,
    planner: Arc<Planner>,
}

impl Loaded {
    /// The planner over `registry` for a process configured by `config`:
    /// its secrets loaded, the files a sandboxed command must not read.
    fn new(registry: Registry, config: &DispatcherConfig) -> Result<Self, DispatcherError> {
        let (secrets, secrets_file) = SecretStore::for_registry(&registry, &config.env)?;
        // Absolute: the wrapper resolves them from the command's directory.
        let hidden_paths = config
            .hidden_paths
            .iter()
            .cloned()
            .chain(secrets_file)
            .map(|path| std::path::absolute(&path).unwrap_or(path))
            .collect();
        let registry = Arc::new(registry);
        let planner = Planner::new(
            registry.clone(),
            PlannerConfig {
                env: config.env.clone(),
                home: config.home.clone(),
                sandbox_prefix: config.sandbox_prefix.clone(),
                apply_patch_prefix: config.apply_patch_prefix.clone(),
                use_cgroup: config.use_cgroup,
                hidden_paths,
            },
            secrets,
            config.sandbox_override,
        );
        Ok(Self {
            registry,
            planner: Arc::new(planner),
        })
    }
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("root", &self.registry().root)
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A dispatcher that runs commands as child processes.
    pub(crate) fn new(
        registry: Registry,
        config: DispatcherConfig,
    ) -> Result<Self, DispatcherError> {
        Self::with_runner(registry, config, Arc::new(EngineRunner))
    }

    /// A dispatcher with its own runner (tests, other engines).
    pub(crate) fn with_runner(
        registry: Registry,
        config: DispatcherConfig,
        runner: Arc<dyn Runner>,
    ) -> Result<Self, DispatcherError> {
        let scheduler_settings = &registry.settings.scheduler;
        let global = scheduler_settings
            .global
            .unwrap_or_else(crate::exec::default_global_limit);
        let limits = Limits {
            global,
            queue: scheduler_settings.queue.unwrap_or(global * 8),
            groups: scheduler_settings.groups.clone(),
            per_caller: scheduler_settings.per_caller,
        };
        let scheduler = Scheduler::machine_wide(limits, &config.home);
        let cache = Arc::new(ResultCache::shared(&config.home));
        let loaded = Loaded::new(registry, &config)?;
        let metrics = Arc::new(Metrics::new());
        let watched = scheduler.clone();
        metrics.watch_load(Probe::new(move || {
            let load = watched.load();
            crate::registry::metrics::Load {
                running: load.running,
                queued: load.queued,
            }
        }));
        Ok(Self {
            loaded: RwLock::new(loaded),
            config,
            scheduler,
            cache,
            metrics,
            runner,
        })
    }

    /// Swaps in `registry` (a `SIGHUP` reload): requests planned from now
    /// on plan under it; commands running keep the plan they started with.
    /// A registry whose secrets do not load is refused and the old one
    /// stays. The cache is emptied (its tools may have changed). The
    /// scheduler's limits are the ones the process started with.
    pub(crate) fn reload(&self, registry: Registry) -> Result<(), DispatcherError> {
        let scheduler_changed = registry.settings.scheduler != self.registry().settings.scheduler;
        let loaded = Loaded::new(registry, &self.config)?;
        *self
            .loaded
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = loaded;
        self.cache.clear();
        if scheduler_changed {
            tracing::warn!(
                "the reloaded registry changes [scheduler]: its limits apply from the next start"
            );
        }
        Ok(())
    }

    fn loaded(&self) -> std::sync::RwLockReadGuard<'_, Loaded> {
        self.loaded
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The registry loaded now.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.loaded().registry.clone()
    }

    /// The planner over the registry loaded now.
    pub(crate) fn planner(&self) -> Arc<Planner> {
        self.loaded().planner.clone()
    }

    /// The scheduler every command of this process takes its slot from.
    pub(crate) fn scheduler(&self) -> &Scheduler {
        &self.scheduler
    }

    pub(crate) fn metrics(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }

    /// Redacts every known secret from a text (for logs and messages).
    pub(crate) fn redact(&self, text: &str) -> String {
        redact_text(self.planner().all_secrets(), text)
    }

    /// Answers one request line (JSON) of `exec`; a malformed line gets a
    /// `rejected` result.
    pub(crate) async fn handle_line(&self, line: &str) -> NormalizedResult {
        let admitted = self.admit_line(line);
        self.finish(admitted).await
    }

    /// Plans one request line of `exec` and takes its place in the queue,
    /// without waiting: a stream admits its lines in the order it read them
    /// (then [`Self::finish`] each, concurrently).
    pub(crate) fn admit_line(&self, line: &str) -> Admitted {
        self.admit_parsed(Request::from_line(line), Door::Exec)
    }

    /// Answers one JSON request of `exec` (the tests' way in).
    #[cfg(test)]
    pub(crate) async fn handle_json(&self, value: &Value) -> NormalizedResult {
        let admitted = self.admit_parsed(Request::from_json(value), Door::Exec);
        self.finish(admitted).await
    }

    fn admit_parsed(&self, parsed: Result<Request, Malformed>, door: Door) -> Admitted {
        match parsed {
            Ok(request) => self.admit_request(request, door, crate::scheduler::LOCAL_CALLER),
            Err(malformed) => Admitted::Done(Box::new(self.finish_refused(
                malformed.id,
                malformed.tool,
                UNKNOWN_TOOL_LABEL,
                Rejection::rejected(malformed.kind, malformed.message),
                door,
            ))),
        }
    }

    /// Answers one request of `caller` from `door`: always a normalized
    /// result, never a panic or a hang beyond the command's timeout. Callers
    /// take turns in the scheduler, and the log line says who asked.
    pub(crate) async fn handle_as(
        &self,
        request: Request,
        door: Door,
        caller: &str,
    ) -> NormalizedResult {
        let admitted = self.admit_request(request, door, caller);
        self.finish(admitted).await
    }

    fn admit_request(&self, request: Request, door: Door, caller: &str) -> Admitted {
        match self.planner().plan(&request, door) {
            Ok(mut plan) => {
                plan.demand.caller = caller.to_owned();
                plan.background = request.background.clone();
                self.admit(request.id, plan, door)
            }
            Err(rejection) => {
                let label = match &request.target {
                    super::Target::Tool { .. } => UNKNOWN_TOOL_LABEL,
                    super::Target::Command(_) => crate::registry::metrics::RAW_COMMAND_LABEL,
                    super::Target::ApplyPatch { .. } => super::command::APPLY_PATCH_LABEL,
                };
                let tool = request.tool_name().map(str::to_owned);
                Admitted::Done(Box::new(
                    self.finish_refused(request.id, tool, label, rejection, door),
                ))
            }
        }
    }

    /// Runs a plan to its result: the cache, the scheduler, the engine.
    pub(crate) async fn run(
        &self,
        id: Option<Value>,
        plan: super::Plan,
        door: Door,
    ) -> NormalizedResult {
        let admitted = self.admit(id, plan, door);
        self.finish(admitted).await
    }

    /// The synchronous half of [`Self::run`]: the cache is looked up and the
    /// scheduler gives the plan its place (or `busy`), in the caller's order.
    pub(crate) fn admit(&self, id: Option<Value>, plan: super::Plan, door: Door) -> Admitted {
        let door = door_name(door);
        let mut leader = None;
        if let Some(cacheable) = &plan.cache {
            match self.cache.lookup(&cacheable.key, cacheable.ttl) {
                Lookup::Hit(hit) => {
                    return Admitted::Done(Box::new(self.cached_answer(id, &plan, *hit, door)));
                }
                Lookup::Wait(receiver) => {
                    return Admitted::Shared(Box::new(SharedRun {
                        id,
                        plan,
                        receiver,
                        door,
                    }));
                }
                Lookup::Lead(guard) => leader = Some(guard),
            }
        }
        self.queue(id, plan, leader, door)
    }

    fn queue(
        &self,
        id: Option<Value>,
        plan: super::Plan,
        leader: Option<crate::registry::cache::LeaderGuard>,
        door: &'static str,
    ) -> Admitted {
        match self.scheduler.admit(plan.demand.clone()) {
            Ok(admission) => Admitted::Queued(Box::new(QueuedRun {
                id,
                plan,
                leader,
                admission,
                door,
                admitted_at: Instant::now(),
            })),
            Err(busy) => Admitted::Done(Box::new(self.busy(id, &plan, busy, door))),
        }
    }

    /// The asynchronous half of [`Self::run`]: waits for the turn, runs.
    pub(crate) async fn finish(&self, admitted: Admitted) -> NormalizedResult {
        match admitted {
            Admitted::Done(result) => *result,
            Admitted::Shared(shared) => {
                let SharedRun {
                    id,
                    plan,
                    receiver,
                    door,
                } = *shared;
                match receiver.await {
                    Ok(hit) => self.cached_answer(id, &plan, hit, door),
                    // The leader went away: run it ourselves, uncached.
                    Err(_) => {
                        let admitted = self.queue(id, plan, None, door);
                        Box::pin(self.finish(admitted)).await
                    }
                }
            }
            Admitted::Queued(queued) => self.run_queued(*queued).await,
        }
    }

    fn cached_answer(
        &self,
        id: Option<Value>,
        plan: &super::Plan,
        mut hit: NormalizedResult,
        door: &str,
    ) -> NormalizedResult {
        hit.id = id;
        hit.cached = true;
        hit.capped = cap_names(&plan.capped);
        self.metrics
            .record(&plan.label, hit.status, true, Duration::ZERO);
        self.log(door, &LoggedPlan::of(plan), &hit, Duration::ZERO);
        hit
    }

    /// The one log record of a request that reached the scheduler or the
    /// cache (refusals are logged by [`Self::finish_refused`]).
    fn log(&self, door: &str, plan: &LoggedPlan, result: &NormalizedResult, queue: Duration) {
        let mut record =
            ExecutionRecord::now(door, &plan.caller, &plan.cwd, status_name(result.status));
        match &plan.tool {
            Some(tool) => record.tool = Some(tool.clone()),
            None => {
                record.argv = Some(
                    plan.argv
                        .iter()
                        .map(|arg| self.redact(&arg.to_string_lossy()))
                        .collect(),
                );
            }
        }
        fill_record(&mut record, result, queue);
        logging::record(&record);
    }

    fn busy(
        &self,
        id: Option<Value>,
        plan: &super::Plan,
        busy: Busy,
        door: &str,
    ) -> NormalizedResult {
        let mut result = self.refused_quietly(
            id,
            plan.tool.clone(),
            &plan.label,
            Rejection {
                status: Status::Busy,
                ..Rejection::rejected(kinds::QUEUE_FULL, busy.to_string())
            },
        );
        if let Some(error) = &mut result.error {
            error.retry_after_ms = Some(busy.retry_after_ms);
        }
        self.log(door, &LoggedPlan::of(plan), &result, Duration::ZERO);
        result
    }

    async fn run_queued(&self, queued: QueuedRun) -> NormalizedResult {
        let QueuedRun {
            id,
            plan,
            leader,
            admission,
            door,
            admitted_at,
        } = queued;
        // A remote caller is answered within the door's wait: `busy` with
        // `retry_after_ms` rather than silence while others hold the slots.
        let waited = if door == door_name(Door::Listener) {
            admission
                .permit_within(crate::scheduler::DOOR_SLOT_WAIT)
                .await
        } else {
            admission.permit().await
        };
        let permit = match waited {
            Ok(permit) => permit,
            Err(busy) => return self.busy(id, &plan, busy, door),
        };
        let queue = admitted_at.elapsed();
        self.metrics.record_queue_wait(queue);
        let logged = LoggedPlan::of(&plan);
        tracing::debug!(
            tool = %plan.label,
            argv = %self.redact(&format!("{:?}", plan.spec.argv)),
            cwd = %plan.spec.cwd.display(),
            "starting"
        );
        let started = Instant::now();
        let super::Plan {
            spec,
            render,
            label,
            tool,
            cache,
            report,
            capped,
            background,
            ..
        } = plan;
        let mut result = self.runner.run(spec, render, background).await;
        drop(report);
        drop(permit);
        result.id = id;
        result.tool = tool;
        result.cached = false;
        result.capped = cap_names(&capped);
        self.scrub(&mut result);
        if let (Some(guard), Some(cacheable)) = (leader, cache) {
            // A failure is kept only where the operator asked for it.
            let keep = result.status == Status::Success
                || (result.status == Status::Failure && cacheable.keep_failures);
            guard.complete(cacheable.ttl, &result, keep);
        }
        self.metrics
            .record(&label, result.status, false, started.elapsed());
        self.log(door, &logged, &result, queue);
        result
    }

    /// Redaction again at the edge: whatever produced the text, no known
    /// secret leaves in any field.
    fn scrub(&self, result: &mut NormalizedResult) {
        let planner = self.planner();
        let secrets = planner.all_secrets();
        if secrets.is_empty() {
            return;
        }
        result.stdout = redact_text(secrets, &result.stdout);
        result.stderr = redact_text(secrets, &result.stderr);
        for highlight in &mut result.highlights {
            highlight.text = redact_text(secrets, &highlight.text);
        }
        if let Some(error) = &mut result.error {
            error.message = redact_text(secrets, &error.message);
        }
    }

    /// The result of a refused request, counted and logged.
    pub(crate) fn finish_refused(
        &self,
        id: Option<Value>,
        tool: Option<String>,
        label: &str,
        rejection: Rejection,
        door: Door,
    ) -> NormalizedResult {
        let result = self.refused_quietly(id, tool, label, rejection);
        let mut record = ExecutionRecord::now(
            door_name(door),
            crate::scheduler::LOCAL_CALLER,
            &self.registry().root,
            status_name(result.status),
        );
        record.tool = result.tool.clone();
        fill_record(&mut record, &result, Duration::ZERO);
        logging::record(&record);
        result
    }

    /// The result of a refused request, counted (the caller logs it).
    fn refused_quietly(
        &self,
        id: Option<Value>,
        tool: Option<String>,
        label: &str,
        rejection: Rejection,
    ) -> NormalizedResult {
        let message = self.redact(&rejection.message);
        let label = if label == UNKNOWN_TOOL_LABEL {
            tool.as_deref()
                .filter(|name| self.registry().lookup(name).is_some())
                .unwrap_or(UNKNOWN_TOOL_LABEL)
                .to_owned()
        } else {
            label.to_owned()
        };
        self.metrics
            .record(&label, rejection.status, false, Duration::ZERO);
        tracing::debug!(tool = %label, kind = rejection.kind, message = %message, "refused");
        let tool = tool.map(|t| self.redact(&t));
        NormalizedResult::refused(id, tool, rejection.status, rejection.kind, message)
    }
}

/// A request planned and admitted, not yet answered ([`Dispatcher::finish`]).
pub(crate) enum Admitted {
    /// Answered already (refused, busy, or from the cache).
    Done(Box<NormalizedResult>),
    /// An identical request runs: its result will be this one's.
    Shared(Box<SharedRun>),
    /// Started, or waiting for its turn.
    Queued(Box<QueuedRun>),
}

/// A request waiting for an identical one's result.
pub(crate) struct SharedRun {
    id: Option<Value>,
    plan: super::Plan,
    receiver: tokio::sync::oneshot::Receiver<NormalizedResult>,
    door: &'static str,
}

/// A request with its place in the scheduler.
pub(crate) struct QueuedRun {
    id: Option<Value>,
    plan: super::Plan,
    leader: Option<crate::registry::cache::LeaderGuard>,
    admission: Admission,
    door: &'static str,
    admitted_at: Instant,
}

/// What the log says of a plan, kept when its spec goes to the runner.
struct LoggedPlan {
    tool: Option<String>,
    argv: Vec<OsString>,
    cwd: PathBuf,
    caller: String,
}

impl LoggedPlan {
    fn of(plan: &super::Plan) -> Self {
        Self {
            tool: plan.tool.clone(),
            argv: plan.spec.argv.clone(),
            cwd: plan.spec.cwd.clone(),
            caller: plan.demand.caller.clone(),
        }
    }
}

/// The door's name in the logs.
fn door_name(door: Door) -> &'static str {
    match door {
        Door::Run => "run",
        Door::Exec => "exec",
        Door::Mcp { .. } => "mcp",
        Door::Listener => "listener",
    }
}

/// A status as the normalized result spells it.
fn status_name(status: Status) -> &'static str {
    match status {
        Status::Success => "success",
        Status::Failure => "failure",
        Status::Timeout => "timeout",
        Status::Rejected => "rejected",
        Status::Busy => "busy",
        Status::Error => "error",
    }
}

/// The record's fields that come from the result.
fn fill_record(record: &mut ExecutionRecord, result: &NormalizedResult, queue: Duration) {
    record.exit_code = result.exit_code;
    record.signal = result.signal;
    record.duration_ms = result.duration_ms;
    record.queue_ms = u64::try_from(queue.as_millis()).unwrap_or(u64::MAX);
    record.bytes_out = result.original_bytes.stdout + result.original_bytes.stderr;
    record.truncated = result.truncated;
    record.cached = result.cached;
    let output = if result.stdout.trim().is_empty() {
        result
            .error
            .as_ref()
            .map_or(result.stderr.as_str(), |e| e.message.as_str())
    } else {
        result.stdout.as_str()
    };
    // The result's texts are redacted already (`scrub`).
    record.summary = logging::summary(output);
}

/// The names a result's `capped` lists.
fn cap_names(caps: &[super::caps::Cap]) -> Vec<String> {
    caps.iter().map(|cap| cap.name.to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{RenderOptions, SpawnSpec};
    use crate::plan::runner::RunFuture;
    use serde_json::json;
    use std::sync::Mutex;

    /// Records plans and answers after a delay, without processes.
    #[derive(Default)]
    struct FakeRunner {
        plans: Mutex<Vec<SpawnSpec>>,
        delay: Duration,
    }

    impl Runner for FakeRunner {
        fn run(
            &self,
            plan: SpawnSpec,
            _render: RenderOptions,
            _background: Option<super::super::Background>,
        ) -> RunFuture<'_> {
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
            apply_patch_prefix: vec!["/s/apply_patch".into()],
            use_cgroup: false,
            sandbox_override: None,
            hidden_paths: Vec::new(),
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
    fn request_variables_reach_the_command_not_the_wrapper_and_reserved_names_are_refused() {
        let toml =
            "allow_raw_commands = true\n[sandbox]\ndefault = \"read-only\"\n[limits]\npids = 77\n";
        let (dir, d) = dispatcher(toml, Arc::new(FakeRunner::default()));
        let mut request = Request::command(vec!["env".into()]);
        request.env = vec![("LD_PRELOAD".into(), "/w/evil.so".into())];
        let plan = d.planner().plan(&request, Door::Listener).unwrap();
        let preload = OsString::from("LD_PRELOAD");
        assert_eq!(plan.spec.env.get(&preload), Some(&"/w/evil.so".into()));
        let wrapper_env = plan.spec.wrapper_env.as_ref().unwrap();
        assert!(!wrapper_env.contains_key(&preload), "{wrapper_env:?}");
        assert_eq!(
            wrapper_env.get(&OsString::from("AGENT_REACH_HOME")),
            Some(&dir.path().join("home").into_os_string())
        );
        assert_eq!(plan.spec.pids_limit, Some(77));
        request.env = vec![("AGENT_REACH_HOME".into(), "/nonexistent".into())];
        let refused = d.planner().plan(&request, Door::Listener).unwrap_err();
        assert_eq!(refused.kind, kinds::INVALID_PARAMS);
        assert!(refused.message.contains("AGENT_REACH_HOME"), "{refused}");
    }

    #[test]
    fn callers_are_capped_by_the_limits_but_run_keeps_its_own_timeout() {
        let toml = "allow_raw_commands = true\n[limits]\nmax_timeout_ms = 5000\n";
        let (_dir, d) = dispatcher(toml, Arc::new(FakeRunner::default()));
        let mut request = Request::command(vec!["true".into()]);
        request.timeout_ms = Some(0);
        let exec = d.planner().plan(&request, Door::Exec).unwrap();
        assert_eq!(exec.spec.timeout, Some(Duration::from_millis(5000)));
        assert_eq!(exec.capped[0].name, super::super::caps::MAX_TIMEOUT_MS);
        let run = d.planner().plan(&request, Door::Run).unwrap();
        assert_eq!(run.spec.timeout, None);
        assert!(run.capped.is_empty());
    }

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
    async fn a_sandboxed_plan_hides_the_token_and_secrets_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secrets = dir.path().join("secrets.env");
        std::fs::write(&secrets, "TOKEN=from-file\n").unwrap();
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
        let file = dir.path().join("r.toml");
        std::fs::write(&file, format!("secrets_file = \"secrets.env\"\n{TOOLS}")).unwrap();
        let registry = Registry::load(Some(&file), None, dir.path()).unwrap();
        let config = DispatcherConfig {
            hidden_paths: vec![PathBuf::from("/etc/agent-reach/token")],
            ..DispatcherConfig::for_session(
                BTreeMap::new(),
                dir.path().join("home"),
                std::path::Path::new("/s"),
                false,
            )
        };
        let runner = Arc::new(FakeRunner::default());
        let d = Dispatcher::with_runner(registry, config, runner.clone()).unwrap();
        let result = d.handle_json(&json!({"id": 1, "tool": "t"})).await;
        assert_eq!(result.status, Status::Success, "{result:?}");
        let wrapper = runner.plans.lock().unwrap()[0].wrapper.clone();
        let hidden: Vec<&OsString> = wrapper
            .windows(2)
            .filter(|pair| pair[0] == "--hide")
            .map(|pair| &pair[1])
            .collect();
        assert_eq!(
            hidden,
            [
                &OsString::from("/etc/agent-reach/token"),
                &secrets.into_os_string()
            ]
        );
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
