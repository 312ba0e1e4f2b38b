//! The `swerex-remote` personality: started under that name (a link, as
//! every SWE-ReX deployment calls its server), agent-reach takes the
//! original's flags and is `serve --listen swerex=HOST:PORT` with the
//! `--auth-token` as the listener's token.
//!
//! Like the original it needs `--auth-token`, except on a loopback host
//! (where `serve`'s own exposure rule lets a listener go without one).
//! Its root is `/` unless `--root DIR` says otherwise, so the original's
//! absolute paths keep working; file routes are confined to it.

use std::ffi::OsString;

use clap::Parser;

use crate::context::ProcessContext;
use crate::exit_code;
use crate::gate::conn::DEFAULT_MAX_CONNECTIONS;
use crate::serve::args::ServeArgs;
use crate::serve::listen::ListenSpec;
use crate::serve::listen::auth::TOKEN_VAR;

/// `--host` when not given: every interface, as the original.
pub(crate) const DEFAULT_HOST: &str = "0.0.0.0";
/// `--port` when not given, as the original.
pub(crate) const DEFAULT_PORT: u16 = 8000;
/// `--root` when not given: the whole file system, so the original's
/// clients, which send absolute paths, keep working.
pub(crate) const DEFAULT_ROOT: &str = "/";

/// The original's flags.
#[derive(Debug, Parser)]
#[command(
    name = "swerex-remote",
    version,
    about = "The SWE-ReX remote runtime, served by agent-reach (same as `agent-reach serve --listen swerex=HOST:PORT`)"
)]
struct SwerexRemoteArgs {
    /// Host to bind the server to.
    #[arg(long, default_value = DEFAULT_HOST)]
    host: String,
    /// Port to run the server on.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    port: u16,
    /// Token to authenticate requests (the `X-API-Key` header); required
    /// unless the host is loopback.
    #[arg(long, value_name = "TOKEN")]
    auth_token: Option<String>,
    /// The directory every file route and command is confined to (default
    /// `/`: clients use absolute paths, as with the original).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_ROOT)]
    root: std::path::PathBuf,
    /// How many connections the server holds open at once; past it a new
    /// connection waits until one closes (as `serve --max-connections`).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
}

/// `serve`'s flags, parsed from the argv it would be given.
#[derive(Debug, Parser)]
struct ServeOnly {
    #[command(flatten)]
    serve: ServeArgs,
}

/// `swerex-remote [--host H] [--port P] [--auth-token T]`.
pub(crate) fn main(mut ctx: ProcessContext) -> i32 {
    let mut argv: Vec<OsString> = vec!["swerex-remote".into()];
    argv.extend(ctx.args.iter().cloned());
    let args = match SwerexRemoteArgs::try_parse_from(argv) {
        Ok(args) => args,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit_code::USAGE
            } else {
                exit_code::SUCCESS
            };
        }
    };
    let host = if args.host.contains(':') && !args.host.starts_with('[') {
        format!("[{}]", args.host)
    } else {
        args.host.clone()
    };
    let listen = format!("swerex={host}:{}", args.port);
    let spec: ListenSpec = match listen.parse() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!(
                "swerex-remote: --host {} --port {}: {e}",
                args.host, args.port
            );
            return exit_code::USAGE;
        }
    };
    let token = args.auth_token.filter(|t| !t.trim().is_empty());
    if token.is_none() && !spec.is_loopback() {
        eprintln!(
            "swerex-remote: --auth-token is required when listening on {} (other machines can reach it); only a loopback --host may go without one",
            args.host
        );
        return exit_code::USAGE;
    }
    // The token reaches `serve` as its environment variable would; no
    // command inherits it (see the SWE-ReX engine seam).
    match token {
        Some(token) => ctx.env.insert(TOKEN_VAR.into(), token.into()),
        None => ctx.env.remove(std::ffi::OsStr::new(TOKEN_VAR)),
    };
    let serve_argv: [OsString; 7] = [
        "serve".into(),
        "--listen".into(),
        listen.into(),
        "--root".into(),
        args.root.into_os_string(),
        "--max-connections".into(),
        args.max_connections.to_string().into(),
    ];
    let serve = match ServeOnly::try_parse_from(serve_argv) {
        Ok(parsed) => parsed.serve,
        Err(e) => {
            eprintln!("swerex-remote: {e}");
            return exit_code::USAGE;
        }
    };
    crate::serve::main(serve, ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_default_as_the_original() {
        let args = SwerexRemoteArgs::try_parse_from(["swerex-remote"]).unwrap();
        assert_eq!(args.host, "0.0.0.0");
        assert_eq!(args.port, 8000);
        assert_eq!(args.auth_token, None);
        assert_eq!(args.root, std::path::PathBuf::from("/"));
        assert_eq!(args.max_connections, DEFAULT_MAX_CONNECTIONS);
        let args = SwerexRemoteArgs::try_parse_from([
            "swerex-remote",
            "--host",
            "127.0.0.1",
            "--port",
            "9",
            "--auth-token",
            "t",
        ])
        .unwrap();
        assert_eq!((args.host.as_str(), args.port), ("127.0.0.1", 9));
        assert_eq!(args.auth_token.as_deref(), Some("t"));
    }

    #[test]
    fn serve_takes_the_listen_spec_it_is_given() {
        let parsed =
            ServeOnly::try_parse_from(["serve", "--listen", "swerex=127.0.0.1:8000"]).unwrap();
        assert_eq!(parsed.serve.listeners.listen.len(), 1);
    }
}
