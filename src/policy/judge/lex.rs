//! A bash word scanner: where a word ends, what it will be when the command runs (if that
//! can be known from the text), and every piece of it that makes bash run code.
//!
//! tree-sitter-bash gives the structure of a command line, but inside words it is not
//! exact: backticks nested in backticks, substitutions inside `${x:-…}`, a backslash-newline
//! inside a word. So every word the judge relies on is scanned again here, by bash's own
//! rules, and the walker checks that both agree on where the word ends; where they do not,
//! the command is indeterminate. Substitution bodies found here are judged as scripts.

use std::cell::Cell;

use super::expansion::{assigns_in_arithmetic, parameter};
use super::extent::{ansi_c_len, matching_brace, skip_script};
use super::words::{ansi_c, Word};

/// Something in a word that makes bash run code or change state, beyond its value.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Effects {
    /// Bodies of `$( )`, backticks and `<( )`/`>( )`, ready to be judged as scripts.
    pub scripts: Vec<String>,
    /// Constructs whose effect cannot be known from the text (the reason for each).
    pub hazards: Vec<&'static str>,
    /// The word assigns a variable (`${x:=y}`, `$((x=1))`).
    pub assigns: bool,
}

impl Effects {
    pub(crate) fn hazard(&mut self, why: &'static str) {
        if !self.hazards.contains(&why) {
            self.hazards.push(why);
        }
    }

    pub(crate) fn merge(&mut self, other: Effects) {
        self.scripts.extend(other.scripts);
        for why in other.hazards {
            self.hazard(why);
        }
        self.assigns |= other.assigns;
    }
}

/// A scanned word.
#[derive(Debug, Clone)]
pub(crate) struct Lexed {
    pub word: Word,
    /// The byte offset just past the word.
    pub end: usize,
    pub effects: Effects,
}

pub(crate) const ARITHMETIC_SUBSCRIPT: &str =
    "an array subscript or arithmetic on text not known before it runs (it can run commands)";
const UNTERMINATED: &str = "a quote, expansion or substitution that does not end";
const CONTINUED_EXPANSION: &str = "an expansion split by a backslash-newline";
const NOT_TEXT: &str = "a word that is not valid text (or holds a NUL byte)";
const TOO_DEEP: &str = "expansions nested too deeply to judge";

/// How deep scans may nest (an expansion inside an expansion inside …): the scanner
/// recurses, and the recursion must stay far inside a thread's stack on any input.
const MAX_NESTING: u32 = 48;

thread_local! {
    static NESTING: Cell<u32> = const { Cell::new(0) };
}

/// One level of nested scanning on this thread, given back when dropped.
pub(crate) struct Nesting(());

impl Nesting {
    /// Enters one more level; `None` when scans are nested too deeply already.
    pub(crate) fn enter() -> Option<Self> {
        NESTING.with(|depth| {
            let now = depth.get();
            (now < MAX_NESTING).then(|| {
                depth.set(now + 1);
                Nesting(())
            })
        })
    }
}

impl Drop for Nesting {
    fn drop(&mut self) {
        NESTING.with(|depth| depth.set(depth.get().saturating_sub(1)));
    }
}

/// Scans the word that starts at `start` in `src`, ending at the first unquoted
/// metacharacter, as bash reads a word of a command.
pub(crate) fn word_at(src: &str, start: usize) -> Lexed {
    let mut scanner = Scanner::new(src, start);
    let mut value = Value::default();
    scanner.word(&mut value);
    Lexed {
        word: value.into_word(&src[start..scanner.pos]),
        end: scanner.pos,
        effects: scanner.effects,
    }
}

/// Finds every substitution and hazard in a piece of text whose exact word structure is
/// not needed (a `case` pattern, a `[[ ]]` test, a construct judged as indeterminate):
/// everything outside single quotes is searched.
pub(crate) fn effects_in(text: &str) -> Effects {
    scan_all(Scanner::new(text, 0))
}

