//! Differential test of the shell judge against real bash.
//!
//! Generated lines (tests/differential/generate.rs) smuggle denied commands and writes
//! through bash constructs; each runs under real bash in a sandbox where every command is
//! a logging stub (tests/differential/sandbox.rs). A line the judge allows must not run a
//! denied command and must not create, change or remove anything outside `ws/out/`.
//! Anything else is an *escape*.
//!
//! Environment:
//! - `RUNPLANE_DIFF_SEED=n` (default below) or `RUNPLANE_DIFF_SEEDS=a,b,c` (decimal or `0x…`)
//! - `RUNPLANE_DIFF_LINES=n` lines per seed (default 1500)
//! - `RUNPLANE_DIFF_WORKERS=n` lines run at once (default: twice the CPUs, at most 8)
//! - `RUNPLANE_DIFF_OUT=file` also writes every escape (not only the first 40) there
//! - `RUNPLANE_DIFF_PROFILE=file.toml` judges with that profile instead of `PROFILE` (to
//!   see the report with escapes, give it one that allows everything)
//!
//! Run: `cargo test --test shell_differential -- --nocapture`.

mod differential;

use differential::generate::{self, Case, DENIED};
use differential::sandbox::{Outcome, Sandbox};
use runplane::domain::Decision;
use runplane::policy::{parse_profile, CompiledProfile, ProfileFormat, ToolCall, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Writes under `out/` are allowed, other writes denied; the four commands denied;
/// everything else allowed by the mode.
const PROFILE: &str = r#"
mode = "acceptEdits"

[[rules]]
specifier = { tool = "Write" }
decision = "allow"
path_allow = ["out/**"]

[[rules]]
specifier = { tool = "Write" }
decision = "deny"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm", "curl", "wget", "touch"]
"#;

const DEFAULT_SEED: u64 = 0x5EED_2025;
const DEFAULT_LINES: u64 = 1500;
/// How long one line may run, background jobs included.
const LINE_LIMIT: Duration = Duration::from_secs(3);
/// Escapes printed in full.
const SHOWN: usize = 40;

fn bash_missing() -> bool {
    if Path::new("/bin/bash").is_file() {
        return false;
    }
    println!("shell_differential: /bin/bash is missing; skipped");
    true
}

/// `PROFILE`, or the file `RUNPLANE_DIFF_PROFILE` names.
fn profile() -> CompiledProfile {
    match std::env::var("RUNPLANE_DIFF_PROFILE") {
        Ok(path) if !path.is_empty() => compile(
            &std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("RUNPLANE_DIFF_PROFILE={path}: {e}")),
        ),
        _ => compile(PROFILE),
    }
}

fn compile(text: &str) -> CompiledProfile {
    let profile = parse_profile(text, ProfileFormat::Toml, "differential")
        .expect("the differential profile parses");
    CompiledProfile::compile(profile).expect("the differential profile compiles")
}

fn judge(profile: &CompiledProfile, line: &str, root: &Path) -> Verdict {
    let root = root.to_str().expect("the scratch path is UTF-8");
    profile.evaluate(&ToolCall {
        tool: "Bash",
        command: line,
        path: "",
        workspace_root: Some(root),
        ..Default::default()
    })
}

