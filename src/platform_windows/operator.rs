//! The operator's registry behind Windows' `exec --json` and `--jsonl`
//! (`--config`, `--profile`, `--root`, loaded once per process): a `tool`
//! request is resolved by the shared plan stage ([`crate::plan::resolve`])
//! into a command for the Windows engine, and a raw `command` is held to the
//! same policy as on Linux (`allow_raw_commands`, `raw_commands_risk`,
//! `max_risk`, `approval`). Without `--config` the built-in registry serves,
//! which allows raw commands.

use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::process::resolve_program;
use super::run::Command;
use super::{NO_SANDBOX, conpty};
use crate::context::ProcessContext;
use crate::exit_code;
use crate::plan::caps::{Cap, cap, cap_timeout, cap_tokens};
use crate::plan::policy::OperatorPolicy;
use crate::plan::registry_args::{RegistryArgs, exec_exit_code};
use crate::plan::request::{Malformed, Target};
use crate::plan::resolve::{ToolCall, caller_cwd, resolve_tool};
use crate::plan::{Door, Rejection, Request};
use crate::registry::model::LimitSettings;
use crate::registry::secrets::SecretStore;
use crate::registry::template::Piece;
use crate::registry::{Registry, kinds};
use crate::result::{NormalizedResult, Status};
use crate::sandbox::Policy;
use crate::serve::listen::auth::TOKEN_VAR;

/// The registry, its policy and its secrets.
#[derive(Debug)]
pub(crate) struct Operator {
    registry: Registry,
    policy: OperatorPolicy,
    secrets: SecretStore,
    /// The environment commands start from (for looking programs up).
    env: BTreeMap<OsString, OsString>,
}

/// What cmd.exe takes as its own syntax in a line it reads (its
/// operators, quoting, escapes and variable expansion, and line breaks).
const CMD_SYNTAX: [char; 10] = ['%', '!', '&', '|', '<', '>', '^', '"', '\r', '\n'];

/// Why `exec` cannot start: the message and the contract's exit code (2
/// for what the command line names, 125 for a config that does not load).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct SetupError {
    pub(crate) code: i32,
    pub(crate) message: String,
}

/// A tool request made ready for the engine.
#[derive(Debug)]
pub(crate) struct ToolRun {
    /// The request's `id` and token budget, as the shared parser read them.
    pub(crate) id: Option<Value>,
    pub(crate) max_output_tokens: Option<usize>,
    pub(crate) name: String,
    pub(crate) command: Command,
    /// The tool's secrets: in its environment, redacted from its output.
    pub(crate) secrets: Vec<(String, Vec<u8>)>,
    pub(crate) tty_note: Option<String>,
    /// The operator's caps that cut what the request asked (their names).
    pub(crate) capped: Vec<String>,
}

impl Operator {
    /// Loads what the flags name.
    pub(crate) fn load(flags: &RegistryArgs, ctx: &ProcessContext) -> Result<Self, SetupError> {
        let root = flags.project_root(ctx).map_err(|message| SetupError {
            code: exit_code::USAGE,
            message,
        })?;
        let registry = flags.load(&root).map_err(|err| SetupError {
            code: exec_exit_code(&err),
            message: err.to_string(),
        })?;
        let (secrets, _) =
            SecretStore::for_registry(&registry, &ctx.env).map_err(|err| SetupError {
                code: exit_code::INTERNAL,
                message: err.to_string(),
            })?;
        let policy = OperatorPolicy::from_settings(&registry.settings, &registry.root);
        Ok(Self {
            registry,
            policy,
            secrets,
            env: ctx.env.clone(),
        })
    }

    /// The context commands start in: `ctx` without the listeners' token
    /// and without the registry's secrets (a tool gets its own declared
    /// ones back in its environment; Windows reads secrets from the
    /// environment alone, so no other command may inherit them).
    pub(crate) fn child_context(&self, ctx: &ProcessContext) -> ProcessContext {
        let mut withheld: Vec<String> = vec![TOKEN_VAR.to_owned()];
        for (tool, _) in self.registry.all_tools() {
            withheld.extend(tool.secrets.iter().cloned());
        }
        let mut child = ctx.clone();
        child.env.retain(|name, _| {
            let name = name.to_string_lossy();
            !withheld.iter().any(|w| w.eq_ignore_ascii_case(&name))
        });
        child
    }

