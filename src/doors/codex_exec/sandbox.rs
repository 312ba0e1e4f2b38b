//! What sandbox Codex asks for, read into ours. Codex sends its intent as a
//! `FileSystemSandboxContext`: a permission profile (`permissions`: its
//! `type`, and a `file_system` of entries each with an `access`), the cwd,
//! the Windows settings. A profile whose type (or whose `file_system`'s)
//! turns the sandbox off (`disabled`, `unrestricted`, `external`) asks for
//! nothing; one granting write access anywhere asks for `workspace-write`;
//! any other for `read-only`. The operator's policy then only narrows it:
//! the command runs under the narrower of Codex's ask and the operator's
//! sandbox, never a wider one.

use serde_json::Value;

use crate::sandbox::Policy;

/// Profile types that ask for no sandbox.
const NO_SANDBOX: &[&str] = &["disabled", "unrestricted", "external", "dangerfullaccess"];
/// Access words that ask for writes.
const WRITES: &[&str] = &["write", "readwrite", "workspacewrite"];

/// The sandbox Codex's `sandbox` field asks for; `None`: no sandbox asked.
pub(crate) fn asked(context: Option<&Value>) -> Option<Policy> {
    let context = context.filter(|c| !c.is_null())?;
    let permissions = context.get("permissions").unwrap_or(context);
    let file_system = permissions
        .get("file_system")
        .or_else(|| permissions.get("fileSystem"));
    let off = |v: Option<&Value>| {
        v.and_then(|v| v.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| NO_SANDBOX.contains(&norm(t).as_str()))
    };
    if off(Some(permissions)) || off(file_system) {
        return None;
    }
    if words_of(file_system.unwrap_or(permissions))
        .iter()
        .any(|w| WRITES.contains(&w.as_str()))
    {
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

fn norm(s: &str) -> String {
    s.chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Every string value of `value` but those naming paths, normalized.
fn words_of(value: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::String(s) => out.push(norm(s)),
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(
                map.iter()
                    .filter(|(k, _)| *k != "path" && *k != "cwd")
                    .map(|(_, v)| v),
            ),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What Codex 0.171.0 sent with `codex exec -s read-only`.
    fn read_only() -> Value {
        json!({"cwd": "file:///w", "permissions": {"file_system": {"entries": [
            {"access": "read", "path": {"type": "special", "value": {"kind": "root"}}}],
            "type": "restricted"}, "network": "restricted", "type": "managed"},
            "useLegacyLandlock": false, "windowsSandboxLevel": "disabled",
            "windowsSandboxProxySettingsMode": "reconcile", "workspaceRoots": ["file:///w"]})
    }

    #[test]
    fn no_context_asks_for_nothing_and_a_disabled_profile_neither() {
        assert_eq!(asked(None), None);
        assert_eq!(asked(Some(&Value::Null)), None);
        let off = json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled"});
        assert_eq!(asked(Some(&off)), None);
        let open = json!({"permissions": {"type": "managed",
            "file_system": {"type": "unrestricted"}, "network": "enabled"}});
        assert_eq!(asked(Some(&open)), None);
    }

    #[test]
    fn codex_s_read_only_profile_asks_for_read_only_whatever_its_windows_level_says() {
        assert_eq!(asked(Some(&read_only())), Some(Policy::ReadOnly));
    }

    #[test]
    fn codex_s_workspace_write_profile_asks_for_workspace_write() {
        let mut write = read_only();
        write["permissions"]["file_system"]["entries"]
            .as_array_mut()
            .unwrap()
            .push(json!({"access": "write", "path": {"type": "special", "value": {"kind": "project_roots"}}}));
        assert_eq!(asked(Some(&write)), Some(Policy::WorkspaceWrite));
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
