//! apply_patch: the Codex patch format, applied all-or-nothing.

pub mod cli;
