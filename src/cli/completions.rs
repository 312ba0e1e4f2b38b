//! `agent-reach completions SHELL`: a completion script for the shell,
//! generated from the same clap definitions that parse the command line, so
//! it can never fall behind a flag.
//!
//! Install it where the shell looks, e.g. for bash
//! `agent-reach completions bash > ~/.local/share/bash-completion/completions/agent-reach`.

use clap::CommandFactory;

/// `completions` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// The script for `shell`, for the command named `agent-reach`.
pub(crate) fn script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut command = super::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "agent-reach", &mut out);
    out
}

/// `agent-reach completions SHELL`: prints the script.
pub(crate) fn main(args: &CompletionsArgs) -> i32 {
    crate::stdio::write_or_failure(&script(args.shell))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
            clap_complete::Shell::Elvish,
            clap_complete::Shell::PowerShell,
        ] {
            let text = String::from_utf8(script(shell)).unwrap();
            assert!(text.contains("agent-reach"), "{shell}: {text}");
            for sub in ["run", "exec", "serve", "doctor", "completions"] {
                assert!(text.contains(sub), "{shell} lacks {sub}");
            }
        }
    }
}
