//! The attestation: what the sandbox actually enforced, written as one JSON
//! object before the command is exec'd, so the engine can put it in the
//! result's `sandbox` field.
//!
//! Writing happens in the sandbox process after the rules are applied; the
//! report file must therefore be created by the engine beforehand or live in a
//! writable place. Reading is forgiving: a missing or garbled report is `None`
//! (the command may have been refused before the report was written).

use std::path::Path;

use crate::result::SandboxAttestation;

/// How much of the filesystem policy is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FsLevel {
    /// Every rule the policy asks for.
    Enforced,
    /// Some rules (an older Landlock ABI lacks some access rights).
    Partial,
    /// None (no Landlock, or `danger-full-access`).
    None,
}

impl FsLevel {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            FsLevel::Enforced => "enforced",
            FsLevel::Partial => "partial",
            FsLevel::None => "none",
        }
    }
}

/// Whether the network rule is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetLevel {
    Enforced,
    None,
}

impl NetLevel {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NetLevel::Enforced => "enforced",
            NetLevel::None => "none",
        }
    }
}

/// Builds the contract's attestation value.
pub(crate) fn attestation(fs: FsLevel, net: NetLevel, abi: Option<u32>) -> SandboxAttestation {
    SandboxAttestation {
        fs: fs.as_str().to_owned(),
        net: net.as_str().to_owned(),
        abi,
    }
}

/// Reads a report written by `agent-reach-sandbox --report FILE`.
pub(crate) fn read_attestation(path: &Path) -> Option<SandboxAttestation> {
    SandboxAttestation::read(path)
}

/// The report's bytes: one JSON object and a newline.
pub(crate) fn encode(value: &SandboxAttestation) -> Vec<u8> {
    // Serializing three plain fields cannot fail; an empty report would read
    // back as `None`, the safe answer.
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_report_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let value = attestation(FsLevel::Partial, NetLevel::Enforced, Some(7));
        std::fs::write(&path, encode(&value)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "{\"fs\":\"partial\",\"net\":\"enforced\",\"abi\":7}\n"
        );
        assert_eq!(read_attestation(&path), Some(value));
    }

    #[test]
    fn missing_or_garbled_report_is_none() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        assert_eq!(read_attestation(&path), None);
        std::fs::write(&path, b"{\"fs\":").unwrap();
        assert_eq!(read_attestation(&path), None);
        std::fs::write(&path, b"").unwrap();
        assert_eq!(read_attestation(&path), None);
    }
}
