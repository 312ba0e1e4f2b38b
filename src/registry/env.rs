//! The environment a registry tool's child gets: the engine's cleared
//! environment and whitelist ([`crate::exec::child_env`]), plus the tool's
//! `env` names, the registry's `[env]` values and the tool's secrets (child
//! only; the registry's `[env]` cannot override a secret).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

/// Builds a child's complete environment.
pub(crate) fn tool_env(
    parent: &BTreeMap<OsString, OsString>,
    pass: &[String],
    set: &BTreeMap<String, String>,
    secrets: &[(String, Vec<u8>)],
    tty: bool,
    session_tag: &str,
) -> BTreeMap<OsString, OsString> {
    let explicit: Vec<(OsString, OsString)> = set
        .iter()
        .map(|(name, value)| (OsString::from(name), OsString::from(value)))
        .chain(
            secrets
                .iter()
                .map(|(name, value)| (OsString::from(name), OsStr::from_bytes(value).to_owned())),
        )
        .collect();
    crate::exec::child_env(parent, pass, &explicit, tty, session_tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whitelisted_passed_set_and_secret_names_reach_the_child() {
        let parent: BTreeMap<OsString, OsString> = [
            ("PATH", "/bin"),
            ("AWS_SECRET", "s3cr3t"),
            ("LC_ALL", "C"),
            ("GOPATH", "/go"),
        ]
        .into_iter()
        .map(|(a, b)| (a.into(), b.into()))
        .collect();
        let set = [("CI".to_owned(), "1".to_owned())].into();
        let env = tool_env(
            &parent,
            &["GOPATH".into()],
            &set,
            &[("TOKEN".into(), b"t".to_vec())],
            false,
            "s1",
        );
        let get = |n: &str| {
            env.get(OsStr::new(n))
                .map(|v| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("AWS_SECRET"), None);
        assert_eq!(get("GOPATH").as_deref(), Some("/go"));
        assert_eq!(get("LC_ALL").as_deref(), Some("C.UTF-8"), "UTF-8 children");
        assert_eq!(get("CI").as_deref(), Some("1"));
        assert_eq!(get("TOKEN").as_deref(), Some("t"));
        assert_eq!(get("TERM").as_deref(), Some("dumb"));
        assert_eq!(get("AGENT_REACH_SESSION").as_deref(), Some("s1"));
    }
}
