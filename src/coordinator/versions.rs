//! The policy versions runs are pinned to: stored when a run starts under a version the
//! store does not hold yet, and found again by hash when a run is restored (after a
//! restart, or by another process) or its asks are listed (with the rule that asked),
//! whatever the policy directory says by then.

use std::collections::HashMap;
use std::sync::Arc;

use super::{lock, Coordinator, CoordinatorError, PendingAsk};
use crate::domain::{Event, EventKind, PolicyVersion, Run};
use crate::policy::{compile_version, CompiledProfile};
use crate::store::StoreError;
use chrono::{DateTime, Utc};

/// A pinned version, or why it cannot be used (the run then fails: judging its calls by
/// other rules would be a guess).
pub(super) type Pinned = Result<Arc<CompiledProfile>, String>;

/// The version hash a run's log pins it to; `None` for a run created before versions
/// were recorded.
fn pinned_hash(events: &[Event]) -> Option<&str> {
    events
        .iter()
        .find_map(|event| match &event.kind {
            EventKind::Created(created) => Some(created.policy_hash.as_str()),
            _ => None,
        })
        .filter(|hash| !hash.is_empty())
}

impl Coordinator {
    /// Stores `profile`'s version unless this process already knows the store holds it.
    pub(super) async fn store_version(
        &self,
        profile: &CompiledProfile,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if lock(&self.shared.stored_versions).contains(profile.hash()) {
            return Ok(());
        }
        let version = PolicyVersion {
            hash: profile.hash().to_string(),
            name: profile.profile().name.clone(),
            source: profile.canonical().to_string(),
            first_seen: now,
        };
        self.shared.store.put_policy_version(version).await?;
        lock(&self.shared.stored_versions).insert(profile.hash().to_string());
        Ok(())
    }

    /// The profile a restored run is judged by: the version its log pins it to, else (a
    /// run from before versions) the loaded profile of its name.
    pub(super) async fn pinned_profile(
        &self,
        run: &Run,
        events: &[Event],
    ) -> Result<Pinned, StoreError> {
        let Some(hash) = pinned_hash(events) else {
            let Some(loaded) = self.shared.profiles.current().get(&run.policy_profile) else {
                return Ok(Err(format!(
                    "policy profile {:?} no longer exists",
                    run.policy_profile
                )));
            };
            // Its decisions from now on name this version: stored, so they can be audited.
            self.store_version(&loaded, self.shared.clock.now()).await?;
            return Ok(Ok(loaded));
        };
        // Why it is unusable is logged with the run's failure.
        let pinned = self.version(hash).await?;
        Ok(pinned.map_err(|why| format!("policy profile {:?}: {why}", run.policy_profile)))
    }

    /// The version with this hash: the loaded profile when it is that version (shared, no
    /// read), else the stored one, compiled on the blocking pool.
    pub(super) async fn version(&self, hash: &str) -> Result<Pinned, StoreError> {
        if let Some(loaded) = self.shared.profiles.current().by_hash(hash) {
            return Ok(Ok(loaded));
        }
        let Some(stored) = self.shared.store.policy_version(hash).await? else {
            return Ok(Err(format!("version {hash} is not stored")));
        };
        lock(&self.shared.stored_versions).insert(stored.hash.clone());
        let compiled =
            tokio::task::spawn_blocking(move || compile_version(&stored.hash, &stored.source))
                .await
                .map_err(|e| StoreError::Database(format!("compiling a stored version: {e}")))?;
        Ok(compiled.map(Arc::new).map_err(|e| e.to_string()))
    }

    /// Fills in each ask's rule text from the profile version that decided it: the log
    /// records only the rule's index (and the version's hash), and the version is the one
    /// place its text is. One lookup per version (or, for an ask recorded without a hash,
    /// per run); a version or profile that cannot be found leaves the text empty rather
    /// than failing the whole list.
    pub(super) async fn add_rules(&self, asks: &mut [PendingAsk]) -> Result<(), CoordinatorError> {
        let mut profiles: HashMap<String, Option<Arc<CompiledProfile>>> = HashMap::new();
        for ask in asks.iter_mut() {
            let Some(index) = ask.rule_index else {
                continue;
            };
            let key = if ask.profile_hash.is_empty() {
                format!("run {}", ask.request.run_id)
            } else {
                ask.profile_hash.clone()
            };
            if !profiles.contains_key(&key) {
                let profile = if ask.profile_hash.is_empty() {
                    self.shared
                        .store
                        .get_run(&ask.request.run_id)
                        .await?
                        .and_then(|run| self.shared.profiles.current().get(&run.policy_profile))
                } else {
                    self.version(&ask.profile_hash).await?.ok()
                };
                profiles.insert(key.clone(), profile);
            }
            let rule = profiles
                .get(&key)
                .and_then(Option::as_ref)
                .and_then(|profile| profile.profile().rules.get(index));
            if let Some(rule) = rule {
                ask.rule = crate::policy::rule_to_toml(rule);
            }
        }
        Ok(())
    }
}