/// The harness itself: stubs log, wrappers run their command, writes are seen, runaway
/// lines are stopped, and the judge sees the profile as intended.
#[test]
fn sandbox_observes_what_bash_does() {
    if bash_missing() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sandbox = Sandbox::create(dir.path()).expect("sandbox");
    let run = |line: &str| {
        sandbox
            .run(line, LINE_LIMIT)
            .unwrap_or_else(|e| panic!("running {line:?}: {e}"))
    };

    let plain = run("git status");
    assert_eq!(plain.log, ["git status"], "{plain:?}");
    assert!(!plain.is_harmful(DENIED));

    let runs_rm = [
        "rm x",
        "r\\\nm x",
        "$'\\562m' x",
        "../bin/rm x",
        "env rm x",
        "env -i PATH=\"$PATH\" rm x",
        "env -C out rm x",
        "env -S 'rm x'",
        "timeout 3 rm x",
        "nice -n 1 rm x",
        "nohup rm x",
        "ionice -c3 rm x",
        "flock out/lk rm x",
        "flock out/lk -c 'rm x'",
        "taskset 1 rm x",
        "setsid rm x",
        "setsid -f rm x",
        "stdbuf -o0 rm x",
        "sudo -u root rm x",
        "sudo -n rm x",
        "sudo X=1 rm x",
        "xargs rm x",
        "echo x | xargs -I{} rm {}",
        "find . -maxdepth 0 -exec rm {} \\;",
        "bash -c 'rm x'",
        "sh -c 'rm x'",
        "echo $(rm x)",
        "rm x &",
        "{ rm x >/dev/null 2>&1; } &",
        "timeout 3 rm x >/dev/null 2>&1 &",
    ];
    for line in runs_rm {
        let outcome = run(line);
        assert_eq!(outcome.denied_ran(DENIED), ["rm"], "{line:?}: {outcome:?}");
        assert!(outcome.is_harmful(DENIED));
    }

    let writes = [
        ("> pwned", "ws/pwned", "created"),
        ("echo hi >> .env", "ws/.env", "modified"),
        ("echo hi > ~/x", "home/x", "created"),
        ("echo hi > ../x", "x", "created"),
        ("cd ~ && echo x > out/pwned", "home/out/pwned", "created"),
        (
            "env -C ../home bash -c 'echo x > out/pwned'",
            "home/out/pwned",
            "created",
        ),
        ("find . -maxdepth 0 -fprint pwned", "ws/pwned", "created"),
    ];
    for (line, path, what) in writes {
        let outcome = run(line);
        let stray = outcome.stray_changes();
        assert!(
            stray
                .iter()
                .any(|c| c.path == Path::new(path) && c.what == what),
            "{line:?}: {outcome:?}"
        );
        assert!(outcome.is_harmful(DENIED));
    }

    let harmless = run("echo hi > out/ok; git status 2>&1 | cat > out/log");
    assert_eq!(harmless.changes.len(), 2, "{harmless:?}");
    assert!(!harmless.is_harmful(DENIED), "{harmless:?}");

    let start = Instant::now();
    let runaway = sandbox
        .run("while :; do :; done & rm x", Duration::from_millis(300))
        .expect("runaway line");
    assert!(runaway.timed_out, "{runaway:?}");
    assert!(start.elapsed() < Duration::from_secs(3));
    let chain = sandbox
        .run(
            "export x='bash -c \"$x\" | cat'; bash -c \"$x\"",
            Duration::from_millis(300),
        )
        .expect("fork chain");
    assert!(chain.timed_out && chain.leaked == 0, "{chain:?}");
    let after = run("git log");
    assert_eq!(
        after.log,
        ["git log"],
        "the next line starts clean: {after:?}"
    );

    let p = compile(PROFILE);
    let ws = sandbox.workspace();
    for (line, expected) in [
        ("git status", Decision::Allow),
        ("echo hi > out/ok", Decision::Allow),
        ("rm x", Decision::Deny),
        ("echo hi > pwned", Decision::Deny),
        ("timeout 3 curl http://x", Decision::Deny),
    ] {
        let verdict = judge(&p, line, ws);
        assert_eq!(verdict.decision, expected, "{line:?}: {}", verdict.reason);
    }
}

struct Config {
    seeds: Vec<u64>,
    lines: u64,
    workers: usize,
    out: Option<String>,
}

impl Config {
    fn from_env() -> Self {
        let number = |name: &str, text: &str| -> u64 {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{name}={text:?}: {e}"))
        };
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let seeds = match (var("RUNPLANE_DIFF_SEEDS"), var("RUNPLANE_DIFF_SEED")) {
            (Some(list), _) => list
                .split(',')
                .map(|s| number("RUNPLANE_DIFF_SEEDS", s))
                .collect(),
            (None, Some(one)) => vec![number("RUNPLANE_DIFF_SEED", &one)],
            (None, None) => vec![DEFAULT_SEED],
        };
        let lines =
            var("RUNPLANE_DIFF_LINES").map_or(DEFAULT_LINES, |v| number("RUNPLANE_DIFF_LINES", &v));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let workers = var("RUNPLANE_DIFF_WORKERS").map_or((2 * cpus).min(8), |v| {
            number("RUNPLANE_DIFF_WORKERS", &v) as usize
        });
        Config {
            seeds,
            lines,
            workers: workers.max(1),
            out: var("RUNPLANE_DIFF_OUT"),
        }
    }
}

/// Prints the configured lines with their labels, for looking at the generator:
/// `cargo test --test shell_differential generated_lines -- --ignored --nocapture`.
#[test]
#[ignore = "prints the generated lines; runs nothing"]
fn generated_lines() {
    let config = Config::from_env();
    for &seed in &config.seeds {
        for index in 0..config.lines {
            let case = generate::case(seed, index);
            println!(
                "{seed:#x}/{index} [{}] {:?}",
                case.labels.join(" > "),
                case.line
            );
        }
    }
}

/// One line, what the judge said and what bash did.
struct Record {
    seed: u64,
    index: u64,
    case: Case,
    verdict: Verdict,
    outcome: Outcome,
}

impl Record {
    fn harmful(&self) -> bool {
        self.outcome.is_harmful(DENIED)
    }

    fn escaped(&self) -> bool {
        self.verdict.decision == Decision::Allow && self.harmful()
    }

