//! `agent-reach exec --json|--jsonl`: requests on stdin, normalized results
//! on stdout, through the registry and the scheduler.
//!
//! `--json` reads one request and prints one result (exit 0 when its status
//! is `success`, 1 otherwise). `--jsonl` reads one request per line and runs
//! them concurrently; each result is one line, written as it finishes and
//! echoing its request's `id`. A malformed line gets a `rejected` result and
//! the stream goes on; at EOF the requests in flight finish, then it exits 0.
//! There is no back-pressure beyond the scheduler: a client that sends more
//! than the queue holds gets `busy` answers with `retry_after_ms`.

use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

use crate::context::ProcessContext;
use crate::exit_code;
use crate::path_guard::ProcessSession;
use crate::plan::Dispatcher;
use crate::plan::source::RegistryArgs;
use crate::result::{NormalizedResult, Status};

/// `exec` arguments.
#[derive(Debug, clap::Args)]
#[command(after_help = exit_code::EXEC_EXIT_STATUS)]
#[command(group(clap::ArgGroup::new("mode").required(true).multiple(false).args(["json", "jsonl"])))]
pub(crate) struct ExecArgs {
    /// One JSON request on stdin, one JSON result on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Many requests, one per line; results as they finish.
    #[arg(long)]
    pub(crate) jsonl: bool,
    /// With --jsonl: serve the metrics in the Prometheus text format over
    /// HTTP on this loopback address while the stream runs.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub(crate) registry: RegistryArgs,
}

/// The largest request `--json` reads (and the longest `--jsonl` line).
const MAX_REQUEST_BYTES: usize = 16 << 20;

/// `agent-reach exec ...`.
pub(crate) fn main(args: ExecArgs, mut ctx: ProcessContext) -> i32 {
    if args.json && args.metrics_addr.is_some() {
        eprintln!(
            "agent-reach: --metrics-addr needs --jsonl (a --json run ends with its one request)"
        );
        return exit_code::USAGE;
    }
    let session = match ProcessSession::start(&mut ctx) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("agent-reach: cannot set up the session: {err}");
            return exit_code::INTERNAL;
        }
    };
    init_logging(&ctx);
    let (root, dispatcher) =
        match args
            .registry
            .session_dispatcher(&ctx, &session, None, Vec::new())
        {
            Ok(ready) => ready,
            Err(err) => {
                eprintln!("agent-reach: {err}");
                return err.exec_exit_code();
            }
        };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("agent-reach: cannot start the async runtime: {err}");
            return exit_code::INTERNAL;
        }
    };
    let code = if args.json {
        runtime.block_on(one(dispatcher))
    } else {
        // A long-lived stream reloads its registry at SIGHUP, as `serve`.
        let reloading = {
            let _entered = runtime.enter();
            crate::plan::source::reload_on_hangup(
                args.registry.clone(),
                root,
                dispatcher.clone(),
                || async {},
            )
            .map(|reload| runtime.spawn(reload))
        };
        let metrics = match args.metrics_addr {
            Some(addr) => match runtime.block_on(crate::registry::metrics_http::start(
                addr,
                dispatcher.metrics(),
            )) {
                Ok(task) => Some(task),
                Err(e) => {
                    eprintln!("agent-reach: --metrics-addr: {e}");
                    return exit_code::USAGE;
                }
            },
            None => None,
        };
        let code = runtime.block_on(stream(dispatcher));
        for task in reloading.into_iter().chain(metrics) {
            task.abort();
        }
        code
    };
    // Commands still running (a broken pipe cut the stream) are killed as
    // their tasks drop with the runtime.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    drop(session);
    code
}

fn init_logging(ctx: &ProcessContext) {
    if let Some(filter) = ctx
        .var(crate::logging::LOG_FILTER_VAR)
        .and_then(|v| v.to_str())
        .filter(|v| !v.is_empty())
    {
        // JSON lines on stderr; stderr cannot fail to open.
        let _ = crate::logging::init(None, Some(filter));
    }
}

/// Discards input up to and including the next newline, in bounded memory.
async fn skip_line(input: &mut (impl tokio::io::AsyncBufRead + Unpin)) {
    loop {
        let buf = match input.fill_buf().await {
            Ok(buf) if !buf.is_empty() => buf,
            _ => return,
        };
        match buf.iter().position(|b| *b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return;
            }
            None => {
                let n = buf.len();
                input.consume(n);
            }
        }
    }
}

fn too_large() -> NormalizedResult {
    NormalizedResult::refused(
        None,
        None,
        Status::Rejected,
        crate::registry::kinds::MALFORMED_REQUEST,
        format!("the request is larger than {MAX_REQUEST_BYTES} bytes"),
    )
}

async fn one(dispatcher: Arc<Dispatcher>) -> i32 {
    let mut input = Vec::new();
    let read = tokio::io::stdin()
        .take(MAX_REQUEST_BYTES as u64 + 1)
        .read_to_end(&mut input)
        .await;
    let result = match read {
        Err(err) => {
            eprintln!("agent-reach: cannot read stdin: {err}");
            return exit_code::INTERNAL;
        }
        Ok(_) if input.len() > MAX_REQUEST_BYTES => too_large(),
        Ok(_) => {
            dispatcher
                .handle_line(&String::from_utf8_lossy(&input))
                .await
        }
    };
    if let Err(err) = crate::stdio::write_stdout(&result.to_line()) {
        return crate::stdio::exit_code_for_stdout_error(&err);
    }
    if result.status == Status::Success {
        exit_code::SUCCESS
    } else {
        1
    }
}

async fn stream(dispatcher: Arc<Dispatcher>) -> i32 {
    let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel::<NormalizedResult>();
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::BufWriter::new(tokio::io::stdout());
        while let Some(result) = receiver.recv().await {
            out.write_all(&result.to_line()).await?;
            // Flush when nothing else is ready: results are never held back,
            // and a burst leaves in one write.
            if receiver.is_empty() {
                out.flush().await?;
            }
        }
        out.flush().await
    });
    let mut tasks = tokio::task::JoinSet::new();
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut input)
            .take(MAX_REQUEST_BYTES as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) => {
                eprintln!("agent-reach: cannot read stdin: {err}");
                break;
            }
        }
        if writer.is_finished() {
            break;
        }
        if line.len() as u64 == MAX_REQUEST_BYTES as u64 && line.last() != Some(&b'\n') {
            // Skip the rest of the over-long line: one request, one answer.
            skip_line(&mut input).await;
            let _ = sender.send(too_large());
            continue;
        }
        let text = String::from_utf8_lossy(&line).trim().to_owned();
        if text.is_empty() {
            continue;
        }
        // Admitted here, in the order the lines came: their places in the
        // queue are their arrival order.
        let admitted = dispatcher.admit_line(&text);
        let dispatcher = dispatcher.clone();
        let sender = sender.clone();
        tasks.spawn(async move {
            let result = dispatcher.finish(admitted).await;
            let _ = sender.send(result);
        });
        while tasks.try_join_next().is_some() {}
    }
    if writer.is_finished() {
        // Nobody reads the results any more: stop the commands.
        tasks.shutdown().await;
    }
    while tasks.join_next().await.is_some() {}
    drop(sender);
    match writer.await {
        Ok(Ok(())) => exit_code::SUCCESS,
        Ok(Err(err)) => crate::stdio::exit_code_for_stdout_error(&err),
        Err(_) => exit_code::INTERNAL,
    }
}
