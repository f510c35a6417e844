//! Quote and escape removal: what a shell word will be when the command runs, if that can
//! be known from the text alone.

use tree_sitter::Node;

/// One word of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Word {
    /// The word after quote removal when `known`; its source text otherwise (for messages).
    pub text: String,
    /// Whether the text is exactly what the command will receive.
    pub known: bool,
    /// Contains unquoted `*`, `?`, `[`, `{` or a leading `~`: the shell may replace it with
    /// other words (file names, brace alternatives, a home directory).
    pub pattern: bool,
    /// Contains an unquoted expansion: it may become zero or several words.
    pub splits: bool,
}

impl Word {
    pub(crate) fn literal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            known: true,
            pattern: false,
            splits: false,
        }
    }

    /// A word that is only known at run time.
    pub(crate) fn unknown(source: impl Into<String>, splits: bool) -> Self {
        Self {
            text: source.into(),
            known: false,
            pattern: false,
            splits,
        }
    }

    /// The text, if it is what the command will receive and the shell will not expand it.
    pub(crate) fn exact(&self) -> Option<&str> {
        (self.known && !self.pattern).then_some(self.text.as_str())
    }
}

/// The word a tree node stands for. Any construct not understood here is unknown.
pub(crate) fn word(node: Node<'_>, src: &str) -> Word {
    let text = &src[node.byte_range()];
    match node.kind() {
        "word" => unquoted(text),
        "number" if node.named_child_count() == 0 => Word::literal(text),
        "raw_string" => match strip(text, "'", "'") {
            Some(inner) => Word::literal(inner),
            None => Word::unknown(text, false),
        },
        "string" => double_quoted(node, text),
        "translated_string" => match node.named_child(0) {
            Some(inner) if inner.kind() == "string" => {
                double_quoted(inner, &src[inner.byte_range()])
            }
            _ => Word::unknown(text, false),
        },
        "ansi_c_string" => match strip(text, "$'", "'").and_then(ansi_c) {
            Some(decoded) => Word::literal(decoded),
            None => Word::unknown(text, false),
        },
        "concatenation" => concatenation(node, src),
        _ => Word::unknown(text, true),
    }
}

fn strip<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    text.strip_prefix(open)?.strip_suffix(close)
}

fn concatenation(node: Node<'_>, src: &str) -> Word {
    let full = &src[node.byte_range()];
    let mut out = Word::literal(String::new());
    let mut end = node.start_byte();
    let mut cursor = node.walk();
    for child in node.children(&mut cursor) {
        // A gap or an anonymous piece (a stray `$`) is something this code does not model.
        if !child.is_named() || child.start_byte() != end {
            return Word::unknown(full, true);
        }
        end = child.end_byte();
        let part = word(child, src);
        out.known &= part.known;
        out.splits |= part.splits;
        out.pattern |= part.pattern;
        out.text.push_str(&part.text);
    }
    if end != node.end_byte() {
        return Word::unknown(full, true);
    }
    if !out.known {
        out.text = full.to_string();
    }
    out
}

/// An unquoted word: backslash escapes are removed; unescaped glob and brace characters
/// and a leading tilde mark it as a pattern.
fn unquoted(text: &str) -> Word {
    let mut out = String::with_capacity(text.len());
    let mut pattern = text.starts_with('~');
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(escaped) => out.push(escaped),
                None => out.push('\\'),
            },
            '$' | '`' => return Word::unknown(text, true),
            '*' | '?' | '[' | '{' => {
                pattern = true;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    Word {
        text: out,
        known: true,
        pattern,
        splits: false,
    }
}

/// A `"…"` string: literal unless it holds an expansion; inside, a backslash only escapes
/// `$`, `` ` ``, `"`, `\` and a newline.
fn double_quoted(node: Node<'_>, text: &str) -> Word {
    let mut cursor = node.walk();
    if node
        .named_children(&mut cursor)
        .any(|c| c.kind() != "string_content")
    {
        return Word::unknown(text, false);
    }
    let Some(inner) = strip(text, "\"", "\"") else {
        return Word::unknown(text, false);
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('\n') => {
                    chars.next();
                    continue;
                }
                Some(&e @ ('$' | '`' | '"' | '\\')) => {
                    chars.next();
                    out.push(e);
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    Word::literal(out)
}

/// Decodes the inside of `$'…'`; `None` for an escape bash would treat in a way not
/// modelled here.
fn ansi_c(inner: &str) -> Option<String> {
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let simple = match e {
            'a' => Some('\x07'),
            'b' => Some('\x08'),
            'e' | 'E' => Some('\x1b'),
            'f' => Some('\x0c'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\x0b'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max, first) = match e {
            '0'..='7' => (8, 3, Some(e)),
            'x' => (16, 2, None),
            'u' => (16, 4, None),
            'U' => (16, 8, None),
            _ => return None,
        };
        let mut digits: String = first.into_iter().collect();
        while digits.len() < max {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => {
                    digits.push(*d);
                    chars.next();
                }
                _ => break,
            }
        }
        let value = u32::from_str_radix(&digits, radix).ok()?;
        // A NUL ends the word in bash; anything else undecodable is refused.
        if value == 0 {
            return None;
        }
        out.push(char::from_u32(value)?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ansi_c_decodes() {
        assert_eq!(ansi_c(r"\x72m").as_deref(), Some("rm"));
        assert_eq!(ansi_c(r"\162m").as_deref(), Some("rm"));
        assert_eq!(ansi_c(r"\u0072m").as_deref(), Some("rm"));
        assert_eq!(ansi_c(r"a\'b").as_deref(), Some("a'b"));
        assert_eq!(ansi_c(r"\cA"), None);
    }

    #[test]
    fn unquoted_words() {
        assert_eq!(unquoted(r"\rm").text, "rm");
        assert!(unquoted("a*b").pattern);
        assert!(!unquoted(r"a\*b").pattern);
        assert!(unquoted("~/x").pattern);
        assert!(!unquoted("a$").known);
    }
}
