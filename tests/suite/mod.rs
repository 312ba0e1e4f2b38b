//! Integration suites, one module per feature.

mod dispatch;
mod output;
mod path_guard;
