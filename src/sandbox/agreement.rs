//! What the judge refuses and what the sandbox permits, side by side, for one profile:
//! both derive from the profile's intent (`secrets`, the protected places, the
//! workspace as the place writes go, `network`), and probes made from that intent check
//! that they say the same. `runplane policy explain --profile P` prints it.

use std::path::Path;

use serde::Serialize;

use super::plan::{Access, Plan};
use crate::domain::Decision;
use crate::policy::{CompiledProfile, EgressEndpoint, ToolCall, PROTECTED_NAMES};

/// A host no profile lists: a connection to it must be refused by both.
const UNLISTED_HOST: &str = "unlisted.invalid";

/// One intent, as each side holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    /// `secrets`, `protected`, `writes`, `network`.
    pub intent: &'static str,
    /// What the judge does, in words.
    pub judge: String,
    /// What the sandbox does, in words.
    pub sandbox: String,
}

/// One probe of the intent: a path or an endpoint, and what each side makes of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Probe {
    pub intent: &'static str,
    /// The call probed (`Read ~/.ssh/x`, `curl https://github.com:443/`).
    pub call: String,
    /// The judge's decision, or what its network makes of it.
    pub judge: String,
    /// The sandbox's access or admission.
    pub sandbox: String,
    /// Whether the two say the same.
    pub agree: bool,
}

/// The explanation of one profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    pub sides: Vec<Side>,
    pub probes: Vec<Probe>,
}

impl Explanation {
    /// The probes on which the judge and the sandbox disagree.
    pub fn disagreements(&self) -> impl Iterator<Item = &Probe> {
        self.probes.iter().filter(|p| !p.agree)
    }
}

/// Explains `profile` against `plan` (compiled from it for `workspace`, with `home`).
pub fn explain(profile: &CompiledProfile, plan: &Plan, home: &Path) -> Explanation {
    let workspace = plan.workdir.to_string_lossy().into_owned();
    let judge = |tool: &str, path: &str| {
        profile
            .evaluate(&ToolCall {
                tool,
                path,
                workspace_root: Some(&workspace),
                ..ToolCall::default()
            })
            .decision
    };
    let access = |path: &str| plan.access(path, home).ok();
    let mut probes = Vec::new();
    for path in profile.profile().secrets.iter().filter_map(|g| witness(g)) {
        let (read, sandbox) = (judge("Read", &path), access(&path));
        probes.push(probe(
            "secrets",
            format!("Read {path}"),
            read,
            sandbox,
            |d, a| (d == Decision::Deny) == (a == Some(Access::Hidden)),
        ));
    }
    let protected = PROTECTED_NAMES.iter().map(|name| format!("{name}/x"));
    for path in protected.chain(profile.profile().protected.iter().cloned()) {
        let (write, sandbox) = (judge("Write", &path), access(&path));
        probes.push(probe(
            "protected",
            format!("Write {path}"),
            write,
            sandbox,
            |d, a| (d == Decision::Deny) == matches!(a, Some(Access::ReadOnly | Access::Hidden)),
        ));
    }
    for path in ["/etc/runplane-probe", "~/runplane-probe"] {
        let (write, sandbox) = (judge("Write", path), access(path));
        probes.push(probe(
            "writes",
            format!("Write {path}"),
            write,
            sandbox,
            |d, a| d != Decision::Allow && a != Some(Access::Writable),
        ));
    }
    probes.extend(network_probes(profile, plan));
    Explanation {
        sides: sides(profile, plan),
        probes,
    }
}

fn probe(
    intent: &'static str,
    call: String,
    decision: Decision,
    access: Option<Access>,
    agree: impl Fn(Decision, Option<Access>) -> bool,
) -> Probe {
    Probe {
        intent,
        call,
        judge: decision.to_string(),
        sandbox: access.map_or("not placed".into(), |a| format!("{a:?}").to_lowercase()),
        agree: agree(decision, access),
    }
}

