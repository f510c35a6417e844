//! Test and build runners a profile commonly allows by prefix (`make test`, `go test`,
//! `cargo test`, `npm test`, `python -m pytest`), whose options and variables can make
//! them run programs or code the line does not show: `make -f FILE`, `SHELL=…`,
//! `go test -exec CMD`, `cargo --config …`, `npm test -- --require x.js`, `pytest -p
//! plugin`. Each runner's options are described here, and any option, variable or word
//! not known to be harmless keeps the command from being allowed (`Restriction::Unvetted`,
//! with the reason). Options that name a file written are judged as writes of it.

use super::{scan, Effects, Options, Style, Why, GNU};
use crate::policy::judge::path::normalize_path;
use crate::policy::judge::words::Word;

const MAKE: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Gnu,
    flags: "k keep-going s silent quiet B always-make i ignore-errors n just-print dry-run \
            recon q question r no-builtin-rules R no-builtin-variables S no-keep-going stop \
            w print-directory no-print-directory warn-undefined-variables trace d",
    optional: "debug j jobs l load-average O output-sync",
    values: "",
    writes: "",
    refused: &[],
    unknown: "it gives make an option not known to be harmless (-f, -C, -I, --eval and the \
              like make it run other makefiles or make code)",
    ..GNU
};

/// Variables a make command line may set: they only make the output more verbose.
const MAKE_VARIABLES: &[&str] = &["V", "VERBOSE"];
const MAKE_ASSIGNMENT: &str = "it sets a make variable on the command line (SHELL=, MAKE=, \
                               CC= and the like name the programs make runs; only V and \
                               VERBOSE set to a number are known to be harmless)";

const GO_TEST: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Go,
    flags: "v race short cover failfast json benchmem x a n trimpath work fullpath c",
    optional: "",
    values: "run skip bench benchtime count cpu parallel p timeout covermode coverpkg tags \
             shuffle list fuzz fuzztime fuzzminimizetime vet mod",
    writes: "o coverprofile cpuprofile memprofile blockprofile mutexprofile trace outputdir",
    refused: &[(
        "exec toolexec",
        "it makes go run the test binary or the build tools through another program \
         (-exec, -toolexec)",
    )],
    unknown: "it gives go test an option not known to be harmless (-C, -modfile, -overlay, \
              -pgo, -ldflags, -args and the like build other code or run other programs)",
    ..GNU
};

const CARGO_GLOBAL: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Gnu,
    flags: "v verbose q quiet locked offline frozen",
    optional: "",
    values: "color",
    writes: "",
    refused: CARGO_REFUSED,
    unknown: "it gives cargo an option not known to be harmless",
    ..GNU
};

const CARGO_REFUSED: &[(&str, &str)] = &[
    (
        "config",
        "it gives cargo --config, which can set a runner, a linker or an alias that runs \
         other programs",
    ),
    (
        "Z",
        "it gives cargo -Z (unstable behaviour, configuration that runs programs among it)",
    ),
    (
        "C",
        "it makes cargo build the package of another directory (-C)",
    ),
];

const CARGO_TEST: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Gnu,
    flags: "release r workspace all lib bins examples tests benches all-targets doc no-run \
            no-fail-fast all-features no-default-features locked offline frozen quiet q \
            verbose v ignore-rust-version future-incompat-report keep-going",
    optional: "timings",
    values: "package p exclude bin example test bench features F jobs j profile target color \
             message-format manifest-path",
    writes: "target-dir",
    refused: CARGO_REFUSED,
    unknown: "it gives cargo test an option not known to be harmless",
    ..GNU
};

const CARGO_ELSEWHERE: &str = "it makes cargo build a manifest outside the workspace";
const CARGO_TOOLCHAIN: &str = "it makes cargo run another toolchain (+NAME)";

/// The test harness's own options, after `cargo test --`.
const LIBTEST: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Gnu,
    flags: "nocapture no-capture show-output ignored include-ignored exact quiet q list test \
            bench shuffle",
    optional: "",
    values: "test-threads skip format color shuffle-seed",
    writes: "logfile",
    refused: &[],
    unknown: "it gives the test harness an option not known to be harmless",
    ..GNU
};

