//! Splits a Bash command line into the parts the policy judges: every simple command it
//! would run, every file it would write by redirection, and everything that cannot be
//! known before it runs. Anything this code does not explicitly understand becomes an
//! indeterminate part, so that a gap in the model fails closed.

use std::cell::RefCell;
use tree_sitter::{ParseOptions, ParseState, Parser, Tree};

use super::commands;
use super::coproc;
use super::lex::Effects;
use super::walk::Walker;
use super::words::Word;

/// Nesting (of substitutions, `bash -c` scripts, wrappers, tree depth) beyond which the
/// command is indeterminate; it bounds recursion on hostile input.
const MAX_DEPTH: u32 = 100;
/// Longer command lines are indeterminate rather than parsed.
pub(crate) const MAX_LEN: usize = 100_000;
/// Bytes parsed in all (a substitution's body is parsed again on its own), and tree nodes
/// visited, before the rest of a line is indeterminate: this bounds the cost of judging
/// any line of up to `MAX_LEN` bytes.
const PARSE_BUDGET: usize = 2 * MAX_LEN;
const NODE_BUDGET: usize = 20_000;
/// Here-document operators in one script: tree-sitter-bash's cost grows with the square of
/// their count, and no real command needs many.
const MAX_HEREDOCS: usize = 64;
/// Parser steps of 100 operations each, for all the parses of one line: about 20 ms of
/// the slowest hostile input; a dense 6.5 KB script takes 43.
const PARSE_STEPS: usize = 150;
pub(crate) const BUDGET_SPENT: &str = "too much to judge: the budget for judging is spent";

/// Why allow rules may not apply to a command part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Restriction {
    /// It runs with variables set by the command line (`VAR=x cmd`, `env VAR=x cmd`), or it
    /// is such an assignment: the environment can change what any program does.
    Assignment,
    /// Its name is a path (`./x`, `/usr/bin/git`): it need not be the program of that name.
    PathName,
    /// A builtin that changes what later commands do or run (`trap`, `alias`, `hash`,
    /// `shopt`, `read`, `set -k`, …).
    ShellState,
    /// A program given an option or variable the option table does not know to be
    /// harmless (`make -f`, `go test -exec`, `rg -z`, `git --ext-diff`): why, as the
    /// reason says it.
    Unvetted(super::table::Why),
}

/// One thing the policy judges separately.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// A simple command; the first word is the command name (a basename).
    Command {
        words: Vec<Word>,
        text: String,
        restriction: Option<Restriction>,
    },
    /// A file written by a redirection or a command; `None` when the target is unknown.
    Write {
        target: Option<String>,
        text: String,
        /// The write may leave a symlink (or a moved file) at the target (`ln`, `mv`,
        /// `cp -a`): a later write through that path may land anywhere.
        link: bool,
    },
    /// Files a command or redirection may read, as written (checked against the secrets
    /// only: what a command reads is otherwise judged with the command).
    Read { paths: Vec<String>, text: String },
    /// Something whose effect cannot be known from the text.
    Indeterminate { text: String, why: &'static str },
}

impl Part {
    pub(crate) fn text(&self) -> &str {
        match self {
            Part::Command { text, .. }
            | Part::Write { text, .. }
            | Part::Read { text, .. }
            | Part::Indeterminate { text, .. } => text,
        }
    }
}

/// Where parts are collected, plus facts about the whole command line.
#[derive(Debug)]
pub(crate) struct Sink {
    pub parts: Vec<Part>,
    /// A `cd`/`pushd`/`popd`, `env -C` or the like runs: relative write targets no longer
    /// name known files.
    pub changes_dir: bool,
    /// Bytes that may still be parsed.
    parse_budget: usize,
    /// Tree nodes that may still be visited.
    node_budget: usize,
    /// Parser steps (of 100 operations each) that may still be taken.
    parse_steps: usize,
}

impl Default for Sink {
    fn default() -> Self {
        Self {
            parts: Vec::new(),
            changes_dir: false,
            parse_budget: PARSE_BUDGET,
            node_budget: NODE_BUDGET,
            parse_steps: PARSE_STEPS,
        }
    }
}

