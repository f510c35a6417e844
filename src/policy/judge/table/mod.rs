//! The option table: for each program a profile commonly allows, what each of its options
//! does beyond the program's own work — starts a program (`rg --pre CMD`), starts one the
//! line does not name or loads code or configuration (`rg -z`, `git diff --ext-diff`,
//! `make -f`), writes a file (`sort -o F`, `uniq IN OUT`), switches directory (`git -C`).
//! Every option of a program listed here is in its entry, the harmless ones too; an
//! option the entry does not know keeps the command from being allowed (fail closed), and
//! the reason names it. Each entry names the manual it follows: the version Debian 12
//! ships.
//!
//! What a listed option's value does is judged as that effect: a program it starts is a
//! command of its own, judged by the rules with the file it is given as a word not known
//! (a file name can start with `-`), a file it writes is a write, a directory switch
//! makes relative targets unknown.
//! Files a command reads are found by `reads` for every program (all its words are taken
//! as paths it may read), and connections by the network `catalogue`.

mod archives;
mod git;
mod runners;
mod search;
mod text;

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::LazyLock;

use super::commands::simple_shown;
use super::shell::{write_part, Env, Restriction, Sink};
use super::words::Word;

/// Why a command line is not allowed, as its explanation says it.
pub(crate) type Why = Cow<'static, str>;

/// How a program reads an option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flag,
    /// Takes a value, attached (`-j4`, `--jobs=4`) or not at all.
    Optional,
    /// Takes a value, attached or the next word.
    Value,
    /// Takes a value that names a file it writes.
    Writes,
    /// Takes a value that names a program it starts.
    Program,
    /// Takes a value that names the directory it works in.
    Chdir,
}

use Kind::{Chdir, Flag, Optional, Program, Value, Writes};

/// How options are written: getopt's (`-abc`, `--name=v`) or Go's (`-name`, `-name=v`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Gnu,
    Go,
}

/// One program's options by kind (names separated by spaces, without dashes: one letter
/// is a short option, more a long one), and those refused with a reason of their own.
struct Options {
    /// The manual the options follow: the version Debian 12 ships.
    manual: &'static str,
    style: Style,
    flags: &'static str,
    optional: &'static str,
    values: &'static str,
    writes: &'static str,
    programs: &'static str,
    chdir: &'static str,
    refused: &'static [(&'static str, &'static str)],
    /// Why an option not known keeps the command from being allowed; empty: the generic
    /// reason, naming the option.
    unknown: &'static str,
    /// A `-5` is an option (`head -5`, `tail -20`).
    numeric: bool,
    /// `--` ends the options, as getopt has it; runners that pass later words on to
    /// another program (`npm test -- --require x`) keep looking at them.
    double_dash_ends: bool,
    /// Every option of the manual is listed, so that an option not listed can only make
    /// the program stop with an error; the runners list only the options known to be
    /// harmless of many.
    complete: bool,
    /// Options may follow operands (GNU programs permute them); otherwise the first
    /// operand ends them (git's global options end at the subcommand).
    permutes: bool,
}

const GNU: Options = Options {
    manual: "",
    style: Style::Gnu,
    flags: "",
    optional: "",
    values: "",
    writes: "",
    programs: "",
    chdir: "",
    refused: &[],
    unknown: "",
    numeric: false,
    double_dash_ends: true,
    complete: true,
    permutes: true,
};

impl Options {
    fn kind(&self, name: &str) -> Option<Kind> {
        if matches!(name, "help" | "version") && self.style == Style::Gnu {
            return Some(Flag);
        }
        let has = |list: &str| list.split_ascii_whitespace().any(|n| n == name);
        [
            (self.flags, Flag),
            (self.optional, Optional),
            (self.values, Value),
            (self.writes, Writes),
            (self.programs, Program),
            (self.chdir, Chdir),
        ]
        .into_iter()
        .find_map(|(list, kind)| has(list).then_some(kind))
    }

    /// Whether none of its options writes, starts, switches directory or is refused.
    fn inert(&self) -> bool {
        self.complete
            && [self.writes, self.programs, self.chdir]
                .iter()
                .all(|l| l.is_empty())
            && self.refused.is_empty()
    }

    fn refused(&self, name: &str) -> Option<&'static str> {
        self.refused
            .iter()
            .find(|(names, _)| names.split_ascii_whitespace().any(|n| n == name))
            .map(|(_, why)| *why)
    }
}

/// A program of the table: its options, and what its operands are.
struct Entry {
    names: &'static [&'static str],
    options: Options,
    /// The operand (counting from 0) that is a file it writes (`uniq IN OUT`, `zip OUT`).
    writes_operand: Option<usize>,
    /// What its operands write depends on its options (`tar`, `gzip`): judged by this
    /// instead, given the arguments.
    judged_by: Option<Judge>,
}

