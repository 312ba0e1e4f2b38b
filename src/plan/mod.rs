//! The plan stage: the one function every door goes through.
//!
//! `run`, `exec --json`/`--jsonl`, every MCP tool and every network listener
//! turn their request into a [`Request`] and call [`Planner::plan`], which
//! decides, under the operator's [`OperatorPolicy`], exactly what the engine
//! runs: argv, working directory, environment (whitelist, tool env,
//! secrets), sandbox wrapper and its report file, timeout, caps, token
//! budget, scheduling demand and the risk decision. What comes back is a
//! [`Plan`] (a [`SpawnSpec`] for [`crate::exec::Execution::spawn`] plus the
//! rest) or a [`Rejection`] with the contract's `error.kind`.
//!
//! How the broker (`crate::broker`, the one caller for remote doors) uses it:
//!
//! ```text
//! let mut request = Request::command(argv);        // or Request::for_tool(..)
//! request.workdir = ...; request.env = ...; request.timeout_ms = ...;
//! request.session = true;                          // a live process (stream, session)
//! // one-shot: plan, cache, scheduler, engine, normalized result
//! let result = dispatcher.handle_as(request, Door::Listener, caller).await;
//! // live: plan, then the engine
//! let plan = dispatcher.planner().plan(&request, Door::Listener)?;
//! let exec = Execution::spawn(plan.spec)?;        // keep plan.report alive with it
//! ```
//!
//! Nothing here starts a process: planning is pure but for reading the
//! registry's secrets once and checking that directories exist, so every
//! policy rule is unit-tested without the engine. The [`Dispatcher`] on top
//! runs one-shot plans (cache, scheduler, engine, normalized result).

pub(crate) mod caps;
pub(crate) mod command;
mod decision;
pub(crate) mod dispatcher;
mod fence;
pub(crate) mod files;
pub(crate) mod policy;
pub(crate) mod registry_args;
pub(crate) mod request;
pub(crate) mod resolve;
pub(crate) mod runner;
pub(crate) mod sandbox;
pub(crate) mod source;
pub(crate) mod tool;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use decision::{ApprovalAsk, Door, Rejection};
pub(crate) use dispatcher::{Dispatcher, DispatcherConfig};
pub(crate) use files::{FileOp, FilePermit};
pub(crate) use policy::OperatorPolicy;
pub(crate) use request::{Request, Target};

use crate::exec::{RenderOptions, SpawnSpec};
use crate::registry::model::LimitSettings;
use crate::registry::secrets::SecretStore;
use crate::registry::{Registry, kinds};
use crate::scheduler::Demand;

pub(crate) use crate::output::render::DEFAULT_MAX_OUTPUT_TOKENS;

/// How a request's output is shown: its token budget, colour stripped.
fn render(request: &Request) -> RenderOptions {
    RenderOptions {
        max_output_tokens: request
            .max_output_tokens
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS),
        keep_color: false,
    }
}

/// A one-shot raw command without `timeout_ms` is killed after this long
/// (as `run --timeout-ms`' default).
pub(crate) const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `apply_patch` may take before it is killed.
pub(crate) const APPLY_PATCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Everything the engine needs for one command, decided.
#[derive(Debug)]
pub(crate) struct Plan {
    /// What to start.
    pub(crate) spec: SpawnSpec,
    /// How its output is shown.
    pub(crate) render: RenderOptions,
    /// Its place in the scheduler (one-shot runs).
    pub(crate) demand: Demand,
    /// How the metrics count it: the tool's name, or the raw-command label.
    pub(crate) label: String,
    /// The registry tool, when it is one.
    pub(crate) tool: Option<String>,
    /// A cached result may answer it (tools with `cache_ttl`).
    pub(crate) cache: Option<crate::registry::cache::Cacheable>,
    /// Removes the sandbox report file when the plan's run is over.
    pub(crate) report: Option<sandbox::ReportGuard>,
    /// What the operator's `[limits]` cut from the request.
    pub(crate) capped: Vec<caps::Cap>,
    /// Where what a one-shot run leaves in the background goes; `None`:
    /// it is killed with the command (every door but `envd` and
    /// `daytona`).
    pub(crate) background: Option<Background>,
}

/// Takes what a one-shot command left running in the background when it
/// exited (the platforms' `server > log 2>&1 &`): the broker seats it in
/// the one session table under its caller. Set by the broker, never by a
/// client.
#[derive(Clone)]
pub(crate) struct Background(Arc<dyn Fn(crate::exec::Execution) + Send + Sync>);

impl Background {
    /// A hook that hands each remainder to `keep`.
    pub(crate) fn new(keep: impl Fn(crate::exec::Execution) + Send + Sync + 'static) -> Self {
        Self(Arc::new(keep))
    }

