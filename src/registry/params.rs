//! Request arguments checked against a tool's typed parameters, and the
//! argv built from them.
//!
//! Every value is checked before anything runs: type, required, bounds,
//! pattern, allowed values, NUL bytes, paths confined to the project root,
//! and a leading `-` (which the program would read as an option) refused
//! unless the parameter allows it. A value then fills exactly one argv
//! element (or one per item for lists); no shell ever sees it.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::model::{ExtraArgs, ParamSpec, ParamType, ToolSpec};
use super::template::Piece;
#[cfg(windows)]
use crate::platform_windows::locate::locate;
#[cfg(unix)]
use crate::workspace::locate;

/// A parameter's value as argv text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Rendered {
    One(String),
    Many(Vec<String>),
}

/// Where paths are resolved: the canonical project root and run directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PathContext<'a> {
    pub(crate) root: &'a Path,
    pub(crate) cwd: &'a Path,
}

/// Checks a default against its parameter (no path resolution: that happens per request).
pub(crate) fn check_default(spec: &ParamSpec, value: &Value) -> Result<(), String> {
    render(spec, value, None, true).map(|_| ())
}

/// The request's named arguments, checked and rendered (absent optional
/// parameters are missing from the map). All problems are reported at once.
pub(crate) fn validate_named(
    tool: &ToolSpec,
    args: &serde_json::Map<String, Value>,
    paths: PathContext<'_>,
) -> Result<BTreeMap<String, Rendered>, String> {
    let mut problems = Vec::new();
    for name in args.keys() {
        if tool.param(name).is_none() {
            let known: Vec<&str> = tool.params.iter().map(|p| p.name.as_str()).collect();
            problems.push(if known.is_empty() {
                format!("unknown parameter `{name}` (tool {} takes none)", tool.name)
            } else {
                format!("unknown parameter `{name}` (known: {})", known.join(", "))
            });
        }
    }
    let mut out = BTreeMap::new();
    for spec in &tool.params {
        let given = args.get(&spec.name).filter(|v| !v.is_null());
        let value = match (given, &spec.default) {
            (Some(value), _) => value,
            (None, Some(default)) => default,
            (None, None) if spec.required => {
                problems.push(format!("missing required parameter `{}`", spec.name));
                continue;
            }
            (None, None) => continue,
        };
        let leads = spec.ty == ParamType::List
            || tool
                .command
                .iter()
                .any(|t| t.leading_placeholder() == Some(spec.name.as_str()));
        match render(spec, value, Some(paths), leads) {
            Ok(Some(rendered)) => {
                out.insert(spec.name.clone(), rendered);
            }
            Ok(None) => {}
            Err(reason) => problems.push(format!("parameter `{}`: {reason}", spec.name)),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems.join("; "))
    }
}

/// A request's list of strings, checked against the tool's `extra_args`.
pub(crate) fn validate_extra(tool: &ToolSpec, extra: &[String]) -> Result<(), String> {
    if extra.is_empty() {
        return Ok(());
    }
    if tool.extra_args == ExtraArgs::None {
        return Err(format!(
            "tool {} does not take a list of arguments; pass named parameters",
            tool.name
        ));
    }
    for arg in extra {
        if arg.contains('\0') {
            return Err("an argument contains a NUL byte".to_owned());
        }
        if tool.extra_args == ExtraArgs::Positional && arg.starts_with('-') {
            return Err(format!(
                "argument {arg:?} starts with '-' and would be read as an option; tool {} accepts positional arguments only",
                tool.name
            ));
        }
    }
    Ok(())
}

