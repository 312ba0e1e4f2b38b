//! The environment a registry tool's child gets: cleared, then a whitelist
//! from the server's environment, the tool's `env` names, the registry's
//! `[env]` values, and the tool's secrets (child only).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// Names copied from the server's environment for every child.
const WHITELIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "LANG",
    "AGENT_REACH_HOME",
    "AGENT_REACH_DEPTH",
];

/// Builds a child's complete environment.
pub fn child_env(
    parent: &BTreeMap<OsString, OsString>,
    pass: &[String],
    set: &BTreeMap<String, String>,
    secrets: &[(String, Vec<u8>)],
    tty: bool,
    session_tag: &str,
) -> BTreeMap<OsString, OsString> {
    let mut env = BTreeMap::new();
    for (name, value) in parent {
        let keep = name.to_str().is_some_and(|n| {
            WHITELIST.contains(&n) || n.starts_with("LC_") || pass.iter().any(|p| p == n)
        });
        if keep {
            env.insert(name.clone(), value.clone());
        }
    }
    env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    for (name, value) in [("PAGER", "cat"), ("GIT_PAGER", "cat")] {
        env.insert(name.into(), value.into());
    }
    if tty {
        let term = parent
            .get(OsStr::new("TERM"))
            .filter(|t| !t.is_empty() && t.as_os_str() != "dumb")
            .cloned()
            .unwrap_or_else(|| "xterm-256color".into());
        env.insert("TERM".into(), term);
    } else {
        env.insert("TERM".into(), "dumb".into());
        env.insert("NO_COLOR".into(), "1".into());
    }
    for (name, value) in set {
        env.insert(name.into(), value.into());
    }
    for (name, value) in secrets {
        env.insert(name.into(), OsStr::from_bytes_lossless(value));
    }
    env.insert("AGENT_REACH_SESSION".into(), session_tag.into());
    env
}

trait FromBytes {
    fn from_bytes_lossless(bytes: &[u8]) -> OsString;
}

impl FromBytes for OsStr {
    fn from_bytes_lossless(bytes: &[u8]) -> OsString {
        use std::os::unix::ffi::OsStrExt;
        OsStr::from_bytes(bytes).to_owned()
    }
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
        let env = child_env(
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
        assert_eq!(get("LC_ALL").as_deref(), Some("C"));
        assert_eq!(get("CI").as_deref(), Some("1"));
        assert_eq!(get("TOKEN").as_deref(), Some("t"));
        assert_eq!(get("TERM").as_deref(), Some("dumb"));
        assert_eq!(get("AGENT_REACH_SESSION").as_deref(), Some("s1"));
        assert_eq!(get("LANG").as_deref(), Some("C.UTF-8"));
    }
}