const ENTRY: Entry = Entry {
    names: &[],
    options: GNU,
    writes_operand: None,
    judged_by: None,
};

/// Judges one command line of a program with these options, called by this name.
type Judge = fn(&Options, &str, &[Word], &mut Effects) -> Result<(), Why>;

/// What the options of one command line do, gathered while they are read.
#[derive(Default)]
struct Effects {
    /// Files written.
    writes: Vec<Word>,
    /// Programs started, with the option that starts them.
    programs: Vec<(String, Word)>,
    /// Directories it works in instead of the current one.
    chdirs: Vec<Word>,
    /// The values of the other options that take one, with the option (`tar -f`'s
    /// archive is written or read depending on the mode).
    values: Vec<(String, Word)>,
}

/// Every program of the table by name.
static PROGRAMS: LazyLock<HashMap<&'static str, &'static Entry>> = LazyLock::new(|| {
    [search::ENTRIES, text::ENTRIES, archives::ENTRIES]
        .into_iter()
        .flatten()
        .flat_map(|entry| entry.names.iter().map(move |name| (*name, entry)))
        .collect()
});

/// The restriction the command line `words` (the name first) puts on the command, if
/// any; what its options start or write is added to `sink`.
pub(crate) fn judge(
    name: &str,
    words: &[Word],
    text: &str,
    env: Env,
    sink: &mut Sink,
) -> Option<Restriction> {
    let args = &words[1..];
    let mut effects = Effects::default();
    let judged = match PROGRAMS.get(name) {
        Some(entry) => match entry.judged_by {
            Some(judged_by) => judged_by(&entry.options, name, args, &mut effects),
            None => program(entry, name, args, &mut effects),
        },
        None if name == "git" => git::judge(args, &mut effects),
        None => runners::judge(name, args, &mut effects),
    };
    for target in &effects.writes {
        sink.parts.extend(write_part(target, text));
    }
    sink.changes_dir |= !effects.chdirs.is_empty();
    for (option, started) in effects.programs {
        let shown = format!("{} (started by {name} {option})", started.text);
        let words = vec![started, Word::unknown("<file>", false)];
        simple_shown(words, shown, env.deeper(), sink);
    }
    judged.err().map(Restriction::Unvetted)
}

fn program(entry: &Entry, name: &str, args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    let operands = scan(&entry.options, name, args, effects)?;
    let written = entry.writes_operand.and_then(|at| operands.get(at));
    effects.writes.extend(
        written
            .filter(|w| w.exact() != Some("-"))
            .map(|w| (*w).clone()),
    );
    Ok(())
}

const DYNAMIC: &str =
    "it passes a word not known before it runs to a program whose options can run other \
     programs or write files";

/// Reads `args` as options of `options` (anywhere: GNU programs permute them) and
/// operands; what options write, start or switch to goes into `effects`.
fn scan<'w>(
    options: &Options,
    name: &str,
    args: &'w [Word],
    effects: &mut Effects,
) -> Result<Vec<&'w Word>, Why> {
    let mut operands = Vec::new();
    let mut i = 0;
    while let Some(word) = args.get(i) {
        i += 1;
        let arg = match word.exact() {
            Some("--") if options.double_dash_ends => {
                operands.extend(&args[i..]);
                return Ok(operands);
            }
            Some(arg) if arg.starts_with('-') && arg != "-" && arg != "--" => arg,
            None if glob_valued(word) => &word.text,
            Some(_) => "",
            // A glob that cannot start with `-` expands to operands only.
            None if word.found || (word.known && !word.text.starts_with(GLOB_STARTS)) => "",
            // Whatever it turns into, a program without options that do more than read
            // does no more than read.
            None if options.inert() => "",
            None => return Err(DYNAMIC.into()),
        };
        if arg.is_empty() {
            operands.push(word);
            if !options.permutes {
                operands.extend(&args[i..]);
                return Ok(operands);
            }
            continue;
        }
        let body = arg.trim_start_matches('-');
        if options.numeric && body.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        for (option, attached) in names(options, arg) {
            let attached = attached.map(|v| match word.exact() {
                Some(_) => Word::literal(v),
                None => Word::unknown(v, false),
            });
            let given = Given { name, arg, option };
            i += option_effect(options, given, attached, args.get(i), effects)?;
        }
    }
    Ok(operands)
}

/// How a word that may expand to several can start.
const GLOB_STARTS: [char; 5] = ['-', '*', '?', '[', '{'];

/// `--name=*.rs`: a glob in an option's value expands to that option only.
fn glob_valued(word: &Word) -> bool {
    let Some(long) = word.text.strip_prefix("--").filter(|_| word.known) else {
        return false;
    };
    let literal = long
        .split(['*', '?', '[', '{', '~'])
        .next()
        .unwrap_or_default();
    literal.contains('=')
}

