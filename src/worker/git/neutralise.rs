//! Git with the repository's executable configuration neutralised.
//!
//! The worker runs git in the workspace with the user's rights, and the agent can write
//! the repository's own configuration (`.git/config`, `config.worktree`, files they
//! include) and hooks. Nothing it wrote may run as the worker, so every git command starts
//! from [`command`] with `-c` overrides (the command-line scope, above every file) that:
//!
//! - always turn off what runs programs on the commands the worker uses: hooks (the hooks
//!   directory and configured `hook.*` hooks), fsmonitor, pagers, editors, external diff,
//!   signing, the `ext::` transport, submodule recursion, auto-maintenance;
//! - for every key naming a program that the repository's own scopes set (`local`,
//!   `worktree`, and anything included from them) — filter and diff drivers, credential
//!   helpers, `core.sshCommand`, `gpg.*.program`, `remote.*.receivepack`, … — put back what
//!   the user's and the system's configuration say (or a neutral value), so the operator's
//!   credential helper and ssh command keep working for the push.
//!
//! The environment loses the variables that would point git at another repository or
//! inject configuration. Why each choice: docs/AGENTS.md, "Git in the workspace".

use std::collections::HashSet;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

use super::GitError;

/// Options every git invocation carries before its subcommand: no pager whatever stdout is,
/// and objects as stored (`refs/replace/*` the agent writes cannot swap the start's tree).
const GLOBAL_OPTIONS: [&str; 2] = ["--no-pager", "--no-replace-objects"];

/// Overrides that hold whatever any configuration says; applied last, so they win.
const FIXED: [&str; 14] = [
    // Hooks never run on the worker's git: the repository's hooks are the agent's to write.
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=true",
    "sequence.editor=true",
    "diff.external=",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "push.gpgSign=false",
    // `ext::` runs an arbitrary command as a transport.
    "protocol.ext.allow=never",
    // A submodule's repository has configuration of its own, not listed here.
    "submodule.recurse=false",
    "push.recurseSubmodules=no",
    // `git commit` starts `git maintenance run --auto` (prefetch, gc, their hooks).
    "maintenance.auto=false",
    "gc.auto=0",
];

/// Every hook event (githooks(5), Git 2.55): `hook.<event>.enabled=false` switches off
/// configured hooks of that event in Git 2.54 and later; older Git ignores the key.
const HOOK_EVENTS: [&str; 28] = [
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// Configuration scopes that are not the repository's: the user's (`global`), the admin's
/// (`system`), and the command line's. Git trusts the same ones for `safe.directory`.
const TRUSTED_SCOPES: [&str; 3] = ["system", "global", "command"];

/// Variables the worker's own environment may carry that would point git at another
/// repository, index or object store, or inject configuration or a diff program.
const CLEARED_ENV: [&str; 19] = [
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_PREFIX",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
    "GIT_REPLACE_REF_BASE",
    "GIT_QUARANTINE_PATH",
    "GIT_ATTR_SOURCE",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
    "GIT_DIFF_OPTS",
];

/// The command for a local-path push's receiving side, which runs on this machine in a
/// repository that the remote URL (repository configuration) chooses: hooks, auto-gc and
/// an updated checkout there are as much the agent's as the workspace's own.
pub(super) const RECEIVE_PACK: &str = "git -c core.hooksPath=/dev/null \
     -c core.fsmonitor=false -c core.alternateRefsCommand= -c receive.autogc=false \
     -c receive.denyCurrentBranch=refuse -c hook.pre-receive.enabled=false \
     -c hook.update.enabled=false -c hook.proc-receive.enabled=false \
     -c hook.post-receive.enabled=false -c hook.post-update.enabled=false \
     -c hook.reference-transaction.enabled=false -c hook.push-to-checkout.enabled=false \
     receive-pack";

/// What neutralising one configuration listing gives.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Neutralised {
    /// `key=value` arguments for `git -c`, in order (later ones win).
    pub overrides: Vec<String>,
    /// The repository sets `core.worktree`: the caller checks it still names the workspace.
    pub worktree_redirected: bool,
    /// The repository sets `url.<base>.insteadOf`/`pushInsteadOf`, which `-c` cannot take
    /// back (they add up): the caller must not trust a URL it did not expand through git.
    pub rewrites_urls: bool,
}

