//! `--listen PROTOCOL=ADDR` parsed at the edge: the protocol is one type,
//! the address `HOST:PORT` (a name such as `localhost` is resolved once) or
//! `:PORT` for every interface.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::str::FromStr;

/// What a listener speaks (the contract's table of `serve --listen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Protocol {
    /// MCP over streamable HTTP at `/mcp`.
    Mcp,
    /// agent-sandbox sandboxd `process.v1.ProcessService` (gRPC).
    SandboxdGrpc,
    /// agent-sandbox sandboxd filesystem v1 REST.
    SandboxdRest,
    /// agent-sandbox's older runtime API (`/execute`, `/upload`, ...).
    PythonRuntime,
    /// The SWE-ReX remote runtime API.
    Swerex,
    /// E2B's in-sandbox daemon (envd): Connect-RPC process and filesystem.
    Envd,
    /// Daytona's toolbox API and the control-plane routes its SDK reads.
    Daytona,
    /// Codex's exec-server: JSON-RPC over WebSocket at `/`.
    CodexExec,
}

impl Protocol {
    /// Every protocol, in the contract's order.
    pub(crate) const ALL: [Protocol; 8] = [
        Protocol::Mcp,
        Protocol::SandboxdGrpc,
        Protocol::SandboxdRest,
        Protocol::PythonRuntime,
        Protocol::Swerex,
        Protocol::Envd,
        Protocol::Daytona,
        Protocol::CodexExec,
    ];

    /// The name used on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::Mcp => "mcp",
            Protocol::SandboxdGrpc => "sandboxd-grpc",
            Protocol::SandboxdRest => "sandboxd-rest",
            Protocol::PythonRuntime => "python-runtime",
            Protocol::Swerex => "swerex",
            Protocol::Envd => "envd",
            Protocol::Daytona => "daytona",
            Protocol::CodexExec => "codex-exec",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A `--listen` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadListen {
    #[error("--listen {given:?}: expected PROTOCOL=HOST:PORT or PROTOCOL=:PORT")]
    Shape { given: String },
    #[error(
        "--listen {given:?}: unknown protocol {protocol:?} (known: {})",
        known()
    )]
    Protocol { given: String, protocol: String },
    #[error("--listen {given:?}: {why}")]
    Address { given: String, why: String },
}

fn known() -> String {
    Protocol::ALL.map(Protocol::name).join(", ")
}

impl FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Protocol::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| s.to_owned())
    }
}

/// One listener: a protocol on an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListenSpec {
    pub(crate) protocol: Protocol,
    pub(crate) addr: SocketAddr,
}

impl ListenSpec {
    /// Only this machine can reach it (127.0.0.0/8, ::1).
    pub(crate) fn is_loopback(&self) -> bool {
        self.addr.ip().is_loopback()
    }
}

impl FromStr for ListenSpec {
    type Err = BadListen;
    fn from_str(given: &str) -> Result<Self, Self::Err> {
        let shape = || BadListen::Shape {
            given: given.to_owned(),
        };
        let (protocol, address) = given.split_once('=').ok_or_else(shape)?;
        let protocol: Protocol = protocol.parse().map_err(|protocol| BadListen::Protocol {
            given: given.to_owned(),
            protocol,
        })?;
        let addr = parse_addr(address).map_err(|why| BadListen::Address {
            given: given.to_owned(),
            why,
        })?;
        Ok(ListenSpec { protocol, addr })
    }
}

/// `HOST:PORT`, `[V6]:PORT` or `:PORT` (every IPv4 interface).
pub(crate) fn parse_addr(address: &str) -> Result<SocketAddr, String> {
    if let Some(port) = address.strip_prefix(':') {
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{port:?} is not a port number"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Ok(addr) = address.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| format!("{address:?} has no port (HOST:PORT)"))?;
    if host.is_empty() {
        return Err(format!("{address:?} has no host"));
    }
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{port:?} is not a port number"))?;
    // A name (localhost, a pod's hostname): resolved once, at start.
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host:?} resolves to no address"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protocol_and_an_address_make_a_listener() {
        let spec: ListenSpec = "mcp=127.0.0.1:8765".parse().unwrap();
        assert_eq!(spec.protocol, Protocol::Mcp);
        assert_eq!(spec.addr, "127.0.0.1:8765".parse().unwrap());
        assert!(spec.is_loopback());
        let v6: ListenSpec = "swerex=[::1]:8000".parse().unwrap();
        assert!(v6.is_loopback());
    }

    #[test]
    fn a_bare_port_listens_on_every_interface() {
        let spec: ListenSpec = "sandboxd-grpc=:9090".parse().unwrap();
        assert_eq!(spec.addr, "0.0.0.0:9090".parse().unwrap());
        assert!(!spec.is_loopback());
    }

    #[test]
    fn every_protocol_name_round_trips() {
        for p in Protocol::ALL {
            assert_eq!(p.name().parse::<Protocol>().unwrap(), p);
        }
    }

    #[test]
    fn bad_values_say_what_is_wrong() {
        assert!(matches!(
            "mcp".parse::<ListenSpec>(),
            Err(BadListen::Shape { .. })
        ));
        let err = "ftp=:21".parse::<ListenSpec>().unwrap_err();
        assert!(
            err.to_string().contains("known: mcp, sandboxd-grpc"),
            "{err}"
        );
        assert!(matches!(
            "mcp=127.0.0.1".parse::<ListenSpec>(),
            Err(BadListen::Address { .. })
        ));
        assert!(matches!(
            "mcp=:99999".parse::<ListenSpec>(),
            Err(BadListen::Address { .. })
        ));
    }
}