/// Each endpoint the profile's network lists, and one it does not: the judge's network
/// leaves a connection to the rules exactly where the egress proxy admits it. A profile
/// that states no network has none: its rules judge commands that connect.
fn network_probes(profile: &CompiledProfile, plan: &Plan) -> Vec<Probe> {
    if profile.network_scope().is_none() {
        return Vec::new();
    }
    let network = |words: &[&str]| profile.network_refuses(words).unwrap_or(false);
    let admitted: Vec<EgressEndpoint> = plan
        .egress
        .iter()
        .filter_map(|text| EgressEndpoint::parse(text).ok())
        .collect();
    let listed = admitted.iter().map(|e| (e.host.replace('*', "x"), e.port));
    listed
        .chain([(UNLISTED_HOST.to_string(), 443)])
        .map(|(host, port)| {
            let url = format!("https://{host}:{port}/");
            let refused = network(&["curl", &url]);
            let admits = admitted.iter().any(|e| e.admits(&host, port));
            Probe {
                intent: "network",
                call: format!("curl {url}"),
                judge: if refused {
                    "refused"
                } else {
                    "left to the rules"
                }
                .into(),
                sandbox: if admits { "admitted" } else { "refused" }.into(),
                agree: refused != admits,
            }
        })
        .collect()
}

/// A path `glob` matches, made of its own literal parts (`**/` dropped, `*` and `?` as
/// `x`, a trailing `/**` as `/x`); `None` for a glob with classes or alternatives.
fn witness(glob: &str) -> Option<String> {
    if glob.contains(['[', '{', '\\']) {
        return None;
    }
    let path = glob
        .replace("**/", "")
        .replace("**", "x")
        .replace(['*', '?'], "x");
    (!path.is_empty()).then_some(path)
}

fn sides(profile: &CompiledProfile, plan: &Plan) -> Vec<Side> {
    let list = |items: &mut dyn Iterator<Item = String>| {
        let items: Vec<String> = items.collect();
        if items.is_empty() {
            "nothing".to_string()
        } else {
            items.join(", ")
        }
    };
    let p = profile.profile();
    let hidden = list(&mut plan.hidden.iter().map(|h| {
        let root = h.root.display().to_string();
        match h.glob.is_empty() {
            true => root,
            false => format!("{}/{}", root.trim_end_matches('/'), h.glob),
        }
    }));
    let network_judge = match profile.network_scope() {
        None => "the profile states no network: its rules judge commands that connect".into(),
        Some(scope) => format!(
            "{scope}: commands known to connect elsewhere are denied before any rule, those \
             whose destination the text does not show and programs not known to stay off \
             the network are never allowed"
        ),
    };
    vec![
        Side {
            intent: "secrets",
            judge: format!(
                "reading or writing these is denied to every tool before any rule: {} \
                 (and runplane's own data and tokens)",
                list(&mut p.secrets.iter().cloned())
            ),
            sandbox: format!("hidden (reads fail with EACCES): {hidden}"),
        },
        Side {
            intent: "protected",
            judge: format!(
                "writes are denied before any rule: {}",
                list(
                    &mut PROTECTED_NAMES
                        .iter()
                        .map(|n| n.to_string())
                        .chain(p.protected.iter().cloned())
                )
            ),
            sandbox: format!(
                "read-only: {}",
                list(&mut plan.read_only.iter().map(|p| p.display().to_string()))
            ),
        },
        Side {
            intent: "writes",
            judge: match p.writable.is_empty() {
                true => "a write outside the workspace is never allowed".into(),
                false => format!(
                    "a write outside the workspace and {} is never allowed; there, the rules \
                     judge it",
                    p.writable.join(", ")
                ),
            },
            sandbox: format!(
                "writable: {}; everything else read-only",
                list(&mut plan.writable.iter().map(|p| p.display().to_string()))
            ),
        },
        Side {
            intent: "network",
            judge: network_judge,
            sandbox: format!(
                "the egress proxy admits: {} (and the agent's model endpoint)",
                list(&mut plan.egress.iter().cloned())
            ),
        },
    ]
}
