//! The toolbox's searching file routes, over the workspace like every file
//! route (planned by the broker first, confined beneath `--root`):
//!
//! - `GET /files/find?path=&pattern=`: the lines holding `pattern` (plain
//!   text) in the text files beneath `path`, `[{file, line, content}]`;
//!   a file whose first 512 bytes hold a NUL is binary and skipped, as in
//!   Daytona's daemon;
//! - `GET /files/search?path=&pattern=`: the paths beneath `path` whose
//!   name matches the glob `pattern`, `{files: [...]}`;
//! - `POST /files/replace {files, pattern, newValue}`: every `pattern` in
//!   each file replaced, `[{file, success, error?}]`.
//!
//! The walk follows no link out of the root (the workspace resolves each
//! step beneath it) and stops at [`MAX_WALK_ENTRIES`] entries.

use std::io::Read;

use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::files::{join, permit};
use super::{ApiError, DaytonaState};
use crate::gate::Caller;
use crate::plan::FileOp;
use crate::workspace::upload::blocking;
use crate::workspace::{EntryKind, Workspace, WorkspaceError};

/// The most entries one walk visits.
pub(crate) const MAX_WALK_ENTRIES: usize = 100_000;
/// The bytes looked at for a NUL to call a file binary (Daytona's).
const BINARY_SNIFF: usize = 512;
/// The largest file `find` and `replace` read.
const MAX_TEXT_FILE: u64 = 64 * 1024 * 1024;

/// The query of `find` and `search`.
#[derive(Debug, Deserialize)]
pub(crate) struct PatternQuery {
    path: Option<String>,
    pattern: Option<String>,
}

fn both(query: PatternQuery) -> Result<(String, String), ApiError> {
    match (query.path, query.pattern) {
        (Some(p), Some(q)) if !p.is_empty() && !q.is_empty() => Ok((p, q)),
        _ => Err(ApiError::bad_request("path and pattern are required")),
    }
}

/// Every entry beneath `rel` (itself first), relative to the root, with
/// its kind: directories before what they hold.
fn walk(ws: &Workspace, rel: &str) -> Result<Vec<(String, EntryKind)>, WorkspaceError> {
    let top = ws.resolve(rel)?;
    let first = match ws.list(&top) {
        Ok(entries) => entries,
        Err(WorkspaceError::NotFound { .. }) => {
            // A file named directly.
            ws.open_file(&top)?;
            return Ok(vec![(rel.to_owned(), EntryKind::File)]);
        }
        Err(e) => return Err(e),
    };
    let mut out = vec![(rel.to_owned(), EntryKind::Directory)];
    // The top's listing is the one just read; each directory below is
    // listed when its turn comes.
    let mut listed = Some((rel.to_owned(), first));
    let mut pending: Vec<String> = Vec::new();
    loop {
        let (dir, entries) = match listed.take() {
            Some(listed) => listed,
            None => {
                let Some(dir) = pending.pop() else { break };
                let Ok(entries) = ws.resolve(&dir).and_then(|t| ws.list(&t)) else {
                    continue;
                };
                (dir, entries)
            }
        };
        for entry in entries {
            if out.len() >= MAX_WALK_ENTRIES {
                return Ok(out);
            }
            let child = join(&dir, &entry.name);
            if entry.kind == EntryKind::Directory {
                pending.push(child.clone());
            }
            out.push((child, entry.kind));
        }
    }
    Ok(out)
}

