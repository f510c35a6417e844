//! The worker's side of the agent's sandbox: the plan compiled from what the run's profile
//! says and what this machine is, placed on the filesystem, written as the spec
//! `runplane exec-agent` starts processes by, and the egress proxy the agent's network
//! goes through. Everything here happens before the agent starts; if any of it fails, the
//! agent does not start.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tokio::sync::mpsc;

use super::egress::{EgressProxy, Refusal};
use super::hook_wire::Agent;
use super::launch::Launch;
use crate::domain::SandboxPolicy;
use crate::policy::EgressEndpoint;
use crate::sandbox::bwrap;
use crate::sandbox::materialise::{materialise, Placeholders};
use crate::sandbox::plan::{self, Plan, PlanInput};
use crate::sandbox::{confine_binary, missing, Spec};

/// The sandbox of one run, alive as long as the run's worker.
pub struct Containment {
    /// The plan in force.
    pub plan: Plan,
    /// The spec file `runplane exec-agent --sandbox` reads.
    pub spec: PathBuf,
    /// The layers enforced, for the log.
    pub layers: Vec<String>,
    /// Variables the agent and the gate get: TMPDIR and the proxy.
    pub env: Vec<(String, OsString)>,
    /// The proxy; refusals arrive on the receiver `prepare` returns.
    _proxy: EgressProxy,
    /// The agent's TMPDIR, removed with the run.
    _run_tmp: tempfile::TempDir,
    /// Protected directories made for the run, removed after it when still empty.
    _placeholders: Placeholders,
}

/// What the worker knows of this machine for the plan.
pub struct Facts<'a> {
    /// The workspace (canonical).
    pub workspace: &'a Path,
    /// The worker's private directory (the hook socket's).
    pub private: &'a Path,
    /// Which agent runs.
    pub agent: Agent,
    /// How it is launched (its own state directory, its model endpoint).
    pub launch: &'a Launch,
    /// runplane's credential files on this machine (the token file).
    pub credentials: Vec<PathBuf>,
    /// The `runplane` executable the agent's hooks run.
    pub runplane: &'a Path,
}

impl Containment {
    /// Prepares the sandbox, or says what is missing and what to do.
    pub async fn prepare(
        policy: &SandboxPolicy,
        facts: Facts<'_>,
    ) -> Result<(Containment, mpsc::UnboundedReceiver<Refusal>), String> {
        let mut missing = missing();
        missing.extend(confine_binary().err());
        if !missing.is_empty() {
            return Err(format!(
                "the agent's sandbox cannot be enforced on this machine, so the agent is not \
                 started: {}",
                missing.join("; ")
            ));
        }
        let run_tmp = tempfile::Builder::new()
            .prefix("runplane-agent-tmp")
            .tempdir()
            .map_err(|e| format!("the agent's TMPDIR: {e}"))?;
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .ok_or("HOME is not set: the sandbox cannot place ~/ secrets")?;
        let mut egress = policy.egress.clone();
        egress.extend(model_endpoints(facts.agent, facts.launch));
        let input = PlanInput {
            workspace: facts.workspace.to_path_buf(),
            git_dirs: git_dirs(facts.workspace),
            home: home.clone(),
            run_tmp: run_tmp.path().to_path_buf(),
            private: facts.private.to_path_buf(),
            agent_state: agent_state(facts.agent, facts.launch, &home),
            programs: program_places(facts.launch)
                .into_iter()
                .chain(std::fs::canonicalize(facts.runplane))
                .collect(),
            secrets: policy.secrets.clone(),
            protected: policy.protected.clone(),
            writable: policy.writable.clone(),
            credentials: facts.credentials,
            egress,
        };
        let plan = plan::compile(&input);
        let allowed = plan
            .egress
            .iter()
            .map(|e| EgressEndpoint::parse(e))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("an egress endpoint of the run's profile: {e}"))?;
        let (refusals, refused) = mpsc::unbounded_channel();
        let proxy = EgressProxy::start(allowed, refusals)
            .await
            .map_err(|e| format!("the egress proxy: {e}"))?;
        let (mounts, placeholders) =
            materialise(&plan, facts.private).map_err(|e| e.to_string())?;
        let spec = Spec {
            bwrap: bwrap::args(&mounts),
            writable: mounts.writable.clone(),
            connect_ports: vec![proxy.addr().port()],
        };
        let spec_path = facts.private.join("sandbox.json");
        spec.write(&spec_path).map_err(|e| e.to_string())?;
        let env = environment(&plan, proxy.addr());
        let containment = Containment {
            plan,
            spec: spec_path,
            layers: vec![
                "bubblewrap".into(),
                "landlock-abi-6".into(),
                "seccomp".into(),
            ],
            env,
            _proxy: proxy,
            _run_tmp: run_tmp,
            _placeholders: placeholders,
        };
        Ok((containment, refused))
    }
}

