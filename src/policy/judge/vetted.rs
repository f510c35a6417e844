//! Test and build runners a profile commonly allows by prefix (`make test`, `go test`,
//! `cargo test`, `npm test`, `python -m pytest`), whose options and variables can make
//! them run programs or code the line does not show: `make -f FILE`, `SHELL=…`,
//! `go test -exec CMD`, `cargo --config …`, `npm test -- --require x.js`, `pytest -p
//! plugin`. Each runner's options are described here, and any option, variable or word
//! not known to be harmless keeps the command from being allowed (`Restriction::Unvetted`,
//! with the reason). Options that name a file written are judged as writes of it.

use super::path::normalize_path;
use super::shell::{write_part, Restriction, Sink};
use super::words::Word;

/// How a runner reads an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flag,
    /// Takes a value, attached (`-j4`, `--jobs=4`) or not at all.
    Optional,
    /// Takes a value, attached or the next word.
    Value,
    /// Takes a value that names a file it writes.
    Writes,
}

use Kind::{Flag, Optional, Value, Writes};

/// How options are written: getopt's (`-abc`, `--name=v`) or Go's (`-name`, `-name=v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Gnu,
    Go,
}

/// One runner's known options by kind (names separated by spaces, without dashes), and
/// those refused with a reason of their own.
struct Options {
    style: Style,
    flags: &'static str,
    optional: &'static str,
    values: &'static str,
    writes: &'static str,
    refused: &'static [(&'static str, &'static str)],
    /// Why an option not known keeps the command from being allowed.
    unknown: &'static str,
}

impl Options {
    fn kind(&self, name: &str) -> Option<Kind> {
        let has = |list: &str| list.split(' ').any(|n| n == name);
        [
            (self.flags, Flag),
            (self.optional, Optional),
            (self.values, Value),
            (self.writes, Writes),
        ]
        .into_iter()
        .find_map(|(list, kind)| has(list).then_some(kind))
    }

    fn refused(&self, name: &str) -> Option<&'static str> {
        self.refused
            .iter()
            .find(|(names, _)| names.split(' ').any(|n| n == name))
            .map(|(_, why)| *why)
    }
}

const DYNAMIC: &str =
    "it passes a word not known before it runs to a runner whose options can run other programs";

const MAKE: Options = Options {
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
};

/// Variables a make command line may set: they only make the output more verbose.
const MAKE_VARIABLES: &[&str] = &["V", "VERBOSE"];
const MAKE_ASSIGNMENT: &str = "it sets a make variable on the command line (SHELL=, MAKE=, \
                               CC= and the like name the programs make runs; only V and \
                               VERBOSE set to a number are known to be harmless)";

const GO_TEST: Options = Options {
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
};

const CARGO_GLOBAL: Options = Options {
    style: Style::Gnu,
    flags: "v verbose q quiet locked offline frozen",
    optional: "",
    values: "color",
    writes: "",
    refused: CARGO_REFUSED,
    unknown: "it gives cargo an option not known to be harmless",
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
};

const CARGO_ELSEWHERE: &str = "it makes cargo build a manifest outside the workspace";
const CARGO_TOOLCHAIN: &str = "it makes cargo run another toolchain (+NAME)";

/// The test harness's own options, after `cargo test --`.
const LIBTEST: Options = Options {
    style: Style::Gnu,
    flags: "nocapture no-capture show-output ignored include-ignored exact quiet q list test \
            bench shuffle",
    optional: "",
    values: "test-threads skip format color shuffle-seed",
    writes: "logfile",
    refused: &[],
    unknown: "it gives the test harness an option not known to be harmless",
};

/// `npm|pnpm|yarn test` options, and those of the test runner the script starts (words
/// after `--` are appended to the script's command).
const JS_TEST: Options = Options {
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
};

const PYTEST: Options = Options {
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
};

const OUTSIDE_TESTS: &str = "it names tests outside the workspace";
const NO_INDEX_OUTSIDE: &str = "it compares files outside the workspace (git diff --no-index)";

