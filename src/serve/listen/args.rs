//! The listeners' flags, on both platforms: what to serve where
//! (`--listen`), the token (`--token-file`, `--no-auth`), the names the
//! listeners answer to (`--allowed-host`), and the bounds on clients and
//! connections. `serve` embeds them (Linux's `super::super::args`,
//! Windows' `platform_windows::mcp`).

use std::path::PathBuf;

use super::ListenSpec;
use super::auth::{Auth, AuthError, TOKEN_VAR, check_exposure, load_token};
use crate::context::ProcessContext;
use crate::doors::mcp_http::router::{DEFAULT_CLIENT_IDLE_TIMEOUT, DEFAULT_MAX_CLIENTS};
use crate::gate::Limits;
use crate::gate::conn::DEFAULT_MAX_CONNECTIONS;

/// `--listen`, `--token-file`, `--no-auth`, `--allowed-host`,
/// `--client-idle-timeout`, `--max-clients`, `--max-connections`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ListenArgs {
    /// Serve PROTOCOL on ADDR (HOST:PORT, or :PORT for every interface)
    /// instead of MCP on stdio; repeatable. PROTOCOL: mcp, sandboxd-grpc,
    /// sandboxd-rest, python-runtime, swerex, envd, daytona, codex-exec
    /// (on Windows: mcp).
    #[arg(long, value_name = "PROTOCOL=ADDR")]
    pub(crate) listen: Vec<ListenSpec>,
    /// The token every listener request must carry: the first line of FILE
    /// (mode 0600; refused on Windows, which has no such mode to check).
    /// Default: $AGENT_REACH_TOKEN.
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Serve listeners off loopback without a token (the operator's choice,
    /// e.g. in a pod behind a NetworkPolicy).
    #[arg(long)]
    pub(crate) no_auth: bool,
    /// One more `Host` header value the HTTP listeners accept (besides the
    /// addresses they listen on); repeatable.
    #[arg(long, value_name = "HOST")]
    pub(crate) allowed_host: Vec<String>,
    /// Kill the sessions of an MCP client silent for this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_CLIENT_IDLE_TIMEOUT.as_secs())]
    pub(crate) client_idle_timeout: u64,
    /// How many MCP clients (MCP sessions over HTTP) may be connected at
    /// once; past it the one idle longest is ended.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CLIENTS, value_parser = clap::value_parser!(usize))]
    pub(crate) max_clients: usize,
    /// How many connections the listeners hold open at once, all together;
    /// past it a new connection waits until one closes.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_connections: u32,
}

impl ListenArgs {
    /// The listeners' token check (`--token-file`, else `$AGENT_REACH_TOKEN`
    /// in `ctx`), refused at start where a listener off loopback would have
    /// none without `--no-auth`.
    pub(crate) fn auth(&self, ctx: &ProcessContext) -> Result<Auth, AuthError> {
        let env_token = ctx.var(TOKEN_VAR).and_then(|v| v.to_str());
        let auth = Auth::new(load_token(self.token_file.as_deref(), env_token)?);
        check_exposure(&self.listen, &auth, self.no_auth)?;
        Ok(auth)
    }

    /// The connection bounds: `--max-connections` with the timeouts, which
    /// change only for the test suite (through `ctx`'s variables).
    pub(crate) fn limits(&self, ctx: &ProcessContext) -> Limits {
        Limits::from_env(self.max_connections, |name| {
            ctx.var(name).and_then(|v| v.to_str()).map(str::to_owned)
        })
    }
}