    /// The operator's policy puts raw commands (and a caller's own file
    /// writes) in a sandbox Windows does not have: refused.
    pub(crate) fn check_unsandboxed(&self) -> Result<(), Rejection> {
        match self.policy.sandbox_default {
            Some(policy) if policy != Policy::DangerFullAccess => Err(Rejection::rejected(
                kinds::DENIED_BY_POLICY,
                format!(
                    "the operator's policy runs raw commands in the {policy} sandbox: {NO_SANDBOX}"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// `serve --sandbox POLICY` in place of the registry's `[sandbox]
    /// default` (on Windows only `danger-full-access` gets this far).
    pub(crate) fn with_sandbox_override(mut self, sandbox: Option<Policy>) -> Self {
        self.policy = self.policy.with_sandbox_override(sandbox);
        self
    }

    /// The registry's `[limits]` (its profile's).
    pub(crate) fn limits(&self) -> LimitSettings {
        self.registry.settings.limits
    }

    /// A raw command's timeout within `[limits] max_timeout_ms`: one asked
    /// above it, or none at all for a command run to its end (`one_shot`;
    /// a session without one is not a timeout request), gets the cap.
    pub(crate) fn cap_timeout(&self, command: &mut Command, one_shot: bool) -> Option<Cap> {
        let asked = command
            .timeout
            .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let cap = cap_timeout(asked, one_shot, self.limits())?;
        command.timeout = Some(std::time::Duration::from_millis(cap.limit));
        Some(cap)
    }

    /// An output budget asked of a door within `[limits]
    /// max_output_tokens`, and the cap when it cut it.
    pub(crate) fn cap_tokens(&self, asked: usize) -> (usize, Option<Cap>) {
        cap_tokens(asked, self.limits())
    }

    /// The registry the operator loaded.
    pub(crate) fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The operator's policy.
    pub(crate) fn policy(&self) -> &OperatorPolicy {
        &self.policy
    }

    /// The project root (canonical).
    pub(crate) fn root(&self) -> &Path {
        &self.registry.root
    }

    /// Whether the policy lets raw commands (and the file writes a caller
    /// writes itself) run at all.
    pub(crate) fn raw_allowed(&self) -> bool {
        self.policy.check_raw_commands().is_ok()
    }

    /// A `tool` request line of `exec` resolved into a command, or its
    /// refusal as a result.
    pub(crate) fn tool_run(&self, value: &Value) -> Result<ToolRun, NormalizedResult> {
        let request = Request::from_json(value).map_err(refused_malformed)?;
        self.resolve(&request, Door::Exec).map_err(|rejection| {
            NormalizedResult::refused(
                request.id.clone(),
                request.tool_name().map(str::to_owned),
                rejection.status,
                rejection.kind,
                rejection.message,
            )
        })
    }

    /// A tool request from `door` resolved into a command, or why not (with
    /// the question a person could approve, where one would let it run).
    pub(crate) fn resolve(&self, request: &Request, door: Door) -> Result<ToolRun, Rejection> {
        // `[limits]` caps what any caller asks, at every door.
        let (capped, caps) = cap(request, self.limits());
        let request = capped.as_ref().unwrap_or(request);
        let Target::Tool { name, args } = &request.target else {
            return Err(Rejection::rejected(
                kinds::MALFORMED_REQUEST,
                "a tool request needs `tool`",
            ));
        };
        let call = resolve_tool(
            &self.policy,
            &self.secrets,
            &self.registry,
            request,
            name,
            args,
            door,
        )?;
        if call.sandbox.is_some_and(|p| p != Policy::DangerFullAccess) {
            return Err(Rejection::rejected(
                kinds::DENIED_BY_POLICY,
                format!("tool {name} runs sandboxed: {NO_SANDBOX}"),
            ));
        }
        self.check_cmd_values(name, &call)?;
        let (tty, tty_note) = conpty::grant(call.tty);
        let env = self
            .registry
            .settings
            .env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .chain(call.secrets.iter().map(|(k, v)| {
                (
                    OsString::from(k),
                    OsString::from(String::from_utf8_lossy(v).into_owned()),
                )
            }))
            .collect();
        Ok(ToolRun {
            id: request.id.clone(),
            max_output_tokens: request.max_output_tokens,
            name: name.clone(),
            command: Command {
                argv: call.argv.iter().map(OsString::from).collect(),
                workdir: Some(call.cwd),
                timeout: Some(call.timeout),
                env,
                verbatim_args: false,
                tty,
            },
            secrets: call.secrets,
            tty_note,
            capped: caps.iter().map(|c| c.name.to_owned()).collect(),
        })
    }

    /// Holds a raw command from `door` to the policy (raw commands allowed,
    /// their risk, the approval: a request's `approve` where the door lets
    /// it count, as on Linux; no sandbox the policy would put it in, since
    /// Windows has none) and settles its directory as Linux does: the
    /// project root, or a `workdir` beneath it.
    pub(crate) fn admit_raw(
        &self,
        command: &mut Command,
        door: Door,
        approve: bool,
    ) -> Result<(), Rejection> {
        self.policy.check_raw_commands()?;
        self.check_unsandboxed()?;
        let cwd = self.caller_dir(command.workdir.as_deref())?;
        self.policy
            .check_raw_approval(&command.argv, &cwd, door, approve)?;
        command.workdir = Some(cwd);
        Ok(())
    }

    /// A tool whose program is cmd.exe or a batch file (which runs in
    /// cmd.exe) gets its arguments read again by cmd, where `&`, `|`, `%`
    /// and the like are syntax whatever the quoting: every argument that
    /// is not one of the tool's literal elements (a value filled in from
    /// the call, or appended to it) is refused where it holds one.
    fn check_cmd_values(&self, name: &str, call: &ToolCall) -> Result<(), Rejection> {
        let Some(program) = call.argv.first() else {
            return Ok(());
        };
        let is_batch = |path: &Path| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("cmd") || e.eq_ignore_ascii_case("bat"))
        };
        let named = Path::new(program);
        let stem = named
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let through_cmd = stem.eq_ignore_ascii_case("cmd")
            || is_batch(named)
            || resolve_program(program.as_ref(), &self.env, &call.cwd)
                .is_some_and(|found| is_batch(&found));
        if !through_cmd {
            return Ok(());
        }
        let literals: Vec<String> = call
            .tool
            .command
            .iter()
            .filter_map(|element| {
                element
                    .pieces
                    .iter()
                    .map(|piece| match piece {
                        Piece::Literal(text) => Some(text.as_str()),
                        Piece::Placeholder(_) => None,
                    })
                    .collect::<Option<String>>()
            })
            .collect();
        for arg in call.argv.iter().skip(1) {
            if literals.contains(arg) {
                continue;
            }
            if let Some(c) = arg.chars().find(|c| CMD_SYNTAX.contains(c)) {
                return Err(Rejection::rejected(
                    kinds::INVALID_PARAMS,
                    format!(
                        "tool {name} runs through cmd.exe ({program}), which would read {c:?} in {arg:?} as its own syntax: the value is refused"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The directory a caller names (`workdir`), beneath the project root;
    /// the root itself when none is named.
    pub(crate) fn caller_dir(&self, workdir: Option<&Path>) -> Result<PathBuf, Rejection> {
        let root = &self.registry.root;
        match workdir {
            Some(dir) if !dir.as_os_str().is_empty() => caller_cwd(root, dir),
            _ => Ok(root.clone()),
        }
    }
}

fn refused_malformed(m: Malformed) -> NormalizedResult {
    NormalizedResult::refused(m.id, m.tool, Status::Rejected, m.kind, m.message)
}
