//! Remembered approvals (grants), against a real server and a real client: an ask
//! answered for the run answers the later calls its grant covers, never past a deny of
//! the profile, never in another run; revoking brings the asks back; grants live in the
//! log, so they survive a restart; only operators make or revoke them.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::coordinator_message::Message as Out;
use tonic::{Code, Status};

/// Bash: `rm` denied, `git status` allowed, everything else asked (mode default); every
/// other tool asked. Asks wait until answered.
const PROFILE: &str = r#"
name = "grants"
mode = "default"

[[rules]]
specifier = { tool = "Bash" }
decision = "deny"
command_allow = ["rm"]

[[rules]]
specifier = { tool = "Bash" }
decision = "allow"
command_allow = ["git status"]

[termination]
ask_timeout_seconds = 0
"#;

async fn server() -> TestServer {
    TestServer::with(Options {
        policy: Some(PROFILE.into()),
        ..Options::default()
    })
    .await
}

/// The grant an answer asks for: the scope and at most one of a prefix and a glob.
#[derive(Clone, Copy)]
enum Scope<'a> {
    Once,
    Run,
    Prefix(&'a str),
    Glob(&'a str),
}

/// An operator's answer to `call_id` as the admin, with `scope`.
async fn answer(
    server: &TestServer,
    run_id: &str,
    call_id: &str,
    decision: pb::Decision,
    scope: Scope<'_>,
) -> Result<pb::ToolCallResponse, Status> {
    answer_as(server.runs().await, run_id, call_id, decision, scope).await
}

async fn answer_as(
    mut runs: RunServiceClient<runplane::cli::connect::AuthChannel>,
    run_id: &str,
    call_id: &str,
    decision: pb::Decision,
    scope: Scope<'_>,
) -> Result<pb::ToolCallResponse, Status> {
    let (scope, command_prefix, path_glob) = match scope {
        Scope::Once => (pb::AnswerScope::Once, "", ""),
        Scope::Run => (pb::AnswerScope::Run, "", ""),
        Scope::Prefix(prefix) => (pb::AnswerScope::Run, prefix, ""),
        Scope::Glob(glob) => (pb::AnswerScope::Run, "", glob),
    };
    runs.resolve_ask(pb::ResolveAskRequest {
        run_id: run_id.into(),
        call_id: call_id.into(),
        decision: decision as i32,
        reason: String::new(),
        resolver: "pager".into(),
        scope: scope as i32,
        command_prefix: command_prefix.into(),
        path_glob: path_glob.into(),
    })
    .await
    .map(|r| r.into_inner())
}

/// Asks `command` (Bash), answers it for the run with `scope`, and checks the worker
/// received the answer.
async fn grant(
    server: &TestServer,
    worker: &mut Worker,
    call_id: &str,
    command: &str,
    decision: pb::Decision,
    scope: Scope<'_>,
) {
    let asked = worker.call(call_id, "Bash", command, "").await;
    assert_eq!(common::decision(&asked), pb::Decision::Ask, "{command}");
    answer(server, &worker.run_id, call_id, decision, scope)
        .await
        .unwrap();
    match worker.recv().await {
        Out::ToolCallResponse(response) => {
            assert_eq!(common::decision(&response), decision, "{command}")
        }
        other => panic!("expected the answer to {call_id}, got {other:?}"),
    }
}

/// The decision the worker gets for a Bash `command`.
async fn bash(worker: &mut Worker, call_id: &str, command: &str) -> pb::ToolCallResponse {
    worker.call(call_id, "Bash", command, "").await
}

async fn grants(server: &TestServer, run_id: &str) -> Vec<pb::Grant> {
    server
        .runs()
        .await
        .list_grants(pb::ListGrantsRequest {
            run_id: run_id.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .grants
}

/// The events of a type, with their attributes.
async fn events_of(server: &TestServer, run_id: &str, kind: &str) -> Vec<pb::RunEvent> {
    let events = server.events(run_id).await;
    events.into_iter().filter(|e| e.r#type == kind).collect()
}

fn attributes(event: &pb::RunEvent) -> Vec<(&str, &str)> {
    let mut pairs: Vec<(&str, &str)> = event
        .attributes
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    pairs.sort();
    pairs
}

const ASKED_BUILD: &str = "no rule matches \"npm run build\"; mode default gives ask";

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

#[tokio::test]
async fn revoking_a_grant_brings_the_asks_back() {
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
    let mut runs = server.runs().await;
    let revoked = runs
        .revoke_grant(pb::RevokeGrantRequest {
            run_id: run_id.clone(),
            grant_id: "g1".into(),
            reason: "done building".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (revoked.revoked_by.as_str(), revoked.revoke_reason.as_str()),
        ("admin", "done building")
    );
    let event = &events_of(&server, &run_id, "run.grant.revoked").await[0];
    assert_eq!(
        attributes(event),
        [
            ("by", "admin"),
            ("grant_id", "g1"),
            ("reason", "done building")
        ]
    );
    assert_eq!(revoked.revoked_at, event.at);
    let asked = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    // Listed still, as revoked.
    assert_eq!(grants(&server, &run_id).await, [revoked]);
    for (grant_id, code, message) in [
        (
            "g1",
            Code::FailedPrecondition,
            format!("grant g1 of run {run_id} is already revoked"),
        ),
        (
            "g9",
            Code::NotFound,
            format!("run {run_id} has no grant g9"),
        ),
    ] {
        let status = runs
            .revoke_grant(pb::RevokeGrantRequest {
                run_id: run_id.clone(),
                grant_id: grant_id.into(),
                reason: String::new(),
            })
            .await
            .unwrap_err();
        assert_eq!((status.code(), status.message()), (code, message.as_str()));
    }
}

#[tokio::test]
async fn grants_survive_a_restart() {
    let mut server = server().await;
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
    grant(
        &server,
        &mut worker,
        "c2",
        "make",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;
    server
        .runs()
        .await
        .revoke_grant(pb::RevokeGrantRequest {
            run_id: run_id.clone(),
            grant_id: "g2".into(),
            reason: String::new(),
        })
        .await
        .unwrap();
    let before = grants(&server, &run_id).await;
    drop(worker);
    server.restart().await;
    assert_eq!(grants(&server, &run_id).await, before);
    let (mut worker, attached) = Worker::attach(&server, &run_id).await;
    assert!(attached.resumed);
    let allowed = bash(&mut worker, "c3", "npm run build --prod").await;
    assert_eq!(
        decision(&allowed),
        pb::Decision::Allow,
        "{}",
        allowed.reason
    );
    let asked = bash(&mut worker, "c4", "make").await;
    assert_eq!(
        decision(&asked),
        pb::Decision::Ask,
        "the revoked grant stays revoked"
    );
    // Ids go on after the restart: a new grant is g3, never a reused id.
    answer(&server, &run_id, "c4", pb::Decision::Allow, Scope::Run)
        .await
        .unwrap();
    let ids: Vec<String> = grants(&server, &run_id)
        .await
        .into_iter()
        .map(|g| g.grant_id)
        .collect();
    assert_eq!(ids, ["g1", "g2", "g3"]);
}

#[tokio::test]
async fn a_viewer_cannot_grant_or_revoke_but_can_list() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    grant(
        &server,
        &mut worker,
        "c1",
        "make",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await;
    let asked = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let viewer = server.create_token("watcher", pb::Role::Viewer, &[]).await;
    let channel = server.channel_as(Some(&viewer)).await;
    let status = answer_as(
        RunServiceClient::new(channel.clone()),
        &run_id,
        "c2",
        pb::Decision::Allow,
        Scope::Run,
    )
    .await
    .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    let mut runs = RunServiceClient::new(channel);
    let status = runs
        .revoke_grant(pb::RevokeGrantRequest {
            run_id: run_id.clone(),
            grant_id: "g1".into(),
            reason: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::PermissionDenied);
    let listed = runs
        .list_grants(pb::ListGrantsRequest {
            run_id: run_id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .grants;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoked_by, "");
    assert_eq!(server.pending_asks(&run_id).await.len(), 1);
}

/// Runs the CLI against the server as the admin and returns its stdout; it must succeed.
async fn cli(server: &TestServer, args: &[&str]) -> String {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(args)
        .env("RUNPLANE_SERVER", format!("http://{}", server.addr))
        .env("RUNPLANE_TOKEN", &server.admin_token)
        .env("USER", "oncall")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test]
async fn the_cli_grants_lists_and_revokes() {
    let server = server().await;
    let run_id = server.start_run("grants").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    let asked = bash(&mut worker, "c1", "npm run build -- --watch").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
    let answered = cli(
        &server,
        &[
            "asks",
            "allow",
            &run_id,
            "c1",
            "--for-run",
            "--prefix",
            "npm run build",
        ],
    )
    .await;
    assert_eq!(
        answered,
        format!(
            "allow: call c1 of run {run_id} (allow by admin)\n\
             grant g1 of run {run_id}: allow Bash prefix \"npm run build\" (by admin, call c1)\n"
        )
    );
    assert!(matches!(worker.recv().await, Out::ToolCallResponse(_)));
    let allowed = bash(&mut worker, "c2", "npm run build").await;
    assert_eq!(decision(&allowed), pb::Decision::Allow);

    let listed = cli(&server, &["grants", "list", &run_id, "--json"]).await;
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let grant = &listed["grants"][0];
    assert_eq!(grant["grant_id"], "g1");
    assert_eq!(grant["kind"], "prefix");
    assert_eq!(grant["covers"], "npm run build");
    assert_eq!(grant["granted_by"], "admin");
    assert_eq!(grant["note"], "oncall");
    assert_eq!(grant["revoked_by"], serde_json::Value::Null);

    let revoked = cli(
        &server,
        &["grants", "revoke", &run_id, "g1", "--reason", "enough"],
    )
    .await;
    assert_eq!(
        revoked,
        format!(
            "grant g1 of run {run_id}: allow Bash prefix \"npm run build\" (by admin, call c1); \
             revoked by admin\n"
        )
    );
    let table = cli(&server, &["grants", "list", &run_id]).await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("GRANT  DECISION  TOOL  BY"), "{table}");
    assert!(
        lines[1].starts_with("g1     allow     Bash  admin"),
        "{table}"
    );
    assert!(
        lines[1].ends_with("revoked by admin  prefix  npm run build"),
        "{table}"
    );
    let asked = bash(&mut worker, "c3", "npm run build").await;
    assert_eq!(decision(&asked), pb::Decision::Ask);
}
