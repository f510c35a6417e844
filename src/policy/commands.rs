//! Simple commands: the part itself, and what it runs in turn. Wrappers (`env`, `sudo`,
//! `xargs`, `find -exec`, …) and shells (`bash -c`, `eval`) take another command as
//! arguments, where the parse tree only sees words; they are unwrapped here so the
//! wrapped command is judged too.

use super::shell::{join, script, write_part, Env, Part, Restriction, Sink};
use super::words::Word;

/// Adds a simple command (words as the shell will pass them) and what it runs.
pub(crate) fn simple(words: Vec<Word>, env: Env, sink: &mut Sink) {
    let text = join(&words);
    simple_shown(words, text, env, sink);
}

/// `simple`, shown in messages as `text` (the source, when it holds more than the words).
pub(crate) fn simple_shown(mut words: Vec<Word>, text: String, env: Env, sink: &mut Sink) {
    if env.too_deep() {
        return sink.indeterminate(&text, "nested too deeply to judge");
    }
    let Some(name) = words.first().and_then(Word::exact) else {
        return sink.indeterminate(&text, "the command name is not known before it runs");
    };
    let mut restriction = env.assigns.then_some(Restriction::Assignment);
    if name.contains('/') {
        let base = name.rsplit('/').next().unwrap_or_default().to_string();
        if base.is_empty() {
            return sink.indeterminate(&text, "the command name is a directory");
        }
        words[0] = Word::literal(base);
        restriction = restriction.or(Some(Restriction::PathName));
    }
    let name = words[0].text.as_str();
    if matches!(name, "cd" | "pushd" | "popd") {
        sink.changes_dir = true;
    }
    if !runs_commands(name) {
        sink.parts.push(Part::Command {
            words,
            text,
            restriction,
        });
        return;
    }
    sink.parts.push(Part::Command {
        words: words.clone(),
        text: text.clone(),
        restriction,
    });
    let name = words[0].text.clone();
    unwrap(&name, &words, &text, env.deeper(), sink);
}

/// The commands `unwrap` looks into (kept next to it so the two lists agree).
fn runs_commands(name: &str) -> bool {
    matches!(
        name,
        "env"
            | "sudo"
            | "timeout"
            | "nice"
            | "nohup"
            | "builtin"
            | "coproc"
            | "stdbuf"
            | "exec"
            | "time"
            | "command"
            | "xargs"
            | "find"
            | "bash"
            | "sh"
            | "zsh"
            | "dash"
            | "ksh"
            | "ash"
            | "mksh"
            | "fish"
            | "csh"
            | "tcsh"
            | "eval"
            | "source"
            | "."
    )
}

/// What a wrapper runs: the words of the wrapped command, and whether the wrapper set
/// variables for it; or why that cannot be known.
type Inner<'w> = Result<(&'w [Word], bool), &'static str>;

/// Judges what a wrapper or shell runs.
fn unwrap(name: &str, words: &[Word], text: &str, env: Env, sink: &mut Sink) {
    let args = &words[1..];
    let inner: Inner<'_> = match name {
        "env" => env_command(args),
        "sudo" => sudo(args),
        "timeout" => {
            plain(options(args, &TIMEOUT).map(|(rest, _)| rest.get(1..).unwrap_or_default()))
        }
        "nice" => plain(options(args, &NICE).map(|(rest, _)| rest)),
        "nohup" | "builtin" | "coproc" => Ok((args, false)),
        "stdbuf" => plain(options(args, &STDBUF).map(|(rest, _)| rest)),
        "exec" => plain(options(args, &EXEC).map(|(rest, _)| rest)),
        "time" => plain(options(args, &TIME).map(|(rest, opts)| {
            for (opt, value) in opts {
                if let (Some(value), "o" | "output") = (&value, opt) {
                    sink.parts.extend(write_part(value, text));
                }
            }
            rest
        })),
        // `command -v x` only looks `x` up.
        "command" => plain(options(args, &COMMAND).map(|(rest, opts)| {
            if opts.iter().any(|(o, _)| matches!(*o, "v" | "V")) {
                &rest[..0]
            } else {
                rest
            }
        })),
        "xargs" => match options(args, &XARGS) {
            Ok(([], _)) => Ok((&args[..0], false)),
            Ok((rest, _)) => {
                let mut inner = rest.to_vec();
                inner.push(Word::unknown("<arguments from stdin>", true));
                return simple(inner, env, sink);
            }
            Err(why) => Err(why),
        },
        "find" => return find(args, text, env, sink),
        "bash" | "sh" | "zsh" | "dash" | "ksh" | "ash" | "mksh" => {
            return shell(args, text, env, sink)
        }
        "fish" | "csh" | "tcsh" => {
            return sink.indeterminate(text, "runs a shell whose scripts are not judged")
        }
        "eval" => {
            return match args.iter().map(Word::exact).collect::<Option<Vec<_>>>() {
                Some(parts) => script(&parts.join(" "), env, sink),
                None => sink.indeterminate(text, "eval of text not known before it runs"),
            };
        }
        "source" | "." => return sink.indeterminate(text, "runs a script file that is not judged"),
        _ => return,
    };
    match inner {
        Ok(([], _)) => {}
        Ok((rest, assigned)) => {
            let env = Env {
                assigns: env.assigns || assigned,
                ..env
            };
            simple(rest.to_vec(), env, sink)
        }
        Err(why) => sink.indeterminate(text, why),
    }
}

