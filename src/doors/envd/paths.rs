//! E2B's paths as its clients are shown them: absolute (`/home/user/x`).
//! Where a caller's path is placed (the root or a writable root) is the
//! broker's (`Broker::place`); this only spells the answer.

use std::path::Path;

/// The absolute path E2B shows for `rel` (relative to `root`).
pub(crate) fn shown(root: &Path, rel: &str) -> String {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        root.to_string_lossy().into_owned()
    } else {
        root.join(rel).to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_shown_by_their_absolute_path() {
        assert_eq!(shown(Path::new("/r"), "a/b"), "/r/a/b");
        assert_eq!(shown(Path::new("/r"), ""), "/r");
    }
}
