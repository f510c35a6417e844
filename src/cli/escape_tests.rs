//! The escaping rules, the spoofing strings they defeat, and the text they leave alone.

use std::borrow::Cow;
use std::io;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::*;

/// Escapes, checking that the result was allocated (something was escaped).
fn escaped(text: &str) -> String {
    match escape(text) {
        Cow::Owned(out) => out,
        Cow::Borrowed(_) => panic!("{text:?} was left as it is"),
    }
}

#[test]
fn a_line_rewriting_command_is_shown_whole() {
    let spoof = "git status > .env #\x1b[2K\rgit status > notes.txt";
    assert_eq!(
        escaped(spoof),
        r"git status > .env #\x1b[2K\rgit status > notes.txt"
    );
}

#[test]
fn bidi_overrides_and_isolates_are_visible() {
    assert_eq!(
        escaped("cat /tmp/\u{202e}txt.sh"),
        r"cat /tmp/\u{202e}txt.sh"
    );
    assert_eq!(
        escaped("\u{2066}a\u{2067}b\u{2068}c\u{2069}\u{200e}\u{200f}\u{61c}"),
        r"\u{2066}a\u{2067}b\u{2068}c\u{2069}\u{200e}\u{200f}\u{61c}"
    );
}

#[test]
fn nul_esc_and_bel_in_a_task_id_are_visible() {
    assert_eq!(
        escaped("task\0-1\x1b]0;owned\x07"),
        r"task\x00-1\x1b]0;owned\x07"
    );
}

#[test]
fn controls_take_their_documented_forms() {
    for (text, shown) in [
        ("\t", r"\t"),
        ("\n", r"\n"),
        ("\r", r"\r"),
        ("\x01", r"\x01"),
        ("\x08", r"\x08"),
        ("\x1f", r"\x1f"),
        ("\x7f", r"\x7f"),
        ("\u{80}", r"\u{80}"),
        ("\u{85}", r"\u{85}"),
        ("\u{9b}", r"\u{9b}"),
        ("\u{9f}", r"\u{9f}"),
    ] {
        assert_eq!(escaped(text), shown, "{text:?}");
    }
}

#[test]
fn invisible_format_characters_are_visible() {
    for c in [
        '\u{ad}',
        '\u{34f}',
        '\u{600}',
        '\u{605}',
        '\u{6dd}',
        '\u{70f}',
        '\u{890}',
        '\u{8e2}',
        '\u{180e}',
        '\u{200b}',
        '\u{200c}',
        '\u{200d}',
        '\u{2028}',
        '\u{2029}',
        '\u{202a}',
        '\u{2060}',
        '\u{2064}',
        '\u{206f}',
        '\u{feff}',
        '\u{fff9}',
        '\u{fffb}',
        '\u{110bd}',
        '\u{110cd}',
        '\u{13430}',
        '\u{1343f}',
        '\u{1bca0}',
        '\u{1d173}',
        '\u{1d17a}',
        '\u{e0001}',
        '\u{e0020}',
        '\u{e007f}',
    ] {
        let shown = format!("\\u{{{:x}}}", u32::from(c));
        assert_eq!(escaped(&format!("a{c}b")), format!("a{shown}b"));
    }
}

#[test]
fn neighbours_of_the_escaped_ranges_are_left_alone() {
    for text in [
        " ", "~", "\u{a0}", "\u{a1}", "\u{2027}", "\u{202f}", "\u{2065}", "\u{2070}", "\u{fffc}",
        "\u{fe0f}",
    ] {
        assert!(matches!(escape(text), Cow::Borrowed(_)), "{text:?}");
    }
}

#[test]
fn ordinary_text_is_borrowed_unchanged() {
    for text in [
        "",
        "git status",
        "run-0193f1c2-7b3e-7c1d-9a4e-5f6a7b8c9d0e",
        r"echo a\ b",
        r"printf '\x1b[31m'",
        "café échec",
        "日本語のファイル.txt",
        "🦀 ❤️ 👍🏽",
    ] {
        match escape(text) {
            Cow::Borrowed(same) => assert_eq!(same, text),
            Cow::Owned(out) => panic!("{text:?} became {out:?}"),
        }
    }
}

#[test]
fn display_wrapper_writes_the_same_text() {
    let text = "a\x1b[2Kb\u{202e}c";
    assert_eq!(Escaped(text).to_string(), escape(text));
    assert_eq!(Escaped("plain").to_string(), "plain");
}

#[test]
fn display_wrapper_pads_the_escaped_text() {
    // `a\x1b` is five characters on screen: padded to eight with three spaces.
    assert_eq!(format!("{:<8}|", Escaped("a\x1b")), r"a\x1b   |");
    assert_eq!(format!("{:>4}|", Escaped("é")), "   é|");
}

