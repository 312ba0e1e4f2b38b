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
//! The walk is the workspace's ([`Workspace::walk`]): no link to a
//! directory followed, nothing the fence seals, at most `[limits]
//! max_walk_entries` entries (past that, an error naming the cap); `find`
//! answers at most [`MAX_FIND_BYTES`] of matching lines.

use std::io::Read;

use axum::extract::{Query, State};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use super::files::permit;
use super::{ApiError, DaytonaState};
use crate::broker::files::surface::upload::blocking;
use crate::broker::files::surface::{EntryKind, Workspace, WorkspaceError};
use crate::gate::Caller;
use crate::plan::FileOp;

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
/// its kind: directories before what they hold; links listed, never
/// followed; at most `cap` entries, or an error naming the cap.
fn walk(ws: &Workspace, rel: &str, cap: usize) -> Result<Vec<(String, EntryKind)>, ApiError> {
    let top = ws.resolve(rel)?;
    let walk = match ws.walk(rel, u32::MAX, cap) {
        Ok(walk) => walk,
        Err(WorkspaceError::NotFound { .. }) => {
            // A file named directly.
            ws.open_file(&top)?;
            return Ok(vec![(rel.to_owned(), EntryKind::File)]);
        }
        Err(e) => return Err(e.into()),
    };
    if walk.truncated {
        return Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            format!(
                "{rel:?} holds more than {cap} entries (the operator's [limits] max_walk_entries): search a narrower directory"
            ),
        ));
    }
    Ok(std::iter::once((rel.to_owned(), EntryKind::Directory))
        .chain(walk.entries.into_iter().map(|w| (w.rel, w.entry.kind)))
        .collect())
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

/// The most bytes of matching lines one `find` answers with; the rest is
/// cut, and the reply says so in [`CUT_HEADER`].
pub(crate) const MAX_FIND_BYTES: usize = 1024 * 1024;
/// The header of a `find` reply whose matches were cut at
/// [`MAX_FIND_BYTES`] (Daytona's reply is a bare array: no field to say it).
pub(crate) const CUT_HEADER: &str = "x-agent-reach-truncated";

/// `GET /files/find?path=&pattern=`.
pub(crate) async fn find(
    State(state): State<DaytonaState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<PatternQuery>,
) -> Result<(axum::http::HeaderMap, Json<Vec<Value>>), ApiError> {
    let (path, pattern) = both(query)?;
    let (ws, rel) = permit(&state, &caller, FileOp::Read, &path)?;
    let root = ws.root().to_path_buf();
    let cap = state.broker.limits().max_walk_entries;
    let (found, cut) = blocking(move || {
        let files = match walk(&ws, &rel, cap) {
            Ok(files) => files,
            Err(e) => return Ok(Err(e)),
        };
        let mut matches = Vec::new();
        let mut bytes = 0usize;
        for (file, kind) in files {
            if kind != EntryKind::File {
                continue;
            }
            let Ok(Some(text)) = text_of(&ws, &file) else {
                continue;
            };
            let shown = crate::doors::envd::paths::shown(&root, &file);
            for (n, line) in text.lines().enumerate() {
                if !line.contains(&pattern) {
                    continue;
                }
                bytes += line.len() + shown.len();
                if bytes > MAX_FIND_BYTES {
                    return Ok(Ok((matches, true)));
                }
                matches.push(json!({"file": shown, "line": n + 1, "content": line}));
            }
        }
        Ok(Ok((matches, false)))
    })
    .await??;
    let mut headers = axum::http::HeaderMap::new();
    if cut {
        headers.insert(
            CUT_HEADER,
            axum::http::HeaderValue::from_static("matches past 1 MiB were left out"),
        );
    }
    Ok((headers, Json(found)))
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
    let cap = state.broker.limits().max_walk_entries;
    let files = blocking(move || {
        Ok(walk(&ws, &rel, cap).map(|found| {
            found
                .into_iter()
                .filter(|(p, _)| {
                    let name = p.rsplit('/').next().unwrap_or(p);
                    glob_match(&pattern, name)
                })
                .map(|(p, _)| crate::doors::envd::paths::shown(&root, &p))
                .collect::<Vec<_>>()
        }))
    })
    .await??;
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
