//! Splits a Bash command line into the parts the policy judges: every simple command it
//! would run, every file it would write by redirection, and everything that cannot be
//! known before it runs. Anything this code does not explicitly understand becomes an
//! indeterminate part, so that a gap in the model fails closed.

use std::cell::RefCell;
use tree_sitter::{Node, Parser, Tree};

use super::commands;
use super::words::{word, Word};

/// Nesting (of substitutions, `bash -c` scripts, wrappers, tree depth) beyond which the
/// command is indeterminate; it bounds recursion on hostile input.
const MAX_DEPTH: u32 = 200;
/// Longer command lines are indeterminate rather than parsed.
const MAX_LEN: usize = 100_000;

/// Why allow rules may not apply to a command part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restriction {
    /// It runs with variables set by the command line (`VAR=x cmd`, `env VAR=x cmd`), or it
    /// is such an assignment: the environment can change what any program does.
    Assignment,
    /// Its name is a path (`./x`, `/usr/bin/git`): it need not be the program of that name.
    PathName,
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
    /// A file written by a redirection or a wrapper; `None` when the target is unknown.
    Write {
        target: Option<String>,
        text: String,
    },
    /// Something whose effect cannot be known from the text.
    Indeterminate { text: String, why: &'static str },
}

impl Part {
    pub(crate) fn text(&self) -> &str {
        match self {
            Part::Command { text, .. }
            | Part::Write { text, .. }
            | Part::Indeterminate { text, .. } => text,
        }
    }
}

/// Where parts are collected, plus facts about the whole command line.
#[derive(Debug, Default)]
pub(crate) struct Sink {
    pub parts: Vec<Part>,
    /// A `cd`/`pushd`/`popd` runs: relative redirect targets no longer name known files.
    pub changes_dir: bool,
}

impl Sink {
    pub(crate) fn indeterminate(&mut self, text: &str, why: &'static str) {
        self.parts.push(Part::Indeterminate {
            text: text.to_string(),
            why,
        });
    }
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
            if let Part::Write { target, .. } = part {
                if target.as_deref().is_some_and(|t| !t.starts_with('/')) {
                    *target = None;
                }
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
        return sink.indeterminate("…", "command too long to judge");
    }
    let Some(tree) = parse(src) else {
        return sink.indeterminate(src, "the shell parser is unavailable");
    };
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

fn parse(src: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            let mut parser = Parser::new();
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(src, None)
    })
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

struct Walker<'s, 'k> {
    src: &'s str,
    sink: &'k mut Sink,
}

impl Walker<'_, '_> {
    fn text(&self, node: Node<'_>) -> &str {
        &self.src[node.byte_range()]
    }

