//! The request models of the SWE-ReX API (`swerex.runtime.abstract`), with
//! the same field names and defaults, written as our own serde types. A
//! body is read as JSON first, then its discriminator (`session_type`,
//! `action_type`) is checked as pydantic's tagged unions do, so a refused
//! body gets the original's 422 wording.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::{SwerexError, invalid};

/// The session a request names when it names none.
pub(crate) const DEFAULT_SESSION: &str = "default";
/// `CreateBashSessionRequest.startup_timeout` when not given, seconds.
pub(crate) const DEFAULT_STARTUP_TIMEOUT: f64 = 1.0;
/// `BashInterruptAction.timeout` when not given, seconds.
pub(crate) const DEFAULT_INTERRUPT_TIMEOUT: f64 = 0.2;
/// `BashInterruptAction.n_retry` when not given.
pub(crate) const DEFAULT_INTERRUPT_RETRIES: u32 = 3;
/// The only session type there is.
pub(crate) const BASH: &str = "bash";
/// `action_type` of an interrupt.
pub(crate) const BASH_INTERRUPT: &str = "bash_interrupt";

fn default_session() -> String {
    DEFAULT_SESSION.to_owned()
}

fn default_startup_timeout() -> f64 {
    DEFAULT_STARTUP_TIMEOUT
}

fn default_interrupt_timeout() -> f64 {
    DEFAULT_INTERRUPT_TIMEOUT
}

fn default_retries() -> u32 {
    DEFAULT_INTERRUPT_RETRIES
}

/// `POST /create_session`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CreateSession {
    #[serde(default)]
    pub(crate) startup_source: Vec<String>,
    #[serde(default = "default_session")]
    pub(crate) session: String,
    #[serde(default = "default_startup_timeout")]
    pub(crate) startup_timeout: f64,
}

/// `BashAction.check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Check {
    Silent,
    #[default]
    Raise,
    Ignore,
}

/// `BashAction`: a command typed into a session.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BashAction {
    pub(crate) command: String,
    #[serde(default = "default_session")]
    pub(crate) session: String,
    #[serde(default)]
    pub(crate) timeout: Option<f64>,
    #[serde(default)]
    pub(crate) is_interactive_command: bool,
    #[serde(default)]
    pub(crate) is_interactive_quit: bool,
    #[serde(default)]
    pub(crate) check: Check,
    #[serde(default)]
    pub(crate) error_msg: String,
    #[serde(default)]
    pub(crate) expect: Vec<String>,
}

/// `BashInterruptAction`: ^C to a session.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BashInterrupt {
    #[serde(default = "default_session")]
    pub(crate) session: String,
    #[serde(default = "default_interrupt_timeout")]
    pub(crate) timeout: f64,
    #[serde(default = "default_retries")]
    pub(crate) n_retry: u32,
    #[serde(default)]
    pub(crate) expect: Vec<String>,
}

/// `POST /run_in_session`: one of the two actions.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    Bash(BashAction),
    Interrupt(BashInterrupt),
}

/// `POST /close_session`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct CloseSession {
    #[serde(default = "default_session")]
    pub(crate) session: String,
}

/// `Command.command`: a string or an argv, as for `subprocess.run`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum CommandLine {
    Line(String),
    Argv(Vec<String>),
}

/// `POST /execute`: a one-shot command, like `subprocess.run`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct Command {
    pub(crate) command: CommandLine,
    #[serde(default)]
    pub(crate) timeout: Option<f64>,
    #[serde(default)]
    pub(crate) shell: bool,
    #[serde(default)]
    pub(crate) check: bool,
    #[serde(default)]
    pub(crate) error_msg: String,
    #[serde(default)]
    pub(crate) env: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(crate) cwd: Option<String>,
    #[serde(default)]
    pub(crate) merge_output_streams: bool,
}

/// `POST /read_file`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ReadFile {
    pub(crate) path: String,
    #[serde(default)]
    pub(crate) encoding: Option<String>,
    #[serde(default)]
    pub(crate) errors: Option<String>,
}

/// `POST /write_file`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct WriteFile {
    pub(crate) content: String,
    pub(crate) path: String,
}

/// Parses a body that must be a JSON object into `T`.
pub(crate) fn parse<T: DeserializeOwned>(body: &[u8], tag: Option<&str>) -> Result<T, SwerexError> {
    let value = json_body(body)?;
    parse_value(value, tag)
}