    /// Hands `remainder` over.
    pub(crate) fn keep(&self, remainder: crate::exec::Execution) {
        (self.0)(remainder);
    }
}

impl PartialEq for Background {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Background(..)")
    }
}

/// Names agent-reach keeps for itself: a request may not set them.
pub(crate) const RESERVED_ENV_PREFIX: &str = "AGENT_REACH_";

/// A request's variables may not set (or copy) a name agent-reach reserves
/// (`AGENT_REACH_*`): the home the sandbox protects, the session tag that
/// finds escapees, the wrapper's hand-over. Refused as `invalid_params`,
/// naming them.
fn check_reserved_env(request: &Request) -> Result<(), Rejection> {
    // A NUL ends a C string: past it, a value would smuggle a second
    // variable (`OK=a\0AGENT_REACH_DEPTH=9`) past this check; `=` in a
    // name would do the same.
    let malformed = request.env.iter().find(|(name, value)| {
        let (name, value) = (name.as_encoded_bytes(), value.as_encoded_bytes());
        name.is_empty() || name.contains(&0) || name.contains(&b'=') || value.contains(&0)
    });
    if let Some((name, _)) = malformed {
        return Err(Rejection::rejected(
            kinds::INVALID_PARAMS,
            format!(
                "the request's environment variable {:?} is malformed: a name must be non-empty without `=` or NUL, and a value may not hold a NUL byte",
                name.to_string_lossy()
            ),
        ));
    }
    if let Some(name) = request.pass_env.iter().find(|n| n.contains('\0')) {
        return Err(Rejection::rejected(
            kinds::INVALID_PARAMS,
            format!("the variable name {name:?} holds a NUL byte"),
        ));
    }
    let mut reserved: Vec<String> = request
        .env
        .iter()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .chain(request.pass_env.iter().cloned())
        .filter(|name| name.starts_with(RESERVED_ENV_PREFIX))
        .collect();
    if reserved.is_empty() {
        return Ok(());
    }
    reserved.sort();
    reserved.dedup();
    Err(Rejection::rejected(
        kinds::INVALID_PARAMS,
        format!(
            "the request's environment sets {}: names starting with {RESERVED_ENV_PREFIX} are reserved by agent-reach",
            reserved.join(", ")
        ),
    ))
}

/// The kernel's limit on one argument's length, its NUL included
/// (`MAX_ARG_STRLEN`, 32 pages).
const MAX_ARG_BYTES: usize = 32 * 4096;

/// A raw command's arguments as the kernel will take them: a NUL would end
/// an argument early (the command would not be what was asked), and one
/// past [`MAX_ARG_BYTES`] fails `execve` with `E2BIG`. Either is the
/// caller's mistake, refused as `invalid_params`.
fn check_argv(argv: &[OsString]) -> Result<(), Rejection> {
    for arg in argv {
        let bytes = arg.as_encoded_bytes();
        let why = if bytes.contains(&0) {
            "holds a NUL byte"
        } else if bytes.len() >= MAX_ARG_BYTES {
            "is longer than the kernel takes for one argument (128 KiB): pass it through a file or stdin"
        } else {
            continue;
        };
        let shown: String = arg.to_string_lossy().chars().take(80).collect();
        return Err(Rejection::rejected(
            kinds::INVALID_PARAMS,
            format!("the command's argument {shown:?} {why}"),
        ));
    }
    Ok(())
}

/// What the planner needs from the process it runs in.
#[derive(Debug, Clone)]
pub(crate) struct PlannerConfig {
    /// Our environment (PATH has the session entry first).
    pub(crate) env: BTreeMap<OsString, OsString>,
    /// `$AGENT_REACH_HOME` (spill files, sandbox reports).
    pub(crate) home: PathBuf,
    /// The argv prefix that starts the sandbox personality.
    pub(crate) sandbox_prefix: Vec<OsString>,
    /// The argv prefix that starts the apply_patch personality.
    pub(crate) apply_patch_prefix: Vec<OsString>,
    /// A cgroup per command where the machine allows.
    pub(crate) use_cgroup: bool,
    /// What a sandboxed command must not read (the token and secrets files):
    /// the wrapper covers them (`--hide`).
    pub(crate) hidden_paths: Vec<PathBuf>,
}

