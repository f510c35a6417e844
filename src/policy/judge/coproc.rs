//! `coproc [NAME] COMMAND`: bash runs COMMAND in the background with pipes to the shell.
//!
//! tree-sitter-bash does not know the keyword: it reads `coproc` as a command name, and a
//! compound command after it (`coproc NAME { …; }`) as loose words. So where the parse has
//! a command named by the bare word `coproc`, the keyword — and the NAME before a compound
//! command, which is only a variable name — is blanked out of the text and the line parsed
//! again: COMMAND is then judged as what it is, like any command run with `&`. Blanking
//! keeps every byte offset, so the words are still scanned from the text bash reads.

use tree_sitter::{Node, Tree};

use super::lex;

const KEYWORD: &str = "coproc";

/// Words that start a compound command (bash takes the word before one as NAME).
const COMPOUND: [&str; 8] = ["{", "if", "while", "until", "for", "case", "select", "[["];

/// The text with every `coproc` keyword of `tree` (and its NAME) blanked out; `None` when
/// there is none.
pub(crate) fn blanked(src: &str, tree: &Tree) -> Option<String> {
    if !src.contains(KEYWORD) {
        return None;
    }
    let mut ranges = Vec::new();
    let mut cursor = tree.walk();
    // An iterative walk: the tree may be deep.
    'walk: loop {
        let node = cursor.node();
        if let Some(at) = keyword_at(src, node) {
            ranges.push(at..at + KEYWORD.len());
            ranges.extend(name_after(src, at + KEYWORD.len()));
        }
        if cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() {
                break 'walk;
            }
        }
    }
    if ranges.is_empty() {
        return None;
    }
    let mut bytes = src.as_bytes().to_vec();
    for range in ranges {
        bytes[range].fill(b' ');
    }
    // Only ASCII bytes were replaced by ASCII spaces.
    String::from_utf8(bytes).ok()
}

/// Where `node` is a command whose name is the bare word `coproc`: its offset.
fn keyword_at(src: &str, node: Node<'_>) -> Option<usize> {
    if node.kind() != "command" {
        return None;
    }
    let name = node.child_by_field_name("name")?;
    (&src[name.byte_range()] == KEYWORD).then_some(name.start_byte())
}

/// The range of NAME in `coproc NAME COMPOUND`, where the keyword ends at `end`: a plain
/// variable name followed by a compound command. Before a simple command there is no
/// NAME (`coproc curl x` runs `curl x`).
fn name_after(src: &str, end: usize) -> Option<std::ops::Range<usize>> {
    let start = skip_blanks(src, end);
    let name = lex::word_at(src, start);
    let text = &src[start..name.end];
    let plain = text.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !plain || COMPOUND.contains(&text) {
        return None;
    }
    let next = skip_blanks(src, name.end);
    let follows = &src[next..lex::word_at(src, next).end];
    let compound = src[next..].starts_with('(') || COMPOUND.contains(&follows);
    compound.then_some(start..name.end)
}

fn skip_blanks(src: &str, from: usize) -> usize {
    let rest = &src[from..];
    from + (rest.len() - rest.trim_start_matches([' ', '\t']).len())
}
