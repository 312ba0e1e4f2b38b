//! `agent-reach doctor [--json] [--config FILE] [--profile NAME] [--root DIR]`:
//! what this machine supports, probed for real ([`probes`]), and what that
//! means for the user: how much of a sandbox `run --sandbox` gets, how
//! escaped processes are killed, which usual listener ports are free.
//!
//! Exit 0 when every probe the configuration needs passed, 1 when one
//! failed, 2 for bad flags or a configuration that does not load. Always
//! needed: the session PATH directory (every command runner makes one) and
//! one way to kill escapees (a cgroup or the subreaper). Needed when the
//! registry (the built-in one without `--config`) asks for a sandbox that
//! confines (`[sandbox] default`, or a tool's `sandbox`) without
//! `best_effort`: Landlock, seccomp and the sandbox's own start. Needed when
//! a tool is `interactive`: a PTY.

#[cfg(target_os = "linux")]
mod child;
pub(crate) mod probes;
pub(crate) mod sandbox_run;

use serde::Serialize;

use crate::context::ProcessContext;
use crate::exit_code;
use crate::plan::source::RegistryArgs;
use crate::registry::Registry;
use probes::{PortProbe, Probe};
use sandbox_run::{SandboxState, SandboxVerdict};

/// `doctor` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// The registry whose needs decide the exit code (default: built-in).
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
}

/// How processes a command left behind are found and killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EscapeeKill {
    /// A cgroup per command: everything in it is killed at once.
    Cgroup,
    /// The subreaper: orphans come back to agent-reach, found by their tag.
    Subreaper,
    /// Neither: only the command's process group is killed.
    None,
}

/// What the probes mean for the user.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Verdict {
    /// What `run --sandbox` (and a config's sandbox) gets.
    pub(crate) sandbox: SandboxVerdict,
    /// How escapees are killed.
    pub(crate) escapee_kill: EscapeeKill,
    /// The usual port of each `serve --listen` protocol.
    pub(crate) listeners: Vec<PortProbe>,
    /// What the configuration needs, in words.
    pub(crate) needs: Vec<String>,
    /// Whether every needed probe passed (exit 0).
    pub(crate) ok: bool,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Report {
    pub(crate) version: &'static str,
    pub(crate) landlock_abi: Option<u32>,
    pub(crate) cores: usize,
    pub(crate) default_concurrency: usize,
    pub(crate) default_queue: usize,
    pub(crate) path_dir: String,
    pub(crate) probes: Vec<Probe>,
    pub(crate) verdict: Verdict,
}

/// What a registry asks of the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Needs {
    /// A confining sandbox, strictly (no `best_effort`): who asks for it.
    pub(crate) sandbox: Option<String>,
    /// A PTY: the interactive tool that asks for it.
    pub(crate) pty: Option<String>,
}

impl Needs {
    /// The needs of `registry`.
    pub(crate) fn of(registry: &Registry) -> Self {
        let confines =
            |policy: &crate::sandbox::Policy| *policy != crate::sandbox::Policy::DangerFullAccess;
        let settings = &registry.settings.sandbox;
        let sandbox = if settings.best_effort {
            None
        } else if let Some(default) = settings.default.filter(|p| confines(p)) {
            Some(format!("[sandbox] default = \"{default}\""))
        } else {
            registry.tools().find_map(|tool| {
                tool.sandbox
                    .filter(|p| confines(p))
                    .map(|p| format!("tool {} (sandbox = \"{p}\")", tool.name))
            })
        };
        let pty = registry
            .tools()
            .find(|tool| tool.interactive)
            .map(|tool| format!("tool {} (interactive)", tool.name));
        Self { sandbox, pty }
    }
}

/// Runs every probe and prints the report.
pub(crate) fn main(args: DoctorArgs, ctx: &ProcessContext) -> i32 {
    let needs = match needs(&args.registry, ctx) {
        Ok(needs) => needs,
        Err(message) => {
            eprintln!("agent-reach doctor: {message}");
            return exit_code::USAGE;
        }
    };
    let report = probe_all(ctx, &needs);
    let text = if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(json) => json + "\n",
            Err(err) => {
                eprintln!("agent-reach doctor: {err}");
                return exit_code::FAILURE;
            }
        }
    } else {
        render_text(&report)
    };
    match crate::stdio::print_or_failure(&text) {
        exit_code::SUCCESS if report.verdict.ok => exit_code::SUCCESS,
        exit_code::SUCCESS => exit_code::FAILURE,
        code => code,
    }
}

/// The needs of the registry the flags name; without `--config` the
/// built-in one (whose detection needs a root: without one, nothing).
fn needs(args: &RegistryArgs, ctx: &ProcessContext) -> Result<Needs, String> {
    let given = args.config.is_some() || args.root.is_some() || args.profile.is_some();
    let root = match args.project_root(ctx) {
        Ok(root) => root,
        Err(message) if given => return Err(message),
        Err(_) => return Ok(Needs::default()),
    };
    match args.load(&root) {
        Ok(registry) => Ok(Needs::of(&registry)),
        Err(err) => Err(err.to_string()),
    }
}