/// A wrapper that sets no variables.
fn plain<'w>(result: Result<&'w [Word], &'static str>) -> Inner<'w> {
    result.map(|rest| (rest, false))
}

/// `env [-i] [-u NAME] [NAME=VALUE]... [COMMAND]`.
fn env_command(args: &[Word]) -> Inner<'_> {
    let (rest, opts) = options(args, &ENV)?;
    if opts.iter().any(|(o, _)| matches!(*o, "S" | "split-string")) {
        return Err("env -S splits a string into a command that is not judged");
    }
    let (rest, assigned) = skip_assignments(rest);
    Ok((rest, assigned))
}

/// `sudo [options] [NAME=VALUE]... [COMMAND]`.
fn sudo(args: &[Word]) -> Inner<'_> {
    let (rest, opts) = options(args, &SUDO)?;
    let has = |names: &[&str]| opts.iter().any(|(o, _)| names.contains(o));
    if has(&["e", "edit"]) {
        return Err("sudo -e edits files that are not judged");
    }
    let (rest, assigned) = skip_assignments(rest);
    if rest.is_empty() && has(&["i", "s", "login", "shell"]) {
        return Err("sudo starts a shell that reads commands not judged");
    }
    Ok((rest, assigned))
}

/// Skips leading `NAME=VALUE` words (and `env`'s `-`), reporting whether there were any.
fn skip_assignments(mut rest: &[Word]) -> (&[Word], bool) {
    let mut assigned = false;
    while let Some((first, tail)) = rest.split_first() {
        match first.exact() {
            Some("-") => {}
            Some(w) if is_assignment(w) => assigned = true,
            _ => break,
        }
        rest = tail;
    }
    (rest, assigned)
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// `find … -exec CMD … ;` (also `-execdir`, `-ok`, `-okdir`, ending in `;` or `+`): the
/// command is judged with `{}` as an unknown word. A non-literal word that could turn
/// into `-exec` makes the whole find indeterminate.
fn find(args: &[Word], text: &str, env: Env, sink: &mut Sink) {
    const SHIFTY: &str = "find with a word that could become an action or end one";
    let mut i = 0;
    let mut previous: Option<&str> = None;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some(word) = arg.exact() else {
            let is_value = previous.is_some_and(|p| FIND_VALUE_PRIMARIES.contains(&p));
            let single_value = is_value && !arg.splits && !arg.pattern;
            if !single_value && !harmless_pattern(arg) {
                return sink.indeterminate(text, SHIFTY);
            }
            previous = None;
            continue;
        };
        previous = Some(word);
        if !matches!(word, "-exec" | "-execdir" | "-ok" | "-okdir") {
            continue;
        }
        let mut inner = Vec::new();
        while let Some(w) = args.get(i) {
            i += 1;
            match w.exact() {
                Some(";" | "+") => break,
                Some(_) => inner.push(w.clone()),
                None if w.known && w.text == "{}" => inner.push(Word::unknown("{}", false)),
                // An expansion could produce the `;` that ends the command early.
                None if w.splits || (w.pattern && !harmless_pattern(w)) => {
                    return sink.indeterminate(text, SHIFTY)
                }
                None => inner.push(w.clone()),
            }
        }
        previous = None;
        if !inner.is_empty() {
            simple(inner, env, sink);
        }
    }
}

