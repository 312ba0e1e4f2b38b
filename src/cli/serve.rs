//! `agent-reach serve`: the flags live with the server ([`crate::serve::args`]).

use crate::context::ProcessContext;

pub(crate) use crate::serve::args::ServeArgs;

/// `agent-reach serve ...`.
pub(crate) fn main(args: ServeArgs, ctx: ProcessContext) -> i32 {
    crate::serve::main(args, ctx)
}
