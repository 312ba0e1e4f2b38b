//! `agent-reach tools list|show|check|schema`: the registry, inspected.
//!
//! `check` reports every problem of a registry file and its includes as
//! `file:line:col: message` on stdout and exits 1; 0 when clean, 2 on bad
//! usage (a FILE that does not exist or cannot be read). `list`, `show` and
//! `schema` exit 2 when the registry they are given is bad (a config that
//! is missing, unreadable or invalid, an unknown profile, a root that is not
//! a directory): the common convention of the contract.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::context::ProcessContext;
use crate::exit_code;
use crate::registry::model::{ParamSpec, ParamType, ToolSpec};
use crate::registry::{Availability, Registry, RegistryError};

/// `tools` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ToolsArgs {
    /// The registry file (default: the built-in registry).
    #[arg(long, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Narrow the registry to one of its profiles.
    #[arg(long, global = true)]
    pub(crate) profile: Option<String>,
    /// The project root (default: the current directory).
    #[arg(long, global = true)]
    pub(crate) root: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: ToolsCommand,
}

/// What to do with the registry.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ToolsCommand {
    /// One line per tool.
    List,
    /// One tool in full.
    Show { name: String },
    /// Report every problem of a registry file, with file and line.
    Check { file: Option<PathBuf> },
    /// The tools as JSON schemas for function calling.
    Schema,
}

/// Exit code of `tools check` when the file has problems, and of `tools
/// show` for a tool that does not exist.
const PROBLEMS: i32 = exit_code::FAILURE;

/// `agent-reach tools ...`.
pub(crate) fn main(args: ToolsArgs, ctx: ProcessContext) -> i32 {
    if let ToolsCommand::Check { file } = &args.command {
        return check(file.as_deref().or(args.config.as_deref()));
    }
    let root = match args.root.clone().or_else(|| ctx.cwd.clone()) {
        Some(root) => root,
        None => {
            eprintln!("agent-reach: the current directory is gone; pass --root DIR");
            return exit_code::USAGE;
        }
    };
    let registry = match Registry::load(args.config.as_deref(), args.profile.as_deref(), &root) {
        Ok(registry) => registry,
        Err(err) => {
            eprintln!("agent-reach: {err}");
            return load_error_code(&err);
        }
    };
    let text = match args.command {
        ToolsCommand::List => list(&registry),
        ToolsCommand::Show { name } => match registry.lookup(&name) {
            Some((tool, availability)) => show(tool, availability),
            None => {
                eprintln!("agent-reach: no tool named {name:?} (see `agent-reach tools list`)");
                return PROBLEMS;
            }
        },
        ToolsCommand::Schema => {
            let tools: Vec<serde_json::Value> =
                registry.tools().map(|t| t.function_schema()).collect();
            let mut text = serde_json::to_string_pretty(&tools).unwrap_or_default();
            text.push('\n');
            text
        }
        ToolsCommand::Check { .. } => String::new(),
    };
    crate::stdio::print_or_failure(&text)
}

/// Every way a registry named on the command line fails to load is bad
/// usage (exit 2), a bad config included; `tools check` is the command that
/// reports a config's problems as its result.
fn load_error_code(err: &RegistryError) -> i32 {
    match err {
        RegistryError::Read { .. }
        | RegistryError::Invalid { .. }
        | RegistryError::UnknownProfile { .. }
        | RegistryError::Root { .. } => exit_code::USAGE,
    }
}

fn check(file: Option<&Path>) -> i32 {
    let Some(file) = file else {
        let text = "ok: the built-in registry (pass FILE or --config FILE to check a file)\n";
        return crate::stdio::print_or_failure(text);
    };
    if !file.exists() {
        eprintln!("agent-reach: {}: no such file", file.display());
        return exit_code::USAGE;
    }
    match Registry::check(file) {
        Ok((tools, problems)) if problems.is_empty() => {
            let text = format!(
                "ok: {}: {tools} tool{}\n",
                file.display(),
                if tools == 1 { "" } else { "s" }
            );
            crate::stdio::print_or_failure(&text)
        }
        Ok((_, problems)) => {
            let mut text = String::new();
            for problem in &problems {
                let _ = writeln!(text, "{problem}");
            }
            let code = crate::stdio::print_or_failure(&text);
            if code != exit_code::SUCCESS {
                return code;
            }
            eprintln!(
                "{} problem{} in {}",
                problems.len(),
                if problems.len() == 1 { "" } else { "s" },
                file.display()
            );
            PROBLEMS
        }
        Err(err @ RegistryError::Read { .. }) => {
            // A FILE (or an include) that cannot be read: usage, as when
            // it does not exist.
            eprintln!("agent-reach: {err}");
            exit_code::USAGE
        }
        Err(err) => {
            eprintln!("agent-reach: {err}");
            PROBLEMS
        }
    }
}

