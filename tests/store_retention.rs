//! Retention in the store contract: `purge_finished_before` on `SqliteStore`, `MemoryStore`
//! and `PostgresStore` alike (the `contract!` cases of `store_contract.rs`, kept apart to
//! keep that file to one concern).

#[macro_use]
mod store_common;

use std::sync::Arc;

use runplane::domain::event::Decided;
use runplane::domain::{Credential, CredentialKind, Decision, Role, Scope};
use runplane::store::{RunQuery, RunStore};
use store_common::*;

contract!(
    a_purge_deletes_only_runs_finished_before_the_cutoff,
    a_purge_takes_the_oldest_first_in_batches,
);

/// The reference time of these tests; runs finish days around it.
fn now() -> DateTime<Utc> {
    at(0)
}

/// A run created at `created` with `events` events (the last an ask left open), then
/// moved to `end` at `ended`, unless `end` is `None` (then it stays running).
async fn stored_run(
    store: &dyn RunStore,
    id: &str,
    created: DateTime<Utc>,
    end: Option<(Status, DateTime<Utc>)>,
) -> Run {
    let mut run = new_run(id, "task", "project", "agent", created);
    store
        .commit(create(
            &run,
            vec![event(id, 1, "first"), event(id, 2, "second")],
        ))
        .await
        .unwrap();
    let running = transition(&mut run, Status::Running, created, vec![asked(id, 3)]);
    store.commit(running).await.unwrap();
    if let Some((status, ended)) = end {
        let ended = transition(&mut run, status, ended, vec![]);
        store.commit(ended).await.unwrap();
    }
    run
}

/// An ask that nobody answered (a `pending_asks` row).
fn asked(run_id: &str, seq: u64) -> Event {
    Event {
        run_id: run_id.into(),
        seq,
        at: at(seq as i64),
        kind: EventKind::Decided(Decided {
            call_id: format!("call-{seq}"),
            tool: "Bash".into(),
            command: "npm publish".into(),
            path: String::new(),
            resolved_path: String::new(),
            paths: vec![],
            url: String::new(),
            input: String::new(),
            decision: Decision::Ask,
            reason: "asks".into(),
            rule_index: Some(0),
            part: String::new(),
            step_count: 1,
            deadline: None,
            profile: "default".into(),
            profile_hash: String::new(),
            grant: String::new(),
        }),
    }
}

fn worker_token(run_id: &str) -> Credential {
    Credential {
        name: format!("worker:{run_id}"),
        hash: format!("h-{run_id}"),
        kind: CredentialKind::Worker {
            run_id: run_id.into(),
        },
        created_at: now(),
        revoked_at: None,
    }
}

/// The ids of every stored run, newest first.
async fn listed(store: &dyn RunStore) -> Vec<String> {
    let page = store
        .list_runs(RunQuery {
            limit: 100,
            ..RunQuery::default()
        })
        .await
        .unwrap();
    page.runs.into_iter().map(|run| run.id).collect()
}

