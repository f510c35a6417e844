//! The typed event log: every kind the server records goes to its stored form (a kind name
//! and text attributes) and back unchanged, and a stored event that cannot be read back is
//! an error naming what is wrong — never a guess, never a silent deny.

use chrono::{TimeZone, Utc};
use runplane::domain::event::{
    CallResult, Created, Decided, Delivery, Ended, EventError, GateReport, Resolved,
};
use runplane::domain::{Decision, DeliverMode, EventKind, Grant, GrantMatch, GrantRevoked, Status};
use runplane::domain::{EgressRefusal, KernelDenial, SandboxReport};

/// Which variant a kind is; a new variant fails to compile here until it has a sample.
fn variant(kind: &EventKind) -> usize {
    match kind {
        EventKind::Created(_) => 0,
        EventKind::Started { .. } => 1,
        EventKind::WorkerAttached { .. } => 2,
        EventKind::WorkerDetached { .. } => 3,
        EventKind::Decided(_) => 4,
        EventKind::Resolved(_) => 5,
        EventKind::Result(_) => 6,
        EventKind::StallDetected { .. } => 7,
        EventKind::GateStarted { .. } => 8,
        EventKind::GatePassed(_) => 9,
        EventKind::GateFailed(_) => 10,
        EventKind::DeliveryRequested { .. } => 11,
        EventKind::DeliverySucceeded(_) => 12,
        EventKind::DeliveryFailed(_) => 13,
        EventKind::Ended(_) => 14,
        EventKind::GrantAdded(_) => 15,
        EventKind::GrantRevoked(_) => 16,
        EventKind::Sandbox(_) => 17,
    }
}
const VARIANTS: usize = 18;

fn grant(matcher: GrantMatch, decision: Decision) -> Grant {
    Grant {
        id: "g2".into(),
        call_id: "c-1".into(),
        tool: "Bash".into(),
        matcher,
        decision,
        by: "alice".into(),
        note: "on call".into(),
    }
}

fn decided(decision: Decision) -> Decided {
    Decided {
        call_id: "c-1".into(),
        tool: "Bash".into(),
        command: "git status && rm -rf /".into(),
        path: "src/a.rs".into(),
        resolved_path: "/work/repo/src/a.rs".into(),
        paths: vec!["src/b.rs".into(), ".env".into()],
        url: "https://docs.rs/".into(),
        input: r#"{"command":"git status","description":"ünïcode \"q\""}"#.into(),
        decision,
        reason: "rules[2] (Bash deny) matches".into(),
        rule_index: Some(0),
        part: "rm -rf /".into(),
        step_count: 7,
        deadline: Some(Utc.timestamp_opt(1_796_430_331, 123_456_000).unwrap()),
        profile: "ci".into(),
        profile_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
        grant: String::new(),
    }
}

