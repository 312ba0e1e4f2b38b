//! A process's environment as Codex's `envPolicy` describes it, on top of
//! agent-reach's own rules: `inherit: all` passes the whitelisted base of
//! the server's environment (never the rest, nor agent-reach's internals), `core` the engine's short list, `none`
//! nothing; names matching `exclude` (and, unless `ignoreDefaultExcludes`,
//! anything with `KEY`, `SECRET` or `TOKEN` in it) are left out, and with
//! `includeOnly` only matching names are kept; then `set`, then the
//! request's `env`. The values reach the command only after it is
//! confined, as on every door, and names agent-reach reserves are refused.

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::protocol::{ExecEnvPolicy, ShellEnvironmentPolicyInherit};
use crate::plan::Request;

/// Codex's default excludes: what looks like a credential.
const DEFAULT_EXCLUDES: &[&str] = &["*KEY*", "*SECRET*", "*TOKEN*"];

/// Sets `request`'s environment from `policy` (none: the engine's
/// default), the server's environment `server` and the request's `env`.
pub(crate) fn apply(
    request: &mut Request,
    policy: Option<&ExecEnvPolicy>,
    server: &BTreeMap<OsString, OsString>,
    env: &std::collections::HashMap<String, String>,
) {
    let mut set: BTreeMap<String, String> = BTreeMap::new();
    if let Some(policy) = policy {
        match policy.inherit {
            ShellEnvironmentPolicyInherit::All => {
                request.pass_env = server
                    .keys()
                    .filter_map(|k| k.to_str())
                    .filter(|k| kept(policy, k))
                    .map(str::to_owned)
                    .collect();
            }
            ShellEnvironmentPolicyInherit::Core => {}
            ShellEnvironmentPolicyInherit::None => request.replace_env = true,
        }
        set.extend(policy.r#set.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    set.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    request.env = set
        .into_iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
}

/// Whether the policy lets the server's variable `name` through.
fn kept(policy: &ExecEnvPolicy, name: &str) -> bool {
    let defaults = if policy.ignore_default_excludes {
        &[][..]
    } else {
        DEFAULT_EXCLUDES
    };
    let excluded = defaults
        .iter()
        .copied()
        .chain(policy.exclude.iter().map(String::as_str))
        .any(|p| matches(p, name));
    let included =
        policy.include_only.is_empty() || policy.include_only.iter().any(|p| matches(p, name));
    !excluded && included
}

/// Case-insensitive wildcard match (`*` any run, `?` one character).
fn matches(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().flat_map(char::to_uppercase).collect();
    let n: Vec<char> = name.chars().flat_map(char::to_uppercase).collect();
    let (mut pi, mut ni) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Target;

    fn policy(inherit: ShellEnvironmentPolicyInherit) -> ExecEnvPolicy {
        ExecEnvPolicy {
            inherit,
            ignore_default_excludes: false,
            exclude: vec!["CODEX_*".to_owned()],
            r#set: [("A".to_owned(), "from-set".to_owned())].into(),
            include_only: Vec::new(),
        }
    }

    fn server() -> BTreeMap<OsString, OsString> {
        ["HOME", "MY_API_KEY", "CODEX_VERSION", "EDITOR"]
            .into_iter()
            .map(|k| (OsString::from(k), OsString::from("v")))
            .collect()
    }

    #[test]
    fn inherit_all_passes_the_server_environment_but_the_excluded_and_credentials() {
        let mut request = Request::new(Target::Command(vec!["true".into()]));
        let env = [("A".to_owned(), "from-env".to_owned())].into();
        apply(
            &mut request,
            Some(&policy(ShellEnvironmentPolicyInherit::All)),
            &server(),
            &env,
        );
        assert_eq!(request.pass_env, ["EDITOR", "HOME"]);
        assert_eq!(request.env, [("A".into(), "from-env".into())]);
        assert!(!request.replace_env);
    }

    #[test]
    fn inherit_none_replaces_the_environment_with_set_and_env() {
        let mut request = Request::new(Target::Command(vec!["true".into()]));
        apply(
            &mut request,
            Some(&policy(ShellEnvironmentPolicyInherit::None)),
            &server(),
            &Default::default(),
        );
        assert!(request.replace_env);
        assert!(request.pass_env.is_empty());
        assert_eq!(request.env, [("A".into(), "from-set".into())]);
    }

    #[test]
    fn wildcards_match_names_whatever_their_case() {
        assert!(matches("*key*", "MY_API_KEY"));
        assert!(matches("CODEX_*", "CODEX_VERSION"));
        assert!(matches("H?ME", "HOME"));
        assert!(!matches("CODEX_*", "XCODEX_A"));
    }
}