/// The operand of `${x:-…}` and the like: within double quotes, bash takes a `'` there
/// literally, so a `$( )` between single quotes may still run; it is searched as if it
/// would.
pub(crate) fn operand_effects(text: &str) -> Effects {
    let mut scanner = Scanner::new(text, 0);
    scanner.literal_single_quotes = true;
    scan_all(scanner)
}

fn scan_all(mut scanner: Scanner<'_>) -> Effects {
    let Some(_level) = Nesting::enter() else {
        scanner.effects.hazard(TOO_DEEP);
        return scanner.effects;
    };
    let text = scanner.src;
    let mut value = Value::default();
    while scanner.pos < text.len() {
        let before = scanner.pos;
        scanner.word(&mut value);
        if scanner.pos == before {
            // A metacharacter: step over it (a `<(` or `>(` was taken by `word`).
            scanner.pos += scanner.peek_char().map_or(1, char::len_utf8);
        }
    }
    scanner.effects
}

/// The body of an unquoted here-document: expansions and substitutions as in double
/// quotes, but a `"` is an ordinary character.
pub(crate) fn heredoc_effects(body: &str) -> Effects {
    // Bash removes every backslash-newline of such a body before it expands it.
    let body = body.replace("\\\n", "");
    let mut scanner = Scanner::new(&body, 0);
    let mut value = Value::default();
    scanner.double_quoted(&mut value, None);
    scanner.effects
}

/// The text of an arithmetic context (`(( ))`, `let`'s arguments): substitutions are
/// found; array subscripts and anything not known are hazards; `=`/`++` assign.
pub(crate) fn arithmetic_effects(text: &str) -> Effects {
    let mut scanner = Scanner::new(text, 0);
    scanner.arithmetic_text(text);
    scanner.effects
}

/// Whether a here-document delimiter word is quoted (its body is then literal), and the
/// delimiter bash compares lines with.
pub(crate) fn heredoc_delimiter(word: &str) -> (String, bool) {
    let quoted = word.contains(['\'', '"', '\\']);
    let mut out = String::new();
    let mut chars = word.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {}
            '\\' => out.extend(chars.next()),
            _ => out.push(c),
        }
    }
    (out, quoted)
}

/// The word's value as it is built.
#[derive(Default)]
struct Value {
    bytes: Vec<u8>,
    /// Not known before it runs.
    unknown: bool,
    pattern: bool,
    splits: bool,
}

impl Value {
    fn push(&mut self, c: char) {
        let mut buf = [0; 4];
        self.bytes
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }

    fn into_word(self, source: &str) -> Word {
        if self.unknown {
            return Word::unknown(source, self.splits);
        }
        match String::from_utf8(self.bytes) {
            Ok(text) => Word {
                text,
                known: true,
                pattern: self.pattern,
                splits: false,
                found: false,
            },
            Err(_) => Word::unknown(source, false),
        }
    }
}

struct Scanner<'s> {
    src: &'s str,
    pos: usize,
    effects: Effects,
    /// `'` is an ordinary character (see `operand_effects`).
    literal_single_quotes: bool,
}

/// Characters that end an unquoted word.
fn is_meta(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>'
    )
}

impl<'s> Scanner<'s> {
    fn new(src: &'s str, pos: usize) -> Self {
        Self {
            src,
            pos,
            effects: Effects::default(),
            literal_single_quotes: false,
        }
    }

