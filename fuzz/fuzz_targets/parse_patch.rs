//! Fuzzes the patch parser: any text, wrapper or not, must parse or give an
//! error, never panic, and an error must name a line inside the text.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(error) = agent_reach::apply_patch::parse(text) {
        if let Some(line) = error.line {
            assert!(line >= 1 && line <= text.lines().count().max(1));
        }
    }
});
