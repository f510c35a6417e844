//! Properties: a denied command stays denied whatever it is embedded in; path
//! normalisation is idempotent and never brings an escaping path into the workspace.

use proptest::prelude::*;
use runplane::domain::Decision;
use runplane::policy::{locate, normalize_path, ProfileRegistry, ToolCall};

const NAMES: &[&str] = &[
    "ls",
    "echo",
    "cat",
    "git",
    "cargo",
    "npm",
    "make",
    "curl",
    "wget",
    "ssh",
    "nc",
    "rm",
    "grep",
    "python",
    "/usr/bin/curl",
    "./run",
    "'curl'",
    "c\\url",
];
const ARGS: &[&str] = &[
    "status", "diff", "test", "-rf", "x", "host", "1", "--stat", "log", "publish", "-m", "pytest",
    "lint", "\"a b\"", "$HOME", "$(id)", "*.rs",
];
const PREFIXES: &[&str] = &["", "", "", "FOO=1 ", "timeout 3 ", "sudo ", "env ", "nice "];
const REDIRECTS: &[&str] = &[
    "",
    "",
    "",
    " > log.txt",
    " >> secrets/a",
    " 2>/dev/null",
    " > /tmp/out",
    " 2>&1",
];
const JOINERS: &[&str] = &[" && ", " || ", "; ", " | "];

fn simple_command() -> impl Strategy<Value = String> {
    (
        prop::sample::select(PREFIXES),
        prop::sample::select(NAMES),
        prop::collection::vec(prop::sample::select(ARGS), 0..3),
        prop::sample::select(REDIRECTS),
    )
        .prop_map(|(prefix, name, args, redirect)| {
            let mut c = format!("{prefix}{name}");
            for a in args {
                c.push(' ');
                c.push_str(a);
            }
            c + redirect
        })
}

fn command() -> impl Strategy<Value = String> {
    (
        simple_command(),
        prop::collection::vec((prop::sample::select(JOINERS), simple_command()), 0..3),
    )
        .prop_map(|(first, rest)| {
            rest.into_iter()
                .fold(first, |acc, (j, c)| format!("{acc}{j}{c}"))
        })
}

fn decide(registry: &ProfileRegistry, profile: &str, command: &str) -> Decision {
    let call = ToolCall {
        tool: "Bash",
        command,
        ..Default::default()
    };
    registry
        .get(profile)
        .map(|p| p.evaluate(&call).decision)
        .unwrap_or(Decision::Deny)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn denied_commands_stay_denied_when_embedded(c in command()) {
        let registry = ProfileRegistry::builtin();
        for profile in registry.names() {
            if decide(&registry, &profile, &c) != Decision::Deny {
                continue;
            }
            let quoted = c.replace('\'', "'\\''");
            for wrapped in [
                format!("git status && {c}"),
                format!("{c}; true"),
                format!("true | {c}"),
                format!("echo $({c})"),
                format!("({c})"),
                format!("bash -c '{quoted}'"),
            ] {
                let d = decide(&registry, &profile, &wrapped);
                prop_assert_ne!(d, Decision::Allow, "{} allows {:?} though it denies {:?}", profile, wrapped, c);
            }
        }
    }
}

/// Path segments that cannot name the workspace `/w/r` again once a path has left it.
fn segments() -> impl Strategy<Value = Vec<&'static str>> {
    prop::collection::vec(
        prop::sample::select(&["a", "b", "..", ".", "", "x.rs", ".env"][..]),
        0..8,
    )
}

/// Whether `segments` walked from the workspace root leave it, counted without the
/// normaliser: going above the root can never come back (no segment is `r`).
fn model_escapes(segments: &[&str]) -> bool {
    let mut depth: i32 = 0;
    for s in segments {
        match *s {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn normalising_is_idempotent(absolute in any::<bool>(), segs in segments()) {
        let p = format!("{}{}", if absolute { "/" } else { "" }, segs.join("/"));
        let once = normalize_path(&p);
        prop_assert_eq!(normalize_path(&once), once.clone());
        prop_assert!(!once.contains("//"));
        prop_assert!(once.is_empty() || once == "." || !once.split('/').any(|s| s == "."));
    }

    #[test]
    fn escaping_paths_are_never_inside(prefix in prop::sample::select(&["", "/w/r/", "/w/r/a/", "/etc/", "/w/"][..]), segs in segments()) {
        let path = format!("{prefix}{}", segs.join("/"));
        // An empty first segment would make a relative path absolute.
        if path.is_empty() || (prefix.is_empty() && path.starts_with('/')) {
            return Ok(());
        }
        let escapes = match prefix {
            "" | "/w/r/" => model_escapes(&segs),
            "/w/r/a/" => model_escapes(&[&["a"][..], &segs].concat()),
            _ => true,
        };
        let with_root = locate(&path, Some("/w/r"));
        prop_assert_eq!(with_root.is_outside(), escapes, "{:?} -> {:?}", path, with_root);
        if !with_root.is_outside() {
            prop_assert!(!with_root.as_str().starts_with('/'));
            prop_assert!(!with_root.as_str().split('/').any(|s| s == ".."));
        }
        // Without a root nothing absolute is inside, and an escape stays an escape.
        let without = locate(&path, None);
        prop_assert!(!escapes || without.is_outside() || prefix.is_empty() && !model_escapes(&segs));
        if path.starts_with('/') {
            prop_assert!(without.is_outside());
        }
        // Normalising first changes nothing.
        prop_assert_eq!(locate(&normalize_path(&path), Some("/w/r")), with_root);
    }
}
