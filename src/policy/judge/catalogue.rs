//! The reviewed catalogue of what programs do on the network by themselves: the clients,
//! servers, remote shells, cloud, cluster, container and database CLIs that always
//! connect; the subcommands of package managers, version control and toolchains that do;
//! the interpreter modules and options that serve or fetch; and the programs known to
//! stay off the network (builtins, file, text and archive utilities, compilers, build and
//! test runners). A program in none of these lists is unknown, and under a profile's
//! `network` never allowed (`network`).
//!
//! What a local program runs from the workspace (a Makefile's recipes, a build script, a
//! test) is not the program's own doing and is not judged here: the sandbox, compiled
//! from the same `network`, holds it to the same endpoints.

/// Programs that connect (or listen) whenever they run.
pub(crate) const ALWAYS: &str = "
    curl wget aria2c axel lftp ftp tftp sftp scp ssh sshpass ssh-keyscan ssh-copy-id mosh
    autossh nc ncat netcat socat telnet traceroute traceroute6 tracepath mtr ping ping6
    arping dig nslookup host whois drill nmap masscan tcpdump tshark http https xh httpie
    grpcurl websocat wscat torsocks tor proxychains proxychains4 smbclient ldapsearch
    ldapmodify ngrok cloudflared sendmail mail mailx mutt yt-dlp youtube-dl openvpn iperf
    iperf3 svn fossil docker podman nerdctl buildah skopeo crane kubectl helm k9s oc
    minikube kind aws gcloud gsutil az doctl flyctl fly heroku vercel netlify wrangler
    firebase terraform tofu pulumi ansible ansible-playbook gh glab hub mysql mariadb psql
    pg_dump pg_dumpall pg_restore redis-cli mongo mongosh mongodump mongorestore sqlcmd
    cqlsh clickhouse-client influx npx pnpx bunx http-server live-server
";

/// A program whose first operand (its subcommand, two words deep where the second
/// matters) says whether it connects. Entries of two words take precedence over one.
pub(crate) struct Subcommands {
    pub(crate) names: &'static str,
    /// Subcommands that connect.
    pub(crate) connect: &'static [&'static str],
    /// Subcommands known not to connect by themselves; any other is unknown.
    pub(crate) local: &'static [&'static str],
    /// Whether running it without a subcommand connects (`yarn` installs).
    pub(crate) bare_connects: bool,
    /// Options before the subcommand that take the next word as their value.
    pub(crate) values: &'static [&'static str],
}

