//! `/read_file`, `/write_file` and `/upload` of the SWE-ReX API, with the
//! original's Python semantics (`Path.read_text` with `encoding` and
//! `errors`, parents made on write, `unzip` into a directory) and its
//! Python exceptions on failure.
//!
//! Paths are the client's: relative ones are taken from `--root`. Where
//! the operator allows raw commands a client can already write anywhere
//! the server may, so the file routes go anywhere too, as the original's;
//! where raw commands are off they are confined to `--root`.

use std::path::{Path, PathBuf};

use super::error::{PyClass, SwerexError};
use super::model::{ReadFile, WriteFile};
use crate::serve::listen::Shared;

/// The file name an upload without one is saved under in a directory.
const UPLOAD_FILE_NAME: &str = "temp_file_transfer";

/// Where a client's path points, under the policy.
fn resolve(shared: &Shared, path: &str) -> Result<PathBuf, SwerexError> {
    let given = Path::new(path);
    if shared.dispatcher.registry().settings.allow_raw_commands {
        return Ok(if given.is_absolute() {
            given.to_path_buf()
        } else {
            shared.root.join(given)
        });
    }
    let root = shared
        .root
        .canonicalize()
        .unwrap_or_else(|_| shared.root.clone());
    crate::workspace::locate(&root, &root, given).map_err(|e| {
        SwerexError::raise(
            PyClass::Permission,
            format!(
                "[Errno 13] Permission denied: {}: {e}",
                super::pyrepr::string(path)
            ),
        )
    })
}

/// `Path(path).read_text(encoding, errors)`.
pub(crate) fn read_file(shared: &Shared, request: &ReadFile) -> Result<String, SwerexError> {
    let path = resolve(shared, &request.path)?;
    let bytes = std::fs::read(&path).map_err(|e| SwerexError::io(&e, &request.path))?;
    let text = decode(
        &bytes,
        request.encoding.as_deref(),
        request.errors.as_deref(),
    )?;
    // Text mode reads with universal newlines.
    Ok(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// `Path(path).parent.mkdir(parents=True)` then `write_text(content)`.
pub(crate) fn write_file(shared: &Shared, request: &WriteFile) -> Result<(), SwerexError> {
    let path = resolve(shared, &request.path)?;
    make_parent(&path, &request.path)?;
    std::fs::write(&path, request.content.as_bytes())
        .map_err(|e| SwerexError::io(&e, &request.path))
}

/// `/upload`: the bytes saved at `target_path`, or unzipped into it.
pub(crate) fn upload(
    shared: &Shared,
    target_path: &str,
    file_name: Option<&str>,
    bytes: &[u8],
    unzip: bool,
) -> Result<(), SwerexError> {
    let target = resolve(shared, target_path)?;
    make_parent(&target, target_path)?;
    if unzip {
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| {
            SwerexError::raise(PyClass::SwerexException, format!("zipfile.BadZipFile: {e}"))
        })?;
        return archive.extract(&target).map_err(|e| match e {
            zip::result::ZipError::Io(io) => SwerexError::io(&io, target_path),
            other => SwerexError::raise(PyClass::SwerexException, format!("zipfile: {other}")),
        });
    }
    let destination = if target.is_dir() {
        let name = file_name
            .and_then(|n| Path::new(n).file_name())
            .map_or_else(|| UPLOAD_FILE_NAME.into(), |n| n.to_os_string());
        target.join(name)
    } else {
        target
    };
    std::fs::write(&destination, bytes).map_err(|e| SwerexError::io(&e, target_path))
}

fn make_parent(path: &Path, shown: &str) -> Result<(), SwerexError> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => {
            std::fs::create_dir_all(parent).map_err(|e| SwerexError::io(&e, shown))
        }
        _ => Ok(()),
    }
}

/// Bytes as Python's codecs decode them, for the encodings clients use.
fn decode(
    bytes: &[u8],
    encoding: Option<&str>,
    errors: Option<&str>,
) -> Result<String, SwerexError> {
    let encoding = encoding
        .unwrap_or("utf-8")
        .to_ascii_lowercase()
        .replace('_', "-");
    let errors = errors.unwrap_or("strict");
    match encoding.as_str() {
        "utf-8" | "utf8" | "u8" | "utf-8-sig" => {
            let bytes = if encoding == "utf-8-sig" {
                bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes)
            } else {
                bytes
            };
            decode_utf8(bytes, errors)
        }
        "latin-1" | "latin1" | "iso-8859-1" | "iso8859-1" | "l1" => {
            Ok(bytes.iter().map(|&b| char::from(b)).collect())
        }
        "ascii" | "us-ascii" => match bytes.iter().position(|b| !b.is_ascii()) {
            Some(at) if errors == "strict" => Err(decode_error(
                "ascii",
                bytes[at],
                at,
                "ordinal not in range(128)",
            )),
            _ => decode_utf8(bytes, errors),
        },
        other => Err(SwerexError::raise(
            PyClass::Lookup,
            format!("unknown encoding: {other}"),
        )),
    }
}

fn decode_utf8(bytes: &[u8], errors: &str) -> Result<String, SwerexError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text.to_owned()),
        Err(e) => match errors {
            "strict" => {
                let at = e.valid_up_to();
                Err(decode_error("utf-8", bytes[at], at, "invalid start byte"))
            }
            "ignore" => Ok(String::from_utf8_lossy(bytes).replace('\u{fffd}', "")),
            "backslashreplace" => Ok(backslash_replace(bytes)),
            _ => Ok(String::from_utf8_lossy(bytes).into_owned()),
        },
    }
}

fn decode_error(codec: &str, byte: u8, at: usize, why: &str) -> SwerexError {
    SwerexError::raise(
        PyClass::UnicodeDecode,
        format!("'{codec}' codec can't decode byte 0x{byte:02x} in position {at}: {why}"),
    )
}

fn backslash_replace(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    while !bytes.is_empty() {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(e) => {
                let (good, bad) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(good).unwrap_or_default());
                let n = e.error_len().unwrap_or(bad.len()).max(1);
                for b in &bad[..n] {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                bytes = &bad[n..];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_follows_the_errors_argument() {
        let bytes = b"a\xffb";
        assert!(matches!(
            decode(bytes, None, None),
            Err(SwerexError::Raise {
                class: PyClass::UnicodeDecode,
                ..
            })
        ));
        assert_eq!(decode(bytes, None, Some("ignore")).unwrap(), "ab");
        assert_eq!(decode(bytes, None, Some("replace")).unwrap(), "a\u{fffd}b");
        assert_eq!(
            decode(bytes, None, Some("backslashreplace")).unwrap(),
            "a\\xffb"
        );
        assert_eq!(decode(bytes, Some("latin-1"), None).unwrap(), "a\u{ff}b");
        assert!(decode(bytes, Some("klingon"), None).is_err());
    }
}
