//! apply_patch: the Codex patch format, applied all-or-nothing.
//!
//! A patch goes through three steps: [`parse`] turns the text (heredoc
//! wrapper and all) into operations; [`Plan::build`] resolves and confines
//! every path, reads the files and applies every hunk in memory; [`commit`]
//! writes the result through temporary files and renames, rolling back if a
//! write fails. Nothing is written unless every hunk of every file applies.
//!
//! [`apply`] does all three and is what the MCP server calls; [`check`]
//! stops before writing. The `apply_patch` personality is [`command::main`].

pub(crate) mod command;
mod commit;
mod error;
mod file_meta;
mod hunks;
mod parser;
mod paths;
mod plan;
mod report;
mod seek;
mod text;
mod wrapper;

use std::path::Path;

pub(crate) use commit::commit;
pub(crate) use error::{ApplyPatchError, NoMatch};
pub use parser::{Chunk, Operation, parse};
pub(crate) use plan::Plan;
pub(crate) use report::ApplyReport;
pub use report::ChangeKind;

/// How a patch may be applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Allow paths outside the working directory (absolute, `..`, links).
    pub allow_outside: bool,
}

/// Parses `patch` and applies it under `cwd`, all or nothing.
pub fn apply(
    patch: &str,
    cwd: &Path,
    options: &ApplyOptions,
) -> Result<ApplyReport, ApplyPatchError> {
    let plan = Plan::build(&parse(patch)?, cwd, options)?;
    commit(&plan.writes)?;
    Ok(plan.report)
}

/// Applies an Update's chunks to a file's contents in memory: what
/// [`apply`] does to each updated file, without any path or disk involved.
pub fn apply_update(
    chunks: &[Chunk],
    contents: &[u8],
    path: &Path,
) -> Result<Vec<u8>, Box<NoMatch>> {
    let file = text::TextFile::parse(contents);
    let mut fuzzy = Vec::new();
    hunks::apply_chunks(&file, chunks, path, &mut fuzzy).map(|updated| updated.to_bytes())
}

/// Everything [`apply`] does except writing: the report it would give.
pub fn check(
    patch: &str,
    cwd: &Path,
    options: &ApplyOptions,
) -> Result<ApplyReport, ApplyPatchError> {
    Ok(Plan::build(&parse(patch)?, cwd, options)?.report)
}
