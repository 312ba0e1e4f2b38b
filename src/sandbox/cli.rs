//! The `agent-reach-sandbox` personality and `agent-reach sandbox`.

use crate::context::ProcessContext;

/// Confines the command, then execs it.
pub fn main(_ctx: &ProcessContext) -> i32 {
    crate::stdio::not_available("agent-reach-sandbox")
}
