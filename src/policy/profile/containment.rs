//! What a profile says about containment: the secret paths no tool may touch (the judge
//! refuses them, the sandbox hides them), what the agent may reach on the network (the
//! judge refuses commands that connect elsewhere, the egress proxy admits nothing else)
//! and how the agent's kernel sandbox is made.

use serde::{Deserialize, Serialize};

use super::error::PolicyError;
use super::globs::{domain_glob, path_glob};
use super::schema::PolicyProfile;
use crate::domain::Decision;
use crate::policy::judge::path::normalize_path;

/// The `[sandbox]` table of a profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSettings {
    /// `runplane work --sandbox off` is refused for runs of this profile: the agent runs
    /// in the kernel sandbox or not at all.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Endpoints (`host:port`, the host may be a glob such as `*.crates.io`) the egress
    /// proxy admits besides the agent's model endpoint and the hosts the profile's
    /// WebFetch allow rules name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<String>,
}

impl SandboxSettings {
    /// Whether the table says nothing (and so is left out of the canonical form, keeping
    /// the versions of profiles written before it).
    pub fn is_default(&self) -> bool {
        *self == SandboxSettings::default()
    }
}

/// A profile's `network`: what commands and the agent may connect to. One statement for
/// the judge and the sandbox, so that what the one refuses the other cannot reach.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "NetworkForm", into = "NetworkForm")]
pub enum Network {
    /// The profile does not say (profiles written before `network`): its rules alone judge
    /// commands that connect, and the egress proxy admits `[sandbox].egress` and the hosts
    /// of WebFetch allow rules.
    #[default]
    Unstated,
    /// `network = "none"`: nothing but the agent's model endpoint.
    Nothing,
    /// `network = ["host:port", …]`: these endpoints and the model's.
    Endpoints(Vec<String>),
}

impl Network {
    /// Whether the profile says nothing (and so `network` is left out of its canonical
    /// form, keeping the versions of profiles written before it).
    pub fn is_unstated(&self) -> bool {
        *self == Network::Unstated
    }
}

/// How `network` is written: the word `"none"` or a list of endpoints.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum NetworkForm {
    Word(String),
    List(Vec<String>),
}

impl TryFrom<NetworkForm> for Network {
    type Error = String;

    fn try_from(form: NetworkForm) -> Result<Network, String> {
        match form {
            NetworkForm::Word(word) if word == "none" => Ok(Network::Nothing),
            NetworkForm::Word(word) => Err(format!(
                "expected \"none\" or a list of \"host:port\" endpoints, not {word:?}"
            )),
            // An empty list admits nothing: the same profile as "none", spelt once.
            NetworkForm::List(list) if list.is_empty() => Ok(Network::Nothing),
            NetworkForm::List(list) => Ok(Network::Endpoints(list)),
        }
    }
}

impl From<Network> for NetworkForm {
    fn from(network: Network) -> NetworkForm {
        match network {
            Network::Unstated | Network::Nothing => NetworkForm::Word("none".into()),
            Network::Endpoints(list) => NetworkForm::List(list),
        }
    }
}

/// An egress endpoint of `[sandbox].egress`: a host glob and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEndpoint {
    /// The host or a glob over it, compared ignoring case.
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl EgressEndpoint {
    /// Parses `host:port`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<EgressEndpoint, String> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("{text:?} must be host:port"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|port| *port != 0)
            .ok_or_else(|| format!("{text:?}: the port must be a number from 1 to 65535"))?;
        if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c == '/') {
            return Err(format!("{text:?}: the host must be a name or an address"));
        }
        domain_glob(host).map_err(|e| format!("{text:?}: invalid host glob: {e}"))?;
        Ok(EgressEndpoint {
            host: host.to_string(),
            port,
        })
    }
}

impl EgressEndpoint {
    /// Whether a connection to `host:port` is this endpoint (hosts compared ignoring case,
    /// `*` crossing dots).
    pub fn admits(&self, host: &str, port: u16) -> bool {
        port == self.port
            && domain_glob(&self.host).is_ok_and(|glob| glob.compile_matcher().is_match(host))
    }
}

/// The ports a WebFetch allow rule's domains are admitted on: what a URL without a port
/// means.
const WEB_PORTS: [u16; 2] = [443, 80];

/// The endpoints the egress proxy admits for `profile` (besides the agent's model): those
/// of its `network` when it states one (the judge holds WebFetch to them too); otherwise
/// `[sandbox].egress` and the hosts of its WebFetch allow rules on ports 443 and 80, so
/// that what the judge lets WebFetch reach the sandbox lets the agent reach.
pub fn egress_of(profile: &PolicyProfile) -> Vec<String> {
    match &profile.network {
        Network::Nothing => return Vec::new(),
        Network::Endpoints(endpoints) => return endpoints.clone(),
        Network::Unstated => {}
    }
    let mut egress = profile.sandbox.egress.clone();
    let web_hosts = profile
        .rules
        .iter()
        .filter(|rule| rule.specifier.tool == "WebFetch" && rule.decision == Decision::Allow)
        .flat_map(|rule| rule.domain_allow.iter());
    for host in web_hosts {
        egress.extend(WEB_PORTS.iter().map(|port| format!("{host}:{port}")));
    }
    egress
}

