//! One registry file, read into validated values while collecting every
//! problem with its line: unknown keys, bad types, bad values, unknown
//! placeholders, duplicate names. Nothing stops at the first problem.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;
use toml_edit::{ImDocument, TableLike};

use super::location::{LineIndex, Location, Problem};
use crate::sandbox::{Network, Policy};

use super::model::{
    CwdPolicy, ExtraArgs, ParamSpec, ParamType, Profile, Risk, ToolSpec, is_valid_env_name,
    is_valid_tool_name,
};
use super::node::{Node, entries};
use super::params::check_default;
use super::template::ArgTemplate;

const TOP_KEYS: &[&str] = &[
    "include",
    "max_risk",
    "approval",
    "allow_raw_commands",
    "raw_commands_risk",
    "secrets_file",
    "scheduler",
    "sandbox",
    "env",
    "profiles",
    "tools",
];
const SCHEDULER_KEYS: &[&str] = &["global", "queue", "groups"];
const SANDBOX_KEYS: &[&str] = &["default", "writable_roots", "best_effort", "network"];
const PROFILE_KEYS: &[&str] = &[
    "description",
    "max_risk",
    "approval",
    "tools",
    "exclude",
    "allow_raw_commands",
];
const TOOL_KEYS: &[&str] = &[
    "name",
    "description",
    "command",
    "params",
    "timeout",
    "cwd",
    "risk",
    "env",
    "secrets",
    "group",
    "exclusive",
    "cache_ttl",
    "network",
    "sandbox",
    "interactive",
    "extra_args",
];
const PARAM_KEYS: &[&str] = &[
    "name",
    "type",
    "items",
    "required",
    "default",
    "min",
    "max",
    "pattern",
    "enum",
    "flag",
    "allow_leading_dash",
    "description",
];

/// Settings one file sets; `None` = not set here (an earlier file's value stays).
#[derive(Debug, Clone, Default)]
pub struct FileSettings {
    pub max_risk: Option<Risk>,
    pub approval: Option<Risk>,
    pub allow_raw_commands: Option<bool>,
    pub raw_commands_risk: Option<Risk>,
    pub secrets_file: Option<PathBuf>,
    pub scheduler_global: Option<usize>,
    pub scheduler_queue: Option<usize>,
    pub groups: BTreeMap<String, usize>,
    pub sandbox_default: Option<Policy>,
    pub sandbox_network: Option<Network>,
    pub writable_roots: Option<Vec<PathBuf>>,
    pub best_effort: Option<bool>,
    pub env: BTreeMap<String, String>,
}

/// What one file says, plus its problems.
#[derive(Debug, Default)]
pub struct ParsedFile {
    pub includes: Vec<(PathBuf, Location)>,
    pub settings: FileSettings,
    pub tools: Vec<ToolSpec>,
    pub profiles: Vec<Profile>,
    pub problems: Vec<Problem>,
}

/// Parses one registry file's text. `file` names it in problems; relative
/// paths in it (includes, secrets file) are taken from its directory.
pub fn parse_file(file: &Path, text: &str) -> ParsedFile {
    let index = LineIndex::new(file, text);
    let mut walker = Walker {
        index: &index,
        base_dir: file.parent().map(Path::to_path_buf).unwrap_or_default(),
        out: ParsedFile::default(),
    };
    match ImDocument::parse(text) {
        Ok(doc) => walker.top(doc.as_table()),
        Err(err) => {
            let message = err.message().trim().to_owned();
            walker.problem(err.span(), format!("invalid TOML: {message}"));
        }
    }
    walker.out
}

struct Walker<'i> {
    index: &'i LineIndex,
    base_dir: PathBuf,
    out: ParsedFile,
}

