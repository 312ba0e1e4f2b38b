//! agent-reach: the execution layer for AI coding agents.
//!
//! One binary, several personalities chosen by the name it was started under
//! ([`dispatch`]). Each personality is a library function that returns an
//! exit code; `main.rs` only calls [`dispatch::process_main`].

#![warn(unreachable_pub)]
// Windows builds a subset: helpers only the Linux personalities use are
// unused there.
#![cfg_attr(windows, allow(dead_code))]

// The platform seam: the engine's Linux backend (cgroups, clone3, pidfd,
// /proc, PTY), the session machinery and the doors built on them are
// `cfg(unix)` here, one line each; the sandbox (Landlock, seccomp) and the
// registry's cache, child environment and metrics are `cfg(unix)` inside
// their modules (Windows parses the policy names and loads registries).
// Windows gets its backend and personalities in [`platform_windows`].

pub mod apply_patch;
#[cfg(unix)]
pub(crate) mod broker;
#[cfg(unix)]
pub(crate) mod cli;
pub(crate) mod context;
pub mod dispatch;
#[cfg(unix)]
pub mod doors;
/// Windows' MCP server shares the MCP door's portable parts: asking a
/// person to approve, a normalized result as a tool result, and the
/// streamable HTTP endpoint behind the gate.
#[cfg(windows)]
pub(crate) mod doors {
    pub(crate) mod mcp {
        pub(crate) mod portable;
        pub(crate) mod yields;
    }
    pub(crate) mod mcp_http {
        mod json_answers;
        pub(crate) mod router;
        pub(crate) mod sessions;
    }
}
pub mod exec;
pub(crate) mod exit_code;
pub(crate) mod gate;
#[cfg(unix)]
pub(crate) mod kernel_file;
pub(crate) mod logging;
pub mod output;
#[cfg(unix)]
pub mod path_guard;
pub(crate) mod personality;
#[cfg(unix)]
pub(crate) mod plan;
/// Windows plans registry tools with the shared part of the plan stage:
/// the request, the policy, the decisions and the tool's resolution; the
/// engine spec, sandbox, cache and scheduling are Linux's.
#[cfg(windows)]
pub(crate) mod plan {
    pub(crate) mod caps;
    mod decision;
    pub(crate) mod files;
    pub(crate) mod policy;
    pub(crate) mod registry_args;
    pub(crate) mod request;
    pub(crate) mod resolve;

    pub(crate) use crate::output::DEFAULT_MAX_OUTPUT_TOKENS;
    pub(crate) use decision::{ApprovalAsk, Door, Rejection};
    pub(crate) use request::Request;
}
#[cfg(windows)]
pub(crate) mod platform_windows;
pub(crate) mod registry;
pub mod result;
pub mod sandbox;
#[cfg(unix)]
pub(crate) mod scheduler;
/// Windows has no scheduler yet: a request's priority parses there.
#[cfg(windows)]
pub(crate) mod scheduler {
    mod priority;

    pub(crate) use priority::Priority;
}
#[cfg(unix)]
#[doc(hidden)]
pub use scheduler::SlotBench;
#[cfg(unix)]
pub mod serve;
/// Windows parses `--listen` and loads the listeners' token as Linux does.
#[cfg(windows)]
pub(crate) mod serve {
    pub(crate) mod listen {
        pub(crate) mod addr;
        pub(crate) mod args;
        pub(crate) mod auth;

        pub(crate) use addr::{ListenSpec, Protocol};
    }
}
pub(crate) mod stdio;
pub(crate) mod sync;
#[cfg(unix)]
pub(crate) mod workspace;