#[test]
fn escaping_writer_escapes_debug_and_display_output() {
    let mut out = String::new();
    let mut writer = EscapingWriter(&mut out);
    let (shown, debugged) = ("a\rb", "c\x1bd");
    write!(writer, "{shown}|{debugged:?}|").expect("write to a String");
    writer.write_char('\u{2069}').expect("write to a String");
    // Debug already wrote ESC as `\u{1b}`: left as it is, not escaped twice.
    assert_eq!(out, r#"a\rb|"c\u{1b}d"|\u{2069}"#);
}

/// Characters an attacker reaches for, mixed into arbitrary text by the property test.
const HOSTILE: &[char] = &[
    '\0',
    '\x07',
    '\x08',
    '\t',
    '\n',
    '\r',
    '\x1b',
    '\x7f',
    '\u{85}',
    '\u{9b}',
    '\u{ad}',
    '\u{200b}',
    '\u{200d}',
    '\u{2028}',
    '\u{202e}',
    '\u{2066}',
    '\u{feff}',
    '\u{e0041}',
    '\\',
    '[',
    'x',
    '{',
    '}',
];

fn hostile_text() -> impl Strategy<Value = String> {
    let c = prop_oneof![
        any::<char>(),
        prop::sample::select(HOSTILE),
        proptest::char::range(' ', '~'),
    ];
    prop::collection::vec(c, 0..48).prop_map(|chars| chars.into_iter().collect())
}

proptest! {
    #[test]
    fn escaped_text_has_nothing_left_to_escape(text in hostile_text()) {
        let out = escape(&text);
        prop_assert!(!out.chars().any(needs_escape), "{:?}", out);
        prop_assert!(!out.chars().any(char::is_control), "{:?}", out);
        // Safe text stays as it is: escaping twice changes nothing.
        prop_assert!(matches!(escape(&out), Cow::Borrowed(_)));
        prop_assert_eq!(Escaped(&text).to_string(), out.as_ref());
    }

    #[test]
    fn text_without_hostile_characters_is_borrowed(text in hostile_text()) {
        let clean = !text.chars().any(needs_escape);
        prop_assert_eq!(matches!(escape(&text), Cow::Borrowed(_)), clean);
        if clean {
            prop_assert_eq!(escape(&text), text.as_str());
        }
    }
}

// The text log's field formatter.

/// A worker's command that, printed raw, erases itself and shows a harmless one.
const SPOOF: &str = "git status > .env #\x1b[2K\rgit status > notes.txt";

/// A log destination the test reads back.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl io::Write for Buffer {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("buffer lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The text log lines `log` writes, with the escaping field formatter and no time,
/// level or target, so that only the fields are compared; `ansi` as at a terminal.
fn text_log(ansi: bool, log: impl Fn()) -> Vec<String> {
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .fmt_fields(EscapedFields)
        .with_writer(move || writer.clone())
        .with_ansi(ansi)
        .without_time()
        .with_level(false)
        .with_target(false)
        .finish();
    tracing::subscriber::with_default(subscriber, log);
    let bytes = buffer.0.lock().expect("buffer lock").clone();
    String::from_utf8(bytes)
        .expect("utf-8 log")
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn text_log_escapes_display_debug_and_message() {
    let log = || {
        tracing::info!(command = %SPOOF, "asked");
        tracing::info!(command = ?SPOOF, "asked");
        tracing::info!(command = SPOOF, r#type = "x\u{202e}y", "asked");
        tracing::info!("asked for {SPOOF}");
    };
    // At a terminal (colours on) the fields come out the same, escaped once.
    assert_eq!(text_log(true, log), text_log(false, log));
    assert_eq!(
        text_log(false, log),
        [
            r"asked command=git status > .env #\x1b[2K\rgit status > notes.txt",
            r#"asked command="git status > .env #\u{1b}[2K\rgit status > notes.txt""#,
            r#"asked command="git status > .env #\u{1b}[2K\rgit status > notes.txt" type="x\u{202e}y""#,
            r"asked for git status > .env #\x1b[2K\rgit status > notes.txt",
        ]
    );
}

#[test]
fn text_log_escapes_span_fields() {
    let lines = text_log(false, || {
        let span = tracing::info_span!("run", run_id = %"r\u{2066}1\n");
        let _entered = span.enter();
        tracing::info!(n = 3, "step");
    });
    assert_eq!(lines, [r"run{run_id=r\u{2066}1\n}: step n=3"]);
}