/// `npm|pnpm|yarn test` options, and those of the test runner the script starts (words
/// after `--` are appended to the script's command).
const JS_TEST: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Gnu,
    flags: "silent s if-present workspaces ws include-workspace-root ci coverage no-coverage \
            runInBand i verbose u updateSnapshot bail passWithNoTests run detectOpenHandles \
            forceExit listTests no-watch no-watchAll",
    optional: "watch watchAll",
    values: "workspace w t testNamePattern testPathPattern grep g timeout testTimeout \
             maxWorkers shard",
    writes: "outputFile",
    refused: &[(
        "require r import loader experimental-loader eval e print p env-file node-options \
         script-shell config c setupFiles setupFilesAfterEnv globalSetup globalTeardown \
         preset transform testRunner testEnvironment reporter reporters resolver",
        "it gives the test runner an option that loads other code (--require, --import, \
         --loader, --eval, a configuration, a reporter and the like)",
    )],
    unknown: "it gives npm or the test runner an option not known to be harmless",
    ..GNU
};

const PYTEST: Options = Options {
    double_dash_ends: false,
    complete: false,
    style: Style::Gnu,
    flags: "q quiet v verbose x exitfirst s l showlocals lf last-failed ff failed-first nf \
            new-first sw stepwise no-header no-summary strict-markers disable-warnings co \
            collect-only cache-clear no-cov",
    optional: "cov",
    values: "k m r n maxfail tb durations durations-min color capture deselect \
             cov-fail-under timeout",
    writes: "junitxml junit-xml",
    refused: &[(
        "p c config-file o override-ini rootdir confcutdir pyargs W pythonwarnings import-mode",
        "it gives pytest an option that loads other code or configuration (-p, -c, -o, \
         --rootdir, -W and the like)",
    )],
    unknown: "it gives pytest an option not known to be harmless",
    ..GNU
};

const OUTSIDE_TESTS: &str = "it names tests outside the workspace";

/// Why a runner's command line is not allowed, if it is not; what its options write goes
/// into `effects`.
pub(super) fn judge(name: &str, args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    let exact = |i: usize| args.get(i).and_then(Word::exact);
    match name {
        "make" | "gmake" => make(args),
        "go" if exact(0) == Some("test") => go_test(&args[1..], effects),
        "cargo" => cargo(args, effects),
        "npm" | "pnpm" | "yarn" => js(args, effects),
        "pytest" | "py.test" => runs_tests(&PYTEST, name, args, effects),
        _ if name.starts_with("python") && exact(0) == Some("-m") && exact(1) == Some("pytest") => {
            runs_tests(&PYTEST, "pytest", &args[2..], effects)
        }
        _ => Ok(()),
    }
}

/// `make [options] [goals] [NAME=VALUE]`: options anywhere; only the reviewed variables.
fn make(args: &[Word]) -> Result<(), Why> {
    for operand in scan(&MAKE, "make", args, &mut Effects::default())? {
        let Some((name, value)) = operand.text.split_once('=') else {
            continue;
        };
        let number =
            !value.is_empty() && value.len() <= 2 && value.bytes().all(|b| b.is_ascii_digit());
        if !(MAKE_VARIABLES.contains(&name) && number) {
            return Err(MAKE_ASSIGNMENT.into());
        }
    }
    Ok(())
}

/// `go test [flags] [packages] [flags]`: `-c` without `-o` writes a binary named after
/// the package.
fn go_test(args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    let operands = scan(&GO_TEST, "go test", args, effects)?;
    let named = |flag: &str| {
        args.iter().filter_map(Word::exact).any(|a| {
            let body = a.trim_start_matches('-');
            a.starts_with('-') && (body == flag || body.starts_with(&format!("{flag}=")))
        })
    };
    if named("c") && !named("o") {
        effects.writes.push(Word::unknown("<package>.test", false));
    }
    outside(&operands, OUTSIDE_TESTS)
}

/// `cargo [+toolchain] [global options] SUBCOMMAND …`; `cargo test [options] [-- harness
/// options]`, `cargo build` and `cargo check` (the same build options) in full.
fn cargo(args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    if args.first().is_some_and(|w| w.text.starts_with('+')) {
        return Err(CARGO_TOOLCHAIN.into());
    }
    let subcommand = cargo_subcommand_at(args);
    let global = &args[..subcommand.unwrap_or(args.len())];
    scan(&CARGO_GLOBAL, "cargo", global, effects)?;
    let Some(at) = subcommand else {
        return Ok(());
    };
    let test = match args[at].exact() {
        Some("test" | "t") => true,
        Some("build" | "b" | "check" | "c") => false,
        _ => return Ok(()),
    };
    let rest = &args[at + 1..];
    let end = rest.iter().position(|w| w.exact() == Some("--"));
    let (own, harness) = match end {
        Some(end) => (&rest[..end], &rest[end + 1..]),
        None => (rest, &[][..]),
    };
    if !test && end.is_some() {
        return Err("it gives cargo build or check words after --, which go to no harness".into());
    }
    scan(&CARGO_TEST, "cargo", own, effects)?;
    scan(&LIBTEST, "the test harness", harness, effects)?;
    let manifest =
        own.iter()
            .enumerate()
            .find_map(|(i, w)| match w.text.strip_prefix("--manifest-path") {
                Some("") => own.get(i + 1).map(|value| value.text.as_str()),
                Some(attached) => attached.strip_prefix('='),
                None => None,
            });
    if manifest.is_some_and(leaves_workspace) {
        return Err(CARGO_ELSEWHERE.into());
    }
    Ok(())
}

