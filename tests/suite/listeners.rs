//! What every `serve --listen` door shares, checked on one process that
//! listens with all five protocols: each accepted connection has
//! `TCP_NODELAY` set, read from the server's own socket (duplicated into the
//! test with `pidfd_getfd`), so no reply written in pieces waits out the
//! client's delayed ACK.

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::socket::{SockaddrStorage, getpeername, getsockopt, sockopt};

use crate::common::{ServerProcess, TestEnv, listening_addrs, serve_listening};

const PROTOCOLS: [&str; 5] = [
    "mcp",
    "sandboxd-grpc",
    "sandboxd-rest",
    "python-runtime",
    "swerex",
];
const LIMIT: Duration = Duration::from_secs(30);

/// Protocol → address, once `count` listeners logged their `listening` line.
pub(crate) fn listening(log: &std::path::Path, count: usize) -> BTreeMap<String, SocketAddr> {
    let started = Instant::now();
    loop {
        let found = listening_addrs(log);
        if found.len() == count {
            return found;
        }
        assert!(
            started.elapsed() < LIMIT,
            "not every listener started; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `TCP_NODELAY` of the server's end of `client`, once the server has
/// accepted it.
fn server_side_no_delay(pid: u32, client: &TcpStream) -> bool {
    let ours = client.local_addr().unwrap();
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::c_int, 0) };
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a fresh fd owned by nothing else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let started = Instant::now();
    loop {
        for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap() {
            let entry = entry.unwrap();
            let is_socket = std::fs::read_link(entry.path())
                .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
            let Some(fd) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            if !is_socket {
                continue;
            }
            // SAFETY: pidfd_getfd duplicates the target's fd into ours, or
            // returns -1 (the fd closed meanwhile).
            let dup = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0) };
            if dup < 0 {
                continue;
            }
            // SAFETY: a fresh fd owned by nothing else.
            let socket = unsafe { OwnedFd::from_raw_fd(dup as i32) };
            let Ok(peer) = getpeername::<SockaddrStorage>(socket.as_raw_fd()) else {
                continue;
            };
            let peer = peer
                .as_sockaddr_in()
                .map(|a| SocketAddr::from(std::net::SocketAddrV4::from(*a)));
            if peer == Some(ours) {
                return getsockopt(&socket, sockopt::TcpNoDelay).unwrap();
            }
        }
        assert!(
            started.elapsed() < LIMIT,
            "the server did not accept the connection from {ours}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn every_listener_sends_each_write_at_once() {
    let env = TestEnv::new();
    let log = env.root.path().join("serve.log");
    let listens: Vec<String> = PROTOCOLS
        .iter()
        .map(|protocol| format!("{protocol}=127.0.0.1:0"))
        .collect();
    let child = serve_listening(&env, &log, &listens, "t0ken-for-tests")
        .spawn()
        .unwrap();
    let pid = child.id();
    let _known = agent_reach::exec::KnownChildGuard::register(pid as i32);
    let _process = ServerProcess::new(child);
    for (protocol, addr) in listening(&log, PROTOCOLS.len()) {
        let client = TcpStream::connect(addr).unwrap();
        assert!(
            server_side_no_delay(pid, &client),
            "the {protocol} listener on {addr} accepted a connection without TCP_NODELAY"
        );
    }
}
