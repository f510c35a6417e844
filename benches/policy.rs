//! Policy evaluation cost: `cargo bench --bench policy`. Figures in BENCHMARKS.md.

use criterion::{criterion_group, criterion_main, Criterion};
use runplane::policy::{ProfileRegistry, ToolCall};
use std::hint::black_box;
use std::time::Duration;

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
    group.finish();
}

criterion_group!(benches, evaluation);
criterion_main!(benches);
