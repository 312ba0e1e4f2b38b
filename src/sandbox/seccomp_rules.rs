//! The seccomp half: the compiled-in JSON policy (`sandbox/seccomp*.json`,
//! seccompiler's format) compiled for this architecture: a few small
//! filters, installed stacked into one program. build.rs compiles the JSON at build time; the
//! tests check its output against a compile at test time.
//!
//! seccomp sees only syscall numbers and register arguments, never memory:
//! `socket(domain, ...)` can be filtered by family, but `connect` on an
//! existing descriptor cannot, so refusing to *create* non-Unix sockets is the
//! network guard (plus io_uring, which could create them out of seccomp's
//! sight, refused outright). Likewise `clone3` passes its flags in memory, so
//! it gets ENOSYS and libc falls back to `clone`, whose flags are checked.

use seccompiler::{BpfProgram, sock_filter};

use super::error::SandboxError;
use super::policy::Network;
use super::seccomp_names;
use super::seccomp_stack;

mod precompiled {
    //! build.rs's output: the JSON policy compiled for this architecture.
    include!(concat!(env!("OUT_DIR"), "/seccomp_bpf.rs"));
}

/// One filter to install, with what it is for (for error messages).
#[derive(Debug, Clone)]
pub struct NamedFilter {
    pub name: &'static str,
    pub purpose: &'static str,
    pub program: BpfProgram,
}

/// The filters for `network`, compiled for the running architecture.
pub fn filters(network: Network) -> Result<Vec<NamedFilter>, SandboxError> {
    let base = match network {
        Network::Deny => (
            seccomp_names::BASE_NETWORK_DENY,
            "process, kernel, mount and port I/O isolation, --network deny",
        ),
        Network::Allow => (
            seccomp_names::BASE,
            "process, kernel, mount and port I/O isolation",
        ),
    };
    let wanted: Vec<(&'static str, &'static str)> =
        vec![base, ("clone3", "user namespace isolation")];
    let mut out = Vec::with_capacity(wanted.len() + 1);
    for (name, purpose) in wanted {
        let program = precompiled::PRECOMPILED
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, program)| program.to_vec())
            .ok_or_else(|| SandboxError::SeccompPolicy {
                name,
                message: format!(
                    "no filter of that name was compiled for {}",
                    std::env::consts::ARCH
                ),
            })?;
        out.push(NamedFilter {
            name,
            purpose,
            program,
        });
    }
    if cfg!(target_arch = "x86_64") {
        out.push(NamedFilter {
            name: "x32",
            purpose: "closing the x32 syscall numbers around the other filters",
            program: x32_guard(),
        });
    }
    Ok(out)
}

/// Installs the filters on the calling thread, stacked into one program
/// (see [`seccomp_stack`]); `no_new_privs` must be set.
pub fn install(filters: &[NamedFilter]) -> Result<(), SandboxError> {
    let programs: Vec<&[sock_filter]> = filters.iter().map(|f| f.program.as_slice()).collect();
    seccompiler::apply_filter(&seccomp_stack::stack(&programs)).map_err(|err| {
        SandboxError::Seccomp {
            names: filters
                .iter()
                .map(|f| f.name)
                .collect::<Vec<_>>()
                .join(", "),
            purposes: filters
                .iter()
                .map(|f| f.purpose)
                .collect::<Vec<_>>()
                .join("; "),
            message: err.to_string(),
        }
    })
}

