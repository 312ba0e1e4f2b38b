//! The operator's caps on what a caller asks (`[limits] max_timeout_ms`,
//! `max_output_tokens`), applied once here so every door inherits them: a
//! request asking for more gets the cap, and the plan records what was
//! capped so the reply can say so.

use super::{DEFAULT_MAX_OUTPUT_TOKENS, Request};
use crate::registry::model::LimitSettings;

/// The name of the timeout cap, as replies spell it.
pub(crate) const MAX_TIMEOUT_MS: &str = "max_timeout_ms";
/// The name of the output budget cap, as replies spell it.
pub(crate) const MAX_OUTPUT_TOKENS: &str = "max_output_tokens";

/// One cap that cut what a request asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cap {
    /// [`MAX_TIMEOUT_MS`] or [`MAX_OUTPUT_TOKENS`].
    pub(crate) name: &'static str,
    /// What was asked (`None`: no limit at all).
    pub(crate) asked: Option<u64>,
    pub(crate) limit: u64,
}

impl Cap {
    /// What was cut: `max_output_tokens (asked 100000000, limit 100000)`.
    pub(crate) fn detail(&self) -> String {
        let asked = self
            .asked
            .map_or_else(|| "no limit".to_owned(), |n| n.to_string());
        format!("{} (asked {asked}, limit {})", self.name, self.limit)
    }
}

/// `request` within `limits`: `None` when it asks for nothing above them,
/// else the capped copy; and what was capped. A one-shot request asking
/// for no timeout at all (`0`) asks for more than any cap; a live session
/// without one lives until it is ended, unless the operator's registry set
/// `max_timeout_ms` (`limits.timeout_set`): then that is its deadline.
pub(crate) fn cap(request: &Request, limits: LimitSettings) -> (Option<Request>, Vec<Cap>) {
    let mut caps = Vec::new();
    let mut capped = None::<Request>;
    let timeout_cap = request.timeout_ms.and_then(|ms| {
        let asked = (ms != 0).then_some(ms);
        cap_timeout(asked, !request.session, limits)
    });
    if let Some(cap) = timeout_cap {
        caps.push(cap);
        capped.get_or_insert_with(|| request.clone()).timeout_ms = Some(limits.max_timeout_ms);
    } else if request.session && limits.timeout_set && matches!(request.timeout_ms, None | Some(0))
    {
        // A live process without a timeout lives until it is ended, unless
        // the operator's registry set `max_timeout_ms`: then that is its
        // deadline (said as a cap only where "no timeout" was asked).
        if request.timeout_ms == Some(0) {
            caps.push(Cap {
                name: MAX_TIMEOUT_MS,
                asked: None,
                limit: limits.max_timeout_ms,
            });
        }
        capped.get_or_insert_with(|| request.clone()).timeout_ms = Some(limits.max_timeout_ms);
    }
    let tokens = request
        .max_output_tokens
        .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
    if tokens > limits.max_output_tokens {
        if let Some(asked) = request.max_output_tokens {
            caps.push(Cap {
                name: MAX_OUTPUT_TOKENS,
                asked: Some(u64::try_from(asked).unwrap_or(u64::MAX)),
                limit: u64::try_from(limits.max_output_tokens).unwrap_or(u64::MAX),
            });
        }
        capped
            .get_or_insert_with(|| request.clone())
            .max_output_tokens = Some(limits.max_output_tokens);
    }
    (capped, caps)
}

/// A timeout asked for (`asked`, in ms; `None`: no timeout at all) within
/// `limits`: the cap when it cuts it, to `limits.max_timeout_ms`. No
/// timeout asks for more than any cap where the command runs to its end
/// (`one_shot`); a live session without one is not a timeout request.
pub(crate) fn cap_timeout(
    asked: Option<u64>,
    one_shot: bool,
    limits: LimitSettings,
) -> Option<Cap> {
    let over = match asked {
        Some(ms) => ms > limits.max_timeout_ms,
        None => one_shot,
    };
    over.then_some(Cap {
        name: MAX_TIMEOUT_MS,
        asked,
        limit: limits.max_timeout_ms,
    })
}

