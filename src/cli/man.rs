//! `agent-reach man [--out-dir DIR]` (hidden): the man pages, rendered from
//! the clap definitions by clap_mangen, like ripgrep's `rg --generate man`.
//!
//! Without `--out-dir` it prints `agent-reach(1)`; with it, it writes
//! `agent-reach.1` and one `agent-reach-SUBCOMMAND.1` per subcommand there.
//! The release script (`scripts/release.sh`) ships the pages it writes. A
//! command's `after_help` (the exit-status tables) becomes an `EXIT STATUS`
//! section set as written, not reflowed.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::exit_code;

/// `man` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct ManArgs {
    /// Write every page (agent-reach.1 and one per subcommand) into DIR.
    #[arg(long, value_name = "DIR")]
    pub(crate) out_dir: Option<PathBuf>,
}

/// Why the pages could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ManError {
    #[error("cannot write the man page {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot render the man page of {name}: {source}")]
    Render {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// The whole command tree, built (subcommands know their parents' names),
/// without clap's `help` subcommands.
fn command() -> clap::Command {
    let mut command = super::Cli::command().disable_help_subcommand(true);
    command.build();
    command
}

/// One command's page as roff.
fn render(command: &clap::Command) -> Result<Vec<u8>, ManError> {
    let man = clap_mangen::Man::new(command.clone());
    let mut out = Vec::new();
    let rendered = (|| {
        man.render_title(&mut out)?;
        man.render_name_section(&mut out)?;
        man.render_synopsis_section(&mut out)?;
        man.render_description_section(&mut out)?;
        if command.get_arguments().any(|arg| !arg.is_hide_set()) {
            man.render_options_section(&mut out)?;
        }
        if command.get_subcommands().any(|sub| !sub.is_hide_set()) {
            man.render_subcommands_section(&mut out)?;
        }
        if let Some(after) = command.get_after_help() {
            exit_status_section(&mut out, &after.to_string())?;
        }
        if command.get_version().is_some() {
            man.render_version_section(&mut out)?;
        }
        Ok(())
    })();
    rendered.map_err(|source| ManError::Render {
        name: command.get_name().to_owned(),
        source,
    })?;
    Ok(out)
}

/// `text` as a section kept as written (`.nf`), its first line the title.
fn exit_status_section(out: &mut Vec<u8>, text: &str) -> std::io::Result<()> {
    writeln!(out, ".SH \"EXIT STATUS\"\n.nf")?;
    for line in text.lines().skip_while(|l| l.trim() == "Exit status:") {
        // Escape roff's backslash and a leading control character.
        let line = line.replace('\\', "\\e");
        let line = if line.starts_with(['.', '\'']) {
            format!("\\&{line}")
        } else {
            line
        };
        writeln!(out, "{line}")?;
    }
    writeln!(out, ".fi")
}

/// The page `agent-reach(1)` as roff.
pub(crate) fn page() -> Result<Vec<u8>, ManError> {
    render(&command())
}

/// Writes the page of `command` and of each of its visible subcommands.
fn write_tree(command: &clap::Command, dir: &Path) -> Result<(), ManError> {
    let path = dir.join(format!(
        "{}.1",
        command.get_display_name().unwrap_or(command.get_name())
    ));
    std::fs::write(&path, render(command)?).map_err(|source| ManError::Write { path, source })?;
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        write_tree(sub, dir)?;
    }
    Ok(())
}

/// `agent-reach man`.
pub(crate) fn main(args: &ManArgs) -> i32 {
    let done = match &args.out_dir {
        Some(dir) => std::fs::create_dir_all(dir)
            .map_err(|source| ManError::Write {
                path: dir.clone(),
                source,
            })
            .and_then(|()| write_tree(&command(), dir))
            .map(|()| exit_code::SUCCESS),
        None => page().map(|page| crate::stdio::write_or_failure(&page)),
    };
    match done {
        Ok(code) => code,
        Err(err @ ManError::Write { .. }) => {
            eprintln!("agent-reach: {err}");
            exit_code::USAGE
        }
        Err(err) => {
            eprintln!("agent-reach: {err}");
            exit_code::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_is_roff_naming_every_subcommand_and_the_exit_status() {
        let text = String::from_utf8(page().unwrap()).unwrap();
        assert!(text.contains(".TH agent-reach 1"), "{text}");
        assert!(text.contains(".SH \"EXIT STATUS\""), "{text}");
        for sub in ["run", "exec", "serve", "doctor", "completions"] {
            assert!(text.contains(sub), "the page lacks {sub}");
        }
        assert!(
            !text.contains("agent\\-reach\\-man"),
            "the hidden man page is listed"
        );
    }

    #[test]
    fn out_dir_gets_a_page_per_subcommand_and_none_for_help() {
        let dir = tempfile::tempdir().unwrap();
        let man1 = dir.path().join("man1");
        let code = main(&ManArgs {
            out_dir: Some(man1.clone()),
        });
        assert_eq!(code, exit_code::SUCCESS);
        for page in [
            "agent-reach.1",
            "agent-reach-run.1",
            "agent-reach-tools-list.1",
        ] {
            assert!(man1.join(page).is_file(), "{page}");
        }
        let run = std::fs::read_to_string(man1.join("agent-reach-run.1")).unwrap();
        assert!(
            run.contains("124"),
            "run's page lacks its exit status: {run}"
        );
        let names: Vec<_> = std::fs::read_dir(&man1)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.contains("help") || n.contains("-man")),
            "{names:?}"
        );
    }
}
