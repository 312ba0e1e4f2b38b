//! Integration suites, one module per feature.

mod apply_patch;
mod dispatch;
mod path_guard;