/// The plan stage of one process: its policy, its registry, its secrets.
pub(crate) struct Planner {
    registry: Option<Arc<Registry>>,
    policy: OperatorPolicy,
    config: PlannerConfig,
    secrets: SecretStore,
    all_secrets: Vec<(String, Vec<u8>)>,
    /// What no file operation may touch: the rule list of its sandbox.
    fence: Arc<crate::workspace::Fence>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Planner {
    /// A planner for a registry; `sandbox_override` is `serve --sandbox`.
    pub(crate) fn new(
        registry: Arc<Registry>,
        config: PlannerConfig,
        secrets: SecretStore,
        sandbox_override: Option<crate::sandbox::Policy>,
    ) -> Self {
        let policy = OperatorPolicy::from_settings(&registry.settings, &registry.root)
            .with_sandbox_override(sandbox_override);
        let all_secrets = secrets.all();
        let fence = Arc::new(fence::fence(&policy, &config.home, &config.hidden_paths));
        Self {
            registry: Some(registry),
            policy,
            config,
            secrets,
            all_secrets,
            fence,
        }
    }

    /// The planner of `run`: no registry, the local user's policy.
    pub(crate) fn for_run(config: PlannerConfig, cwd: PathBuf) -> Self {
        Self {
            registry: None,
            policy: OperatorPolicy::local_user(cwd),
            config,
            secrets: SecretStore::default(),
            all_secrets: Vec::new(),
            // `run` does no file operation of its own.
            fence: Arc::default(),
        }
    }

    /// `$AGENT_REACH_HOME`: agent-reach's state directory.
    pub(crate) fn home(&self) -> PathBuf {
        self.config.home.clone()
    }

    /// The operator's policy in force.
    pub(crate) fn policy(&self) -> &OperatorPolicy {
        &self.policy
    }

    /// The operator's `[limits]` (their defaults without a registry).
    pub(crate) fn limits(&self) -> LimitSettings {
        self.registry
            .as_ref()
            .map(|registry| registry.settings.limits)
            .unwrap_or_default()
    }

    /// Every secret value, for redaction.
    pub(crate) fn all_secrets(&self) -> &[(String, Vec<u8>)] {
        &self.all_secrets
    }

    /// The one place a plan's spec is made: this process's home, cgroup
    /// choice and secrets (redacted from the output), and the session tag
    /// the environment was built with.
    fn spec(
        &self,
        argv: Vec<OsString>,
        cwd: PathBuf,
        env: BTreeMap<OsString, OsString>,
        tag: String,
        secrets: Vec<(String, Vec<u8>)>,
    ) -> SpawnSpec {
        // A working directory inside the project root is opened beneath it
        // by the kernel at the start, whatever was swapped in since.
        let root = &self.policy.root;
        let beneath = (self.policy.governs && cwd.starts_with(root)).then(|| root.clone());
        let mut spec = SpawnSpec::new(argv, cwd, env, self.config.home.clone());
        spec.cwd_beneath = beneath;
        spec.session_tag = tag;
        spec.use_cgroup = self.config.use_cgroup;
        spec.pids_limit = Some(self.limits().pids);
        spec.secrets = secrets;
        spec
    }

    /// The one function: a request from `door` becomes a plan or a rejection.
    pub(crate) fn plan(&self, request: &Request, door: Door) -> Result<Plan, Rejection> {
        check_reserved_env(request)?;
        if let Target::Command(argv) = &request.target {
            check_argv(argv)?;
        }
        // `run` is the local user's own command line, which the operator's
        // policy does not govern: its timeout is what the user typed.
        let (capped, caps) = match door {
            Door::Run => (None, Vec::new()),
            _ => caps::cap(request, self.limits()),
        };
        let request = capped.as_ref().unwrap_or(request);
        let mut plan = match &request.target {
            Target::Tool { name, args } => match &self.registry {
                Some(registry) => tool::plan_tool(self, registry, request, name, args, door),
                None => Err(Rejection::rejected(
                    kinds::UNKNOWN_TOOL,
                    format!("no tool named {name:?}: this door has no registry"),
                )),
            },
            Target::Command(argv) => command::plan_command(self, request, argv, door),
            Target::ApplyPatch { input } => command::plan_apply_patch(self, request, input, door),
        }?;
        plan.capped = caps;
        Ok(plan)
    }

    /// A file operation of `door` on `paths`: a permit, or why not (see
    /// [`files`]).
    pub(crate) fn plan_file(
        &self,
        op: FileOp,
        paths: &[&str],
        door: Door,
    ) -> Result<FilePermit, Rejection> {
        files::plan_file(&self.policy, op, paths, door)
    }

    /// What no file operation may touch (the state directory, a read-only
    /// `.git`, the token and secrets files): the list its sandbox keeps
    /// from commands.
    pub(crate) fn fence(&self) -> Arc<crate::workspace::Fence> {
        self.fence.clone()
    }
}