/// The restriction a runner's command line puts on the command, if any; files its
/// options write are added as writes.
pub(crate) fn judge(
    name: &str,
    words: &[Word],
    text: &str,
    sink: &mut Sink,
) -> Option<Restriction> {
    let args = &words[1..];
    let exact = |i: usize| args.get(i).and_then(Word::exact);
    let why = match name {
        "make" | "gmake" => make(args),
        "go" if exact(0) == Some("test") => go_test(&args[1..], text, sink),
        "cargo" => cargo(args, text, sink),
        "npm" | "pnpm" | "yarn" => js(args, text, sink),
        "pytest" | "py.test" => runs_tests(&PYTEST, args, text, sink),
        _ if name.starts_with("python") && exact(0) == Some("-m") && exact(1) == Some("pytest") => {
            runs_tests(&PYTEST, &args[2..], text, sink)
        }
        "git" if args.iter().any(|w| w.exact() == Some("--no-index")) => no_index(args),
        _ => Ok(()),
    };
    why.err().map(Restriction::Unvetted)
}

/// What a command line's options come to: the operands, or why it is not allowed.
type Scanned<'w> = Result<Vec<&'w Word>, &'static str>;

/// Reads `args` as options of `options` (anywhere, as the runners permute them) and
/// operands; the files options write are added to `sink` as writes.
fn scan<'w>(options: &Options, args: &'w [Word], text: &str, sink: &mut Sink) -> Scanned<'w> {
    let mut operands = Vec::new();
    let mut i = 0;
    while let Some(word) = args.get(i) {
        i += 1;
        let Some(arg) = word.exact() else {
            // A glob that cannot start with `-` expands to operands only.
            let operand = word.known && !word.text.starts_with(['-', '*', '?', '[', '{']);
            if !operand {
                return Err(DYNAMIC);
            }
            operands.push(word);
            continue;
        };
        if arg == "--" || !arg.starts_with('-') || arg == "-" {
            operands.push(word);
            continue;
        }
        let long = arg.starts_with("--") || options.style == Style::Go;
        let body = arg.trim_start_matches('-');
        let names: Vec<(&str, Option<&str>)> = if long {
            let (name, value) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (body, None),
            };
            let name = match options.style {
                Style::Go => name.strip_prefix("test.").unwrap_or(name),
                Style::Gnu => name,
            };
            vec![(name, value)]
        } else {
            cluster(options, body)
        };
        for (name, attached) in names {
            if let Some(why) = options.refused(name) {
                return Err(why);
            }
            let kind = options.kind(name).ok_or(options.unknown)?;
            let value = match (kind, attached) {
                (Flag, Some(_)) if options.style != Style::Go => return Err(options.unknown),
                (Flag | Optional, _) => None,
                (Value | Writes, Some(v)) => Some(Word::literal(v)),
                (Value | Writes, None) => {
                    let next = args.get(i).ok_or(options.unknown)?;
                    i += 1;
                    if next.exact().is_none() {
                        return Err(DYNAMIC);
                    }
                    Some(next.clone())
                }
            };
            if let (Writes, Some(target)) = (kind, value) {
                sink.parts.extend(write_part(&target, text));
            }
        }
    }
    Ok(operands)
}

/// The options of one getopt cluster (`-vx`, `-j4`, `-pcrate`), each with the rest of the
/// cluster as its attached value where it takes one.
fn cluster<'a>(options: &Options, body: &'a str) -> Vec<(&'a str, Option<&'a str>)> {
    let mut names = Vec::new();
    for (at, c) in body.char_indices() {
        let name = &body[at..at + c.len_utf8()];
        let rest = &body[at + c.len_utf8()..];
        match options.kind(name) {
            Some(Flag) | None => names.push((name, None)),
            Some(Optional | Value | Writes) => {
                names.push((name, (!rest.is_empty()).then_some(rest)));
                break;
            }
        }
    }
    names
}

/// `make [options] [goals] [NAME=VALUE]`: options anywhere; only the reviewed variables.
fn make(args: &[Word]) -> Result<(), &'static str> {
    let mut sink = Sink::default();
    for operand in scan(&MAKE, args, "", &mut sink)? {
        let Some((name, value)) = operand.text.split_once('=') else {
            continue;
        };
        let number =
            !value.is_empty() && value.len() <= 2 && value.bytes().all(|b| b.is_ascii_digit());
        if !(MAKE_VARIABLES.contains(&name) && number) {
            return Err(MAKE_ASSIGNMENT);
        }
    }
    Ok(())
}

