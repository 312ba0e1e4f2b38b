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

pub(crate) mod args;
pub(crate) mod listen;
pub(crate) mod orphans;
pub(crate) mod swerex_remote;
pub(crate) mod transport;
pub(crate) mod watchdog;

use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::context::ProcessContext;
use crate::doors::mcp::server::{AgentReachServer, ServeConfig};
use crate::exit_code;
use crate::path_guard::ProcessSession;
use crate::plan::Dispatcher;
use crate::registry::metrics_http;
use args::ServeArgs;

/// How long the runtime may take to stop once every session is killed.
const RUNTIME_STOP: Duration = Duration::from_secs(1);
/// How long, at a signal, the answers of calls whose processes were just
/// ended get to leave before the listeners close.
const STOP_ANSWER_GRACE: Duration = Duration::from_millis(300);

/// `agent-reach serve ...`: serves until the client goes away or a signal.
pub(crate) fn main(args: ServeArgs, mut ctx: ProcessContext) -> i32 {
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
    if !args.listeners.listen.is_empty() && args.stdio != args::StdioProtocol::Mcp {
        eprintln!(
            "agent-reach serve: --stdio codex-exec serves stdio and --listen serves the network; give one or the other"
        );
        return exit_code::USAGE;
    }
    // The listeners' auth is settled before anything is served: a listener
    // other machines can reach needs a token or --no-auth (exit 2).
    let auth = match args.listeners.auth(&ctx) {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("agent-reach serve: {e}");
            return exit_code::USAGE;
        }
    };
    let (root, dispatcher) = match args.registry.session_dispatcher(
        &ctx,
        &session,
        args.sandbox,
        // A sandboxed command must not read the listeners' token.
        args.listeners.token_file.iter().cloned().collect(),
    ) {
        Ok(ready) => ready,
        Err(err) => {
            eprintln!("agent-reach serve: {err}");
            return err.exit_code();
        }
    };
    if let Err(e) = &watchdog {
        tracing::warn!(error = %e, "no watchdog: a crash of the server could leave processes behind");
    }
    // What a killed server left: its cgroups, v1 pids groups and the doors'
    // scratch directories, gone before the first request rather than at it.
    crate::exec::cgroup::remove_stale();
    crate::exec::pids_limit::remove_stale();
    crate::broker::scratch::sweep_all(&ctx.agent_reach_home());
    let orphans = orphans::sweep();
    if !orphans.is_empty() {
        tracing::warn!(pids = ?orphans, "killed processes a crashed agent-reach left behind");
    }
    let max_sessions =
        usize::try_from(args.max_sessions).unwrap_or(crate::broker::sessions::DEFAULT_MAX_SESSIONS);
    // stdio is one client, who may hold every seat; over the network each
    // caller gets its share.
    let per_caller = if args.listeners.listen.is_empty() {
        max_sessions
    } else {
        args.max_sessions_per_client
    };
    let config = ServeConfig {
        root,
        env: ctx.env.clone(),
        max_sessions,
        sessions: crate::broker::SessionLedger::new(max_sessions, per_caller),
    };
    keep_freed_chunks();
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
    let limits = args.listeners.limits(&ctx);
    let code = runtime.block_on(serve(config, args, dispatcher, auth, limits));
    runtime.shutdown_timeout(RUNTIME_STOP);
    drop(session);
    drop(watchdog);
    code
}

