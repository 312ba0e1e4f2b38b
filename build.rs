//! Build script: compiles the sandbox's seccomp policy (`sandbox/seccomp*.json`,
//! seccompiler's JSON form) to BPF for the target architecture, so that
//! `agent-reach-sandbox` installs ready-made filters instead of parsing and
//! compiling JSON on every start (about 90 µs of its hot path), each with a
//! binary-search fast path in front (see `seccomp_fast_path`); and turns the
//! Landlock rule file `sandbox/landlock.toml` into code (see `rule_file`);
//! and compiles the gRPC definitions under `proto/` (see `compile_protos`).

use std::fmt::Write as _;
use std::path::PathBuf;

#[path = "src/sandbox/seccomp_names.rs"]
mod seccomp_names;

#[path = "src/sandbox/seccomp_merge.rs"]
mod seccomp_merge;

#[path = "src/sandbox/seccomp_fast_path.rs"]
mod seccomp_fast_path;

#[path = "src/sandbox/rule_file.rs"]
#[allow(dead_code, reason = "the runtime half of the module is not used here")]
mod rule_file;

const POLICY_FILES: &[(&str, Option<&str>)] = &[
    ("sandbox/seccomp.json", None),
    ("sandbox/seccomp-x86_64.json", Some("x86_64")),
];

fn main() {
    for (file, _) in POLICY_FILES {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/sandbox/seccomp_merge.rs");
    println!("cargo:rerun-if-changed=src/sandbox/seccomp_fast_path.rs");
    println!("cargo:rerun-if-changed=src/sandbox/rule_file.rs");
    println!("cargo:rerun-if-changed=sandbox/landlock.toml");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    compile_protos(&out_dir);
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let target_arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let arch = match (target_os.as_str(), target_arch.as_str()) {
        ("linux", "x86_64") => Some(seccompiler::TargetArch::x86_64),
        ("linux", "aarch64") => Some(seccompiler::TargetArch::aarch64),
        ("linux", "riscv64") => Some(seccompiler::TargetArch::riscv64),
        _ => None,
    };
    let mut code = String::from(
        "/// Filters compiled from the JSON policy by build.rs, by name.\n\
         pub(crate) static PRECOMPILED: &[(&str, &[seccompiler::sock_filter])] = &[\n",
    );
    if let Some(arch) = arch {
        let texts: Vec<(String, Option<&str>)> = POLICY_FILES
            .iter()
            .map(|(file, only_arch)| {
                let text =
                    std::fs::read_to_string(file).unwrap_or_else(|err| panic!("{file}: {err}"));
                (text, *only_arch)
            })
            .collect();
        let texts: Vec<(&str, Option<&str>)> = texts
            .iter()
            .map(|(text, arch)| (text.as_str(), *arch))
            .collect();
        let policy = seccomp_merge::whole_policy(&texts, &target_arch)
            .unwrap_or_else(|err| panic!("sandbox/seccomp*.json: {err}"));
        let json = serde_json::to_vec(&policy).unwrap_or_else(|err| panic!("policy: {err}"));
        let mut map = seccompiler::compile_from_json(json.as_slice(), arch)
            .unwrap_or_else(|err| panic!("policy: {err}"))
            .into_iter()
            .collect::<Vec<_>>();
        map.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, program) in map {
            let _ = writeln!(code, "    ({name:?}, &[");
            for insn in seccomp_fast_path::with_fast_path(&program) {
                let _ = writeln!(
                    code,
                    "        seccompiler::sock_filter {{ code: {}, jt: {}, jf: {}, k: {} }},",
                    insn.code, insn.jt, insn.jf, insn.k
                );
            }
            code.push_str("    ]),\n");
        }
    }
    code.push_str("];\n");
    let dest = out_dir.join("seccomp_bpf.rs");
    std::fs::write(&dest, code).unwrap_or_else(|err| panic!("{}: {err}", dest.display()));

    // The Landlock rule file, checked and turned into code.
    let rules: rule_file::RuleFile = toml::from_str(rule_file::RULE_FILE)
        .unwrap_or_else(|err| panic!("sandbox/landlock.toml: {err}"));
    let dest = out_dir.join("rule_file.rs");
    std::fs::write(&dest, rules.to_rust())
        .unwrap_or_else(|err| panic!("{}: {err}", dest.display()));
}

/// The gRPC definitions of the network listeners, parsed by protox (no
/// system `protoc`) and turned into prost messages and tonic services, the
/// server for `serve` and the client for the tests and the benchmark.
const PROTO_FILES: &[&str] = &["proto/process/v1/process.proto"];

fn compile_protos(out_dir: &std::path::Path) {
    for file in PROTO_FILES {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors =
        protox::compile(PROTO_FILES, ["proto"]).unwrap_or_else(|err| panic!("proto/: {err}"));
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .out_dir(out_dir)
        .compile_fds(descriptors)
        .unwrap_or_else(|err| panic!("proto/: {err}"));
    compile_envd_protos(out_dir);
}

/// E2B's envd definitions (`serve --listen envd`): prost messages only (the
/// door frames Connect itself), and their descriptor set, which the door's
/// JSON codec reads (`envd_descriptors.bin`, prost-reflect).
const ENVD_PROTO_FILES: &[&str] = &[
    "proto/envd/process/process.proto",
    "proto/envd/filesystem/filesystem.proto",
];

fn compile_envd_protos(out_dir: &std::path::Path) {
    use prost::Message as _;
    for file in ENVD_PROTO_FILES {
        println!("cargo:rerun-if-changed={file}");
    }
    let descriptors = protox::compile(ENVD_PROTO_FILES, ["proto/envd"])
        .unwrap_or_else(|err| panic!("proto/envd: {err}"));
    let dest = out_dir.join("envd_descriptors.bin");
    std::fs::write(&dest, descriptors.encode_to_vec())
        .unwrap_or_else(|err| panic!("{}: {err}", dest.display()));
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(false)
        .out_dir(out_dir)
        .compile_fds(descriptors)
        .unwrap_or_else(|err| panic!("proto/envd: {err}"));
}
