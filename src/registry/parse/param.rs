//! A tool's `params = [...]`: each table read key by key into a
//! [`ParamSpec`] (its name, type, bounds, pattern, allowed values, flag,
//! default), duplicates refused. What one key alone can get wrong is reported
//! here; what the keys get wrong together is the parameter's own
//! [`ParamSpec::problems`]. A parameter with any problem is left out.

use regex::Regex;

use super::Walker;
use super::param_rules::{DeclaredKeys, ParamPart};
use crate::registry::model::{ParamSpec, ParamType};
use crate::registry::node::{Node, entries};

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

impl Walker<'_> {
    /// Every parameter of the tool `what` names; broken ones are left out.
    pub(super) fn params(&mut self, node: Node<'_>, what: &str) -> Vec<ParamSpec> {
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

    /// One parameter; `None` when it has any problem (all are recorded).
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
        let mut declared = DeclaredKeys::default();
        for (key, _, value) in entries(table) {
            match key {
                "type" | "items" => {
                    declared.items |= key == "items";
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
                "default" => {
                    declared.default = true;
                    default_node = Some(value);
                }
                "min" | "max" => {
                    declared.min_or_max = true;
                    match value.as_number() {
                        Some(n) if key == "min" => spec.min = Some(n),
                        Some(n) => spec.max = Some(n),
                        None => self.problem(
                            value.span(),
                            format!(
                                "{what}: `{key}` must be a number, found {}",
                                value.type_name()
                            ),
                        ),
                    }
                }
                "pattern" => {
                    declared.pattern = true;
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
                    declared.allowed = true;
                    let values = self.strings(value, key).unwrap_or_default();
                    if values.is_empty() {
                        self.problem(value.span(), format!("{what}: `enum` lists no values"));
                    }
                    spec.allowed = values.into_iter().map(|(v, _)| v).collect();
                }
                "flag" => {
                    declared.flag = true;
                    spec.flag = self.string(value, key);
                }
                "allow_leading_dash" => {
                    spec.allow_leading_dash = self.boolean(value, key).unwrap_or(false)
                }
                "description" => spec.description = self.string(value, key),
                _ => {}
            }
        }
        let default_json = default_node.and_then(|n| n.to_json());
        spec.default = default_json;
        let span = node.span();
        let default_span = default_node.and_then(|n| n.span());
        for problem in spec.problems(declared) {
            let at = match problem.part {
                ParamPart::Definition => span.clone(),
                ParamPart::Default => default_span.clone(),
            };
            self.problem(at, format!("{what}: {}", problem.message));
        }
        if let Some(default_node) = default_node
            && spec.default.is_none()
        {
            self.problem(
                default_node.span(),
                format!("{what}: `default` cannot be {}", default_node.type_name()),
            );
        }
        name?;
        (self.out.problems.len() == before).then_some(spec)
    }
}

/// A multi-line message (the regex crate's) on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::testing::{messages, parse};

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
}
