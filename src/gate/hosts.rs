//! Which `Host` and `Origin` headers the MCP listener accepts, so a web page
//! cannot drive it through DNS rebinding or a cross-site request: the
//! addresses it listens on (every interface address for `:PORT`, the
//! loopback names for a loopback or wildcard address) and each
//! `--allowed-host`; an `Origin` must name one of those hosts. A request
//! without `Origin` (any client that is not a browser) passes.

use std::net::{IpAddr, SocketAddr};

/// The `Host` values (host, or `host:port`) a listener on `local` accepts.
pub(crate) fn allowed_hosts(
    local: SocketAddr,
    interfaces: &[IpAddr],
    extra: &[String],
) -> Vec<String> {
    let ip = local.ip();
    let mut ips: Vec<IpAddr> = Vec::new();
    if ip.is_unspecified() {
        ips.extend(interfaces.iter().copied());
    } else {
        ips.push(ip);
    }
    let mut hosts = Vec::new();
    if ip.is_unspecified() || ip.is_loopback() {
        hosts.extend(["localhost", "127.0.0.1", "::1"].map(str::to_owned));
    }
    hosts.extend(ips.iter().map(IpAddr::to_string));
    hosts.extend(
        extra
            .iter()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty()),
    );
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The origins (`scheme://host[:port]`, `:*` for any port) a browser page
/// on one of `hosts` sends.
pub(crate) fn allowed_origins(hosts: &[String]) -> Vec<String> {
    let mut origins = Vec::new();
    for host in hosts {
        let authority = match host.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]:*"),
            Ok(IpAddr::V4(v4)) => format!("{v4}:*"),
            // `name:port` keeps its port; a bare name takes any.
            Err(_) if host.contains(':') => host.clone(),
            Err(_) => format!("{host}:*"),
        };
        for scheme in ["http", "https"] {
            origins.push(format!("{scheme}://{authority}"));
        }
    }
    origins
}

/// This machine's interface addresses, for a listener on every interface.
/// On Windows none are listed (name them with `--allowed-host`).
#[cfg(windows)]
pub(crate) fn interface_addresses() -> Vec<IpAddr> {
    Vec::new()
}

/// This machine's interface addresses, for a listener on every interface.
#[cfg(unix)]
pub(crate) fn interface_addresses() -> Vec<IpAddr> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut ips: Vec<IpAddr> = addrs
        .filter_map(|a| {
            let address = a.address?;
            if let Some(v4) = address.as_sockaddr_in() {
                return Some(IpAddr::V4(v4.ip()));
            }
            address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
        })
        .collect();
    ips.sort();
    ips.dedup();
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_listener_accepts_the_loopback_names_and_the_extra_hosts() {
        let hosts = allowed_hosts(
            "127.0.0.1:8765".parse().unwrap(),
            &[],
            &["agents.example.com".to_owned()],
        );
        assert_eq!(
            hosts,
            ["127.0.0.1", "::1", "agents.example.com", "localhost"]
        );
    }

    #[test]
    fn a_listener_on_one_address_accepts_only_that_address() {
        let hosts = allowed_hosts("10.0.0.5:8765".parse().unwrap(), &[], &[]);
        assert_eq!(hosts, ["10.0.0.5"]);
    }

    #[test]
    fn a_listener_on_every_interface_accepts_every_interface_address() {
        let ifs: Vec<IpAddr> = vec!["10.1.2.3".parse().unwrap(), "fe80::1".parse().unwrap()];
        let hosts = allowed_hosts("0.0.0.0:8765".parse().unwrap(), &ifs, &[]);
        assert!(hosts.contains(&"10.1.2.3".to_owned()), "{hosts:?}");
        assert!(hosts.contains(&"fe80::1".to_owned()), "{hosts:?}");
        assert!(hosts.contains(&"localhost".to_owned()), "{hosts:?}");
    }

    #[test]
    fn origins_name_the_allowed_hosts_on_any_port_or_the_port_given() {
        let origins = allowed_origins(&[
            "::1".to_owned(),
            "localhost".to_owned(),
            "example.com:8443".to_owned(),
        ]);
        assert_eq!(
            origins,
            [
                "http://[::1]:*",
                "https://[::1]:*",
                "http://localhost:*",
                "https://localhost:*",
                "http://example.com:8443",
                "https://example.com:8443",
            ]
        );
    }

    #[cfg(unix)]
    #[test]
    fn this_machine_has_a_loopback_interface() {
        let ips = interface_addresses();
        assert!(ips.iter().any(IpAddr::is_loopback), "{ips:?}");
    }
}