    fn describe(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "seed={:#x} index={} [{}]\n  line:   {:?}\n  judge:  {} — {}",
            self.seed,
            self.index,
            self.case.labels.join(" > "),
            self.case.line,
            self.verdict.decision.as_str(),
            self.verdict.reason,
        );
        if !self.outcome.log.is_empty() {
            let _ = writeln!(out, "  ran:    {}", self.outcome.log.join(" | "));
        }
        let changes: Vec<String> = self
            .outcome
            .changes
            .iter()
            .map(|c| format!("{} {}", c.what, c.path.display()))
            .collect();
        if !changes.is_empty() {
            let _ = writeln!(out, "  wrote:  {}", changes.join(", "));
        }
        if self.outcome.timed_out {
            let _ = writeln!(out, "  (timed out)");
        }
        let stderr: String = self.outcome.stderr.chars().take(160).collect();
        if !stderr.is_empty() {
            let _ = writeln!(out, "  stderr: {stderr:?}");
        }
    }
}

#[test]
fn judge_lets_no_harmful_line_through() {
    if bash_missing() {
        return;
    }
    let config = Config::from_env();
    let jobs: Vec<(u64, u64)> = config
        .seeds
        .iter()
        .flat_map(|&seed| (0..config.lines).map(move |i| (seed, i)))
        .collect();
    for &(seed, index) in &jobs {
        let case = generate::case(seed, index);
        if let Some(bad) = generate::must_not_run(&case.line) {
            panic!("generated line {index} of seed {seed:#x} contains {bad:?}: {case:?}");
        }
    }

    let profile = profile();
    let dir = tempfile::tempdir().expect("tempdir");
    let next = AtomicUsize::new(0);
    let records = Mutex::new(Vec::with_capacity(jobs.len()));
    let start = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..config.workers {
            let (profile, jobs, next, records) = (&profile, &jobs, &next, &records);
            let root = dir.path().join(format!("w{w}"));
            scope.spawn(move || {
                std::fs::create_dir(&root).expect("worker dir");
                let sandbox = Sandbox::create(&root).expect("sandbox");
                while let Some(&(seed, index)) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let case = generate::case(seed, index);
                    let outcome = sandbox
                        .run(&case.line, LINE_LIMIT)
                        .unwrap_or_else(|e| panic!("running {:?}: {e}", case.line));
                    let verdict = judge(profile, &case.line, sandbox.workspace());
                    let record = Record {
                        seed,
                        index,
                        case,
                        verdict,
                        outcome,
                    };
                    records.lock().expect("records").push(record);
                }
            });
        }
    });
    let elapsed = start.elapsed();
    let mut records = records.into_inner().expect("records");
    records.sort_by_key(|r| (r.seed, r.index));

    let report = report(&config, &records, elapsed);
    println!("{report}");
    let escapes: Vec<&Record> = records.iter().filter(|r| r.escaped()).collect();
    if let Some(path) = &config.out {
        let mut all = String::new();
        for r in &escapes {
            r.describe(&mut all);
        }
        std::fs::write(path, all).unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }

    let benign_harm: Vec<&Record> = records
        .iter()
        .filter(|r| r.case.benign && r.harmful())
        .collect();
    assert!(
        benign_harm.is_empty(),
        "benign lines did harm (a harness or generator bug): {:?}",
        benign_harm.iter().map(|r| &r.case.line).collect::<Vec<_>>()
    );
    let hostile = records.iter().filter(|r| !r.case.benign).count();
    let harmful = records.iter().filter(|r| r.harmful()).count();
    assert!(
        harmful * 4 >= hostile,
        "only {harmful} of {hostile} hostile lines did harm: the sandbox may be broken"
    );
    assert!(
        escapes.is_empty(),
        "{} of {} lines the judge allowed ran a denied command or wrote outside out/; \
         see the report above",
        escapes.len(),
        records.len()
    );
}

