//! Where bash constructs end — `${…}`, `"…"`, `$(…)` with the here-documents inside it,
//! `$'…'` — found by skipping quotes and nesting as bash does, for the word scanner. Too
//! deep a nesting counts as not ending (and so is a hazard).

use super::lex::{heredoc_delimiter, word_at, Nesting};

/// The offset of the `}` that closes a `${` whose body starts at `start`, skipping quotes
/// and nested expansions.
pub(crate) fn matching_brace(src: &str, start: usize) -> Option<usize> {
    let _level = Nesting::enter()?;
    let bytes = src.as_bytes();
    let mut depth = 0usize;
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'\'' => i += find_byte(bytes, i + 1, b'\'')? + 1,
            b'"' => i = skip_double_quotes(src, i + 1)?,
            b'`' => i += find_byte(bytes, i + 1, b'`')? + 1,
            b'$' if bytes.get(i + 1) == Some(&b'(') => i = skip_script(src, i + 2, ')')?,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The offset of the `"` that ends a double-quoted string whose inside starts at `start`.
pub(crate) fn skip_double_quotes(src: &str, start: usize) -> Option<usize> {
    let _level = Nesting::enter()?;
    let bytes = src.as_bytes();
    let mut i = start;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'"' => return Some(i),
            b'`' => i += find_byte(bytes, i + 1, b'`')? + 1,
            b'$' if bytes.get(i + 1) == Some(&b'(') => i = skip_script(src, i + 2, ')')?,
            b'$' if bytes.get(i + 1) == Some(&b'{') => i = matching_brace(src, i + 2)?,
            _ => {}
        }
        i += 1;
    }
    None
}

/// The offset of the `close` that ends a script starting at `start` (the inside of `$( )`):
/// quotes, nested substitutions, comments and here-documents are skipped, parentheses
/// counted. Bash itself parses the body to find its end; where this count differs (a
/// `case` pattern's lone `)`), the body found does not parse and is indeterminate.
pub(crate) fn skip_script(src: &str, start: usize, close: char) -> Option<usize> {
    let _level = Nesting::enter()?;
    let bytes = src.as_bytes();
    let mut depth = 0usize;
    let mut i = start;
    let mut word_start = true;
    let mut heredocs: Vec<(String, bool)> = Vec::new();
    while i < bytes.len() {
        let b = bytes[i];
        let at_word_start = word_start;
        word_start = matches!(b, b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')');
        match b {
            b'\\' => i += 1,
            b'\'' => i += find_byte(bytes, i + 1, b'\'')? + 1,
            b'"' => i = skip_double_quotes(src, i + 1)?,
            b'`' => i += find_byte(bytes, i + 1, b'`')? + 1,
            b'#' if at_word_start => match find_byte(bytes, i, b'\n') {
                Some(n) => {
                    i += n;
                    continue;
                }
                None => return None,
            },
            b'$' if bytes.get(i + 1) == Some(&b'{') => i = matching_brace(src, i + 2)?,
            b'<' if bytes[i..].starts_with(b"<<") && !bytes[i..].starts_with(b"<<<") => {
                let mut j = i + 2;
                if bytes.get(j) == Some(&b'-') {
                    j += 1;
                }
                while matches!(bytes.get(j), Some(b' ' | b'\t')) {
                    j += 1;
                }
                let end = word_at(src, j).end;
                if end > j {
                    heredocs.push((src[j..end].to_string(), bytes[i + 2] == b'-'));
                }
                i = end;
                continue;
            }
            b'\n' if !heredocs.is_empty() => {
                i = skip_heredoc_bodies(src, i + 1, &heredocs)?;
                heredocs.clear();
                word_start = true;
                continue;
            }
            b'(' => depth += 1,
            b')' if depth > 0 => depth -= 1,
            _ if depth == 0
                && bytes[i..].starts_with(close.encode_utf8(&mut [0; 4]).as_bytes()) =>
            {
                return Some(i)
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Skips the bodies of here-documents that start at `start`, in order; returns the offset
/// after the last delimiter line.
fn skip_heredoc_bodies(src: &str, mut start: usize, heredocs: &[(String, bool)]) -> Option<usize> {
    for (word, strip_tabs) in heredocs {
        let (delimiter, _) = heredoc_delimiter(word);
        loop {
            let line_end = src[start..].find('\n').map(|n| start + n);
            let line = &src[start..line_end.unwrap_or(src.len())];
            let line = if *strip_tabs {
                line.trim_start_matches('\t')
            } else {
                line
            };
            start = line_end.map_or(src.len(), |e| e + 1);
            if line == delimiter {
                break;
            }
            line_end?;
        }
    }
    Some(start)
}

/// The length of a `$'…'` body: up to the first `'` not escaped by a backslash.
pub(crate) fn ansi_c_len(rest: &str) -> Option<usize> {
    let bytes = rest.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\'' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// The distance from `from` to the next `byte` (ASCII), by bytes: positions inside a
/// multi-byte character are never sliced at.
fn find_byte(bytes: &[u8], from: usize, byte: u8) -> Option<usize> {
    bytes.get(from..)?.iter().position(|&b| b == byte)
}