/// The argv: command elements filled, absent optional elements dropped,
/// unreferenced list parameters and then `extra` appended.
pub(crate) fn expand(
    tool: &ToolSpec,
    values: &BTreeMap<String, Rendered>,
    extra: &[String],
) -> Vec<String> {
    let mut argv = Vec::new();
    let mut referenced = std::collections::BTreeSet::new();
    'elements: for template in &tool.command {
        let mut element = String::new();
        let mut many = None;
        for piece in &template.pieces {
            match piece {
                Piece::Literal(text) => element.push_str(text),
                Piece::Placeholder(name) => {
                    referenced.insert(name.as_str());
                    match values.get(name) {
                        None => continue 'elements,
                        Some(Rendered::One(text)) => element.push_str(text),
                        Some(Rendered::Many(items)) => many = Some(items),
                    }
                }
            }
        }
        match many {
            Some(items) => argv.extend(items.iter().cloned()),
            None => argv.push(element),
        }
    }
    for spec in &tool.params {
        if spec.ty == ParamType::List
            && !referenced.contains(spec.name.as_str())
            && let Some(Rendered::Many(items)) = values.get(&spec.name)
        {
            argv.extend(items.iter().cloned());
        }
    }
    argv.extend(extra.iter().cloned());
    argv
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// One value rendered; `Ok(None)` = the element is dropped (a false flag).
fn render(
    spec: &ParamSpec,
    value: &Value,
    paths: Option<PathContext<'_>>,
    leads: bool,
) -> Result<Option<Rendered>, String> {
    match spec.ty {
        ParamType::List => {
            let Value::Array(items) = value else {
                return Err(format!("expected a list, got {}", describe(value)));
            };
            check_bounds(spec, items.len() as f64, "items")?;
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                out.push(
                    render_scalar(spec, spec.items, item, paths, leads)
                        .map_err(|reason| format!("item {i}: {reason}"))?,
                );
            }
            Ok(Some(Rendered::Many(out)))
        }
        ParamType::Boolean => {
            let Value::Bool(b) = value else {
                return Err(format!("expected true or false, got {}", describe(value)));
            };
            Ok(match (&spec.flag, b) {
                (Some(flag), true) => Some(Rendered::One(flag.clone())),
                (Some(_), false) => None,
                (None, b) => Some(Rendered::One(b.to_string())),
            })
        }
        ty => render_scalar(spec, ty, value, paths, leads).map(|s| Some(Rendered::One(s))),
    }
}

fn render_scalar(
    spec: &ParamSpec,
    ty: ParamType,
    value: &Value,
    paths: Option<PathContext<'_>>,
    leads: bool,
) -> Result<String, String> {
    match ty {
        ParamType::Integer => {
            let n = value
                .as_i64()
                .ok_or_else(|| format!("expected an integer, got {}", describe_number(value)))?;
            check_bounds(spec, n as f64, "")?;
            Ok(n.to_string())
        }
        ParamType::Number => {
            let n = value
                .as_f64()
                .filter(|n| n.is_finite())
                .ok_or_else(|| format!("expected a number, got {}", describe(value)))?;
            check_bounds(spec, n, "")?;
            Ok(match value {
                Value::Number(number) => number.to_string(),
                _ => n.to_string(),
            })
        }
        ParamType::Enum => {
            let text = text_of(value)?;
            if spec.allowed.iter().any(|a| a == text) {
                Ok(text.to_owned())
            } else {
                Err(format!(
                    "{text:?} is not one of {}",
                    spec.allowed.join(", ")
                ))
            }
        }
        ParamType::String => {
            let text = text_of(value)?;
            check_bounds(spec, text.chars().count() as f64, "characters")?;
            check_pattern(spec, text)?;
            if !spec.allowed.is_empty() && !spec.allowed.iter().any(|a| a == text) {
                return Err(format!(
                    "{text:?} is not one of {}",
                    spec.allowed.join(", ")
                ));
            }
            if leads && !spec.allow_leading_dash && text.starts_with('-') {
                return Err(format!(
                    "{text:?} starts with '-' and would be read as an option by the program"
                ));
            }
            Ok(text.to_owned())
        }
        ParamType::Path => {
            let text = text_of(value)?;
            check_pattern(spec, text)?;
            let Some(paths) = paths else {
                return Ok(text.to_owned());
            };
            let resolved =
                locate(paths.root, paths.cwd, Path::new(text)).map_err(|e| e.to_string())?;
            resolved
                .to_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("path {text:?} resolves to a name that is not UTF-8"))
        }
        ParamType::Boolean | ParamType::List => Err("nested lists are not supported".to_owned()),
    }
}

fn describe_number(value: &Value) -> String {
    match value {
        Value::Number(n) => format!("{n}"),
        other => describe(other).to_owned(),
    }
}

fn text_of(value: &Value) -> Result<&str, String> {
    let Value::String(text) = value else {
        return Err(format!("expected a string, got {}", describe(value)));
    };
    if text.contains('\0') {
        return Err("the value contains a NUL byte".to_owned());
    }
    Ok(text)
}

fn check_pattern(spec: &ParamSpec, text: &str) -> Result<(), String> {
    match &spec.pattern {
        Some(re) if !re.is_match(text) => Err(format!(
            "{text:?} does not match the pattern {}",
            re.as_str()
                .trim_start_matches("^(?:")
                .trim_end_matches(")$")
        )),
        _ => Ok(()),
    }
}

