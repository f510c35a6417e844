//! Programs that run code given in their arguments: interpreters with inline code (or
//! reading their program from stdin), `awk` programs that call `system` or pipe, and `sed`
//! scripts with `e` or `w`. Such a command is indeterminate: the code is not judged.

use super::options::{options, Spec, NO_OPTIONS};
use super::programs::{options_anywhere, sed_writes, SED};
use super::shell::Sink;
use super::words::Word;

const INLINE_CODE: &str = "an interpreter given code on its command line, which is not judged";
const STDIN_CODE: &str = "an interpreter reading its program from standard input";

/// The letters (and long options) with which an interpreter takes its program on the
/// command line; `None` for programs that are not interpreters.
pub(crate) fn interpreter_code_flags(name: &str) -> Option<&'static str> {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match base {
        "python" | "pypy" => "c",
        "perl" => "eE",
        "ruby" | "lua" | "luajit" | "Rscript" => "e",
        "node" | "nodejs" | "bun" => "ep",
        "julia" => "eE",
        "php" => "rBREF",
        "deno" | "tclsh" | "wish" | "osascript" | "pwsh" | "powershell" => "",
        _ => return None,
    })
}

pub(crate) fn interpreter(flags: &str, args: &[Word], text: &str, sink: &mut Sink) {
    let mut has_program = false;
    for arg in args {
        let Some(word) = arg.exact() else {
            return sink.indeterminate(text, INLINE_CODE);
        };
        if matches!(word, "--eval" | "--print" | "--command" | "eval" | "-")
            || word.starts_with("--eval=")
        {
            return sink.indeterminate(text, INLINE_CODE);
        }
        if let Some(cluster) = word.strip_prefix('-').filter(|c| !c.starts_with('-')) {
            if cluster.chars().any(|c| flags.contains(c)) {
                return sink.indeterminate(text, INLINE_CODE);
            }
            if cluster.starts_with('m') || matches!(cluster, "V" | "h" | "v") {
                has_program = true;
            }
        } else if !word.starts_with('-') || matches!(word, "--version" | "--help") {
            has_program = true;
        }
    }
    if !has_program {
        sink.indeterminate(text, STDIN_CODE);
    }
}

/// An awk program that runs commands (`system`, `|`) or writes files (`>`) is not judged.
pub(crate) fn awk(args: &[Word], text: &str, sink: &mut Sink) {
    const SPEC: Spec = Spec {
        flags: "bcCdDgMnNOPrStVyz",
        with_value: "FvfEeilLop",
        ..NO_OPTIONS
    };
    let program = match options(args, &SPEC) {
        Ok((_, seen))
            if seen
                .iter()
                .any(|(o, _)| matches!(*o, "f" | "E" | "e" | "i" | "l" | "o" | "p")) =>
        {
            None
        }
        Ok((rest, _)) => rest.first().and_then(Word::exact),
        Err(_) => None,
    };
    let runs = |p: &str| {
        ["system", "|", ">", "getline", "close"]
            .iter()
            .any(|k| p.contains(k))
    };
    if program.is_none_or(runs) {
        sink.indeterminate(text, "an awk program that may run commands or write files");
    }
}

/// `sed`: a script with `e` (run a command), `w`/`W` (write a file) or `s///e|w` is not
/// judged; `-i` writes the files it edits (see `WRITERS`).
pub(crate) fn sed(args: &[Word], text: &str, sink: &mut Sink) {
    sed_writes(args, text, sink);
    let Some((operands, seen)) = options_anywhere(args, &SED) else {
        return sink.indeterminate(text, super::programs::UNKNOWN_OPTIONS);
    };
    let mut scripts: Vec<&Word> = Vec::new();
    for (opt, value) in &seen {
        match (opt.as_str(), value) {
            ("e" | "expression", Some(v)) => scripts.push(v),
            ("f" | "file", _) => return sink.indeterminate(text, "a sed script read from a file"),
            _ => {}
        }
    }
    if scripts.is_empty() {
        scripts.extend(operands.first());
    }
    let sandboxed = seen.iter().any(|(o, _)| o == "sandbox");
    for script in scripts {
        if !sandboxed && script.exact().is_none_or(sed_runs_or_writes) {
            return sink.indeterminate(text, "a sed script that may run commands or write files");
        }
    }
}

/// Whether a sed script has a command that runs a program or writes a file. Anything it
/// does not recognise counts as such.
fn sed_runs_or_writes(script: &str) -> bool {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_delimited = |i: &mut usize, delim: char| -> bool {
        while *i < chars.len() {
            match chars[*i] {
                '\\' => *i += 2,
                c if c == delim => {
                    *i += 1;
                    return true;
                }
                _ => *i += 1,
            }
        }
        false
    };
    let to_line_end = |i: &mut usize| {
        while *i < chars.len() && chars[*i] != '\n' {
            *i += 1;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            ' ' | '\t' | '\n' | ';' | '{' | '}' | '!' | ',' | '$' | '~' | '+' => {}
            '0'..='9' => {}
            '/' => {
                if !skip_delimited(&mut i, '/') {
                    return true;
                }
            }
            '\\' => {
                let Some(&delim) = chars.get(i) else {
                    return true;
                };
                i += 1;
                if !skip_delimited(&mut i, delim) {
                    return true;
                }
            }
            '#' | 'a' | 'i' | 'c' | ':' | 'b' | 't' | 'T' | 'r' | 'R' => to_line_end(&mut i),
            's' | 'y' => {
                let Some(&delim) = chars.get(i) else {
                    return true;
                };
                i += 1;
                if !skip_delimited(&mut i, delim) || !skip_delimited(&mut i, delim) {
                    return true;
                }
                while let Some(&flag) = chars.get(i) {
                    if matches!(flag, ';' | '\n' | '}' | ' ') {
                        break;
                    }
                    if c == 's' && !(flag.is_ascii_digit() || "gpiImM".contains(flag)) {
                        return true;
                    }
                    i += 1;
                }
            }
            'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'l' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z' | 'F'
            | 'q' | 'Q' | 'L' | '=' => {}
            _ => return true,
        }
    }
    false
}
