//! The environment a command starts with: cleared, then a short whitelist
//! from ours, then the settings that keep an agent's commands from hanging on
//! a pager or filling its context with colour codes, then the session tag.
//!
//! Pure: it builds a map from a map, so every rule is tested without a process.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use crate::context::{DEPTH_VAR, HOME_VAR};

/// The variable every child carries so that escapees (a `setsid` daemon, a
/// double fork) can be found in `/proc/*/environ` and killed.
pub(crate) const SESSION_VAR: &str = "AGENT_REACH_SESSION";

/// Copied from our environment when set.
const WHITELIST: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "LANG", "TZ", HOME_VAR, DEPTH_VAR,
];

/// PATH when ours has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// The locale when none is set: UTF-8 so tools print text, not `?`.
const DEFAULT_LANG: &str = "C.UTF-8";
/// The variables that choose the character set, in glibc's order of weight.
const LOCALE_VARS: [&str; 3] = ["LC_ALL", "LC_CTYPE", "LANG"];
/// TERM on a PTY when ours is unset or `dumb`.
const DEFAULT_PTY_TERM: &str = "xterm-256color";

/// What of `parent` a child starts from: the whitelist and the locale
/// (`LC_*`), nothing else. Every door's command starts from this, never
/// from the server's whole environment.
pub(crate) fn whitelisted(parent: &BTreeMap<OsString, OsString>) -> BTreeMap<OsString, OsString> {
    let mut env = BTreeMap::new();
    for name in WHITELIST {
        if let Some(value) = parent.get(OsStr::new(name)) {
            env.insert(OsString::from(name), value.clone());
        }
    }
    for (name, value) in parent {
        if name.to_str().is_some_and(|n| n.starts_with("LC_")) {
            env.insert(name.clone(), value.clone());
        }
    }
    env
}

/// Builds the complete environment of a child.
///
/// - `parent`: our environment (PATH already has the session entry first);
/// - `pass`: more names to copy from it (a tool's `env`, `run --env NAME`);
/// - `set`: explicit values (`run --env NAME=VALUE`, injected secrets), applied
///   after everything else except the session tag, which cannot be overridden;
/// - `tty`: a PTY gets a real `TERM` and keeps colour; pipes get `TERM=dumb`,
///   `NO_COLOR=1` and no credential prompts.
pub fn child_env(
    parent: &BTreeMap<OsString, OsString>,
    pass: &[String],
    set: &[(OsString, OsString)],
    tty: bool,
    session_tag: &str,
) -> BTreeMap<OsString, OsString> {
    let mut env = whitelisted(parent);
    for name in pass {
        if let Some(value) = parent.get(OsStr::new(name)) {
            env.insert(OsString::from(name), value.clone());
        }
    }
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    // A locale that is not UTF-8 (`C`, `POSIX`, a Latin-1 one) makes
    // children print `?` for every non-ASCII character: it becomes C.UTF-8
    // (the caller's and the registry's explicit values, applied below, win).
    let mut has_locale = false;
    for name in LOCALE_VARS {
        if let Some(value) = env.get_mut(OsStr::new(name))
            && !value.is_empty()
        {
            has_locale = true;
            if !is_utf8_locale(value) {
                *value = DEFAULT_LANG.into();
            }
        }
    }
    if !has_locale {
        env.insert("LANG".into(), DEFAULT_LANG.into());
    }
    // A pager waits for a key no agent will press, on a PTY as on pipes.
    env.insert("PAGER".into(), "cat".into());
    env.insert("GIT_PAGER".into(), "cat".into());
    if tty {
        let term = parent
            .get(OsStr::new("TERM"))
            .filter(|t| !t.is_empty() && t.as_os_str() != "dumb")
            .cloned()
            .unwrap_or_else(|| DEFAULT_PTY_TERM.into());
        env.insert("TERM".into(), term);
    } else {
        env.insert("TERM".into(), "dumb".into());
        env.insert("NO_COLOR".into(), "1".into());
        // Nobody can answer a prompt on a pipe: fail it at once.
        env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
        env.insert("DEBIAN_FRONTEND".into(), "noninteractive".into());
    }
    for (name, value) in set {
        env.insert(name.clone(), value.clone());
    }
    env.insert(SESSION_VAR.into(), session_tag.into());
    env
}

