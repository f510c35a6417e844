//! git (git(1) and the subcommands' manuals of git 2.39, Debian 12): the global options,
//! and the options of the subcommands that look at a repository (status, diff, log,
//! show, blame, ls-files, rev-parse). Their options that start programs are refused: a
//! pager (`-p`), an external diff or a text conversion filter (`--ext-diff`,
//! `--textconv`), gpg (`--show-signature`), an editor (`grep -O`); `-c` and
//! `--config-env` can define any of these; `--exec-path` picks the programs git runs.
//! `--output=F` writes F. `-C`, `--git-dir` and `--work-tree` outside the workspace point
//! git at a repository whose configuration is not the workspace's own (protected) one,
//! and that configuration can run programs (`core.fsmonitor`, `core.pager`, hooks).
//! Other subcommands are judged by the rules as they are, with `--output` as a write.

use super::runners::outside;
use super::{scan, Effects, Options, Why, GNU};
use crate::policy::judge::words::Word;

const MANUAL: &str = "git(1) of git 2.39";

pub(super) const GLOBAL: Options = Options {
    manual: MANUAL,
    flags: "P no-pager no-replace-objects bare literal-pathspecs glob-pathspecs \
            noglob-pathspecs icase-pathspecs no-optional-locks",
    values: "namespace super-prefix list-cmds attr-source",
    chdir: "C git-dir work-tree",
    refused: &[
        (
            "c config-env",
            "git -c and --config-env can define an alias or a program that runs",
        ),
        (
            "exec-path",
            "git --exec-path picks the directory git runs its programs from",
        ),
        (
            "p paginate",
            "git -p starts a pager ($GIT_PAGER, $PAGER or less: a program the environment \
             picks)",
        ),
    ],
    permutes: false,
    ..GNU
};

const ELSEWHERE: &str = "it points git at a repository outside the workspace (-C, --git-dir, \
                         --work-tree), whose configuration can run programs";
const NO_INDEX_OUTSIDE: &str = "it compares files outside the workspace (git diff --no-index)";

/// What the diff, log and show subcommands refuse.
const STARTS: &[(&str, &str)] = &[
    (
        "ext-diff",
        "git --ext-diff runs the external diff program the configuration or GIT_EXTERNAL_DIFF \
         names",
    ),
    (
        "textconv",
        "git --textconv runs the text conversion filters the configuration names",
    ),
    (
        "show-signature",
        "git --show-signature runs gpg (or the program gpg.program names)",
    ),
];

/// The options of diff output, shared by diff, log and show.
macro_rules! diff_flags {
    () => {
        "p u patch s no-patch raw patch-with-raw patch-with-stat t \
    indent-heuristic no-indent-heuristic minimal patience histogram numstat shortstat summary \
    compact-summary cumulative z name-only name-status no-color no-color-moved \
    no-color-moved-ws no-renames rename-empty no-rename-empty check full-index binary \
    find-copies-harder D irreversible-delete pickaxe-all pickaxe-regex R no-relative a text \
    ignore-cr-at-eol ignore-space-at-eol b ignore-space-change w ignore-all-space \
    ignore-blank-lines W function-context exit-code quiet no-ext-diff no-textconv no-prefix \
    default-prefix ita-invisible-in-index ita-visible-in-index cached staged merge-base \
    no-index"
    };
}
macro_rules! diff_optional {
    () => {
        "U unified submodule color word-diff color-words color-moved \
    abbrev B break-rewrites M find-renames C find-copies relative stat dirstat X \
    dirstat-by-file ignore-submodules"
    };
}
macro_rules! diff_values {
    () => {
        "l diff-filter S G find-object O skip-to rotate-to I \
    ignore-matching-lines inter-hunk-context src-prefix dst-prefix line-prefix \
    output-indicator-new output-indicator-old output-indicator-context anchored \
    diff-algorithm stat-width stat-name-width stat-graph-width stat-count color-moved-ws \
    word-diff-regex"
    };
}

/// What log and show add to the diff options.
macro_rules! log_flags {
    () => {
        "all-match invert-grep i regexp-ignore-case basic-regexp E \
    extended-regexp F fixed-strings P perl-regexp remove-empty merges no-merges \
    no-min-parents no-max-parents first-parent exclude-first-parent-only not all reflog \
    alternate-refs single-worktree ignore-missing bisect cherry-mark cherry-pick left-only \
    right-only cherry walk-reflogs g merge boundary simplify-by-decoration show-pulls \
    full-history dense sparse simplify-merges date-order author-date-order topo-order reverse \
    do-walk abbrev-commit no-abbrev-commit oneline no-expand-tabs no-notes standard-notes \
    no-standard-notes relative-date parents children left-right graph c cc dd m \
    no-diff-merges combined-all-paths follow no-decorate clear-decorations source mailmap \
    use-mailmap no-mailmap no-use-mailmap log-size"
    };
}
macro_rules! log_optional {
    () => {
        "branches tags remotes ancestry-path no-walk pretty expand-tabs \
    notes show-notes show-linear-break decorate"
    };
}
macro_rules! log_values {
    () => {
        "n max-count skip since after until before author committer grep \
    min-parents max-parents glob exclude format encoding date diff-merges decorate-refs \
    decorate-refs-exclude L"
    };
}