/// The programs judged by their subcommand (a table: kept as written, not reflowed).
#[rustfmt::skip]
pub(crate) const SUBCOMMANDS: &[Subcommands] = &[
    Subcommands {
        names: "git",
        connect: &[
            "clone", "fetch", "pull", "push", "ls-remote", "send-email", "request-pull",
            "daemon", "instaweb", "svn", "p4", "http-fetch", "http-push", "fetch-pack",
            "send-pack", "lfs", "maintenance", "remote update", "remote show",
            "remote prune", "remote set-head", "submodule update", "submodule add",
        ],
        local: &[
            "status", "log", "diff", "show", "add", "commit", "checkout", "switch", "restore",
            "branch", "tag", "merge", "rebase", "reset", "revert", "cherry-pick", "stash", "rm",
            "mv", "grep", "blame", "annotate", "init", "config", "describe", "shortlog",
            "reflog", "rev-parse", "rev-list", "ls-files", "ls-tree", "cat-file",
            "for-each-ref", "show-ref", "symbolic-ref", "update-ref", "worktree", "clean",
            "apply", "am", "format-patch", "bisect", "notes", "range-diff", "whatchanged",
            "name-rev", "merge-base", "diff-tree", "diff-files", "diff-index", "hash-object",
            "var", "version", "help", "count-objects", "fsck", "gc", "prune", "pack-refs",
            "repack", "verify-commit", "verify-tag", "check-ignore", "check-attr",
            "check-ref-format", "mktree", "mktag", "write-tree", "read-tree", "commit-tree",
            "sparse-checkout", "bundle", "cherry", "archive", "remote", "submodule",
        ],
        bare_connects: false,
        values: &[
            "-C", "-c", "--git-dir", "--work-tree", "--namespace", "--super-prefix",
            "--config-env", "--attr-source",
        ],
    },
    Subcommands {
        names: "npm",
        connect: &[
            "install", "i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal",
            "isntall", "add", "ci", "clean-install", "install-clean", "install-test", "it",
            "install-ci-test", "cit", "update", "up", "upgrade", "udpate", "publish",
            "unpublish", "view", "v", "info", "show", "search", "s", "se", "find", "audit",
            "outdated", "doctor", "login", "logout", "adduser", "add-user", "whoami", "ping",
            "owner", "access", "deprecate", "dist-tag", "star", "unstar", "stars", "team",
            "token", "org", "hook", "exec", "x", "create", "init", "dedupe", "ddp", "repo",
            "docs", "bugs", "fund", "sbom", "diff", "cache",
        ],
        local: &[
            "test", "t", "tst", "run", "run-script", "rum", "urn", "start", "stop", "restart",
            "ls", "list", "ll", "la", "version", "help", "config", "get", "set", "prefix",
            "root", "bin", "pack", "rebuild", "rb", "explain", "why", "prune", "uninstall",
            "remove", "rm", "r", "un", "unlink", "query", "pkg",
        ],
        bare_connects: false,
        values: &["--prefix", "-C", "--workspace", "-w"],
    },
    Subcommands {
        names: "pnpm",
        connect: &[
            "install", "i", "add", "update", "up", "upgrade", "publish", "dlx", "fetch",
            "outdated", "audit", "create", "login", "logout", "whoami", "view", "info",
            "search", "install-test", "it", "import", "env", "self-update",
        ],
        local: &[
            "test", "t", "run", "start", "ls", "list", "ll", "why", "remove", "rm",
            "uninstall", "un", "prune", "root", "bin", "exec", "rebuild", "rb", "pack",
            "config", "help", "licenses",
        ],
        bare_connects: false,
        values: &["-C", "--dir", "--filter", "-F"],
    },
    Subcommands {
        names: "yarn",
        connect: &[
            "install", "add", "upgrade", "up", "upgrade-interactive", "dlx", "publish", "npm",
            "info", "view", "outdated", "audit", "create", "login", "logout", "import", "set",
        ],
        local: &[
            "test", "run", "start", "list", "remove", "why", "bin", "config", "pack", "help",
            "exec", "workspaces", "workspace",
        ],
        bare_connects: true,
        values: &["--cwd"],
    },
    Subcommands {
        names: "cargo",
        connect: &[
            "install", "fetch", "publish", "search", "login", "logout", "owner", "yank",
            "update", "add", "vendor", "generate-lockfile", "info",
        ],
        local: &[
            "build", "b", "check", "c", "test", "t", "run", "r", "clippy", "fmt", "doc", "d",
            "bench", "clean", "tree", "metadata", "locate-project", "version", "help",
            "rustc", "rustdoc", "fix", "package", "new", "init", "remove", "rm", "pkgid",
            "verify-project", "read-manifest", "report", "config", "uninstall",
        ],
        bare_connects: false,
        values: &["-C", "--config", "-Z", "--color", "--manifest-path"],
    },
    Subcommands {
        names: "go",
        connect: &["get", "install", "mod download", "mod tidy", "mod why", "bug"],
        local: &[
            "build", "test", "vet", "fmt", "run", "env", "version", "list", "doc", "generate",
            "clean", "tool", "fix", "help", "work", "mod",
        ],
        bare_connects: false,
        values: &["-C"],
    },
    Subcommands {
        names: "pip pip3",
        connect: &["install", "download", "wheel", "search", "index"],
        local: &[
            "list", "freeze", "show", "check", "uninstall", "config", "cache", "debug", "hash",
            "help", "inspect", "completion",
        ],
        bare_connects: false,
        values: &["--python", "--log", "--cache-dir"],
    },
    Subcommands {
        names: "uv",
        connect: &[
            "pip", "add", "sync", "lock", "tool", "python", "run", "publish", "self",
            "export",
        ],
        local: &[
            "pip list", "pip freeze", "pip show", "pip check", "pip tree", "pip uninstall",
            "remove", "version", "help", "tree", "venv", "cache", "init", "build",
        ],
        bare_connects: false,
        values: &["--directory", "--project", "--cache-dir", "--config-file"],
    },
    Subcommands {
        names: "poetry",
        connect: &[
            "install", "add", "update", "lock", "publish", "search", "self", "source",
        ],
        local: &[
            "run", "build", "check", "version", "env", "config", "show", "remove", "init",
            "new", "about", "help", "list",
        ],
        bare_connects: false,
        values: &["-C", "--directory", "-P", "--project"],
    },
    Subcommands {
        names: "gem",
        connect: &[
            "install", "fetch", "push", "update", "search", "query", "sources", "outdated",
            "owner", "yank", "signin", "signout",
        ],
        local: &[
            "list", "build", "uninstall", "help", "env", "contents", "which", "cleanup",
            "specification", "environment",
        ],
        bare_connects: false,
        values: &[],
    },
    Subcommands {
        names: "bundle bundler",
        connect: &["install", "update", "add", "outdated", "lock", "cache", "package"],
        local: &["exec", "check", "list", "show", "config", "help", "version", "info"],
        bare_connects: true,
        values: &[],
    },
    Subcommands {
        names: "apt apt-get aptitude",
        connect: &[
            "install", "update", "upgrade", "full-upgrade", "dist-upgrade", "download",
            "source", "build-dep", "changelog", "reinstall",
        ],
        local: &[
            "list", "search", "show", "policy", "remove", "purge", "autoremove", "clean",
            "autoclean", "depends", "rdepends", "check",
        ],
        bare_connects: false,
        values: &["-o", "-c", "-t"],
    },
    Subcommands {
        names: "rustup",
        connect: &[
            "install", "update", "toolchain", "target", "component", "self", "check",
            "default", "run", "toolchain install", "target add", "component add",
        ],
        local: &[
            "show", "which", "doc", "man", "help", "completions", "override", "set",
            "toolchain list", "target list", "component list", "toolchain uninstall",
            "target remove", "component remove",
        ],
        bare_connects: false,
        values: &[],
    },
    Subcommands {
        names: "composer",
        connect: &[
            "install", "update", "require", "create-project", "global", "search",
            "outdated", "self-update", "diagnose",
        ],
        local: &[
            "dump-autoload", "dumpautoload", "run", "run-script", "validate", "list", "help",
            "show", "remove", "config", "licenses",
        ],
        bare_connects: false,
        values: &["-d", "--working-dir"],
    },
    Subcommands {
        names: "hg",
        connect: &[
            "clone", "pull", "push", "incoming", "in", "outgoing", "out", "serve",
        ],
        local: &[
            "status", "st", "diff", "log", "commit", "ci", "add", "remove", "rm", "update",
            "up", "branch", "branches", "heads", "summary", "sum", "id", "identify", "root",
            "cat", "annotate", "blame", "help", "version",
        ],
        bare_connects: false,
        values: &["-R", "--repository", "--cwd"],
    },
    Subcommands {
        names: "openssl",
        connect: &["s_client", "s_server", "s_time", "ocsp"],
        local: &[
            "genrsa", "genpkey", "req", "x509", "rsa", "pkey", "dgst", "enc", "rand",
            "version", "help", "verify", "crl", "pkcs12", "pkcs7", "ec", "ecparam",
            "dhparam", "list", "asn1parse", "cms", "smime", "passwd", "prime", "sha256",
            "sha1", "md5", "base64",
        ],
        bare_connects: false,
        values: &[],
    },
];

