//! Integration suites, one module per feature.

mod dispatch;
mod path_guard;
#[cfg(target_os = "linux")]
mod sandbox;
