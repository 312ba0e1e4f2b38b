//! How a persistent bash on a PTY tells us where one command's output ends
//! and how it exited, without typing the command itself into the terminal.
//!
//! The session's rc file sets `PS1` to a marker holding a random nonce, the
//! number of the current command and how it ended (`PS2`, `PS0` and
//! `PROMPT_COMMAND` empty, echo off). Each command is written to a file of
//! the session directory, which lies in agent-reach's state directory: the
//! shell reads it, and no command of any door can write there (the shell
//! writes nothing of its own, so a session works under `read-only` too).
//! What is typed is one short line:
//!
//! ```text
//! __ar_n=N; __ar_st=; __ar_s=r; if BASH -n <CMD; then builtin source CMD; else __ar_s=s$?; fi; __ar_st="$? $__ar_s"
//! ```
//!
//! so the command runs at the top level of the shell (cwd, variables,
//! functions and jobs carry over; nothing runs when `bash -n` finds a syntax
//! error, as the original checks), any length and any quoting is fine (a
//! terminal line holds 4095 bytes), and the command never reads our marker
//! as its input. The prompt after the line is the marker with `N`, so a
//! prompt left over from an earlier command (an interrupt's) cannot end the
//! wait, and it carries how command `N` ended (`$?` and `r`, or `sCODE`
//! when `bash -n` refused it: its message is then the whole output). A ^C
//! aborts the whole line, so the prompt carries no status and the command
//! has no exit code.

use std::path::{Path, PathBuf};

use regex::Regex;

/// The `expect_string` a reply reports when the shell's prompt ended the
/// wait: the original's `PS1`, so clients that compare it keep working.
pub(crate) const PS1_EXPECT_STRING: &str = "SHELLPS1PREFIX";

/// The files and the marker of one session.
#[derive(Debug, Clone)]
pub(crate) struct ShellProtocol {
    nonce: String,
    any_prompt: Regex,
    dir: PathBuf,
    bash: PathBuf,
}

/// How one typed command ended, from the status file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// It ran; this is `$?` after it.
    Ran(i32),
    /// `bash -n` refused it with this exit code; nothing ran.
    Syntax(i32),
}

impl ShellProtocol {
    /// The protocol of a session whose files live in `dir`, checked with
    /// the bash at `bash`, marked with `nonce` (random, name-safe).
    pub(crate) fn new(dir: &Path, bash: &Path, nonce: &str) -> Result<Self, regex::Error> {
        let any = format!(
            "@@agent-reach-prompt-{}-[0-9]*-[^@\\n]*@@",
            regex::escape(nonce)
        );
        Ok(Self {
            any_prompt: Regex::new(&any)?,
            nonce: nonce.to_owned(),
            dir: dir.to_path_buf(),
            bash: bash.to_path_buf(),
        })
    }

    /// The prompt after command `n`, which ended as `status` (`"0 r"`, or
    /// empty when it was interrupted).
    #[cfg(test)]
    fn prompt(&self, n: u64, status: &str) -> String {
        format!("@@agent-reach-prompt-{}-{n}-{status}@@", self.nonce)
    }

    /// The prompt after command `n`, whatever its status: it ends that
    /// command's output.
    pub(crate) fn prompt_after(&self, n: u64) -> Regex {
        let pattern = format!(
            "@@agent-reach-prompt-{}-{n}-([^@\\n]*)@@",
            regex::escape(&self.nonce)
        );
        Regex::new(&pattern).unwrap_or_else(|_| self.any_prompt.clone())
    }

    /// How command `n` ended, from the prompt after it in `text`; `None`
    /// when it was interrupted (or that prompt is not there).
    pub(crate) fn status_in(&self, text: &str, n: u64) -> Option<Status> {
        let found = self.prompt_after(n).captures_iter(text).last()?;
        parse_status(found.get(1)?.as_str())
    }

    /// Any prompt of this shell.
    pub(crate) fn any_prompt(&self) -> &Regex {
        &self.any_prompt
    }

    /// The rc file (`bash --rcfile`): the system's and the user's bashrc as
    /// an interactive bash reads them, the startup sources, then our prompt.
    /// The terminal does no output processing (`-opost`): the kernel's
    /// per-byte `\n` → `\r\n` halves a flood's rate, and the cleaner reads a
    /// bare `\n` as the end of a line anyway.
    pub(crate) fn rc_file(&self, startup_source: &[String]) -> String {
        let mut rc = String::from(
            "[ -r /etc/bash.bashrc ] && builtin source /etc/bash.bashrc\n\
             [ -r \"$HOME/.bashrc\" ] && builtin source \"$HOME/.bashrc\"\n\
             stty -echo -opost 2>/dev/null\n",
        );
        for path in startup_source {
            rc.push_str("builtin source ");
            rc.push_str(&quote(path));
            rc.push('\n');
        }
        rc.push_str("__ar_n=0; ");
        rc.push_str(&self.reset_line());
        rc.push('\n');
        rc
    }

