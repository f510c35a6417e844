//! The network catalogue read through `reach`: every entry, the destinations the text
//! shows, and options told apart from subcommands.

use super::*;

fn words(line: &str) -> Vec<Word> {
    line.split_whitespace().map(Word::literal).collect()
}

fn connects(line: &str) -> bool {
    matches!(reach(&words(line)), Reach::Connects { .. })
}

/// Every entry of the catalogue is read as the catalogue says.
#[test]
fn every_catalogue_entry_reaches_as_listed() {
    for name in ALWAYS.split_whitespace() {
        assert!(connects(name), "{name}");
    }
    for entry in SUBCOMMANDS {
        for name in entry.names.split_whitespace() {
            for sub in entry.connect {
                assert!(connects(&format!("{name} {sub} x")), "{name} {sub}");
            }
            for sub in entry.local {
                let line = format!("{name} {sub}");
                assert_eq!(reach(&words(&line)), Reach::Local, "{line}");
            }
            assert_eq!(connects(name), entry.bare_connects, "{name}");
            assert_eq!(reach(&words(&format!("{name} frobnicate"))), Reach::Unknown);
        }
    }
    for module in PYTHON_MODULES_CONNECT.split_whitespace() {
        assert!(connects(&format!("python3 -m {module}")), "{module}");
    }
    for module in PYTHON_MODULES_LOCAL.split_whitespace() {
        let line = format!("python3 -m {module}");
        assert_eq!(reach(&words(&line)), Reach::Local, "{line}");
    }
    for (program, option) in LISTENING_OPTIONS {
        assert!(
            connects(&format!("{program} {option} x")),
            "{program} {option}"
        );
        let line = format!("{program} x");
        assert_eq!(reach(&words(&line)), Reach::Local, "{line}");
    }
    for name in LOCAL.split_whitespace() {
        assert_eq!(reach(&words(name)), Reach::Local, "{name}");
    }
}

#[test]
fn destinations_are_read_only_where_the_text_shows_them_all() {
    let to = |line: &str| match reach(&words(line)) {
        Reach::Connects { to, .. } => to.map(|to| {
            to.iter()
                .map(|d| format!("{}:{}", d.host, d.port))
                .collect::<Vec<_>>()
        }),
        other => panic!("{line}: {other:?}"),
    };
    let shown: &[(&str, &[&str])] = &[
        ("curl https://Example.com/x", &["example.com:443"]),
        (
            "curl -sSLo out http://a.io:8080/ https://b.io",
            &["a.io:8080", "b.io:443"],
        ),
        ("curl -H 'x' https://a.io", &["a.io:443"]),
        ("wget -qO- https://a.io/x", &["a.io:443"]),
        ("git clone https://github.com/x/y dir", &["github.com:443"]),
        ("git clone git@github.com:x/y", &["github.com:22"]),
        ("git -C repo fetch ssh://h.io:2222/r", &["h.io:2222"]),
        ("rsync -a src/ backup.io:/srv/", &["backup.io:22"]),
        ("rsync -a src/ mirror.io::pub", &["mirror.io:873"]),
    ];
    for (line, want) in shown {
        let want: Vec<String> = want.iter().map(|w| w.to_string()).collect();
        assert_eq!(to(line), Some(want), "{line}");
    }
    for hidden in [
        "curl -x http://proxy:3128 https://a.io",
        "curl --resolve a.io:443:10.0.0.1 https://a.io",
        "curl -sx proxy https://a.io",
        "curl -K cfg",
        "curl a.io",
        "curl",
        "wget -e use_proxy=on https://a.io",
        "git push origin main",
        "git clone --depth 1 https://github.com/x/y",
        "ssh a.io",
        "npm install",
    ] {
        assert_eq!(to(hidden), None, "{hidden}");
    }
}

#[test]
fn options_and_subcommands_are_told_apart() {
    for (line, want) in [
        ("git remote -v", Reach::Local),
        ("git remote add origin https://x.io/r", Reach::Local),
        ("git log --remotes", Reach::Local),
        ("git -c core.pager=cat log", Reach::Local),
        ("cargo +nightly build", Reach::Local),
        ("python3 script.py", Reach::Local),
        ("python3 -c 'print(1)'", Reach::Local),
        ("rsync -a src/ dst/", Reach::Local),
        ("npm run fetch", Reach::Local),
        ("uv pip list", Reach::Local),
    ] {
        assert_eq!(reach(&words(line)), want, "{line}");
    }
    for line in [
        "git remote show origin",
        "git submodule update --init",
        "git archive --remote=x HEAD",
        "git -C repo pull",
        "go mod download",
        "python3 -W ignore -m http.server",
        "python3 -mhttp.server",
        "python3 -m pip install x",
        "uv pip install x",
        "yarn",
        "node --inspect=0.0.0.0:9229 app.js",
        "php -S 0.0.0.0:80",
    ] {
        assert!(connects(line), "{line}");
    }
    assert_eq!(reach(&words("frobnicate")), Reach::Unknown);
    assert_eq!(reach(&[Word::unknown("$x", true)]), Reach::Unknown);
    let sub = [Word::literal("git"), Word::unknown("$sub", true)];
    assert_eq!(reach(&sub), Reach::Unknown);
}
