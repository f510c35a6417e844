//! The sandbox plan compiler, per preset: path → hidden / read-only / writable, endpoint
//! → admitted, with relative, `..`, `~/`, `~user` and symlinked inputs; and the plan as
//! `runplane policy sandbox` shows it.

use std::path::{Path, PathBuf};

use runplane::policy::{egress_of, presets, EgressEndpoint, Network, PolicyProfile};
use runplane::sandbox::plan::{compile, Access, PlaceError, Plan, PlanInput};
use runplane::worker::egress::AllowList;

use Access::{Hidden, ReadOnly, Writable};

const WS: &str = "/work/repo";
const HOME: &str = "/home/dev";

fn preset(name: &str) -> PolicyProfile {
    presets()
        .into_iter()
        .find(|p| p.name == name)
        .expect("a preset")
}

fn plan_of(profile: &PolicyProfile) -> Plan {
    compile(&PlanInput {
        workspace: WS.into(),
        git_dirs: vec!["/work/main.git/worktrees/repo".into()],
        home: HOME.into(),
        run_tmp: "/tmp/run-1".into(),
        private: "/tmp/worker-1".into(),
        agent_state: vec![format!("{HOME}/.claude").into()],
        secrets: profile.secrets.clone(),
        credentials: vec!["/srv/runplane/operator.token".into()],
        egress: egress_of(profile),
        ..PlanInput::default()
    })
}

/// What every preset gives these paths: the presets share their secrets.
const PATHS: &[(&str, Access)] = &[
    ("src/main.rs", Writable),
    ("./src/../README", Writable),
    ("/work/repo/new/dir/file", Writable),
    ("../other/file", ReadOnly),
    ("/work/repo/../escape", ReadOnly),
    ("/etc/passwd", ReadOnly),
    ("/usr/bin/make", ReadOnly),
    (".git/hooks/pre-commit", ReadOnly),
    (".git/config", ReadOnly),
    (".claude/settings.json", ReadOnly),
    (".codex/config.toml", ReadOnly),
    (".mcp.json", ReadOnly),
    ("/work/main.git/worktrees/repo/HEAD", ReadOnly),
    (".env", Hidden),
    (".env.production", Hidden),
    ("config/.env", Hidden),
    ("config/.env.staging", Hidden),
    ("secrets/api.key", Hidden),
    ("secrets", Hidden),
    ("deploy/credentials.json", Hidden),
    ("certs/server.pem", Hidden),
    ("runplane-data/operator.token", Hidden),
    ("sub/runplane-data/runplane.db", Hidden),
    ("src/../.env", Hidden),
    ("~/.ssh/id_rsa", Hidden),
    ("/home/dev/.ssh/id_ed25519", Hidden),
    ("~/.aws/credentials", Hidden),
    ("~/.netrc", Hidden),
    (
        "~/.config/gcloud/application_default_credentials.json",
        Hidden,
    ),
    ("~/.bashrc", ReadOnly),
    ("~/.claude/projects/x.jsonl", Writable),
    ("/tmp/run-1/scratch", Writable),
    ("/tmp/worker-1/hooks.sock", ReadOnly),
    ("/srv/runplane/operator.token", Hidden),
    ("/srv/runplane/other", ReadOnly),
];

#[test]
fn every_preset_places_each_path_as_its_description_says() {
    for profile in presets() {
        let plan = plan_of(&profile);
        for (path, expected) in PATHS {
            assert_eq!(
                plan.access(path, Path::new(HOME)),
                Ok(*expected),
                "{}: {path}",
                profile.name
            );
        }
    }
}

#[test]
fn another_users_home_is_not_placed() {
    let plan = plan_of(&preset("headless-safe-sandbox"));
    assert_eq!(
        plan.access("~bob/.ssh/id_rsa", Path::new(HOME)),
        Err(PlaceError::OtherHome("~bob/.ssh/id_rsa".into()))
    );
}