/// Samples of every kind, with every field set and with the optional ones left out.
fn samples() -> Vec<EventKind> {
    let gate = GateReport {
        tests_passed: Some(true),
        lint_passed: Some(false),
        error: "lint crashed".into(),
    };
    let delivery = Delivery {
        patch_path: "/tmp/p.diff".into(),
        commit_hash: "abc".into(),
        branch_name: "runplane/r".into(),
        pr_url: "https://x/pr/1".into(),
        error: "push refused".into(),
    };
    let mut kinds = vec![
        EventKind::Created(Created {
            policy_profile: "ci".into(),
            policy_hash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into(),
            task_id: "t".into(),
            agent_id: "a".into(),
            project_id: "p".into(),
            by: "alice".into(),
        }),
        EventKind::Created(Created::default()),
        EventKind::Started {
            worker_id: "w".into(),
        },
        EventKind::WorkerAttached {
            worker_id: "w".into(),
            resumed: true,
            workspace_root: "/work".into(),
        },
        EventKind::WorkerAttached {
            worker_id: "w".into(),
            resumed: false,
            workspace_root: String::new(),
        },
        EventKind::WorkerDetached {
            worker_id: "w".into(),
            reason: "stream closed".into(),
        },
        EventKind::Decided(Decided {
            resolved_path: String::new(),
            paths: Vec::new(),
            rule_index: None,
            part: String::new(),
            deadline: None,
            profile: String::new(),
            profile_hash: String::new(),
            grant: String::new(),
            ..decided(Decision::Allow)
        }),
        EventKind::Resolved(Resolved {
            call_id: "c-1".into(),
            decision: Decision::Allow,
            reason: "ok".into(),
            by: "bob".into(),
            note: "looked".into(),
        }),
        EventKind::Result(CallResult {
            call_id: "c-1".into(),
            tool: "Bash".into(),
            success: true,
            error: "e".into(),
            cost_usd: 0.1 + 0.2,
            total_cost_usd: 1e-9,
            output_bytes: 65_536,
            duration_ms: Some(1234),
        }),
        EventKind::Result(CallResult {
            call_id: "c-2".into(),
            ..CallResult::default()
        }),
        EventKind::StallDetected { threshold: 5 },
        EventKind::GateStarted {
            require_tests_pass: true,
            require_lint_pass: false,
        },
        EventKind::GatePassed(GateReport::default()),
        EventKind::GateFailed(gate),
        EventKind::DeliveryRequested {
            mode: DeliverMode::Branch,
        },
        EventKind::DeliverySucceeded(Delivery::default()),
        EventKind::DeliveryFailed(delivery),
    ];
    for decision in [Decision::Allow, Decision::Deny, Decision::Ask] {
        kinds.push(EventKind::Decided(decided(decision)));
    }
    kinds.push(EventKind::Decided(Decided {
        grant: "g1,g3".into(),
        ..decided(Decision::Allow)
    }));
    kinds.extend([
        EventKind::GrantAdded(grant(
            GrantMatch::Command("npm run build && npm test".into()),
            Decision::Allow,
        )),
        EventKind::GrantAdded(grant(
            GrantMatch::Prefix("npm run build".into()),
            Decision::Deny,
        )),
        EventKind::GrantAdded(Grant {
            note: String::new(),
            ..grant(GrantMatch::PathGlob("src/**/*.rs".into()), Decision::Allow)
        }),
        EventKind::GrantRevoked(GrantRevoked {
            grant_id: "g2".into(),
            reason: "too wide".into(),
            by: "bob".into(),
        }),
        EventKind::Sandbox(SandboxReport::Enforced {
            plan_hash: "ab12".into(),
            layers: vec![
                "bubblewrap".into(),
                "landlock-abi-6".into(),
                "seccomp".into(),
            ],
        }),
        EventKind::Sandbox(SandboxReport::Off {
            reason: "runplane work --sandbox off".into(),
        }),
        EventKind::Sandbox(SandboxReport::EgressRefused(EgressRefusal {
            host: "evil.example".into(),
            port: 443,
            method: "CONNECT".into(),
            call_id: "c-1".into(),
            reason: "not admitted".into(),
        })),
        EventKind::Sandbox(SandboxReport::Denied(KernelDenial {
            call_id: "c-2".into(),
            errno: "EROFS".into(),
            line: "sh: 1: cannot create /etc/passwd: Read-only file system".into(),
        })),
    ]);
    for status in [
        Status::Completed,
        Status::Failed,
        Status::Cancelled,
        Status::Timeout,
    ] {
        kinds.push(EventKind::Ended(Ended {
            status,
            reason: "why".into(),
            by: "carol".into(),
        }));
    }
    kinds
}

fn stored(kind: &EventKind) -> (String, Vec<(String, String)>) {
    let attributes = kind
        .attributes()
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    (kind.name().to_string(), attributes)
}

fn parse(name: &str, attributes: &[(String, String)]) -> Result<EventKind, EventError> {
    EventKind::parse(
        name,
        attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
}

#[test]
fn every_kind_round_trips_through_its_stored_form() {
    let samples = samples();
    let mut seen = [false; VARIANTS];
    for kind in &samples {
        seen[variant(kind)] = true;
        let (name, attributes) = stored(kind);
        assert!(
            attributes.iter().all(|(_, v)| !v.is_empty()),
            "{name}: empty values are left out"
        );
        let back = parse(&name, &attributes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&back, kind);
        assert_eq!(stored(&back), (name, attributes), "stored form is stable");
    }
    assert!(seen.iter().all(|s| *s), "a sample of every kind: {seen:?}");
}

#[test]
fn the_stored_names_are_the_ones_the_log_has_always_had() {
    let names: Vec<&str> = samples().iter().map(EventKind::name).collect();
    for name in [
        "run.created",
        "run.started",
        "run.worker.attached",
        "run.worker.detached",
        "run.toolcall.approved",
        "run.toolcall.denied",
        "run.toolcall.asked",
        "run.toolcall.resolved",
        "run.toolcall.result",
        "run.grant.added",
        "run.grant.revoked",
        "run.stall_detected",
        "run.qualitygate.started",
        "run.qualitygate.passed",
        "run.qualitygate.failed",
        "run.delivery.requested",
        "run.delivery.succeeded",
        "run.delivery.failed",
        "run.completed",
        "run.failed",
        "run.cancelled",
        "run.timeout",
    ] {
        assert!(names.contains(&name), "{name}");
    }
    let (_, attributes) = stored(&EventKind::Decided(decided(Decision::Ask)));
    let keys: Vec<&str> = attributes.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "call_id",
            "command",
            "deadline",
            "decision",
            "input",
            "part",
            "path",
            "paths",
            "profile",
            "profile_hash",
            "reason",
            "resolved_path",
            "rule_index",
            "step_count",
            "tool",
            "url"
        ]
    );
    let value = |key: &str| attributes.iter().find(|(k, _)| k == key).unwrap().1.clone();
    assert_eq!(value("paths"), r#"["src/b.rs",".env"]"#);
    assert_eq!(value("deadline"), "2026-12-05T00:25:31.123456+00:00");
    assert_eq!(value("profile"), "ci");
    assert_eq!(
        value("profile_hash"),
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    );
}

