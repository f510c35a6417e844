//! A profile's `network`, applied to the commands of a shell line: what each simple
//! command reaches by the catalogue (`catalogue`), and whether the profile lets it.
//! Under `network = "none"` a command known to connect is denied, whatever a rule says;
//! under a list of endpoints, a connection to a destination outside the list is denied.
//! A command whose destination the text does not show, and a program the catalogue does
//! not know, is never allowed (it asks, or gets the mode's stricter default).

use std::collections::HashMap;
use std::sync::LazyLock;

use globset::GlobMatcher;

use super::catalogue::{
    is_python, Subcommands, ALWAYS, LISTENING_OPTIONS, LOCAL, PYTHON_MODULES_CONNECT,
    PYTHON_MODULES_LOCAL, SUBCOMMANDS,
};
use super::words::Word;
use crate::policy::profile::compile::CompiledProfile;
use crate::policy::profile::containment::{EgressEndpoint, Network};
use crate::policy::profile::globs::domain_glob;

/// Where a connection goes, as the text shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Destination {
    pub host: String,
    pub port: u16,
}

/// What one simple command does on the network by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Known not to connect.
    Local,
    /// Known to connect or listen: `what` names it (`curl`, `git clone`); `to` holds the
    /// destinations when the text shows all of them.
    Connects {
        what: String,
        to: Option<Vec<Destination>>,
    },
    /// Not in the catalogue.
    Unknown,
}

/// What the profile's `network` makes of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Finding {
    /// Denied, for this reason.
    Refused(String),
    /// Never allowed, for this reason (a caveat).
    Unsure(String),
}

/// A profile's `network`, compiled.
pub(crate) enum Scope {
    /// `network = "none"`.
    Nothing,
    /// `network = ["host:port", …]`: host globs and ports.
    Endpoints(Vec<(GlobMatcher, u16)>),
}

impl Scope {
    /// A profile's `network` compiled; `None` when the profile states none. Endpoints are
    /// validated with the profile, so a bad one here is skipped rather than widening
    /// anything.
    pub(crate) fn of(network: &Network) -> Option<Scope> {
        let endpoints = match network {
            Network::Unstated => return None,
            Network::Nothing => return Some(Scope::Nothing),
            Network::Endpoints(endpoints) => endpoints,
        };
        let compiled = endpoints
            .iter()
            .filter_map(|text| EgressEndpoint::parse(text).ok())
            .filter_map(|e| Some((domain_glob(&e.host).ok()?.compile_matcher(), e.port)))
            .collect();
        Some(Scope::Endpoints(compiled))
    }

    /// How reasons name the profile's network.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Scope::Nothing => "the profile's network is \"none\"",
            Scope::Endpoints(_) => "the profile's network is limited to its endpoints",
        }
    }

    fn admits(&self, to: &Destination) -> bool {
        match self {
            Scope::Nothing => false,
            Scope::Endpoints(list) => list
                .iter()
                .any(|(host, port)| *port == to.port && host.is_match(&to.host)),
        }
    }

    /// Judges one simple command; `None` when the network has nothing against it.
    pub(crate) fn judge(&self, words: &[Word]) -> Option<Finding> {
        let name = words.first().map_or("", |w| w.text.as_str());
        self.judge_reach(reach(words), name)
    }

    /// Judges a fetch of `url` (the WebFetch tool).
    pub(crate) fn judge_url(&self, url: &str) -> Option<Finding> {
        let reach = Reach::Connects {
            what: format!("WebFetch of {url:?}"),
            to: url_destination(url).map(|to| vec![to]),
        };
        self.judge_reach(reach, "WebFetch")
    }

    fn judge_reach(&self, reach: Reach, name: &str) -> Option<Finding> {
        let network = self.describe();
        let (what, to) = match reach {
            Reach::Local => return None,
            Reach::Unknown => {
                return Some(Finding::Unsure(format!(
                    "{name} is not a program known to stay off the network, and {network}"
                )))
            }
            Reach::Connects { what, to } => (what, to),
        };
        let Scope::Endpoints(_) = self else {
            return Some(Finding::Refused(format!(
                "connects to the network ({what}), and {network}"
            )));
        };
        let Some(to) = to else {
            return Some(Finding::Unsure(format!(
                "it connects ({what}) to a destination the text does not show, and {network}"
            )));
        };
        let outside = to.iter().find(|to| !self.admits(to))?;
        Some(Finding::Refused(format!(
            "connects to {}:{} ({what}), which the profile's network does not list",
            outside.host, outside.port
        )))
    }
}