    fn rest(&self) -> &'s str {
        &self.src[self.pos..]
    }

    fn peek_char(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek_char()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// An unquoted word, up to a metacharacter.
    fn word(&mut self, value: &mut Value) {
        let start = self.pos;
        while let Some(c) = self.peek_char() {
            match c {
                '<' | '>' if self.rest()[1..].starts_with('(') => {
                    self.pos += 2;
                    self.substitution(')', value);
                    value.splits = true;
                }
                c if is_meta(c) => break,
                '\\' => {
                    self.pos += 1;
                    match self.bump() {
                        Some('\n') => {}
                        Some(e) => value.push(e),
                        None => value.push('\\'),
                    }
                }
                '\'' if !self.literal_single_quotes => {
                    self.pos += 1;
                    match self.rest().find('\'') {
                        Some(n) => {
                            value.bytes.extend_from_slice(&self.rest().as_bytes()[..n]);
                            self.pos += n + 1;
                        }
                        None => self.unterminated(value),
                    }
                }
                '"' => {
                    self.pos += 1;
                    self.double_quoted(value, Some('"'));
                }
                '`' => {
                    self.pos += 1;
                    self.backticks(value, false);
                    value.splits = true;
                }
                '$' => {
                    if self.dollar(value, false) {
                        value.splits = true;
                    }
                }
                '*' | '?' | '[' | '{' => {
                    value.pattern = true;
                    value.push(c);
                    self.pos += 1;
                }
                '~' if self.pos == start => {
                    value.pattern = true;
                    value.push(c);
                    self.pos += 1;
                }
                _ => {
                    value.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
    }

    fn unterminated(&mut self, value: &mut Value) {
        self.effects.hazard(UNTERMINATED);
        value.unknown = true;
        self.pos = self.src.len();
    }

    /// Inside `"…"` (or a here-document body when `close` is `None`), after the opening
    /// quote.
    fn double_quoted(&mut self, value: &mut Value, close: Option<char>) {
        while let Some(c) = self.peek_char() {
            match c {
                '"' if close == Some('"') => {
                    self.pos += 1;
                    return;
                }
                '\\' => {
                    self.pos += 1;
                    match self.peek_char() {
                        Some('\n') => self.pos += 1,
                        Some(e @ ('$' | '`' | '\\')) => {
                            value.push(e);
                            self.pos += 1;
                        }
                        Some('"') if close.is_some() => {
                            value.push('"');
                            self.pos += 1;
                        }
                        _ => value.push('\\'),
                    }
                }
                '`' => {
                    self.pos += 1;
                    self.backticks(value, close.is_some());
                }
                '$' => {
                    self.dollar(value, true);
                }
                _ => {
                    value.push(c);
                    self.pos += c.len_utf8();
                }
            }
        }
        if close.is_some() {
            self.unterminated(value);
        }
    }

    /// After an opening backtick: the body ends at the next unescaped backtick; inside,
    /// `\\`, `` \` `` and `\$` (and `\"` within double quotes) lose their backslash.
    fn backticks(&mut self, value: &mut Value, in_double_quotes: bool) {
        let mut body = String::new();
        loop {
            match self.bump() {
                None => return self.unterminated(value),
                Some('`') => break,
                Some('\\') => match self.bump() {
                    Some(e @ ('\\' | '`' | '$')) => body.push(e),
                    Some('"') if in_double_quotes => body.push('"'),
                    Some(e) => {
                        body.push('\\');
                        body.push(e);
                    }
                    None => body.push('\\'),
                },
                Some(c) => body.push(c),
            }
        }
        value.unknown = true;
        self.effects.scripts.push(body);
    }

    /// At a `$`. Returns whether it began an expansion (rather than a literal `$`).
    fn dollar(&mut self, value: &mut Value, quoted: bool) -> bool {
        let rest = &self.rest()[1..];
        if rest.starts_with("\\\n") {
            // Bash joins the lines first: `$\⏎(` is `$(`.
            self.effects.hazard(CONTINUED_EXPANSION);
            value.unknown = true;
            self.pos += 1;
            return true;
        }
        let next = rest.chars().next();
        match next {
            Some('\'') if !quoted => {
                self.pos += 2;
                self.ansi_c(value);
                false
            }
            Some('"') if !quoted => {
                self.pos += 2;
                self.double_quoted(value, Some('"'));
                false
            }
            Some('(') if rest.starts_with("((") => {
                let save = self.pos;
                self.pos += 3;
                if self.arithmetic_until("))") {
                    value.unknown = true;
                } else {
                    // Not arithmetic after all: a command substitution of a subshell.
                    self.pos = save + 2;
                    self.substitution(')', value);
                }
                true
            }
            Some('(') => {
                self.pos += 2;
                self.substitution(')', value);
                true
            }
            Some('[') => {
                self.pos += 2;
                if !self.arithmetic_until("]") {
                    self.unterminated(value);
                }
                value.unknown = true;
                true
            }
            Some('{') => {
                self.pos += 2;
                self.brace_expansion(value);
                true
            }
            Some(c) if c.is_ascii_alphanumeric() || c == '_' => {
                self.pos += 1;
                if c.is_ascii_digit() {
                    self.pos += 1;
                } else {
                    while self
                        .peek_char()
                        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                    {
                        self.pos += 1;
                    }
                }
                value.unknown = true;
                true
            }
            Some('@' | '*' | '#' | '?' | '-' | '$' | '!') => {
                self.pos += 2;
                value.unknown = true;
                true
            }
            _ => {
                value.push('$');
                self.pos += 1;
                false
            }
        }
    }

    /// After `$(` or `<(`: the body up to the matching `)`, judged as a script.
    fn substitution(&mut self, close: char, value: &mut Value) {
        let start = self.pos;
        match skip_script(self.src, self.pos, close) {
            Some(end) => {
                self.effects.scripts.push(self.src[start..end].to_string());
                self.pos = end + close.len_utf8();
                value.unknown = true;
            }
            None => {
                self.effects.scripts.push(self.src[start..].to_string());
                self.unterminated(value);
            }
        }
    }

    /// Scans arithmetic text up to `close` at nesting depth 0; returns false if it never
    /// ends.
    fn arithmetic_until(&mut self, close: &str) -> bool {
        let start = self.pos;
        let mut depth = 0usize;
        let bytes = self.src.as_bytes();
        let mut i = start;
        while i < bytes.len() {
            if depth == 0 && bytes[i..].starts_with(close.as_bytes()) {
                let text = &self.src[start..i];
                self.arithmetic_text(text);
                self.pos = i + close.len();
                return true;
            }
            match bytes[i] {
                b'(' | b'[' => depth += 1,
                b')' | b']' if depth > 0 => depth -= 1,
                b')' | b']' => return false,
                _ => {}
            }
            i += 1;
        }
        false
    }

    fn arithmetic_text(&mut self, text: &str) {
        let inner = effects_in(text);
        let mut plain = true;
        for c in text.chars() {
            if matches!(c, '$' | '`' | '[' | '\'' | '"' | '\\') {
                plain = false;
            }
        }
        if !plain {
            self.effects.hazard(ARITHMETIC_SUBSCRIPT);
        }
        if assigns_in_arithmetic(text) {
            self.effects.assigns = true;
        }
        self.effects.merge(inner);
    }

    /// After `${`: a parameter expansion up to its matching `}`.
    fn brace_expansion(&mut self, value: &mut Value) {
        value.unknown = true;
        let start = self.pos;
        let Some(end) = matching_brace(self.src, start) else {
            self.effects
                .scripts
                .extend(effects_in(&self.src[start..]).scripts);
            return self.unterminated(value);
        };
        let body = &self.src[start..end];
        self.pos = end + 1;
        let inner = parameter(body);
        self.effects.merge(inner);
    }

    /// After `$'`: ANSI-C quoting, decoded to bytes as bash does.
    fn ansi_c(&mut self, value: &mut Value) {
        let Some(len) = ansi_c_len(self.rest()) else {
            return self.unterminated(value);
        };
        let inner = &self.rest()[..len];
        self.pos += len + 1;
        match ansi_c(inner) {
            Some(bytes) => value.bytes.extend_from_slice(&bytes),
            None => {
                self.effects.hazard(NOT_TEXT);
                value.unknown = true;
            }
        }
    }
}

#[cfg(test)]
#[path = "lex_tests.rs"]
mod tests;