impl Sink {
    pub(crate) fn indeterminate(&mut self, text: &str, why: &'static str) {
        self.parts.push(Part::Indeterminate {
            text: shorten(text),
            why,
        });
    }

    /// Takes one tree node from the budget; false when it is spent.
    pub(crate) fn spend_node(&mut self) -> bool {
        let left = self.node_budget > 0;
        self.node_budget = self.node_budget.saturating_sub(1);
        left
    }

    /// Judges what a scanned word does beyond its value: its substitutions as scripts,
    /// its hazards as indeterminate parts, an assignment as an assignment part.
    pub(crate) fn effects(&mut self, text: &str, effects: Effects, env: Env) {
        for body in effects.scripts {
            script(&body, env.deeper(), self);
        }
        for why in effects.hazards {
            self.indeterminate(text, why);
        }
        if effects.assigns {
            self.parts.push(assignment(shorten(text)));
        }
    }
}

/// Messages quote at most this much of a construct.
fn shorten(text: &str) -> String {
    const MAX: usize = 200;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// What a nested part inherits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Env {
    pub depth: u32,
    /// Runs with variables set by an enclosing command line.
    pub assigns: bool,
}

impl Env {
    pub(crate) fn deeper(self) -> Self {
        Self {
            depth: self.depth + 1,
            ..self
        }
    }

    pub(crate) fn too_deep(self) -> bool {
        self.depth > MAX_DEPTH
    }
}

/// The parts of a command line.
pub(crate) fn analyse(command: &str) -> Vec<Part> {
    let mut sink = Sink::default();
    script(
        command,
        Env {
            depth: 0,
            assigns: false,
        },
        &mut sink,
    );
    if sink.changes_dir {
        for part in &mut sink.parts {
            match part {
                Part::Write { target, .. }
                    if target.as_deref().is_some_and(|t| !t.starts_with('/')) =>
                {
                    *target = None;
                }
                // After `cd`, a relative path may name a file of any directory; the
                // home is the one that holds secrets (`cd ~ && cat .ssh/id_rsa`).
                Part::Read { paths, .. } => {
                    let from_home: Vec<String> = paths
                        .iter()
                        .filter(|p| !p.starts_with(['/', '~']))
                        .map(|p| format!("~/{p}"))
                        .collect();
                    paths.extend(from_home);
                }
                _ => {}
            }
        }
    }
    sink.parts
}

/// Adds the parts of a script (a command line, or the argument of `bash -c`/`eval`).
pub(crate) fn script(src: &str, env: Env, sink: &mut Sink) {
    if env.too_deep() {
        return sink.indeterminate(src, "nested too deeply to judge");
    }
    match plain_words(src) {
        Some(words) => commands::simple(words, env, sink),
        None => parsed(src, env, sink),
    }
}

/// Adds the parts of a script by walking its parse tree.
fn parsed(src: &str, env: Env, sink: &mut Sink) {
    if src.len() > MAX_LEN {
        return sink.indeterminate(src, "command too long to judge");
    }
    if src.len() > sink.parse_budget {
        sink.parse_budget = 0;
        return sink.indeterminate(src, BUDGET_SPENT);
    }
    sink.parse_budget -= src.len();
    if src.matches("<<").count() > MAX_HEREDOCS {
        return sink.indeterminate(src, "too many here-documents to judge");
    }
    let tree = match parse(src, &mut sink.parse_steps) {
        Parsed::Tree(tree) => tree,
        Parsed::OverBudget => return sink.indeterminate(src, BUDGET_SPENT),
        Parsed::Unavailable => {
            return sink.indeterminate(src, "the shell parser is unavailable");
        }
    };
    // The keyword `coproc` is not in the grammar: blank it out and read the line again.
    if let Some(text) = coproc::blanked(src, &tree) {
        return parsed(&text, env, sink);
    }
    let root = tree.root_node();
    if root.has_error() {
        sink.indeterminate(src, "the command does not parse");
    }
    Walker { src, sink }.node(root, env.deeper());
}

