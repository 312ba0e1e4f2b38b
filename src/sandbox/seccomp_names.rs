//! The names of the merged seccomp filters: build.rs gives them to the
//! filters it folds together ([`super::seccomp_merge`], build-time code) and
//! the sandbox installs them by these names at run time.

/// The merged filter without the network rules.
pub(crate) const BASE: &str = "eperm";
/// The merged filter with them (`--network deny`).
pub(crate) const BASE_NETWORK_DENY: &str = "eperm_network_deny";