/// A glob whose expansions all start with the same ordinary character, so none of them
/// can be a find primary, operator or terminator.
fn harmless_pattern(word: &Word) -> bool {
    word.known
        && word.text.starts_with(|c: char| {
            !matches!(
                c,
                '*' | '?' | '[' | '{' | '-' | '!' | '(' | ')' | ';' | '+' | '~' | '\\'
            )
        })
}

/// Find primaries whose next word is a value (a name, a pattern, a number), not an action.
const FIND_VALUE_PRIMARIES: [&str; 24] = [
    "-name",
    "-iname",
    "-path",
    "-ipath",
    "-wholename",
    "-iwholename",
    "-regex",
    "-iregex",
    "-lname",
    "-ilname",
    "-type",
    "-xtype",
    "-newer",
    "-user",
    "-group",
    "-perm",
    "-size",
    "-mtime",
    "-mmin",
    "-atime",
    "-amin",
    "-ctime",
    "-cmin",
    "-samefile",
];

/// `bash [options] -c SCRIPT [args]` judges SCRIPT; any other way of starting a shell runs
/// commands the policy cannot see (a script file, standard input).
fn shell(args: &[Word], text: &str, env: Env, sink: &mut Sink) {
    let mut inline = false;
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].exact() else {
            return sink.indeterminate(
                text,
                "a shell started with arguments not known before it runs",
            );
        };
        i += 1;
        match arg {
            "--" => break,
            "--version" | "--help" => return,
            "--rcfile" | "--init-file" => i += 1,
            "--norc" | "--noprofile" | "--login" | "--posix" | "--restricted" | "--verbose"
            | "--noediting" | "--debugger" | "--dump-strings" | "--pretty-print" => {}
            long if long.starts_with("--") => {
                return sink.indeterminate(text, "a shell option the policy does not know")
            }
            cluster
                if cluster.len() > 1 && (cluster.starts_with('-') || cluster.starts_with('+')) =>
            {
                for c in cluster[1..].chars() {
                    match c {
                        'c' => inline = true,
                        'o' | 'O' => i += 1,
                        _ => {}
                    }
                }
            }
            _ => {
                i -= 1;
                break;
            }
        }
    }
    match (inline, args.get(i)) {
        (true, Some(arg)) => match arg.exact() {
            Some(body) => script(body, env, sink),
            None => sink.indeterminate(text, "a shell script not known before it runs"),
        },
        (true, None) => {}
        (false, Some(_)) => sink.indeterminate(text, "runs a script file that is not judged"),
        (false, None) => sink.indeterminate(text, "a shell reading commands that are not judged"),
    }
}

/// The options a wrapper accepts. Anything else makes the wrapper indeterminate: an
/// unknown option might take the next word, which would shift which word is the command.
struct Spec {
    /// Short options without an argument.
    flags: &'static str,
    /// Short options with an argument (attached or the next word).
    with_value: &'static str,
    /// Short options with an optional attached argument only.
    optional_value: &'static str,
    long_flags: &'static [&'static str],
    long_with_value: &'static [&'static str],
    /// Long options whose argument can only be attached with `=`.
    long_optional_value: &'static [&'static str],
    /// `nice -5`: a number is an option.
    numeric: bool,
}

const NO_OPTIONS: Spec = Spec {
    flags: "",
    with_value: "",
    optional_value: "",
    long_flags: &[],
    long_with_value: &[],
    long_optional_value: &[],
    numeric: false,
};

