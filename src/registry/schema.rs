//! Tools as JSON schemas, for function calling (`tools schema`) and for the
//! MCP server's tool list.

use serde_json::{Map, Value, json};

use super::model::{CwdPolicy, ExtraArgs, ParamSpec, ParamType, ToolSpec};

/// Request-level fields an MCP call of a registry tool may carry next to
/// the tool's parameters (unless the tool declares one of the names).
pub(crate) const MCP_REQUEST_FIELDS: [&str; 2] = ["approve", "max_output_tokens"];

impl ToolSpec {
    /// The tool's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The description, or a generated one naming the command.
    pub(crate) fn description(&self) -> String {
        if self.description.is_empty() {
            let command: Vec<&str> = self.command.iter().map(|t| t.source.as_str()).collect();
            format!("Runs `{}`", command.join(" "))
        } else {
            self.description.clone()
        }
    }

    /// What a model reads about the tool (MCP `tools/list`, `tools
    /// schema`): its description, then its timeout, whether it needs the
    /// network, and whether it is interactive (so one-shot calls refuse it).
    pub(crate) fn model_description(&self) -> String {
        let timeout = self
            .timeout
            .unwrap_or(super::model::DEFAULT_TOOL_TIMEOUT)
            .as_secs_f64();
        let network = if self.network {
            "needs the network"
        } else {
            "no network"
        };
        let interactive = if self.interactive {
            " Interactive: it waits for input, so a one-shot call is refused; run it in a terminal session (exec_command with tty: true)."
        } else {
            ""
        };
        format!(
            "{}\n\nTimeout: {timeout} s; {network}.{interactive}",
            self.description()
        )
    }

    /// A JSON schema (draft 2020-12 subset) of the tool's named parameters.
    pub(crate) fn input_schema(&self) -> Value {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for param in &self.params {
            properties.insert(param.name.clone(), param_schema(param));
            if param.required {
                required.push(Value::String(param.name.clone()));
            }
        }
        let mut schema = json!({
            "type": "object",
            "properties": properties,
            "additionalProperties": false,
        });
        if !required.is_empty() {
            schema["required"] = Value::Array(required);
        }
        schema
    }