/// Whether a locale name selects UTF-8 (`en_US.UTF-8`, `C.utf8`, ...).
fn is_utf8_locale(value: &OsStr) -> bool {
    let name = value.to_string_lossy().to_ascii_lowercase();
    let charset = name.split('@').next().unwrap_or_default();
    charset.ends_with(".utf-8") || charset.ends_with(".utf8")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<OsString, OsString> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    fn get<'a>(env: &'a BTreeMap<OsString, OsString>, name: &str) -> Option<&'a str> {
        env.get(OsStr::new(name)).and_then(|v| v.to_str())
    }

    #[test]
    fn a_locale_that_is_not_utf8_becomes_c_utf8_unless_set_explicitly() {
        for (name, value) in [
            ("LANG", "C"),
            ("LC_ALL", "POSIX"),
            ("LC_CTYPE", "en_US.ISO-8859-1"),
        ] {
            let env = child_env(&map(&[(name, value)]), &[], &[], false, "t");
            assert_eq!(get(&env, name), Some(DEFAULT_LANG), "{name}={value}");
        }
        let env = child_env(&map(&[]), &[], &[], false, "t");
        assert_eq!(get(&env, "LANG"), Some(DEFAULT_LANG), "unset");
        let kept = child_env(
            &map(&[("LANG", "de_DE.UTF-8"), ("LC_ALL", "en_US.utf8@euro")]),
            &[],
            &[],
            false,
            "t",
        );
        assert_eq!(get(&kept, "LANG"), Some("de_DE.UTF-8"));
        assert_eq!(get(&kept, "LC_ALL"), Some("en_US.utf8@euro"));
        let explicit = child_env(
            &map(&[("LC_ALL", "C")]),
            &[],
            &[("LC_ALL".into(), "POSIX".into())],
            false,
            "t",
        );
        assert_eq!(
            get(&explicit, "LC_ALL"),
            Some("POSIX"),
            "the registry's [env] wins"
        );
    }

    #[test]
    fn keeps_only_the_whitelist_and_passed_names() {
        let parent = map(&[
            ("PATH", "/s:/usr/bin"),
            ("HOME", "/h"),
            ("AWS_SECRET_ACCESS_KEY", "x"),
            ("CARGO_HOME", "/c"),
            ("LC_TIME", "de_DE.UTF-8"),
        ]);
        let env = child_env(&parent, &["CARGO_HOME".into()], &[], false, "t1");
        assert_eq!(get(&env, "PATH"), Some("/s:/usr/bin"));
        assert_eq!(get(&env, "HOME"), Some("/h"));
        assert_eq!(get(&env, "CARGO_HOME"), Some("/c"));
        assert_eq!(get(&env, "LC_TIME"), Some("de_DE.UTF-8"));
        assert_eq!(get(&env, "AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(get(&env, SESSION_VAR), Some("t1"));
    }

    #[test]
    fn pipes_get_dumb_terminal_and_no_pager_or_colour() {
        let env = child_env(&map(&[("TERM", "xterm")]), &[], &[], false, "t");
        assert_eq!(get(&env, "TERM"), Some("dumb"));
        assert_eq!(get(&env, "NO_COLOR"), Some("1"));
        assert_eq!(get(&env, "PAGER"), Some("cat"));
        assert_eq!(get(&env, "GIT_PAGER"), Some("cat"));
        assert_eq!(get(&env, "GIT_TERMINAL_PROMPT"), Some("0"));
    }

    #[test]
    fn pty_gets_a_real_terminal_and_keeps_colour() {
        let env = child_env(&map(&[("TERM", "screen")]), &[], &[], true, "t");
        assert_eq!(get(&env, "TERM"), Some("screen"));
        assert_eq!(get(&env, "NO_COLOR"), None);
        let env = child_env(&map(&[("TERM", "dumb")]), &[], &[], true, "t");
        assert_eq!(get(&env, "TERM"), Some(DEFAULT_PTY_TERM));
        assert_eq!(get(&env, "PAGER"), Some("cat"));
    }

    #[test]
    fn defaults_path_and_a_utf8_locale() {
        let env = child_env(&BTreeMap::new(), &[], &[], false, "t");
        assert_eq!(get(&env, "PATH"), Some(DEFAULT_PATH));
        assert_eq!(get(&env, "LANG"), Some(DEFAULT_LANG));
        let env = child_env(&map(&[("LC_ALL", "en_US.UTF-8")]), &[], &[], false, "t");
        assert_eq!(get(&env, "LANG"), None);
    }

    #[test]
    fn explicit_values_win_but_never_over_the_session_tag() {
        let set = vec![
            (OsString::from("TERM"), OsString::from("vt100")),
            (OsString::from(SESSION_VAR), OsString::from("forged")),
            (OsString::from("TOKEN"), OsString::from("v")),
        ];
        let env = child_env(&BTreeMap::new(), &[], &set, false, "real");
        assert_eq!(get(&env, "TERM"), Some("vt100"));
        assert_eq!(get(&env, "TOKEN"), Some("v"));
        assert_eq!(get(&env, SESSION_VAR), Some("real"));
    }

    #[test]
    fn passing_an_unset_name_adds_nothing() {
        let env = child_env(&BTreeMap::new(), &["NOPE".into()], &[], false, "t");
        assert_eq!(get(&env, "NOPE"), None);
    }
}
