//! The `apply_patch` personality and `agent-reach apply-patch`.

use crate::context::ProcessContext;

/// Applies the patch given as the one argument or on stdin.
pub fn main(_ctx: &ProcessContext) -> i32 {
    crate::stdio::not_available("apply_patch")
}