    /// Sets the prompt back to the marker (startup sources and tools such
    /// as conda change it).
    fn reset_line(&self) -> String {
        format!(
            "PS1='@@agent-reach-prompt-{}-${{__ar_n}}-${{__ar_st}}@@'; PS2=''; PS0=''; unset PROMPT_COMMAND",
            self.nonce
        )
    }

    /// The line typed after an interactive program quit: echo off again
    /// (programs restore the terminal as they found it, not always as we
    /// left it) and the prompt reset.
    pub(crate) fn restore_line(&self) -> String {
        format!("stty -echo -opost 2>/dev/null; {}\n", self.reset_line())
    }

    pub(crate) fn rc_path(&self) -> PathBuf {
        self.dir.join("rc")
    }

    pub(crate) fn command_path(&self) -> PathBuf {
        self.dir.join("command")
    }

    /// The line that runs command number `n` (already in its file).
    pub(crate) fn run_line(&self, n: u64) -> String {
        let command = quote_path(&self.command_path());
        format!(
            "__ar_n={n}; __ar_st=; __ar_s=r; if {} -n <{command}; then builtin source {command}; else __ar_s=s$?; fi; __ar_st=\"$? $__ar_s\"\n",
            quote_path(&self.bash),
        )
    }

    /// The text of a window without our prompts and, when the terminal
    /// echoed it (no `stty`), without our typed line.
    pub(crate) fn clean(&self, text: &str) -> String {
        let mut text = self.any_prompt.replace_all(text, "").into_owned();
        if text.starts_with("__ar_n=") && text.contains("; __ar_s=r; if ") {
            text = text
                .split_once('\n')
                .map(|(_, r)| r)
                .unwrap_or("")
                .to_owned();
        }
        text
    }
}

/// A prompt's status: `$?` and `r`, or `sCODE`; empty when interrupted.
fn parse_status(text: &str) -> Option<Status> {
    let mut parts = text.split_whitespace();
    let code: i32 = parts.next()?.parse().ok()?;
    let kind = parts.next()?;
    match kind.strip_prefix('s') {
        Some(syntax_code) => Some(Status::Syntax(syntax_code.parse().unwrap_or(2))),
        None => Some(Status::Ran(code)),
    }
}

/// A word in single quotes for bash.
pub(crate) fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

fn quote_path(path: &Path) -> String {
    quote(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn protocol() -> ShellProtocol {
        ShellProtocol::new(Path::new("/tmp/s d"), Path::new("/bin/bash"), "abc").unwrap()
    }

    #[test]
    fn words_are_single_quoted_for_bash() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn the_prompt_says_which_command_ended_and_how() {
        let p = protocol();
        let text = format!("out\n{}", p.prompt(7, "1 r"));
        assert_eq!(p.status_in(&text, 7), Some(Status::Ran(1)));
        assert_eq!(
            p.status_in(&p.prompt(7, "0 s2"), 7),
            Some(Status::Syntax(2))
        );
        assert_eq!(p.status_in(&p.prompt(7, "0 r"), 6), None);
        // Interrupted: the line was cut before the status was set.
        assert_eq!(p.status_in(&p.prompt(7, ""), 7), None);
        assert!(p.prompt_after(7).is_match(&p.prompt(7, "")));
        assert!(!p.prompt_after(7).is_match(&p.prompt(17, "0 r")));
    }

    #[test]
    fn the_run_line_checks_then_sources_the_command_file_and_writes_nothing() {
        let line = protocol().run_line(3);
        assert!(line.starts_with(
            "__ar_n=3; __ar_st=; __ar_s=r; if '/bin/bash' -n <'/tmp/s d/command'; then"
        ));
        assert!(line.contains("builtin source '/tmp/s d/command'"));
        assert!(!line.contains('>'), "the shell writes no file: {line}");
        assert!(line.len() < 4095);
    }

    #[test]
    fn cleaning_drops_our_prompt_and_an_echoed_line() {
        let p = protocol();
        let text = format!("hello\n{}", p.prompt(4, "0 r"));
        assert_eq!(p.clean(&text), "hello\n");
        assert!(p.any_prompt().is_match(&p.prompt(0, "")));
        let echoed = format!("{}hi\n{}", p.run_line(1), p.prompt(1, "0 r"));
        assert_eq!(p.clean(&echoed), "hi\n");
    }

    #[test]
    fn the_rc_file_sources_in_order_and_ends_with_the_prompt() {
        let rc = protocol().rc_file(&["/a b.sh".into()]);
        let bashrc = rc.find(".bashrc").unwrap();
        let source = rc.find("builtin source '/a b.sh'").unwrap();
        let prompt = rc
            .find("PS1='@@agent-reach-prompt-abc-${__ar_n}-${__ar_st}@@'")
            .unwrap();
        assert!(bashrc < source && source < prompt);
    }
}