fn check_bounds(spec: &ParamSpec, n: f64, unit: &str) -> Result<(), String> {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    if let Some(min) = spec.min
        && n < min
    {
        return Err(format!("{n}{unit} is less than the minimum {min}"));
    }
    if let Some(max) = spec.max
        && n > max
    {
        return Err(format!("{n}{unit} is more than the maximum {max}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::parse::parse_file;
    use serde_json::json;

    fn tool(toml: &str) -> ToolSpec {
        let parsed = parse_file(Path::new("t.toml"), toml);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        parsed.tools.into_iter().next().unwrap()
    }

    fn run(tool: &ToolSpec, args: Value) -> Result<Vec<String>, String> {
        let root = std::env::temp_dir().canonicalize().unwrap();
        let paths = PathContext {
            root: &root,
            cwd: &root,
        };
        let values = validate_named(tool, args.as_object().unwrap(), paths)?;
        Ok(expand(tool, &values, &[]))
    }

    const GREP: &str = r#"[[tools]]
name = "grep"
cwd = "project_root"
command = ["grep", "-n", "{ignore}", "--max-count={count}", "-e", "{pattern}", "--", "{files}"]
params = [
  { name = "pattern", type = "string", required = true, allow_leading_dash = true },
  { name = "count", type = "integer", min = 1, max = 100 },
  { name = "ignore", type = "boolean", flag = "-i", default = false },
  { name = "files", type = "list" },
]
"#;

    #[test]
    fn placeholders_fill_whole_elements_and_absent_ones_drop() {
        let t = tool(GREP);
        assert_eq!(
            run(&t, json!({"pattern": "; rm -rf /"})).unwrap(),
            ["grep", "-n", "-e", "; rm -rf /", "--"]
        );
        assert_eq!(
            run(
                &t,
                json!({"pattern": "$(id)", "count": 3, "ignore": true, "files": ["a b", "`c`"]})
            )
            .unwrap(),
            [
                "grep",
                "-n",
                "-i",
                "--max-count=3",
                "-e",
                "$(id)",
                "--",
                "a b",
                "`c`"
            ]
        );
    }

    #[test]
    fn bad_values_are_refused_with_reasons() {
        let t = tool(GREP);
        let err = run(&t, json!({"count": 0, "ignore": "yes", "extra": 1})).unwrap_err();
        for needle in [
            "unknown parameter `extra`",
            "missing required parameter `pattern`",
            "less than the minimum",
            "expected true or false",
        ] {
            assert!(err.contains(needle), "{needle} in {err}");
        }
        assert!(
            run(&t, json!({"pattern": "a\u{0}b"}))
                .unwrap_err()
                .contains("NUL")
        );
        assert!(
            run(&t, json!({"pattern": "a", "count": 2.5}))
                .unwrap_err()
                .contains("integer")
        );
        assert!(
            run(&t, json!({"pattern": "a", "files": ["--exec=x"]}))
                .unwrap_err()
                .contains("option")
        );
    }

    #[test]
    fn leading_dash_is_refused_unless_allowed() {
        let t = tool(
            "[[tools]]\nname = \"t\"\ncwd = \"project_root\"\ncommand = [\"ls\", \"{p}\"]\nparams = [{ name = \"p\", pattern = \"[-a-z]+\" }]\n",
        );
        assert!(
            run(&t, json!({"p": "--help"}))
                .unwrap_err()
                .contains("read as an option")
        );
        assert_eq!(run(&t, json!({"p": "a-b"})).unwrap(), ["ls", "a-b"]);
        assert!(run(&t, json!({"p": "A"})).unwrap_err().contains("pattern"));
    }

    #[test]
    fn lists_without_placeholder_are_appended_and_extra_args_follow() {
        let t = tool(
            "[[tools]]\nname = \"t\"\ncwd = \"project_root\"\ncommand = [\"echo\", \"{e}\"]\nparams = [{ name = \"l\", type = \"list\", items = \"integer\", max = 2 }, { name = \"e\", type = \"enum\", enum = [\"x\", \"y\"], default = \"x\" }]\n",
        );
        let root = std::env::temp_dir().canonicalize().unwrap();
        let paths = PathContext {
            root: &root,
            cwd: &root,
        };
        let values = validate_named(&t, json!({"l": [1, 2]}).as_object().unwrap(), paths).unwrap();
        assert_eq!(
            expand(&t, &values, &["z".into()]),
            ["echo", "x", "1", "2", "z"]
        );
        assert!(
            run(&t, json!({"l": [1, 2, 3]}))
                .unwrap_err()
                .contains("maximum")
        );
        assert!(
            run(&t, json!({"e": "q"}))
                .unwrap_err()
                .contains("not one of")
        );
        assert!(validate_extra(&t, &["-x".into()]).is_err());
        assert!(validate_extra(&t, &["x".into()]).is_ok());
    }
}