impl Walker<'_> {
    fn problem(&mut self, span: Option<Range<usize>>, message: impl Into<String>) {
        self.out.problems.push(Problem {
            location: self.index.locate_span(span),
            message: message.into(),
        });
    }

    fn unknown_keys(&mut self, table: &dyn TableLike, known: &[&str], what: &str) {
        for (key, span, _) in entries(table) {
            if !known.contains(&key) {
                self.problem(
                    span,
                    format!(
                        "unknown key `{key}` in {what} (known: {})",
                        known.join(", ")
                    ),
                );
            }
        }
    }

    fn string(&mut self, node: Node<'_>, what: &str) -> Option<String> {
        match node.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                self.problem(
                    node.span(),
                    format!("`{what}` must be a string, found {}", node.type_name()),
                );
                None
            }
        }
    }

    fn boolean(&mut self, node: Node<'_>, what: &str) -> Option<bool> {
        let value = node.as_bool();
        if value.is_none() {
            self.problem(
                node.span(),
                format!("`{what}` must be true or false, found {}", node.type_name()),
            );
        }
        value
    }

    fn count(&mut self, node: Node<'_>, what: &str, min: i64) -> Option<usize> {
        match node.as_integer() {
            Some(n) if n >= min => usize::try_from(n).ok(),
            Some(n) => {
                self.problem(
                    node.span(),
                    format!("`{what}` must be at least {min}, found {n}"),
                );
                None
            }
            None => {
                self.problem(
                    node.span(),
                    format!("`{what}` must be an integer, found {}", node.type_name()),
                );
                None
            }
        }
    }

    fn seconds(&mut self, node: Node<'_>, what: &str, allow_zero: bool) -> Option<Duration> {
        match node.as_number() {
            Some(s) if s.is_finite() && (s > 0.0 || (allow_zero && s == 0.0)) && s < 1e9 => {
                Some(Duration::from_secs_f64(s))
            }
            Some(s) => {
                let bound = if allow_zero {
                    "0 or more"
                } else {
                    "more than 0"
                };
                self.problem(
                    node.span(),
                    format!("`{what}` must be {bound} seconds, found {s}"),
                );
                None
            }
            None => {
                self.problem(
                    node.span(),
                    format!(
                        "`{what}` must be a number of seconds, found {}",
                        node.type_name()
                    ),
                );
                None
            }
        }
    }

    fn risk(&mut self, node: Node<'_>, what: &str) -> Option<Risk> {
        let text = self.string(node, what)?;
        let risk = Risk::parse(&text);
        if risk.is_none() {
            self.problem(
                node.span(),
                format!("`{what}` must be \"low\", \"medium\" or \"high\", found {text:?}"),
            );
        }
        risk
    }

    fn strings(
        &mut self,
        node: Node<'_>,
        what: &str,
    ) -> Option<Vec<(String, Option<Range<usize>>)>> {
        let Some(items) = node.as_array() else {
            self.problem(
                node.span(),
                format!(
                    "`{what}` must be an array of strings, found {}",
                    node.type_name()
                ),
            );
            return None;
        };
        let mut out = Vec::new();
        for item in items {
            match item.as_str() {
                Some(s) => out.push((s.to_owned(), item.span())),
                None => self.problem(
                    item.span(),
                    format!(
                        "`{what}` must hold strings only, found {}",
                        item.type_name()
                    ),
                ),
            }
        }
        Some(out)
    }

    fn names(&mut self, node: Node<'_>, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (name, span) in self.strings(node, what).unwrap_or_default() {
            if is_valid_env_name(&name) {
                out.push(name);
            } else {
                self.problem(
                    span,
                    format!("`{what}`: {name:?} is not a valid variable name"),
                );
            }
        }
        out
    }

    fn sandbox_policy(&mut self, node: Node<'_>, what: &str) -> Option<Policy> {
        let text = self.string(node, what)?;
        match text.parse::<Policy>() {
            Ok(policy) => Some(policy),
            Err(err) => {
                self.problem(node.span(), format!("`{what}`: {err}"));
                None
            }
        }
    }

    fn network(&mut self, node: Node<'_>, what: &str) -> Option<Network> {
        let text = self.string(node, what)?;
        match text.parse::<Network>() {
            Ok(network) => Some(network),
            Err(err) => {
                self.problem(node.span(), format!("`{what}`: {err}"));
                None
            }
        }
    }

    fn table<'n>(&mut self, node: Node<'n>, what: &str) -> Option<&'n dyn TableLike> {
        let table = node.as_table();
        if table.is_none() {
            self.problem(
                node.span(),
                format!("`{what}` must be a table, found {}", node.type_name()),
            );
        }
        table
    }

    fn top(&mut self, table: &dyn TableLike) {
        self.unknown_keys(table, TOP_KEYS, "the registry");
        for (key, _, node) in entries(table) {
            match key {
                "include" => {
                    for (path, span) in self.strings(node, "include").unwrap_or_default() {
                        let location = self.index.locate_span(span);
                        self.out.includes.push((self.base_dir.join(path), location));
                    }
                }
                "max_risk" => self.out.settings.max_risk = self.risk(node, key),
                "approval" => self.out.settings.approval = self.risk(node, key),
                "allow_raw_commands" => {
                    self.out.settings.allow_raw_commands = self.boolean(node, key)
                }
                "raw_commands_risk" => self.out.settings.raw_commands_risk = self.risk(node, key),
                "secrets_file" => {
                    self.out.settings.secrets_file =
                        self.string(node, key).map(|p| self.base_dir.join(p))
                }
                "scheduler" => self.scheduler(node),
                "sandbox" => self.sandbox(node),
                "env" => self.env(node),
                "profiles" => self.profiles(node),
                "tools" => self.tools(node),
                _ => {}
            }
        }
    }

    fn scheduler(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "scheduler") else {
            return;
        };
        self.unknown_keys(table, SCHEDULER_KEYS, "[scheduler]");
        for (key, _, node) in entries(table) {
            match key {
                "global" => {
                    self.out.settings.scheduler_global = self.count(node, "scheduler.global", 1)
                }
                "queue" => {
                    self.out.settings.scheduler_queue = self.count(node, "scheduler.queue", 0)
                }
                "groups" => {
                    let Some(groups) = self.table(node, "scheduler.groups") else {
                        continue;
                    };
                    for (name, _, limit) in entries(groups) {
                        if let Some(limit) =
                            self.count(limit, &format!("scheduler.groups.{name}"), 1)
                        {
                            self.out.settings.groups.insert(name.to_owned(), limit);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn sandbox(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "sandbox") else {
            return;
        };
        self.unknown_keys(table, SANDBOX_KEYS, "[sandbox]");
        for (key, _, node) in entries(table) {
            match key {
                "default" => {
                    self.out.settings.sandbox_default = self.sandbox_policy(node, "sandbox.default")
                }
                "best_effort" => {
                    self.out.settings.best_effort = self.boolean(node, "sandbox.best_effort")
                }
                "network" => {
                    self.out.settings.sandbox_network = self.network(node, "sandbox.network")
                }
                "writable_roots" => {
                    let roots = self
                        .strings(node, "sandbox.writable_roots")
                        .unwrap_or_default();
                    self.out.settings.writable_roots =
                        Some(roots.into_iter().map(|(p, _)| PathBuf::from(p)).collect());
                }
                _ => {}
            }
        }
    }

    fn env(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "env") else {
            return;
        };
        for (name, span, value) in entries(table) {
            if !is_valid_env_name(name) {
                self.problem(
                    span,
                    format!("[env]: {name:?} is not a valid variable name"),
                );
                continue;
            }
            if let Some(value) = self.string(value, &format!("env.{name}")) {
                if value.contains('\0') {
                    self.problem(
                        span,
                        format!("[env]: the value of {name} contains a NUL byte"),
                    );
                } else {
                    self.out.settings.env.insert(name.to_owned(), value);
                }
            }
        }
    }

    fn profiles(&mut self, node: Node<'_>) {
        let Some(table) = self.table(node, "profiles") else {
            return;
        };
        for (name, span, node) in entries(table) {
            let Some(profile_table) = self.table(node, &format!("profiles.{name}")) else {
                continue;
            };
            let what = format!("[profiles.{name}]");
            self.unknown_keys(profile_table, PROFILE_KEYS, &what);
            let mut profile = Profile {
                name: name.to_owned(),
                location: self.index.locate_span(span),
                ..Profile::default()
            };
            for (key, _, node) in entries(profile_table) {
                match key {
                    "max_risk" => profile.max_risk = self.risk(node, key),
                    "approval" => profile.approval = self.risk(node, key),
                    "allow_raw_commands" => profile.allow_raw_commands = self.boolean(node, key),
                    "description" => {
                        self.string(node, key);
                    }
                    "tools" | "exclude" => {
                        let names = self.strings(node, key).unwrap_or_default();
                        let names = names.into_iter().map(|(n, _)| n).collect();
                        if key == "tools" {
                            profile.tools = names;
                        } else {
                            profile.exclude = names;
                        }
                    }
                    _ => {}
                }
            }
            self.out.profiles.push(profile);
        }
    }

    fn tools(&mut self, node: Node<'_>) {
        let Some(items) = node.as_array() else {
            self.problem(
                node.span(),
                format!(
                    "`tools` must be an array of tables ([[tools]]), found {}",
                    node.type_name()
                ),
            );
            return;
        };
        let mut seen: BTreeMap<String, Location> = BTreeMap::new();
        for item in items {
            let name = item
                .as_table()
                .and_then(|t| t.get("name"))
                .and_then(|i| i.as_str())
                .map(str::to_owned);
            let location = self.index.locate_span(item.span());
            if let Some(name) = &name {
                if let Some(first) = seen.get(name) {
                    let message =
                        format!("duplicate tool name {name:?} (first defined at {first})");
                    self.out.problems.push(Problem { location, message });
                    continue;
                }
                seen.insert(name.clone(), location);
            }
            if let Some(tool) = self.tool(item) {
                self.out.tools.push(tool);
            }
        }
    }

    /// One tool; `None` when it is too broken to be used (its problems are recorded).
    fn tool(&mut self, node: Node<'_>) -> Option<ToolSpec> {
        let table = self.table(node, "tools")?;
        let problems_before = self.out.problems.len();
        let location = self.index.locate_span(node.span());
        let name = match table.get("name") {
            Some(item) => self.string(Node::Item(item), "name"),
            None => {
                self.problem(node.span(), "a tool needs a `name`");
                None
            }
        };
        let label = name.clone().unwrap_or_else(|| "<unnamed>".to_owned());
        let what = format!("tool {label:?}");
        self.unknown_keys(table, TOOL_KEYS, &what);
        if let Some(name) = &name
            && !is_valid_tool_name(name)
        {
            let span = table.get("name").and_then(|i| i.span());
            self.problem(
                span,
                format!("{what}: a tool name must be 1-64 letters, digits, '_' or '-'"),
            );
        }
        let mut tool = ToolSpec {
            name: label.clone(),
            description: String::new(),
            command: Vec::new(),
            params: Vec::new(),
            timeout: None,
            cwd: CwdPolicy::ProjectRoot,
            risk: Risk::Medium,
            env: Vec::new(),
            secrets: Vec::new(),
            group: None,
            exclusive: None,
            cache_ttl: None,
            network: false,
            sandbox: None,
            interactive: false,
            extra_args: ExtraArgs::Positional,
            location,
        };
        let mut command_span = node.span();
        let mut saw_cwd = false;
        let mut saw_command = false;
        let mut params_node = None;
        for (key, _, value) in entries(table) {
            match key {
                "description" => tool.description = self.string(value, key).unwrap_or_default(),
                "command" => {
                    saw_command = true;
                    command_span = value.span();
                    tool.command = self.command(value, &what);
                }
                "params" => params_node = Some(value),
                "timeout" => tool.timeout = self.seconds(value, key, false),
                "cwd" => {
                    saw_cwd = true;
                    if let Some(text) = self.string(value, key) {
                        tool.cwd = match text.as_str() {
                            "project_root" => CwdPolicy::ProjectRoot,
                            "caller" => CwdPolicy::Caller,
                            "" => {
                                self.problem(
                                    value.span(),
                                    format!("{what}: `cwd` must be \"project_root\", \"caller\" or a directory"),
                                );
                                CwdPolicy::ProjectRoot
                            }
                            path => CwdPolicy::Fixed(PathBuf::from(path)),
                        };
                    }
                }
                "risk" => tool.risk = self.risk(value, key).unwrap_or(Risk::High),
                "env" => tool.env = self.names(value, "env"),
                "secrets" => tool.secrets = self.names(value, "secrets"),
                "group" => tool.group = self.string(value, key),
                "exclusive" => {
                    tool.exclusive = match (value.as_bool(), value.as_str()) {
                        (Some(true), _) => Some(format!("tool:{label}")),
                        (Some(false), _) => None,
                        (_, Some(key)) if !key.is_empty() => Some(key.to_owned()),
                        _ => {
                            self.problem(
                                value.span(),
                                format!("{what}: `exclusive` must be true, false or a key string"),
                            );
                            None
                        }
                    }
                }
                "cache_ttl" => {
                    tool.cache_ttl = self.seconds(value, key, true).filter(|d| !d.is_zero())
                }
                "network" => tool.network = self.boolean(value, key).unwrap_or(false),
                "sandbox" => tool.sandbox = self.sandbox_policy(value, key),
                "interactive" => tool.interactive = self.boolean(value, key).unwrap_or(false),
                "extra_args" => {
                    if let Some(text) = self.string(value, key) {
                        tool.extra_args = match text.as_str() {
                            "none" => ExtraArgs::None,
                            "positional" => ExtraArgs::Positional,
                            "any" => ExtraArgs::Any,
                            other => {
                                self.problem(
                                    value.span(),
                                    format!("{what}: `extra_args` must be \"none\", \"positional\" or \"any\", found {other:?}"),
                                );
                                ExtraArgs::None
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if !saw_command {
            self.problem(node.span(), format!("{what} has no `command`"));
        }
        if !saw_cwd {
            self.problem(
                node.span(),
                format!("{what} has no `cwd` policy (add cwd = \"project_root\", \"caller\" or a directory)"),
            );
        }
        if let Some(params_node) = params_node {
            tool.params = self.params(params_node, &what);
        }
        self.check_placeholders(&tool, command_span, &what);
        name?;
        (self.out.problems.len() == problems_before).then_some(tool)
    }

    fn command(&mut self, node: Node<'_>, what: &str) -> Vec<ArgTemplate> {
        let Some(elements) = self.strings(node, "command") else {
            return Vec::new();
        };
        if elements.is_empty() {
            self.problem(node.span(), format!("{what}: `command` is empty"));
        }
        let mut out = Vec::new();
        for (i, (element, span)) in elements.into_iter().enumerate() {
            if element.contains('\0') {
                self.problem(
                    span,
                    format!("{what}: a command element contains a NUL byte"),
                );
                continue;
            }
            match ArgTemplate::parse(&element) {
                Ok(template) => {
                    if i == 0 && template.placeholders().next().is_some() {
                        self.problem(
                            span,
                            format!(
                                "{what}: the program (first element) cannot come from a parameter"
                            ),
                        );
                    } else if i == 0 && element.is_empty() {
                        self.problem(span, format!("{what}: the program name is empty"));
                    }
                    out.push(template);
                }
                Err(err) => self.problem(span, format!("{what}: {err}")),
            }
        }
        out
    }

    fn params(&mut self, node: Node<'_>, what: &str) -> Vec<ParamSpec> {
        let Some(items) = node.as_array() else {
            self.problem(
                node.span(),
                format!(
                    "{what}: `params` must be an array of tables, found {}",
                    node.type_name()
                ),
            );
            return Vec::new();
        };
        let mut out: Vec<ParamSpec> = Vec::new();
        for item in items {
            let Some(param) = self.param(item, what) else {
                continue;
            };
            if out.iter().any(|p| p.name == param.name) {
                self.problem(
                    item.span(),
                    format!("{what}: duplicate parameter {:?}", param.name),
                );
                continue;
            }
            out.push(param);
        }
        out
    }

    fn param(&mut self, node: Node<'_>, tool: &str) -> Option<ParamSpec> {
        let table = self.table(node, "params")?;
        let before = self.out.problems.len();
        let name = match table.get("name") {
            Some(item) => self.string(Node::Item(item), "name"),
            None => {
                self.problem(node.span(), format!("{tool}: a parameter needs a `name`"));
                None
            }
        };
        let label = name.clone().unwrap_or_default();
        let what = format!("{tool}, parameter {label:?}");
        if !label.is_empty()
            && !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            self.problem(
                node.span(),
                format!("{what}: a name must be letters, digits or '_'"),
            );
        }
        self.unknown_keys(table, PARAM_KEYS, &what);
        let mut spec = ParamSpec {
            name: label,
            ty: ParamType::String,
            items: ParamType::String,
            required: false,
            default: None,
            min: None,
            max: None,
            pattern: None,
            allowed: Vec::new(),
            flag: None,
            allow_leading_dash: false,
            description: None,
        };
        let mut default_node = None;
        let mut present = BTreeSet::new();
        for (key, _, value) in entries(table) {
            present.insert(key);
            match key {
                "type" | "items" => {
                    let Some(text) = self.string(value, key) else {
                        continue;
                    };
                    match ParamType::parse(&text) {
                        Some(ty) if key == "type" => spec.ty = ty,
                        Some(ParamType::List | ParamType::Boolean) => self.problem(
                            value.span(),
                            format!("{what}: `items` must be string, integer, number, enum or path"),
                        ),
                        Some(ty) => spec.items = ty,
                        None => self.problem(
                            value.span(),
                            format!("{what}: unknown type {text:?} (string, integer, number, boolean, enum, path, list)"),
                        ),
                    }
                }
                "required" => spec.required = self.boolean(value, key).unwrap_or(false),
                "default" => default_node = Some(value),
                "min" | "max" => match value.as_number() {
                    Some(n) if key == "min" => spec.min = Some(n),
                    Some(n) => spec.max = Some(n),
                    None => self.problem(
                        value.span(),
                        format!(
                            "{what}: `{key}` must be a number, found {}",
                            value.type_name()
                        ),
                    ),
                },
                "pattern" => {
                    let Some(text) = self.string(value, key) else {
                        continue;
                    };
                    match Regex::new(&format!("^(?:{text})$")) {
                        Ok(re) => spec.pattern = Some(re),
                        Err(err) => self.problem(
                            value.span(),
                            format!(
                                "{what}: `pattern` is not a valid regex: {}",
                                one_line(&err.to_string())
                            ),
                        ),
                    }
                }
                "enum" => {
                    let values = self.strings(value, key).unwrap_or_default();
                    if values.is_empty() {
                        self.problem(value.span(), format!("{what}: `enum` lists no values"));
                    }
                    spec.allowed = values.into_iter().map(|(v, _)| v).collect();
                }
                "flag" => spec.flag = self.string(value, key),
                "allow_leading_dash" => {
                    spec.allow_leading_dash = self.boolean(value, key).unwrap_or(false)
                }
                "description" => spec.description = self.string(value, key),
                _ => {}
            }
        }
        let span = node.span();
        let element_ty = if spec.ty == ParamType::List {
            spec.items
        } else {
            spec.ty
        };
        if spec.ty == ParamType::Enum && spec.allowed.is_empty() && !present.contains("enum") {
            self.problem(
                span.clone(),
                format!("{what}: type \"enum\" needs `enum = [...]`"),
            );
        }
        if element_ty == ParamType::Enum && spec.ty == ParamType::List && spec.allowed.is_empty() {
            self.problem(
                span.clone(),
                format!("{what}: items \"enum\" needs `enum = [...]`"),
            );
        }
        if present.contains("enum") && !matches!(element_ty, ParamType::String | ParamType::Enum) {
            self.problem(
                span.clone(),
                format!("{what}: `enum` applies to string and enum parameters only"),
            );
        }
        if present.contains("items") && spec.ty != ParamType::List {
            self.problem(
                span.clone(),
                format!("{what}: `items` applies to list parameters only"),
            );
        }
        if present.contains("flag") && spec.ty != ParamType::Boolean {
            self.problem(
                span.clone(),
                format!("{what}: `flag` applies to boolean parameters only"),
            );
        }
        if (present.contains("min") || present.contains("max"))
            && matches!(
                spec.ty,
                ParamType::Boolean | ParamType::Enum | ParamType::Path
            )
        {
            self.problem(
                span.clone(),
                format!(
                    "{what}: `min`/`max` do not apply to {} parameters",
                    spec.ty.as_str()
                ),
            );
        }
        if present.contains("pattern") && !matches!(element_ty, ParamType::String | ParamType::Path)
        {
            self.problem(
                span.clone(),
                format!("{what}: `pattern` applies to string and path parameters only"),
            );
        }
        if let (Some(min), Some(max)) = (spec.min, spec.max)
            && min > max
        {
            self.problem(
                span.clone(),
                format!("{what}: min {min} is greater than max {max}"),
            );
        }
        if let Some(default_node) = default_node {
            if spec.required {
                self.problem(
                    default_node.span(),
                    format!("{what}: a required parameter cannot have a default"),
                );
            }
            match default_node.to_json() {
                Some(json) => match check_default(&spec, &json) {
                    Ok(()) => spec.default = Some(json),
                    Err(reason) => self.problem(
                        default_node.span(),
                        format!("{what}: bad default: {reason}"),
                    ),
                },
                None => self.problem(
                    default_node.span(),
                    format!("{what}: `default` cannot be {}", default_node.type_name()),
                ),
            }
        }
        name?;
        (self.out.problems.len() == before).then_some(spec)
    }

    fn check_placeholders(&mut self, tool: &ToolSpec, span: Option<Range<usize>>, what: &str) {
        let mut used = BTreeSet::new();
        for element in &tool.command {
            for name in element.placeholders() {
                used.insert(name.to_owned());
                let Some(param) = tool.param(name) else {
                    self.problem(
                        span.clone(),
                        format!("{what}: unknown placeholder {{{name}}} in {:?} (declare it in `params`)", element.source),
                    );
                    continue;
                };
                let whole = element.whole_placeholder().is_some();
                if param.ty == ParamType::List && !whole {
                    self.problem(
                        span.clone(),
                        format!(
                            "{what}: list parameter {{{name}}} must be a whole command element"
                        ),
                    );
                }
                if param.flag.is_some() && !whole {
                    self.problem(
                        span.clone(),
                        format!("{what}: boolean flag parameter {{{name}}} must be a whole command element"),
                    );
                }
            }
        }
        for param in &tool.params {
            if param.ty != ParamType::List && !used.contains(&param.name) {
                self.problem(
                    span.clone(),
                    format!(
                        "{what}: parameter {:?} is never used in `command`",
                        param.name
                    ),
                );
            }
        }
    }
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> ParsedFile {
        parse_file(Path::new("r.toml"), text)
    }

    fn messages(parsed: &ParsedFile) -> Vec<String> {
        parsed.problems.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn seed_example_loads_unchanged() {
        let parsed = parse(
            r#"[[tools]]
name = "git_status"
command = ["git", "status", "--porcelain"]
timeout = 10
cwd = "project_root"
risk = "low"
description = "List changed files"
"#,
        );
        assert!(parsed.problems.is_empty(), "{:?}", messages(&parsed));
        let tool = &parsed.tools[0];
        assert_eq!(tool.name, "git_status");
        assert_eq!(tool.risk, Risk::Low);
        assert_eq!(tool.timeout, Some(Duration::from_secs(10)));
        assert_eq!(tool.cwd, CwdPolicy::ProjectRoot);
    }

    #[test]
    fn every_problem_is_reported_with_its_line() {
        let parsed = parse(
            r#"colour = 1
[[tools]]
name = "a"
command = ["echo", "{nope}"]

[[tools]]
name = "b"
command = "echo"
cwd = "project_root"
timeout = "ten"
risk = "extreme"
params = [{ name = "x", type = "integr" }]

[[tools]]
name = "a"
command = ["true"]
cwd = "caller"
"#,
        );
        let all = messages(&parsed).join("\n");
        assert!(all.contains("r.toml:1:1: unknown key `colour`"), "{all}");
        assert!(
            all.contains("r.toml:2:") && all.contains("no `cwd` policy"),
            "{all}"
        );
        assert!(all.contains("unknown placeholder {nope}"), "{all}");
        assert!(
            all.contains("r.toml:8:11: `command` must be an array"),
            "{all}"
        );
        assert!(
            all.contains("r.toml:10:11: `timeout` must be a number"),
            "{all}"
        );
        assert!(all.contains("r.toml:11:8: `risk` must be"), "{all}");
        assert!(all.contains("unknown type \"integr\""), "{all}");
        assert!(
            all.contains("r.toml:14:1: duplicate tool name \"a\""),
            "{all}"
        );
        assert!(parsed.problems.len() >= 8, "{all}");
    }

    #[test]
    fn parse_errors_have_a_line() {
        let parsed = parse("a = 1\n[[tools]\n");
        assert_eq!(parsed.problems.len(), 1);
        assert_eq!(parsed.problems[0].location.line, 2);
        assert!(parsed.problems[0].message.starts_with("invalid TOML"));
    }

    #[test]
    fn param_constraints_are_checked() {
        let parsed = parse(
            r#"[[tools]]
name = "t"
cwd = "project_root"
command = ["x", "{a}", "{b}", "--n={c}", "{d}"]
params = [
  { name = "a", type = "enum" },
  { name = "b", type = "integer", min = 5, max = 1, default = 3 },
  { name = "c", type = "string", required = true, default = "x" },
  { name = "d", type = "boolean", flag = "--d", pattern = "x" },
  { name = "e", type = "string" },
  { name = "f", type = "string", pattern = "(" },
]
"#,
        );
        let all = messages(&parsed).join("\n");
        for needle in [
            "needs `enum = [...]`",
            "min 5 is greater than max 1",
            "bad default",
            "required parameter cannot have a default",
            "`pattern` applies to string",
            "\"e\" is never used",
            "not a valid regex",
        ] {
            assert!(all.contains(needle), "missing {needle:?} in\n{all}");
        }
    }

    #[test]
    fn program_cannot_be_a_placeholder() {
        let parsed = parse(
            "[[tools]]\nname = \"t\"\ncwd = \"caller\"\ncommand = [\"{p}\"]\nparams = [{ name = \"p\" }]\n",
        );
        assert!(
            messages(&parsed)
                .join("\n")
                .contains("program (first element)")
        );
    }
}
