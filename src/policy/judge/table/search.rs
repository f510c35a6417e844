//! Search programs: grep (and egrep, fgrep), ripgrep, fd. What they read is every file
//! they search (found by `reads`); what can make them more than readers is refused or
//! judged: ripgrep's `--pre CMD` starts CMD for every file (a command of its own) and
//! `-z` starts decompressors chosen by file name; fd's `-x`/`-X` run a command line
//! for each file found, not judged here yet.

use super::{Entry, Options, ENTRY, GNU};

const GREP: Options = Options {
    manual: "grep(1) of GNU grep 3.8",
    flags: "E F G P i y w x z s v V b n H h o q a I r R L l c T Z U extended-regexp \
            fixed-strings basic-regexp perl-regexp ignore-case no-ignore-case word-regexp \
            line-regexp null-data no-messages invert-match byte-offset line-number \
            line-buffered with-filename no-filename only-matching quiet silent text \
            recursive dereference-recursive files-without-match files-with-matches count \
            initial-tab null no-group-separator binary",
    optional: "color colour",
    values: "e f m d D A B C regexp file max-count label binary-files directories devices \
             include exclude exclude-from exclude-dir before-context after-context context \
             group-separator",
    numeric: true,
    ..GNU
};

const RG: Options = Options {
    manual: "rg(1) of ripgrep 13.0.0",
    flags: "b s c l F L h i v n x U I N 0 o P p q S a u V H w auto-hybrid-regex \
            no-auto-hybrid-regex binary no-binary block-buffered no-block-buffered \
            byte-offset no-byte-offset case-sensitive column no-column count count-matches \
            crlf no-crlf debug trace files files-with-matches files-without-match \
            fixed-strings no-fixed-strings follow no-follow glob-case-insensitive \
            no-glob-case-insensitive heading no-heading hidden no-hidden ignore-case \
            ignore-file-case-insensitive no-ignore-file-case-insensitive include-zero \
            no-include-zero invert-match no-invert-match json no-json line-buffered \
            no-line-buffered line-number no-line-number line-regexp max-columns-preview \
            no-max-columns-preview mmap no-mmap multiline no-multiline multiline-dotall \
            no-multiline-dotall no-config no-filename no-ignore ignore no-ignore-dot \
            ignore-dot no-ignore-exclude ignore-exclude no-ignore-files ignore-files \
            no-ignore-global ignore-global no-ignore-messages ignore-messages \
            no-ignore-parent ignore-parent no-ignore-vcs ignore-vcs no-messages messages \
            no-pcre2-unicode pcre2-unicode no-require-git require-git no-unicode unicode \
            null null-data one-file-system no-one-file-system only-matching passthru \
            passthrough pcre2 no-pcre2 pcre2-version pretty quiet smart-case no-sort-files \
            sort-files stats no-stats text no-text trim no-trim type-list unrestricted \
            vimgrep with-filename word-regexp no-search-zip no-pre",
    values: "A B C E f g M m e r j t T after-context before-context color colors context \
             context-separator dfa-size-limit encoding engine field-context-separator \
             field-match-separator file glob iglob ignore-file max-columns max-count \
             max-depth max-filesize path-separator pre-glob regex-size-limit regexp replace \
             sort sortr threads type type-add type-clear type-not",
    programs: "pre",
    refused: &[(
        "z search-zip",
        "rg -z starts a decompressor for each compressed file (gzip, xz, zstd and others, \
         found on the PATH)",
    )],
    ..GNU
};

const FD: Options = Options {
    manual: "fd(1) of fd-find 8.6.0",
    flags: "H hidden I no-ignore no-ignore-vcs no-ignore-parent no-global-ignore-file u \
            unrestricted s case-sensitive i ignore-case g glob regex F fixed-strings a \
            absolute-path l list-details L follow p full-path 0 print0 prune q quiet \
            show-errors one-file-system no-hidden ignore no-follow",
    values: "d max-depth min-depth exact-depth E exclude t type e extension S size \
             changed-within changed-before change-newer-than change-older-than o owner \
             ignore-file c color j threads max-results path-separator search-path \
             max-buffer-time batch-size",
    chdir: "base-directory",
    refused: &[(
        "x exec X exec-batch",
        "fd -x and -X run a command line for each file found, which is not judged (find \
         -exec is)",
    )],
    ..GNU
};

pub(super) const ENTRIES: &[Entry] = &[
    Entry {
        names: &["grep", "egrep", "fgrep"],
        options: GREP,
        ..ENTRY
    },
    Entry {
        names: &["rg"],
        options: RG,
        ..ENTRY
    },
    Entry {
        names: &["fd", "fdfind"],
        options: FD,
        ..ENTRY
    },
];
