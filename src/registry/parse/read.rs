//! The typed readers of one TOML node: a string, a boolean, a count, a
//! duration in seconds, a risk, a list of strings or variable names, a
//! sandbox or network policy, a table. Each returns the value, or `None`
//! with its problem recorded at the node's span, so the layers above read a
//! key in one line and never stop at the first mistake.

use std::ops::Range;
use std::time::Duration;

use toml_edit::TableLike;

use super::Walker;
use crate::registry::model::{Risk, is_valid_env_name};
use crate::registry::node::{Node, entries};
use crate::sandbox::{Network, Policy};

impl Walker<'_> {
    pub(super) fn unknown_keys(&mut self, table: &dyn TableLike, known: &[&str], what: &str) {
        for (key, span, _) in entries(table) {
            if !known.contains(&key) {
                self.problem(
                    span,
                    format!(
                        "unknown key `{key}` in {what} (known: {})",
                        known.join(", ")
                    ),
                );
            }
        }
    }

    pub(super) fn string(&mut self, node: Node<'_>, what: &str) -> Option<String> {
        match node.as_str() {
            Some(s) => Some(s.to_owned()),
            None => {
                self.problem(
                    node.span(),
                    format!("`{what}` must be a string, found {}", node.type_name()),
                );
                None
            }
        }
    }

    pub(super) fn boolean(&mut self, node: Node<'_>, what: &str) -> Option<bool> {
        let value = node.as_bool();
        if value.is_none() {
            self.problem(
                node.span(),
                format!("`{what}` must be true or false, found {}", node.type_name()),
            );
        }
        value
    }

    pub(super) fn count(&mut self, node: Node<'_>, what: &str, min: i64) -> Option<usize> {
        match node.as_integer() {
            Some(n) if n >= min => usize::try_from(n).ok(),
            Some(n) => {
                self.problem(
                    node.span(),
                    format!("`{what}` must be at least {min}, found {n}"),
                );
                None
            }
            None => {
                self.problem(
                    node.span(),
                    format!("`{what}` must be an integer, found {}", node.type_name()),
                );
                None
            }
        }
    }

    pub(super) fn seconds(
        &mut self,
        node: Node<'_>,
        what: &str,
        allow_zero: bool,
    ) -> Option<Duration> {
        match node.as_number() {
            Some(s) if s.is_finite() && (s > 0.0 || (allow_zero && s == 0.0)) && s < 1e9 => {
                Some(Duration::from_secs_f64(s))
            }
            Some(s) => {
                let bound = if allow_zero {
                    "0 or more"
                } else {
                    "more than 0"
                };
                self.problem(
                    node.span(),
                    format!("`{what}` must be {bound} seconds, found {s}"),
                );
                None
            }
            None => {
                self.problem(
                    node.span(),
                    format!(
                        "`{what}` must be a number of seconds, found {}",
                        node.type_name()
                    ),
                );
                None
            }
        }
    }

    pub(super) fn risk(&mut self, node: Node<'_>, what: &str) -> Option<Risk> {
        let text = self.string(node, what)?;
        let risk = Risk::parse(&text);
        if risk.is_none() {
            self.problem(
                node.span(),
                format!("`{what}` must be \"low\", \"medium\" or \"high\", found {text:?}"),
            );
        }
        risk
    }

    pub(super) fn strings(
        &mut self,
        node: Node<'_>,
        what: &str,
    ) -> Option<Vec<(String, Option<Range<usize>>)>> {
        let Some(items) = node.as_array() else {
            self.problem(
                node.span(),
                format!(
                    "`{what}` must be an array of strings, found {}",
                    node.type_name()
                ),
            );
            return None;
        };
        let mut out = Vec::new();
        for item in items {
            match item.as_str() {
                Some(s) => out.push((s.to_owned(), item.span())),
                None => self.problem(
                    item.span(),
                    format!(
                        "`{what}` must hold strings only, found {}",
                        item.type_name()
                    ),
                ),
            }
        }
        Some(out)
    }

    pub(super) fn names(&mut self, node: Node<'_>, what: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (name, span) in self.strings(node, what).unwrap_or_default() {
            if is_valid_env_name(&name) {
                out.push(name);
            } else {
                self.problem(
                    span,
                    format!("`{what}`: {name:?} is not a valid variable name"),
                );
            }
        }
        out
    }

    pub(super) fn sandbox_policy(&mut self, node: Node<'_>, what: &str) -> Option<Policy> {
        let text = self.string(node, what)?;
        match text.parse::<Policy>() {
            Ok(policy) => Some(policy),
            Err(err) => {
                self.problem(node.span(), format!("`{what}`: {err}"));
                None
            }
        }
    }

    pub(super) fn network(&mut self, node: Node<'_>, what: &str) -> Option<Network> {
        let text = self.string(node, what)?;
        match text.parse::<Network>() {
            Ok(network) => Some(network),
            Err(err) => {
                self.problem(node.span(), format!("`{what}`: {err}"));
                None
            }
        }
    }

    pub(super) fn table<'n>(&mut self, node: Node<'n>, what: &str) -> Option<&'n dyn TableLike> {
        let table = node.as_table();
        if table.is_none() {
            self.problem(
                node.span(),
                format!("`{what}` must be a table, found {}", node.type_name()),
            );
        }
        table
    }
}