    fn node(&mut self, node: Node<'_>, env: Env) {
        if env.too_deep() {
            let text = self.text(node).to_string();
            return self.sink.indeterminate(&text, "nested too deeply to judge");
        }
        let inner = env.deeper();
        match node.kind() {
            "program" | "list" | "pipeline" | "subshell" | "compound_statement" | "do_group"
            | "if_statement" | "elif_clause" | "else_clause" | "while_statement"
            | "negated_command" | "ERROR" => self.children(node, inner),
            "comment" | "heredoc_start" | "heredoc_end" => {}
            "command" => self.command(node, env),
            "redirected_statement" | "function_definition" => {
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    if is_redirect(child.kind()) {
                        self.redirect(child, inner);
                    } else if child.kind() != "word" {
                        // The body; a function name (a `word`) runs nothing.
                        self.node(child, inner);
                    }
                }
            }
            "variable_assignment" | "variable_assignments" => {
                self.substitutions(node, inner);
                let text = self.text(node).to_string();
                self.sink.parts.push(assignment(text));
            }
            "declaration_command" | "unset_command" => self.declaration(node, env),
            "test_command" => {
                self.substitutions(node, inner);
                let text = self.text(node).to_string();
                let words = vec![Word::literal("[["), Word::unknown(text.clone(), false)];
                self.sink.parts.push(Part::Command {
                    words,
                    text,
                    restriction: env.assigns.then_some(Restriction::Assignment),
                });
            }
            "for_statement" => self.for_statement(node, inner),
            "case_statement" | "case_item" => {
                for (field, child) in fields(node) {
                    if field == Some("value") {
                        self.substitutions(child, inner);
                    } else {
                        self.node(child, inner);
                    }
                }
            }
            kind if is_redirect(kind) => self.redirect(node, inner),
            _ => {
                self.substitutions(node, inner);
                let text = self.text(node).to_string();
                self.sink
                    .indeterminate(&text, "a shell construct the policy does not judge");
            }
        }
    }

    fn children(&mut self, node: Node<'_>, env: Env) {
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            self.node(child, env);
        }
    }

    /// Judges the commands of every `$( )`, `` ` ` `` and `<( )` in `node` (itself included).
    fn substitutions(&mut self, node: Node<'_>, env: Env) {
        if env.too_deep() {
            let text = self.text(node).to_string();
            return self.sink.indeterminate(&text, "nested too deeply to judge");
        }
        match node.kind() {
            "command_substitution" | "process_substitution" => self.children(node, env.deeper()),
            _ if node.named_child_count() == 0 => {}
            _ => {
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    self.substitutions(child, env.deeper());
                }
            }
        }
    }

    fn command(&mut self, node: Node<'_>, env: Env) {
        let inner = env.deeper();
        let mut words = Vec::new();
        let mut assigned = false;
        for (field, child) in fields(node) {
            match (field, child.kind()) {
                (_, "variable_assignment") => {
                    assigned = true;
                    self.substitutions(child, inner);
                }
                (Some("name"), _) => {
                    self.substitutions(child, inner);
                    let name = match child.named_child(0) {
                        Some(n) if child.named_child_count() == 1 => word(n, self.src),
                        _ => Word::unknown(self.text(child), true),
                    };
                    words.push(name);
                }
                (Some("argument"), _) => {
                    self.substitutions(child, inner);
                    words.push(word(child, self.src));
                }
                (_, kind) if is_redirect(kind) => self.redirect(child, inner),
                _ => self.node(child, inner),
            }
        }
        if words.is_empty() {
            if assigned {
                let text = self.text(node).to_string();
                self.sink.parts.push(assignment(text));
            }
            return;
        }
        let env = Env {
            assigns: env.assigns || assigned,
            ..inner
        };
        if assigned {
            // Show the assignments the words leave out.
            let text = self.text(node).to_string();
            commands::simple_shown(words, text, env, self.sink);
        } else {
            commands::simple(words, env, self.sink);
        }
    }

    /// `export A=1`, `declare -x B`, `unset C`: judged as commands; setting a variable
    /// makes them assignments.
    fn declaration(&mut self, node: Node<'_>, env: Env) {
        let inner = env.deeper();
        let keyword = node
            .child(0)
            .map(|k| self.text(k).to_string())
            .unwrap_or_default();
        let mut words = vec![Word::literal(keyword)];
        let mut assigned = false;
        let mut cursor = node.walk();
        for child in node.named_children(&mut cursor) {
            self.substitutions(child, inner);
            match child.kind() {
                "variable_assignment" => {
                    assigned = true;
                    let known = child
                        .child_by_field_name("value")
                        .is_none_or(|v| word(v, self.src).known);
                    let text = self.text(child);
                    words.push(if known {
                        Word::literal(text)
                    } else {
                        Word::unknown(text, false)
                    });
                }
                "variable_name" => words.push(Word::literal(self.text(child))),
                _ => words.push(word(child, self.src)),
            }
        }
        let text = join(&words);
        let restriction = (env.assigns || assigned).then_some(Restriction::Assignment);
        self.sink.parts.push(Part::Command {
            words,
            text,
            restriction,
        });
    }

    /// A loop variable is an assignment like any other; the loop words may hold
    /// substitutions; the body is judged.
    fn for_statement(&mut self, node: Node<'_>, env: Env) {
        for (field, child) in fields(node) {
            match field {
                Some("variable") => {
                    let text = format!("for {}", self.text(child));
                    self.sink.parts.push(assignment(text));
                }
                Some("value") => self.substitutions(child, env),
                _ => self.node(child, env),
            }
        }
    }

    fn redirect(&mut self, node: Node<'_>, env: Env) {
        match node.kind() {
            "file_redirect" => self.file_redirect(node, env),
            "heredoc_redirect" => {
                let mut cursor = node.walk();
                for child in node.named_children(&mut cursor) {
                    match child.kind() {
                        "heredoc_body" => self.substitutions(child, env),
                        kind if is_redirect(kind) => self.redirect(child, env),
                        // The rest of a pipeline or list that follows `<<EOF` on its line.
                        _ => self.node(child, env),
                    }
                }
            }
            "herestring_redirect" => self.substitutions(node, env),
            _ => self.node(node, env),
        }
    }

    fn file_redirect(&mut self, node: Node<'_>, env: Env) {
        self.substitutions(node, env);
        let mut operator = "";
        let mut destinations = Vec::new();
        let mut cursor = node.walk();
        if cursor.goto_first_child() {
            loop {
                let child = cursor.node();
                if !child.is_named() {
                    operator = child.kind();
                } else if cursor.field_name() == Some("destination") {
                    destinations.push(child);
                }
                if !cursor.goto_next_sibling() {
                    break;
                }
            }
        }
        let writes = match operator {
            ">" | ">>" | "&>" | "&>>" | ">|" | "<>" => true,
            // `>&2` duplicates a descriptor; `>& file` writes the file.
            ">&" => destinations.iter().any(|d| d.kind() != "number"),
            _ => false,
        };
        if !writes {
            return;
        }
        let text = self.text(node).to_string();
        for destination in destinations {
            let target = word(destination, self.src);
            if let Some(part) = write_part(&target, &text) {
                self.sink.parts.push(part);
            }
        }
    }
}

/// The named children of `node` with their field names, read with one cursor (asking a
/// node for a child's field name walks its children again).
fn fields<'t>(node: Node<'t>) -> Vec<(Option<&'static str>, Node<'t>)> {
    let mut out = Vec::with_capacity(node.child_count());
    let mut cursor = node.walk();
    if cursor.goto_first_child() {
        loop {
            let child = cursor.node();
            if child.is_named() {
                out.push((cursor.field_name(), child));
            }
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
    out
}

fn is_redirect(kind: &str) -> bool {
    matches!(
        kind,
        "file_redirect" | "heredoc_redirect" | "herestring_redirect"
    )
}

fn assignment(text: String) -> Part {
    Part::Command {
        words: vec![Word::literal(text.clone())],
        text,
        restriction: Some(Restriction::Assignment),
    }
}

/// The write a redirection or a wrapper's output option makes, if it writes a file.
pub(crate) fn write_part(target: &Word, text: &str) -> Option<Part> {
    let target = match target.exact() {
        Some("/dev/null" | "/dev/stdout" | "/dev/stderr") => return None,
        Some(path) => Some(path.to_string()),
        None => None,
    };
    Some(Part::Write {
        target,
        text: text.to_string(),
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
