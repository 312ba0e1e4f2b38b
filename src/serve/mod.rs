//! `agent-reach serve`: the MCP server agents connect to.
//!
//! A session table ([`table`]) on top of the exec engine, served with the
//! official Rust SDK (rmcp) on stdio. stdout is the protocol and nothing else
//! ever goes there ([`transport`]); logs are JSON lines on stderr or
//! `--log-file` ([`crate::logging`]).
//!
//! Lifecycle: the session PATH directory and the subreaper are set up before
//! the runtime starts threads; on stdin EOF, SIGTERM, SIGINT or SIGHUP every
//! session is killed (escapees too, even those that cleared their
//! environment: the server claims all its children, see
//! [`crate::exec::claim_all_children`]) and the directory removed. If the server
//! itself is killed, a watchdog process kills what it started ([`watchdog`]),
//! and whatever escaped that too is killed at the next start ([`orphans`]).

pub mod lenient;
pub mod orphans;
pub mod params;
pub mod procfs;
pub mod registry_tools;
pub mod reply;
pub mod server;
pub mod session;
pub mod table;
pub mod tools;
pub mod transport;
pub mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::cli::serve::ServeArgs;
use crate::cli::session::Session as ProcessSession;
use crate::context::ProcessContext;
use crate::exit_code;
use crate::registry::Dispatcher;
use crate::registry::metrics_http;
use server::{AgentReachServer, ServeConfig};

/// How long the runtime may take to stop once every session is killed.
const RUNTIME_STOP: Duration = Duration::from_secs(1);

/// `agent-reach serve ...`: serves until the client goes away or a signal.
pub fn main(args: ServeArgs, mut ctx: ProcessContext) -> i32 {
    let session = match ProcessSession::start(&mut ctx) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agent-reach serve: {e}");
            return exit_code::FAILURE;
        }
    };
    // Every child of the server is started by the engine, but for the
    // watchdog, which registers itself: any other child is an orphan of a
    // session command (a daemon that left the group and cleared its
    // environment), which the engine may then kill and reap.
    crate::exec::claim_all_children();
    // Forked while this is the only thread; see `watchdog`.
    let watchdog = watchdog::start(session.path_dir());
    let filter = ctx
        .var(crate::logging::LOG_FILTER_VAR)
        .and_then(|v| v.to_str())
        .map(str::to_owned);
    if let Err(e) = crate::logging::init(args.log_file.as_deref(), filter.as_deref()) {
        eprintln!("agent-reach serve: {e}");
        return exit_code::USAGE;
    }
    let (root, dispatcher) = match args.registry.session_dispatcher(&ctx, &session) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach serve: {err}");
            return err.exit_code();
        }
    };
    if let Err(e) = &watchdog {
        tracing::warn!(error = %e, "no watchdog: a crash of the server could leave processes behind");
    }
    let orphans = orphans::sweep();
    if !orphans.is_empty() {
        tracing::warn!(pids = ?orphans, "killed processes a crashed agent-reach left behind");
    }
    let config = ServeConfig {
        root,
        home: ctx.agent_reach_home(),
        env: ctx.env.clone(),
        path_dir: session.path_dir().to_path_buf(),
        max_sessions: usize::try_from(args.max_sessions).unwrap_or(64),
        use_cgroup: ctx
            .var(crate::cli::run::NO_CGROUP_VAR)
            .is_none_or(|v| v.is_empty() || v == "0"),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("agent-reach-serve")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agent-reach serve: cannot start the async runtime: {e}");
            return exit_code::FAILURE;
        }
    };
    let code = runtime.block_on(serve(config, args, dispatcher));
    runtime.shutdown_timeout(RUNTIME_STOP);
    drop(session);
    drop(watchdog);
    code
}

/// Serves on stdio; returns the exit code once every session is killed.
async fn serve(config: ServeConfig, args: ServeArgs, dispatcher: Arc<Dispatcher>) -> i32 {
    let server = AgentReachServer::new(config, Some(dispatcher));
    if let Some(addr) = args.metrics_addr {
        match metrics_http::bind_metrics(addr).await {
            Ok(listener) => {
                tokio::spawn(metrics_http::serve_listener(listener, server.metrics()));
            }
            Err(e) => {
                eprintln!("agent-reach serve: --metrics-addr: {e}");
                return exit_code::USAGE;
            }
        }
    }
    let (mut term, mut int, mut hup) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(t), Ok(i), Ok(h)) => (t, i, h),
        _ => {
            eprintln!("agent-reach serve: cannot install signal handlers");
            return exit_code::FAILURE;
        }
    };
    let stdio = match transport::take_stdio() {
        Ok(stdio) => stdio,
        Err(e) => {
            eprintln!("agent-reach serve: cannot use stdin/stdout: {e}");
            return exit_code::FAILURE;
        }
    };
    tracing::info!(pid = std::process::id(), "serving MCP on stdio");
    let code = tokio::select! {
        code = run_protocol(server.clone(), stdio) => code,
        _ = term.recv() => exit_code::for_signal(libc::SIGTERM),
        _ = int.recv() => exit_code::for_signal(libc::SIGINT),
        _ = hup.recv() => exit_code::for_signal(libc::SIGHUP),
    };
    server.shutdown().await;
    tracing::info!(code, "stopped; every session was killed");
    code
}

async fn run_protocol(
    server: AgentReachServer,
    (reader, writer): (transport::ProtocolReader, transport::ProtocolWriter),
) -> i32 {
    let service = match server.serve((reader, writer)).await {
        Ok(service) => service,
        Err(e) => {
            tracing::warn!(error = %e, "the client went away before the MCP handshake ended");
            return exit_code::SUCCESS;
        }
    };
    match service.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "client closed the connection");
            exit_code::SUCCESS
        }
        Err(e) => {
            tracing::error!(error = %e, "the MCP service failed");
            exit_code::FAILURE
        }
    }
}