/// An output budget a door handles itself (MCP `write_stdin`) within
/// `limits`: the budget to use and the cap, when one cut it.
pub(crate) fn cap_tokens(asked: usize, limits: LimitSettings) -> (usize, Option<Cap>) {
    if asked <= limits.max_output_tokens {
        return (asked, None);
    }
    let cap = Cap {
        name: MAX_OUTPUT_TOKENS,
        asked: Some(u64::try_from(asked).unwrap_or(u64::MAX)),
        limit: u64::try_from(limits.max_output_tokens).unwrap_or(u64::MAX),
    };
    (limits.max_output_tokens, Some(cap))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LimitSettings {
        LimitSettings {
            pids: 10,
            max_timeout_ms: 60_000,
            max_output_tokens: 20_000,
            ..LimitSettings::default()
        }
    }

    fn command() -> Request {
        Request::command(vec!["true".into()])
    }

    #[test]
    fn a_request_within_the_limits_is_left_as_it_is() {
        let mut request = command();
        request.timeout_ms = Some(5_000);
        request.max_output_tokens = Some(100);
        assert_eq!(cap(&request, limits()), (None, Vec::new()));
    }

    #[test]
    fn a_request_asking_for_more_gets_the_caps_and_says_which() {
        let mut request = command();
        request.timeout_ms = Some(1_000_000_000);
        request.max_output_tokens = Some(100_000_000);
        let (capped, caps) = cap(&request, limits());
        let capped = capped.unwrap();
        assert_eq!(capped.timeout_ms, Some(60_000));
        assert_eq!(capped.max_output_tokens, Some(20_000));
        let names: Vec<&str> = caps.iter().map(|c| c.name).collect();
        assert_eq!(names, [MAX_TIMEOUT_MS, MAX_OUTPUT_TOKENS]);
        assert_eq!(
            caps[1].detail(),
            "max_output_tokens (asked 100000000, limit 20000)"
        );
    }

    #[test]
    fn no_timeout_is_capped_for_a_one_shot_command_not_for_a_session() {
        let mut one_shot = command();
        one_shot.timeout_ms = Some(0);
        let (capped, caps) = cap(&one_shot, limits());
        assert_eq!(capped.unwrap().timeout_ms, Some(60_000));
        assert_eq!(
            caps[0].detail(),
            "max_timeout_ms (asked no limit, limit 60000)"
        );
        let mut session = command();
        session.timeout_ms = Some(0);
        session.session = true;
        assert_eq!(cap(&session, limits()), (None, Vec::new()));
    }

    #[test]
    fn a_cap_below_the_default_budget_holds_silently_for_a_request_that_asked_nothing() {
        let small = LimitSettings {
            max_output_tokens: 500,
            ..limits()
        };
        let (capped, caps) = cap(&command(), small);
        assert_eq!(capped.unwrap().max_output_tokens, Some(500));
        assert!(caps.is_empty());
    }

    #[test]
    fn a_live_session_without_a_timeout_gets_the_cap_only_where_the_operator_set_one() {
        let mut session = command();
        session.session = true;
        assert_eq!(cap(&session, limits()), (None, Vec::new()));
        let set = LimitSettings {
            timeout_set: true,
            ..limits()
        };
        let (capped, caps) = cap(&session, set);
        assert_eq!(capped.unwrap().timeout_ms, Some(60_000));
        assert!(caps.is_empty(), "asked nothing: {caps:?}");
        session.timeout_ms = Some(0);
        let (capped, caps) = cap(&session, set);
        assert_eq!(capped.unwrap().timeout_ms, Some(60_000));
        assert_eq!(caps[0].name, MAX_TIMEOUT_MS);
        session.timeout_ms = Some(1_000);
        assert_eq!(cap(&session, set), (None, Vec::new()));
    }
}
