//! A request's priority (`high|normal|low`): its own file, since Windows
//! parses requests without the rest of the scheduler.

/// Request priority; higher runs first among waiters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) enum Priority {
    Low,
    #[default]
    Normal,
    High,
}

impl Priority {
    pub(crate) fn parse(text: &str) -> Option<Self> {
        match text {
            "high" => Some(Self::High),
            "normal" => Some(Self::Normal),
            "low" => Some(Self::Low),
            _ => None,
        }
    }
}
