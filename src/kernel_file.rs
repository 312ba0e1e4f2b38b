//! Reading small kernel files (`/proc`, `/sys`) in one go: below the engine
//! and the sandbox, which both read them.

use std::fs;
use std::io::Read;

/// Reads a `/proc` file whole. They report a size of 0, on which
/// `fs::read_to_string` starts with a 32-byte probe and doubles from there
/// (eight reads for a mount table); one buffer of a page or more takes them
/// in one or two.
pub(crate) fn read_small(path: impl AsRef<std::path::Path>) -> Option<String> {
    let mut file = fs::File::open(path).ok()?;
    let mut bytes = Vec::with_capacity(16 * 1024);
    file.read_to_end(&mut bytes).ok()?;
    String::from_utf8(bytes).ok()
}
