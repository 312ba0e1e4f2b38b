//! Integration suites, one module per feature.

mod dispatch;
mod path_guard;
mod sandbox;
