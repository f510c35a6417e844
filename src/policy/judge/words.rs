//! A shell word as the judge sees it: what it will be when the command runs, if that can
//! be known from the text alone (`lex` computes it).

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
    /// A path the program that runs this command finds itself (find's `{}`): not known,
    /// but one word, never an option.
    pub found: bool,
}

impl Word {
    pub(crate) fn literal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            known: true,
            pattern: false,
            splits: false,
            found: false,
        }
    }

    /// A path found by the program that runs the command (find's `{}`).
    pub(crate) fn found(text: impl Into<String>) -> Self {
        Self {
            found: true,
            ..Self::unknown(text, false)
        }
    }

    /// A word that is only known at run time.
    pub(crate) fn unknown(source: impl Into<String>, splits: bool) -> Self {
        Self {
            text: source.into(),
            known: false,
            pattern: false,
            splits,
            found: false,
        }
    }

    /// The text, if it is what the command will receive and the shell will not expand it.
    pub(crate) fn exact(&self) -> Option<&str> {
        (self.known && !self.pattern).then_some(self.text.as_str())
    }
}

/// Decodes the inside of `$'…'` to the bytes bash makes of it: octal escapes keep their
/// low 8 bits, `\x` takes up to two hex digits, `\u`/`\U` are encoded as UTF-8, `\cX` is a
/// control character. `None` when the result holds a NUL (bash ends the word there) or
/// an escape is not modelled.
pub(crate) fn ansi_c(inner: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    let mut buf = [0; 4];
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let Some(e) = chars.next() else {
            out.push(b'\\');
            break;
        };
        let simple = match e {
            'a' => Some(0x07),
            'b' => Some(0x08),
            'e' | 'E' => Some(0x1b),
            'f' => Some(0x0c),
            'n' => Some(b'\n'),
            'r' => Some(b'\r'),
            't' => Some(b'\t'),
            'v' => Some(0x0b),
            '\\' | '\'' | '"' | '?' => Some(e as u8),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (radix, max) = match e {
            '0'..='7' => (8, 2),
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            'c' => {
                let control = chars.next()?;
                if !control.is_ascii() {
                    return None;
                }
                out.push(control.to_ascii_uppercase() as u8 & 0x1f);
                continue;
            }
            _ => {
                // Bash keeps an unknown escape as it is.
                out.push(b'\\');
                out.extend_from_slice(e.encode_utf8(&mut buf).as_bytes());
                continue;
            }
        };
        let mut digits = String::new();
        if radix == 8 {
            digits.push(e);
        }
        while digits.len() < max + usize::from(radix == 8) {
            match chars.peek() {
                Some(d) if d.is_digit(radix) => {
                    digits.push(*d);
                    chars.next();
                }
                _ => break,
            }
        }
        if digits.is_empty() {
            // `\x` without digits stays as it is.
            out.push(b'\\');
            out.extend_from_slice(e.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        let value = u32::from_str_radix(&digits, radix).ok()?;
        match e {
            'u' | 'U' => {
                let c = char::from_u32(value)?;
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
            _ => out.push((value & 0xff) as u8),
        }
    }
    if out.contains(&0) {
        return None;
    }
    Some(out)
}