/// Probes this machine; `needs` marks the probes that decide the verdict.
pub(crate) fn probe_all(ctx: &ProcessContext, needs: &Needs) -> Report {
    let home = ctx.agent_reach_home();
    let path_root = crate::path_guard::session_path_root(ctx);
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut probes = vec![
        probes::path_dir(&path_root, &ctx.exe),
        probes::landlock(),
        probes::seccomp(),
        probes::pty(),
        probes::user_namespaces(),
        probes::open_files(),
        probes::cgroup(),
        probes::subreaper(),
        probes::probe(
            "cores",
            Ok(format!(
                "{cores} cores: default concurrency {} running, {} queued",
                cores * 3,
                cores * 24
            )),
        ),
    ];
    let sandbox = sandbox_run::probe(&ctx.exe, &home);
    probes.push(probes::probe(
        "sandbox",
        match sandbox.state {
            SandboxState::Full => Ok(sandbox.detail.clone()),
            _ => Err(sandbox.detail.clone()),
        },
    ));
    let mut words = vec!["path_dir: every run, exec, serve and shell makes one".to_owned()];
    mark(&mut probes, "path_dir");
    if let Some(why) = &needs.sandbox {
        for name in ["landlock", "seccomp", "sandbox"] {
            mark(&mut probes, name);
        }
        words.push(format!("landlock, seccomp, sandbox: {why}"));
    }
    if let Some(why) = &needs.pty {
        mark(&mut probes, "pty");
        words.push(format!("pty: {why}"));
    }
    let passed = |name: &str| probes.iter().any(|p| p.name == name && p.ok);
    let escapee_kill = if passed("cgroup_v2") {
        EscapeeKill::Cgroup
    } else if passed("subreaper") {
        EscapeeKill::Subreaper
    } else {
        EscapeeKill::None
    };
    words.push("cgroup_v2 or subreaper: to kill what a command leaves behind".to_owned());
    let ok = escapee_kill != EscapeeKill::None && probes.iter().all(|p| p.ok || !p.needed);
    Report {
        version: env!("CARGO_PKG_VERSION"),
        landlock_abi: probes::landlock_abi().ok(),
        cores,
        default_concurrency: cores * 3,
        default_queue: cores * 24,
        path_dir: path_root.display().to_string(),
        probes,
        verdict: Verdict {
            sandbox,
            escapee_kill,
            listeners: probes::ports(),
            needs: words,
            ok,
        },
    }
}

fn mark(probes: &mut [Probe], name: &str) {
    for probe in probes.iter_mut().filter(|p| p.name == name) {
        probe.needed = true;
    }
}

fn render_text(report: &Report) -> String {
    let mut out = format!("agent-reach {}\n", report.version);
    for probe in &report.probes {
        let mark = match (probe.ok, probe.needed) {
            (true, _) => "ok  ",
            (false, true) => "FAIL",
            (false, false) => "no  ",
        };
        out.push_str(&format!("{mark} {:<16} {}\n", probe.name, probe.detail));
    }
    let verdict = &report.verdict;
    out.push_str("\nWhat this means:\n");
    let sandbox = match verdict.sandbox.state {
        SandboxState::Full => "fully enforced",
        SandboxState::Partial => "partly enforced",
        SandboxState::Unavailable => "not available",
    };
    out.push_str(&format!(
        "  run --sandbox:     {sandbox}: {}\n",
        verdict.sandbox.detail
    ));
    let kill = match verdict.escapee_kill {
        EscapeeKill::Cgroup => "a cgroup per command (everything in it killed at once)",
        EscapeeKill::Subreaper => {
            "the subreaper and the session tag (no cgroup: a process that clears its environment and daemonizes may be missed)"
        }
        EscapeeKill::None => {
            "neither cgroup nor subreaper: only the command's process group is killed"
        }
    };
    out.push_str(&format!("  kill of escapees:  {kill}\n"));
    let ports: Vec<String> = verdict
        .listeners
        .iter()
        .map(|p| {
            if p.free {
                format!("{} {} free", p.protocol, p.port)
            } else {
                format!("{} {} not bindable ({})", p.protocol, p.port, p.detail)
            }
        })
        .collect();
    out.push_str(&format!("  serve listeners:   {}\n", ports.join(", ")));
    out.push_str("  needed here:       ");
    out.push_str(&verdict.needs.join("; "));
    out.push('\n');
    out.push_str(if verdict.ok {
        "  verdict:           ok: every probe this configuration needs passed\n"
    } else {
        "  verdict:           FAIL: a probe this configuration needs failed (exit 1)\n"
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(home: &std::path::Path) -> ProcessContext {
        let mut ctx = ProcessContext::capture(Vec::new());
        ctx.env
            .insert("AGENT_REACH_HOME".into(), home.as_os_str().to_owned());
        ctx.env.remove(std::ffi::OsStr::new("XDG_RUNTIME_DIR"));
        ctx
    }

    #[test]
    fn report_has_every_probe_with_a_detail_and_a_verdict() {
        let home = tempfile::tempdir().unwrap();
        let report = probe_all(&ctx(home.path()), &Needs::default());
        let names: Vec<_> = report.probes.iter().map(|p| p.name).collect();
        for expected in [
            "path_dir",
            "landlock",
            "seccomp",
            "pty",
            "user_namespaces",
            "open_files",
            "cgroup_v2",
            "subreaper",
            "cores",
            "sandbox",
        ] {
            assert!(names.contains(&expected), "missing probe {expected}");
        }
        assert!(report.probes.iter().all(|p| !p.detail.is_empty()));
        assert_eq!(report.default_queue, report.default_concurrency * 8);
        assert_eq!(report.verdict.listeners.len(), probes::USUAL_PORTS.len());
        let text = render_text(&report);
        assert!(text.contains("run --sandbox:"), "{text}");
    }

    #[test]
    fn a_home_that_cannot_hold_the_path_dir_fails_the_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let report = probe_all(&ctx(&file), &Needs::default());
        let path = report.probes.iter().find(|p| p.name == "path_dir").unwrap();
        assert!(!path.ok && path.needed, "{path:?}");
        assert!(!report.verdict.ok);
    }
}