/// One option as a command line gives it.
#[derive(Clone, Copy)]
struct Given<'a> {
    /// The program, as the reasons name it.
    name: &'a str,
    /// The argument it is in.
    arg: &'a str,
    option: &'a str,
}

/// Records what one option does; returns how many of the following words it takes as
/// its value (`next` is the first of them).
fn option_effect(
    options: &Options,
    given: Given<'_>,
    attached: Option<Word>,
    next: Option<&Word>,
    effects: &mut Effects,
) -> Result<usize, Why> {
    if let Some(why) = options.refused(given.option) {
        return Err(why.into());
    }
    let unknown = || unknown(options, given.name, given.arg);
    let kind = options.kind(given.option).ok_or_else(unknown)?;
    let (value, taken) = match (kind, attached) {
        (Flag, Some(_)) if options.style != Style::Go => return Err(unknown()),
        (Flag | Optional, _) => return Ok(0),
        (_, Some(value)) => (value, 0),
        (_, None) => match next.ok_or_else(unknown)? {
            next if next.exact().is_some() => (next.clone(), 1),
            // One word not known, given to an option whose value is only data.
            next if kind == Value && !next.splits => (next.clone(), 1),
            _ => return Err(DYNAMIC.into()),
        },
    };
    match kind {
        Writes => effects.writes.push(value),
        Program => effects
            .programs
            .push((dashed(options, given.option), value)),
        Chdir => effects.chdirs.push(value),
        Value => effects.values.push((given.option.to_string(), value)),
        Flag | Optional => {}
    }
    Ok(taken)
}

/// The options one argument gives, each with its attached value, if any.
fn names<'a>(options: &Options, arg: &'a str) -> Vec<(&'a str, Option<&'a str>)> {
    let long = arg.starts_with("--") || options.style == Style::Go;
    let body = arg.trim_start_matches('-');
    if !long {
        return cluster(options, body);
    }
    let (name, value) = match body.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (body, None),
    };
    let name = match options.style {
        Style::Go => name.strip_prefix("test.").unwrap_or(name),
        Style::Gnu => name,
    };
    vec![(name, value)]
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
            Some(_) => {
                names.push((name, (!rest.is_empty()).then_some(rest)));
                break;
            }
        }
    }
    names
}

/// An option as written on a command line: `-x` or `--name`.
fn dashed(options: &Options, option: &str) -> String {
    match (option.chars().count(), options.style) {
        (1, _) | (_, Style::Go) => format!("-{option}"),
        _ => format!("--{option}"),
    }
}

fn unknown(options: &Options, name: &str, arg: &str) -> Why {
    match (options.unknown, options.manual) {
        ("", "") => {
            format!("it gives {name} an option the option table does not know ({arg})").into()
        }
        ("", manual) => format!(
            "it gives {name} an option the option table does not know ({arg}; the table \
             follows {manual})"
        )
        .into(),
        (why, _) => why.into(),
    }
}

/// The tools a profile may name in `trusted_tools`.
pub(crate) const TRUSTED_TOOLS: &[&str] = &[
    "git", "cargo", "go", "npm", "pnpm", "yarn", "pytest", "make",
];

/// The trusted tool whose vetted forms the command line `words` (the name first) is one
/// of, if any: git's status, diff, log, show, blame, ls-files and rev-parse; cargo's test,
/// build and check; go test; npm, pnpm and yarn's test; pytest (also `python -m pytest`);
/// make with any goal. Whether its options are vetted is the command's restriction.
pub(crate) fn trusted_form(words: &[Word]) -> Option<&'static str> {
    let name = words.first()?.exact()?;
    let args = &words[1..];
    let first = || {
        args.iter()
            .find(|w| !w.text.starts_with('-'))
            .and_then(Word::exact)
    };
    let tool = match name {
        "git" => git::subcommand_of(args).map(|_| "git")?,
        "cargo" => {
            let sub = args.get(runners::cargo_subcommand_at(args)?)?.exact()?;
            matches!(sub, "test" | "t" | "build" | "b" | "check" | "c").then_some("cargo")?
        }
        "go" => (first()? == "test").then_some("go")?,
        "npm" | "pnpm" | "yarn" => runners::js_test(args).map(|_| name)?,
        "pytest" | "py.test" => "pytest",
        "make" | "gmake" => "make",
        _ if name.starts_with("python")
            && args.first().and_then(Word::exact) == Some("-m")
            && args.get(1).and_then(Word::exact) == Some("pytest") =>
        {
            "pytest"
        }
        _ => return None,
    };
    TRUSTED_TOOLS.iter().copied().find(|t| *t == tool)
}
