//! The `apply_patch` personality and `agent-reach apply-patch`.
//!
//! `apply_patch [--allow-outside] [PATCH]`: the patch is the one argument,
//! else stdin (never a terminal: that would wait for a person). Exit 0 on
//! success, 1 when the patch is bad or does not apply, 2 on bad usage.

use std::ffi::OsString;
use std::io::{IsTerminal, Read};

use super::{ApplyOptions, apply};
use crate::context::ProcessContext;
use crate::exit_code;

const USAGE: &str = "\
usage: apply_patch [--allow-outside] [PATCH]

Applies a patch in the Codex format ('*** Begin Patch' ... '*** End Patch'),
given as the one argument or on stdin, to files under the working directory.
Every hunk is checked first; if any fails, no file is changed.

options:
  --allow-outside  allow paths outside the working directory
  -h, --help       print this help
";

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum Request {
    Help,
    Apply {
        patch: Option<OsString>,
        options: ApplyOptions,
    },
}

/// Applies the patch given as the one argument or on stdin.
pub(crate) fn main(ctx: &ProcessContext) -> i32 {
    let (patch_arg, options) = match parse_args(&ctx.args) {
        Ok(Request::Help) => {
            return crate::stdio::print_or_failure(USAGE);
        }
        Ok(Request::Apply { patch, options }) => (patch, options),
        Err(message) => return usage_error(&message),
    };
    let patch = match patch_arg {
        Some(arg) => match arg.into_string() {
            Ok(text) => text,
            Err(_) => return bad_patch("the patch is not valid UTF-8"),
        },
        None => match read_stdin() {
            Ok(text) => text,
            Err(StdinError::Terminal) => {
                return usage_error("no patch given: pass it as the one argument or on stdin");
            }
            Err(StdinError::NotUtf8) => return bad_patch("the patch is not valid UTF-8"),
            Err(StdinError::Io(e)) => return bad_patch(&format!("cannot read stdin: {e}")),
        },
    };
    if patch.trim().is_empty() {
        return usage_error("no patch given: the argument or stdin is empty");
    }
    let cwd = match ctx.cwd() {
        Ok(cwd) => cwd,
        Err(e) => return bad_patch(&e.to_string()),
    };
    match apply(&patch, cwd, &options) {
        Ok(report) => crate::stdio::print_or_failure(&report.to_string()),
        Err(err) => {
            let untouched = if err.tree_untouched() {
                "\nNo files were changed."
            } else {
                ""
            };
            eprintln!("apply_patch: {err}{untouched}");
            err.exit_code()
        }
    }
}

fn parse_args(args: &[OsString]) -> Result<Request, String> {
    let mut options = ApplyOptions::default();
    let mut patch: Option<OsString> = None;
    let mut only_positional = false;
    for arg in args {
        let text = arg.to_str();
        let is_flag = !only_positional && text.is_some_and(|t| t.starts_with('-') && t.len() > 1);
        if is_flag {
            match text.unwrap_or_default() {
                "--" => only_positional = true,
                "--allow-outside" => options.allow_outside = true,
                "-h" | "--help" => return Ok(Request::Help),
                other => return Err(format!("unknown option '{other}'")),
            }
            continue;
        }
        if patch.is_some() {
            return Err(
                "more than one patch argument: pass the whole patch as one argument (quote it) or on stdin"
                    .to_owned(),
            );
        }
        patch = Some(arg.clone());
    }
    Ok(Request::Apply { patch, options })
}

enum StdinError {
    Terminal,
    NotUtf8,
    Io(std::io::Error),
}

fn read_stdin() -> Result<String, StdinError> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Err(StdinError::Terminal);
    }
    let mut bytes = Vec::new();
    stdin
        .lock()
        .read_to_end(&mut bytes)
        .map_err(StdinError::Io)?;
    String::from_utf8(bytes).map_err(|_| StdinError::NotUtf8)
}

fn usage_error(message: &str) -> i32 {
    eprintln!("apply_patch: {message}\n\n{USAGE}");
    exit_code::USAGE
}

fn bad_patch(message: &str) -> i32 {
    eprintln!("apply_patch: {message}\nNo files were changed.");
    exit_code::BAD_PATCH
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn flags_and_the_one_patch() {
        assert_eq!(
            parse_args(&args(&["--allow-outside", "P"])),
            Ok(Request::Apply {
                patch: Some("P".into()),
                options: ApplyOptions {
                    allow_outside: true
                }
            })
        );
        assert_eq!(
            parse_args(&args(&[])),
            Ok(Request::Apply {
                patch: None,
                options: ApplyOptions::default()
            })
        );
        assert_eq!(parse_args(&args(&["--help", "x"])), Ok(Request::Help));
        assert_eq!(
            parse_args(&args(&["--", "-not-a-flag"])),
            Ok(Request::Apply {
                patch: Some("-not-a-flag".into()),
                options: ApplyOptions::default()
            })
        );
    }

    #[test]
    fn bad_usage_is_an_error() {
        assert!(parse_args(&args(&["--frob"])).is_err());
        assert!(parse_args(&args(&["a", "b"])).is_err());
    }
}
