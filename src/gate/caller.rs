//! Who is calling: made once, by the gate, from what the connection and the
//! credential say, and handed to the door as a request extension; the door
//! passes it to the broker with every call, which counts sessions, quotas
//! and fairness by it.
//!
//! A caller is its door, the address it connects from and a digest of the
//! credential it presented (never the credential itself). A door with
//! sessions of its own (MCP over HTTP) narrows it to one session with
//! [`Caller::within`].

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// One remote or local caller, as quotas and fairness count it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Caller {
    /// The door's protocol name (`swerex`, `mcp`, ...), or `stdio`/`local`.
    door: &'static str,
    /// The caller's key within the door: address and credential digest, and
    /// a session when the door has them.
    key: Arc<str>,
}

impl Caller {
    /// A caller of `door` connecting from `peer`, having presented a
    /// credential whose digest is `credential` (none without a token).
    pub(crate) fn remote(door: &'static str, peer: IpAddr, credential: Option<u64>) -> Self {
        let key = match credential {
            Some(digest) => format!("{peer}/{digest:016x}"),
            None => peer.to_string(),
        };
        Self {
            door,
            key: key.into(),
        }
    }

    /// A caller on this machine with no address: `serve` on stdio, `exec`.
    pub(crate) fn local(door: &'static str) -> Self {
        Self {
            door,
            key: Arc::from(""),
        }
    }

    /// This caller narrowed to one of its door's sessions (an MCP session).
    pub(crate) fn within(&self, session: &str) -> Self {
        Self {
            door: self.door,
            key: format!("{}#{session}", self.key).into(),
        }
    }

    /// The door this caller came through.
    pub(crate) fn door(&self) -> &'static str {
        self.door
    }
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(self.door)
        } else {
            write!(f, "{}:{}", self.door, self.key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_differ_by_door_address_credential_and_session() {
        let ip: IpAddr = [127, 0, 0, 1].into();
        let a = Caller::remote("swerex", ip, Some(1));
        assert_ne!(a, Caller::remote("swerex", ip, Some(2)));
        assert_ne!(a, Caller::remote("mcp", ip, Some(1)));
        assert_ne!(a, Caller::remote("swerex", [127, 0, 0, 2].into(), Some(1)));
        assert_ne!(a.within("s1"), a.within("s2"));
        assert_eq!(a.within("s1"), a.within("s1"));
        assert_eq!(a.to_string(), "swerex:127.0.0.1/0000000000000001");
        assert_eq!(a.door(), "swerex");
        assert_eq!(Caller::local("stdio").to_string(), "stdio");
    }
}
