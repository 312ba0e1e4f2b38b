//! What sandbox Codex asks for, read into ours. Codex sends its intent as a
//! `FileSystemSandboxContext` (a permission profile, the cwd, Windows
//! levels): a profile that turns the sandbox off asks for nothing, one with
//! no write access anywhere asks for `read-only`, any other for
//! `workspace-write`. The operator's policy then only narrows it: the
//! command runs under the narrower of Codex's ask and the operator's
//! sandbox, never a wider one.

use serde_json::Value;

use crate::sandbox::Policy;

/// The sandbox Codex's `sandbox` field asks for; `None`: no sandbox asked.
pub(crate) fn asked(context: Option<&Value>) -> Option<Policy> {
    let context = context.filter(|c| !c.is_null())?;
    let words = words_of(context);
    let says = |w: &str| words.iter().any(|x| x == w);
    if says("disabled") || says("dangerfullaccess") || says("unrestricted") {
        return None;
    }
    if says("write") || says("workspacewrite") || says("readwrite") {
        return Some(Policy::WorkspaceWrite);
    }
    Some(Policy::ReadOnly)
}

/// The sandbox a command runs under: the narrower of Codex's ask and the
/// operator's (`None` on either side imposes nothing).
pub(crate) fn narrowest(asked: Option<Policy>, operator: Option<Policy>) -> Option<Policy> {
    match (asked, operator) {
        (Some(a), Some(o)) => Some(a.min(o)),
        (a, o) => a.or(o),
    }
}

/// Every string value and key of `value`, lower-cased without `-` and `_`.
fn words_of(value: &Value) -> Vec<String> {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| *c != '-' && *c != '_')
            .flat_map(char::to_lowercase)
            .collect::<String>()
    };
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(norm(s)),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => {
                for (k, v) in map {
                    // Paths say nothing about the profile.
                    if k == "cwd" || k.ends_with("Dir") || k.ends_with("Roots") {
                        continue;
                    }
                    out.push(norm(k));
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_context_asks_for_nothing_and_a_disabled_profile_neither() {
        assert_eq!(asked(None), None);
        assert_eq!(asked(Some(&Value::Null)), None);
        let off = json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"});
        assert_eq!(asked(Some(&off)), None);
    }

    #[test]
    fn a_profile_with_write_access_asks_for_workspace_write_and_one_without_for_read_only() {
        let write = json!({"permissions": {"type": "managed", "fileSystem": {"entries": [
            {"path": {"type": "special", "value": "cwd"}, "access": "write"}]}},
            "cwd": "file:///w", "windowsSandboxLevel": "restrictedToken"});
        assert_eq!(asked(Some(&write)), Some(Policy::WorkspaceWrite));
        let read = json!({"permissions": {"type": "managed", "fileSystem": {"entries": [
            {"path": {"type": "special", "value": "root"}, "access": "read"}]}},
            "cwd": "file:///write-here"});
        assert_eq!(asked(Some(&read)), Some(Policy::ReadOnly));
    }

    #[test]
    fn the_operator_only_narrows_what_codex_asks() {
        use Policy::*;
        assert_eq!(
            narrowest(Some(WorkspaceWrite), Some(ReadOnly)),
            Some(ReadOnly)
        );
        assert_eq!(
            narrowest(Some(ReadOnly), Some(DangerFullAccess)),
            Some(ReadOnly)
        );
        assert_eq!(narrowest(None, Some(WorkspaceWrite)), Some(WorkspaceWrite));
        assert_eq!(narrowest(Some(ReadOnly), None), Some(ReadOnly));
        assert_eq!(narrowest(None, None), None);
    }
}
