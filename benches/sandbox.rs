//! In-process costs of the sandbox's hot path (everything `agent-reach-sandbox`
//! does before exec that is not a syscall): flag parsing, the rule file, the
//! seccomp compile and the filesystem plan. The whole-process figure against
//! bare `true` and bubblewrap is `benches/sandbox.sh`.

#[cfg(target_os = "linux")]
mod linux {
    use std::ffi::OsString;
    use std::hint::black_box;
    use std::path::{Path, PathBuf};

    use agent_reach::sandbox::fs_plan::{self, RuleFile};
    use agent_reach::sandbox::{Network, Policy, args, seccomp_rules};
    use criterion::{Criterion, criterion_group};

    fn hot_path(c: &mut Criterion) {
        let argv: Vec<OsString> = [
            "--policy",
            "workspace-write",
            "--network",
            "deny",
            "--",
            "true",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        c.bench_function("sandbox/parse_flags", |b| {
            b.iter(|| args::parse(black_box(&argv), None))
        });
        c.bench_function("sandbox/rule_file", |b| b.iter(RuleFile::builtin));
        c.bench_function("sandbox/seccomp_filters_deny", |b| {
            b.iter(|| seccomp_rules::filters(black_box(Network::Deny)))
        });
        let rules = RuleFile::builtin();
        let roots = fs_plan::candidate_roots(
            Policy::WorkspaceWrite,
            Path::new("/tmp"),
            &[],
            &rules,
            |_| None,
        );
        let protected: Vec<PathBuf> = vec!["/tmp/.git".into()];
        c.bench_function("sandbox/split_tmp_around_git", |b| {
            b.iter(|| {
                fs_plan::split_writable(black_box(&roots), &[], &protected, fs_plan::list_dir)
            })
        });
    }

    criterion_group!(benches, hot_path);
}

#[cfg(target_os = "linux")]
criterion::criterion_main!(linux::benches);

/// The sandbox exists only on Linux.
#[cfg(not(target_os = "linux"))]
fn main() {}
