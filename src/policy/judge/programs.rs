//! Programs whose arguments say more than their name: files they write (`tee f`,
//! `cp a b`, `dd of=f`, `sed -i`), judged as `Write`s of those paths like a redirection;
//! and code they run (`python3 -c`, `perl -e`, an `awk` program calling `system`, a `sed`
//! script with `e`), which is indeterminate. The readers and the programs whose writes
//! depend on their mode (`sort -o`, `uniq IN OUT`, `tar`, `git --output`) are in the
//! option `table`.

use super::options::{options, Spec, NO_OPTIONS};
use super::shell::{link_part, write_part, Sink};
use super::words::Word;

use super::interpreters::{awk, interpreter, interpreter_code_flags, sed};

pub(crate) const UNKNOWN_OPTIONS: &str =
    "options the policy does not know, so which files it writes is unknown";

/// Adds what the program `name` writes or runs, beyond running itself.
pub(crate) fn judge(name: &str, words: &[Word], text: &str, sink: &mut Sink) {
    let args = &words[1..];
    if let Some(flags) = interpreter_code_flags(name) {
        return interpreter(flags, args, text, sink);
    }
    match name {
        "awk" | "gawk" | "mawk" | "nawk" => awk(args, text, sink),
        "sed" => sed(args, text, sink),
        "dd" => {
            for arg in args {
                if let Some(target) = arg.text.strip_prefix("of=") {
                    let word = if arg.exact().is_some() {
                        Word::literal(target)
                    } else {
                        Word::unknown(target, false)
                    };
                    sink.parts.extend(write_part(&word, text));
                }
            }
        }
        _ => {
            if let Some(writer) = WRITERS.iter().find(|w| w.name == name) {
                writes(writer, args, text, sink);
            }
        }
    }
}

/// A program whose operands (all, or the last) are files it writes.
struct Writer {
    name: &'static str,
    spec: Spec,
    /// Only the last operand is written (`cp a b`); otherwise all are.
    last_only: bool,
    /// Options whose value is a file (or directory) written into.
    output: &'static [&'static str],
    /// Writes only when one of these options is present (`sed -i`); empty: always.
    only_with: &'static [&'static str],
    /// Operands before the written ones (`truncate`'s none, `chmod`'s mode).
    skip: usize,
    /// When what it writes may be a symlink or a file moved there (`ln`, `mv`, `cp -a`).
    link: Link,
}

/// When a writer may leave a symlink (or a moved file, which may be one) where it writes.
#[derive(Clone, Copy)]
enum Link {
    Never,
    Always,
    /// With one of these options (`cp -P`, `-a`, `-R` copy symlinks as symlinks).
    With(&'static [&'static str]),
}

const WRITER: Writer = Writer {
    name: "",
    spec: NO_OPTIONS,
    last_only: false,
    output: &[],
    only_with: &[],
    skip: 0,
    link: Link::Never,
};

const WRITERS: &[Writer] = &[
    Writer {
        name: "tee",
        spec: Spec {
            flags: "aip",
            long_flags: &["append", "ignore-interrupts"],
            long_optional_value: &["output-error"],
            ..NO_OPTIONS
        },
        ..WRITER
    },
    Writer {
        name: "cp",
        spec: Spec {
            flags: "abdfHilLnPprRsTuvxZ",
            with_value: "St",
            long_flags: &[
                "archive",
                "force",
                "interactive",
                "link",
                "dereference",
                "no-clobber",
                "no-dereference",
                "parents",
                "recursive",
                "symbolic-link",
                "no-target-directory",
                "update",
                "verbose",
                "one-file-system",
                "strip-trailing-slashes",
                "attributes-only",
                "copy-contents",
                "remove-destination",
            ],
            long_with_value: &["suffix", "target-directory"],
            long_optional_value: &[
                "backup",
                "preserve",
                "no-preserve",
                "reflink",
                "sparse",
                "context",
            ],
            ..NO_OPTIONS
        },
        last_only: true,
        output: &["t", "target-directory"],
        link: Link::With(&[
            "a",
            "d",
            "P",
            "R",
            "r",
            "s",
            "archive",
            "no-dereference",
            "recursive",
            "symbolic-link",
        ]),
        ..WRITER
    },
    Writer {
        name: "mv",
        spec: Spec {
            flags: "bfinTuvZ",
            with_value: "St",
            long_flags: &[
                "force",
                "interactive",
                "no-clobber",
                "no-target-directory",
                "update",
                "verbose",
                "strip-trailing-slashes",
                "context",
            ],
            long_with_value: &["suffix", "target-directory"],
            long_optional_value: &["backup"],
            ..NO_OPTIONS
        },
        output: &["t", "target-directory"],
        link: Link::Always,
        ..WRITER
    },
    Writer {
        name: "ln",
        spec: Spec {
            flags: "bdfFinLPrsTv",
            with_value: "St",
            long_flags: &[
                "directory",
                "force",
                "interactive",
                "logical",
                "no-dereference",
                "physical",
                "relative",
                "symbolic",
                "no-target-directory",
                "verbose",
            ],
            long_with_value: &["suffix", "target-directory"],
            long_optional_value: &["backup"],
            ..NO_OPTIONS
        },
        last_only: true,
        output: &["t", "target-directory"],
        link: Link::Always,
        ..WRITER
    },
    Writer {
        name: "install",
        spec: Spec {
            flags: "bcCdDpsTvZ",
            with_value: "gmoSt",
            long_flags: &[
                "compare",
                "directory",
                "preserve-timestamps",
                "strip",
                "no-target-directory",
                "verbose",
            ],
            long_with_value: &[
                "group",
                "mode",
                "owner",
                "suffix",
                "target-directory",
                "strip-program",
            ],
            long_optional_value: &["backup", "context"],
            ..NO_OPTIONS
        },
        last_only: true,
        output: &["t", "target-directory"],
        ..WRITER
    },
    Writer {
        name: "touch",
        spec: Spec {
            flags: "acfhm",
            with_value: "drt",
            long_flags: &["no-create", "no-dereference"],
            long_with_value: &["date", "reference", "time"],
            ..NO_OPTIONS
        },
        ..WRITER
    },
    Writer {
        name: "mkdir",
        spec: Spec {
            flags: "pvZ",
            with_value: "m",
            long_flags: &["parents", "verbose"],
            long_with_value: &["mode"],
            long_optional_value: &["context"],
            ..NO_OPTIONS
        },
        ..WRITER
    },
    Writer {
        name: "rm",
        spec: Spec {
            flags: "dfiIrRv",
            long_flags: &[
                "force",
                "recursive",
                "dir",
                "verbose",
                "no-preserve-root",
                "one-file-system",
            ],
            long_optional_value: &["interactive", "preserve-root"],
            ..NO_OPTIONS
        },
        ..WRITER
    },
    Writer {
        name: "rmdir",
        spec: Spec {
            flags: "pv",
            long_flags: &["parents", "verbose", "ignore-fail-on-non-empty"],
            ..NO_OPTIONS
        },
        ..WRITER
    },
    Writer {
        name: "unlink",
        ..WRITER
    },
    Writer {
        name: "truncate",
        spec: Spec {
            flags: "co",
            with_value: "rs",
            long_flags: &["no-create", "io-blocks"],
            long_with_value: &["reference", "size"],
            ..NO_OPTIONS
        },
        ..WRITER
    },
    Writer {
        name: "sed",
        spec: SED,
        only_with: &["i", "in-place"],
        skip: usize::MAX,
        ..WRITER
    },
];

