use runplane::domain::{StallTracker, DEFAULT_STALL_THRESHOLD};

/// Feeds `n` non-progress steps (Read never counts as progress).
fn idle(tracker: &mut StallTracker, n: usize) {
    for i in 0..n {
        tracker.record_step("Read", true, &format!("read {i}"));
    }
}

#[test]
fn threshold_triggers_exactly_on_the_nth_non_progress_step() {
    let mut tracker = StallTracker::new(3);
    assert!(!tracker.record_step("Read", true, "a"));
    assert!(!tracker.record_step("Read", true, "b"));
    assert!(!tracker.is_stalled());
    assert!(tracker.record_step("Read", true, "c"), "third step stalls");
    assert!(tracker.is_stalled());
    assert_eq!(tracker.consecutive(), 3);
}

#[test]
fn progress_resets_the_counter() {
    let mut tracker = StallTracker::new(3);
    idle(&mut tracker, 2);
    assert_eq!(tracker.consecutive(), 2);
    assert!(!tracker.record_step("Edit", true, "changed file"));
    assert_eq!(tracker.consecutive(), 0);
    idle(&mut tracker, 2);
    assert!(
        !tracker.is_stalled(),
        "counting starts again after progress"
    );
    assert!(tracker.record_step("Grep", true, "x"));
}

#[test]
fn each_progress_tool_is_progress() {
    // Any case: the policy judges `bash` as Bash, so its steps count as Bash's do.
    for tool in ["Edit", "Write", "Bash", "bash", "EDIT", "write"] {
        let mut tracker = StallTracker::new(2);
        tracker.record_step("Read", true, "r");
        tracker.record_step(tool, true, "fresh output");
        assert_eq!(tracker.consecutive(), 0, "{tool} is a progress tool");
    }
}

#[test]
fn read_grep_glob_are_not_progress() {
    for tool in ["Read", "Grep", "Glob"] {
        let mut tracker = StallTracker::new(5);
        tracker.record_step(tool, true, "fresh output");
        assert_eq!(tracker.consecutive(), 1, "{tool} is not a progress tool");
    }
}

#[test]
fn a_failed_edit_is_not_progress() {
    let mut tracker = StallTracker::new(5);
    tracker.record_step("Edit", false, "new output");
    assert_eq!(tracker.consecutive(), 1);
}

#[test]
fn the_same_output_twice_from_edit_is_not_progress() {
    let mut tracker = StallTracker::new(5);
    tracker.record_step("Edit", true, "same");
    assert_eq!(tracker.consecutive(), 0);
    tracker.record_step("Edit", true, "same");
    assert_eq!(tracker.consecutive(), 1);
}

#[test]
fn non_progress_steps_are_pushed_into_the_ring_too() {
    let mut tracker = StallTracker::new(5);
    tracker.record_step("Read", true, "file body");
    tracker.record_step("Bash", true, "file body");
    assert_eq!(
        tracker.consecutive(),
        2,
        "output seen from a Read is not new"
    );
}

#[test]
fn ring_holds_exactly_the_last_three_outputs() {
    let mut tracker = StallTracker::new(10);
    for output in ["a", "b", "c"] {
        tracker.record_step("Edit", true, output);
    }
    assert_eq!(tracker.consecutive(), 0);
    tracker.record_step("Edit", true, "a");
    assert_eq!(tracker.consecutive(), 1, "a is one of the last three");

    let mut tracker = StallTracker::new(10);
    for output in ["a", "b", "c", "d"] {
        tracker.record_step("Edit", true, output);
    }
    tracker.record_step("Edit", true, "a");
    assert_eq!(
        tracker.consecutive(),
        0,
        "a 4th output pushed a out; a is new again"
    );
}

#[test]
fn reset_clears_counter_and_ring() {
    let mut tracker = StallTracker::new(2);
    tracker.record_step("Edit", true, "x");
    idle(&mut tracker, 2);
    assert!(tracker.is_stalled());
    tracker.reset();
    assert!(!tracker.is_stalled());
    assert_eq!(tracker.consecutive(), 0);
    tracker.record_step("Edit", true, "x");
    assert_eq!(tracker.consecutive(), 0, "x was forgotten by reset");
}

#[test]
fn threshold_zero_and_negative_mean_five() {
    for threshold in [0, -1] {
        let mut tracker = StallTracker::new(threshold);
        assert_eq!(tracker.threshold(), DEFAULT_STALL_THRESHOLD);
        idle(&mut tracker, 4);
        assert!(
            !tracker.is_stalled(),
            "threshold {threshold}: 4 steps do not stall"
        );
        idle(&mut tracker, 1);
        assert!(
            tracker.is_stalled(),
            "threshold {threshold}: the 5th step stalls"
        );
    }
}

#[test]
fn state_survives_a_serde_round_trip() {
    let mut tracker = StallTracker::new(4);
    tracker.record_step("Edit", true, "a");
    tracker.record_step("Read", true, "b");
    let json = serde_json::to_string(&tracker).unwrap();
    let mut restored: StallTracker = serde_json::from_str(&json).unwrap();
    assert_eq!(restored, tracker);
    restored.record_step("Edit", true, "a");
    assert_eq!(restored.consecutive(), 2, "ring restored: a is not new");
}
