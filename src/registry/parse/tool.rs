//! The tool walker: `tools = [...]` (or `[[tools]]`) read one table at a
//! time into a [`ToolSpec`], with duplicate names refused, the command's
//! templates parsed, and every `{placeholder}` matched against the declared
//! parameters (and every parameter against a use). A tool with any problem
//! is left out; its problems are all recorded.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;

use super::Walker;
use crate::registry::location::{Location, Problem};
use crate::registry::model::{CwdPolicy, ExtraArgs, ParamType, Risk, ToolSpec, is_valid_tool_name};
use crate::registry::node::{Node, entries};
use crate::registry::template::ArgTemplate;

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
    "idempotent",
    "cache_failures",
    "network",
    "sandbox",
    "interactive",
    "extra_args",
];

impl Walker<'_> {
    pub(super) fn tools(&mut self, node: Node<'_>) {
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
            idempotent: false,
            cache_failures: false,
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
                "idempotent" => tool.idempotent = self.boolean(value, key).unwrap_or(false),
                "cache_failures" => {
                    tool.cache_failures = self.boolean(value, key).unwrap_or(false);
                }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{messages, parse};
    use crate::registry::model::{CwdPolicy, Risk};

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
