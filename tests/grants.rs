//! Remembered approvals (grants), against a real server and a real client: an ask
//! answered for the run answers the later calls its grant covers, never past a deny of
//! the profile, never in another run, and an answer whose grant would not fit is refused.

mod common;
mod grants_common;

use common::*;
use grants_common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use tonic::Code;

#[tokio::test]
async fn a_run_grant_answers_the_same_command_and_nothing_else() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    grant(
        &server,
        &mut worker,
        "c1",
        "npm run build",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;

    let again = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&again), pb::Decision::Allow);
    assert_eq!(
        again.reason,
        format!("allow by grant g1 (made by admin); the profile asked: {ASKED_BUILD}")
    );
    for (call_id, command) in [
        ("c3", "npm run build -- --watch"),
        ("c4", "npm run test"),
        ("c5", "npm run build && npm test"),
    ] {
        let other = bash(&mut worker, call_id, command).await;
        assert_eq!(decision(&other), pb::Decision::Ask, "{command}");
    }
    // The decision records which grant made it; the grant records who made it and what.
    let approved = events_of(&server, &run_id, "run.toolcall.approved").await;
    assert_eq!(approved.len(), 1);
    assert_eq!(approved[0].attributes["call_id"], "c2");
    assert_eq!(approved[0].attributes["grant"], "g1");
    let added = events_of(&server, &run_id, "run.grant.added").await;
    assert_eq!(added.len(), 1);
    assert_eq!(
        attributes(&added[0]),
        [
            ("by", "admin"),
            ("call_id", "c1"),
            ("command", "npm run build"),
            ("decision", "allow"),
            ("grant_id", "g1"),
            ("note", "pager"),
            ("tool", "Bash"),
        ]
    );
    let listed = grants(&server, &run_id).await;
    assert_eq!(listed.len(), 1);
    let g = &listed[0];
    assert_eq!(
        (g.grant_id.as_str(), g.run_id.as_str(), g.call_id.as_str()),
        ("g1", run_id.as_str(), "c1")
    );
    assert_eq!(
        (g.tool.as_str(), g.command.as_str()),
        ("Bash", "npm run build")
    );
    assert_eq!((g.command_prefix.as_str(), g.path_glob.as_str()), ("", ""));
    assert_eq!(g.decision, pb::Decision::Allow as i32);
    assert_eq!((g.granted_by.as_str(), g.note.as_str()), ("admin", "pager"));
    assert_eq!(g.granted_at, added[0].at);
    assert_eq!((g.revoked_by.as_str(), g.revoked_at), ("", None));

    // Never another run: the same command there is asked.
    let other_run = server.start_run("grants").await;
    let (mut other, _) = Worker::attach(&server, &other_run).await;
    let there = bash(&mut other, "c1", "npm run build").await;
    assert_eq!(decision(&there), pb::Decision::Ask);
    assert!(grants(&server, &other_run).await.is_empty());
}

#[tokio::test]
async fn a_grant_never_overrides_a_deny_of_the_profile() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    grant(
        &server,
        &mut worker,
        "c1",
        "npm run build",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;
    grant(
        &server,
        &mut worker,
        "c2",
        "npm ci",
        pb::Decision::Allow,
        Scope::Prefix("npm"),
    )
    .await;
    let denied = bash(&mut worker, "c3", "npm run build && rm -rf dist").await;
    assert_eq!(decision(&denied), pb::Decision::Deny);
    assert_eq!(
        denied.reason,
        "rules[0] (Bash deny) matches \"rm -rf dist\""
    );
    let denied = events_of(&server, &run_id, "run.toolcall.denied").await;
    assert_eq!(denied.len(), 1);
    assert!(!denied[0].attributes.contains_key("grant"));
    // What the judge cannot understand is never covered by a grant: still asked.
    let unknown = bash(&mut worker, "c4", "npm run build; $CLEANUP").await;
    assert_eq!(decision(&unknown), pb::Decision::Ask);
    assert_eq!(unknown.reason, ASKED_BUILD);
}

#[tokio::test]
async fn a_prefix_grant_covers_longer_commands_at_a_word_boundary_only() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let prefix = Scope::Prefix("npm run build");
    grant(
        &server,
        &mut worker,
        "c1",
        "npm run build",
        pb::Decision::Allow,
        prefix,
    )
    .await;
    for (call_id, command, expected) in [
        ("c2", "npm run build -- --watch", pb::Decision::Allow),
        ("c3", "npm run build", pb::Decision::Allow),
        // `git status` is allowed by the profile; the one asked part is covered.
        (
            "c4",
            "git status && npm run build --prod",
            pb::Decision::Allow,
        ),
        ("c5", "npm run buildx", pb::Decision::Ask),
        ("c6", "npm run", pb::Decision::Ask),
        // Every asked part must be covered: `npm test` is not.
        ("c7", "npm run build && npm test", pb::Decision::Ask),
        // A variable set for the command can change what it runs: never covered.
        (
            "c8",
            "NODE_OPTIONS=--require=x npm run build",
            pb::Decision::Ask,
        ),
        ("c9", "./npm run build", pb::Decision::Ask),
        ("c10", "echo $(npm run build) > out.txt", pb::Decision::Ask),
    ] {
        let got = bash(&mut worker, call_id, command).await;
        assert_eq!(decision(&got), expected, "{command}: {}", got.reason);
    }
    let approved = events_of(&server, &run_id, "run.toolcall.approved").await;
    let granted: Vec<(&str, &str)> = approved
        .iter()
        .map(|e| {
            (
                e.attributes["call_id"].as_str(),
                e.attributes["grant"].as_str(),
            )
        })
        .collect();
    assert_eq!(granted, [("c2", "g1"), ("c3", "g1"), ("c4", "g1")]);
    // A line longer than what is judged inline is matched on the blocking pool, alike.
    let long = format!("npm run build{}", " --flag".repeat(200));
    let got = bash(&mut worker, "c11", &long).await;
    assert_eq!(decision(&got), pb::Decision::Allow, "{}", got.reason);
    let long = format!("npm run build{} && npm test", " --flag".repeat(200));
    let got = bash(&mut worker, "c12", &long).await;
    assert_eq!(decision(&got), pb::Decision::Ask, "{}", got.reason);
    let listed = grants(&server, &run_id).await;
    assert_eq!(listed[0].command_prefix, "npm run build");
    assert_eq!(listed[0].command, "");
}