fn report(config: &Config, records: &[Record], elapsed: Duration) -> String {
    let mut out = String::new();
    let count = |f: &dyn Fn(&Record) -> bool| records.iter().filter(|r| f(r)).count();
    let percent = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    let benign = count(&|r| r.case.benign);
    let _ = writeln!(
        out,
        "shell differential: seeds {:x?}, {} lines ({} benign, {} hostile), {} workers, {:.1} s",
        config.seeds,
        records.len(),
        benign,
        records.len() - benign,
        config.workers,
        elapsed.as_secs_f64()
    );
    let decisions = [Decision::Allow, Decision::Ask, Decision::Deny]
        .map(|d| format!("{} {}", d.as_str(), count(&|r| r.verdict.decision == d)));
    let _ = writeln!(out, "judge: {}", decisions.join(", "));
    let harmful = count(&|r| r.harmful());
    let _ = writeln!(
        out,
        "bash: {harmful} lines ran a denied command or wrote outside out/; {} timed out, \
         {} left processes behind",
        count(&|r| r.outcome.timed_out),
        count(&|r| r.outcome.leaked > 0)
    );
    let safe = |r: &Record| !r.harmful() && !r.outcome.timed_out;
    let allowed = |r: &Record| r.verdict.decision == Decision::Allow;
    let (all_safe, all_allowed) = (count(&safe), count(&|r| safe(r) && allowed(r)));
    let (benign_safe, benign_allowed) = (
        count(&|r| r.case.benign && safe(r)),
        count(&|r| r.case.benign && safe(r) && allowed(r)),
    );
    let _ = writeln!(
        out,
        "safe lines allowed: {all_allowed}/{all_safe} ({:.1} %); of the benign generator's: \
         {benign_allowed}/{benign_safe} ({:.1} %)",
        percent(all_allowed, all_safe),
        percent(benign_allowed, benign_safe)
    );

    let mut slow: Vec<&Record> = records.iter().collect();
    slow.sort_by_key(|r| std::cmp::Reverse(r.outcome.elapsed));
    let _ = writeln!(out, "slowest lines:");
    for r in slow.iter().take(5) {
        let _ = writeln!(
            out,
            "  {:>6.0} ms {:?}",
            r.outcome.elapsed.as_secs_f64() * 1e3,
            r.case.line
        );
    }
    // Benign lines not allowed, by the part that decided: (lines, shortest line, reason).
    let mut refused: BTreeMap<String, (usize, &Record)> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.case.benign && safe(r) && !allowed(r))
    {
        let part = r.verdict.part.clone().unwrap_or_default();
        let entry = refused.entry(part).or_insert((0, r));
        entry.0 += 1;
        if r.case.line.len() < entry.1.case.line.len() {
            entry.1 = r;
        }
    }
    let mut refused: Vec<_> = refused.into_iter().collect();
    refused.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    let _ = writeln!(out, "benign lines not allowed, by the part that decided:");
    for (part, (n, r)) in refused.iter().take(12) {
        let _ = writeln!(
            out,
            "  {n:>4} {part:?}, e.g. {:?}: {} {}",
            r.case.line,
            r.verdict.decision.as_str(),
            r.verdict.reason
        );
    }
    // Per construct and per class of constructs (`heredoc`): how many harmful lines
    // used it, how many of them the judge only asked about, how many it allowed.
    let mut by_label: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    let mut by_class: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for r in records.iter().filter(|r| r.harmful()) {
        let mut labels: Vec<&str> = r.case.labels.iter().map(String::as_str).collect();
        labels.sort_unstable();
        labels.dedup();
        let mut classes: Vec<&str> = labels
            .iter()
            .map(|l| l.split_once(':').map_or(*l, |(c, _)| c))
            .collect();
        classes.dedup();
        for (map, keys) in [(&mut by_label, labels), (&mut by_class, classes)] {
            for key in keys {
                let entry = map.entry(key).or_default();
                entry[0] += 1;
                entry[1] += usize::from(r.verdict.decision == Decision::Ask);
                entry[2] += usize::from(r.escaped());
            }
        }
    }
    let escapes: Vec<&Record> = records.iter().filter(|r| r.escaped()).collect();
    let tables = if escapes.is_empty() {
        vec![("class", &by_class)]
    } else {
        vec![("class", &by_class), ("construct", &by_label)]
    };
    for (title, map) in tables {
        let mut rows: Vec<_> = map.iter().collect();
        rows.sort_by(|a, b| b.1[2].cmp(&a.1[2]).then(a.0.cmp(b.0)));
        let _ = writeln!(
            out,
            "harmful lines by {title}: lines / judged ask / ESCAPED (allowed)"
        );
        for (key, [h, ask, e]) in rows {
            let _ = writeln!(out, "  {key:<36} {h:>5} {ask:>5} {e:>5}");
        }
    }
    let _ = writeln!(out, "ESCAPES: {}", escapes.len());
    if escapes.is_empty() {
        return out;
    }
    // Shortest first, one per payload kind before repeats, so the sample is varied.
    let mut sorted = escapes.clone();
    sorted.sort_by_key(|r| r.case.line.len());
    let mut seen = Vec::new();
    let (firsts, rest): (Vec<&Record>, Vec<&Record>) = sorted.into_iter().partition(|r| {
        let kind = r.case.labels.first().cloned().unwrap_or_default();
        let outer = r.case.labels.last().cloned().unwrap_or_default();
        let key = (kind, outer);
        let new = !seen.contains(&key);
        if new {
            seen.push(key);
        }
        new
    });
    let _ = writeln!(
        out,
        "first {} of {} escapes:",
        SHOWN.min(escapes.len()),
        escapes.len()
    );
    for r in firsts.iter().chain(&rest).take(SHOWN) {
        r.describe(&mut out);
    }
    out
}
