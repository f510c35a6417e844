//! The walk over a tree-sitter-bash parse tree: which parts each node kind adds. Every
//! node kind is handled on purpose or judged indeterminate (after its substitutions are
//! judged), so a gap in the model fails closed.

use tree_sitter::Node;

use super::commands;
use super::lex;
use super::secrets::home_form;
use super::shell::{assignment, write_part, Env, Part, Restriction, Sink};
use super::words::Word;

/// Walks a parse tree. Every node kind is either handled here on purpose or judged
/// indeterminate (after its substitutions are judged): a gap in the model fails closed.
pub(crate) struct Walker<'s, 'k> {
    pub src: &'s str,
    pub sink: &'k mut Sink,
}

const SPLIT_DIFFERENTLY: &str =
    "the parser and bash would split this word differently (a backslash-newline or quote inside it)";
const SKIPPED: &str = "the parser skipped part of the command";
const HEREDOC_MISREAD: &str =
    "a here-document whose extent the parser may read differently from bash";
const NETWORK: &str = "it opens a network connection (/dev/tcp or /dev/udp)";
const UNKNOWN_INPUT: &str =
    "it reads from a file not known before it runs (it could be a /dev/tcp connection)";

impl Walker<'_, '_> {
    fn text(&self, node: Node<'_>) -> &str {
        &self.src[node.byte_range()]
    }

    fn indeterminate(&mut self, node: Node<'_>, why: &'static str) {
        let text = self.text(node).to_string();
        self.sink.indeterminate(&text, why);
    }

    /// Judges everything `node`'s text could run, without knowing its structure.
    fn effects_of(&mut self, node: Node<'_>, env: Env) {
        let text = self.text(node);
        let effects = lex::effects_in(text);
        let text = text.to_string();
        self.sink.effects(&text, effects, env);
    }

    pub(crate) fn node(&mut self, node: Node<'_>, env: Env) {
        if env.too_deep() {
            return self.indeterminate(node, "nested too deeply to judge");
        }
        if !self.sink.spend_node() {
            return self.indeterminate(node, super::shell::BUDGET_SPENT);
        }
        let inner = env.deeper();
        match node.kind() {
            "program" | "list" | "pipeline" | "subshell" | "do_group" | "if_statement"
            | "elif_clause" | "else_clause" | "while_statement" | "negated_command" | "ERROR" => {
                self.children(node, inner)
            }
            "compound_statement" if node.child(0).is_some_and(|c| c.kind() == "{") => {
                self.children(node, inner)
            }
            "comment" => self.comment(node),
            "command" => self.command(node, env),
            "redirected_statement" => {
                for child in named_children(node) {
                    if is_redirect(child.kind()) {
                        self.redirect(child, inner);
                    } else {
                        self.node(child, inner);
                    }
                }
            }
            "function_definition" => {
                for (field, child) in fields(node) {
                    // The name runs nothing; the body is judged even if it is never called.
                    if field != Some("name") {
                        self.node(child, inner);
                    }
                }
            }
            "variable_assignment" | "variable_assignments" => {
                self.effects_of(node, inner);
                let text = self.text(node).to_string();
                self.sink.parts.push(assignment(text));
            }
            "declaration_command" | "unset_command" => self.declaration(node, env),
            "test_command" => self.test(node, env),
            "for_statement" => self.for_statement(node, inner),
            "case_statement" | "case_item" => {
                for (field, child) in fields(node) {
                    match field {
                        Some("value") => self.effects_of(child, inner),
                        _ if child.kind() == "comment" => self.comment(child),
                        _ if matches!(child.kind(), "case_item") || field.is_none() => {
                            self.node(child, inner)
                        }
                        // Patterns and the subject are expanded, not run.
                        _ => self.effects_of(child, inner),
                    }
                }
            }
            kind if is_redirect(kind) => self.redirect(node, inner),
            _ => {
                self.effects_of(node, inner);
                self.indeterminate(node, "a shell construct the policy does not judge");
            }
        }
    }

    fn children(&mut self, node: Node<'_>, env: Env) {
        for child in named_children(node) {
            self.node(child, env);
        }
    }

