//! The `agent-reach` executable. Everything lives in the library: `main` only
//! hands the process over to the argv[0] dispatch in [`agent_reach::dispatch`].
//!
//! On Linux with glibc, `main` is the C entry point, not Rust's
//! (`#![no_main]`): Rust's start-up reads `/proc/self/maps` and sets up
//! stack-overflow handlers on an alternate stack, about 50 µs of every
//! start, and a sandboxed command starts us twice. What of it we need,
//! [`agent_reach::dispatch::process_main`] does itself. std still finds the
//! arguments there (glibc hands them to its init hook); elsewhere (musl, other
//! systems) it may not, so those keep Rust's `main`.

// Under `cargo test` the test harness brings its own `main`.
#![cfg_attr(all(not(test), target_os = "linux", target_env = "gnu"), no_main)]

#[cfg(all(not(test), target_os = "linux", target_env = "gnu"))]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    agent_reach::dispatch::process_main()
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn main() -> std::process::ExitCode {
    let code = agent_reach::dispatch::process_main();
    std::process::ExitCode::from(u8::try_from(code).unwrap_or(u8::MAX))
}
