//! The word scanner against what bash does with the same text.

use super::*;

fn scripts(text: &str) -> Vec<String> {
    effects_in(text).scripts
}

#[test]
fn words_end_where_bash_ends_them() {
    for (src, end) in [
        ("git status", 3),
        ("a\\ b c", 4),
        ("wg\\\net x", 6),
        ("'a b'c d", 6),
        ("\"a $(b c) d\"e f", 13),
        ("a<(ls)b c", 7),
        ("x>y", 1),
        ("${x:-a b} c", 9),
    ] {
        assert_eq!(word_at(src, 0).end, end, "{src:?}");
    }
}

#[test]
fn values_are_what_bash_passes() {
    for (src, value) in [
        ("\\rm", "rm"),
        ("r\"m\"", "rm"),
        ("'r'm", "rm"),
        ("$'\\x72m'", "rm"),
        ("$'\\162m'", "rm"),
        // Octal past \377 keeps the low 8 bits, as bash does.
        ("$'\\562m'", "rm"),
        ("$'\\cA'", "\u{1}"),
        ("\"a\\\"b\\$c\\d\"", "a\"b$c\\d"),
        ("wg\\\net", "wget"),
        ("$'a\\qb'", "a\\qb"),
    ] {
        let lexed = word_at(src, 0);
        assert_eq!(lexed.word.exact(), Some(value), "{src:?}");
    }
}

#[test]
fn unknown_words() {
    for src in [
        "$x",
        "a$(b)",
        "`b`",
        "$'rm\\0x'",
        "${x}",
        "$((1+2))",
        "\"$x\"",
    ] {
        assert!(!word_at(src, 0).word.known, "{src:?}");
    }
    assert!(word_at("a*b", 0).word.pattern);
    assert!(word_at("~/x", 0).word.pattern);
    assert!(!word_at("a\\*b", 0).word.pattern);
}

#[test]
fn substitutions_are_found_wherever_bash_runs_them() {
    for (src, body) in [
        ("$(rm x)", "rm x"),
        ("`rm x`", "rm x"),
        ("\"${T:-`touch p`}\"", "touch p"),
        ("${x#$(rm y)}", "rm y"),
        ("\"${x/a/$(rm y)}\"", "rm y"),
        ("<(rm x)", "rm x"),
        ("\"${x:-'$(rm y)'}\"", "rm y"),
        ("$(( a[$(rm x)] ))", "rm x"),
        ("\"${a[$(rm x)]}\"", "rm x"),
        ("$(cat <<'E'\nfix(x): y\nE\n)", "cat <<'E'\nfix(x): y\nE\n"),
        ("$(echo a # )\n)", "echo a # )\n"),
    ] {
        assert!(
            scripts(src).iter().any(|s| s == body),
            "{src:?}: {:?}",
            scripts(src)
        );
    }
    // Nested backticks: the inner body is found when the outer one is judged.
    assert_eq!(scripts("`echo \\`rm x\\``"), vec!["echo `rm x`"]);
    assert!(scripts("'$(rm x)'").is_empty());
    assert_eq!(heredoc_effects("a $(rm x) \"b\"\n").scripts, vec!["rm x"]);
}

#[test]
fn hazards() {
    for src in [
        "${!x}",
        "${x@P}",
        "${a[i]}",
        "${x:$n}",
        "$(( x[1] ))",
        "'unterminated",
        "${x",
    ] {
        assert!(!effects_in(src).hazards.is_empty(), "{src:?}");
    }
    for src in [
        "${x}", "${#x}", "${x:-y}", "${a[@]}", "${x:1:2}", "${!pre*}", "$((1+2))",
    ] {
        assert!(effects_in(src).hazards.is_empty(), "{src:?}");
    }
    assert!(effects_in("${x:=y}").assigns);
    assert!(arithmetic_effects("x = 1").assigns);
    assert!(!arithmetic_effects("x == 1").assigns);
}

#[test]
fn heredoc_delimiters() {
    assert_eq!(heredoc_delimiter("EOF"), ("EOF".to_string(), false));
    assert_eq!(heredoc_delimiter("'EOF'"), ("EOF".to_string(), true));
    assert_eq!(heredoc_delimiter("\"E\"O"), ("EO".to_string(), true));
    assert_eq!(heredoc_delimiter("\\EOF"), ("EOF".to_string(), true));
}