async fn a_purge_deletes_only_runs_finished_before_the_cutoff(store: Arc<dyn RunStore>) {
    let store = &*store;
    let days = Duration::days;
    let old = stored_run(
        store,
        "old",
        now() - days(30),
        Some((Status::Completed, now() - days(10))),
    )
    .await;
    let failed = stored_run(
        store,
        "failed",
        now() - days(30),
        Some((Status::Failed, now() - days(9))),
    )
    .await;
    let recent = stored_run(
        store,
        "recent",
        now() - days(30),
        Some((Status::Cancelled, now() - days(6))),
    )
    .await;
    let live = stored_run(store, "live", now() - days(40), None).await;
    for run in [&old, &failed, &recent, &live] {
        store.put_credential(worker_token(&run.id)).await.unwrap();
    }
    let admin = Credential {
        name: "admin".into(),
        hash: "h-admin".into(),
        kind: CredentialKind::Operator {
            role: Role::Admin,
            scope: Scope::default(),
        },
        created_at: now() - days(100),
        revoked_at: None,
    };
    store.put_credential(admin.clone()).await.unwrap();
    let recent_events = all_events(store, "recent").await;
    let live_events = all_events(store, "live").await;
    assert_eq!(recent_events.len(), 3);
    assert_eq!(store.pending_asks(None).await.unwrap().len(), 4);

    let purged = store
        .purge_finished_before(now() - days(7), 100)
        .await
        .unwrap();
    assert_eq!(purged, 2);

    for gone in ["old", "failed"] {
        assert_eq!(store.get_run(gone).await.unwrap(), None, "{gone}");
        assert!(all_events(store, gone).await.is_empty(), "{gone}");
        assert!(store.pending_asks(Some(gone)).await.unwrap().is_empty());
        assert_eq!(store.credential(&format!("h-{gone}")).await.unwrap(), None);
    }
    assert_eq!(store.get_run("recent").await.unwrap(), Some(recent.clone()));
    assert_eq!(store.get_run("live").await.unwrap(), Some(live.clone()));
    assert_eq!(all_events(store, "recent").await, recent_events);
    assert_eq!(all_events(store, "live").await, live_events);
    assert_eq!(listed(store).await, ["recent", "live"]);
    let asks: Vec<String> = store
        .pending_asks(None)
        .await
        .unwrap()
        .into_iter()
        .map(|ask| ask.run_id)
        .collect();
    assert_eq!(asks, ["live", "recent"]);
    for kept in ["recent", "live"] {
        assert_eq!(
            store.credential(&format!("h-{kept}")).await.unwrap(),
            Some(worker_token(kept))
        );
    }
    assert_eq!(store.credential("h-admin").await.unwrap(), Some(admin));
    assert_eq!(store.live_runs().await.unwrap().len(), 1);

    // Nothing left before the cutoff; a run that completed at the cutoff is not before
    // it, nor (the stores compare RFC 3339 text, see `completion.rs`) one that completed
    // within the second before it; one a second before is.
    assert_eq!(
        store
            .purge_finished_before(now() - days(7), 100)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .purge_finished_before(now() - days(6), 100)
            .await
            .unwrap(),
        0
    );
    let just_after = now() - days(6) + Duration::microseconds(1);
    assert_eq!(
        store.purge_finished_before(just_after, 100).await.unwrap(),
        0
    );
    let second_after = now() - days(6) + Duration::seconds(1);
    assert_eq!(
        store
            .purge_finished_before(second_after, 100)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store
            .purge_finished_before(now() + days(365), 100)
            .await
            .unwrap(),
        0
    );
    assert_eq!(listed(store).await, ["live"]);
}

async fn a_purge_takes_the_oldest_first_in_batches(store: Arc<dyn RunStore>) {
    let store = &*store;
    // Created newest first, finished oldest first: the order of completion decides.
    for i in 0..7_i64 {
        let created = now() - Duration::days(60) - Duration::minutes(i);
        let ended = now() - Duration::days(20) + Duration::minutes(i);
        stored_run(
            store,
            &format!("run-{i}"),
            created,
            Some((Status::Completed, ended)),
        )
        .await;
    }
    let cutoff = now() - Duration::days(7);
    let remaining =
        |ids: std::ops::Range<i64>| -> Vec<String> { ids.map(|i| format!("run-{i}")).collect() };
    assert_eq!(store.purge_finished_before(cutoff, 3).await.unwrap(), 3);
    assert_eq!(listed(store).await, remaining(3..7));
    assert_eq!(store.purge_finished_before(cutoff, 3).await.unwrap(), 3);
    assert_eq!(listed(store).await, remaining(6..7));
    assert_eq!(store.purge_finished_before(cutoff, 3).await.unwrap(), 1);
    assert_eq!(store.purge_finished_before(cutoff, 3).await.unwrap(), 0);
    assert!(listed(store).await.is_empty());
    assert!(all_events(store, "run-6").await.is_empty());
}