fn json_body(body: &[u8]) -> Result<Value, SwerexError> {
    serde_json::from_slice(body).map_err(|e| {
        invalid(
            "json_invalid",
            &["body"],
            &format!("JSON decode error: {e}"),
            &Value::Null,
        )
    })
}

fn parse_value<T: DeserializeOwned>(value: Value, tag: Option<&str>) -> Result<T, SwerexError> {
    if !value.is_object() {
        return Err(invalid(
            "model_attributes_type",
            &["body"],
            "Input should be a valid dictionary or object to extract fields from",
            &value,
        ));
    }
    let loc: Vec<&str> = match tag {
        Some(tag) => vec!["body", tag],
        None => vec!["body"],
    };
    serde_json::from_value::<T>(value.clone())
        .map_err(|e| invalid("value_error", &loc, &e.to_string(), &value))
}

/// The discriminator of a tagged union body: `Ok(tag)`, or the 422 of a
/// missing or unknown tag.
fn tag_of<'a>(value: &'a Value, field: &str, expected: &[&str]) -> Result<&'a str, SwerexError> {
    let Some(object) = value.as_object() else {
        return Err(invalid(
            "model_attributes_type",
            &["body"],
            "Input should be a valid dictionary or object to extract fields from",
            value,
        ));
    };
    let Some(tag) = object.get(field).and_then(Value::as_str) else {
        return Err(invalid(
            "union_tag_not_found",
            &["body"],
            &format!("Unable to extract tag using discriminator '{field}'"),
            value,
        ));
    };
    if !expected.contains(&tag) {
        let tags: Vec<String> = expected.iter().map(|t| format!("'{t}'")).collect();
        return Err(invalid(
            "union_tag_invalid",
            &["body"],
            &format!(
                "Input tag '{tag}' found using '{field}' does not match any of the expected tags: {}",
                tags.join(", ")
            ),
            value,
        ));
    }
    Ok(tag)
}

/// A body of a `session_type`-tagged model (create or close a session).
pub(crate) fn parse_session_request<T: DeserializeOwned>(body: &[u8]) -> Result<T, SwerexError> {
    let value = json_body(body)?;
    tag_of(&value, "session_type", &[BASH])?;
    parse_value(value, Some(BASH))
}

/// The body of `/run_in_session`.
pub(crate) fn parse_action(body: &[u8]) -> Result<Action, SwerexError> {
    let value = json_body(body)?;
    match tag_of(&value, "action_type", &[BASH, BASH_INTERRUPT])? {
        BASH => parse_value(value, Some(BASH)).map(Action::Bash),
        _ => parse_value(value, Some(BASH_INTERRUPT)).map(Action::Interrupt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_action_takes_the_defaults_of_the_original() {
        let Action::Bash(a) = parse_action(br#"{"command":"ls","action_type":"bash"}"#).unwrap()
        else {
            panic!("not a bash action");
        };
        assert_eq!(a.session, "default");
        assert_eq!(a.check, Check::Raise);
        assert_eq!(a.timeout, None);
        let Action::Interrupt(i) = parse_action(br#"{"action_type":"bash_interrupt"}"#).unwrap()
        else {
            panic!("not an interrupt");
        };
        assert_eq!(i.n_retry, 3);
        assert!((i.timeout - 0.2).abs() < 1e-9);
    }

    #[test]
    fn a_body_without_its_tag_is_refused_as_pydantic_does() {
        let err = parse_action(br#"{"command":"ls"}"#).unwrap_err();
        let SwerexError::Invalid(detail) = err else {
            panic!("not a 422");
        };
        assert_eq!(detail[0]["type"], "union_tag_not_found");
        let err = parse_session_request::<CreateSession>(br#"{"session_type":"zsh"}"#).unwrap_err();
        let SwerexError::Invalid(detail) = err else {
            panic!("not a 422");
        };
        assert_eq!(detail[0]["type"], "union_tag_invalid");
    }

    #[test]
    fn a_command_is_a_string_or_an_argv() {
        let c: Command = parse(br#"{"command":["ls","-l"],"env":{"A":"b"}}"#, None).unwrap();
        assert!(matches!(c.command, CommandLine::Argv(ref v) if v.len() == 2));
        let c: Command = parse(br#"{"command":"ls -l","shell":true}"#, None).unwrap();
        assert!(matches!(c.command, CommandLine::Line(_)));
        assert!(parse::<Command>(br#"{"command":5}"#, None).is_err());
    }
}