/// The text of `rel`, or `None` for a binary or too large file.
fn text_of(ws: &Workspace, rel: &str) -> Result<Option<String>, WorkspaceError> {
    let (mut file, size, _) = ws.open_file(&ws.resolve(rel)?)?;
    if size > MAX_TEXT_FILE {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|source| WorkspaceError::Io {
            path: rel.to_owned(),
            source,
        })?;
    if bytes.iter().take(BINARY_SNIFF).any(|b| *b == 0) {
        return Ok(None);
    }
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

/// `GET /files/find?path=&pattern=`.
pub(crate) async fn find(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PatternQuery>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let (path, pattern) = both(query)?;
    let (ws, rel) = permit(&state, &caller, FileOp::Read, &path)?;
    let root = ws.root().to_path_buf();
    let found = blocking(move || {
        let mut matches = Vec::new();
        for (file, kind) in walk(&ws, &rel)? {
            if kind != EntryKind::File {
                continue;
            }
            let Ok(Some(text)) = text_of(&ws, &file) else {
                continue;
            };
            for (n, line) in text.lines().enumerate() {
                if line.contains(&pattern) {
                    matches.push(json!({
                        "file": crate::doors::envd::paths::shown(&root, &file),
                        "line": n + 1,
                        "content": line,
                    }));
                }
            }
        }
        Ok(matches)
    })
    .await?;
    Ok(Json(found))
}

/// Whether `name` matches the glob `pattern` (`*`, `?`, `[...]`), as Go's
/// `filepath.Match` on one name.
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut regex = String::from("^");
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => regex.push_str("[^/]*"),
            '?' => regex.push_str("[^/]"),
            '[' => {
                regex.push('[');
                if chars.peek() == Some(&'^') || chars.peek() == Some(&'!') {
                    chars.next();
                    regex.push('^');
                }
                for c in chars.by_ref() {
                    if c == ']' {
                        break;
                    }
                    if c == '\\' || c == '[' {
                        regex.push('\\');
                    }
                    regex.push(c);
                }
                regex.push(']');
            }
            '\\' => {
                if let Some(next) = chars.next() {
                    regex.push_str(&regex::escape(&next.to_string()));
                }
            }
            other => regex.push_str(&regex::escape(&other.to_string())),
        }
    }
    regex.push('$');
    regex::Regex::new(&regex).is_ok_and(|r| r.is_match(name))
}

/// `GET /files/search?path=&pattern=`.
pub(crate) async fn search(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PatternQuery>,
) -> Result<Json<Value>, ApiError> {
    let (path, pattern) = both(query)?;
    let (ws, rel) = permit(&state, &caller, FileOp::List, &path)?;
    let root = ws.root().to_path_buf();
    let files = blocking(move || {
        Ok(walk(&ws, &rel)?
            .into_iter()
            .filter(|(p, _)| {
                let name = p.rsplit('/').next().unwrap_or(p);
                glob_match(&pattern, name)
            })
            .map(|(p, _)| crate::doors::envd::paths::shown(&root, &p))
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(Json(json!({"files": files})))
}

/// The body of `files/replace`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReplaceRequest {
    files: Vec<String>,
    pattern: String,
    #[serde(default)]
    new_value: Option<String>,
}

/// `POST /files/replace`.
pub(crate) async fn replace(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<ReplaceRequest>,
) -> Result<Json<Vec<Value>>, ApiError> {
    let new_value = body.new_value.unwrap_or_default();
    let mut results = Vec::with_capacity(body.files.len());
    for path in body.files {
        let outcome = match permit(&state, &caller, FileOp::Write, &path) {
            Ok((ws, rel)) => {
                let (pattern, new_value) = (body.pattern.clone(), new_value.clone());
                blocking(move || replace_in(&ws, &rel, &pattern, &new_value))
                    .await
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.message),
        };
        results.push(match outcome {
            Ok(()) => json!({"file": path, "success": true}),
            Err(error) => json!({"file": path, "success": false, "error": error}),
        });
    }
    Ok(Json(results))
}

fn replace_in(
    ws: &Workspace,
    rel: &str,
    pattern: &str,
    new_value: &str,
) -> Result<(), WorkspaceError> {
    let Some(text) = text_of(ws, rel)? else {
        return Err(WorkspaceError::Invalid {
            path: rel.to_owned(),
            why: "a binary or too large file".to_owned(),
        });
    };
    let target = ws.resolve(rel)?;
    let mode = ws.stat(&target)?.mode & 0o7777;
    let mut pending = ws.begin_write(&target, mode)?;
    let mut file = pending.take_file().ok_or_else(|| WorkspaceError::Invalid {
        path: rel.to_owned(),
        why: "no file to write".to_owned(),
    })?;
    std::io::Write::write_all(&mut file, text.replace(pattern, new_value).as_bytes()).map_err(
        |source| WorkspaceError::Io {
            path: rel.to_owned(),
            source,
        },
    )?;
    drop(file);
    pending.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_names_as_go_matches_them() {
        assert!(glob_match("*.py", "main.py"));
        assert!(!glob_match("*.py", "main.pyc"));
        assert!(glob_match("a?c", "abc"));
        assert!(glob_match("[ab]*", "beta"));
        assert!(!glob_match("[!ab]*", "beta"));
        assert!(glob_match("a.b", "a.b"));
        assert!(!glob_match("a.b", "axb"));
    }
}
