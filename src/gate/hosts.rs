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

/// This machine's interface addresses, for a listener on every interface:
/// the unicast addresses `GetAdaptersAddresses` lists (none when it fails).
#[cfg(windows)]
pub(crate) fn interface_addresses() -> Vec<IpAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    use windows_sys::Win32::NetworkManagement::IpHelper::{
        GAA_FLAG_SKIP_ANYCAST, GAA_FLAG_SKIP_DNS_SERVER, GAA_FLAG_SKIP_MULTICAST,
        GetAdaptersAddresses, IP_ADAPTER_ADDRESSES_LH,
    };
    use windows_sys::Win32::Networking::WinSock::{
        AF_INET, AF_INET6, AF_UNSPEC, SOCKADDR_IN, SOCKADDR_IN6,
    };
    /// The buffer was too small; `size` now says how large it must be.
    const ERROR_BUFFER_OVERFLOW: u32 = 111;
    let flags = GAA_FLAG_SKIP_ANYCAST | GAA_FLAG_SKIP_MULTICAST | GAA_FLAG_SKIP_DNS_SERVER;
    let mut size: u32 = 16 * 1024;
    // The list can grow between two calls: a few tries, then none.
    for _ in 0..4 {
        // u64s: the list's structures need 8-byte alignment.
        let mut buffer = vec![0u64; (size as usize).div_ceil(8)];
        let first = buffer.as_mut_ptr().cast::<IP_ADAPTER_ADDRESSES_LH>();
        // SAFETY: `first` points to `size` writable bytes, aligned for the
        // structures written there; `size` is a valid u32 to update.
        let status = unsafe {
            GetAdaptersAddresses(
                u32::from(AF_UNSPEC),
                flags,
                std::ptr::null(),
                first,
                &mut size,
            )
        };
        if status == ERROR_BUFFER_OVERFLOW {
            continue;
        }
        if status != 0 {
            return Vec::new();
        }
        let mut ips = Vec::new();
        let mut adapter = first.cast_const();
        while !adapter.is_null() {
            // SAFETY: a node of the list the call wrote into `buffer`,
            // which outlives this loop; its links are null or nodes too.
            let node = unsafe { &*adapter };
            let mut unicast = node.FirstUnicastAddress.cast_const();
            while !unicast.is_null() {
                // SAFETY: as above, a node of the adapter's address list.
                let address = unsafe { &*unicast };
                let sockaddr = address.Address.lpSockaddr.cast_const();
                if !sockaddr.is_null() {
                    // SAFETY: a socket address of the family it names, as
                    // long as `iSockaddrLength` says, inside `buffer`.
                    unsafe {
                        match (*sockaddr).sa_family {
                            AF_INET => {
                                let v4 = &*sockaddr.cast::<SOCKADDR_IN>();
                                let octets = v4.sin_addr.S_un.S_addr.to_ne_bytes();
                                ips.push(IpAddr::V4(Ipv4Addr::from(octets)));
                            }
                            AF_INET6 => {
                                let v6 = &*sockaddr.cast::<SOCKADDR_IN6>();
                                ips.push(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.u.Byte)));
                            }
                            _ => {}
                        }
                    }
                }
                unicast = address.Next.cast_const();
            }
            adapter = node.Next.cast_const();
        }
        ips.sort();
        ips.dedup();
        return ips;
    }
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

    #[test]
    fn this_machine_has_a_loopback_interface() {
        let ips = interface_addresses();
        assert!(ips.iter().any(IpAddr::is_loopback), "{ips:?}");
    }
}
