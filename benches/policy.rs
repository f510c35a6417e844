//! Policy evaluation cost: `cargo bench --bench policy`. Figures in BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, Criterion};
use runplane::policy::{ProfileRegistry, ToolCall};
use std::hint::black_box;
use std::time::Duration;

/// The allocator the `runplane` binary ships with (`src/main.rs`): evaluation allocates a
/// few dozen small strings and vectors, so the system's malloc would measure something
/// the server does not run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn evaluation(c: &mut Criterion) {
    let registry = ProfileRegistry::builtin();
    let Some(safe) = registry.get("headless-safe-sandbox") else {
        return;
    };
    let Some(permissive) = registry.get("headless-permissive-sandbox") else {
        return;
    };
    let mut group = c.benchmark_group("policy");
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_millis(500));
    group.sample_size(30);

    let read = ToolCall {
        tool: "Read",
        path: "/home/dev/repo/src/policy/eval.rs",
        workspace_root: Some("/home/dev/repo"),
        ..Default::default()
    };
    group.bench_function("read_with_path", |b| {
        b.iter(|| safe.evaluate(black_box(&read)))
    });

    let plain = ToolCall {
        tool: "Bash",
        command: "git diff --stat",
        ..Default::default()
    };
    group.bench_function("bash_plain", |b| {
        b.iter(|| safe.evaluate(black_box(&plain)))
    });

    let compound = ToolCall {
        tool: "Bash",
        command: "cd src && grep -rn TODO . | sort > todo.txt; echo \"$(git rev-parse HEAD)\"",
        workspace_root: Some("/home/dev/repo"),
        ..Default::default()
    };
    group.bench_function("bash_compound_5_parts", |b| {
        b.iter(|| permissive.evaluate(black_box(&compound)))
    });

    // The same line with a number in it, cycling through more lines than a thread's memo
    // of split lines holds (1,024), so every evaluation parses: the cost of a line the
    // server has not seen recently.
    let fresh: Vec<String> = (0..4096)
        .map(|i| {
            format!(
                "cd src && grep -rn TODO{i} . | sort > todo.txt; echo \"$(git rev-parse HEAD)\""
            )
        })
        .collect();
    let mut next = 0;
    group.bench_function("bash_compound_5_parts_unseen", |b| {
        b.iter(|| {
            next = (next + 1) % fresh.len();
            let call = ToolCall {
                command: &fresh[next],
                ..compound
            };
            permissive.evaluate(black_box(&call))
        })
    });
    group.finish();
}

/// Lines at the 100,000-byte cap built to be expensive to judge: the budget bounds what
/// any of them costs (the goal: at most 50 ms each).
fn hostile(c: &mut Criterion) {
    let registry = ProfileRegistry::builtin();
    let Some(permissive) = registry.get("headless-permissive-sandbox") else {
        return;
    };
    let mut group = c.benchmark_group("policy_hostile_100k");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_millis(300));
    for (name, unit) in [
        ("pipes", "a|"),
        ("lists", "a;"),
        ("heredocs", "cat <<E "),
        ("substitutions", "$("),
        ("backticks", "\\`"),
        ("subshells", "("),
        ("expansions", "${x:-"),
        ("process_substitutions", "a<(b "),
    ] {
        let line = unit.repeat(99_000 / unit.len());
        let call = ToolCall {
            tool: "Bash",
            command: &line,
            workspace_root: Some("/home/dev/repo"),
            ..Default::default()
        };
        group.bench_function(name, |b| b.iter(|| permissive.evaluate(black_box(&call))));
    }
    group.finish();
}

criterion_group!(benches, evaluation, hostile);
criterion_main!(benches);
