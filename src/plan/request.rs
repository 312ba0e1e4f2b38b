//! What every door asks the plan stage for: a [`Request`]. `exec --json`'s
//! JSON is checked field by field into one, or refused as
//! `malformed_request` with the request's `id` kept so the answer can still
//! be matched; the other doors fill one in from their own inputs.

use std::ffi::OsString;
use std::path::PathBuf;

use serde_json::{Map, Value};

use crate::registry::kinds;
use crate::registry::model::ToolSpec;
use crate::sandbox::Policy;
use crate::scheduler::Priority;

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Target {
    /// A registry tool and its arguments.
    Tool { name: String, args: Args },
    /// A raw argv (no shell), where `allow_raw_commands` is on.
    Command(Vec<OsString>),
    /// The built-in `apply_patch` with its patch text.
    ApplyPatch { input: String },
}

/// A tool's arguments: named parameters, or strings appended to the command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Args {
    Named(Map<String, Value>),
    List(Vec<String>),
}

/// One checked request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Request {
    pub(crate) id: Option<Value>,
    pub(crate) target: Target,
    pub(crate) workdir: Option<PathBuf>,
    /// `None`: the default of the kind (a tool's timeout, 10 s for a
    /// one-shot command, none for a session); `Some(0)`: none.
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) tty: Option<bool>,
    pub(crate) priority: Priority,
    pub(crate) approve: bool,
    /// `"no_cache": true`: run it even when a cached result would answer.
    pub(crate) no_cache: bool,
    pub(crate) max_output_tokens: Option<usize>,
    /// Raw commands: values added to the environment (`run --env N=V`, a
    /// listener's env vars).
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Raw commands: names copied from our environment (`run --env NAME`).
    pub(crate) pass_env: Vec<String>,
    /// Raw commands: `env` is the whole environment (`subprocess.run(env=)`).
    pub(crate) replace_env: bool,
    /// A narrower sandbox than the policy's (never a wider one).
    pub(crate) sandbox: Option<Policy>,
    /// A live session (streams merged, newest output kept for `wait_for`),
    /// not a one-shot run.
    pub(crate) session: bool,
    /// Raw commands: blanks at the end of lines are kept (a door that must
    /// pass output on byte for byte, as SWE-ReX's); dropped otherwise.
    pub(crate) keep_blanks: bool,
    /// Where what a one-shot command leaves running goes (the broker's, for
    /// the doors whose platforms keep it); never from the wire.
    #[cfg(unix)]
    pub(crate) background: Option<super::Background>,
}

/// A request refused before anything ran.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Malformed {
    pub(crate) id: Option<Value>,
    pub(crate) tool: Option<String>,
    pub(crate) kind: &'static str,
    pub(crate) message: String,
}

const FIELDS: &[&str] = &[
    "id",
    "tool",
    "args",
    "command",
    "workdir",
    "timeout_ms",
    "tty",
    "priority",
    "approve",
    "no_cache",
    "max_output_tokens",
];

impl Request {
    /// A request for `target` with every other field at its default.
    pub(crate) fn new(target: Target) -> Self {
        Self {
            id: None,
            target,
            workdir: None,
            timeout_ms: None,
            tty: None,
            priority: Priority::Normal,
            approve: false,
            no_cache: false,
            max_output_tokens: None,
            env: Vec::new(),
            pass_env: Vec::new(),
            replace_env: false,
            sandbox: None,
            session: false,
            keep_blanks: false,
            #[cfg(unix)]
            background: None,
        }
    }

    /// A request for `tool` with named arguments (what an MCP tool call carries).
    pub(crate) fn for_tool(id: Option<Value>, tool: &str, args: Map<String, Value>) -> Self {
        Self {
            id,
            ..Self::new(Target::Tool {
                name: tool.to_owned(),
                args: Args::Named(args),
            })
        }
    }