    /// The input schema an MCP client is given: [`Self::input_schema`] with
    /// the request-level fields (`approve`, `max_output_tokens`) added where
    /// the tool has no parameter of that name, so a client that validates
    /// arguments against the schema lets them through.
    pub(crate) fn mcp_input_schema(&self) -> Map<String, Value> {
        let mut schema = match self.input_schema() {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        if let Some(Value::Object(properties)) = schema.get_mut("properties") {
            for field in MCP_REQUEST_FIELDS {
                if self.declares(field) {
                    continue;
                }
                let property = match field {
                    "approve" => json!({
                        "type": "boolean",
                        "description": "Confirm a risky tool call (the registry says which tools need it)."
                    }),
                    _ => json!({
                        "type": "integer",
                        "minimum": 1,
                        "description": "Fold the output to about this many tokens (default 10000)."
                    }),
                };
                properties.insert(field.to_owned(), property);
            }
        }
        schema
    }

    /// Whether the tool has a parameter named `name`.
    pub(crate) fn declares(&self, name: &str) -> bool {
        self.params.iter().any(|p| p.name == name)
    }

    /// The OpenAI-style function definition.
    pub(crate) fn function_schema(&self) -> Value {
        let mut function = json!({
            "name": self.name,
            "description": self.model_description(),
            "parameters": self.input_schema(),
        });
        let mut notes = Vec::new();
        if self.cwd == CwdPolicy::Caller {
            notes.push("runs in the request's `workdir` (inside the project)");
        }
        if self.extra_args != ExtraArgs::None && self.params.is_empty() {
            notes.push("`args` may also be a list of strings appended to the command");
        }
        if !notes.is_empty() {
            function["x-agent-reach-notes"] = json!(notes);
        }
        json!({ "type": "function", "function": function, "x-agent-reach-risk": self.risk.as_str() })
    }
}

fn scalar_schema(param: &ParamSpec, ty: ParamType) -> Value {
    let mut schema = match ty {
        ParamType::String => json!({"type": "string"}),
        ParamType::Integer => json!({"type": "integer"}),
        ParamType::Number => json!({"type": "number"}),
        ParamType::Boolean => json!({"type": "boolean"}),
        ParamType::Enum => json!({"type": "string", "enum": param.allowed}),
        ParamType::Path => json!({"type": "string", "format": "path"}),
        ParamType::List => json!({"type": "array"}),
    };
    if ty == ParamType::String && !param.allowed.is_empty() {
        schema["enum"] = json!(param.allowed);
    }
    if let Some(pattern) = &param.pattern {
        schema["pattern"] = Value::String(pattern.as_str().to_owned());
    }
    if ty != ParamType::List {
        let (min_key, max_key) = match ty {
            ParamType::String => ("minLength", "maxLength"),
            _ => ("minimum", "maximum"),
        };
        if matches!(
            ty,
            ParamType::String | ParamType::Integer | ParamType::Number
        ) && param.ty != ParamType::List
        {
            if let Some(min) = param.min {
                schema[min_key] = number(min);
            }
            if let Some(max) = param.max {
                schema[max_key] = number(max);
            }
        }
    }
    schema
}

fn param_schema(param: &ParamSpec) -> Value {
    let mut schema = if param.ty == ParamType::List {
        let mut list = json!({"type": "array", "items": scalar_schema(param, param.items)});
        if let Some(min) = param.min {
            list["minItems"] = number(min);
        }
        if let Some(max) = param.max {
            list["maxItems"] = number(max);
        }
        list
    } else {
        scalar_schema(param, param.ty)
    };
    let mut description = param.description.clone().unwrap_or_default();
    if param.ty == ParamType::Path || param.items == ParamType::Path && param.ty == ParamType::List
    {
        if !description.is_empty() {
            description.push_str(". ");
        }
        description.push_str("A path inside the project root");
    }
    if !description.is_empty() {
        schema["description"] = Value::String(description);
    }
    if let Some(default) = &param.default {
        schema["default"] = default.clone();
    }
    schema
}

fn number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

#[cfg(test)]
mod tests {
    use crate::registry::parse::parse_file;
    use serde_json::json;
    use std::path::Path;

    #[test]
    fn schema_describes_types_bounds_and_required() {
        let parsed = parse_file(
            Path::new("t.toml"),
            r#"[[tools]]
name = "t"
cwd = "project_root"
command = ["x", "{n}", "{p}", "{e}"]
params = [
  { name = "n", type = "integer", min = 1, max = 9, required = true },
  { name = "p", type = "path", default = "." },
  { name = "e", type = "enum", enum = ["a", "b"] },
  { name = "l", type = "list", max = 3 },
]
"#,
        );
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let schema = parsed.tools[0].input_schema();
        assert_eq!(schema["required"], json!(["n"]));
        assert_eq!(
            schema["properties"]["n"],
            json!({"type": "integer", "minimum": 1, "maximum": 9})
        );
        assert_eq!(schema["properties"]["e"]["enum"], json!(["a", "b"]));
        assert_eq!(schema["properties"]["p"]["default"], json!("."));
        assert_eq!(schema["properties"]["l"]["maxItems"], json!(3));
        assert_eq!(schema["additionalProperties"], json!(false));
    }

    #[test]
    fn mcp_schemas_take_request_fields_unless_the_tool_declares_them() {
        let parsed = parse_file(
            Path::new("t.toml"),
            r#"[[tools]]
name = "t"
cwd = "project_root"
command = ["x", "{approve}"]
params = [{ name = "approve", type = "string" }]
"#,
        );
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        let schema = parsed.tools[0].mcp_input_schema();
        assert_eq!(schema["properties"]["approve"]["type"], "string");
        assert_eq!(schema["properties"]["max_output_tokens"]["type"], "integer");
    }
}
