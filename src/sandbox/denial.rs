//! Refusals of the sandbox as a tool's result shows them. The kernel tells the refused
//! process, not runplane: a write under a read-only mount fails with `EROFS`, one Landlock
//! refuses with `EACCES`, a socket seccomp refuses with `EPERM`. The error reaches the
//! agent as text in the tool's output, and that text is all the worker sees. So a
//! refusal is recognised by the C library's wording of those three errors; a program that
//! hides or rewords its error is not seen (docs/SANDBOX.md says which are).

/// The most refusals reported for one tool result: a build that fails on every file
/// says enough in its first lines.
pub const MAX_PER_RESULT: usize = 3;

/// The longest line kept, in bytes; longer ones are cut at a character boundary.
pub const MAX_LINE_BYTES: usize = 240;

/// The errors the sandbox's layers give, as `strerror` words them.
const MARKERS: [(&str, &str); 3] = [
    ("Read-only file system", "EROFS"),
    ("Permission denied", "EACCES"),
    ("Operation not permitted", "EPERM"),
];

/// One line of a tool's output that shows a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The errno's name: `EROFS`, `EACCES` or `EPERM`.
    pub errno: &'static str,
    /// The line, trimmed and cut to [`MAX_LINE_BYTES`].
    pub line: String,
}

/// The distinct lines of `output` that show one of the sandbox's errors, first ones
/// first, at most [`MAX_PER_RESULT`].
pub fn denials(output: &str) -> Vec<Denial> {
    let mut found: Vec<Denial> = Vec::new();
    for line in lines(output).iter().map(|line| line.trim()) {
        let Some((_, errno)) = MARKERS.iter().find(|(words, _)| line.contains(words)) else {
            continue;
        };
        let line = cut(line);
        if found.iter().any(|d| d.line == line) {
            continue;
        }
        found.push(Denial { errno, line });
        if found.len() == MAX_PER_RESULT {
            break;
        }
    }
    found
}

/// The lines of a tool's output. An agent may report a result as JSON (Claude Code's
/// Bash result is `{"stdout": …, "stderr": …}`): then the lines are those of its
/// strings, unescaped. A JSON text whose start the worker's size cap cut off no longer
/// parses, so in any other text an escaped line break ends a line too.
fn lines(output: &str) -> Vec<String> {
    fn strings(value: &serde_json::Value, into: &mut Vec<String>) {
        match value {
            serde_json::Value::String(text) => into.extend(text.lines().map(String::from)),
            serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, into)),
            serde_json::Value::Object(fields) => fields.values().for_each(|v| strings(v, into)),
            _ => {}
        }
    }
    let json_like = matches!(output.trim_start().chars().next(), Some('{' | '['));
    if let Some(value) = json_like
        .then(|| serde_json::from_str::<serde_json::Value>(output).ok())
        .flatten()
    {
        let mut found = Vec::new();
        strings(&value, &mut found);
        return found;
    }
    output
        .lines()
        .flat_map(|line| line.split("\\n"))
        .map(String::from)
        .collect()
}

fn cut(line: &str) -> String {
    let mut end = line.len().min(MAX_LINE_BYTES);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_is_named_and_repeats_are_dropped() {
        let output = "building\n\
                      sh: 1: cannot create /etc/passwd: Read-only file system\n\
                      touch: cannot touch '/home/u/x': Permission denied\n\
                      touch: cannot touch '/home/u/x': Permission denied\n\
                      ping: socket: Operation not permitted\n\
                      cat: y: Permission denied\n";
        let found = denials(output);
        assert_eq!(
            found.iter().map(|d| d.errno).collect::<Vec<_>>(),
            ["EROFS", "EACCES", "EPERM"]
        );
        assert_eq!(
            found[0].line,
            "sh: 1: cannot create /etc/passwd: Read-only file system"
        );
    }

    #[test]
    fn long_lines_are_cut_at_a_character_boundary() {
        let line = format!("{}: Permission denied", "é".repeat(200));
        let found = denials(&line);
        assert!(found[0].line.len() <= MAX_LINE_BYTES);
        assert!(found[0].line.starts_with('é'));
    }

    #[test]
    fn a_result_reported_as_json_is_read_by_its_strings() {
        let output = serde_json::json!({
            "stdout": "building\n",
            "stderr": "escape.sh: 3: cannot create /x/shown: Read-only file system\nmore",
            "interrupted": false,
        })
        .to_string();
        let found = denials(&output);
        assert_eq!(
            found,
            [Denial {
                errno: "EROFS",
                line: "escape.sh: 3: cannot create /x/shown: Read-only file system".into(),
            }]
        );
    }

    #[test]
    fn a_json_result_cut_short_still_ends_lines_at_its_escaped_breaks() {
        let output = r#"ok\ntouch: cannot touch 'a': Permission denied\nnext","stderr":""}"#;
        let found = denials(output);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, "touch: cannot touch 'a': Permission denied");
    }

    #[test]
    fn output_without_the_errors_has_none() {
        assert!(denials("ok\nall 3 tests passed\npermission granted").is_empty());
    }
}