impl CompiledProfile {
    /// How the profile's network reads in words; `None` when it states none.
    pub fn network_scope(&self) -> Option<&'static str> {
        self.network.as_ref().map(Scope::describe)
    }

    /// Whether the profile's network refuses the simple command `words` (denies it, or
    /// will not allow it); `None` when the profile states no network.
    pub fn network_refuses(&self, words: &[&str]) -> Option<bool> {
        let words: Vec<Word> = words.iter().map(|w| Word::literal(*w)).collect();
        Some(self.network.as_ref()?.judge(&words).is_some())
    }
}

/// What the catalogue lists a program name as.
#[derive(Clone, Copy)]
enum Listed {
    Always,
    BySubcommand(&'static Subcommands),
    Local,
}

/// The catalogue by program name, built once: one lookup per command judged.
static LISTED: LazyLock<HashMap<&'static str, Listed>> = LazyLock::new(|| {
    let mut listed = HashMap::new();
    listed.extend(LOCAL.split_whitespace().map(|n| (n, Listed::Local)));
    listed.extend(ALWAYS.split_whitespace().map(|n| (n, Listed::Always)));
    for entry in SUBCOMMANDS {
        listed.extend(
            entry
                .names
                .split_whitespace()
                .map(|n| (n, Listed::BySubcommand(entry))),
        );
    }
    listed
});

/// What the command `words` (the first word its program's name) reaches.
pub(crate) fn reach(words: &[Word]) -> Reach {
    let Some(name) = words.first().and_then(Word::exact) else {
        return Reach::Unknown;
    };
    let args = &words[1..];
    let listed = LISTED.get(name).copied();
    match listed {
        Some(Listed::Always) => {
            return Reach::Connects {
                what: name.to_string(),
                to: client_destinations(name, args),
            }
        }
        Some(Listed::BySubcommand(entry)) => return by_subcommand(name, entry, args),
        Some(Listed::Local) | None => {}
    }
    if is_python(name) {
        return python(name, args);
    }
    if let Some((_, option)) = LISTENING_OPTIONS.iter().find(|(program, option)| {
        *program == name && args.iter().any(|a| is_option(&a.text, option))
    }) {
        return Reach::Connects {
            what: format!("{name} {option}"),
            to: None,
        };
    }
    if name == "rsync" {
        return rsync(args);
    }
    match listed {
        Some(Listed::Local) => Reach::Local,
        _ => Reach::Unknown,
    }
}

/// `word` is `option` or `option=…` (or, for a short one, `option…` attached).
fn is_option(word: &str, option: &str) -> bool {
    word == option
        || word
            .strip_prefix(option)
            .is_some_and(|rest| rest.starts_with('=') || !option.starts_with("--"))
}

/// A program judged by its subcommand: the first operand after its global options, and
/// the one after it where two-word entries (`git remote show`) decide.
fn by_subcommand(name: &str, entry: &Subcommands, args: &[Word]) -> Reach {
    let mut operands = operands(args, entry.values);
    let Some(first) = operands.next() else {
        return match entry.bare_connects {
            true => Reach::Connects {
                what: name.to_string(),
                to: None,
            },
            false => Reach::Local,
        };
    };
    let Some(sub) = first.exact() else {
        return Reach::Unknown;
    };
    let next = operands.next();
    let two = next
        .and_then(Word::exact)
        .map(|next| format!("{sub} {next}"));
    let connects = |what: &str| Reach::Connects {
        what: format!("{name} {what}"),
        to: remote_destination(name, sub, next),
    };
    if let Some(two) = two.as_deref() {
        if entry.connect.contains(&two) {
            return connects(two);
        }
        if entry.local.contains(&two) {
            return Reach::Local;
        }
    }
    let remote_archive =
        name == "git" && sub == "archive" && args.iter().any(|a| is_option(&a.text, "--remote"));
    if entry.connect.contains(&sub) || remote_archive {
        return connects(sub);
    }
    if entry.local.contains(&sub) {
        return Reach::Local;
    }
    Reach::Unknown
}

