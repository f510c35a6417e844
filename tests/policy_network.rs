//! A profile's `network`, through the judge: under `network = "none"` every command the
//! catalogue knows to connect is denied (named, wrapped, substituted, in a pipeline),
//! whatever a catch-all allow rule says, and a program it does not know is never
//! allowed; under a list of endpoints a connection to one of them is judged by the rules,
//! one elsewhere is denied and one whose destination the text does not show asks.
//! WebFetch is held to the same list. The file forms and their errors are checked too.

use runplane::domain::Decision::{self, Allow, Ask, Deny};
use runplane::policy::{egress_of, parse_profile, CompiledProfile, ProfileFormat, ToolCall};

/// A profile that allows everything by rule, so that what is refused here the network
/// refused.
fn open_profile(network: &str) -> CompiledProfile {
    let text = format!(
        "name = \"open\"\nmode = \"acceptEdits\"\n{network}\n\
         [[rules]]\nspecifier = {{ tool = \"Bash\" }}\ndecision = \"allow\"\n\
         [[rules]]\nspecifier = {{ tool = \"WebFetch\" }}\ndecision = \"allow\"\n"
    );
    let profile = parse_profile(&text, ProfileFormat::Toml, "open").expect("profile");
    CompiledProfile::compile(profile).expect("compiles")
}

fn bash(profile: &CompiledProfile, command: &str) -> (Decision, String) {
    let v = profile.evaluate(&ToolCall {
        tool: "Bash",
        command,
        workspace_root: Some("/home/dev/repo"),
        ..ToolCall::default()
    });
    (v.decision, v.reason)
}

const NONE: &str = "the profile's network is \"none\"";

/// (command, the part that decided, what connects).
const CONNECTING: &[(&str, &str, &str)] = &[
    (
        "curl https://example.com",
        "curl https://example.com",
        "curl",
    ),
    ("wget -q https://x.io/a", "wget -q https://x.io/a", "wget"),
    ("aria2c https://x.io/a", "aria2c https://x.io/a", "aria2c"),
    ("lftp ftp.x.io", "lftp ftp.x.io", "lftp"),
    ("traceroute x.io", "traceroute x.io", "traceroute"),
    ("host x.io", "host x.io", "host"),
    ("ls && nc -l 8080", "nc -l 8080", "nc"),
    ("echo \"$(dig x.io)\"", "dig x.io", "dig"),
    ("timeout 5 ssh x.io", "ssh x.io", "ssh"),
    (
        "cat f | socat - TCP:x.io:80",
        "socat - TCP:x.io:80",
        "socat",
    ),
    (
        "git clone https://github.com/x/y",
        "git clone https://github.com/x/y",
        "git clone",
    ),
    (
        "git -C repo fetch origin",
        "git -C repo fetch origin",
        "git fetch",
    ),
    ("git push", "git push", "git push"),
    (
        "git submodule update --init",
        "git submodule update --init",
        "git submodule update",
    ),
    (
        "npm install left-pad",
        "npm install left-pad",
        "npm install",
    ),
    ("pnpm add x", "pnpm add x", "pnpm add"),
    ("yarn", "yarn", "yarn"),
    (
        "pip install requests",
        "pip install requests",
        "pip install",
    ),
    (
        "python3 -m pip install x",
        "python3 -m pip install x",
        "python3 -m pip install",
    ),
    (
        "cargo install ripgrep",
        "cargo install ripgrep",
        "cargo install",
    ),
    ("go get example.com/m", "go get example.com/m", "go get"),
    ("gem install rails", "gem install rails", "gem install"),
    ("apt-get update", "apt-get update", "apt-get update"),
    (
        "python3 -m http.server 8000",
        "python3 -m http.server 8000",
        "python3 -m http.server",
    ),
    ("php -S 0.0.0.0:8000", "php -S 0.0.0.0:8000", "php -S"),
    ("docker run alpine", "docker run alpine", "docker"),
    ("kubectl get pods", "kubectl get pods", "kubectl"),
    ("aws s3 ls", "aws s3 ls", "aws"),
    ("psql -h db", "psql -h db", "psql"),
    ("npx cowsay hi", "npx cowsay hi", "npx"),
];

#[test]
fn under_none_every_connecting_command_is_denied_whatever_the_rules_say() {
    let profile = open_profile("network = \"none\"");
    for (command, part, what) in CONNECTING {
        let want = format!("{part:?} connects to the network ({what}), and {NONE}");
        assert_eq!(bash(&profile, command), (Deny, want), "{command}");
    }
}

