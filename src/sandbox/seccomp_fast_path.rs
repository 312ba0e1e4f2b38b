//! A binary-search fast path in front of seccompiler's filters, added at
//! build time (build.rs includes this file too).
//!
//! seccompiler compiles a filter to one linear chain, a comparison per listed
//! syscall. Installing a filter makes the kernel evaluate it for every
//! syscall number to fill its allow cache, and a walk down a 45-syscall
//! chain for each of ~450 numbers was most of the sandbox's seccomp cost.
//! The fast path sends a number that the chain does not list straight to
//! the chain's own no-match action after a handful of comparisons, and any
//! listed number into the untouched chain, so what each syscall gets is the
//! same; the tests check that by running both programs.

use seccompiler::sock_filter;

const LD_W_ABS: u16 = 0x20;
const JMP_JA: u16 = 0x05;
const JMP_JEQ_K: u16 = 0x15;
const JMP_JGT_K: u16 = 0x25;
const JMP_JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
/// `seccomp_data.nr` and `.arch` offsets.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
/// The prologue's length: load arch, compare, return on mismatch, load nr.
const PROLOGUE: usize = 4;
/// Below this many listed syscalls the chain is short enough as it is.
const MIN_LISTED: usize = 8;

/// `program` with the fast path inserted after its prologue, or unchanged
/// when it does not have seccompiler's shape or lists few syscalls.
pub(crate) fn with_fast_path(program: &[sock_filter]) -> Vec<sock_filter> {
    let Some((listed, no_match)) = chain_shape(program) else {
        return program.to_vec();
    };
    if listed.len() < MIN_LISTED {
        return program.to_vec();
    }
    let Some(tree) = membership_tree(&ranges(&listed), no_match) else {
        return program.to_vec();
    };
    let mut out = program[..PROLOGUE].to_vec();
    out.extend(tree);
    out.extend_from_slice(&program[PROLOGUE..]);
    out
}

/// The syscall numbers the chain compares, in order, and its final no-match
/// return; `None` unless the program is the prologue plus a chain of
/// `jeq nr; ja block; ja next` heads ending in a return.
fn chain_shape(program: &[sock_filter]) -> Option<(Vec<u32>, sock_filter)> {
    let insn = |i: usize| program.get(i).cloned();
    let (load_arch, check_arch, load_nr) = (insn(0)?, insn(1)?, insn(3)?);
    if (load_arch.code, load_arch.k) != (LD_W_ABS, ARCH_OFFSET)
        || check_arch.code != JMP_JEQ_K
        || (load_nr.code, load_nr.k) != (LD_W_ABS, NR_OFFSET)
        || usize::from(check_arch.jt) + 2 >= PROLOGUE
        || usize::from(check_arch.jf) + 2 >= PROLOGUE
    {
        return None;
    }
    // Where unconditional jumps starting at `at` lead.
    let follow = |mut at: usize| -> Option<usize> {
        while insn(at)?.code == JMP_JA {
            at = at.checked_add(1 + insn(at)?.k as usize)?;
        }
        Some(at)
    };
    let mut listed = Vec::new();
    let mut head = PROLOGUE;
    loop {
        let compare = insn(head)?;
        if compare.code == RET_K {
            return Some((listed, compare));
        }
        let (to_block, to_next) = (insn(head + 1)?, insn(head + 2)?);
        if compare.code != JMP_JEQ_K
            || (compare.jt, compare.jf) != (0, 1)
            || to_block.code != JMP_JA
            || to_next.code != JMP_JA
        {
            return None;
        }
        listed.push(compare.k);
        head = follow(head + 2)?;
    }
}

/// Sorted, merged runs of consecutive numbers.
fn ranges(numbers: &[u32]) -> Vec<(u32, u32)> {
    let mut sorted = numbers.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for n in sorted {
        match out.last_mut() {
            Some((_, hi)) if hi.checked_add(1) == Some(n) => *hi = n,
            _ => out.push((n, n)),
        }
    }
    out
}

/// Where a generated jump goes before the tree's length is known.
#[derive(Clone, Copy)]
enum Target {
    /// The next instruction.
    Next,
    /// A later instruction of the tree.
    At(usize),
    /// The no-match return placed after the tree.
    NoMatch,
    /// The untouched chain, right after that return.
    Chain,
}

struct Jump {
    code: u16,
    k: u32,
    on_true: Target,
    on_false: Target,
}

/// A binary search over `ranges` that jumps into the chain for a listed
/// number and to a copy of `no_match` otherwise; `None` if a jump would not
/// fit classic BPF's 8-bit offsets.
fn membership_tree(ranges: &[(u32, u32)], no_match: sock_filter) -> Option<Vec<sock_filter>> {
    let mut jumps = Vec::new();
    emit(ranges, &mut jumps);
    let no_match_at = jumps.len();
    let offset = |from: usize, target: Target| -> Option<u8> {
        let to = match target {
            Target::Next => from + 1,
            Target::At(at) => at,
            Target::NoMatch => no_match_at,
            Target::Chain => no_match_at + 1,
        };
        u8::try_from(to.checked_sub(from + 1)?).ok()
    };
    let mut out = Vec::with_capacity(jumps.len() + 1);
    for (at, jump) in jumps.iter().enumerate() {
        out.push(sock_filter {
            code: jump.code,
            jt: offset(at, jump.on_true)?,
            jf: offset(at, jump.on_false)?,
            k: jump.k,
        });
    }
    out.push(no_match);
    Some(out)
}

