//! Folds the policy's EPERM filters into one, shared by build.rs and the
//! tests: every filter installed is one more `seccomp()` call (a BPF check
//! and JIT, about 20 µs of each sandboxed start) and one more program every
//! syscall of the command runs through. The JSON keeps them apart, by
//! purpose; the installed program does not need to.
//!
//! The library compiles this file only for its tests; build.rs is its user.

use serde_json::{Map, Value};

use super::seccomp_names::{BASE, BASE_NETWORK_DENY};
/// The filter that only the network-deny variant takes in.
pub(crate) const NETWORK_DENY: &str = "network_deny";

/// The whole policy for architecture `arch` (Rust's name for it), as
/// seccompiler's JSON (name to filter): the filters of every policy text
/// (each with the one architecture it is for, if any), and the merged ones.
pub(crate) fn whole_policy(
    texts: &[(&str, Option<&str>)],
    arch: &str,
) -> Result<Map<String, Value>, serde_json::Error> {
    let mut policy = Map::new();
    for (text, only_arch) in texts {
        if only_arch.is_some_and(|only| only != arch) {
            continue;
        }
        if let Value::Object(filters) = serde_json::from_str(text)? {
            policy.extend(filters);
        }
    }
    add_merged(&mut policy);
    Ok(policy)
}

/// Adds [`BASE`] and [`BASE_NETWORK_DENY`] to `policy` (seccompiler's JSON:
/// name to filter): the rules of every filter that allows by default and
/// refuses with EPERM, in name order, the network filter only in the second.
/// Filters with another action (clone3's ENOSYS) stay as they are.
pub(crate) fn add_merged(policy: &mut Map<String, Value>) {
    let eperm = |filter: &Value| {
        filter.get("mismatch_action") == Some(&Value::from("allow"))
            && filter.get("match_action") == Some(&serde_json::json!({ "errno": 1 }))
    };
    let mut names: Vec<String> = policy
        .iter()
        .filter(|(_, filter)| eperm(filter))
        .map(|(name, _)| name.clone())
        .collect();
    names.sort();
    let rules = |with_network: bool| -> Vec<Value> {
        names
            .iter()
            .filter(|name| with_network || name.as_str() != NETWORK_DENY)
            .flat_map(|name| {
                policy[name.as_str()]["filter"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect()
    };
    let merged = |rules: Vec<Value>| {
        serde_json::json!({
            "mismatch_action": "allow",
            "match_action": { "errno": 1 },
            "filter": rules,
        })
    };
    let base = merged(rules(false));
    let with_network = merged(rules(true));
    policy.insert(BASE.to_owned(), base);
    policy.insert(BASE_NETWORK_DENY.to_owned(), with_network);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eperm_filters_fold_and_other_actions_stay() {
        let mut policy: Map<String, Value> = serde_json::from_value(serde_json::json!({
            "always": { "mismatch_action": "allow", "match_action": { "errno": 1 },
                        "filter": [{ "syscall": "ptrace" }] },
            "network_deny": { "mismatch_action": "allow", "match_action": { "errno": 1 },
                              "filter": [{ "syscall": "socket" }] },
            "clone3": { "mismatch_action": "allow", "match_action": { "errno": 38 },
                        "filter": [{ "syscall": "clone3" }] },
        }))
        .unwrap();
        add_merged(&mut policy);
        let syscalls = |name: &str| -> Vec<String> {
            policy[name]["filter"]
                .as_array()
                .unwrap()
                .iter()
                .map(|rule| rule["syscall"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(syscalls(BASE), vec!["ptrace"]);
        assert_eq!(syscalls(BASE_NETWORK_DENY), vec!["ptrace", "socket"]);
        assert_eq!(syscalls("clone3"), vec!["clone3"]);
        assert_eq!(
            policy[BASE]["match_action"],
            serde_json::json!({ "errno": 1 })
        );
    }
}
