//! The fence of file operations: what the sandbox wrapper keeps from a
//! command, kept from every file operation of every door (one list,
//! `sandbox::fs_plan::read_only_within`, plus the sealed files).

use super::policy::OperatorPolicy;
use crate::sandbox::Policy;

/// The fence of every file operation under `policy`: sealed are the
/// state directory `home` and the `hidden` files (the token, the secrets
/// file) under every policy; read-only, unless the operator's sandbox is
/// `danger-full-access`, is what the sandbox wrapper keeps read-only in the
/// root and the writable roots (`fs_plan::read_only_within`, one list).
pub(crate) fn fence(
    policy: &OperatorPolicy,
    home: &std::path::Path,
    hidden: &[std::path::PathBuf],
) -> crate::workspace::Fence {
    let sealed = std::iter::once(home.to_path_buf()).chain(hidden.iter().cloned());
    if policy.sandbox_default == Some(Policy::DangerFullAccess) {
        return crate::workspace::Fence::new(sealed, []);
    }
    let canonical = |path: &std::path::PathBuf| path.canonicalize().ok();
    let writable: Vec<std::path::PathBuf> =
        policy.writable_roots.iter().filter_map(canonical).collect();
    let roots: Vec<std::path::PathBuf> = canonical(&policy.root)
        .into_iter()
        .chain(writable.iter().cloned())
        .collect();
    let rules = crate::sandbox::fs_plan::RuleFile::builtin();
    let mut read_only = crate::sandbox::fs_plan::read_only_within(&roots, &writable, None, &rules);
    // A `.git` made after the server started (`git init` through a door)
    // is kept read-only too: its name at the top of each root is enough.
    read_only.extend(roots.iter().flat_map(|root| {
        rules
            .protected_names
            .iter()
            .map(|name| root.join(name))
            .filter(|path| !writable.contains(path))
    }));
    crate::workspace::Fence::new(sealed, read_only)
}