/// TMPDIR and the proxy, in both spellings clients read; `NO_PROXY` emptied, since a
/// direct connection would fail in the kernel anyway.
fn environment(plan: &Plan, proxy: std::net::SocketAddr) -> Vec<(String, OsString)> {
    let url = format!("http://{proxy}");
    let mut env = vec![("TMPDIR".to_string(), plan.tmpdir.clone().into_os_string())];
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        env.push((name.to_string(), url.clone().into()));
        env.push((name.to_lowercase(), url.clone().into()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push((name.to_string(), OsString::new()));
    }
    env
}

/// The agent's own state: written by the agent as it runs.
fn agent_state(agent: Agent, launch: &Launch, home: &Path) -> Vec<PathBuf> {
    let mut state: Vec<PathBuf> = match agent {
        Agent::ClaudeCode => vec![home.join(".claude"), home.join(".claude.json")],
        Agent::Codex => vec![home.join(".codex")],
    };
    state.extend(
        launch
            .env
            .iter()
            .filter(|(name, _)| name == "CODEX_HOME")
            .map(|(_, value)| PathBuf::from(value)),
    );
    state
}

/// The model endpoints the agent talks to: its base URL when the environment or its
/// configuration names one, the provider's public endpoint otherwise.
fn model_endpoints(agent: Agent, launch: &Launch) -> Vec<String> {
    let variable = |name: &str| {
        launch
            .env
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
            .or_else(|| std::env::var(name).ok())
    };
    let from_url = |text: &str| -> Option<String> {
        let url = url::Url::parse(text).ok()?;
        Some(format!(
            "{}:{}",
            url.host_str()?,
            url.port_or_known_default()?
        ))
    };
    match agent {
        Agent::ClaudeCode => vec![variable("ANTHROPIC_BASE_URL")
            .and_then(|u| from_url(&u))
            .unwrap_or_else(|| "api.anthropic.com:443".into())],
        Agent::Codex => {
            let configured = variable("CODEX_HOME")
                .and_then(|home| std::fs::read_to_string(Path::new(&home).join("config.toml")).ok())
                .and_then(|text| codex_base_url(&text))
                .or_else(|| variable("OPENAI_BASE_URL"))
                .and_then(|u| from_url(&u));
            match configured {
                Some(endpoint) => vec![endpoint],
                None => vec!["api.openai.com:443".into(), "chatgpt.com:443".into()],
            }
        }
    }
}

/// The base URL of Codex's configured model provider.
fn codex_base_url(config: &str) -> Option<String> {
    let table: toml::Table = toml::from_str(config).ok()?;
    let provider = table.get("model_provider")?.as_str()?;
    let url = table
        .get("model_providers")?
        .get(provider)?
        .get("base_url")?
        .as_str()?;
    Some(url.to_string())
}

/// A worktree's git directories when `.git` is a file pointing elsewhere.
fn git_dirs(workspace: &Path) -> Vec<PathBuf> {
    let dot_git = workspace.join(".git");
    let Ok(text) = std::fs::read_to_string(&dot_git) else {
        return Vec::new();
    };
    let Some(dir) = text.trim().strip_prefix("gitdir:") else {
        return Vec::new();
    };
    let dir = workspace.join(dir.trim());
    let mut dirs = vec![dir.clone()];
    if let Ok(common) = std::fs::read_to_string(dir.join("commondir")) {
        dirs.push(dir.join(common.trim()));
    }
    dirs.into_iter()
        .filter_map(|d| std::fs::canonicalize(d).ok())
        .collect()
}

/// Where the agent's programs live: the command's program as the worker's `PATH` finds it
/// and every later word that names an executable file (the agent behind a wrapper,
/// `with-mcp /opt/claude`). For each, the directory it is named in and the one it resolves
/// to — or, for a program in an npm install, the whole `node_modules` tree, since its
/// launcher (`.bin/codex`, a link into a package) starts binaries from sibling packages.
fn program_places(launch: &Launch) -> Vec<PathBuf> {
    let programs = launch.line.iter().enumerate().filter_map(|(i, word)| {
        let word = Path::new(word);
        if i == 0 {
            on_path(word)
        } else {
            is_executable_file(word).then(|| word.to_path_buf())
        }
    });
    let mut places: Vec<PathBuf> = programs
        .flat_map(|named| {
            let named_dir = named
                .parent()
                .and_then(|dir| std::fs::canonicalize(dir).ok());
            let real_dir = std::fs::canonicalize(&named)
                .ok()
                .and_then(|real| real.parent().map(Path::to_path_buf));
            [named_dir, real_dir]
        })
        .flatten()
        .map(|dir| outermost_node_modules(&dir).unwrap_or(dir))
        .collect();
    places.sort();
    places.dedup();
    places
}

/// `program` itself when it names a directory, else the first match on `PATH`.
fn on_path(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return Some(program.to_path_buf());
    }
    let dirs = std::env::var_os("PATH")?;
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// A path (with a directory part) to a file someone may execute.
fn is_executable_file(word: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    word.components().count() > 1
        && std::fs::metadata(word).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn outermost_node_modules(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .filter(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .last()
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn launch(line: &[&Path]) -> Launch {
        Launch {
            line: line.iter().map(|p| p.display().to_string()).collect(),
            env: Vec::new(),
            env_remove: Vec::new(),
            _config: None,
        }
    }

    fn executable(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn an_npm_installed_agent_behind_a_wrapper_is_shown_whole() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let modules = root.join("agents/node_modules");
        let package = modules.join("@openai/codex/bin/codex.js");
        executable(&package);
        std::fs::create_dir_all(modules.join(".bin")).unwrap();
        let bin = modules.join(".bin/codex");
        std::os::unix::fs::symlink("../@openai/codex/bin/codex.js", &bin).unwrap();
        let wrapper = root.join("wrappers/with-mcp");
        executable(&wrapper);
        let data = root.join("data/notes.txt");
        std::fs::create_dir_all(data.parent().unwrap()).unwrap();
        std::fs::write(&data, "not a program").unwrap();
        let places = program_places(&launch(&[&wrapper, &bin, &data, Path::new("-p")]));
        assert_eq!(places, [modules, root.join("wrappers")]);
    }
}
