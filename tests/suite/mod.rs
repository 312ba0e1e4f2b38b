//! Integration suites, one module per feature.

mod dispatch;
mod exec;
mod exec_api;
mod output;
mod path_guard;
#[cfg(target_os = "linux")]
mod sandbox;