    /// A request for the registry tool `tool` from an MCP call's arguments:
    /// the request-level fields (`approve`, `max_output_tokens`) are taken
    /// out of them unless the tool declares a parameter of that name.
    pub(crate) fn for_mcp_tool(tool: &ToolSpec, mut args: Map<String, Value>) -> Self {
        let mut take = |field: &str| {
            if tool.declares(field) {
                None
            } else {
                args.remove(field)
            }
        };
        let approve = take("approve");
        let max_tokens = take("max_output_tokens");
        let mut request = Self::for_tool(None, tool.name(), args);
        request.approve = approve.and_then(|v| v.as_bool()).unwrap_or(false);
        request.max_output_tokens = max_tokens
            .and_then(|v| v.as_u64())
            .and_then(|v| usize::try_from(v).ok());
        request
    }

    /// A raw command.
    pub(crate) fn command(argv: Vec<OsString>) -> Self {
        Self::new(Target::Command(argv))
    }

    /// Parses one request line.
    pub(crate) fn from_line(line: &str) -> Result<Self, Malformed> {
        match serde_json::from_str::<Value>(line) {
            Ok(value) => Self::from_json(&value),
            Err(err) => Err(Malformed {
                id: None,
                tool: None,
                kind: kinds::MALFORMED_REQUEST,
                message: format!("the request is not valid JSON: {err}"),
            }),
        }
    }

    /// Checks a JSON request.
    pub(crate) fn from_json(value: &Value) -> Result<Self, Malformed> {
        let Value::Object(object) = value else {
            return Err(malformed(
                None,
                None,
                "a request must be a JSON object".into(),
            ));
        };
        let id = object.get("id").cloned().filter(|v| !v.is_null());
        let tool_name = object
            .get("tool")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let fail = |message: String| malformed(id.clone(), tool_name.clone(), message);
        if let Some(id) = &id
            && !(id.is_string() || id.is_number())
        {
            return Err(malformed(
                None,
                tool_name.clone(),
                "`id` must be a string or a number".into(),
            ));
        }
        for key in object.keys() {
            if !FIELDS.contains(&key.as_str()) {
                return Err(fail(format!(
                    "unknown field `{key}` (known: {})",
                    FIELDS.join(", ")
                )));
            }
        }
        let target = match (object.get("tool"), object.get("command")) {
            (Some(_), Some(_)) => {
                return Err(fail("give either `tool` or `command`, not both".into()));
            }
            (None, None) => {
                return Err(fail(
                    "a request needs `tool` (a registry tool) or `command` (an argv)".into(),
                ));
            }
            (Some(tool), None) => {
                let name = tool
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| fail("`tool` must be a non-empty string".into()))?
                    .to_owned();
                let args = match object.get("args") {
                    None | Some(Value::Null) => Args::Named(Map::new()),
                    Some(Value::Object(map)) => Args::Named(map.clone()),
                    Some(Value::Array(items)) => {
                        Args::List(string_list(items).ok_or_else(|| {
                            fail("`args` as a list must hold strings only".into())
                        })?)
                    }
                    Some(_) => {
                        return Err(fail(
                            "`args` must be an object of parameters or a list of strings".into(),
                        ));
                    }
                };
                Target::Tool { name, args }
            }
            (None, Some(command)) => {
                if object.contains_key("args") {
                    return Err(fail(
                        "`args` belongs to `tool` requests; put arguments in `command`".into(),
                    ));
                }
                let argv = match command {
                    Value::Array(items) => string_list(items),
                    _ => None,
                }
                .filter(|argv| !argv.is_empty())
                .ok_or_else(|| fail("`command` must be a non-empty list of strings (an argv; there is no shell)".into()))?;
                if argv.iter().any(|a| a.contains('\0')) {
                    return Err(fail("`command` contains a NUL byte".into()));
                }
                Target::Command(argv.into_iter().map(OsString::from).collect())
            }
        };
        let workdir = match object.get("workdir") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() && !s.contains('\0') => Some(PathBuf::from(s)),
            Some(_) => return Err(fail("`workdir` must be a non-empty string".into())),
        };
        let timeout_ms = optional_u64(object, "timeout_ms").map_err(fail)?;
        let max_output_tokens = optional_u64(object, "max_output_tokens")
            .map_err(fail)?
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let tty = optional_bool(object, "tty").map_err(fail)?;
        let approve = optional_bool(object, "approve")
            .map_err(fail)?
            .unwrap_or(false);
        let no_cache = optional_bool(object, "no_cache")
            .map_err(fail)?
            .unwrap_or(false);
        let priority = match object.get("priority") {
            None | Some(Value::Null) => Priority::Normal,
            Some(Value::String(s)) => Priority::parse(s).ok_or_else(|| {
                fail(format!(
                    "`priority` must be \"high\", \"normal\" or \"low\", not {s:?}"
                ))
            })?,
            Some(_) => {
                return Err(fail(
                    "`priority` must be \"high\", \"normal\" or \"low\"".into(),
                ));
            }
        };
        Ok(Self {
            id,
            workdir,
            timeout_ms,
            tty,
            priority,
            approve,
            no_cache,
            max_output_tokens,
            ..Self::new(target)
        })
    }

    /// The tool name (`None` for raw commands).
    pub(crate) fn tool_name(&self) -> Option<&str> {
        match &self.target {
            Target::Tool { name, .. } => Some(name),
            Target::Command(_) | Target::ApplyPatch { .. } => None,
        }
    }
}

