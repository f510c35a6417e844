//! The judge and the sandbox derive from one statement of intent, so they must agree:
//! for every preset and a profile with endpoints, each probe (a witness of every secret,
//! every protected place, writes outside the workspace, every listed endpoint and an
//! unlisted one) gets the same answer from the judge and from the sandbox plan compiled
//! from the same profile; a plan made from something else disagrees, and
//! `runplane policy explain` says so with its exit code.

use std::path::{Path, PathBuf};
use std::process::Command;

use runplane::policy::{
    egress_of, parse_profile, presets, CompiledProfile, PolicyProfile, ProfileFormat,
};
use runplane::sandbox::agreement::{explain, Explanation};
use runplane::sandbox::plan::{compile, Plan, PlanInput};

const WS: &str = "/work/repo";
const HOME: &str = "/home/dev";

fn plan_of(profile: &PolicyProfile) -> Plan {
    compile(&PlanInput {
        workspace: PathBuf::from(WS),
        home: PathBuf::from(HOME),
        run_tmp: PathBuf::from("/tmp/run"),
        private: PathBuf::from("/tmp/private"),
        secrets: profile.secrets.clone(),
        protected: profile.protected.clone(),
        writable: profile.writable.clone(),
        egress: egress_of(profile),
        ..PlanInput::default()
    })
}

fn explained(profile: &PolicyProfile, plan: &Plan) -> Explanation {
    let compiled = CompiledProfile::compile(profile.clone()).expect("compiles");
    explain(&compiled, plan, Path::new(HOME))
}

fn with_endpoints() -> PolicyProfile {
    let text = "name = \"crates\"\nsecrets = [\"keys/**\"]\n\
                protected = [\"Makefile\", \"scripts/ci\"]\nwritable = [\"~/.cache/pip\"]\n\
                network = [\"*.crates.io:443\", \"github.com:443\"]\n";
    parse_profile(text, ProfileFormat::Toml, "crates").expect("profile")
}

#[test]
fn every_preset_and_a_profile_with_endpoints_agree_on_every_probe() {
    for profile in presets().into_iter().chain([with_endpoints()]) {
        let explanation = explained(&profile, &plan_of(&profile));
        let disagreeing: Vec<_> = explanation.disagreements().collect();
        assert!(disagreeing.is_empty(), "{}: {disagreeing:#?}", profile.name);
        let count = |intent: &str| {
            explanation
                .probes
                .iter()
                .filter(|p| p.intent == intent)
                .count()
        };
        assert_eq!(count("secrets"), profile.secrets.len(), "{}", profile.name);
        assert_eq!(count("protected"), 4 + profile.protected.len());
        assert_eq!(count("writes"), 2);
        // Every listed endpoint and one unlisted.
        assert_eq!(
            count("network"),
            egress_of(&profile).len() + 1,
            "{}",
            profile.name
        );
    }
}

#[test]
fn the_probes_say_what_each_side_did() {
    let safe = presets().remove(1);
    let explanation = explained(&safe, &plan_of(&safe));
    let probe = |call: &str| {
        let p = explanation
            .probes
            .iter()
            .find(|p| p.call == call)
            .unwrap_or_else(|| panic!("no probe {call}"));
        (p.judge.as_str(), p.sandbox.as_str())
    };
    assert_eq!(probe("Read ~/.ssh/x"), ("deny", "hidden"));
    assert_eq!(probe("Read .env.x"), ("deny", "hidden"));
    assert_eq!(probe("Write .git/x"), ("deny", "readonly"));
    assert_eq!(probe("Write /etc/runplane-probe"), ("ask", "readonly"));
    assert_eq!(
        probe("curl https://unlisted.invalid:443/"),
        ("refused", "refused")
    );
    let crates = with_endpoints();
    let explanation = explained(&crates, &plan_of(&crates));
    let admitted = explanation
        .probes
        .iter()
        .find(|p| p.call == "curl https://x.crates.io:443/")
        .expect("the endpoint's probe");
    assert_eq!(
        (admitted.judge.as_str(), admitted.sandbox.as_str()),
        ("left to the rules", "admitted")
    );
    let makefile = explanation
        .probes
        .iter()
        .find(|p| p.call == "Write Makefile")
        .expect("the protected path's probe");
    assert_eq!(
        (makefile.judge.as_str(), makefile.sandbox.as_str()),
        ("deny", "readonly")
    );
    assert_eq!(
        plan_of(&crates).access("~/.cache/pip/x", Path::new(HOME)),
        Ok(runplane::sandbox::plan::Access::Writable)
    );
}

#[test]
fn a_plan_made_from_something_else_disagrees() {
    let safe = presets().remove(1);
    let mut other = safe.clone();
    other.secrets.retain(|s| s != "~/.ssh/**");
    let explanation = explained(&safe, &plan_of(&other));
    let calls: Vec<&str> = explanation
        .disagreements()
        .map(|p| p.call.as_str())
        .collect();
    assert_eq!(calls, ["Read ~/.ssh/x"]);

    let crates = with_endpoints();
    let mut unprotected = crates.clone();
    unprotected.protected.clear();
    let explanation = explained(&crates, &plan_of(&unprotected));
    let calls: Vec<&str> = explanation
        .disagreements()
        .map(|p| p.call.as_str())
        .collect();
    assert_eq!(calls, ["Write Makefile", "Write scripts/ci"]);

    let mut wider = crates.clone();
    wider.network = runplane::policy::Network::Endpoints(vec!["*:443".into()]);
    let explanation = explained(&crates, &plan_of(&wider));
    let calls: Vec<&str> = explanation
        .disagreements()
        .map(|p| p.call.as_str())
        .collect();
    assert_eq!(
        calls,
        ["curl https://x:443/", "curl https://unlisted.invalid:443/"]
    );
}

#[test]
fn policy_explain_prints_both_sides_and_exits_zero_when_they_agree() {
    let workspace = tempfile::tempdir().expect("workspace");
    let out = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args([
            "policy",
            "explain",
            "--profile",
            "headless-permissive-sandbox",
        ])
        .arg("--workspace")
        .arg(workspace.path())
        .env_remove("RUNPLANE_POLICY_DIR")
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "profile headless-permissive-sandbox: the judge | the sandbox\n",
        "network\n  judge:   the profile's network is \"none\": commands known to connect",
        "  sandbox: the egress proxy admits: nothing (and the agent's model endpoint)\n",
        "  agree    protected Write .git/x: judge deny, sandbox readonly\n",
        " probes, 0 disagreeing\n",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_runplane"))
        .args(["policy", "explain", "--profile", "plan-readonly", "--json"])
        .arg("--workspace")
        .arg(workspace.path())
        .env_remove("RUNPLANE_POLICY_DIR")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["sides"].as_array().map(Vec::len), Some(4));
    assert!(v["probes"]
        .as_array()
        .is_some_and(|p| p.iter().all(|p| p["agree"] == true)));
}
