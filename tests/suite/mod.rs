//! Integration suites, one module per feature.

mod apply_patch;
mod dispatch;
mod exec;
mod path_guard;
mod serve;
