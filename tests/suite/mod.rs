//! Integration suites, one module per feature.

mod apply_patch;
mod dispatch;
mod exec;
pub mod exec_json;
mod path_guard;
mod registry;
mod scheduler;
mod serve;
