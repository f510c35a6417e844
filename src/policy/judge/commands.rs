//! Simple commands: the part itself, and what it does beyond running a program of that
//! name — builtins that change the shell's state or run strings, shells and `eval` that
//! run scripts, wrappers (`wrappers`), and programs that write files or run code named in
//! their arguments (`programs`).

use super::lex;
use super::options::{options, Spec, NO_OPTIONS};
use super::programs;
use super::reads;
use super::shell::{join, script, Env, Part, Restriction, Sink};
use super::table;
use super::words::Word;
use super::wrappers;

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
    let mut path_name = false;
    if name.contains('/') {
        let base = name.rsplit('/').next().unwrap_or_default().to_string();
        if base.is_empty() {
            return sink.indeterminate(&text, "the command name is a directory");
        }
        words[0] = Word::literal(base);
        path_name = true;
    }
    let name = words[0].text.clone();
    // The command itself goes before what its builtin or program tables add, so that a
    // deny of the command is what the verdict names.
    let at = sink.parts.len();
    let state = builtin(&name, &words, &text, env, sink);
    let unvetted = table::judge(&name, &words, &text, env, sink);
    let restriction = env
        .assigns
        .then_some(Restriction::Assignment)
        .or(state)
        .or(unvetted)
        .or(path_name.then_some(Restriction::PathName));
    programs::judge(&name, &words, &text, sink);
    reads::judge(&name, &words, &text, sink);
    let runs = wrappers::runs_commands(&name) || is_shell(&name) || RUNS_STRINGS.contains(&&*name);
    if !runs {
        let part = Part::Command {
            words,
            text,
            restriction,
        };
        return sink.parts.insert(at, part);
    }
    let plain = restriction.is_none();
    let part = Part::Command {
        words: words.clone(),
        text: text.clone(),
        restriction,
    };
    sink.parts.insert(at, part);
    let env = env.deeper();
    let args = &words[1..];
    match name.as_str() {
        _ if is_shell(&name) => {
            // A shell that only runs a literal script is judged as that script.
            if shell(&name, args, &text, env, sink) && plain {
                sink.parts.remove(at);
            }
        }
        "eval" => {
            // Bash's `eval` takes a leading `--` as the end of its (no) options.
            let code = match args.first().and_then(Word::exact) {
                Some("--") => &args[1..],
                _ => args,
            };
            match code.iter().map(Word::exact).collect::<Option<Vec<_>>>() {
                Some(parts) => script(&parts.join(" "), env, sink),
                None => sink.indeterminate(&text, "eval of text not known before it runs"),
            }
        }
        "source" | "." => sink.indeterminate(&text, "runs a script file that is not judged"),
        _ => wrappers::unwrap(&name, &words, &text, env, sink),
    }
}

/// Builtins that run a string as a script.
const RUNS_STRINGS: &[&str] = &["eval", "source", "."];

fn is_shell(name: &str) -> bool {
    matches!(
        name,
        "bash" | "sh" | "zsh" | "dash" | "ksh" | "ash" | "mksh" | "fish" | "csh" | "tcsh" | "rbash"
    )
}

/// Builtins that change what later commands do: their variables (and so `PATH`,
/// `BASH_ENV`, array subscripts evaluated later), options, traps, aliases, the command
/// hash, loaded builtins. Such a command is never allowed.
const SHELL_STATE: &[&str] = &[
    "export",
    "declare",
    "typeset",
    "local",
    "readonly",
    "unset",
    "read",
    "readarray",
    "mapfile",
    "getopts",
    "let",
    "alias",
    "unalias",
    "hash",
    "shopt",
    "enable",
    "trap",
];

/// Builtins that run strings later, or whose effect cannot be judged at all.
const UNJUDGED_BUILTINS: &[&str] = &["complete", "compgen", "compopt", "bind", "fc", "history"];

/// `set` options that change nothing another command could use to run code.
const SAFE_SET_OPTIONS: &[&str] = &[
    "errexit",
    "nounset",
    "pipefail",
    "xtrace",
    "verbose",
    "noclobber",
];

/// Judges a builtin's own effects; returns the restriction it puts on the command.
fn builtin(
    name: &str,
    words: &[Word],
    text: &str,
    env: Env,
    sink: &mut Sink,
) -> Option<Restriction> {
    let args = &words[1..];
    let has_option = |opt: char| {
        args.iter().any(|w| {
            let t = w.text.as_str();
            t.len() > 1 && t.starts_with('-') && !t.starts_with("--") && t[1..].contains(opt)
        })
    };
    match name {
        "cd" | "pushd" | "popd" => {
            sink.changes_dir = true;
            None
        }
        "trap" => {
            trap(args, text, env, sink);
            Some(Restriction::ShellState)
        }
        "let" => {
            for arg in args {
                let effects = lex::arithmetic_effects(&arg.text);
                sink.effects(text, effects, env);
            }
            Some(Restriction::ShellState)
        }
        "mapfile" | "readarray" if has_option('C') => {
            sink.indeterminate(text, "mapfile -C runs a callback that is not judged");
            Some(Restriction::ShellState)
        }
        "enable" if has_option('f') => {
            sink.indeterminate(text, "enable -f loads code from a file");
            Some(Restriction::ShellState)
        }
        _ if SHELL_STATE.contains(&name) => Some(Restriction::ShellState),
        _ if UNJUDGED_BUILTINS.contains(&name) => {
            sink.indeterminate(
                text,
                "a builtin that runs strings or history the policy does not judge",
            );
            Some(Restriction::ShellState)
        }
        "printf" if has_option('v') => Some(Restriction::ShellState),
        "wait" if has_option('p') => Some(Restriction::ShellState),
        "set" if !safe_set(args) => Some(Restriction::ShellState),
        "test" | "[" => {
            if test_evaluates_code(text) {
                sink.indeterminate(text, lex::ARITHMETIC_SUBSCRIPT);
            }
            None
        }
        _ => None,
    }
}

