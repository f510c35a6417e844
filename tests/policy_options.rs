//! The option table through a whole profile: a profile that allows the search, text,
//! archive and git programs by prefix (as one allowing Codex's read-only programs does)
//! still refuses each of their options that starts a program, loads one or writes a file
//! — the cases Codex's own command-safety tests refuse to auto-approve among them — with
//! a reason naming the option, while the everyday forms of each program stay allowed:
//! false denials are bugs too. A shell given a literal script is judged as the script.

use runplane::domain::Decision::{self, Allow, Ask, Deny};
use runplane::policy::{parse_profile, CompiledProfile, ProfileFormat, ToolCall};

const PROGRAMS: &[&str] = &[
    "rg",
    "grep",
    "egrep",
    "fd",
    "cat",
    "head",
    "tail",
    "wc",
    "cut",
    "tr",
    "nl",
    "uniq",
    "comm",
    "paste",
    "join",
    "fold",
    "tac",
    "base64",
    "base32",
    "basename",
    "dirname",
    "realpath",
    "readlink",
    "ls",
    "stat",
    "du",
    "df",
    "sort",
    "diff",
    "cmp",
    "tar",
    "zip",
    "unzip",
    "gzip",
    "zcat",
    "xz",
    "bzip2",
    "zstd",
    "find",
    "git status",
    "git diff",
    "git log",
    "git show",
    "git blame",
    "git ls-files",
    "git rev-parse",
];

