//! The registry a server decides new runs with, replaced whole by a reload.
//!
//! Readers take the current registry (`current`) under a read lock held only for an `Arc`
//! clone; a reload loads the policy directory into a new registry outside any lock and
//! swaps it in under the write lock. A `std` `RwLock<Arc<…>>` is enough: the registry is
//! read when a run starts or is restored and by the policy service, never per tool call (a
//! run's actor holds its own compiled profile), so a lock-free swap would buy nothing.
//! Runs keep the `Arc<CompiledProfile>` they started with, so a reload never changes
//! how a running run is judged.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use super::error::LoadError;
use super::load::ProfileRegistry;

/// A profile whose version a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileChange {
    /// The profile's name.
    pub name: String,
    /// Its hash before the reload; `None`: the reload added it.
    pub previous: Option<String>,
    /// Its hash after the reload; `None`: the reload removed it.
    pub current: Option<String>,
}

/// The presets and the profiles of one policy directory, reloadable.
pub struct LiveProfiles {
    /// The directory a reload reads; `None`: presets only (a reload changes nothing).
    policy_dir: Option<PathBuf>,
    /// The registry new runs get their profile from.
    current: RwLock<Arc<ProfileRegistry>>,
    /// Held for a whole reload, so two reloads at once do not report each other's changes.
    reloading: Mutex<()>,
}

impl LiveProfiles {
    /// Loads `policy_dir` over the presets, as [`ProfileRegistry::load`].
    pub fn load(policy_dir: Option<&Path>) -> Result<LiveProfiles, LoadError> {
        let registry = ProfileRegistry::load(policy_dir)?;
        Ok(LiveProfiles::new(
            registry,
            policy_dir.map(Path::to_path_buf),
        ))
    }

    /// A registry already loaded from `policy_dir`.
    pub fn new(registry: ProfileRegistry, policy_dir: Option<PathBuf>) -> LiveProfiles {
        LiveProfiles {
            policy_dir,
            current: RwLock::new(Arc::new(registry)),
            reloading: Mutex::new(()),
        }
    }

    /// The registry as of now.
    pub fn current(&self) -> Arc<ProfileRegistry> {
        // A panic while the lock was held cannot leave a half-swapped registry: the only
        // write is one assignment of an `Arc`.
        let current = self
            .current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Arc::clone(&current)
    }

    /// Reads the policy directory again and, if every file loads (and passes its own
    /// tests), makes it the current registry; returns the profiles whose version changed,
    /// by name. On any error the current registry stays as it was. Blocking: it reads
    /// files and compiles every profile.
    pub fn reload(&self) -> Result<Vec<ProfileChange>, LoadError> {
        let _one_at_a_time = self
            .reloading
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let loaded = ProfileRegistry::load(self.policy_dir.as_deref())?;
        let changes = changes(&self.current(), &loaded);
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(loaded);
        Ok(changes)
    }
}

/// The profiles whose hash differs between two registries, sorted by name.
fn changes(before: &ProfileRegistry, after: &ProfileRegistry) -> Vec<ProfileChange> {
    let mut names = before.names();
    names.extend(after.names());
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let previous = before.get(&name).map(|p| p.hash().to_string());
            let current = after.get(&name).map(|p| p.hash().to_string());
            (previous != current).then_some(ProfileChange {
                name,
                previous,
                current,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::write(dir.join(file), text).expect("writes the profile");
    }

    #[test]
    fn a_reload_reports_added_changed_and_removed_profiles() {
        let dir = tempfile::tempdir().expect("a temp dir");
        write(dir.path(), "a.toml", "mode = \"plan\"\n");
        write(dir.path(), "b.toml", "mode = \"plan\"\n");
        let live = LiveProfiles::load(Some(dir.path())).expect("loads");
        let before = live.current();
        let a_before = before.get("a").expect("a").hash().to_string();
        let b_before = before.get("b").expect("b").hash().to_string();

        write(dir.path(), "a.toml", "# reformatted\nmode  =  \"plan\"\n");
        write(dir.path(), "b.toml", "mode = \"acceptEdits\"\n");
        write(dir.path(), "c.toml", "mode = \"plan\"\n");
        std::fs::remove_file(dir.path().join("a.toml")).expect("removes a");
        let changes = live.reload().expect("reloads");
        let b_after = live.current().get("b").expect("b").hash().to_string();
        let c_after = live.current().get("c").expect("c").hash().to_string();
        assert_eq!(
            changes,
            vec![
                ProfileChange {
                    name: "a".into(),
                    previous: Some(a_before),
                    current: None,
                },
                ProfileChange {
                    name: "b".into(),
                    previous: Some(b_before),
                    current: Some(b_after),
                },
                ProfileChange {
                    name: "c".into(),
                    previous: None,
                    current: Some(c_after),
                },
            ]
        );
        // A registry taken before the reload is left as it was.
        assert!(before.get("a").is_some());
        assert!(before.get("c").is_none());
    }

    #[test]
    fn a_bad_file_leaves_the_current_registry() {
        let dir = tempfile::tempdir().expect("a temp dir");
        write(dir.path(), "a.toml", "mode = \"plan\"\n");
        let live = LiveProfiles::load(Some(dir.path())).expect("loads");
        let hash = live.current().get("a").expect("a").hash().to_string();
        write(dir.path(), "a.toml", "mode = \"acceptEdits\"\n");
        write(dir.path(), "broken.toml", "mode = [\n");
        let err = live.reload().expect_err("refused");
        assert!(
            matches!(&err, LoadError::Syntax { path, .. } if path.ends_with("broken.toml")),
            "{err}"
        );
        assert_eq!(live.current().get("a").expect("a").hash(), hash);
    }
}
