//! What the egress proxy admits: hosts as clients write them, normalised, and the allow
//! list they are judged against.

use std::net::{IpAddr, Ipv6Addr};

use globset::{GlobBuilder, GlobMatcher};
use hyper::Method;

use crate::policy::EgressEndpoint;

/// Why an allow list cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// An entry's host is neither an address nor a valid glob.
    #[error("egress allow list entry {host:?}: {why}")]
    BadEntry {
        /// The entry's host as given.
        host: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The hosts and ports the proxy admits.
#[derive(Debug, Clone)]
pub struct AllowList {
    /// Each entry with its port; a request is admitted when any entry admits it.
    entries: Vec<(Allowed, u16)>,
}

/// The host part of an allow list entry.
#[derive(Debug, Clone)]
enum Allowed {
    /// An IP literal: admits exactly that address, never a name.
    Ip(IpAddr),
    /// A name or a glob over names (`*` crosses dots): admits names only, never an address.
    Name(GlobMatcher),
}

/// A host a client asked for, normalised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Host {
    /// An IP literal (brackets stripped for IPv6).
    Ip(IpAddr),
    /// A DNS name: lower-case ASCII, no trailing dot, valid labels.
    Name(String),
}

impl std::fmt::Display for Host {
    /// As in a `host:port` authority: IPv6 in brackets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
            Host::Name(name) => f.write_str(name),
        }
    }
}

impl Host {
    /// The host as a refusal names it (no brackets).
    pub(super) fn bare(&self) -> String {
        match self {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(name) => name.clone(),
        }
    }
}

/// Parses a host as a request (or an allow list entry) writes it: `[v6]`, a bare IP, or a
/// name compared ignoring case and a trailing dot. Names that a resolver would read as a
/// number (`127.1`, `0x7f000001`, `2130706433`) are refused: they would reach an address
/// without naming it the way the allow list must.
fn parse_host(raw: &str) -> Result<Host, String> {
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner.strip_suffix(']').ok_or("an unclosed '['")?;
        return inner
            .parse::<Ipv6Addr>()
            .map(|ip| Host::Ip(IpAddr::V6(ip)))
            .map_err(|_| format!("{raw:?} is not an IPv6 address in brackets"));
    }
    let trimmed = raw.strip_suffix('.').unwrap_or(raw);
    if let Ok(ip) = trimmed.parse::<IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    let name = trimmed.to_ascii_lowercase();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!("{raw:?} is not a host name"));
    }
    let last = name.rsplit('.').next().unwrap_or_default();
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|rest| rest.bytes().all(|b| b.is_ascii_hexdigit()));
    if hex || last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "{raw:?} reads as a number, not a name or an address"
        ));
    }
    Ok(Host::Name(name))
}

/// Splits an authority (`host`, `host:port`, `[v6]:port`) into its host and port.
fn split_authority(authority: &str) -> Result<(Host, Option<u16>), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((_, after)) => (&authority[..authority.len() - after.len()], after),
            None => return Err(format!("{authority:?} has an unclosed '['")),
        },
        None => match authority.split_once(':') {
            Some((host, _)) => (host, &authority[host.len()..]),
            None => (authority, ""),
        },
    };
    let port = match port {
        "" | ":" => None,
        _ => match port.strip_prefix(':').and_then(|p| p.parse::<u16>().ok()) {
            Some(port) if port != 0 => Some(port),
            _ => return Err(format!("{authority:?} has an invalid port")),
        },
    };
    Ok((parse_host(host)?, port))
}

impl AllowList {
    /// The allow list of `endpoints`: an entry whose host is an IP literal (`10.0.0.1`,
    /// `[::1]`, `::1`) admits that address; any other entry is a glob over names (`*` also
    /// crosses dots, so `*.example.com` is every subdomain at any depth, and never the apex
    /// or `example.com.evil.net`), compared ignoring case and a trailing dot.
    pub fn new(endpoints: &[EgressEndpoint]) -> Result<AllowList, EgressError> {
        let mut entries = Vec::with_capacity(endpoints.len());
        for endpoint in endpoints {
            let bad = |why: String| EgressError::BadEntry {
                host: endpoint.host.clone(),
                why,
            };
            let bare = endpoint.host.strip_suffix('.').unwrap_or(&endpoint.host);
            let unbracketed = bare
                .strip_prefix('[')
                .and_then(|inner| inner.strip_suffix(']'))
                .unwrap_or(bare);
            let allowed = match unbracketed.parse::<IpAddr>() {
                Ok(ip) => Allowed::Ip(ip),
                Err(_) if bare.starts_with('[') => {
                    return Err(bad("not an IPv6 address in brackets".into()))
                }
                Err(_) => GlobBuilder::new(&bare.to_ascii_lowercase())
                    .case_insensitive(true)
                    .literal_separator(false)
                    .build()
                    .map(|glob| Allowed::Name(glob.compile_matcher()))
                    .map_err(|e| bad(e.kind().to_string()))?,
            };
            entries.push((allowed, endpoint.port));
        }
        Ok(AllowList { entries })
    }

    /// Whether a request for `host` (as a client writes it: any case, a trailing dot, IPv6
    /// in brackets) on `port` is admitted.
    pub fn admits(&self, host: &str, port: u16) -> bool {
        parse_host(host).is_ok_and(|host| self.admits_host(&host, port))
    }

    /// Whether the normalised `host` on `port` is admitted.
    pub(super) fn admits_host(&self, host: &Host, port: u16) -> bool {
        self.entries
            .iter()
            .any(|(allowed, allowed_port)| match (allowed, host) {
                _ if *allowed_port != port => false,
                (Allowed::Ip(ip), Host::Ip(asked)) => ip == asked,
                (Allowed::Name(glob), Host::Name(asked)) => glob.is_match(asked),
                _ => false,
            })
    }
}

/// Why a request's target cannot be used, with what the refusal names.
pub(super) struct Unusable {
    /// The host, as far as it could be read.
    pub(super) host: String,
    /// The port, as far as it could be read (0: none).
    pub(super) port: u16,
    /// Why.
    pub(super) reason: String,
}

/// The host and port a request's authority names (`default_port` when it names none;
/// `None`: a port is required). Credentials in the authority are refused (a proxy has no
/// use for them) and never reported.
pub(super) fn target(
    method: &Method,
    authority: &str,
    default_port: Option<u16>,
) -> Result<(Host, u16), Unusable> {
    if let Some((_, rest)) = authority.rsplit_once('@') {
        let (host, port) = split_authority(rest)
            .map(|(host, port)| (host.bare(), port.or(default_port).unwrap_or(0)))
            .unwrap_or_default();
        let reason = "credentials in the request's authority".to_string();
        return Err(Unusable { host, port, reason });
    }
    match split_authority(authority) {
        Ok((host, Some(port))) => Ok((host, port)),
        Ok((host, None)) => match default_port {
            Some(port) => Ok((host, port)),
            None => Err(Unusable {
                host: host.bare(),
                port: 0,
                reason: format!("{method} {authority} has no port"),
            }),
        },
        Err(reason) => Err(Unusable {
            host: authority.to_string(),
            port: 0,
            reason,
        }),
    }
}