/// The words of `args` that are not options, skipping the values of `values` options and
/// a toolchain selector (`cargo +nightly`).
fn operands<'w>(
    args: &'w [Word],
    values: &'static [&'static str],
) -> impl Iterator<Item = &'w Word> {
    let mut skip = false;
    args.iter().filter(move |word| {
        if std::mem::take(&mut skip) {
            return false;
        }
        let text = word.text.as_str();
        if text.starts_with('-') && text.len() > 1 {
            skip = values.contains(&text);
            return false;
        }
        !text.starts_with('+')
    })
}

/// The remote a VCS subcommand names, when it is a URL (`git clone URL`, `git push URL`):
/// a remote's name says nothing of where it points.
fn remote_destination(name: &str, sub: &str, next: Option<&Word>) -> Option<Vec<Destination>> {
    let named = matches!(
        (name, sub),
        ("git", "clone" | "fetch" | "pull" | "push" | "ls-remote")
            | ("hg", "clone" | "pull" | "push")
    );
    let to = destination(next.filter(|_| named)?.exact()?)?;
    Some(vec![to])
}

/// `python … -m MODULE`: the module decides (pip as the pip program); a script or code
/// runs what the workspace holds, which the sandbox contains.
fn python(name: &str, args: &[Word]) -> Reach {
    let mut words = args.iter().enumerate();
    while let Some((i, word)) = words.next() {
        let text = word.text.as_str();
        let module = match text {
            "-m" => words.next().map(|(_, w)| (i + 2, w)),
            "-W" | "-X" => {
                words.next();
                continue;
            }
            _ if text.starts_with("-m") => {
                return python_module(name, &text[2..], &args[i + 1..]);
            }
            _ if text.starts_with('-') => continue,
            _ => return Reach::Local,
        };
        let Some((rest, module)) = module else {
            return Reach::Unknown;
        };
        let Some(module) = module.exact() else {
            return Reach::Unknown;
        };
        return python_module(name, module, &args[rest..]);
    }
    Reach::Local
}

fn python_module(name: &str, module: &str, args: &[Word]) -> Reach {
    if matches!(module, "pip" | "pip3") {
        if let Some(pip) = SUBCOMMANDS.iter().find(|e| e.names.starts_with("pip")) {
            return by_subcommand(&format!("{name} -m pip"), pip, args);
        }
    }
    if PYTHON_MODULES_CONNECT
        .split_whitespace()
        .any(|m| m == module)
    {
        return Reach::Connects {
            what: format!("{name} -m {module}"),
            to: None,
        };
    }
    match PYTHON_MODULES_LOCAL.split_whitespace().any(|m| m == module) {
        true => Reach::Local,
        false => Reach::Unknown,
    }
}

/// rsync connects when an operand is remote (`host:path`, `host::module`, `rsync://`).
fn rsync(args: &[Word]) -> Reach {
    let operands: Vec<&Word> = operands(args, &[]).collect();
    if operands.iter().any(|w| w.exact().is_none()) {
        return Reach::Unknown;
    }
    let remote: Vec<&str> = operands
        .iter()
        .map(|w| w.text.as_str())
        .filter(|text| destination(text).is_some() || text.contains("::"))
        .collect();
    if remote.is_empty() {
        return Reach::Local;
    }
    let to = remote.iter().map(|text| rsync_destination(text)).collect();
    Reach::Connects {
        what: "rsync".into(),
        to,
    }
}

/// An rsync remote: `host::module` and `rsync://` are its daemon's (port 873), `host:path`
/// goes over ssh.
fn rsync_destination(text: &str) -> Option<Destination> {
    match text.split_once("::") {
        Some((before, _)) if !text.contains("://") => Some(Destination {
            port: 873,
            ..destination(&format!("{before}:"))?
        }),
        _ => destination(text),
    }
}

