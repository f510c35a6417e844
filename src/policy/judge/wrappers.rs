//! Wrappers: commands that run another command named in their arguments (`env`, `sudo`,
//! `timeout`, `xargs`, `find -exec`, …). The parse tree only sees words there, so each
//! wrapper is described here as data — its options, the operands before the command, the
//! options that change directory, run a script or write a file — and the wrapped command
//! is judged too. A command known to run others but not described here is indeterminate.

use super::commands::simple;
use super::options::{options, Opt, Spec, NO_OPTIONS};
use super::shell::{script, write_part, Env, Sink};
use super::words::Word;

/// How a wrapper finds the command it runs.
struct Wrapper {
    name: &'static str,
    spec: Spec,
    /// Operands between the options and the command (`timeout`'s duration, `flock`'s file).
    operands: usize,
    /// Options that make the command run in another directory: relative paths it writes
    /// are then unknown.
    chdir: &'static [&'static str],
    /// Options after which the operands are not a command (`taskset -p`, `ionice -p`).
    no_command: &'static [&'static str],
    /// Options whose value is a shell script it runs (`flock -c`).
    script: &'static [&'static str],
    /// Options whose value is a file it writes (`time -o`).
    output: &'static [&'static str],
    /// `NAME=VALUE` words may stand before the command and set its environment.
    assignments: bool,
    /// The operands are files it creates (`flock`'s lock file).
    writes_operands: bool,
}

const PLAIN: Wrapper = Wrapper {
    name: "",
    spec: NO_OPTIONS,
    operands: 0,
    chdir: &[],
    no_command: &[],
    script: &[],
    output: &[],
    assignments: false,
    writes_operands: false,
};

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        name: "env",
        spec: Spec {
            flags: "i0v",
            with_value: "uCS",
            long_flags: &["ignore-environment", "null", "debug"],
            long_with_value: &["unset", "chdir", "split-string"],
            ..NO_OPTIONS
        },
        chdir: &["C", "chdir"],
        assignments: true,
        ..PLAIN
    },
    Wrapper {
        name: "sudo",
        spec: Spec {
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
        },
        chdir: &["D", "chdir", "R", "chroot"],
        assignments: true,
        ..PLAIN
    },
    Wrapper {
        name: "timeout",
        spec: Spec {
            flags: "v",
            with_value: "sk",
            long_flags: &["foreground", "preserve-status", "verbose"],
            long_with_value: &["signal", "kill-after"],
            ..NO_OPTIONS
        },
        operands: 1,
        ..PLAIN
    },
    Wrapper {
        name: "nice",
        spec: Spec {
            with_value: "n",
            long_with_value: &["adjustment"],
            numeric: true,
            ..NO_OPTIONS
        },
        ..PLAIN
    },
    Wrapper {
        name: "nohup",
        ..PLAIN
    },
    Wrapper {
        name: "builtin",
        ..PLAIN
    },
    Wrapper {
        name: "setsid",
        spec: Spec {
            flags: "cfw",
            long_flags: &["ctty", "fork", "wait"],
            ..NO_OPTIONS
        },
        ..PLAIN
    },
    Wrapper {
        name: "stdbuf",
        spec: Spec {
            with_value: "ioe",
            long_with_value: &["input", "output", "error"],
            ..NO_OPTIONS
        },
        ..PLAIN
    },
    Wrapper {
        name: "exec",
        spec: Spec {
            flags: "cl",
            with_value: "a",
            ..NO_OPTIONS
        },
        ..PLAIN
    },
    Wrapper {
        name: "time",
        spec: Spec {
            flags: "pavq",
            with_value: "fo",
            long_flags: &["portability", "append", "verbose", "quiet"],
            long_with_value: &["format", "output"],
            ..NO_OPTIONS
        },
        output: &["o", "output"],
        // `time` is also bash's keyword, which times a whole command, assignments included.
        assignments: true,
        ..PLAIN
    },
    Wrapper {
        name: "ionice",
        spec: Spec {
            flags: "t",
            with_value: "cnpPu",
            long_flags: &["ignore"],
            long_with_value: &["class", "classdata", "pid", "pgid", "uid"],
            ..NO_OPTIONS
        },
        no_command: &["p", "P", "u", "pid", "pgid", "uid"],
        ..PLAIN
    },
    Wrapper {
        name: "taskset",
        spec: Spec {
            flags: "acp",
            long_flags: &["all-tasks", "cpu-list", "pid"],
            ..NO_OPTIONS
        },
        operands: 1,
        no_command: &["p", "pid"],
        ..PLAIN
    },
    Wrapper {
        name: "flock",
        spec: Spec {
            flags: "sexunoF",
            with_value: "wEc",
            long_flags: &[
                "shared",
                "exclusive",
                "unlock",
                "nonblock",
                "close",
                "no-fork",
                "verbose",
            ],
            long_with_value: &["timeout", "conflict-exit-code", "command"],
            ..NO_OPTIONS
        },
        operands: 1,
        script: &["c", "command"],
        writes_operands: true,
        ..PLAIN
    },
];