/// diff, log and show: the lists above, with `--output` as a write.
const fn history(flags: &'static str, optional: &'static str, values: &'static str) -> Options {
    Options {
        manual: "git-diff(1), git-log(1) and git-show(1) of git 2.39",
        flags,
        optional,
        values,
        writes: "output",
        refused: STARTS,
        numeric: true,
        ..GNU
    }
}

const DIFF: Options = history(diff_flags!(), diff_optional!(), diff_values!());
const LOG: Options = history(
    concat!(diff_flags!(), " ", log_flags!()),
    concat!(diff_optional!(), " ", log_optional!()),
    concat!(diff_values!(), " ", log_values!()),
);

const STATUS: Options = Options {
    manual: "git-status(1) of git 2.39",
    flags: "s short b branch show-stash long v verbose z no-column ahead-behind \
            no-ahead-behind renames no-renames",
    optional: "porcelain u untracked-files ignore-submodules ignored column find-renames",
    ..GNU
};

const BLAME: Options = Options {
    manual: "git-blame(1) of git 2.39",
    flags: "b root show-stats score-debug f show-name n show-number s e show-email p \
            porcelain line-porcelain incremental c t l w first-parent color-lines \
            color-by-age progress no-progress minimal no-textconv",
    optional: "M C abbrev",
    values: "L S reverse date contents ignore-rev ignore-revs-file encoding",
    refused: STARTS,
    ..GNU
};

const LS_FILES: Options = Options {
    manual: "git-ls-files(1) of git 2.39",
    flags: "c cached d deleted m modified o others i ignored s stage k killed u unmerged z t \
            v f exclude-standard error-unmatch full-name recurse-submodules debug eol \
            deduplicate sparse directory no-empty-directory resolve-undo",
    optional: "abbrev",
    values: "x exclude X exclude-from exclude-per-directory with-tree format",
    ..GNU
};

const REV_PARSE: Options = Options {
    manual: "git-rev-parse(1) of git 2.39",
    flags: "sq-quote keep-dashdash stop-at-non-option stuck-long revs-only no-revs flags \
            no-flags verify q quiet sq not symbolic symbolic-full-name all local-env-vars \
            git-dir git-common-dir show-toplevel show-superproject-working-tree \
            shared-index-path absolute-git-dir is-inside-git-dir is-inside-work-tree \
            is-bare-repository is-shallow-repository show-cdup show-prefix",
    optional: "short abbrev-ref branches tags remotes show-object-format",
    values: "default prefix glob exclude disambiguate path-format resolve-git-dir git-path \
             since after until before",
    ..GNU
};

/// The subcommands judged here, and their options.
pub(super) const SUBCOMMANDS: &[(&[&str], &Options)] = &[
    (&["status"], &STATUS),
    (&["diff"], &DIFF),
    (&["log", "show", "whatchanged"], &LOG),
    (&["blame", "annotate"], &BLAME),
    (&["ls-files"], &LS_FILES),
    (&["rev-parse"], &REV_PARSE),
];

fn subcommand(name: &str) -> Option<&'static Options> {
    SUBCOMMANDS
        .iter()
        .find(|(names, _)| names.contains(&name))
        .map(|(_, options)| *options)
}

/// The subcommand of `git ARGS` judged here, if it is one: the first word after the
/// global options and their values (refused options included, so that `git -p log` is
/// a form of log whose option is refused).
pub(super) fn subcommand_of(args: &[Word]) -> Option<&'static str> {
    let mut i = 0;
    let name = loop {
        let word = args.get(i)?.exact()?;
        if !word.starts_with('-') {
            break word;
        }
        let separate_value = matches!(word, "-C" | "-c")
            || [GLOBAL.values, GLOBAL.chdir, "config-env"]
                .iter()
                .any(|list| {
                    list.split_ascii_whitespace()
                        .any(|n| word == format!("--{n}"))
                });
        i += if separate_value { 2 } else { 1 };
    };
    SUBCOMMANDS
        .iter()
        .flat_map(|(names, _)| names.iter())
        .find(|n| **n == name)
        .copied()
}

/// Why a git command line is not allowed, if it is not.
pub(super) fn judge(args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    let rest = scan(&GLOBAL, "git", args, effects)?;
    let chdirs: Vec<&Word> = effects.chdirs.iter().collect();
    outside(&chdirs, ELSEWHERE)?;
    let Some((sub, sub_args)) = rest.split_first() else {
        return Ok(());
    };
    let sub_args: Vec<Word> = sub_args.iter().map(|w| (*w).clone()).collect();
    let name = sub.exact().unwrap_or_default();
    let Some(options) = subcommand(name) else {
        return other(&sub_args, effects);
    };
    let operands = scan(options, &format!("git {name}"), &sub_args, effects)?;
    if name == "diff" && sub_args.iter().any(|w| w.exact() == Some("--no-index")) {
        outside(&operands, NO_INDEX_OUTSIDE)?;
    }
    Ok(())
}

/// A subcommand not judged here: only `--output FILE` is known, as a write.
fn other(args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    for (i, arg) in args.iter().enumerate() {
        if let Some(target) = arg.text.strip_prefix("--output=") {
            effects.writes.push(match arg.exact() {
                Some(_) => Word::literal(target),
                None => Word::unknown(target, false),
            });
        } else if arg.text == "--output" {
            effects.writes.extend(args.get(i + 1).cloned());
        }
    }
    Ok(())
}
