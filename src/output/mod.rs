//! The output pipeline: what a command wrote becomes what the model reads,
//! without flooding its context, leaking a secret or losing the end.
//!
//! Pure (no processes); the exec engine feeds it. Per stream, in order:
//! [`redact`] (secrets replaced first), [`terminal`] clean-up (vte; `\r`
//! redraws and progress lines folded, see [`line`]), the [`spill`] file
//! (full cleaned text on disk) and the in-memory cap ([`headtail`]), joined
//! by [`capture`], which also hands every finished line to the
//! [`highlights`] detector; then at reply time [`render`]: binary refusal
//! and [`fold`]ing to the token budget with a marker naming the left-out
//! lines (and which highlights it left out).

pub mod capture;
pub mod fold;
pub mod headtail;
pub mod highlights;
pub mod line;
pub mod redact;
pub mod render;
pub(crate) mod scan;
pub(crate) mod screen;
pub mod spill;
mod spill_lock;
#[cfg(unix)]
pub(crate) use spill_lock::make_private_dir;
pub mod terminal;
#[cfg(test)]
mod terminal_captures;

pub use capture::{CaptureConfig, Captured, DEFAULT_CAP_BYTES, StreamCapture};
pub use redact::Redactor;
pub use render::{DEFAULT_MAX_OUTPUT_TOKENS, RenderOptions, Rendered, render};
pub use spill::{DEFAULT_SPILL_CAP_BYTES, SpillError, SpillStore, SpillWriter};

/// The output limits of one execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// Bytes of each stream held in memory (head + tail).
    pub cap_bytes: usize,
    /// Cap of the whole spill store under `$AGENT_REACH_HOME/spill`.
    pub spill_cap_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            cap_bytes: DEFAULT_CAP_BYTES,
            spill_cap_bytes: DEFAULT_SPILL_CAP_BYTES,
        }
    }
}
