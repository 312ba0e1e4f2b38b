//! Integration suites, one module per feature.

mod apply_patch;
mod dispatch;
mod distribution;
mod exec;
mod exec_api;
pub mod exec_json;
mod exit_codes;
mod output;
mod path_guard;
mod registry;
#[cfg(target_os = "linux")]
mod sandbox;
mod scheduler;
mod serve;
