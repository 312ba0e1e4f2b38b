//! Integration suites, one module per feature.

mod apply_patch;
#[cfg(target_os = "linux")]
mod broker_work;
#[cfg(target_os = "linux")]
pub(crate) mod codex_exec;
#[cfg(target_os = "linux")]
mod confinement;
#[cfg(target_os = "linux")]
mod daytona;
mod dispatch;
mod distribution;
mod docs;
#[cfg(target_os = "linux")]
mod envd;
mod exec;
mod exec_api;
pub mod exec_json;
mod exit_codes;
mod file_policy;
mod gate;
#[cfg(target_os = "linux")]
mod hidden_secrets;
pub(crate) mod highlights;
mod limits;
pub(crate) mod listeners;
#[cfg(target_os = "linux")]
mod matrix;
mod mcp_http;
mod metrics;
mod operator_knobs;
mod output;
mod path_guard;
mod policy;
mod python_runtime;
mod registry;
#[cfg(unix)]
mod reload;
#[cfg(target_os = "linux")]
mod sandbox;
#[cfg(target_os = "linux")]
mod sandboxd_grpc;
mod sandboxd_rest;
mod scheduler;
mod serve;
mod swerex;
