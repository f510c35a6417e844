//! The shell splitter's fast path, checked against the parser.

use super::*;
use proptest::prelude::*;

fn parts(src: &str, fast: bool) -> Vec<Part> {
    let env = Env {
        depth: 0,
        assigns: false,
    };
    let mut sink = Sink::default();
    match plain_words(src) {
        Some(words) if fast => commands::simple(words, env, &mut sink),
        _ => parsed(src, env, &mut sink),
    }
    sink.parts
}

const PLAIN_WORDS: &[&str] = &[
    "git",
    "status",
    "if",
    "then",
    "fi",
    "done",
    "in",
    "time",
    "coproc",
    "2",
    "0x1",
    "a=b",
    "=",
    "-",
    "--",
    "%1",
    "@",
    ":",
    ".",
    "..",
    "/usr/bin/env",
    "./x",
    "a,b",
    "+x",
    "-n",
    "sudo",
    "env",
    "bash",
    "-c",
    "find",
    "-exec",
    "+",
    "timeout",
    "nice",
    "-5",
    "xargs",
    "eval",
    "command",
    "-v",
    "builtin",
    "exec",
    "nohup",
    "stdbuf",
    "source",
    "cd",
    "-x",
    "LD_PRELOAD=/tmp/x.so",
    "x.so",
    "/dev/tcp/h/1",
    // Every bash builtin: the fast path must judge each as the parser does.
    "alias",
    "bg",
    "bind",
    "break",
    "caller",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
    "-C",
    "-f",
    "-p",
    "-v",
    "-e",
    "-o",
    "pipefail",
    "-k",
    // Wrappers and programs with their own tables.
    "ionice",
    "flock",
    "taskset",
    "setsid",
    "tee",
    "cp",
    "mv",
    "dd",
    "of=x",
    "sed",
    "-i",
    "git",
    "python3",
    "awk",
    "make",
    "chrt",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    /// The fast path yields exactly what the parser does, for every line it accepts.
    #[test]
    fn plain_fast_path_equals_the_parser(
        words in prop::collection::vec(prop::sample::select(PLAIN_WORDS), 1..6),
        spaces in prop::collection::vec(1usize..3, 6),
    ) {
        let mut src = String::new();
        for (w, n) in words.iter().zip(&spaces) {
            src.push_str(w);
            src.push_str(&" ".repeat(*n));
        }
        if plain_words(&src).is_some() {
            prop_assert_eq!(parts(&src, true), parts(&src, false), "{:?}", src);
        }
    }

    #[test]
    fn plain_fast_path_equals_the_parser_on_any_plain_text(src in "[a-z0-9 _./:@%+,=-]{1,12}") {
        if plain_words(&src).is_some() {
            prop_assert_eq!(parts(&src, true), parts(&src, false), "{:?}", src);
        }
    }
}

/// Every line of up to four plain characters (letters and digits stand for each other).
#[test]
fn plain_fast_path_equals_the_parser_exhaustively() {
    let alphabet: Vec<char> = "a0 -_./:@%+,=".chars().collect();
    let max_len: u32 = std::env::var("PLAIN_MAX_LEN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    for len in 1..=max_len {
        for n in 0..alphabet.len().pow(len) {
            let mut src = String::new();
            let mut k = n;
            for _ in 0..len {
                src.push(alphabet[k % alphabet.len()]);
                k /= alphabet.len();
            }
            if plain_words(&src).is_some() {
                assert_eq!(parts(&src, true), parts(&src, false), "{src:?}");
            }
        }
    }
}

#[test]
fn metacharacters_take_the_parser() {
    for src in [
        "a;b", "a|b", "a$b", "a'b'", "a\\b", "a*", "a=b c", "if x", "~/x", "a#b", "a\tb", "é",
    ] {
        assert!(plain_words(src).is_none(), "{src}");
    }
    assert!(plain_words("git status -- x=1").is_some());
}
