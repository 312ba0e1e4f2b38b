//! The sandbox wrapper: Landlock and seccomp, fail-closed, attested.

pub mod cli;