fn malformed(id: Option<Value>, tool: Option<String>, message: String) -> Malformed {
    Malformed {
        id,
        tool,
        kind: kinds::MALFORMED_REQUEST,
        message,
    }
}

fn string_list(items: &[Value]) -> Option<Vec<String>> {
    items
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

fn optional_u64(object: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` must be a non-negative integer")),
    }
}

fn optional_bool(object: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("`{key}` must be true or false")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_and_command_requests_parse() {
        let r = Request::from_json(&json!({"id": "req-7", "tool": "git_status", "args": {"path": "src"}, "priority": "high", "approve": true})).unwrap();
        assert_eq!(r.id, Some(json!("req-7")));
        assert_eq!(r.priority, Priority::High);
        assert!(r.approve);
        let r = Request::from_json(
            &json!({"id": 8, "command": ["ls", "-la"], "workdir": "/repo", "timeout_ms": 5000}),
        )
        .unwrap();
        assert_eq!(r.target, Target::Command(vec!["ls".into(), "-la".into()]));
        assert_eq!(r.timeout_ms, Some(5000));
        let r = Request::from_json(&json!({"tool": "t", "args": ["a", "b"]})).unwrap();
        assert!(matches!(
            r.target,
            Target::Tool {
                args: Args::List(_),
                ..
            }
        ));
    }

    #[test]
    fn malformed_requests_keep_their_id() {
        for bad in [
            json!({"id": 1, "tool": "a", "command": ["b"]}),
            json!({"id": 1}),
            json!({"id": 1, "command": "ls -la"}),
            json!({"id": 1, "command": []}),
            json!({"id": 1, "tool": "a", "args": 3}),
            json!({"id": 1, "tool": "a", "aprove": true}),
            json!({"id": 1, "tool": "a", "timeout_ms": -1}),
            json!({"id": 1, "tool": "a", "priority": "urgent"}),
            json!({"id": 1, "command": ["a\u{0}"]}),
        ] {
            let err = Request::from_json(&bad).unwrap_err();
            assert_eq!(err.id, Some(json!(1)), "{bad}");
            assert_eq!(err.kind, kinds::MALFORMED_REQUEST);
        }
        assert!(Request::from_line("{not json").is_err());
        assert!(Request::from_json(&json!([1])).is_err());
    }
}