thread_local! {
    /// Building a parser costs more than a parse; each thread keeps one.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

/// What came of a parse.
enum Parsed {
    Tree(Tree),
    /// The parser used up the steps it had.
    OverBudget,
    Unavailable,
}

/// Parses `src`, taking the parser's steps from `steps`. tree-sitter reports progress
/// every 100 operations; each report takes a step, and when none are left the parse is
/// cancelled. Counting operations rather than time keeps the decision the same on a
/// busy machine.
fn parse(src: &str, steps: &mut usize) -> Parsed {
    let parsed = PARSER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            let mut parser = Parser::new();
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        let parser = slot.as_mut()?;
        // tree-sitter-bash's scanner passes characters past U+00FF to `isdigit` and reads
        // out of bounds (a crash), and takes Unicode spaces for blanks, which bash does
        // not. Bash's metacharacters are all ASCII, so every other byte is read as a
        // plain word character: the structure and the byte offsets stay bash's.
        let sanitized: Vec<u8>;
        let bytes = if src.is_ascii() {
            src.as_bytes()
        } else {
            sanitized = src
                .bytes()
                .map(|b| if b.is_ascii() { b } else { b'x' })
                .collect();
            &sanitized
        };
        let mut over = false;
        let mut progress = |_: &ParseState| {
            over = *steps == 0;
            *steps = steps.saturating_sub(1);
            over
        };
        let options = ParseOptions::new().progress_callback(&mut progress);
        let tree = parser.parse_with_options(
            &mut |at, _| bytes.get(at..).unwrap_or_default(),
            None,
            Some(options),
        );
        if tree.is_none() {
            // A cancelled parse would otherwise be resumed by the next one.
            parser.reset();
        }
        Some(tree.map_or(Parsed::OverBudget, Parsed::Tree))
    });
    parsed.unwrap_or(Parsed::Unavailable)
}

/// The words of a command line that is one simple command of plain words, without parsing.
///
/// Sound because every character allowed here is an ordinary word character to bash
/// (no quoting, expansion, globbing, operators, comments or tilde), words are split on
/// spaces only, and the first word can be neither an assignment nor a reserved word;
/// such a line is exactly one command of these words. The first word is held to a
/// narrower set where the parser reads some characters otherwise (a lone `-`, `a@`, `a%`).
/// The unit tests check the fast path against the parser.
pub(crate) fn plain_words(src: &str) -> Option<Vec<Word>> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b" -_./:@%+,=".contains(&b);
    if !src.bytes().all(plain) {
        return None;
    }
    let mut words = src.split(' ').filter(|w| !w.is_empty()).peekable();
    let first = *words.peek()?;
    let leads = |b: u8| b.is_ascii_alphanumeric() || b"_./".contains(&b);
    let follows = |b: u8| b.is_ascii_alphanumeric() || b"-_./".contains(&b);
    let bytes = first.as_bytes();
    if !leads(bytes[0]) || !bytes[1..].iter().all(|&b| follows(b)) || RESERVED.contains(&first) {
        return None;
    }
    // The parser reads a word starting with `=` (`==`) as an operator.
    if src.contains(" =") {
        return None;
    }
    Some(words.map(Word::literal).collect())
}

/// Bash reserved words made only of plain characters.
const RESERVED: [&str; 16] = [
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "coproc",
];

pub(crate) fn assignment(text: String) -> Part {
    Part::Command {
        words: vec![Word::literal(text.clone())],
        text,
        restriction: Some(Restriction::Assignment),
    }
}

/// The write a redirection or a wrapper's output option makes, if it writes a file.
pub(crate) fn write_part(target: &Word, text: &str) -> Option<Part> {
    writing(target, text, false)
}

/// The write of a command that may leave a symlink or a moved file at `target`.
pub(crate) fn link_part(target: &Word, text: &str) -> Option<Part> {
    writing(target, text, true)
}

fn writing(target: &Word, text: &str, link: bool) -> Option<Part> {
    let target = match target.exact() {
        Some("/dev/null" | "/dev/stdout" | "/dev/stderr") => return None,
        Some(path) => Some(path.to_string()),
        None => None,
    };
    Some(Part::Write {
        target,
        text: text.to_string(),
        link,
    })
}

/// The words as one line, for messages.
pub(crate) fn join(words: &[Word]) -> String {
    let mut out = String::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&w.text);
    }
    out
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