/// Appends the search over `ranges` (a number below the first range's start
/// was already sent elsewhere by the caller, if at all).
fn emit(ranges: &[(u32, u32)], jumps: &mut Vec<Jump>) {
    match ranges {
        // Nothing listed: on to the no-match return that follows the tree.
        [] => {}
        [(lo, hi)] if lo == hi => jumps.push(Jump {
            code: JMP_JEQ_K,
            k: *lo,
            on_true: Target::Chain,
            on_false: Target::NoMatch,
        }),
        [(lo, hi)] => {
            jumps.push(Jump {
                code: JMP_JGE_K,
                k: *lo,
                on_true: Target::Next,
                on_false: Target::NoMatch,
            });
            jumps.push(Jump {
                code: JMP_JGT_K,
                k: *hi,
                on_true: Target::NoMatch,
                on_false: Target::Chain,
            });
        }
        _ => {
            let (left, right) = ranges.split_at(ranges.len() / 2);
            let split = jumps.len();
            jumps.push(Jump {
                code: JMP_JGE_K,
                k: right[0].0,
                on_true: Target::Next, // patched below
                on_false: Target::Next,
            });
            emit(left, jumps);
            jumps[split].on_true = Target::At(jumps.len());
            emit(right, jumps);
        }
    }
}

/// Runs a classic BPF seccomp program on one `seccomp_data` (as 32-bit
/// words): its return value and how many instructions ran. For tests, which
/// compare programs by running them; a load beyond the data or an
/// instruction seccomp's programs do not use gives `None`.
#[cfg(test)]
pub(crate) fn run(program: &[sock_filter], data: &[u32; 16]) -> Option<(u32, usize)> {
    let (mut acc, mut pc) = (0u32, 0usize);
    for steps in 1.. {
        let insn = program.get(pc)?;
        let jump = |taken: bool| pc + 1 + usize::from(if taken { insn.jt } else { insn.jf });
        pc = match insn.code {
            LD_W_ABS => {
                acc = *data.get(usize::try_from(insn.k / 4).ok()?)?;
                pc + 1
            }
            0x54 => {
                acc &= insn.k;
                pc + 1
            }
            JMP_JA => pc + 1 + insn.k as usize,
            JMP_JEQ_K => jump(acc == insn.k),
            JMP_JGT_K => jump(acc > insn.k),
            JMP_JGE_K => jump(acc >= insn.k),
            0x45 => jump(acc & insn.k != 0),
            RET_K => return Some((insn.k, steps)),
            _ => return None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    /// seccompiler's shape: prologue, then per number `jeq; ja block; ja
    /// next` and a one-instruction block returning `errno`.
    fn chain(numbers: &[u32]) -> Vec<sock_filter> {
        let mut program = vec![
            insn(LD_W_ABS, 0, 0, ARCH_OFFSET),
            insn(JMP_JEQ_K, 1, 0, 0xc000_003e),
            insn(RET_K, 0, 0, 0x8000_0000),
            insn(LD_W_ABS, 0, 0, NR_OFFSET),
        ];
        for n in numbers {
            program.push(insn(JMP_JEQ_K, 0, 1, *n));
            program.push(insn(JMP_JA, 0, 0, 1));
            program.push(insn(JMP_JA, 0, 0, 1));
            program.push(insn(RET_K, 0, 0, 0x0005_0001));
        }
        program.push(insn(RET_K, 0, 0, 0x7fff_0000));
        program
    }

    fn data(nr: u32, arch: u32) -> [u32; 16] {
        let mut data = [0u32; 16];
        data[0] = nr;
        data[1] = arch;
        data
    }

    #[test]
    fn runs_merge_consecutive_numbers() {
        assert_eq!(
            ranges(&[5, 1, 2, 3, 9, 10, 3]),
            vec![(1, 3), (5, 5), (9, 10)]
        );
        assert_eq!(ranges(&[u32::MAX, 0]), vec![(0, 0), (u32::MAX, u32::MAX)]);
    }

    #[test]
    fn the_fast_path_answers_every_number_as_the_chain_does() {
        let numbers = [3, 4, 5, 16, 41, 100, 101, 102, 200, 300, 301, 435];
        let original = chain(&numbers);
        let fast = with_fast_path(&original);
        assert!(fast.len() > original.len(), "the fast path was not added");
        for arch in [0xc000_003e, 0x4000_0003] {
            for nr in (0..1024).chain([0x4000_0000, 0x4000_0010, u32::MAX]) {
                let action = |program: &[sock_filter]| run(program, &data(nr, arch)).map(|r| r.0);
                assert!(action(&original).is_some());
                assert_eq!(action(&fast), action(&original), "nr {nr} arch {arch:#x}");
            }
        }
    }

    #[test]
    fn an_unlisted_number_takes_a_few_comparisons() {
        let numbers: Vec<u32> = (0..45).map(|i| i * 7).collect();
        let original = chain(&numbers);
        let fast = with_fast_path(&original);
        let steps = |program: &[sock_filter], nr| run(program, &data(nr, 0xc000_003e)).map(|r| r.1);
        // Prologue, at most ceil(log2(45)) + 2 comparisons, the return.
        assert!(
            steps(&fast, 1).is_some_and(|n| n <= 4 + 8 + 1),
            "{:?}",
            steps(&fast, 1)
        );
        assert!(steps(&fast, 1000).is_some_and(|n| n <= 4 + 8 + 1));
        assert!(steps(&original, 1000).is_some_and(|n| n > 45));
    }

    #[test]
    fn other_shapes_are_left_alone() {
        let short = chain(&[1, 2]);
        assert_eq!(with_fast_path(&short), short);
        let mut odd = chain(&(0..20).collect::<Vec<_>>());
        odd[3].k = 8; // loads an argument instead of the number
        assert_eq!(with_fast_path(&odd), odd);
    }
}
