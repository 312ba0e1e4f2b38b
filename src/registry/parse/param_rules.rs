//! The checks between a parameter's fields, on the parameter itself: an
//! enum needs its values, `items` and `flag` and `min`/`max` and `pattern`
//! apply to some types only, `min <= max`, a required parameter has no
//! default, and a default passes the parameter's own checks. The reader
//! ([`super::param`]) reports what one key gets wrong; these rules see the
//! whole parameter and return every problem at once.

use crate::registry::model::{ParamSpec, ParamType};
use crate::registry::params::check_default;

/// Which of a parameter's keys its table writes. A rule can hinge on a key
/// being written, not only on the value left behind (`enum = []` is not a
/// missing `enum`; a `min` of the wrong type is still a `min`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DeclaredKeys {
    pub(crate) items: bool,
    /// `enum`.
    pub(crate) allowed: bool,
    pub(crate) flag: bool,
    pub(crate) min_or_max: bool,
    pub(crate) pattern: bool,
    pub(crate) default: bool,
}

/// The part of a parameter's definition a problem points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ParamPart {
    /// The parameter's table as a whole.
    Definition,
    /// Its `default`.
    Default,
}

/// One problem of a parameter (the message names neither tool nor parameter).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamProblem {
    pub(crate) part: ParamPart,
    pub(crate) message: String,
}

impl ParamProblem {
    fn definition(message: String) -> Self {
        Self {
            part: ParamPart::Definition,
            message,
        }
    }
}

impl ParamSpec {
    /// Every problem between this parameter's fields (empty = consistent).
    /// `declared` says which keys its table wrote; the default checked is
    /// `self.default`.
    pub(crate) fn problems(&self, declared: DeclaredKeys) -> Vec<ParamProblem> {
        let mut out = Vec::new();
        let element_ty = if self.ty == ParamType::List {
            self.items
        } else {
            self.ty
        };
        if self.ty == ParamType::Enum && self.allowed.is_empty() && !declared.allowed {
            out.push(ParamProblem::definition(
                "type \"enum\" needs `enum = [...]`".to_owned(),
            ));
        }
        if element_ty == ParamType::Enum && self.ty == ParamType::List && self.allowed.is_empty() {
            out.push(ParamProblem::definition(
                "items \"enum\" needs `enum = [...]`".to_owned(),
            ));
        }
        if declared.allowed && !matches!(element_ty, ParamType::String | ParamType::Enum) {
            out.push(ParamProblem::definition(
                "`enum` applies to string and enum parameters only".to_owned(),
            ));
        }
        if declared.items && self.ty != ParamType::List {
            out.push(ParamProblem::definition(
                "`items` applies to list parameters only".to_owned(),
            ));
        }
        if declared.flag && self.ty != ParamType::Boolean {
            out.push(ParamProblem::definition(
                "`flag` applies to boolean parameters only".to_owned(),
            ));
        }
        if declared.min_or_max
            && matches!(
                self.ty,
                ParamType::Boolean | ParamType::Enum | ParamType::Path
            )
        {
            out.push(ParamProblem::definition(format!(
                "`min`/`max` do not apply to {} parameters",
                self.ty.as_str()
            )));
        }
        if declared.pattern && !matches!(element_ty, ParamType::String | ParamType::Path) {
            out.push(ParamProblem::definition(
                "`pattern` applies to string and path parameters only".to_owned(),
            ));
        }
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            out.push(ParamProblem::definition(format!(
                "min {min} is greater than max {max}"
            )));
        }
        if declared.default && self.required {
            out.push(ParamProblem {
                part: ParamPart::Default,
                message: "a required parameter cannot have a default".to_owned(),
            });
        }
        if let Some(default) = &self.default
            && let Err(reason) = check_default(self, default)
        {
            out.push(ParamProblem {
                part: ParamPart::Default,
                message: format!("bad default: {reason}"),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn integer() -> ParamSpec {
        ParamSpec {
            name: "n".to_owned(),
            ty: ParamType::Integer,
            items: ParamType::String,
            required: false,
            default: None,
            min: None,
            max: None,
            pattern: None,
            allowed: Vec::new(),
            flag: None,
            allow_leading_dash: false,
            description: None,
        }
    }

    #[test]
    fn a_consistent_parameter_has_no_problems() {
        let spec = ParamSpec {
            min: Some(1.0),
            max: Some(9.0),
            default: Some(json!(3)),
            ..integer()
        };
        let declared = DeclaredKeys {
            min_or_max: true,
            default: true,
            ..DeclaredKeys::default()
        };
        assert_eq!(spec.problems(declared), []);
    }

    #[test]
    fn every_problem_between_fields_is_returned_with_its_part() {
        let spec = ParamSpec {
            required: true,
            min: Some(5.0),
            max: Some(1.0),
            default: Some(json!("three")),
            ..integer()
        };
        let declared = DeclaredKeys {
            flag: true,
            items: true,
            min_or_max: true,
            default: true,
            ..DeclaredKeys::default()
        };
        let problems = spec.problems(declared);
        let parts: Vec<ParamPart> = problems.iter().map(|p| p.part).collect();
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert_eq!(
            parts,
            [
                ParamPart::Definition,
                ParamPart::Definition,
                ParamPart::Definition,
                ParamPart::Default,
                ParamPart::Default
            ],
            "{messages:?}"
        );
        assert_eq!(messages[0], "`items` applies to list parameters only");
        assert_eq!(messages[1], "`flag` applies to boolean parameters only");
        assert_eq!(messages[2], "min 5 is greater than max 1");
        assert_eq!(messages[3], "a required parameter cannot have a default");
        assert!(messages[4].starts_with("bad default: "), "{messages:?}");
    }

    #[test]
    fn an_enum_without_values_and_a_list_of_enums_without_values_are_refused() {
        let bare_enum = ParamSpec {
            ty: ParamType::Enum,
            ..integer()
        };
        assert_eq!(
            bare_enum.problems(DeclaredKeys::default())[0].message,
            "type \"enum\" needs `enum = [...]`"
        );
        let list = ParamSpec {
            ty: ParamType::List,
            items: ParamType::Enum,
            ..integer()
        };
        let declared = DeclaredKeys {
            items: true,
            ..DeclaredKeys::default()
        };
        assert_eq!(
            list.problems(declared)[0].message,
            "items \"enum\" needs `enum = [...]`"
        );
    }
}
