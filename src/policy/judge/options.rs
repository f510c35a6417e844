//! Command-line options as getopt reads them, for the commands the judge looks into
//! (wrappers, and programs whose arguments name files they write or code they run).

use super::words::Word;

/// The options a command accepts. Anything else makes the command indeterminate: an
/// unknown option might take the next word, which would shift which word is the command
/// (or the file it writes).
pub(crate) struct Spec {
    /// Short options without an argument.
    pub flags: &'static str,
    /// Short options with an argument (attached or the next word).
    pub with_value: &'static str,
    /// Short options with an optional attached argument only.
    pub optional_value: &'static str,
    pub long_flags: &'static [&'static str],
    pub long_with_value: &'static [&'static str],
    /// Long options whose argument can only be attached with `=`.
    pub long_optional_value: &'static [&'static str],
    /// `nice -5`: a number is an option.
    pub numeric: bool,
}

pub(crate) const NO_OPTIONS: Spec = Spec {
    flags: "",
    with_value: "",
    optional_value: "",
    long_flags: &[],
    long_with_value: &[],
    long_optional_value: &[],
    numeric: false,
};

/// An option and its value, if it took one.
pub(crate) type Opt<'w> = (&'w str, Option<Word>);

/// Parses leading options; returns the words after them and the options seen.
pub(crate) fn options<'w>(
    args: &'w [Word],
    spec: &Spec,
) -> Result<(&'w [Word], Vec<Opt<'w>>), &'static str> {
    const UNKNOWN: &str = "a wrapper option the policy does not know";
    const DYNAMIC: &str = "a wrapper argument not known before it runs";
    let mut seen = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        // A word that is not known could be an option as well as the command.
        let Some(text) = arg.exact() else {
            return Err(DYNAMIC);
        };
        if text == "--" {
            return Ok((&args[i + 1..], seen));
        }
        if !text.starts_with('-') || text == "-" {
            break;
        }
        i += 1;
        if let Some(long) = text.strip_prefix("--") {
            let (name, attached) = match long.split_once('=') {
                Some((n, _)) => (n, true),
                None => (long, false),
            };
            let value = long.split_once('=').map(|(_, v)| Word::literal(v));
            if spec.long_flags.contains(&name) && !attached {
                seen.push((name, None));
            } else if spec.long_optional_value.contains(&name) {
                seen.push((name, value));
            } else if spec.long_with_value.contains(&name) {
                if attached {
                    seen.push((name, value));
                } else {
                    let value = value_word(args.get(i))?;
                    seen.push((name, Some(value.clone())));
                    i += 1;
                }
            } else {
                return Err(UNKNOWN);
            }
            continue;
        }
        let cluster = &text[1..];
        if spec.numeric && cluster.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for (at, c) in cluster.char_indices() {
            let name = &cluster[at..at + c.len_utf8()];
            if spec.flags.contains(c) {
                seen.push((name, None));
            } else if spec.optional_value.contains(c) {
                seen.push((name, None));
                break;
            } else if spec.with_value.contains(c) {
                let attached = &cluster[at + c.len_utf8()..];
                if attached.is_empty() {
                    let value = value_word(args.get(i))?;
                    seen.push((name, Some(value.clone())));
                    i += 1;
                } else {
                    seen.push((name, Some(Word::literal(attached))));
                }
                break;
            } else {
                return Err(UNKNOWN);
            }
        }
    }
    Ok((&args[i..], seen))
}

/// An option's separate value: it must exist and must not split into several words.
pub(crate) fn value_word(word: Option<&Word>) -> Result<&Word, &'static str> {
    match word {
        Some(w) if !w.splits => Ok(w),
        Some(_) => Err("a wrapper argument not known before it runs"),
        None => Err("a wrapper option without its value"),
    }
}
