//! Integration suites, one module per feature.

mod dispatch;
mod exec;
mod path_guard;
