//! The sandbox wrapper: Landlock and seccomp, fail-closed, attested.

pub mod attestation;
pub mod cli;
pub mod policy;

pub use attestation::read_attestation;
pub use policy::{Network, Policy, SandboxSpec, UnknownName};