/// Checks `secrets`, `network` and `[sandbox]`, naming the first bad field.
pub fn validate_containment(
    secrets: &[String],
    network: &Network,
    sandbox: &SandboxSettings,
) -> Result<(), PolicyError> {
    for (i, pattern) in secrets.iter().enumerate() {
        let field = format!("secrets[{i}]");
        if pattern.is_empty() {
            return Err(PolicyError::new(field, "must not be empty"));
        }
        let glob = pattern.strip_prefix("~/").unwrap_or(pattern);
        path_glob(glob)
            .map_err(|e| PolicyError::new(field, format!("invalid glob {pattern:?}: {e}")))?;
    }
    if let Network::Endpoints(endpoints) = network {
        for (i, endpoint) in endpoints.iter().enumerate() {
            EgressEndpoint::parse(endpoint)
                .map_err(|why| PolicyError::new(format!("network[{i}]"), why))?;
        }
    }
    if !network.is_unstated() && !sandbox.egress.is_empty() {
        return Err(PolicyError::new(
            "sandbox.egress",
            "the profile states network: list its endpoints there, once for the judge and \
             the sandbox",
        ));
    }
    for (i, endpoint) in sandbox.egress.iter().enumerate() {
        EgressEndpoint::parse(endpoint)
            .map_err(|why| PolicyError::new(format!("sandbox.egress[{i}]"), why))?;
    }
    Ok(())
}

/// Checks `protected` and `writable`: plain paths in their one normal spelling (the
/// sandbox binds them, so no glob), protected ones inside the workspace, writable ones
/// outside it and narrower than the whole filesystem or home directory.
pub fn validate_places(protected: &[String], writable: &[String]) -> Result<(), PolicyError> {
    for (i, path) in protected.iter().enumerate() {
        let field = format!("protected[{i}]");
        plain_path(path, &field)?;
        if path.starts_with(['/', '~']) || path.split('/').any(|s| s == "..") || path == "." {
            return Err(PolicyError::new(
                field,
                format!("{path:?} must be a path inside the workspace, relative to its root"),
            ));
        }
    }
    for (i, path) in writable.iter().enumerate() {
        let field = format!("writable[{i}]");
        plain_path(path, &field)?;
        if !(path.starts_with('/') || path.starts_with("~/")) || path == "/" {
            return Err(PolicyError::new(
                field,
                format!(
                    "{path:?} must be a directory outside the workspace, absolute or ~/-relative, \
                     and narrower than / or ~ (the workspace and the run's temp dir are \
                     writable already)"
                ),
            ));
        }
    }
    Ok(())
}

/// A non-empty path without glob characters, written the way it normalises.
fn plain_path(path: &str, field: &str) -> Result<(), PolicyError> {
    if path.is_empty() {
        return Err(PolicyError::new(field, "must not be empty"));
    }
    if path.contains(['*', '?', '[', ']', '{', '}', '\\']) {
        return Err(PolicyError::new(
            field,
            format!("{path:?} must be a path, not a glob: the sandbox binds it as it is"),
        ));
    }
    let normal = normalize_path(path);
    if normal != path {
        return Err(PolicyError::new(
            field,
            format!("write {path:?} as {normal:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_needs_a_host_and_a_port() {
        assert_eq!(
            EgressEndpoint::parse("*.crates.io:443"),
            Ok(EgressEndpoint {
                host: "*.crates.io".into(),
                port: 443
            })
        );
        for bad in [
            "crates.io",
            ":443",
            "crates.io:0",
            "crates.io:99999",
            "a b:1",
        ] {
            assert!(EgressEndpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn protected_and_writable_places_are_plain_paths_on_their_side() {
        let ok = |p: &[&str], w: &[&str]| {
            let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
            validate_places(&strings(p), &strings(w)).map_err(|e| e.to_string())
        };
        assert_eq!(
            ok(
                &["Makefile", "scripts/ci"],
                &["~/.cache/pip", "/var/cache/x"]
            ),
            Ok(())
        );
        for (protected, writable, error) in [
            (
                &["src/*"][..],
                &[][..],
                "protected[0]: \"src/*\" must be a path, not a glob",
            ),
            (&["./x"], &[], "protected[0]: write \"./x\" as \"x\""),
            (
                &["/etc/x"],
                &[],
                "protected[0]: \"/etc/x\" must be a path inside the workspace",
            ),
            (
                &["../x"],
                &[],
                "protected[0]: \"../x\" must be a path inside the workspace",
            ),
            (
                &[],
                &["cache"],
                "writable[0]: \"cache\" must be a directory outside",
            ),
            (
                &[],
                &["/"],
                "writable[0]: \"/\" must be a directory outside",
            ),
            (
                &[],
                &["~"],
                "writable[0]: \"~\" must be a directory outside",
            ),
            (&[], &["~/a/"], "writable[0]: write \"~/a/\" as \"~/a\""),
            (&[], &[""], "writable[0]: must not be empty"),
        ] {
            let got = ok(protected, writable).expect_err(error);
            assert!(got.starts_with(error), "{got}");
        }
    }

    #[test]
    fn a_bad_secret_or_endpoint_is_named() {
        let none = SandboxSettings::default();
        let unstated = Network::Unstated;
        let err = validate_containment(&["".into()], &unstated, &none).unwrap_err();
        assert_eq!(err.to_string(), "secrets[0]: must not be empty");
        let sandbox = SandboxSettings {
            egress: vec!["ok:1".into(), "x".into()],
            ..SandboxSettings::default()
        };
        let err = validate_containment(&[], &unstated, &sandbox).unwrap_err();
        assert!(err.to_string().starts_with("sandbox.egress[1]:"), "{err}");
        let network = Network::Endpoints(vec!["crates.io:443".into(), "crates.io".into()]);
        let err = validate_containment(&[], &network, &none).unwrap_err();
        assert!(err.to_string().starts_with("network[1]:"), "{err}");
        let err = validate_containment(&[], &Network::Nothing, &sandbox).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("sandbox.egress: the profile states network"));
    }
}
