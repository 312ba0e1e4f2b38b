//! What a scheduler slot costs: one slot taken and given back, through the
//! scheduler's own admission, machine-wide (the queue lock, a look at the
//! machine-wide queue, an `open` and `flock` of a slot file, a `close`)
//! against the same scheduler kept to this process (a mutex and counters),
//! in the same run. Run: `cargo bench --bench scheduler`; criterion prints
//! the medians.

use agent_reach::SlotBench;
use criterion::{Criterion, criterion_group, criterion_main};

fn slots(c: &mut Criterion) {
    let Ok(home) = tempfile::tempdir() else {
        eprintln!("scheduler bench: no temporary directory for the home");
        return;
    };
    let machine = SlotBench::new(Some(home.path()));
    let local = SlotBench::new(None);
    let mut group = c.benchmark_group("slot taken and given back");
    group.bench_function("this process only", |b| {
        b.iter(|| assert!(local.take_and_give_back()));
    });
    group.bench_function("machine-wide", |b| {
        b.iter(|| assert!(machine.take_and_give_back()));
    });
    group.finish();
}

criterion_group!(benches, slots);
criterion_main!(benches);