/// How a repository-set key naming a program is taken back.
enum Neutral {
    /// The last trusted value, else this one.
    To(&'static str),
    /// A list an empty value resets (`credential.helper`): empty, then the trusted values.
    Reset,
    /// `gpg[.<format>].program`: the last trusted value, else the format's own program.
    GpgProgram,
    /// `protocol[.<name>].allow`: the last trusted value, else Git's default for it.
    ProtocolDefault,
    /// `core.gitProxy` adds up and cannot be taken back: the `git://` transport goes.
    NoGitProtocol,
}

/// The rule for a key (section and variable lower-case, the subsection as written).
fn rule(section: &str, subsection: Option<&str>, variable: &str) -> Option<Neutral> {
    use Neutral::{GpgProgram, NoGitProtocol, ProtocolDefault, Reset, To};
    Some(match (section, subsection, variable) {
        ("core", None, "sshcommand") => To("ssh"),
        ("core", None, "askpass") => To(""),
        ("core", None, "alternaterefscommand") => To(""),
        ("core", None, "gitproxy") => NoGitProtocol,
        ("pager", None, _) => To("false"),
        ("diff", Some(_), "command" | "textconv") => To(""),
        ("filter", Some(_), "clean" | "smudge" | "process") => To(""),
        ("filter", Some(_), "required") => To("false"),
        ("merge", Some(_), "driver") => To("false"),
        ("difftool" | "mergetool", Some(_), "cmd") => To("false"),
        ("credential", _, "helper") => Reset,
        ("gpg", _, "program") => GpgProgram,
        ("gpg", Some("ssh"), "defaultkeycommand") => To(""),
        ("remote", Some(_), "receivepack") => To("git-receive-pack"),
        ("remote", Some(_), "uploadpack") => To("git-upload-pack"),
        ("protocol", _, "allow") => ProtocolDefault,
        // libcurl writes its cookie jar to this path on a push over HTTP: a file the
        // agent names (`~/.bashrc`) written as the worker. Empty turns saving off.
        ("http", _, "cookiefile") => To(""),
        ("http", _, "savecookies") => To("false"),
        _ => return None,
    })
}

/// One entry of `git config --list --show-scope -z`.
struct Entry<'a> {
    /// From the system, global or command-line scope.
    trusted: bool,
    /// The key as git canonicalises it.
    key: &'a str,
    /// The value; `None` for a bare key (boolean true).
    value: Option<&'a [u8]>,
}

/// Splits a key into section, subsection and variable.
fn split_key(key: &str) -> (&str, Option<&str>, &str) {
    let (section, rest) = key.split_once('.').unwrap_or((key, ""));
    match rest.rsplit_once('.') {
        Some((subsection, variable)) => (section, Some(subsection), variable),
        None => (section, None, rest),
    }
}

/// Parses `scope NUL key LF value NUL …` (a bare key has no LF and no value).
fn parse(listing: &[u8]) -> Result<Vec<Entry<'_>>, GitError> {
    let mut fields = listing.split(|b| *b == 0).filter(|f| !f.is_empty());
    let mut entries = Vec::new();
    while let Some(scope) = fields.next() {
        let item = fields
            .next()
            .ok_or_else(|| unreadable("a scope without a key"))?;
        let (key, value) = match item.iter().position(|b| *b == b'\n') {
            Some(lf) => (&item[..lf], Some(&item[lf + 1..])),
            None => (item, None),
        };
        let key = std::str::from_utf8(key).map_err(|_| unreadable("a key that is not UTF-8"))?;
        entries.push(Entry {
            trusted: TRUSTED_SCOPES.iter().any(|s| s.as_bytes() == scope),
            key,
            value,
        });
    }
    Ok(entries)
}

fn unreadable(what: &str) -> GitError {
    GitError::Refused(format!(
        "the repository's git configuration cannot be neutralised: {what}"
    ))
}

