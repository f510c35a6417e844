//! Agent-supplied text made safe to show a person: what the operator sees is what they
//! approve.
//!
//! Commands, paths, ids, outputs and reasons come from workers, and a worker can put
//! terminal control sequences, carriage returns or Unicode bidirectional overrides in them:
//! `git status > .env #\x1b[2K\rgit status > notes.txt` shows in a terminal as just
//! `git status > notes.txt`. Every text the CLI prints for people goes through [`escape`]
//! or [`Escaped`], and every field of the text log through [`EscapedFields`], which turn
//! such characters into visible escapes. JSON output is not escaped: serde already writes
//! control characters as JSON escapes, and scripts need the exact text.

use std::borrow::Cow;
use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;

/// `text` with every character that could hide or rewrite what a terminal shows replaced
/// by a visible escape; borrowed (no allocation) when there is none, the common case.
///
/// The rules, for the characters [`needs_escape`] picks:
/// - `\t`, `\n` and `\r` as `\t`, `\n`, `\r`;
/// - the other C0 controls and DEL as `\xNN`, two lowercase hex digits (ESC is `\x1b`,
///   NUL `\x00`);
/// - everything else (C1 controls, bidirectional and zero-width format characters, line
///   and paragraph separators) in Rust's form `\u{202e}`: lowercase hex, no leading zeros.
///
/// A backslash is left as it is, so commands such as `echo a\ b` stay readable. That makes
/// the escaping ambiguous (`\x1b` may have been typed as four characters) but never
/// hiding: every escape is plain visible text, so a literal backslash sequence conceals
/// nothing from the reader, it only looks like one that would have.
pub fn escape(text: &str) -> Cow<'_, str> {
    let Some(first) = text.find(needs_escape) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 16);
    out.push_str(&text[..first]);
    // Writing into a String cannot fail.
    let _ = write_escaped(&mut out, &text[first..]);
    Cow::Owned(out)
}

/// [`escape`] for format strings: `format!("{}", Escaped(text))` writes the escaped text
/// straight into the formatter, without an intermediate String.
#[derive(Debug, Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Width and precision count the characters shown, so pad the escaped text; this
        // allocates only when a format string asks for padding.
        if f.width().is_some() || f.precision().is_some() {
            return f.pad(&escape(self.0));
        }
        write_escaped(f, self.0)
    }
}

/// A [`fmt::Write`] that escapes everything written through it, for text that exists only
/// as a `Debug` or `Display` implementation (log fields), without collecting it first.
/// Escaping is per character, so it does not matter how the writes split the text.
#[derive(Debug)]
pub struct EscapingWriter<W>(pub W);

impl<W: Write> Write for EscapingWriter<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_escaped(&mut self.0, text)
    }
}

/// The text log's fields, laid out as tracing's default (`message key=value …`) but with
/// the message and every value written through [`escape`]: log lines carry
/// agent-supplied commands and paths, and an operator tails them in a terminal.
///
/// tracing-subscriber's own field formatter (0.3.20 and later) escapes ESC, BEL, BS, FF,
/// DEL and the C1 controls, in the message and errors only, and not CR, LF or the bidi
/// controls. This one replaces it, so each value is escaped once, here. Strings logged as
/// values (`key = text`, `key = ?text`) arrive as Rust's `Debug`, quoted and already
/// escaped (ESC as `\u{1b}`), and pass unchanged; `%text` and the message arrive raw and are
/// escaped here.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> MakeVisitor<Writer<'writer>> for EscapedFields {
    type Visitor = EscapedFieldsVisitor<'writer>;

    fn make_visitor(&self, writer: Writer<'writer>) -> Self::Visitor {
        EscapedFieldsVisitor {
            writer,
            first: true,
            result: Ok(()),
        }
    }
}

/// Writes one event's or span's fields for [`EscapedFields`].
#[derive(Debug)]
pub struct EscapedFieldsVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for EscapedFieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // As tracing's default: a message as it is, any other string quoted.
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        // tracing-log's copy of a `log` record's metadata, which the line already shows.
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let separator = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        let head = match name {
            "message" => write!(self.writer, "{separator}"),
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                write!(self.writer, "{separator}{name}=")
            }
        };
        self.result = head.and_then(|()| write!(EscapingWriter(&mut self.writer), "{value:?}"));
    }
}