#[tokio::test]
async fn a_deny_grant_denies_what_it_covers_and_wins_over_an_allow_grant() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let publish = Scope::Prefix("npm publish");
    grant(
        &server,
        &mut worker,
        "c1",
        "npm publish",
        pb::Decision::Deny,
        publish,
    )
    .await;
    let npm = Scope::Prefix("npm");
    grant(
        &server,
        &mut worker,
        "c2",
        "npm ci",
        pb::Decision::Allow,
        npm,
    )
    .await;
    let denied = bash(&mut worker, "c3", "npm publish --tag next").await;
    assert_eq!(decision(&denied), pb::Decision::Deny);
    assert_eq!(
        denied.reason,
        "deny by grant g1 (made by admin); the profile asked: no rule matches \
         \"npm publish --tag next\"; mode default gives ask"
    );
    let allowed = bash(&mut worker, "c4", "npm install left-pad").await;
    assert_eq!(decision(&allowed), pb::Decision::Allow);
}

#[tokio::test]
async fn a_path_glob_grant_covers_the_files_it_matches() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = worker.call("e1", "Edit", "", "src/a.rs").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    // A glob that does not match the asked file is refused, and the ask still waits.
    let wrong = answer(
        &server,
        &run_id,
        "e1",
        pb::Decision::Allow,
        Scope::Glob("docs/**"),
    )
    .await
    .unwrap_err();
    assert_eq!(wrong.code(), Code::InvalidArgument);
    assert_eq!(
        wrong.message(),
        "path_glob: \"docs/**\" does not match the asked call's file \"src/a.rs\""
    );
    answer(
        &server,
        &run_id,
        "e1",
        pb::Decision::Allow,
        Scope::Glob("src/**"),
    )
    .await
    .unwrap();
    assert!(matches!(worker.recv().await, Out::ToolCallResponse(_)));
    // An absolute path inside the workspace is placed in it, as the profile does.
    for (call_id, tool, path, expected) in [
        ("e2", "Edit", "src/deep/b.rs", pb::Decision::Allow),
        ("e3", "Edit", "/work/repo/src/c.rs", pb::Decision::Allow),
        ("e4", "Edit", "docs/x.md", pb::Decision::Ask),
        ("e5", "Write", "src/d.rs", pb::Decision::Ask),
        ("e6", "Edit", "/etc/src/e.rs", pb::Decision::Ask),
    ] {
        let got = worker.call(call_id, tool, "", path).await;
        assert_eq!(decision(&got), expected, "{tool} {path}: {}", got.reason);
    }
    let listed = grants(&server, &run_id).await;
    assert_eq!(
        (listed[0].tool.as_str(), listed[0].path_glob.as_str()),
        ("Edit", "src/**")
    );
}

#[tokio::test]
async fn an_answer_whose_grant_does_not_fit_the_ask_is_invalid_argument() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = bash(&mut worker, "c1", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let refused = |scope| answer(&server, &run_id, "c1", pb::Decision::Allow, scope);
    for (scope, message) in [
        (
            Scope::Prefix("yarn"),
            "command_prefix: \"yarn\" is not a prefix of the asked command \"npm run build\"",
        ),
        (
            Scope::Prefix("npm run bui"),
            "command_prefix: \"npm run bui\" ends inside a word of the asked command \"npm run build\"",
        ),
        (
            Scope::Glob("src/**"),
            "path_glob: a call with a command is remembered by its command or a command prefix",
        ),
    ] {
        let status = refused(scope).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), message);
    }
    // A prefix with scope ONCE, or both a prefix and a glob: refused, not ignored.
    let mut runs = server.runs().await;
    for (scope, prefix, glob, message) in [
        (
            pb::AnswerScope::Once,
            "npm",
            "",
            "command_prefix: only with scope ANSWER_SCOPE_RUN",
        ),
        (
            pb::AnswerScope::Run,
            "npm",
            "src/**",
            "path_glob: give a command_prefix or a path_glob, not both",
        ),
    ] {
        let status = runs
            .resolve_ask(pb::ResolveAskRequest {
                run_id: run_id.clone(),
                call_id: "c1".into(),
                decision: pb::Decision::Allow as i32,
                scope: scope as i32,
                command_prefix: prefix.into(),
                path_glob: glob.into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(status.message(), message);
    }
    // Nothing changed: the ask waits, no grant was made.
    assert_eq!(server.pending_asks(&run_id).await.len(), 1);
    assert!(grants(&server, &run_id).await.is_empty());
    assert!(events_of(&server, &run_id, "run.toolcall.resolved")
        .await
        .is_empty());
    // Scope ONCE answers this call only, as before.
    answer(&server, &run_id, "c1", pb::Decision::Allow, Scope::Once)
        .await
        .unwrap();
    assert!(matches!(worker.recv().await, Out::ToolCallResponse(_)));
    let again = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&again), pb::Decision::Ask);
}