const ENV: Spec = Spec {
    flags: "i0v",
    with_value: "uCS",
    long_flags: &["ignore-environment", "null", "debug"],
    long_with_value: &["unset", "chdir", "split-string"],
    ..NO_OPTIONS
};
const TIMEOUT: Spec = Spec {
    flags: "v",
    with_value: "sk",
    long_flags: &["foreground", "preserve-status", "verbose"],
    long_with_value: &["signal", "kill-after"],
    ..NO_OPTIONS
};
const NICE: Spec = Spec {
    with_value: "n",
    long_with_value: &["adjustment"],
    numeric: true,
    ..NO_OPTIONS
};
const TIME: Spec = Spec {
    flags: "pavq",
    with_value: "fo",
    long_flags: &["portability", "append", "verbose", "quiet"],
    long_with_value: &["format", "output"],
    ..NO_OPTIONS
};
const COMMAND: Spec = Spec {
    flags: "pvV",
    ..NO_OPTIONS
};
const STDBUF: Spec = Spec {
    with_value: "ioe",
    long_with_value: &["input", "output", "error"],
    ..NO_OPTIONS
};
const EXEC: Spec = Spec {
    flags: "cl",
    with_value: "a",
    ..NO_OPTIONS
};
const SUDO: Spec = Spec {
    flags: "AbEeHiKklnPSsVv",
    with_value: "CDghpRrTtUu",
    long_flags: &[
        "askpass",
        "background",
        "edit",
        "login",
        "non-interactive",
        "remove-timestamp",
        "reset-timestamp",
        "set-home",
        "shell",
        "stdin",
        "list",
        "validate",
        "version",
    ],
    long_with_value: &[
        "chdir",
        "close-from",
        "command-timeout",
        "group",
        "host",
        "other-user",
        "prompt",
        "role",
        "type",
        "user",
        "chroot",
    ],
    long_optional_value: &["preserve-env"],
    ..NO_OPTIONS
};
const XARGS: Spec = Spec {
    flags: "0rtpxo",
    with_value: "adEILnPs",
    optional_value: "iel",
    long_flags: &[
        "null",
        "no-run-if-empty",
        "verbose",
        "interactive",
        "exit",
        "open-tty",
        "show-limits",
    ],
    long_with_value: &[
        "arg-file",
        "delimiter",
        "max-args",
        "max-procs",
        "max-chars",
        "process-slot-var",
    ],
    long_optional_value: &["replace", "max-lines", "eof"],
    numeric: false,
};

/// An option and its value, if it took one.
type Opt<'w> = (&'w str, Option<Word>);

/// Parses leading options; returns the words after them and the options seen.
fn options<'w>(args: &'w [Word], spec: &Spec) -> Result<(&'w [Word], Vec<Opt<'w>>), &'static str> {
    const UNKNOWN: &str = "a wrapper option the policy does not know";
    const DYNAMIC: &str = "a wrapper argument not known before it runs";
    let mut seen = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        // A word that is not known could be an option as well as the command.
        let Some(text) = arg.exact() else {
            return Err(DYNAMIC);
        };
        if text == "--" {
            return Ok((&args[i + 1..], seen));
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        i += 1;
        if let Some(long) = text.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            let value = long.split_once('=').map(|(_, v)| Word::literal(v));
            if spec.long_flags.contains(&name) && !attached {
                seen.push((name, None));
            } else if spec.long_optional_value.contains(&name) {
                seen.push((name, value));
            } else if spec.long_with_value.contains(&name) {
                if attached {
                    seen.push((name, value));
                } else {
                    let value = value_word(args.get(i))?;
                    seen.push((name, Some(value.clone())));
                    i += 1;
                }
            } else {
                return Err(UNKNOWN);
            }
            continue;
        }
        let cluster = &text[1..];
        if spec.numeric && cluster.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for (at, c) in cluster.char_indices() {
            let name = &cluster[at..at + c.len_utf8()];
            if spec.flags.contains(c) {
                seen.push((name, None));
            } else if spec.optional_value.contains(c) {
                seen.push((name, None));
                break;
            } else if spec.with_value.contains(c) {
                let attached = &cluster[at + c.len_utf8()..];
                if attached.is_empty() {
                    let value = value_word(args.get(i))?;
                    seen.push((name, Some(value.clone())));
                    i += 1;
                } else {
                    seen.push((name, Some(Word::literal(attached))));
                }
                break;
            } else {
                return Err(UNKNOWN);
            }
        }
    }
    Ok((&args[i..], seen))
}

/// An option's separate value: it must exist and must not split into several words.
fn value_word(word: Option<&Word>) -> Result<&Word, &'static str> {
    match word {
        Some(w) if !w.splits => Ok(w),
        Some(_) => Err("a wrapper argument not known before it runs"),
        None => Err("a wrapper option without its value"),
    }
}