impl VisitOutput<fmt::Result> for EscapedFieldsVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for EscapedFieldsVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// Whether [`escape`] replaces `c`: a control character, or one that changes or hides
/// what is around it without showing itself.
pub fn needs_escape(c: char) -> bool {
    // C0 controls (ESC starts terminal sequences, CR and BS move the cursor back over
    // text), DEL, and the C1 controls (U+009B is an 8-bit CSI to some terminals).
    matches!(c, '\0'..='\x1f' | '\x7f'..='\u{9f}') || is_invisible(c)
}

/// The characters that render as nothing, or reorder what follows: every character of
/// general category Cf (format) in Unicode 16, the line and paragraph separators, and the
/// combining grapheme joiner. Listed by hand rather than with a Unicode tables crate: Cf
/// is small and changes rarely, and the list is what a reviewer has to check.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        // Soft hyphen (Cf): invisible except at a line break.
        '\u{ad}'
        // Combining grapheme joiner (Mn, default-ignorable): invisible, splits matching.
        | '\u{34f}'
        // Arabic number signs (Cf): prepended marks that span the characters after them.
        | '\u{600}'..='\u{605}'
        // Arabic letter mark (Cf): a bidi control.
        | '\u{61c}'
        // Arabic end of ayah, Syriac abbreviation mark, Arabic pound/piastre marks above,
        // Arabic disputed end of ayah (Cf): more prepended marks.
        | '\u{6dd}'
        | '\u{70f}'
        | '\u{890}'..='\u{891}'
        | '\u{8e2}'
        // Mongolian vowel separator (Cf): invisible.
        | '\u{180e}'
        // Zero width space, non-joiner and joiner; left-to-right and right-to-left marks.
        | '\u{200b}'..='\u{200f}'
        // Line and paragraph separators (Zl, Zp): line breaks to some terminals and
        // editors; then the bidi embeddings and overrides LRE, RLE, PDF, LRO, RLO (Cf).
        | '\u{2028}'..='\u{202e}'
        // Word joiner and the invisible operators (Cf).
        | '\u{2060}'..='\u{2064}'
        // Bidi isolates LRI, RLI, FSI, PDI, and the deprecated shaping controls (Cf).
        | '\u{2066}'..='\u{206f}'
        // Zero width no-break space / byte order mark (Cf).
        | '\u{feff}'
        // Interlinear annotation anchors (Cf): hide the text between them.
        | '\u{fff9}'..='\u{fffb}'
        // Kaithi number signs (Cf).
        | '\u{110bd}'
        | '\u{110cd}'
        // Egyptian hieroglyph format controls (Cf).
        | '\u{13430}'..='\u{1343f}'
        // Shorthand format controls (Cf).
        | '\u{1bca0}'..='\u{1bca3}'
        // Musical symbol format controls (Cf).
        | '\u{1d173}'..='\u{1d17a}'
        // Language tag and the tag characters (Cf): invisible copies of ASCII, used to
        // smuggle text past a reader.
        | '\u{e0001}'
        | '\u{e0020}'..='\u{e007f}'
    )
}

/// Writes `text` escaped: runs of safe characters in one write each.
fn write_escaped(out: &mut impl Write, text: &str) -> fmt::Result {
    let mut safe_from = 0;
    for (at, c) in text.char_indices() {
        if needs_escape(c) {
            out.write_str(&text[safe_from..at])?;
            write_char_escaped(out, c)?;
            safe_from = at + c.len_utf8();
        }
    }
    out.write_str(&text[safe_from..])
}

/// One escaped character, in the forms [`escape`] documents.
fn write_char_escaped(out: &mut impl Write, c: char) -> fmt::Result {
    match c {
        '\t' => out.write_str("\\t"),
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        '\0'..='\x1f' | '\x7f' => write!(out, "\\x{:02x}", u32::from(c)),
        _ => write!(out, "\\u{{{:x}}}", u32::from(c)),
    }
}

#[cfg(test)]
#[path = "escape_tests.rs"]
mod tests;
