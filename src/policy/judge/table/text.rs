//! Text and file utilities (GNU coreutils 9.1 unless named): readers whose every option
//! is listed, so that an option that writes or runs cannot pass as a reader's. What they
//! write: `uniq IN OUT` writes OUT, `sort -o F` writes F (and `-T DIR` its temporary
//! files in DIR); what they start: `sort --compress-program PROG`, and `diff -l`, which
//! pipes its output through `pr`.

use super::{Entry, Options, ENTRY, GNU};

const COREUTILS: &str = "coreutils 9.1";

/// An entry of coreutils with these options.
const fn coreutils(
    names: &'static [&'static str],
    flags: &'static str,
    values: &'static str,
) -> Entry {
    Entry {
        names,
        options: Options {
            manual: COREUTILS,
            flags,
            values,
            ..GNU
        },
        ..ENTRY
    }
}

const ZERO: &str = "z zero-terminated";

pub(super) const ENTRIES: &[Entry] = &[
    coreutils(
        &["cat"],
        "A b e E n s t T u v show-all number-nonblank show-ends number squeeze-blank \
         show-tabs show-nonprinting",
        "",
    ),
    Entry {
        names: &["head"],
        options: Options {
            manual: COREUTILS,
            flags: "q v z quiet silent verbose zero-terminated",
            values: "c n bytes lines",
            numeric: true,
            ..GNU
        },
        ..ENTRY
    },
    Entry {
        names: &["tail"],
        options: Options {
            manual: COREUTILS,
            flags: "f F q v z quiet silent retry verbose zero-terminated",
            optional: "follow",
            values: "c n s bytes lines pid sleep-interval max-unchanged-stats",
            numeric: true,
            ..GNU
        },
        ..ENTRY
    },
    coreutils(
        &["wc"],
        "c m l L w bytes chars lines max-line-length words",
        "files0-from total",
    ),
    coreutils(
        &["cut"],
        "n s z M complement only-delimited zero-terminated",
        "b c d f bytes characters delimiter fields output-delimiter",
    ),
    coreutils(
        &["tr"],
        "c C d s t complement delete squeeze-repeats truncate-set1",
        "",
    ),
    coreutils(
        &["nl"],
        "p no-renumber",
        "b d f h i l n s v w body-numbering section-delimiter footer-numbering \
         header-numbering line-increment join-blank-lines number-format number-separator \
         starting-line-number number-width",
    ),
    Entry {
        names: &["uniq"],
        options: Options {
            manual: COREUTILS,
            flags: "c d D i u z count repeated ignore-case unique zero-terminated",
            optional: "all-repeated group",
            values: "f s w skip-fields skip-chars check-chars",
            numeric: true,
            ..GNU
        },
        writes_operand: Some(1),
        ..ENTRY
    },
    coreutils(
        &["comm"],
        "1 2 3 check-order nocheck-order total z zero-terminated",
        "output-delimiter",
    ),
    coreutils(&["paste"], "s z serial zero-terminated", "d delimiters"),
    coreutils(
        &["join"],
        "i ignore-case check-order nocheck-order header z zero-terminated",
        "a e j o t v 1 2",
    ),
    coreutils(&["fold"], "b s bytes spaces", "w width"),
    coreutils(&["tac"], "b r before regex", "s separator"),
    coreutils(&["base64", "base32"], "d i decode ignore-garbage", "w wrap"),
    coreutils(&["basename"], "a z multiple zero", "s suffix"),
    coreutils(&["dirname"], ZERO, ""),
    coreutils(
        &["realpath"],
        "e m L P q s z canonicalize-existing canonicalize-missing logical physical quiet \
         strip no-symlinks zero",
        "relative-to relative-base",
    ),
    coreutils(
        &["readlink"],
        "f e m n q s v z canonicalize canonicalize-existing canonicalize-missing no-newline \
         quiet silent verbose zero",
        "",
    ),
    Entry {
        names: &["ls"],
        options: Options {
            manual: COREUTILS,
            flags: "a A b B c C d D f F g G h H i k l L m n N o p q Q r R s S t u U v x X \
                    Z 1 all almost-all author escape ignore-backups directory dired \
                    file-type full-time no-group human-readable si \
                    dereference-command-line dereference-command-line-symlink-to-dir \
                    group-directories-first inode kibibytes dereference literal \
                    numeric-uid-gid hide-control-chars show-control-chars quote-name \
                    reverse recursive size zero context",
            optional: "color classify hyperlink indicator-style",
            values: "I T w block-size format hide ignore quoting-style sort time tabsize \
                     width time-style",
            ..GNU
        },
        ..ENTRY
    },
    coreutils(
        &["stat"],
        "L f t dereference file-system terse",
        "c cached format printf",
    ),
    Entry {
        names: &["du"],
        options: Options {
            manual: COREUTILS,
            flags: "0 a b c D H h k L l m P S s x null all apparent-size bytes total \
                    dereference-args human-readable inodes dereference count-links \
                    no-dereference separate-dirs si summarize one-file-system",
            optional: "time",
            values: "B d t X block-size max-depth files0-from threshold time-style \
                     exclude-from exclude",
            ..GNU
        },
        ..ENTRY
    },
    Entry {
        names: &["df"],
        options: Options {
            manual: COREUTILS,
            flags: "a h H i k l P T v all human-readable si inodes local no-sync \
                    portability sync total print-type",
            optional: "output",
            values: "B t x block-size type exclude-type",
            ..GNU
        },
        ..ENTRY
    },
    Entry {
        names: &["sort"],
        options: Options {
            manual: COREUTILS,
            flags: "b d f g i M h n R r V c C m s u z ignore-leading-blanks \
                    dictionary-order ignore-case general-numeric-sort ignore-nonprinting \
                    month-sort human-numeric-sort numeric-sort random-sort reverse \
                    version-sort debug merge stable unique zero-terminated",
            optional: "check",
            values: "k S t key buffer-size field-separator random-source sort batch-size \
                     files0-from parallel",
            writes: "o output T temporary-directory",
            programs: "compress-program",
            ..GNU
        },
        ..ENTRY
    },
    Entry {
        names: &["diff"],
        options: Options {
            manual: "diff(1) of GNU diffutils 3.8",
            flags: "q s c u e n y p t T r N i E Z b w B a d normal brief \
                    report-identical-files ed rcs side-by-side left-column \
                    suppress-common-lines show-c-function expand-tabs initial-tab \
                    suppress-blank-empty recursive no-dereference new-file \
                    unidirectional-new-file ignore-file-name-case \
                    no-ignore-file-name-case ignore-case ignore-tab-expansion \
                    ignore-trailing-space ignore-space-change ignore-all-space \
                    ignore-blank-lines text strip-trailing-cr minimal speed-large-files",
            optional: "context unified color",
            values: "C U W F x X S I D width show-function-line label tabsize exclude \
                     exclude-from starting-file from-file to-file ignore-matching-lines \
                     ifdef old-group-format new-group-format changed-group-format \
                     unchanged-group-format line-format old-line-format new-line-format \
                     unchanged-line-format horizon-lines palette",
            refused: &[(
                "l paginate",
                "diff -l pipes its output through pr, a program found on the PATH",
            )],
            numeric: true,
            ..GNU
        },
        ..ENTRY
    },
    Entry {
        names: &["cmp"],
        options: Options {
            manual: "cmp(1) of GNU diffutils 3.8",
            flags: "b l s print-bytes verbose quiet silent",
            values: "i n ignore-initial bytes",
            ..GNU
        },
        ..ENTRY
    },
];
