//! Fuzzes the in-memory update: the input is a file and a patch separated by
//! a NUL byte; every Update of the patch is applied to the file. Matching and
//! splicing must never panic, and a result always ends with a newline.

#![no_main]

use std::path::Path;

use agent_reach::apply_patch::{Operation, apply_update, parse};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (file, patch) = (&data[..split], &data[split + 1..]);
    let Ok(patch) = std::str::from_utf8(patch) else {
        return;
    };
    let Ok(parsed) = parse(patch) else {
        return;
    };
    for operation in &parsed.operations {
        if let Operation::Update { chunks, .. } = operation
            && let Ok(updated) = apply_update(chunks, file, Path::new("fuzz"))
        {
            assert!(updated.is_empty() || updated.ends_with(b"\n"));
        }
    }
});
