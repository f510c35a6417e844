//! Policy versions and reload, end to end on a real server: every decision names the
//! profile version that made it, a run is judged by the version it started with (after a
//! reload and after a restart, even when its file changed or went away), a reload gives
//! new runs the new rules, and a bad file on reload changes nothing. The same through a
//! `runplane serve` process (SIGHUP, `runplane policy reload`) is in
//! `policy_reload_process.rs`.

mod common;

use common::*;
use runplane::grpc::pb;
use runplane::grpc::pb::policy_service_client::PolicyServiceClient;
use tonic::Code;

async fn team_server() -> TestServer {
    TestServer::with(Options {
        policy: Some(team_profile("curl")),
        ..Options::default()
    })
    .await
}

fn policy_file(server: &TestServer) -> std::path::PathBuf {
    server.dir.path().join("policies").join("test.toml")
}

async fn policies(server: &TestServer) -> PolicyServiceClient<runplane::cli::connect::AuthChannel> {
    PolicyServiceClient::new(server.channel().await)
}

async fn served_hash(server: &TestServer) -> String {
    policies(server)
        .await
        .get_profile(pb::GetProfileRequest {
            name: "team".into(),
            hash: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .hash
}

/// The value of an attribute of the first event of that type.
async fn attribute(server: &TestServer, run_id: &str, kind: &str, key: &str) -> String {
    let events = server.events(run_id).await;
    let event = events
        .iter()
        .find(|e| e.r#type == kind)
        .unwrap_or_else(|| panic!("no {kind} in {events:?}"));
    event.attributes.get(key).cloned().unwrap_or_default()
}

/// `(profile, profile_hash)` of every decision in a run's log, in order.
async fn decided_by(server: &TestServer, run_id: &str) -> Vec<(String, String)> {
    server
        .events(run_id)
        .await
        .into_iter()
        .filter(|e| e.r#type.starts_with("run.toolcall.") && e.r#type != "run.toolcall.result")
        .map(|e| {
            (
                e.attributes["profile"].clone(),
                e.attributes["profile_hash"].clone(),
            )
        })
        .collect()
}

async fn bash(worker: &mut Worker, call_id: &str, command: &str) -> pb::Decision {
    decision(&worker.call(call_id, "Bash", command, "").await)
}

#[tokio::test]
async fn each_decision_records_the_profile_and_its_version() {
    let server = team_server().await;
    let hash = version_of(&team_profile("curl"));
    assert_eq!(hash.len(), 64);
    assert_eq!(served_hash(&server).await, hash);
    let listed = policies(&server)
        .await
        .list_profiles(pb::ListProfilesRequest {})
        .await
        .unwrap()
        .into_inner()
        .profiles;
    assert_eq!(listed.len(), 5);
    assert!(listed.iter().all(|p| p.hash.len() == 64), "{listed:?}");
    assert_eq!(
        listed
            .iter()
            .find(|p| p.name == "team")
            .map(|p| p.hash.as_str()),
        Some(hash.as_str())
    );

    let run_id = server.start_run("team").await;
    assert_eq!(
        attribute(&server, &run_id, "run.created", "policy_hash").await,
        hash
    );
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(
        bash(&mut worker, "c1", "curl example.com").await,
        pb::Decision::Deny
    );
    assert_eq!(bash(&mut worker, "c2", "ls").await, pb::Decision::Allow);
    assert_eq!(
        decided_by(&server, &run_id).await,
        vec![("team".to_string(), hash.clone()); 2]
    );
}

#[tokio::test]
async fn a_reload_gives_new_runs_the_new_version_and_running_runs_keep_theirs() {
    let server = team_server().await;
    let (old, new) = (
        version_of(&team_profile("curl")),
        version_of(&team_profile("ls")),
    );
    let running = server.start_run("team").await;
    let (mut old_worker, _) = Worker::attach(&server, &running).await;
    assert_eq!(bash(&mut old_worker, "a1", "ls").await, pb::Decision::Allow);

    // Reformatting alone is no new version.
    std::fs::write(
        policy_file(&server),
        format!(
            "# reformatted\n{}",
            team_profile("curl").replace(" = ", "=")
        ),
    )
    .unwrap();
    let unchanged = policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(unchanged.changes, vec![]);

    std::fs::write(policy_file(&server), team_profile("ls")).unwrap();
    let reloaded = policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        reloaded.changes,
        vec![pb::ProfileVersionChange {
            name: "team".into(),
            previous_hash: old.clone(),
            hash: new.clone(),
        }]
    );
    assert_eq!(served_hash(&server).await, new);

    let started = server.start_run("team").await;
    assert_eq!(
        attribute(&server, &started, "run.created", "policy_hash").await,
        new
    );
    let (mut new_worker, _) = Worker::attach(&server, &started).await;
    assert_eq!(bash(&mut new_worker, "b1", "ls").await, pb::Decision::Deny);
    assert_eq!(
        bash(&mut new_worker, "b2", "curl x").await,
        pb::Decision::Allow
    );
    // The running run still has the rules it started with.
    assert_eq!(bash(&mut old_worker, "a2", "ls").await, pb::Decision::Allow);
    assert_eq!(
        bash(&mut old_worker, "a3", "curl x").await,
        pb::Decision::Deny
    );

    let by = |hash: &str, n| vec![("team".to_string(), hash.to_string()); n];
    assert_eq!(decided_by(&server, &running).await, by(&old, 3));
    assert_eq!(decided_by(&server, &started).await, by(&new, 2));
}

#[tokio::test]
async fn a_bad_file_on_reload_leaves_everything_as_it_was() {
    let server = team_server().await;
    let old = version_of(&team_profile("curl"));
    // A good change beside a bad file: neither is taken.
    std::fs::write(policy_file(&server), team_profile("ls")).unwrap();
    let broken = server.dir.path().join("policies").join("broken.toml");
    std::fs::write(&broken, "mode = [\n").unwrap();
    let refused = policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(
        refused
            .message()
            .starts_with(&format!("{}: ", broken.display())),
        "{}",
        refused.message()
    );
    assert!(
        refused.message().contains("line 1"),
        "{}",
        refused.message()
    );
    assert_eq!(served_hash(&server).await, old);

    let run_id = server.start_run("team").await;
    assert_eq!(
        attribute(&server, &run_id, "run.created", "policy_hash").await,
        old
    );
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c1", "ls").await, pb::Decision::Allow);
    assert_eq!(bash(&mut worker, "c2", "curl x").await, pb::Decision::Deny);
}

#[tokio::test]
async fn only_an_admin_may_reload() {
    let server = team_server().await;
    for (name, role) in [("v", pb::Role::Viewer), ("o", pb::Role::Operator)] {
        let token = server.create_token(name, role, &[]).await;
        let refused = PolicyServiceClient::new(server.channel_as(Some(&token)).await)
            .reload(pb::ReloadRequest {})
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Code::PermissionDenied, "{role:?}");
    }
    let token = server.create_token("a", pb::Role::Admin, &[]).await;
    let reloaded = PolicyServiceClient::new(server.channel_as(Some(&token)).await)
        .reload(pb::ReloadRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reloaded.changes, vec![]);
}

#[tokio::test]
async fn a_restored_run_is_judged_by_its_pinned_version_after_its_file_changed_or_went() {
    let mut server = team_server().await;
    let pinned = version_of(&team_profile("curl"));
    let run_id = server.start_run("team").await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c1", "curl x").await, pb::Decision::Deny);
    drop(worker);

    // Changed while the server was down: the restored run keeps its version, a new run
    // gets the file's.
    server.stop().await;
    std::fs::write(policy_file(&server), team_profile("ls")).unwrap();
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c2", "ls").await, pb::Decision::Allow);
    assert_eq!(bash(&mut worker, "c3", "curl y").await, pb::Decision::Deny);
    let fresh = server.start_run("team").await;
    let (mut fresh_worker, _) = Worker::attach(&server, &fresh).await;
    assert_eq!(
        bash(&mut fresh_worker, "f1", "ls").await,
        pb::Decision::Deny
    );
    drop((worker, fresh_worker));

    // Gone altogether: the version comes from the store.
    server.stop().await;
    std::fs::remove_file(policy_file(&server)).unwrap();
    server.restart().await;
    let (mut worker, _) = Worker::attach(&server, &run_id).await;
    assert_eq!(bash(&mut worker, "c4", "ls").await, pb::Decision::Allow);
    assert_eq!(bash(&mut worker, "c5", "curl z").await, pb::Decision::Deny);
    assert_eq!(
        decided_by(&server, &run_id).await,
        vec![("team".to_string(), pinned); 5]
    );
}

#[tokio::test]
async fn a_run_whose_pinned_version_is_not_stored_fails_closed() {
    if std::env::var("RUNPLANE_TEST_STORE").as_deref() == Ok("postgres") {
        // The version is removed from the SQLite file by hand below.
        return;
    }
    let mut server = team_server().await;
    let pinned = version_of(&team_profile("curl"));
    let run_id = server.start_run("team").await;
    server.stop().await;
    let database = server.dir.path().join("data").join("runplane.db");
    let conn = rusqlite::Connection::open(&database).unwrap();
    let removed = conn
        .execute("DELETE FROM policy_versions WHERE hash = ?1", [&pinned])
        .unwrap();
    assert_eq!(removed, 1);
    drop(conn);
    // The file changed too, so the loaded profile is not the pinned version either.
    std::fs::write(policy_file(&server), team_profile("ls")).unwrap();
    server.restart().await;
    let run = server.get_run(&run_id).await;
    assert_eq!(status(&run), pb::RunStatus::Failed);
    assert_eq!(
        run.error,
        format!("policy profile \"team\": version {pinned} is not stored")
    );
}

#[tokio::test]
async fn a_version_no_longer_loaded_is_shown_by_its_hash() {
    let server = team_server().await;
    let (old, new) = (
        version_of(&team_profile("curl")),
        version_of(&team_profile("ls")),
    );
    let get = async |name: &str, hash: &str| {
        policies(&server)
            .await
            .get_profile(pb::GetProfileRequest {
                name: name.into(),
                hash: hash.into(),
            })
            .await
    };
    // Not stored yet (no run started under it) and loaded: found all the same.
    assert_eq!(get("", &old).await.unwrap().into_inner().hash, old);
    server.start_run("team").await;
    std::fs::write(policy_file(&server), team_profile("ls")).unwrap();
    policies(&server)
        .await
        .reload(pb::ReloadRequest {})
        .await
        .unwrap();

    let shown = get("team", &old).await.unwrap().into_inner();
    assert_eq!(shown.hash, old);
    assert_eq!(shown.rules.len(), 1);
    assert_eq!(shown.rules[0].command_allow, ["curl"]);
    assert_eq!(get("", &new).await.unwrap().into_inner().hash, new);
    assert_eq!(get("team", "").await.unwrap().into_inner().hash, new);
    for (name, hash) in [("other", old.as_str()), ("", "0123")] {
        let err = get(name, hash).await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound, "{name} {hash}");
        assert_eq!(err.message(), format!("version {hash:?} not found"));
    }
}