#[test]
fn a_decision_recorded_before_versions_reads_with_no_profile_or_hash() {
    // The attributes a decision had before the profile and its hash were recorded.
    let old = [
        ("call_id", "c-1"),
        ("decision", "deny"),
        ("reason", "rules[0] matches"),
        ("rule_index", "0"),
        ("step_count", "3"),
        ("tool", "Bash"),
    ];
    let kind = EventKind::parse("run.toolcall.denied", old).expect("an old decision reads");
    let EventKind::Decided(decided) = kind else {
        panic!("not a decision: {kind:?}");
    };
    assert_eq!(decided.profile, "");
    assert_eq!(decided.profile_hash, "");
    assert_eq!(decided.decision, Decision::Deny);
    let created = EventKind::parse("run.created", [("policy_profile", "ci")]).expect("reads");
    assert_eq!(
        created,
        EventKind::Created(Created {
            policy_profile: "ci".into(),
            ..Created::default()
        })
    );
}

#[test]
fn an_event_that_cannot_be_read_back_is_an_error_not_a_guess() {
    let (name, good) = stored(&EventKind::Decided(decided(Decision::Allow)));
    let with = |key: &str, value: &str| -> Vec<(String, String)> {
        let mut attributes: Vec<(String, String)> =
            good.iter().filter(|(k, _)| k != key).cloned().collect();
        if !value.is_empty() {
            attributes.push((key.to_string(), value.to_string()));
        }
        attributes
    };
    for (kind, attributes, problem) in [
        (
            name.as_str(),
            with("decision", "maybe"),
            r#"attribute "decision" cannot be read: "maybe""#,
        ),
        (
            name.as_str(),
            with("decision", "deny"),
            "its decision attribute says deny",
        ),
        (
            name.as_str(),
            with("decision", ""),
            r#"attribute "decision" is missing"#,
        ),
        (
            name.as_str(),
            with("call_id", ""),
            r#"attribute "call_id" is missing"#,
        ),
        (
            name.as_str(),
            with("paths", "src/a.rs"),
            r#"attribute "paths" cannot be read"#,
        ),
        (
            name.as_str(),
            with("deadline", "tomorrow"),
            r#"attribute "deadline" cannot be read: "tomorrow""#,
        ),
        (
            name.as_str(),
            with("step_count", "-"),
            r#"attribute "step_count" cannot be read"#,
        ),
        (
            name.as_str(),
            with("approver", "mallory"),
            r#"unknown attribute "approver""#,
        ),
        ("run.toolcall.maybe", good.clone(), "unknown kind"),
        (
            "run.grant.added",
            grant_with(&[("prefix", "npm"), ("path_glob", "src/**")], "allow"),
            "exactly one of",
        ),
        (
            "run.grant.added",
            grant_with(&[], "allow"),
            "exactly one of",
        ),
        (
            "run.grant.added",
            grant_with(&[("prefix", "npm")], "ask"),
            "a grant allows or denies, never asks",
        ),
        (
            "run.grant.revoked",
            vec![("by".to_string(), "bob".to_string())],
            r#"attribute "grant_id" is missing"#,
        ),
        ("run.completed", with("zzz", "1"), r#"unknown attribute"#),
    ] {
        let err = parse(kind, &attributes).expect_err(problem);
        assert_eq!(err.kind, kind);
        assert!(err.problem.starts_with(problem), "{kind}: {}", err.problem);
    }
}

/// The stored attributes of a grant with `matchers` (name, value) and `decision`.
fn grant_with(matchers: &[(&str, &str)], decision: &str) -> Vec<(String, String)> {
    let mut attributes: Vec<(String, String)> = [
        ("grant_id", "g1"),
        ("call_id", "c-1"),
        ("tool", "Bash"),
        ("decision", decision),
    ]
    .iter()
    .chain(matchers)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    attributes.sort();
    attributes
}
