use runplane::domain::{Status, TransitionError};

use super::{at, new_run};
use Status::*;

const TERMINAL: [Status; 4] = [Completed, Failed, Cancelled, Timeout];

/// The transition table, spelled out move by move.
fn allowed(from: Status, to: Status) -> bool {
    match to {
        Running => matches!(from, Pending | Running),
        QualityGate => from == Running,
        Completed | Failed | Cancelled | Timeout => matches!(from, Pending | Running | QualityGate),
        Pending => false,
    }
}

#[test]
fn terminal_set_is_exactly_the_four() {
    let terminal: Vec<Status> = Status::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
    assert_eq!(terminal, TERMINAL.to_vec());
}

#[test]
fn each_allowed_move_is_allowed() {
    let expected = [
        (Pending, Running),
        (Running, Running),
        (Running, QualityGate),
        (Pending, Completed),
        (Pending, Failed),
        (Pending, Cancelled),
        (Pending, Timeout),
        (Running, Completed),
        (Running, Failed),
        (Running, Cancelled),
        (Running, Timeout),
        (QualityGate, Completed),
        (QualityGate, Failed),
        (QualityGate, Cancelled),
        (QualityGate, Timeout),
    ];
    for (from, to) in expected {
        assert!(from.can_transition(to), "{from} -> {to} must be allowed");
    }
    let count = Status::ALL
        .iter()
        .flat_map(|from| Status::ALL.iter().map(move |to| (*from, *to)))
        .filter(|(from, to)| from.can_transition(*to))
        .count();
    assert_eq!(count, expected.len(), "no other move is allowed");
}

#[test]
fn full_matrix_matches_the_table() {
    for from in Status::ALL {
        for to in Status::ALL {
            assert_eq!(from.can_transition(to), allowed(from, to), "{from} -> {to}");
        }
    }
}

#[test]
fn nothing_leaves_a_terminal_status() {
    for from in TERMINAL {
        for to in Status::ALL {
            assert!(!from.can_transition(to), "{from} -> {to} must be refused");
        }
    }
}

#[test]
fn nothing_returns_to_pending() {
    for from in Status::ALL {
        assert!(
            !from.can_transition(Pending),
            "{from} -> pending must be refused"
        );
    }
}

#[test]
fn quality_gate_only_from_running() {
    for from in Status::ALL {
        assert_eq!(from.can_transition(QualityGate), from == Running, "{from}");
    }
}

#[test]
fn transition_bumps_version_and_stamps_times() {
    let mut run = new_run();
    run.transition(Running, at(10)).unwrap();
    assert_eq!(run.status, Running);
    assert_eq!(run.version, 2);
    assert_eq!(
        run.started_at,
        at(10),
        "first attach restarts the wall clock"
    );
    assert_eq!(run.completed_at, None);
    run.transition(Running, at(20)).unwrap();
    assert_eq!(run.started_at, at(10), "re-attach keeps the wall clock");
    assert_eq!(run.version, 3);
    run.transition(Completed, at(30)).unwrap();
    assert_eq!(run.completed_at, Some(at(30)));
    assert_eq!(run.updated_at, at(30));
    assert_eq!(run.version, 4);
}

#[test]
fn refused_transition_changes_nothing() {
    let mut run = new_run();
    run.transition(Cancelled, at(5)).unwrap();
    let before = run.clone();
    assert_eq!(
        run.transition(Running, at(6)),
        Err(TransitionError {
            from: Cancelled,
            to: Running
        })
    );
    assert_eq!(run, before);
    assert_eq!(
        TransitionError {
            from: Cancelled,
            to: Running
        }
        .to_string(),
        "run cannot move from cancelled to running"
    );
}
