//! Every entry of the option table, through the shell splitter: each option of each
//! program, spelled as a command line gives it, has the effect its kind says — harmless
//! options leave the command as it is (a mode may still write: `tar -x`), writes are writes of their value, programs are
//! commands of their own, directory switches are recorded, refused options carry their
//! reason — and an option the entry does not know makes the command unvetted, named.

use super::*;
use crate::policy::judge::shell::{script, Part};

/// Every program's options, with the words that start its command lines.
fn tables() -> Vec<(String, &'static Options)> {
    let programs = PROGRAMS
        .iter()
        .map(|(name, entry)| (name.to_string(), &entry.options));
    let git = git::SUBCOMMANDS.iter().flat_map(|(names, options)| {
        names
            .iter()
            .map(move |name| (format!("git {name}"), *options))
    });
    programs
        .chain(git)
        .chain([("git".to_string(), &git::GLOBAL)])
        .collect()
}

/// The parts of `line` and whether it switches directory.
fn judged(line: &str) -> (Vec<Part>, bool) {
    let mut sink = Sink::default();
    let env = Env {
        depth: 0,
        assigns: false,
    };
    script(line, env, &mut sink);
    (sink.parts, sink.changes_dir)
}

/// The restriction on the command `line` itself (its first part).
fn restriction(parts: &[Part]) -> Option<Restriction> {
    match parts.first() {
        Some(Part::Command { restriction, .. }) => restriction.clone(),
        other => panic!("not a command first: {other:?}"),
    }
}

fn names(list: &str) -> impl Iterator<Item = &str> {
    list.split_ascii_whitespace()
}

#[test]
fn harmless_options_leave_the_command_as_it_is() {
    for (prefix, options) in tables() {
        let lists = [options.flags, options.optional, options.values];
        for (kind, list) in lists.into_iter().enumerate() {
            for option in names(list) {
                let value = if kind == 2 { " 4" } else { "" };
                let line = format!("{prefix} {}{value}", dashed(options, option));
                let (parts, _) = judged(&line);
                assert_eq!(restriction(&parts), None, "{line}");
                // A mode may write (`tar -x`), but nothing runs besides the command.
                let others: Vec<_> = parts[1..]
                    .iter()
                    .filter(|p| matches!(p, Part::Command { .. } | Part::Indeterminate { .. }))
                    .collect();
                assert!(others.is_empty(), "{line}: {others:?}");
            }
        }
    }
}

#[test]
fn an_option_that_writes_is_a_write_of_its_value() {
    for (prefix, options) in tables() {
        for option in names(options.writes) {
            let line = format!("{prefix} {} out.txt", dashed(options, option));
            let (parts, _) = judged(&line);
            assert_eq!(restriction(&parts), None, "{line}");
            let written = parts
                .iter()
                .any(|p| matches!(p, Part::Write { target: Some(t), .. } if t == "out.txt"));
            assert!(written, "{line}: {parts:?}");
        }
    }
}

#[test]
fn an_option_that_starts_a_program_makes_it_a_command_of_its_own() {
    for (prefix, options) in tables() {
        for option in names(options.programs) {
            let dashed = dashed(options, option);
            let line = format!("{prefix} {dashed} ./helper");
            let (parts, _) = judged(&line);
            let shown = format!("./helper (started by {prefix} {dashed})");
            let started = parts.iter().any(|p| {
                matches!(p, Part::Command { text, restriction: Some(Restriction::PathName), .. }
                    if *text == shown)
            });
            assert!(started, "{line}: {parts:?}");
        }
    }
}

#[test]
fn an_option_that_switches_directory_is_recorded() {
    for (prefix, options) in tables() {
        for option in names(options.chdir) {
            let line = format!("{prefix} {} sub", dashed(options, option));
            let (parts, changes_dir) = judged(&line);
            assert!(changes_dir, "{line}");
            assert_eq!(restriction(&parts), None, "{line}");
        }
    }
}

#[test]
fn a_refused_option_gives_its_reason() {
    for (prefix, options) in tables() {
        for (list, why) in options.refused {
            for option in names(list) {
                let line = format!("{prefix} {} v", dashed(options, option));
                let (parts, _) = judged(&line);
                let expected = Restriction::Unvetted(Cow::Borrowed(why));
                assert_eq!(restriction(&parts), Some(expected), "{line}");
            }
        }
    }
}

#[test]
fn an_option_not_in_the_table_is_named_in_the_reason() {
    for (prefix, options) in tables() {
        let line = format!("{prefix} --not-an-option");
        let (parts, _) = judged(&line);
        let Some(Restriction::Unvetted(why)) = restriction(&parts) else {
            panic!("{line}: {parts:?}");
        };
        assert!(why.contains("(--not-an-option"), "{line}: {why}");
        assert!(why.contains(options.manual), "{line}: {why}");
    }
}

#[test]
fn every_entry_names_its_manual() {
    for (prefix, options) in tables() {
        assert!(options.manual.contains(" of ") || options.manual.starts_with("coreutils"));
        assert!(!options.manual.is_empty(), "{prefix}");
    }
}