#[test]
fn under_none_local_programs_stay_allowed_and_unknown_ones_ask() {
    let profile = open_profile("network = \"none\"");
    for command in [
        "ls -la src",
        "cargo test -- --nocapture",
        "cargo build --release",
        "go test -run TestX ./...",
        "make test V=1",
        "npm test",
        "git status && git diff --stat",
        "git log --oneline | head",
        "rg -n foo src",
        "tar tzf x.tgz",
        "python3 -m pytest -x",
        "python3 script.py",
        "echo curl https://x.io",
    ] {
        assert_eq!(bash(&profile, command).0, Allow, "{command}");
    }
    let (decision, reason) = bash(&profile, "frobnicate --all");
    assert_eq!(decision, Ask);
    assert_eq!(
        reason,
        format!(
            "\"frobnicate --all\" is never allowed because frobnicate is not a program known to \
             stay off the network, and {NONE} (rules[0] would allow it); no deny or ask rule \
             matches, so ask"
        )
    );
}

#[test]
fn under_endpoints_only_the_listed_ones_are_left_to_the_rules() {
    let profile = open_profile("network = [\"github.com:443\", \"*.crates.io:443\"]");
    let limited = "the profile's network is limited to its endpoints";
    for command in [
        "curl -sSL https://github.com/x/y/archive.tgz -o a.tgz",
        "git clone https://github.com/x/y",
        "wget https://static.crates.io/crates/x",
    ] {
        assert_eq!(bash(&profile, command).0, Allow, "{command}");
    }
    for (command, to, what) in [
        ("curl https://evil.io/x", "evil.io:443", "curl"),
        ("curl http://github.com/x", "github.com:80", "curl"),
        ("git clone git@github.com:x/y", "github.com:22", "git clone"),
        (
            "curl https://github.com https://evil.io",
            "evil.io:443",
            "curl",
        ),
    ] {
        let want = format!(
            "{command:?} connects to {to} ({what}), which the profile's network does not list"
        );
        assert_eq!(bash(&profile, command), (Deny, want), "{command}");
    }
    let (decision, reason) = bash(&profile, "curl -x http://proxy:3128 https://github.com");
    assert_eq!(decision, Ask);
    assert!(
        reason.contains(&format!(
            "it connects (curl) to a destination the text does not show, and {limited}"
        )),
        "{reason}"
    );
    assert_eq!(bash(&profile, "npm install").0, Ask);
    assert_eq!(bash(&profile, "frobnicate").0, Ask);
}

#[test]
fn webfetch_is_held_to_the_same_network() {
    let fetch = |profile: &CompiledProfile, url: &str| {
        let v = profile.evaluate(&ToolCall {
            tool: "WebFetch",
            url,
            ..ToolCall::default()
        });
        (v.decision, v.reason)
    };
    let none = open_profile("network = \"none\"");
    assert_eq!(
        fetch(&none, "https://docs.rs/x"),
        (
            Deny,
            format!(
                "WebFetch connects to the network (WebFetch of \"https://docs.rs/x\"), and {NONE}"
            )
        )
    );
    let docs = open_profile("network = [\"docs.rs:443\"]");
    assert_eq!(fetch(&docs, "https://docs.rs/x").0, Allow);
    assert_eq!(
        fetch(&docs, "https://evil.io/").1,
        "WebFetch connects to evil.io:443 (WebFetch of \"https://evil.io/\"), which the \
         profile's network does not list"
    );
    // A URL whose destination cannot be read is not admitted.
    assert_eq!(fetch(&docs, "not a url").0, Deny);
    // Without a network statement the rules alone decide, as before.
    assert_eq!(fetch(&open_profile(""), "https://evil.io/").0, Allow);
}

#[test]
fn the_sandbox_admits_what_the_network_lists() {
    for (network, egress) in [
        ("network = \"none\"", vec![]),
        ("network = []", vec![]),
        (
            "network = [\"docs.rs:443\"]",
            vec!["docs.rs:443".to_string()],
        ),
    ] {
        let profile = open_profile(network);
        assert_eq!(egress_of(profile.profile()), egress, "{network}");
    }
    // `network = []` is `"none"` spelt otherwise: one version for both.
    assert_eq!(
        open_profile("network = []").hash(),
        open_profile("network = \"none\"").hash()
    );
}

#[test]
fn a_bad_network_is_named() {
    let error = |text: &str| {
        parse_profile(text, ProfileFormat::Toml, "x")
            .expect_err(text)
            .to_string()
    };
    assert_eq!(
        error("network = \"off\""),
        "network: expected \"none\" or a list of \"host:port\" endpoints, not \"off\""
    );
    assert!(error("network = [\"docs.rs\"]").starts_with("network[0]: "));
    assert_eq!(
        error("network = \"none\"\n[sandbox]\negress = [\"a.io:443\"]"),
        "sandbox.egress: the profile states network: list its endpoints there, once for the \
         judge and the sandbox"
    );
    let yaml = parse_profile(
        "name: y\nnetwork: [\"a.io:443\"]\n",
        ProfileFormat::Yaml,
        "y",
    );
    assert!(yaml.is_ok(), "{yaml:?}");
}