/// Commands known to run other commands (or a shell, or code) in ways not described in
/// `WRAPPERS`: never judged as a plain command.
const NOT_MODELLED: &[&str] = &[
    "chrt",
    "nsenter",
    "unshare",
    "chroot",
    "prlimit",
    "numactl",
    "cgexec",
    "strace",
    "ltrace",
    "valgrind",
    "setpriv",
    "firejail",
    "bwrap",
    "fakeroot",
    "proot",
    "catchsegv",
    "unbuffer",
    "rlwrap",
    "dbus-run-session",
    "dbus-launch",
    "systemd-run",
    "su",
    "runuser",
    "sg",
    "newgrp",
    "script",
    "watch",
    "parallel",
    "ssh",
    "gdb",
    "lldb",
    "expect",
    "tmux",
    "screen",
    "xterm",
    "busybox",
    "chpst",
    "doas",
    "pkexec",
    "npx",
    "pnpx",
    "bunx",
    "uvx",
    "pipx",
    "nix-shell",
    "direnv",
    "dotenv",
    "gosu",
    "su-exec",
    "tini",
    "dumb-init",
    "caffeinate",
    "nocache",
    "eatmydata",
    "torsocks",
    "proxychains",
    "proxychains4",
    "tsocks",
    "faketime",
    "perf",
    "hyperfine",
    "entr",
    "coproc",
    "sshpass",
    "mpirun",
    "srun",
    "qemu-user",
    "box64",
];

/// Whether `name` runs other commands: a wrapper, a shell, or one not modelled.
pub(crate) fn runs_commands(name: &str) -> bool {
    WRAPPERS.iter().any(|w| w.name == name)
        || NOT_MODELLED.contains(&name)
        || matches!(name, "command" | "xargs" | "find")
}

/// Whether `name` is a wrapper whose command is found in its words and judged as a
/// command of its own.
pub(crate) fn judges_its_command(name: &str) -> bool {
    WRAPPERS.iter().any(|w| w.name == name) || matches!(name, "command" | "xargs")
}

/// Judges what a wrapper runs (the wrapper itself is already a part).
pub(crate) fn unwrap(name: &str, words: &[Word], text: &str, env: Env, sink: &mut Sink) {
    let args = &words[1..];
    match name {
        "command" => return command(args, text, env, sink),
        "xargs" => return xargs(args, text, env, sink),
        "find" => return find(args, text, env, sink),
        _ => {}
    }
    if NOT_MODELLED.contains(&name) {
        return sink.indeterminate(
            text,
            "it runs other commands in a way the policy does not model",
        );
    }
    let Some(wrapper) = WRAPPERS.iter().find(|w| w.name == name) else {
        return;
    };
    let (rest, seen) = match options(args, &wrapper.spec) {
        Ok(parsed) => parsed,
        Err(why) => return sink.indeterminate(text, why),
    };
    let has = |names: &[&str]| seen.iter().any(|(o, _)| names.contains(o));
    if has(wrapper.chdir) {
        sink.changes_dir = true;
    }
    if has(wrapper.no_command) {
        return;
    }
    for (opt, value) in &seen {
        match value {
            Some(v) if wrapper.output.contains(opt) => sink.parts.extend(write_part(v, text)),
            Some(v) if wrapper.script.contains(opt) => run_script(v, text, env, sink),
            _ => {}
        }
    }
    if let Err(why) = special(name, &seen, rest) {
        return sink.indeterminate(text, why);
    }
    if wrapper.writes_operands {
        for operand in rest.iter().take(wrapper.operands) {
            sink.parts.extend(write_part(operand, text));
        }
    }
    let Some(rest) = rest.get(wrapper.operands..) else {
        return;
    };
    let (rest, assigned) = if wrapper.assignments {
        skip_assignments(rest)
    } else {
        (rest, false)
    };
    if rest.is_empty() {
        return;
    }
    // `flock FILE -c SCRIPT`: the script comes after the lock file.
    if wrapper.script.is_empty() || !matches!(rest[0].exact(), Some("-c" | "--command")) {
        let env = Env {
            assigns: env.assigns || assigned,
            ..env
        };
        return simple(rest.to_vec(), env, sink);
    }
    match rest.get(1) {
        Some(body) => run_script(body, text, env, sink),
        None => sink.indeterminate(text, "a wrapper option without its value"),
    }
}

