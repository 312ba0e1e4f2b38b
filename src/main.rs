//! The `agent-reach` executable. Everything lives in the library: `main` only
//! hands the process over to the argv[0] dispatch in [`agent_reach::dispatch`].
//!
//! `main` is the C entry point, not Rust's (`#![no_main]`): Rust's start-up
//! reads `/proc/self/maps` and sets up stack-overflow handlers on an
//! alternate stack, about 50 µs of every start, and a sandboxed command
//! starts us twice. What of it we need, [`agent_reach::dispatch::process_main`]
//! does itself.

// Under `cargo test` the test harness brings its own `main`.
#![cfg_attr(not(test), no_main)]

#[cfg(not(test))]
#[unsafe(no_mangle)]
extern "C" fn main(
    _argc: std::ffi::c_int,
    _argv: *const *const std::ffi::c_char,
) -> std::ffi::c_int {
    // std reads the arguments itself (glibc hands them to its init hook).
    agent_reach::dispatch::process_main()
}