/// On x86_64 the x32 ABI reuses the architecture tag with syscall numbers
/// offset by 0x4000_0000, which a filter keyed on exact numbers would miss;
/// seccompiler does not close that gap, so this filter refuses every x32
/// syscall with ENOSYS (nothing a sandboxed tool needs).
fn x32_guard() -> BpfProgram {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
    let ld_abs = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let jeq = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    let jge = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    let insn = |code, jt, jf, k| sock_filter { code, jt, jf, k };
    vec![
        // A = seccomp_data.arch
        insn(ld_abs, 0, 0, 4),
        insn(jeq, 0, 3, AUDIT_ARCH_X86_64),
        // A = seccomp_data.nr
        insn(ld_abs, 0, 0, 0),
        insn(jge, 0, 1, X32_SYSCALL_BIT),
        insn(ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
        insn(ret, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::seccomp_fast_path::{self, with_fast_path};
    use crate::sandbox::seccomp_merge;
    use crate::sandbox::seccomp_stack;
    use seccompiler::TargetArch;

    const ALWAYS_JSON: &str = include_str!("../../sandbox/seccomp.json");
    const X86_64_JSON: &str = include_str!("../../sandbox/seccomp-x86_64.json");

    fn compile(json: &str, arch: TargetArch) -> std::collections::HashMap<String, BpfProgram> {
        seccompiler::compile_from_json(json.as_bytes(), arch).unwrap()
    }

    fn target_arch() -> TargetArch {
        if cfg!(target_arch = "aarch64") {
            TargetArch::aarch64
        } else if cfg!(target_arch = "riscv64") {
            TargetArch::riscv64
        } else {
            TargetArch::x86_64
        }
    }

    /// The whole policy for this architecture, compiled now by seccompiler
    /// (no fast path).
    fn compile_policy_now() -> std::collections::HashMap<String, BpfProgram> {
        let texts = [(ALWAYS_JSON, None), (X86_64_JSON, Some("x86_64"))];
        let policy = seccomp_merge::whole_policy(&texts, std::env::consts::ARCH).unwrap();
        compile(&serde_json::to_string(&policy).unwrap(), target_arch())
    }

    /// What the decision tests feed the filters (`seccomp_data` as words):
    /// syscall numbers 0..1024, x32 ones and the largest, under each of
    /// `archs`, with every argument's low word set to each of a spread of
    /// values (flags, families, ioctl requests) and the second's high word
    /// to 0 and 1.
    fn inputs(archs: &[u32]) -> Vec<[u32; 16]> {
        let values = [
            0u32,
            1,
            2,
            3,
            10,
            16,
            17,
            0x5412,
            0x541c,
            0x8000,
            0x1000_0000,
            0x2000_0000,
            0x7e02_0000,
            u32::MAX,
        ];
        let numbers = (0..1024).chain([0x4000_0000, 0x4000_0010, 0x4000_01b3, u32::MAX]);
        let mut out = Vec::new();
        for nr in numbers {
            for arch in archs {
                for value in values {
                    let mut data = [0u32; 16];
                    data[0] = nr;
                    data[1] = *arch;
                    for word in [4, 6, 8, 10, 12, 14] {
                        data[word] = value;
                    }
                    data[7] = value & 1;
                    out.push(data);
                }
            }
        }
        out
    }

    /// The native architecture tag a program checks, a foreign one (i386)
    /// and another (aarch64).
    fn archs(program: &[sock_filter]) -> [u32; 3] {
        [program[1].k, 0x4000_0003, 0xc000_00b7]
    }

    #[test]
    fn precompiled_filters_match_a_compile_now() {
        let expected = compile_policy_now();
        assert_eq!(precompiled::PRECOMPILED.len(), expected.len());
        for (name, program) in precompiled::PRECOMPILED {
            let expected = expected.get(*name).map(|p| with_fast_path(p));
            assert_eq!(Some(program.to_vec()), expected, "{name}");
        }
    }

    /// The installed filters, fast path and all, decide every input as
    /// seccompiler's plain chain does.
    #[test]
    fn fast_path_filters_decide_as_the_plain_chain() {
        let plain = compile_policy_now();
        let mut fast_paths = 0;
        for (name, program) in precompiled::PRECOMPILED {
            let chain = &plain[*name];
            if program.len() > chain.len() {
                fast_paths += 1;
            }
            for data in inputs(&archs(program)) {
                let decide = |p: &[sock_filter]| seccomp_fast_path::run(p, &data).map(|r| r.0);
                let expected = decide(chain);
                assert!(expected.is_some(), "{name}: {data:x?} ran off the program");
                assert_eq!(decide(program), expected, "{name}: {data:x?}");
            }
        }
        assert!(fast_paths >= 2, "the merged filters lost their fast path");
    }

    /// The one program installed decides every input as the filters
    /// installed one by one would.
    #[test]
    fn the_stacked_program_decides_as_separate_filters() {
        for network in [Network::Deny, Network::Allow] {
            let filters = filters(network).unwrap();
            let programs: Vec<&[sock_filter]> =
                filters.iter().map(|f| f.program.as_slice()).collect();
            let stacked = seccomp_stack::stack(&programs);
            for data in inputs(&archs(programs[0])) {
                let separate = seccomp_stack::kernel_decision(&programs, &data);
                assert!(
                    separate.is_some(),
                    "{network:?}: {data:x?} ran off a program"
                );
                assert_eq!(
                    seccomp_fast_path::run(&stacked, &data).map(|r| r.0),
                    separate,
                    "{network:?}: {data:x?}"
                );
            }
        }
    }

    #[test]
    fn policy_compiles_for_every_supported_architecture() {
        for arch in [TargetArch::x86_64, TargetArch::aarch64, TargetArch::riscv64] {
            let map = compile(ALWAYS_JSON, arch);
            for name in ["always", "clone3", "network_deny"] {
                assert!(
                    map.get(name).is_some_and(|p| !p.is_empty()),
                    "{name} {arch:?}"
                );
            }
        }
        let x86 = compile(X86_64_JSON, TargetArch::x86_64);
        assert!(x86.contains_key("always_x86_64"));
    }

    #[test]
    fn network_filter_only_when_denied() {
        let names =
            |network| -> Vec<&str> { filters(network).unwrap().iter().map(|f| f.name).collect() };
        assert!(names(Network::Deny).contains(&seccomp_names::BASE_NETWORK_DENY));
        assert!(!names(Network::Allow).contains(&seccomp_names::BASE_NETWORK_DENY));
        assert!(names(Network::Allow).contains(&seccomp_names::BASE));
        assert!(names(Network::Allow).contains(&"clone3"));
    }

    #[test]
    fn x32_guard_jumps_stay_inside_the_program() {
        let program = x32_guard();
        let ret = (libc::BPF_RET | libc::BPF_K) as u16;
        assert_eq!(program.last().map(|insn| insn.code), Some(ret));
        for (index, insn) in program
            .iter()
            .enumerate()
            .filter(|(_, insn)| insn.code != ret)
        {
            let last = index + 1 + usize::from(insn.jt.max(insn.jf));
            assert!(last < program.len(), "instruction {index} jumps out");
        }
    }
}
