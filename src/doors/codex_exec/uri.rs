//! Codex names every path as a `file://` URI (`file:///home/user/x`,
//! percent-encoded). A URI is read into the absolute path it names; the
//! broker places that path (`Broker::place`) as it does every door's.

use std::path::{Path, PathBuf};

/// Why a URI names nothing this door can reach.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UriError {
    #[error("{uri:?} is not a file:// URI with an absolute path")]
    NotFileUri { uri: String },
    #[error("{uri:?} has a bad percent escape")]
    BadEscape { uri: String },
}

/// The absolute path a `file://` URI names.
pub(crate) fn to_path(uri: &str) -> Result<PathBuf, UriError> {
    let not_file = || UriError::NotFileUri {
        uri: uri.to_owned(),
    };
    let rest = uri.strip_prefix("file://").ok_or_else(not_file)?;
    // `file:///x` or `file://localhost/x`: no other host is this machine.
    let path = match rest.strip_prefix("localhost") {
        Some(after) if after.starts_with('/') => after,
        _ => rest,
    };
    if !path.starts_with('/') {
        return Err(not_file());
    }
    let bytes = decode(path).ok_or_else(|| UriError::BadEscape {
        uri: uri.to_owned(),
    })?;
    use std::os::unix::ffi::OsStrExt;
    Ok(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
}

/// The `file://` URI of an absolute path.
pub(crate) fn from_path(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut out = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~!$&'()*+,;=:@".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_uri_names_its_decoded_absolute_path() {
        assert_eq!(
            to_path("file:///home/user/a%20b.txt").unwrap(),
            PathBuf::from("/home/user/a b.txt")
        );
        assert_eq!(
            to_path("file://localhost/tmp").unwrap(),
            PathBuf::from("/tmp")
        );
        assert!(to_path("/home/user/x").is_err());
        assert!(to_path("file://host/x").is_err());
        assert!(to_path("file:///bad%zz").is_err());
    }

    #[test]
    fn a_path_becomes_a_uri_that_reads_back_the_same() {
        let path = Path::new("/w/sub dir/ü.txt");
        let uri = from_path(path);
        assert_eq!(uri, "file:///w/sub%20dir/%C3%BC.txt");
        assert_eq!(to_path(&uri).unwrap(), path);
    }
}
