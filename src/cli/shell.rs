//! `agent-reach shell [-- CMD...]`: a person's shell with the session PATH
//! entry first, so `apply_patch` and friends are there with nothing installed.
//!
//! Unlike commands run for an agent, this is an interactive shell: it keeps
//! the caller's terminal, environment and working directory, and what it
//! starts in the background is the person's business. While it runs we block
//! the job-control signals a terminal sends to the whole foreground group
//! (the shell gets them itself) and forward SIGTERM/SIGHUP sent to us, so
//! that we live to remove the PATH directory after the shell exits.
//!
//! Exit codes: the shell's own (128+N when a signal N ended it), 126/127
//! when it cannot be run or is not found (as `env` says), 1 when agent-reach
//! itself failed (the common convention: `shell` is not a wrapper of the
//! contract's 125 kind), 2 for bad flags.

use std::ffi::OsString;
use std::process::Command;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill};
use nix::unistd::Pid;

use crate::context::ProcessContext;
use crate::exit_code;
use crate::path_guard::ProcessSession;

/// `shell` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ShellArgs {
    /// The command to run instead of `$SHELL`.
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// Blocks a set of signals for its lifetime and restores the old mask on drop.
pub(crate) struct SignalMaskGuard {
    old: SigSet,
}

impl SignalMaskGuard {
    /// Blocks `set` for the calling thread.
    pub(crate) fn block(set: &SigSet) -> nix::Result<Self> {
        let mut old = SigSet::empty();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(set), Some(&mut old))?;
        Ok(Self { old })
    }
}

impl Drop for SignalMaskGuard {
    fn drop(&mut self) {
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&self.old), None);
    }
}

/// Runs the shell and returns its exit code (128+N when killed by signal N).
pub(crate) fn main(args: ShellArgs, mut ctx: ProcessContext) -> i32 {
    let session = match ProcessSession::start(&mut ctx) {
        Ok(session) => session,
        Err(err) => {
            eprintln!("agent-reach shell: {err}");
            return exit_code::FAILURE;
        }
    };
    let argv = if args.command.is_empty() {
        vec![default_shell(&ctx)]
    } else {
        args.command
    };
    let code = run_in_foreground(&argv);
    drop(session);
    code
}

fn default_shell(ctx: &ProcessContext) -> OsString {
    ctx.var("SHELL")
        .filter(|s| !s.is_empty())
        .map(OsString::from)
        .unwrap_or_else(|| OsString::from("/bin/sh"))
}

fn run_in_foreground(argv: &[OsString]) -> i32 {
    let mut waited = SigSet::empty();
    for signal in [
        Signal::SIGCHLD,
        Signal::SIGINT,
        Signal::SIGQUIT,
        Signal::SIGTERM,
        Signal::SIGHUP,
    ] {
        waited.add(signal);
    }
    let mask = match SignalMaskGuard::block(&waited) {
        Ok(mask) => mask,
        Err(err) => {
            eprintln!("agent-reach shell: cannot block signals: {err}");
            return exit_code::FAILURE;
        }
    };
    // std resets the signal mask in the child before exec, so the shell
    // starts with every signal deliverable.
    let mut child = match Command::new(&argv[0]).args(&argv[1..]).spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!(
                "agent-reach shell: cannot run {}: {err}",
                argv[0].to_string_lossy()
            );
            return if err.kind() == std::io::ErrorKind::NotFound {
                exit_code::NOT_FOUND
            } else {
                exit_code::CANNOT_EXECUTE
            };
        }
    };
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(err) => break Err(err),
        }
        // SIGINT/SIGQUIT from the terminal already reached the shell, which
        // shares our process group; SIGCHLD just loops back to try_wait.
        if let Ok(signal @ (Signal::SIGTERM | Signal::SIGHUP)) = waited.wait() {
            let _ = kill(pid, signal);
        }
    };
    drop(mask);
    match status {
        Ok(status) => status_code(status),
        Err(err) => {
            eprintln!(
                "agent-reach shell: waiting for {}: {err}",
                argv[0].to_string_lossy()
            );
            exit_code::FAILURE
        }
    }
}

fn status_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => exit_code::for_signal(signal),
        (None, None) => exit_code::FAILURE,
    }
}
