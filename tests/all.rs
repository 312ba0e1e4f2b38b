//! The one integration test binary: every suite module runs against the real
//! `agent-reach` executable, started through real links where names matter.

// A panic is how a test reports failure; unwrapping is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod suite;