/// Serves on stdio, or on the listeners named; returns the exit code once
/// every session is killed.
async fn serve(
    config: ServeConfig,
    args: ServeArgs,
    dispatcher: Arc<Dispatcher>,
    auth: listen::Auth,
    limits: crate::gate::Limits,
) -> i32 {
    let broker = crate::broker::Broker::new(
        dispatcher.clone(),
        &config.root,
        config.sessions.clone(),
        &config.env,
    );
    let root = config.root.clone();
    let server = AgentReachServer::new(config, broker.clone());
    // SIGHUP reloads the registry and profile; MCP clients are told.
    let _reloading = {
        let server = server.clone();
        crate::plan::source::reload_on_hangup(args.registry.clone(), root, dispatcher, move || {
            let server = server.clone();
            async move { server.tools_changed().await }
        })
        .map(|reload| TaskGuard(tokio::spawn(reload)))
    };
    if let Some(addr) = args.metrics_addr
        && let Err(e) = metrics_http::start(addr, server.metrics()).await
    {
        eprintln!("agent-reach serve: --metrics-addr: {e}");
        return exit_code::USAGE;
    }
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("agent-reach serve: cannot install signal handlers");
            return exit_code::FAILURE;
        }
    };
    if !args.listeners.listen.is_empty() {
        let shared = listen::Shared {
            broker: broker.clone(),
            server: server.clone(),
            auth,
            allowed_hosts: args.listeners.allowed_host.clone(),
            client_idle_timeout: Duration::from_secs(args.listeners.client_idle_timeout),
            max_sessions_per_client: args.max_sessions_per_client,
            max_clients: args.listeners.max_clients,
            limits,
            sandbox_id: args.sandbox_id.clone(),
            metadata_env: args.metadata_env.clone(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        };
        let shutdown = shared.shutdown.clone();
        let listeners = listen::serve_all(&args.listeners.listen, shared);
        tokio::pin!(listeners);
        let ended = tokio::select! {
            outcome = &mut listeners => Some(outcome),
            _ = term.recv() => None,
            _ = int.recv() => None,
        };
        if ended.is_none() {
            // A signal: every live process is ended first, so a call still
            // waiting on one (an MCP exec_command, a Start stream) is
            // answered with how it ended rather than cut off; the answers
            // get a moment to leave before the listeners close.
            server.shutdown().await;
            broker.sessions().end_all().await;
            tokio::time::sleep(STOP_ANSWER_GRACE).await;
        }
        // Every listener stops accepting; their sessions are killed below.
        shutdown.cancel();
        let code = match ended {
            Some(Ok(())) => exit_code::SUCCESS,
            Some(Err(e)) => {
                eprintln!("agent-reach serve: {e}");
                exit_code::FAILURE
            }
            None => {
                let _ = tokio::time::timeout(RUNTIME_STOP, listeners).await;
                exit_code::SUCCESS
            }
        };
        server.shutdown().await;
        broker.sessions().end_all().await;
        tracing::info!(code, "stopped; every session was killed");
        return code;
    }
    let stdio = match transport::take_stdio() {
        Ok(stdio) => stdio,
        Err(e) => {
            eprintln!("agent-reach serve: cannot use stdin/stdout: {e}");
            return exit_code::FAILURE;
        }
    };
    if args.stdio == args::StdioProtocol::CodexExec {
        tracing::info!(pid = std::process::id(), "serving codex-exec on stdio");
        let stop = tokio_util::sync::CancellationToken::new();
        let served = crate::doors::codex_exec::serve_stdio(broker.clone(), stdio, &stop);
        tokio::pin!(served);
        let signalled = tokio::select! {
            () = &mut served => None,
            _ = term.recv() => Some(libc::SIGTERM),
            _ = int.recv() => Some(libc::SIGINT),
        };
        if signalled.is_some() {
            // The connection ends, and its processes with it.
            stop.cancel();
            let _ = tokio::time::timeout(RUNTIME_STOP, served).await;
        }
        let code = signalled.map_or(exit_code::SUCCESS, exit_code::for_signal);
        server.shutdown().await;
        broker.sessions().end_all().await;
        tracing::info!(code, "stopped; every session was killed");
        return code;
    }
    tracing::info!(pid = std::process::id(), "serving MCP on stdio");
    let code = tokio::select! {
        code = run_protocol(server.clone(), stdio) => code,
        _ = term.recv() => exit_code::for_signal(libc::SIGTERM),
        _ = int.recv() => exit_code::for_signal(libc::SIGINT),
    };
    server.shutdown().await;
    tracing::info!(code, "stopped; every session was killed");
    code
}

/// Aborts a task when dropped (the reload task ends with the server).
struct TaskGuard(tokio::task::JoinHandle<()>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
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

/// Allocations below this come from malloc's heaps, never from a fresh
/// `mmap` of their own (glibc's default starts at 128 KiB, the size of a
/// pump read, and moves).
const MMAP_THRESHOLD: libc::c_int = 1024 * 1024;
/// Free memory at the top of a heap that malloc keeps instead of handing
/// back to the kernel (glibc's default: twice the mmap threshold).
const TRIM_THRESHOLD: libc::c_int = 16 * 1024 * 1024;

/// A streaming server allocates and frees a chunk of about 128 KiB per
/// read of output (the tap's chunk, the gRPC message's encode buffer), on
/// different threads. With glibc's defaults the freed memory goes back to
/// the kernel and every next chunk faults its pages in anew; keeping up
/// to [`TRIM_THRESHOLD`] of it took a `Start` bench run from 458,290 page
/// faults to 1,756 (docs/PERFORMANCE.md, "Reading output").
fn keep_freed_chunks() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets malloc's parameters; it takes malloc's own
    // locks and is safe to call while other threads allocate.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
    }
}
