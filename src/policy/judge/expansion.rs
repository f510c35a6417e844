//! What a parameter expansion (`${…}`) or an arithmetic text does beyond reading a
//! variable: the operands it expands (with their substitutions), whether it assigns, and
//! the forms that can run code held in a value (`${x@P}`, `${!x}`, subscripts).

use super::lex::{operand_effects, Effects, ARITHMETIC_SUBSCRIPT};

const PROMPT_EXPANSION: &str = "prompt expansion (${x@P}) runs the commands in a value";
const INDIRECT: &str = "an indirect expansion (${!x}) can evaluate an array subscript";
pub(crate) const UNKNOWN_EXPANSION: &str = "a parameter expansion the policy does not model";

/// The inside of `${…}`: what it does beyond reading a variable.
pub(crate) fn parameter(body: &str) -> Effects {
    let mut effects = Effects::default();
    let mut rest = body;
    if let Some(r) = rest.strip_prefix('!') {
        // `${!prefix*}` and `${!prefix@}` only list names.
        let lists = (r.ends_with('*') || r.ends_with('@')) && is_name(&r[..r.len() - 1]);
        if lists {
            return effects;
        }
        effects.hazard(INDIRECT);
        rest = r;
    } else if let Some(r) = rest.strip_prefix('#') {
        if !r.is_empty() {
            rest = r;
        }
    }
    let name_len = rest
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_alphanumeric() || c == '_' || (i == 0 && "@*#?-$!".contains(c)))
        })
        .map_or(rest.len(), |(i, _)| i);
    let (name, mut op) = rest.split_at(name_len);
    if name.is_empty() {
        effects.hazard(UNKNOWN_EXPANSION);
        return effects;
    }
    if let Some(r) = op.strip_prefix('[') {
        let Some(close) = r.find(']') else {
            effects.hazard(UNKNOWN_EXPANSION);
            return effects;
        };
        let subscript = &r[..close];
        let literal = matches!(subscript, "@" | "*")
            || (!subscript.is_empty() && subscript.bytes().all(|b| b.is_ascii_digit()));
        if !literal {
            effects.hazard(ARITHMETIC_SUBSCRIPT);
            let inner = super::lex::effects_in(subscript);
            effects.scripts.extend(inner.scripts);
        }
        op = &r[close + 1..];
    }
    let operand = |effects: &mut Effects, text: &str| effects.merge(operand_effects(text));
    if op.is_empty() {
        return effects;
    }
    if let Some(r) = op.strip_prefix('@') {
        if !matches!(r, "Q" | "E" | "A" | "a" | "K" | "k" | "u" | "U" | "L") {
            effects.hazard(if r == "P" {
                PROMPT_EXPANSION
            } else {
                UNKNOWN_EXPANSION
            });
        }
        return effects;
    }
    for prefix in [":=", "="] {
        if let Some(r) = op.strip_prefix(prefix) {
            effects.assigns = true;
            operand(&mut effects, r);
            return effects;
        }
    }
    for prefix in [
        ":-", ":+", ":?", "-", "+", "?", "##", "#", "%%", "%", "//", "/#", "/%", "/", "^^", "^",
        ",,", ",",
    ] {
        if let Some(r) = op.strip_prefix(prefix) {
            operand(&mut effects, r);
            return effects;
        }
    }
    if let Some(r) = op.strip_prefix(':') {
        // `${x:offset:length}`: both are arithmetic.
        let literal = r.split(':').all(|n| {
            n.trim()
                .trim_start_matches('-')
                .bytes()
                .all(|b| b.is_ascii_digit())
        });
        if !literal {
            effects.hazard(ARITHMETIC_SUBSCRIPT);
            operand(&mut effects, r);
        }
        return effects;
    }
    effects.hazard(UNKNOWN_EXPANSION);
    effects
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether arithmetic text assigns: `=` that is not part of `==`, `!=`, `<=`, `>=`, or
/// `++`/`--`.
pub(crate) fn assigns_in_arithmetic(text: &str) -> bool {
    if text.contains("++") || text.contains("--") {
        return true;
    }
    let bytes = text.as_bytes();
    bytes.iter().enumerate().any(|(i, &b)| {
        b == b'='
            && bytes.get(i + 1) != Some(&b'=')
            && !(i > 0 && matches!(bytes[i - 1], b'=' | b'!' | b'<' | b'>'))
    })
}