/// The files `sed -i` edits.
pub(crate) fn sed_writes(args: &[Word], text: &str, sink: &mut Sink) {
    if let Some(writer) = WRITERS.iter().find(|w| w.name == "sed") {
        writes(writer, args, text, sink);
    }
}

pub(crate) const SED: Spec = Spec {
    flags: "nErsuz",
    with_value: "efl",
    optional_value: "i",
    long_flags: &[
        "quiet",
        "silent",
        "debug",
        "posix",
        "regexp-extended",
        "separate",
        "sandbox",
        "unbuffered",
        "null-data",
        "follow-symlinks",
    ],
    long_with_value: &["expression", "file", "line-length"],
    long_optional_value: &["in-place"],
    numeric: false,
};

fn writes(writer: &Writer, args: &[Word], text: &str, sink: &mut Sink) {
    let unknown = || Word::unknown("<a file it writes>", false);
    let (operands, seen) = match options_anywhere(args, &writer.spec) {
        Some(parsed) => parsed,
        None => {
            sink.parts.extend(write_part(&unknown(), text));
            return sink.indeterminate(text, UNKNOWN_OPTIONS);
        }
    };
    let has = |names: &[&str]| seen.iter().any(|(o, _)| names.contains(&o.as_str()));
    if !writer.only_with.is_empty() && !has(writer.only_with) {
        return;
    }
    let write = match writer.link {
        Link::Always => link_part,
        Link::With(options) if has(options) => link_part,
        Link::Never | Link::With(_) => write_part,
    };
    let mut to_output = false;
    for (opt, value) in &seen {
        if writer.output.contains(&opt.as_str()) {
            to_output = true;
            sink.parts
                .extend(write(value.as_ref().unwrap_or(&unknown()), text));
        }
    }
    if to_output && writer.last_only {
        return;
    }
    let operands = match writer.skip {
        // `sed -i SCRIPT FILE…`: the script is an operand unless given by -e/-f.
        usize::MAX if has(&["e", "expression", "f", "file"]) => &operands[..],
        usize::MAX => operands.get(1..).unwrap_or_default(),
        n => operands.get(n..).unwrap_or_default(),
    };
    let written = if writer.last_only {
        operands.last().into_iter().collect::<Vec<_>>()
    } else {
        operands.iter().collect()
    };
    for target in written {
        if target.exact() != Some("-") {
            sink.parts.extend(write(target, text));
        }
    }
}

/// An option seen anywhere among the arguments, and its value.
pub(crate) type OwnedOpt = (String, Option<Word>);

/// Options anywhere among the arguments (GNU tools permute them), until `--`. `None`
/// when an option is not known. A word not known now is taken as an operand.
pub(crate) fn options_anywhere(args: &[Word], spec: &Spec) -> Option<(Vec<Word>, Vec<OwnedOpt>)> {
    let mut operands = Vec::new();
    let mut seen = Vec::new();
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        if first.exact().is_none() {
            // A word not known now is taken as an operand (a file it may write).
            operands.push(first.clone());
            rest = tail;
            continue;
        }
        let (after, opts) = options(rest, spec).ok()?;
        seen.extend(opts.into_iter().map(|(o, v)| (o.to_string(), v)));
        let ended =
            after.len() < rest.len() && rest[rest.len() - after.len() - 1].exact() == Some("--");
        if ended {
            operands.extend(after.iter().cloned());
            break;
        }
        let Some((first, tail)) = after.split_first() else {
            break;
        };
        operands.push(first.clone());
        rest = tail;
    }
    Some((operands, seen))
}