/// `npm|pnpm|yarn [options] test [args] [-- args]` (also `t`, `run test`): the arguments
/// go to the test script's command, usually a test runner on node. Other scripts are the
/// workspace's own, judged by their command line like any program.
fn js(args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    let Some((at, script_args)) = js_test(args) else {
        return Ok(());
    };
    scan(&JS_TEST, "npm", &args[..at], effects)?;
    scan(&JS_TEST, "npm test", script_args, effects).map(|_| ())
}

/// Where the subcommand of `cargo ARGS` is: the first word that is neither a global
/// option nor the value of one, nor a toolchain (`cargo --color never test`, `cargo
/// --config x test`, `cargo +nightly test`).
pub(super) fn cargo_subcommand_at(args: &[Word]) -> Option<usize> {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        let toolchain = i == 0 && text.starts_with('+');
        if !text.starts_with('-') && !toolchain {
            return Some(i);
        }
        let takes_next = matches!(text, "--color" | "--config" | "-Z" | "-C");
        i += if takes_next { 2 } else { 1 };
    }
    None
}

/// Where `npm|pnpm|yarn ARGS` names its test script (`test`, `t`, `run test`), and the
/// words given to it; `None` for other scripts.
pub(super) fn js_test(args: &[Word]) -> Option<(usize, &[Word])> {
    let at = args.iter().position(|w| !w.text.starts_with('-'))?;
    let run = matches!(args[at].exact(), Some("run" | "run-script"));
    match (args[at].exact(), args.get(at + 1).and_then(Word::exact)) {
        (Some("test" | "t" | "tst"), _) => Some((at, &args[at + 1..])),
        (_, Some("test")) if run => Some((at, &args[at + 2..])),
        _ => None,
    }
}

/// pytest's options and test paths.
fn runs_tests(
    options: &Options,
    name: &str,
    args: &[Word],
    effects: &mut Effects,
) -> Result<(), Why> {
    let operands = scan(options, name, args, effects)?;
    outside(&operands, OUTSIDE_TESTS)
}

pub(super) fn outside(operands: &[&Word], why: &'static str) -> Result<(), Why> {
    match operands
        .iter()
        .any(|w| w.text != "--" && leaves_workspace(&w.text))
    {
        true => Err(why.into()),
        false => Ok(()),
    }
}

/// Whether a path, read lexically, names something outside the workspace: absolute, from
/// a home, or climbing out. (An absolute path into the workspace counts too: where the
/// workspace is is not known here.)
fn leaves_workspace(path: &str) -> bool {
    let path = path.split_once("::").map_or(path, |(file, _)| file);
    let normalized = normalize_path(path);
    normalized.starts_with(['/', '~']) || normalized == ".." || normalized.starts_with("../")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vetted(line: &str) -> Option<Why> {
        let words: Vec<Word> = line.split(' ').map(Word::literal).collect();
        judge(&words[0].text, &words[1..], &mut Effects::default()).err()
    }

    #[test]
    fn clusters_and_attached_values_are_read_as_getopt_reads_them() {
        for (line, allowed) in [
            ("make -kj4 test", true),
            ("make -j 4 test", true),
            ("make -sf x test", false),
            ("make -Cdir test", false),
            ("cargo test -pcrate -vv", true),
            ("cargo test -Zx", false),
            ("cargo -q test", true),
            ("cargo --config x test", false),
            ("go test -v=true ./...", true),
            ("go test --exec=x ./...", false),
            ("go test -test.run=X", true),
            ("npm test -- -t name", true),
            ("npm test -- -rx", false),
            ("python3 -m pytest -qx tests/a.py::test_b", true),
            ("python3 -m pytest -pplugin", false),
            ("python3 -m pytest --cov=src --cov-fail-under 80", true),
            ("python3 -m pytest --cov-report=html:/tmp/x", false),
        ] {
            assert_eq!(
                vetted(line).is_none(),
                allowed,
                "{line}: {:?}",
                vetted(line)
            );
        }
    }
}