/// `go test [flags] [packages] [flags]`: `-c` without `-o` writes a binary named after
/// the package.
fn go_test(args: &[Word], text: &str, sink: &mut Sink) -> Result<(), &'static str> {
    let operands = scan(&GO_TEST, args, text, sink)?;
    let named = |flag: &str| {
        args.iter().filter_map(Word::exact).any(|a| {
            let body = a.trim_start_matches('-');
            a.starts_with('-') && (body == flag || body.starts_with(&format!("{flag}=")))
        })
    };
    if named("c") && !named("o") {
        sink.parts
            .extend(write_part(&Word::unknown("<package>.test", false), text));
    }
    outside(&operands, OUTSIDE_TESTS)
}

/// `cargo [+toolchain] [global options] SUBCOMMAND …`; `cargo test [options] [-- harness
/// options]` in full.
fn cargo(args: &[Word], text: &str, sink: &mut Sink) -> Result<(), &'static str> {
    if args.first().is_some_and(|w| w.text.starts_with('+')) {
        return Err(CARGO_TOOLCHAIN);
    }
    let subcommand = args.iter().position(|w| !w.text.starts_with('-'));
    let global = &args[..subcommand.unwrap_or(args.len())];
    scan(&CARGO_GLOBAL, global, text, sink)?;
    let Some(at) = subcommand else {
        return Ok(());
    };
    if !matches!(args[at].exact(), Some("test" | "t")) {
        return Ok(());
    }
    let rest = &args[at + 1..];
    let end = rest.iter().position(|w| w.exact() == Some("--"));
    let (own, harness) = match end {
        Some(end) => (&rest[..end], &rest[end + 1..]),
        None => (rest, &[][..]),
    };
    scan(&CARGO_TEST, own, text, sink)?;
    scan(&LIBTEST, harness, text, sink)?;
    let manifest =
        own.iter()
            .enumerate()
            .find_map(|(i, w)| match w.text.strip_prefix("--manifest-path") {
                Some("") => own.get(i + 1).map(|value| value.text.as_str()),
                Some(attached) => attached.strip_prefix('='),
                None => None,
            });
    if manifest.is_some_and(leaves_workspace) {
        return Err(CARGO_ELSEWHERE);
    }
    Ok(())
}

/// `npm|pnpm|yarn [options] test [args] [-- args]` (also `t`, `run test`): the arguments
/// go to the test script's command, usually a test runner on node. Other scripts are the
/// workspace's own, judged by their command line like any program.
fn js(args: &[Word], text: &str, sink: &mut Sink) -> Result<(), &'static str> {
    let Some(at) = args.iter().position(|w| !w.text.starts_with('-')) else {
        return Ok(());
    };
    let run = matches!(args[at].exact(), Some("run" | "run-script"));
    let script_args = match (args[at].exact(), args.get(at + 1).and_then(Word::exact)) {
        (Some("test" | "t" | "tst"), _) => &args[at + 1..],
        (_, Some("test")) if run => &args[at + 2..],
        _ => return Ok(()),
    };
    scan(&JS_TEST, &args[..at], text, sink)?;
    scan(&JS_TEST, script_args, text, sink).map(|_| ())
}

/// pytest's options and test paths.
fn runs_tests(
    options: &Options,
    args: &[Word],
    text: &str,
    sink: &mut Sink,
) -> Result<(), &'static str> {
    let operands = scan(options, args, text, sink)?;
    outside(&operands, OUTSIDE_TESTS)
}

/// `git diff --no-index A B`: files outside the workspace are not the repository's.
fn no_index(args: &[Word]) -> Result<(), &'static str> {
    let operands: Vec<&Word> = args.iter().filter(|w| !w.text.starts_with('-')).collect();
    outside(&operands, NO_INDEX_OUTSIDE)
}

fn outside(operands: &[&Word], why: &'static str) -> Result<(), &'static str> {
    match operands
        .iter()
        .any(|w| w.text != "--" && leaves_workspace(&w.text))
    {
        true => Err(why),
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

    fn vetted(line: &str) -> Option<&'static str> {
        let words: Vec<Word> = line.split(' ').map(Word::literal).collect();
        let mut sink = Sink::default();
        match judge(&words[0].text.clone(), &words, line, &mut sink) {
            Some(Restriction::Unvetted(why)) => Some(why),
            _ => None,
        }
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