fn list(registry: &Registry) -> String {
    let width = registry
        .all_tools()
        .map(|(t, _)| t.name.len())
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for (tool, availability) in registry.all_tools() {
        let note = match availability {
            Availability::Available => String::new(),
            Availability::DeniedByProfile(why) | Availability::DeniedByPolicy(why) => {
                format!("  [unavailable: {why}]")
            }
        };
        let _ = writeln!(
            text,
            "{:width$}  {:6}  {}{note}",
            tool.name,
            tool.risk.as_str(),
            tool.description()
        );
    }
    text
}

fn show(tool: &ToolSpec, availability: &Availability) -> String {
    let mut t = String::new();
    let command: Vec<String> = tool
        .command
        .iter()
        .map(|c| format!("{:?}", c.source))
        .collect();
    let _ = writeln!(t, "name:        {}", tool.name);
    let _ = writeln!(t, "description: {}", tool.description());
    let _ = writeln!(t, "command:     [{}]", command.join(", "));
    let _ = writeln!(t, "cwd:         {}", tool.cwd);
    let _ = writeln!(t, "risk:        {}", tool.risk);
    if let Some(timeout) = tool.timeout {
        let _ = writeln!(t, "timeout:     {} s", timeout.as_secs_f64());
    }
    let optional = [
        ("group", tool.group.clone()),
        ("exclusive", tool.exclusive.clone()),
        (
            "cache_ttl",
            tool.cache_ttl.map(|d| format!("{} s", d.as_secs_f64())),
        ),
        ("sandbox", tool.sandbox.map(|p| p.to_string())),
        ("env", (!tool.env.is_empty()).then(|| tool.env.join(", "))),
        (
            "secrets",
            (!tool.secrets.is_empty()).then(|| tool.secrets.join(", ")),
        ),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            let _ = writeln!(t, "{:12} {value}", format!("{key}:"));
        }
    }
    if tool.network {
        let _ = writeln!(t, "network:     allowed");
    }
    if tool.interactive {
        let _ = writeln!(t, "interactive: yes (runs on a terminal)");
    }
    let _ = writeln!(t, "defined at:  {}", tool.location);
    if let Availability::DeniedByProfile(why) | Availability::DeniedByPolicy(why) = availability {
        let _ = writeln!(t, "unavailable: {why}");
    }
    if !tool.params.is_empty() {
        let _ = writeln!(t, "params:");
        for param in &tool.params {
            let _ = writeln!(t, "  {}", describe_param(param));
        }
    }
    t
}

fn describe_param(p: &ParamSpec) -> String {
    let mut text = format!("{}: {}", p.name, p.ty.as_str());
    if p.ty == ParamType::List {
        let _ = write!(text, " of {}", p.items.as_str());
    }
    text.push_str(if p.required {
        ", required"
    } else {
        ", optional"
    });
    if let Some(default) = &p.default {
        let _ = write!(text, ", default {default}");
    }
    if let Some(min) = p.min {
        let _ = write!(text, ", min {min}");
    }
    if let Some(max) = p.max {
        let _ = write!(text, ", max {max}");
    }
    if let Some(pattern) = &p.pattern {
        let _ = write!(text, ", pattern {}", pattern.as_str());
    }
    if !p.allowed.is_empty() {
        let _ = write!(text, ", one of {}", p.allowed.join("|"));
    }
    if let Some(flag) = &p.flag {
        let _ = write!(text, ", true adds {flag}");
    }
    if let Some(description) = &p.description {
        let _ = write!(text, " — {description}");
    }
    text
}