/// A host, a port, and whether the proxy admits it.
type Endpoint = (&'static str, u16, bool);

#[test]
fn endpoints_are_admitted_only_as_the_profile_says() {
    // A profile that states no network: `[sandbox].egress` and the WebFetch allow rules'
    // hosts are admitted.
    let mut docs = preset("headless-safe-sandbox");
    docs.network = Network::Unstated;
    docs.sandbox.egress = vec!["*.crates.io:443".into()];
    docs.rules.insert(
        0,
        runplane::policy::PermissionRule {
            domain_allow: vec!["docs.rs".into()],
            ..runplane::policy::PermissionRule::new("WebFetch", runplane::domain::Decision::Allow)
        },
    );
    // One that states its network: exactly those endpoints, whatever WebFetch rules say
    // (the judge holds WebFetch to them too).
    let mut stated = docs.clone();
    stated.sandbox.egress.clear();
    stated.network = Network::Endpoints(vec!["*.crates.io:443".into()]);
    let cases: &[(&PolicyProfile, &[Endpoint])] = &[
        (
            &preset("headless-safe-sandbox"),
            &[
                ("api.anthropic.com", 443, false),
                ("example.com", 80, false),
            ],
        ),
        (
            &stated,
            &[
                ("index.crates.io", 443, true),
                ("index.crates.io", 80, false),
                ("docs.rs", 443, false),
                ("api.anthropic.com", 443, false),
            ],
        ),
        (
            &docs,
            &[
                ("index.crates.io", 443, true),
                ("crates.io", 443, false),
                ("index.crates.io", 80, false),
                ("docs.rs", 443, true),
                ("docs.rs", 80, true),
                ("docs.rs.evil.net", 443, false),
                ("127.0.0.1", 443, false),
            ],
        ),
    ];
    for (profile, endpoints) in cases {
        let plan = plan_of(profile);
        let parsed: Vec<EgressEndpoint> = plan
            .egress
            .iter()
            .map(|e| EgressEndpoint::parse(e).expect("endpoint"))
            .collect();
        let allow = AllowList::new(&parsed).expect("allow list");
        for (host, port, admitted) in *endpoints {
            assert_eq!(allow.admits(host, *port), *admitted, "{host}:{port}");
        }
    }
}

#[test]
fn the_plan_hash_names_the_plan() {
    let safe = plan_of(&preset("headless-safe-sandbox"));
    assert_eq!(
        safe.hash(),
        plan_of(&preset("headless-safe-sandbox")).hash()
    );
    assert_eq!(safe.hash().len(), 64);
    let mut other = safe.clone();
    other.egress.push("example.com:443".into());
    assert_ne!(safe.hash(), other.hash());
}

/// `runplane policy sandbox`, with the workspace given through a symlink: the plan names
/// the real place, which is what the kernel binds.
#[test]
fn policy_sandbox_shows_the_plan_of_the_real_workspace() {
    let dir = tempfile::tempdir().expect("temp dir");
    let real = dir.path().join("real");
    std::fs::create_dir(&real).expect("dir");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).expect("symlink");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args([
            "policy",
            "sandbox",
            "--profile",
            "headless-safe-sandbox",
            "--json",
        ])
        .arg("--workspace")
        .arg(&link)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    let plan: Plan = serde_json::from_slice(&out.stdout).expect("a plan");
    let real: PathBuf = std::fs::canonicalize(&real).expect("canonical");
    assert_eq!(plan.workdir, real);
    assert!(plan.writable.contains(&real), "{:?}", plan.writable);
    assert!(plan.read_only.contains(&real.join(".git")));
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["policy", "sandbox", "--profile", "trusted-mount-autonomous"])
        .arg("--workspace")
        .arg(&link)
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.ends_with(
            "profile trusted-mount-autonomous: the sandbox may be turned off (runplane work \
             --sandbox off, recorded)\n"
        ),
        "{text}"
    );
    let unknown = std::process::Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["policy", "sandbox", "--profile", "nope"])
        .output()
        .expect("runs");
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("unknown profile \"nope\""),
        "{unknown:?}"
    );
}
