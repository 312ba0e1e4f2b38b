//! The registry's vocabulary: tools, typed parameters, risk, cwd policy and
//! the top-level settings, as validated values (never raw TOML).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;

use crate::sandbox::{Network, Policy};

use super::location::Location;
use super::template::ArgTemplate;

/// How much harm a tool can do. Ordered: `Low < Medium < High`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "low" => Some(Self::Low),
            "medium" => Some(Self::Medium),
            "high" => Some(Self::High),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }
}

impl fmt::Display for Risk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a tool runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CwdPolicy {
    /// The project root (`--root`).
    ProjectRoot,
    /// The request's `workdir`, confined to the project root (default: the root).
    Caller,
    /// Always this directory (relative paths are taken from the project root).
    Fixed(PathBuf),
}

impl fmt::Display for CwdPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ProjectRoot => f.write_str("project_root"),
            Self::Caller => f.write_str("caller"),
            Self::Fixed(path) => write!(f, "{}", path.display()),
        }
    }
}

/// The type of a parameter (and of a list parameter's items).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamType {
    String,
    Integer,
    Number,
    Boolean,
    Enum,
    Path,
    List,
}

impl ParamType {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "string" => Some(Self::String),
            "integer" => Some(Self::Integer),
            "number" => Some(Self::Number),
            "boolean" => Some(Self::Boolean),
            "enum" => Some(Self::Enum),
            "path" => Some(Self::Path),
            "list" => Some(Self::List),
            _ => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Enum => "enum",
            Self::Path => "path",
            Self::List => "list",
        }
    }
}

/// A typed parameter of a tool.
#[derive(Debug, Clone)]
pub(crate) struct ParamSpec {
    pub(crate) name: String,
    pub(crate) ty: ParamType,
    /// For `list`: the type of each item (string, integer, number, enum or path).
    pub(crate) items: ParamType,
    pub(crate) required: bool,
    pub(crate) default: Option<serde_json::Value>,
    /// Bounds: the value for numbers, the length for strings, the item count for lists.
    pub(crate) min: Option<f64>,
    pub(crate) max: Option<f64>,
    /// Must match the whole value (each item for lists).
    pub(crate) pattern: Option<Regex>,
    /// Allowed values (for `enum`, or to narrow a string).
    pub(crate) allowed: Vec<String>,
    /// For booleans: the argv element a `true` value becomes (false drops it).
    pub(crate) flag: Option<String>,
    /// Values that start with `-` are refused unless this is set, so a value
    /// can never turn into an option of the program.
    pub(crate) allow_leading_dash: bool,
    pub(crate) description: Option<String>,
}

/// Whether a request may append a list of strings to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtraArgs {
    /// A list `args` is refused.
    None,
    /// Appended, but an element starting with `-` is refused.
    Positional,
    /// Appended as given, options included.
    Any,
}

/// One tool of the registry, validated.
#[derive(Debug, Clone)]
pub(crate) struct ToolSpec {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) command: Vec<ArgTemplate>,
    pub(crate) params: Vec<ParamSpec>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) cwd: CwdPolicy,
    pub(crate) risk: Risk,
    /// Environment variable names passed through from the server.
    pub(crate) env: Vec<String>,
    /// Secret names injected into the child only.
    pub(crate) secrets: Vec<String>,
    pub(crate) group: Option<String>,
    /// The exclusive key (`exclusive = true` uses `tool:<name>`).
    pub(crate) exclusive: Option<String>,
    pub(crate) cache_ttl: Option<Duration>,
    /// The operator says the tool may be answered from the cache whatever
    /// its risk (a query with no effect).
    pub(crate) idempotent: bool,
    /// Results with a non-zero exit are cached too.
    pub(crate) cache_failures: bool,
    pub(crate) network: bool,
    /// `read-only`, `workspace-write` or `danger-full-access`.
    pub(crate) sandbox: Option<Policy>,
    pub(crate) interactive: bool,
    pub(crate) extra_args: ExtraArgs,
    /// Where the tool was defined.
    pub(crate) location: Location,
}

impl ToolSpec {
    /// Whether its results may be served from the cache: a `cache_ttl`, on a
    /// tool of `low` risk or one the operator marked `idempotent`.
    pub(crate) fn cacheable(&self) -> bool {
        self.cache_ttl.is_some() && (self.risk == Risk::Low || self.idempotent)
    }

    pub(crate) fn param(&self, name: &str) -> Option<&ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// `[scheduler]`: how many run at once and how many may wait.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SchedulerSettings {
    pub(crate) global: Option<usize>,
    pub(crate) queue: Option<usize>,
    pub(crate) groups: BTreeMap<String, usize>,
    /// `per_caller`: the most slots one caller may hold (no cap when unset).
    pub(crate) per_caller: Option<usize>,
}