/// Options of `env` and `sudo` that make what runs unknowable.
fn special(name: &str, seen: &[Opt<'_>], rest: &[Word]) -> Result<(), &'static str> {
    let has = |names: &[&str]| seen.iter().any(|(o, _)| names.contains(o));
    match name {
        "env" if has(&["S", "split-string"]) => {
            Err("env -S splits a string into a command that is not judged")
        }
        "sudo" if has(&["e", "edit"]) => Err("sudo -e edits files that are not judged"),
        "sudo" if has(&["i", "s", "login", "shell"]) && skip_assignments(rest).0.is_empty() => {
            Err("sudo starts a shell that reads commands not judged")
        }
        _ => Ok(()),
    }
}

fn run_script(body: &Word, text: &str, env: Env, sink: &mut Sink) {
    match body.exact() {
        Some(body) => script(body, env, sink),
        None => sink.indeterminate(text, "a shell script not known before it runs"),
    }
}

/// `command [-pvV] NAME …`: `-v`/`-V` only look the name up.
fn command(args: &[Word], text: &str, env: Env, sink: &mut Sink) {
    const SPEC: Spec = Spec {
        flags: "pvV",
        ..NO_OPTIONS
    };
    match options(args, &SPEC) {
        Ok((_, seen)) if seen.iter().any(|(o, _)| matches!(*o, "v" | "V")) => {}
        Ok(([], _)) => {}
        Ok((rest, _)) => simple(rest.to_vec(), env, sink),
        Err(why) => sink.indeterminate(text, why),
    }
}

/// `xargs [options] [COMMAND [ARGS]]`: the command gets an unknown last word (the
/// arguments read from stdin); with `-I R` (or `-i`), every word holding R is replaced by
/// input, so it is unknown.
fn xargs(args: &[Word], text: &str, env: Env, sink: &mut Sink) {
    const SPEC: Spec = Spec {
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
    let (rest, seen) = match options(args, &SPEC) {
        Ok(parsed) => parsed,
        Err(why) => return sink.indeterminate(text, why),
    };
    if rest.is_empty() {
        // xargs runs `echo` by default.
        return;
    }
    let replace = seen.iter().find_map(|(o, v)| match *o {
        "I" => v.as_ref().map(|w| w.text.clone()),
        "i" | "replace" => Some(v.as_ref().map_or("{}".to_string(), |w| w.text.clone())),
        _ => None,
    });
    let mut inner: Vec<Word> = rest
        .iter()
        .map(|w| match &replace {
            Some(r) if !r.is_empty() && w.text.contains(r.as_str()) => {
                Word::unknown(w.text.clone(), false)
            }
            _ => w.clone(),
        })
        .collect();
    if replace.is_none() {
        inner.push(Word::unknown("<arguments from stdin>", true));
    }
    simple(inner, env, sink);
}

/// Skips leading `NAME=VALUE` words (and `env`'s `-`), reporting whether there were any.
fn skip_assignments(mut rest: &[Word]) -> (&[Word], bool) {
    let mut assigned = false;
    while let Some((first, tail)) = rest.split_first() {
        match first.exact() {
            Some("-") => {}
            Some(w) if is_assignment(w) => assigned = true,
            _ if !first.known && first.text.contains('=') => assigned = true,
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
/// command is judged with `{}` as an unknown word; `-execdir` runs it in each file's
/// directory. A non-literal word that could turn into `-exec` makes the whole find
/// indeterminate. Files it writes (`-fprint`, `-fls`, `-delete`) are writes.
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
        match word {
            "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                if let Some(target) = args.get(i) {
                    sink.parts.extend(write_part(target, text));
                }
                continue;
            }
            "-delete" => {
                sink.parts
                    .extend(write_part(&Word::unknown("{}", false), text));
                continue;
            }
            "-execdir" | "-okdir" => sink.changes_dir = true,
            "-exec" | "-ok" => {}
            _ => continue,
        }
        let mut inner = Vec::new();
        while let Some(w) = args.get(i) {
            i += 1;
            match w.exact() {
                Some(";" | "+") => break,
                Some(_) => inner.push(w.clone()),
                None if w.known && w.text == "{}" => inner.push(Word::found("{}")),
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
