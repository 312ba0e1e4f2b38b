//! In-process cost of apply_patch's pure steps on a 5,000-line file with 200
//! hunks: parsing the patch, applying it with exact matches, and applying it
//! when every line needs the whitespace-tolerant level. The baseline is the
//! floor any line-based patcher pays: splitting the file into lines and
//! joining them again.

use std::hint::black_box;
use std::path::Path;

use agent_reach::apply_patch::{Operation, apply_update, parse};
use criterion::{Criterion, criterion_group, criterion_main};

const LINES: usize = 5000;
const HUNKS: usize = 200;

fn file() -> String {
    (0..LINES)
        .map(|i| format!("    line {i}: some typical source text = value_{i};\n"))
        .collect()
}

/// A patch changing one line in every 25, with 3 lines of context; with
/// `strip_indent` the context and removed lines lose their indentation.
fn patch(strip_indent: bool) -> String {
    let indent = if strip_indent { "" } else { "    " };
    let mut out = String::from("*** Begin Patch\n*** Update File: big.txt\n");
    for hunk in 0..HUNKS {
        let changed = hunk * 25 + 12;
        out.push_str("@@\n");
        for i in changed - 3..changed {
            out.push_str(&format!(
                " {indent}line {i}: some typical source text = value_{i};\n"
            ));
        }
        out.push_str(&format!(
            "-{indent}line {changed}: some typical source text = value_{changed};\n"
        ));
        out.push_str(&format!("+    line {changed}: changed;\n"));
        for i in changed + 1..changed + 4 {
            out.push_str(&format!(
                " {indent}line {i}: some typical source text = value_{i};\n"
            ));
        }
    }
    out.push_str("*** End Patch\n");
    out
}

fn chunks_of(text: &str) -> Vec<agent_reach::apply_patch::Chunk> {
    match parse(text).map(|p| p.operations.into_iter().next()) {
        Ok(Some(Operation::Update { chunks, .. })) => chunks,
        other => panic!("benchmark patch does not parse to one update: {other:?}"),
    }
}

fn bench(c: &mut Criterion) {
    let contents = file();
    let exact = patch(false);
    let fuzzy = patch(true);
    let exact_chunks = chunks_of(&exact);
    let fuzzy_chunks = chunks_of(&fuzzy);
    let mut group = c.benchmark_group("apply_patch_5000_lines_200_hunks");
    group.sample_size(30);
    group.bench_function("baseline_split_and_join_lines", |b| {
        b.iter(|| black_box(contents.split('\n').collect::<Vec<_>>().join("\n")))
    });
    group.bench_function("parse_patch", |b| {
        b.iter(|| black_box(parse(black_box(&exact))))
    });
    group.bench_function("apply_exact", |b| {
        b.iter(|| {
            black_box(apply_update(
                &exact_chunks,
                contents.as_bytes(),
                Path::new("big.txt"),
            ))
        })
    });
    group.bench_function("apply_whitespace_tolerant", |b| {
        b.iter(|| {
            black_box(apply_update(
                &fuzzy_chunks,
                contents.as_bytes(),
                Path::new("big.txt"),
            ))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