/// Python modules that, run with `-m`, connect or listen; `pip` is judged as the `pip`
/// program.
pub(crate) const PYTHON_MODULES_CONNECT: &str = "
    http.server SimpleHTTPServer CGIHTTPServer xmlrpc.server smtpd aiosmtpd ftplib
    webbrowser twine httpie ensurepip pipx uvicorn gunicorn flask django
";

/// Python modules known not to connect by themselves.
pub(crate) const PYTHON_MODULES_LOCAL: &str = "
    pytest unittest venv black ruff mypy isort flake8 pylint json.tool compileall
    py_compile doctest coverage timeit cProfile profile pdb trace tokenize ast dis
    tabnanny zipfile tarfile gzip base64 calendar site sysconfig build
";

/// Interpreter options that make it listen (`php -S`, `node --inspect`).
pub(crate) const LISTENING_OPTIONS: &[(&str, &str)] = &[
    ("php", "-S"),
    ("node", "--inspect"),
    ("node", "--inspect-brk"),
    ("node", "--inspect-wait"),
];

/// The names of Python interpreters (a version suffix such as `python3.12` included).
pub(crate) fn is_python(name: &str) -> bool {
    let Some(version) = name.strip_prefix("python") else {
        return false;
    };
    version.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Programs (builtins included) known not to connect by themselves.
pub(crate) const LOCAL: &str = "
    cd pushd popd dirs echo printf test [ [[ true false : pwd export unset set shift read
    readonly local declare typeset exit return source . type command builtin hash alias
    unalias wait jobs fg bg kill trap umask ulimit shopt getopts let eval exec times caller
    enable help history fc disown suspend compgen complete mapfile readarray
    env sudo doas timeout nice nohup setsid stdbuf time ionice taskset flock xargs
    sh bash dash zsh ksh ash mksh fish csh tcsh rbash
    ls cat head tail wc sort uniq cut tr paste join comm nl fold fmt pr od hexdump xxd
    base64 base32 basenc md5sum sha1sum sha224sum sha256sum sha384sum sha512sum b2sum
    cksum sum tac rev expand unexpand seq yes basename dirname realpath readlink stat
    touch mkdir rmdir rm cp mv ln chmod chown chgrp install mktemp truncate split csplit
    tee dd df du sync sleep shuf numfmt tsort factor nproc arch printenv tty date id
    whoami groups uname logname link unlink mkfifo pathchk ptx dircolors vdir dir
    find grep egrep fgrep rg ag ack fd fdfind sed awk gawk mawk nawk jq yq gojq tree file
    diff diff3 cmp patch sdiff colordiff less more most man col column iconv dos2unix
    unix2dos bc dc expr cal which whereis ps pgrep uptime free tput clear stty
    tar gzip gunzip zcat bzip2 bunzip2 bzcat xz unxz xzcat lzma unlzma zstd unzstd zstdcat
    lz4 unzip zip zipinfo 7z 7za cpio ar
    make gmake cmake ctest ninja meson gcc g++ cc c++ clang clang++ ld lld as ranlib
    strip nm objdump objcopy readelf size strings addr2line rustc rustfmt rustdoc
    cargo-clippy clippy-driver gofmt staticcheck golangci-lint tsc eslint prettier jest
    vitest mocha node pytest py.test black ruff flake8 pylint mypy isort pyright coverage
    javac java shellcheck shfmt ruby perl php lua luajit sqlite3 cloc tokei ssh-keygen ldd
    locale lscpu getconf
";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A program is in one list only: one that connects must not also be called local.
    #[test]
    fn no_program_is_both_connecting_and_local() {
        let local: HashSet<&str> = LOCAL.split_whitespace().collect();
        let connecting = ALWAYS
            .split_whitespace()
            .chain(SUBCOMMANDS.iter().flat_map(|s| s.names.split_whitespace()));
        for name in connecting {
            assert!(!local.contains(name), "{name} is in LOCAL and connects");
        }
        for modules in [PYTHON_MODULES_CONNECT] {
            for module in modules.split_whitespace() {
                assert!(
                    !PYTHON_MODULES_LOCAL.split_whitespace().any(|m| m == module),
                    "{module}"
                );
            }
        }
        for entry in SUBCOMMANDS {
            for sub in entry.connect {
                assert!(!entry.local.contains(sub), "{} {sub}", entry.names);
            }
        }
    }
}
