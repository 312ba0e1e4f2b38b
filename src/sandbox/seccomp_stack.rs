//! Several seccomp filters installed as one program.
//!
//! Every `seccomp(SET_MODE_FILTER)` costs a fixed ~13 µs here (the filter's
//! conversion, JIT and allow cache), so the sandbox installs its filters
//! stacked into one: each runs in turn, and where it would allow the
//! syscall, the next one runs instead. The kernel, given separate filters,
//! runs them all (the most recently installed first) and keeps the
//! strongest action, the first on a tie; the stack keeps the first action
//! that is not "allow". The two agree as long as no later filter would
//! answer a syscall with a stronger action than an earlier one already
//! gave; the tests run both over every syscall number to show that holds
//! for the sandbox's filters.

use seccompiler::sock_filter;

const JMP_JA: u16 = 0x05;
const RET_K: u16 = 0x06;
const RET_ALLOW: u32 = 0x7fff_0000;

/// One program that decides as `filters` installed in this order would.
pub(crate) fn stack(filters: &[&[sock_filter]]) -> Vec<sock_filter> {
    let mut out: Vec<sock_filter> = Vec::new();
    // The most recently installed filter runs first.
    let mut order = filters.iter().rev().peekable();
    while let Some(filter) = order.next() {
        let is_last = order.peek().is_none();
        let next_start = out.len() + filter.len();
        for insn in filter.iter() {
            let at = out.len();
            if !is_last && insn.code == RET_K && insn.k == RET_ALLOW {
                // Allowed here: on to the next filter.
                out.push(sock_filter {
                    code: JMP_JA,
                    jt: 0,
                    jf: 0,
                    k: u32::try_from(next_start - at - 1).unwrap_or(u32::MAX),
                });
            } else {
                out.push(insn.clone());
            }
        }
    }
    out
}

/// What the kernel answers with `filters` installed in this order: every
/// one runs, most recent first, and the strongest action wins (the first
/// on a tie). For tests; `None` if a program cannot be run.
#[cfg(test)]
pub(crate) fn kernel_decision(filters: &[&[sock_filter]], data: &[u32; 16]) -> Option<u32> {
    // SECCOMP_RET_ACTION_FULL, compared as signed: KILL_PROCESS is the
    // strongest, ALLOW the weakest.
    let strength = |ret: u32| (ret & 0xffff_0000) as i32;
    let mut decided: Option<u32> = None;
    for filter in filters.iter().rev() {
        let ret = super::seccomp_fast_path::run(filter, data)?.0;
        if decided.is_none_or(|best| strength(ret) < strength(best)) {
            decided = Some(ret);
        }
    }
    decided
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    /// Returns `action` for syscall `nr`, allows the rest.
    fn refuse(nr: u32, action: u32) -> Vec<sock_filter> {
        vec![
            insn(0x20, 0, 0, 0),
            insn(0x15, 0, 1, nr),
            insn(RET_K, 0, 0, action),
            insn(RET_K, 0, 0, RET_ALLOW),
        ]
    }

    fn data(nr: u32) -> [u32; 16] {
        let mut data = [0u32; 16];
        data[0] = nr;
        data
    }

    #[test]
    fn a_stack_decides_as_its_filters_installed_apart() {
        let enosys = 0x0005_0026;
        let eperm = 0x0005_0001;
        let (a, b, c) = (refuse(1, eperm), refuse(2, enosys), refuse(3, 0));
        let filters: Vec<&[sock_filter]> = vec![&a, &b, &c];
        let stacked = stack(&filters);
        assert_eq!(stacked.len(), a.len() + b.len() + c.len());
        for nr in 0..6 {
            assert_eq!(
                super::super::seccomp_fast_path::run(&stacked, &data(nr)).map(|r| r.0),
                kernel_decision(&filters, &data(nr)),
                "nr {nr}"
            );
        }
    }

    #[test]
    fn a_stronger_action_later_in_the_stack_is_where_they_differ() {
        // Installed first (runs last) it kills; the later one refuses first.
        let (kill, eperm) = (refuse(1, 0), refuse(1, 0x0005_0001));
        let filters: Vec<&[sock_filter]> = vec![&kill, &eperm];
        let stacked = stack(&filters);
        assert_eq!(kernel_decision(&filters, &data(1)), Some(0));
        assert_eq!(
            super::super::seccomp_fast_path::run(&stacked, &data(1)).map(|r| r.0),
            Some(0x0005_0001)
        );
    }
}