/// The overrides for a `git config --list --show-scope --includes -z` listing (public for
/// its tests).
#[doc(hidden)]
pub fn neutralise(listing: &[u8]) -> Result<Neutralised, GitError> {
    let entries = parse(listing)?;
    let mut out = Neutralised::default();
    let mut done: HashSet<&str> = HashSet::new();
    for entry in entries.iter().filter(|e| !e.trusted) {
        let (section, subsection, variable) = split_key(entry.key);
        match (section, variable) {
            ("core", "worktree") if subsection.is_none() => out.worktree_redirected = true,
            ("url", "insteadof" | "pushinsteadof") => out.rewrites_urls = true,
            _ => {}
        }
        let Some(neutral) = rule(section, subsection, variable) else {
            continue;
        };
        if !done.insert(entry.key) {
            continue;
        }
        if entry.key.contains('=') {
            // `-c` splits at the first '=': the override would set another key.
            return Err(unreadable(&format!("the key {:?} contains '='", entry.key)));
        }
        let trusted: Vec<&[u8]> = entries
            .iter()
            .filter(|e| e.trusted && e.key == entry.key)
            .map(|e| e.value.unwrap_or(b"true"))
            .collect();
        let last = match trusted.last() {
            Some(value) => Some(
                std::str::from_utf8(value).map_err(|_| unreadable("a value that is not UTF-8"))?,
            ),
            None => None,
        };
        let key = entry.key;
        match neutral {
            Neutral::To(neutral) => out
                .overrides
                .push(format!("{key}={}", last.unwrap_or(neutral))),
            Neutral::GpgProgram => {
                let program = match subsection {
                    None | Some("openpgp") => "gpg",
                    Some("x509") => "gpgsm",
                    Some("ssh") => "ssh-keygen",
                    Some(_) => "",
                };
                out.overrides
                    .push(format!("{key}={}", last.unwrap_or(program)));
            }
            Neutral::ProtocolDefault => {
                let default = match subsection {
                    Some("ext") => "never",
                    Some("http" | "https" | "git" | "ssh") => "always",
                    _ => "user",
                };
                out.overrides
                    .push(format!("{key}={}", last.unwrap_or(default)));
            }
            Neutral::Reset => {
                out.overrides.push(format!("{key}="));
                for value in trusted {
                    let value = std::str::from_utf8(value)
                        .map_err(|_| unreadable("a value that is not UTF-8"))?;
                    out.overrides.push(format!("{key}={value}"));
                }
            }
            Neutral::NoGitProtocol => out.overrides.push("protocol.git.allow=never".into()),
        }
    }
    // Configured hooks, whoever configured them: hooks never run on the worker's git.
    let mut hooks_off: HashSet<&str> = HashSet::new();
    for entry in &entries {
        if let ("hook", Some(name), _) = split_key(entry.key) {
            if name.contains('=') {
                return Err(unreadable(&format!("the hook name {name:?} contains '='")));
            }
            if !HOOK_EVENTS.contains(&name) && hooks_off.insert(name) {
                out.overrides.push(format!("hook.{name}.enabled=false"));
            }
        }
    }
    out.overrides.extend(FIXED.iter().map(|o| o.to_string()));
    out.overrides.extend(
        HOOK_EVENTS
            .iter()
            .map(|event| format!("hook.{event}.enabled=false")),
    );
    Ok(out)
}

/// A git command in `dir` with `overrides`, the environment cleaned, stdin closed, and a
/// pager, editor or terminal prompt ruled out; `env` is what the caller sets on top
/// (`GIT_INDEX_FILE` for a scratch index).
pub(super) fn command(
    dir: &Path,
    overrides: &[String],
    args: &[&str],
    env: &[(&str, &OsStr)],
) -> Command {
    let mut command = Command::new("git");
    command.args(GLOBAL_OPTIONS);
    for o in overrides {
        command.arg("-c").arg(o);
    }
    command.args(args).current_dir(dir).stdin(Stdio::null());
    clean_env(&mut command);
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Clears the inherited variables git must not see and sets the ones that keep it from
/// prompting, paging, editing or fetching missing objects behind the worker's back.
pub(super) fn clean_env(command: &mut Command) {
    for key in CLEARED_ENV {
        command.env_remove(key);
    }
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("GIT_CONFIG_KEY_") || key.starts_with("GIT_CONFIG_VALUE_") {
            command.env_remove(key.as_ref());
        }
    }
    for (key, value) in [
        ("GIT_TERMINAL_PROMPT", "0"),
        ("GIT_PAGER", "cat"),
        ("PAGER", "cat"),
        ("GIT_EDITOR", "true"),
        ("GIT_SEQUENCE_EDITOR", "true"),
        ("GIT_NO_LAZY_FETCH", "1"),
    ] {
        command.env(key, value);
    }
}

/// `overrides` in the form git passes `-c` to the programs it starts
/// (`GIT_CONFIG_PARAMETERS`, understood by every Git since 1.7), for a program such as
/// `gh` that runs git itself.
pub(super) fn config_parameters(overrides: &[String]) -> String {
    overrides
        .iter()
        .map(|o| format!("'{}'", o.replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ")
}