/// The options of URL clients whose value is not a destination (a file, a header), and
/// those that send the connection elsewhere (a proxy, a resolve override, a config or
/// input file): with one of those, the text does not show where it goes.
#[rustfmt::skip]
const CLIENT_VALUES: &[(&str, &[&str], &[&str])] = &[
    (
        "curl",
        &[
            "-o", "--output", "-H", "--header", "-d", "--data", "--data-raw", "--data-binary",
            "--data-urlencode", "-X", "--request", "-A", "--user-agent", "-w", "--write-out",
            "-m", "--max-time", "--connect-timeout", "--retry", "--retry-delay", "-D",
            "--dump-header", "-e", "--referer", "-T", "--upload-file", "-F", "--form", "-b",
            "--cookie", "-c", "--cookie-jar", "-u", "--user", "-r", "--range", "--output-dir",
        ],
        &[
            "-x", "--proxy", "--preproxy", "--socks4", "--socks4a", "--socks5",
            "--socks5-hostname", "--connect-to", "--resolve", "--doh-url", "--dns-servers",
            "-K", "--config", "--proxy1.0", "-:", "--next", "--url",
        ],
    ),
    (
        "wget",
        &[
            "-O", "--output-document", "-o", "--output-file", "-a", "--append-output", "-P",
            "--directory-prefix", "--header", "-U", "--user-agent", "-t", "--tries", "-T",
            "--timeout", "--referer", "--user", "-w", "--wait",
        ],
        &["-e", "--execute", "-i", "--input-file", "--config", "-B", "--base"],
    ),
];

/// The destinations of a URL client's run, when every operand is a URL and no option
/// sends it elsewhere; `None` for other clients (their destinations are not modelled).
fn client_destinations(name: &str, args: &[Word]) -> Option<Vec<Destination>> {
    let (_, values, elsewhere) = CLIENT_VALUES.iter().find(|(n, ..)| *n == name)?;
    let mut to = Vec::new();
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let text = word.exact()?;
        let takes_next = match option_effect(text, values, elsewhere)? {
            Some(takes_next) => takes_next,
            None => {
                to.push(url_destination(text)?);
                continue;
            }
        };
        if takes_next {
            words.next();
        }
    }
    (!to.is_empty()).then_some(to)
}

/// For an option word: `Some(whether its value is the next word)`; `Some(None)` for an
/// operand; `None` when the option sends the connection elsewhere. Short options may be
/// grouped (`-sSLo out`): a value option ends the group, taking the rest or the next word.
fn option_effect(text: &str, values: &[&str], elsewhere: &[&str]) -> Option<Option<bool>> {
    if let Some(long) = text.strip_prefix("--").filter(|l| !l.is_empty()) {
        let (name, attached) = match long.split_once('=') {
            Some((name, _)) => (name, true),
            None => (long, false),
        };
        let name = format!("--{name}");
        if elsewhere.contains(&name.as_str()) {
            return None;
        }
        return Some(Some(!attached && values.contains(&name.as_str())));
    }
    let Some(group) = text.strip_prefix('-').filter(|g| !g.is_empty()) else {
        return Some(None);
    };
    for (i, c) in group.char_indices() {
        let short = format!("-{c}");
        if elsewhere.contains(&short.as_str()) {
            return None;
        }
        if values.contains(&short.as_str()) {
            return Some(Some(i + c.len_utf8() == group.len()));
        }
    }
    Some(Some(false))
}

/// A URL's host and port (the scheme's when none is written).
fn url_destination(text: &str) -> Option<Destination> {
    let url = url::Url::parse(text).ok()?;
    let port = url.port_or_known_default().or(match url.scheme() {
        "ssh" | "sftp" | "git+ssh" => Some(22),
        "git" => Some(9418),
        "rsync" => Some(873),
        _ => None,
    })?;
    let host = url.host_str().filter(|h| !h.is_empty())?;
    Some(Destination {
        host: host.trim_matches(['[', ']']).to_ascii_lowercase(),
        port,
    })
}

/// Where a remote operand points: a URL, or scp's `[user@]host:path` (ssh, port 22).
fn destination(text: &str) -> Option<Destination> {
    if text.contains("://") {
        return url_destination(text);
    }
    let (before, _) = text.split_once(':')?;
    let host = before.rsplit('@').next()?;
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    (!host.is_empty() && host.chars().all(plain)).then(|| Destination {
        host: host.to_ascii_lowercase(),
        port: 22,
    })
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
