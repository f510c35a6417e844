//! Remembers the parts of recently judged shell command lines.
//!
//! Agents run the same lines again and again (the build, the tests, `git status` between
//! edits), and splitting a compound line costs a tree-sitter parse and a walk: ~20 µs for
//! five parts, against well under 1 µs to judge the parts. The split depends on the text
//! alone — not on the profile, the path or the workspace — so a line's parts can be reused
//! for any call whose command is the same text, whatever profile judges them.
//!
//! Each thread keeps its own memo (as it keeps its own parser): no lock on the decision
//! path. Memory is bounded: lines longer than [`MAX_KEY_LEN`] are not remembered, and a
//! memo that reaches [`CAPACITY`] lines starts over, which costs one parse per line
//! afterwards and needs no bookkeeping per hit.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::shell::{analyse, Part};

/// Lines one thread remembers before it starts over.
pub(crate) const CAPACITY: usize = 1024;
/// Longer lines are split every time: they are rarely repeated, and they would make the
/// memo's size depend on what workers send.
pub(crate) const MAX_KEY_LEN: usize = 1024;

thread_local! {
    static MEMO: RefCell<HashMap<Box<str>, Arc<[Part]>>> = RefCell::new(HashMap::new());
}

/// The parts of `command`, from this thread's memo when the same text was split before.
pub(crate) fn parts(command: &str) -> Arc<[Part]> {
    if command.len() > MAX_KEY_LEN {
        return analyse(command).into();
    }
    let remembered = MEMO.with(|memo| memo.try_borrow().ok()?.get(command).cloned());
    if let Some(parts) = remembered {
        return parts;
    }
    let parts: Arc<[Part]> = analyse(command).into();
    MEMO.with(|memo| {
        if let Ok(mut memo) = memo.try_borrow_mut() {
            if memo.len() >= CAPACITY {
                memo.clear();
            }
            memo.insert(command.into(), Arc::clone(&parts));
        }
    });
    parts
}

/// How many lines this thread remembers (for tests of the bound).
#[cfg(test)]
pub(crate) fn remembered() -> usize {
    MEMO.with(|memo| memo.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_repeated_line_is_split_once_and_shared() {
        let line = "cd src && grep -rn TODO . | sort > todo.txt";
        let first = parts(line);
        let second = parts(line);
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(&*second, analyse(line).as_slice());
    }

    #[test]
    fn the_memo_stays_within_its_bound() {
        for i in 0..CAPACITY * 3 {
            let line = format!("echo {i} && ls");
            assert_eq!(&*parts(&line), analyse(&line).as_slice());
            assert!(remembered() <= CAPACITY);
        }
        let long = format!("echo {}", "x".repeat(MAX_KEY_LEN));
        let before = remembered();
        assert_eq!(&*parts(&long), analyse(&long).as_slice());
        assert!(remembered() <= before, "a long line is not remembered");
    }

    proptest! {
        /// Whatever the line, a remembered split is the split: first and second asks both
        /// equal a fresh `analyse`.
        #[test]
        fn remembered_parts_equal_a_fresh_split(line in "[ -~]{0,60}") {
            let fresh = analyse(&line);
            prop_assert_eq!(&*parts(&line), fresh.as_slice());
            prop_assert_eq!(&*parts(&line), fresh.as_slice());
        }
    }
}
