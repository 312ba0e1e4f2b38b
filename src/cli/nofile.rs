//! The open-file limit of a process that runs many commands at once.
//!
//! Each running command holds several descriptors here (its pipes or
//! terminal, its pidfd, its slot file, spill files), and a soft
//! `RLIMIT_NOFILE` of 1024 (or a shell's `ulimit -n 64`) runs out long before
//! the scheduler's limits do. `exec` and `serve` raise the soft limit to the
//! hard one at start: raising the soft limit up to the hard one needs no
//! privilege. What is left over is the operator's hard limit (systemd
//! `LimitNOFILE`, a container's `ulimits`); a spawn that still runs out is
//! answered `busy`, not `error` ([`crate::plan::runner`]).

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft open-file limit to the hard limit; returns the new soft
/// limit (or the old one, with a warning, where it cannot be raised).
pub(crate) fn raise_to_hard_limit() -> Option<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some(soft);
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some(hard),
        Err(err) => {
            tracing::warn!(soft, hard, error = %err, "cannot raise the open-file limit");
            Some(soft)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let raised = raise_to_hard_limit().unwrap();
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!((raised, soft), (hard, hard));
    }
}