    /// A comment runs nothing, if bash reads it as one too: only at the start of a word.
    fn comment(&mut self, node: Node<'_>) {
        let before = self.src[..node.start_byte()].chars().next_back();
        if !before.is_none_or(|c| matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')')) {
            self.indeterminate(node, "a comment bash may read as part of a word");
        }
    }

    /// The word `node` stands for, scanned by bash's rules; what it runs is judged.
    fn word(&mut self, node: Node<'_>, env: Env) -> Word {
        let lexed = lex::word_at(self.src, node.start_byte());
        let text = self.text(node).to_string();
        self.sink.effects(&text, lexed.effects, env);
        if lexed.end != node.end_byte() {
            self.sink.indeterminate(&text, SPLIT_DIFFERENTLY);
            return Word::unknown(text, true);
        }
        lexed.word
    }

    /// Whether the tree accounts for every byte of `node`: between its children there are
    /// only blanks and line continuations. tree-sitter-bash drops some words (a lone `-`
    /// after `local`) without an error.
    fn covered(&self, node: Node<'_>) -> bool {
        // Pieces between line continuations hold only spaces and tabs.
        let blank = |gap: &str| {
            gap.split("\\\n")
                .all(|piece| piece.bytes().all(|b| b == b' ' || b == b'\t'))
        };
        let mut pos = node.start_byte();
        for (_, child) in all_fields(node) {
            if !blank(&self.src[pos..child.start_byte()]) {
                return false;
            }
            pos = child.end_byte();
        }
        blank(&self.src[pos..node.end_byte()])
    }

    fn command(&mut self, node: Node<'_>, env: Env) {
        if !self.covered(node) {
            self.indeterminate(node, SKIPPED);
        }
        let inner = env.deeper();
        let mut words = Vec::new();
        let mut assigned = false;
        for (field, child) in fields(node) {
            match (field, child.kind()) {
                (_, "variable_assignment") => {
                    assigned = true;
                    self.effects_of(child, inner);
                }
                (Some("name") | Some("argument"), _) => words.push(self.word(child, inner)),
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

    /// `export A=1`, `declare -x B`, `unset C`: judged as the builtins they are. The words
    /// are read by the scanner from the source, since tree-sitter-bash drops some (a lone
    /// `-`) from these nodes.
    fn declaration(&mut self, node: Node<'_>, env: Env) {
        let inner = env.deeper();
        let end = node.end_byte();
        let mut words = Vec::new();
        let mut pos = node.start_byte();
        while pos < end {
            let rest = &self.src[pos..end];
            let blank = rest.len() - rest.trim_start_matches([' ', '\t']).len();
            if blank > 0 {
                pos += blank;
                continue;
            }
            if rest.starts_with("\\\n") {
                pos += 2;
                continue;
            }
            let lexed = lex::word_at(self.src, pos);
            let text = self.src[pos..lexed.end.min(end)].to_string();
            self.sink.effects(&text, lexed.effects, inner);
            if lexed.end == pos || lexed.end > end {
                self.indeterminate(node, SPLIT_DIFFERENTLY);
                return;
            }
            words.push(lexed.word);
            pos = lexed.end;
        }
        commands::simple(words, inner, self.sink);
    }

    /// `[[ … ]]` and `[ … ]`: expansions inside are judged; arithmetic comparisons and
    /// `-v` evaluate array subscripts, which can run commands.
    fn test(&mut self, node: Node<'_>, env: Env) {
        self.effects_of(node, env.deeper());
        let text = self.text(node).to_string();
        if commands::test_evaluates_code(&text) {
            self.sink.indeterminate(&text, lex::ARITHMETIC_SUBSCRIPT);
        }
        let words = vec![Word::literal("[["), Word::unknown(text.clone(), false)];
        self.sink.parts.push(Part::Command {
            words,
            text,
            restriction: env.assigns.then_some(Restriction::Assignment),
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
                Some("value") => self.effects_of(child, env),
                _ => self.node(child, env),
            }
        }
    }

    fn redirect(&mut self, node: Node<'_>, env: Env) {
        match node.kind() {
            "file_redirect" => self.file_redirect(node, env),
            "heredoc_redirect" => self.heredoc(node, env),
            "herestring_redirect" => {
                for child in named_children(node) {
                    self.word(child, env);
                }
            }
            _ => self.node(node, env),
        }
    }

    /// A here-document: its body is judged like a double-quoted string unless the
    /// delimiter is quoted. tree-sitter-bash does not always find the body where bash
    /// does (a delimiter partly quoted, `<<-`, several on one line): unless its delimiter
    /// and end line are exactly bash's, the command is indeterminate.
    fn heredoc(&mut self, node: Node<'_>, env: Env) {
        let mut strip_tabs = false;
        let mut start = None;
        let mut body = None;
        let mut end = None;
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            match child.kind() {
                "<<-" => strip_tabs = true,
                "<<" => {}
                "heredoc_start" => start = Some(child),
                "heredoc_body" => body = Some(child),
                "heredoc_end" => end = Some(child),
                kind if is_redirect(kind) => self.redirect(child, env),
                _ if child.is_named() => self.node(child, env),
                _ => {}
            }
        }
        let Some(start) = start else {
            return self.indeterminate(node, HEREDOC_MISREAD);
        };
        let lexed = lex::word_at(self.src, start.start_byte());
        let (delimiter, quoted) = lex::heredoc_delimiter(self.text(start));
        let src = self.src;
        let body_text = body.map_or("", |b| &src[b.byte_range()]);
        let line_of = |s: &str| -> String {
            if strip_tabs {
                s.trim_start_matches('\t').to_string()
            } else {
                s.to_string()
            }
        };
        let ends_early = body_text
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .any(|l| line_of(&l[..l.len() - 1]) == delimiter);
        let end_line_ok = end.is_some_and(|e| {
            let line_start = self.src[..e.start_byte()].rfind('\n').map_or(0, |n| n + 1);
            let after = self.src[e.end_byte()..].chars().next();
            line_of(&self.src[line_start..e.end_byte()]) == delimiter
                && after.is_none_or(|c| c == '\n')
        });
        if lexed.end != start.end_byte() || ends_early || !end_line_ok {
            self.indeterminate(node, HEREDOC_MISREAD);
        }
        if !quoted {
            let effects = lex::heredoc_effects(body_text);
            self.sink.effects(body_text, effects, env);
        }
    }

    fn file_redirect(&mut self, node: Node<'_>, env: Env) {
        let mut operator = "";
        let mut destinations = Vec::new();
        for (field, child) in all_fields(node) {
            if !child.is_named() {
                operator = child.kind();
            } else if field == Some("destination") {
                destinations.push(child);
            }
        }
        let writes = match operator {
            ">" | ">>" | "&>" | "&>>" | ">|" | "<>" => true,
            // `>&2` duplicates a descriptor; `>& file` writes the file.
            ">&" | "&>&" => destinations.iter().any(|d| d.kind() != "number"),
            _ => false,
        };
        let duplicates = matches!(operator, ">&" | "<&" | ">&-" | "<&-");
        let reads = matches!(operator, "<" | "<>");
        let text = self.text(node).to_string();
        for destination in destinations {
            let target = self.word(destination, env);
            if target.exact().is_some_and(is_network_path) {
                self.sink.indeterminate(&text, NETWORK);
            } else if writes {
                if let Some(part) = write_part(&target, &text) {
                    self.sink.parts.push(part);
                }
            } else if !duplicates && target.exact().is_none() {
                self.sink.indeterminate(&text, UNKNOWN_INPUT);
            }
            // The file read, for the secrets: as written, or from `$HOME`.
            let read = match target.known {
                true => Some(target.text.clone()),
                false => home_form(&target.text),
            };
            if let Some(path) = read.filter(|_| reads) {
                self.sink.parts.push(Part::Read {
                    paths: vec![path],
                    text: text.clone(),
                });
            }
        }
    }
}

/// Whether bash opens a socket for this redirection target.
fn is_network_path(path: &str) -> bool {
    let normalized = super::path::normalize_path(path);
    normalized.starts_with("/dev/tcp/") || normalized.starts_with("/dev/udp/")
}

fn named_children(node: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = node.walk();
    node.named_children(&mut cursor).collect()
}

/// Every child of `node` (named or not) with its field name.
fn all_fields<'t>(node: Node<'t>) -> Vec<(Option<&'static str>, Node<'t>)> {
    let mut out = Vec::with_capacity(node.child_count());
    let mut cursor = node.walk();
    if cursor.goto_first_child() {
        loop {
            out.push((cursor.field_name(), cursor.node()));
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
    out
}

/// The named children of `node` with their field names, read with one cursor (asking a
/// node for a child's field name walks its children again).
fn fields<'t>(node: Node<'t>) -> Vec<(Option<&'static str>, Node<'t>)> {
    let mut all = all_fields(node);
    all.retain(|(_, child)| child.is_named());
    all
}

fn is_redirect(kind: &str) -> bool {
    matches!(
        kind,
        "file_redirect" | "heredoc_redirect" | "herestring_redirect"
    )
}