/// `[sandbox]`: defaults for tools without their own `sandbox`, and raw commands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct SandboxSettings {
    pub(crate) default: Option<Policy>,
    pub(crate) writable_roots: Vec<PathBuf>,
    pub(crate) best_effort: bool,
    /// `network = "allow"`: raw commands and sandboxed tools may use the
    /// network; otherwise only a tool that says `network = true` may.
    pub(crate) network: Network,
}

/// Processes one command may have at once (`[limits] pids`): the engine's.
pub(crate) use crate::exec::DEFAULT_PIDS_LIMIT;
/// The longest timeout a caller may ask for (`[limits] max_timeout_ms`).
pub(crate) const DEFAULT_MAX_TIMEOUT_MS: u64 = 3_600_000;
/// The most entries one directory walk of a file route visits
/// (`[limits] max_walk_entries`).
pub(crate) const DEFAULT_MAX_WALK_ENTRIES: usize = 10_000;
/// A tool without `timeout` is killed after this long.
pub(crate) const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(600);
/// The largest output budget a caller may ask for (`[limits] max_output_tokens`).
pub(crate) const DEFAULT_MAX_OUTPUT_TOKENS_LIMIT: usize = 100_000;

/// `[limits]`: what holds whatever a caller asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitSettings {
    /// The per-command process limit (cgroup `pids.max`).
    pub(crate) pids: u64,
    /// A caller's timeout is capped to this.
    pub(crate) max_timeout_ms: u64,
    /// A caller's output budget is capped to this.
    pub(crate) max_output_tokens: usize,
    /// A directory walk of a file route stops after this many entries.
    pub(crate) max_walk_entries: usize,
    /// The operator's registry set `max_timeout_ms` itself: a long-lived
    /// process started without a timeout gets it as its deadline.
    pub(crate) timeout_set: bool,
}

impl Default for LimitSettings {
    fn default() -> Self {
        Self {
            pids: DEFAULT_PIDS_LIMIT,
            max_timeout_ms: DEFAULT_MAX_TIMEOUT_MS,
            max_output_tokens: DEFAULT_MAX_OUTPUT_TOKENS_LIMIT,
            max_walk_entries: DEFAULT_MAX_WALK_ENTRIES,
            timeout_set: false,
        }
    }
}

/// A `[limits]` table as one file or profile writes it: what it sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LimitOverrides {
    pub(crate) pids: Option<u64>,
    pub(crate) max_timeout_ms: Option<u64>,
    pub(crate) max_output_tokens: Option<usize>,
    pub(crate) max_walk_entries: Option<usize>,
}

impl LimitSettings {
    /// These limits with what `overrides` sets.
    pub(crate) fn with(self, overrides: &LimitOverrides) -> Self {
        Self {
            pids: overrides.pids.unwrap_or(self.pids),
            max_timeout_ms: overrides.max_timeout_ms.unwrap_or(self.max_timeout_ms),
            max_output_tokens: overrides
                .max_output_tokens
                .unwrap_or(self.max_output_tokens),
            max_walk_entries: overrides.max_walk_entries.unwrap_or(self.max_walk_entries),
            timeout_set: self.timeout_set || overrides.max_timeout_ms.is_some(),
        }
    }
}

/// `[profiles.NAME]`: a narrower view of the registry.
#[derive(Debug, Clone, Default)]
pub(crate) struct Profile {
    pub(crate) name: String,
    pub(crate) max_risk: Option<Risk>,
    pub(crate) approval: Option<Risk>,
    /// Only these tools (empty = all).
    pub(crate) tools: Vec<String>,
    pub(crate) exclude: Vec<String>,
    pub(crate) allow_raw_commands: Option<bool>,
    /// `[profiles.NAME.limits]`: replaces the top level's where set.
    pub(crate) limits: LimitOverrides,
    pub(crate) location: Location,
}

/// The top-level settings of a registry.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) max_risk: Risk,
    /// The lowest risk that needs `"approve": true`.
    pub(crate) approval: Risk,
    pub(crate) allow_raw_commands: bool,
    /// The risk raw `command` requests count as (for `max_risk` and `approval`).
    pub(crate) raw_commands_risk: Risk,
    pub(crate) scheduler: SchedulerSettings,
    pub(crate) sandbox: SandboxSettings,
    /// `[limits]` (a chosen profile's applied).
    pub(crate) limits: LimitSettings,
    /// `[env]`: variables set for every tool.
    pub(crate) env: BTreeMap<String, String>,
    /// A `NAME=value` file of secrets (mode 0600).
    pub(crate) secrets_file: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_risk: Risk::High,
            approval: Risk::High,
            allow_raw_commands: false,
            raw_commands_risk: Risk::Medium,
            scheduler: SchedulerSettings::default(),
            sandbox: SandboxSettings::default(),
            limits: LimitSettings::default(),
            env: BTreeMap::new(),
            secrets_file: None,
        }
    }
}

/// A tool name usable as a function name by every model API.
pub(crate) fn is_valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An environment variable or secret name.
pub(crate) fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}