/// `trap [-lp] [[ACTION] SIGNAL…]`: the action is judged as the script it is.
fn trap(args: &[Word], text: &str, env: Env, sink: &mut Sink) {
    const SPEC: Spec = Spec {
        flags: "lp",
        ..NO_OPTIONS
    };
    let rest = match options(args, &SPEC) {
        Ok((rest, seen)) if seen.is_empty() => rest,
        Ok(_) => return,
        Err(why) => return sink.indeterminate(text, why),
    };
    if rest.len() < 2 {
        // `trap SIGNAL` resets it; `trap` alone lists.
        return;
    }
    match rest[0].exact() {
        Some(action) => script(action, env.deeper(), sink),
        None => sink.indeterminate(text, "a trap action not known before it runs"),
    }
}

/// `set` with only options that cannot make another command run code: `-e`, `-u`, `-x`,
/// `-v`, `-C`, `-o pipefail` and their `+` forms. `set -k`, `set -a`, `set --` and the rest
/// change what later commands receive.
fn safe_set(args: &[Word]) -> bool {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let Some(text) = arg.exact() else {
            return false;
        };
        i += 1;
        let Some(cluster) = text.strip_prefix('-').or_else(|| text.strip_prefix('+')) else {
            return false;
        };
        let (flags, takes_name) = match cluster.strip_suffix('o') {
            Some(flags) => (flags, true),
            None => (cluster, false),
        };
        if !flags.chars().all(|c| "euxvC".contains(c)) || (flags.is_empty() && !takes_name) {
            return false;
        }
        if takes_name {
            match args.get(i).and_then(Word::exact) {
                Some(opt) if SAFE_SET_OPTIONS.contains(&opt) => i += 1,
                _ => return false,
            }
        }
    }
    true
}

/// Whether a `test`/`[ ]`/`[[ ]]` evaluates text not known now as arithmetic (`-eq` and
/// the like evaluate array subscripts in their operands, and `-v` in its name).
pub(crate) fn test_evaluates_code(text: &str) -> bool {
    const ARITHMETIC: [&str; 8] = ["-eq", "-ne", "-lt", "-le", "-gt", "-ge", "-v", "-R"];
    if !text.split_whitespace().any(|w| ARITHMETIC.contains(&w)) {
        return false;
    }
    let inner = text
        .trim()
        .trim_start_matches("[[")
        .trim_start_matches('[')
        .trim_end_matches("]]")
        .trim_end_matches(']');
    inner.contains(['[', '$', '`', '\'', '"', '\\'])
}

/// `bash [options] -c SCRIPT [args]` judges SCRIPT; any other way of starting a shell runs
/// commands the policy cannot see (a script file, standard input, startup files). True
/// when the shell does nothing but run a literal script with options that change nothing
/// else.
fn shell(name: &str, args: &[Word], text: &str, env: Env, sink: &mut Sink) -> bool {
    if matches!(name, "fish" | "csh" | "tcsh") {
        sink.indeterminate(text, "runs a shell whose scripts are not judged");
        return false;
    }
    const STARTUP: &str = "a shell option that reads startup files or is not known";
    let mut inline = false;
    let mut unsafe_option = false;
    let mut i = 0;
    while i < args.len() {
        let Some(arg) = args[i].exact() else {
            sink.indeterminate(
                text,
                "a shell started with arguments not known before it runs",
            );
            return false;
        };
        i += 1;
        match arg {
            "--" => break,
            "--version" | "--help" => return false,
            "--norc" | "--noprofile" | "--posix" | "--noediting" => {}
            "-o" | "+o" => match args.get(i).and_then(Word::exact) {
                Some(opt) => {
                    unsafe_option |= !SAFE_SET_OPTIONS.contains(&opt);
                    i += 1;
                }
                None => unsafe_option = true,
            },
            "--rcfile" | "--init-file" => {
                unsafe_option = true;
                i += 1;
            }
            long if long.starts_with("--") => unsafe_option = true,
            cluster
                if cluster.len() > 1 && (cluster.starts_with('-') || cluster.starts_with('+')) =>
            {
                for c in cluster[1..].chars() {
                    match c {
                        'c' => inline = true,
                        'e' | 'u' | 'x' | 'v' | 'C' | 'f' | 'n' => {}
                        'O' => {
                            unsafe_option = true;
                            i += 1;
                        }
                        _ => unsafe_option = true,
                    }
                }
            }
            _ => {
                i -= 1;
                break;
            }
        }
    }
    if unsafe_option {
        sink.indeterminate(text, STARTUP);
    }
    match (inline, args.get(i)) {
        (true, Some(arg)) => match arg.exact() {
            Some(body) => {
                script(body, env, sink);
                return !unsafe_option;
            }
            None => sink.indeterminate(text, "a shell script not known before it runs"),
        },
        (true, None) => {}
        (false, Some(_)) => sink.indeterminate(text, "runs a script file that is not judged"),
        (false, None) => sink.indeterminate(text, "a shell reading commands that are not judged"),
    }
    false
}