/// Allows the programs above by prefix and denies every other command; writes ask.
fn readers() -> CompiledProfile {
    let allowed: Vec<String> = PROGRAMS.iter().map(|p| format!("\"{p}\"")).collect();
    let text = format!(
        "name = \"readers\"\nmode = \"default\"\nnetwork = \"none\"\n\
         [[rules]]\nspecifier = {{ tool = \"Bash\" }}\ndecision = \"allow\"\n\
         command_allow = [{}]\n\
         [[rules]]\nspecifier = {{ tool = \"Bash\" }}\ndecision = \"deny\"\n",
        allowed.join(", ")
    );
    let profile = parse_profile(&text, ProfileFormat::Toml, "readers").expect("profile");
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

const RG_Z: &str = "rg -z starts a decompressor for each compressed file";
const TABLE: &str = "an option the option table does not know";
const EXT_DIFF: &str = "git --ext-diff runs the external diff program";
const TEXTCONV: &str = "git --textconv runs the text conversion filters";
const PAGER: &str = "git -p starts a pager";
const PATH_NAME: &str = "its command name is a path";
const WRITE: &str = "no rule matches the write";

/// (command, decision, what the reason says).
const REFUSED: &[(&str, Decision, &str)] = &[
    // Codex's command-safety cases.
    ("rg --pre ./x.sh foo", Deny, PATH_NAME),
    ("rg --pre=./x.sh foo", Deny, PATH_NAME),
    ("rg --hostname-bin ./x foo", Deny, "(--hostname-bin"),
    ("rg --hostname-bin=./x foo", Deny, "(--hostname-bin=./x"),
    ("rg -z foo", Deny, RG_Z),
    ("rg --search-zip foo", Deny, RG_Z),
    ("rg -nz foo", Deny, RG_Z),
    ("rg -zn foo", Deny, RG_Z),
    ("rg -n -z foo .", Deny, RG_Z),
    ("rg foo -z", Deny, RG_Z),
    ("base64 -o out.txt in", Deny, "(-o;"),
    ("base64 -oout.txt in", Deny, "(-oout.txt;"),
    ("base64 --output out.txt in", Deny, "(--output;"),
    ("base64 --output=out.txt in", Deny, "(--output=out.txt;"),
    ("git diff --ext-diff", Deny, EXT_DIFF),
    ("git show --ext-diff HEAD", Deny, EXT_DIFF),
    ("git log --textconv -p", Deny, TEXTCONV),
    ("git blame --textconv src/a.rs", Deny, TEXTCONV),
    ("git --paginate log", Deny, PAGER),
    ("git -p status", Deny, PAGER),
    // Our own.
    ("uniq in.txt out.txt", Ask, WRITE),
    ("sort -o sorted.txt in.txt", Ask, WRITE),
    ("sort -T /tmp/x in.txt", Ask, "outside the workspace"),
    ("sort --compress-program=./gz -S 1 in.txt", Deny, PATH_NAME),
    ("diff -l a b", Deny, "diff -l pipes its output through pr"),
    ("git log --show-signature", Deny, "runs gpg"),
    (
        "git -C /tmp/other status",
        Deny,
        "a repository outside the workspace",
    ),
    (
        "git --git-dir=/tmp/r/.git log",
        Deny,
        "a repository outside the workspace",
    ),
    ("git -c core.pager=./x log", Deny, "git -c and --config-env"),
    ("git diff --output=/tmp/d", Ask, "outside the workspace"),
    (
        "git diff --no-index /etc/passwd a",
        Deny,
        "outside the workspace (git diff --no-index)",
    ),
    (
        "tar -I ./x -cf a.tar src",
        Deny,
        "tar -I starts the compression program",
    ),
    ("tar --to-command=sh -xf a.tar", Deny, "--to-command"),
    (
        "tar -xf a.tar --checkpoint-action=exec=sh",
        Deny,
        "--checkpoint-action",
    ),
    ("tar cf host:a.tar src", Deny, "on another machine"),
    ("tar czf out.tgz src", Ask, WRITE),
    ("tar xzf in.tgz", Ask, "its target is not known"),
    ("tar cfb a.tar 20 src", Deny, "old-style tar cluster"),
    ("unzip in.zip", Ask, "its target is not known"),
    (
        "unzip -M in.zip",
        Deny,
        "unzip -M pipes its output through more",
    ),
    ("zip -TT ./x out.zip src", Deny, "zip -T tests the archive"),
    ("zip out.zip src", Ask, WRITE),
    ("gzip notes.txt", Ask, WRITE),
    ("xz -d data.xz", Ask, WRITE),
    ("fd -e rs -x wc -l", Deny, "fd -x and -X run a command line"),
    ("ls --not-an-option", Deny, TABLE),
    ("cat -Z x", Deny, TABLE),
    (
        "rg \"$PATTERN\" src",
        Deny,
        "a word not known before it runs",
    ),
    (
        "rg -e foo --pre \"$P\" src",
        Deny,
        "a word not known before it runs",
    ),
    // A shell's literal script is judged as what it runs.
    ("sh -c 'ls -l; rm -rf x'", Deny, "\"rm -rf x\""),
    ("bash -c 'rg --pre ./x y'", Deny, PATH_NAME),
    (
        "bash --rcfile x -c 'ls'",
        Deny,
        "matches \"bash --rcfile x -c ls\"",
    ),
];

#[test]
fn options_that_run_load_or_write_are_refused_with_their_reason() {
    let profile = readers();
    for (command, want, says) in REFUSED {
        let (decision, reason) = bash(&profile, command);
        assert_eq!(decision, *want, "{command}: {reason}");
        assert!(reason.contains(says), "{command}: {reason}\n  want: {says}");
    }
}

/// At least ten everyday forms of each family, every one allowed.
const EVERYDAY: &[&str] = &[
    // search
    "rg -n foo src",
    "rg -i --hidden -g '*.rs' foo",
    "rg -l TODO",
    "rg --json -C 2 'fn main' src",
    "rg -t rust -w Foo",
    "rg -F -e 'a.b' -e 'c' .",
    "rg --files src",
    "rg -c foo -- -notanoption",
    "grep -rn foo src --include=*.rs",
    "grep -E 'a|b' README.md",
    "grep -c x a.txt",
    "egrep -v '^#' config.ini",
    "grep -A3 -B2 panic src/main.rs",
    "grep \"$PATTERN\" notes.txt",
    "fd -e rs",
    "fd -H -t f Cargo.toml",
    "find . -name '*.rs' -exec cat {} +",
    // text
    "cat -n src/main.rs",
    "head -20 README.md",
    "head -n 5 a b",
    "tail -n +5 log.txt",
    "tail -f -n 100 log.txt",
    "wc -l src/*.rs",
    "cut -d: -f1 list.txt",
    "tr -d '\\r'",
    "nl -ba x",
    "uniq -c sorted.txt",
    "comm -12 a b",
    "paste -sd, list",
    "join -1 2 -2 1 a b",
    "fold -w 80 x",
    "tac log",
    "base64 -d in.b64",
    "base64 -w0 bin",
    "basename -s .rs src/main.rs",
    "dirname src/main.rs",
    "realpath --relative-to=. src",
    "readlink -f target",
    "ls -la src",
    "ls --color=never -1",
    "ls \"${HOME:-/tmp}\"",
    "stat -c %s Cargo.toml",
    "du -sh target",
    "df -h .",
    "sort -u names.txt",
    "sort -k2,2n -t, data.csv",
    "diff -u a b",
    "diff -ru old new",
    "cmp -s a b",
    // archives
    "tar tzf x.tgz",
    "tar -tvf x.tar",
    "tar --list --file=x.tar",
    "tar xzf x.tgz -O",
    "unzip -l x.zip",
    "unzip -p x.zip a.txt",
    "zcat x.gz",
    "gzip -dc x.gz",
    "xz -l x.xz",
    "zstd -dc x.zst",
    "bzip2 -t x.bz2",
    // git
    "git status",
    "git status -sb",
    "git status --porcelain=v1",
    "git diff",
    "git diff --stat HEAD~3",
    "git diff --cached -- src",
    "git diff -U10 main...HEAD",
    "git log --oneline -20",
    "git log -p --follow -- src/main.rs",
    "git log --since=2.weeks --author=me --format='%h %s'",
    "git show HEAD:src/main.rs",
    "git show --stat HEAD",
    "git blame -L 10,20 src/main.rs",
    "git ls-files -m",
    "git rev-parse --show-toplevel",
    // shells with a literal script
    "sh -c 'ls -l'",
    "bash -c 'git status && git diff'",
    "bash -ec 'rg -n foo src | head -5'",
];

#[test]
fn everyday_forms_stay_allowed() {
    let profile = readers();
    for command in EVERYDAY {
        let (decision, reason) = bash(&profile, command);
        assert_eq!(decision, Allow, "{command}: {reason}");
    }
}
