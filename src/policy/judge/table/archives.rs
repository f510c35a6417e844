//! Archives and compressors: tar, zip, unzip, gzip, bzip2, xz, zstd. What they write
//! depends on the mode: `tar c`/`r`/`u` write the archive named by `-f`, `tar x` and
//! `unzip` write the archive's files (not known from the line, so never allowed as known
//! writes), a compressor replaces each file it is given unless it writes to standard
//! output (`-c`, the `*cat` names) or only tests or lists. Options that start programs
//! (`tar -I`, `--to-command`, `--checkpoint-action`, `zip -TT`, `unzip -M`'s pager) are
//! refused, and so is an archive on another machine (`tar -f host:file`, through rsh).

use super::{scan, Effects, Entry, Options, Why, ENTRY, GNU};
use crate::policy::judge::words::Word;

const TAR_REFUSED: &[(&str, &str)] = &[
    (
        "I use-compress-program",
        "tar -I starts the compression program it names (a command line, run by the shell)",
    ),
    (
        "to-command checkpoint-action F info-script new-volume-script rsh-command \
         rmt-command",
        "it gives tar an option that runs a command (--to-command, --checkpoint-action, \
         --info-script, --rsh-command and the like)",
    ),
    (
        "remove-files",
        "tar --remove-files deletes the files it archives",
    ),
];

const TAR: Options = Options {
    manual: "tar(1) of GNU tar 1.34",
    flags: "A c d r t u x v z j J Z a k U p s m O S h l W i B P M G w R \
            catenate concatenate create diff compare delete append list test-label update \
            extract get verbose gzip gunzip ungzip bzip2 xz lzip lzma lzop zstd compress \
            uncompress auto-compress no-auto-compress keep-old-files keep-newer-files \
            keep-directory-symlink skip-old-files overwrite overwrite-dir recursive-unlink \
            unlink-first no-overwrite-dir preserve-permissions same-permissions preserve \
            no-same-permissions preserve-order same-order same-owner no-same-owner \
            numeric-owner touch delay-directory-restore no-delay-directory-restore \
            to-stdout sparse dereference hard-dereference check-links verify \
            ignore-failed-read ignore-zeros read-full-records absolute-names \
            show-transformed-names show-stored-names show-defaults no-recursion recursion \
            anchored no-anchored ignore-case no-ignore-case wildcards no-wildcards \
            wildcards-match-slash no-wildcards-match-slash null no-null unquote no-unquote \
            exclude-backups exclude-caches exclude-caches-all exclude-caches-under exclude-vcs \
            exclude-vcs-ignores one-file-system full-time utc interactive confirmation \
            block-number force-local seek no-seek multi-volume incremental no-check-device \
            check-device ignore-command-error no-ignore-command-error xattrs no-xattrs \
            selinux no-selinux acls no-acls clamp-mtime null",
    optional: "totals checkpoint backup occurrence one-top-level atime-preserve",
    values: "f file T files-from X exclude-from exclude H format b blocking-factor \
             record-size L tape-length N newer after-date newer-mtime owner group mode mtime \
             transform xform strip-components suffix label V sparse-version pax-option \
             quoting-style quote-chars no-quote-chars hole-detection group-map owner-map \
             xattrs-include xattrs-exclude warning level",
    writes: "g listed-incremental index-file volno-file",
    chdir: "C directory",
    refused: TAR_REFUSED,
    ..GNU
};

/// The modes that write the archive, and those that write the archive's files.
const WRITES_ARCHIVE: &[&str] = &[
    "c",
    "r",
    "u",
    "A",
    "create",
    "append",
    "update",
    "catenate",
    "concatenate",
    "delete",
];
const EXTRACTS: &[&str] = &["x", "extract", "get"];

/// `tar MODE [options] [files]`, the first word also in the old style without a dash
/// (`tar czf out.tgz dir`), whose options' values follow in the order of the letters.
fn tar(options: &Options, name: &str, args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    let mut args = args.to_vec();
    if let Some(first) = args.first_mut().filter(|w| !w.text.starts_with('-')) {
        let Some(letters) = first.exact() else {
            return Err(super::DYNAMIC.into());
        };
        let (valued, plain): (String, String) = letters
            .chars()
            .partition(|c| options.kind(c.encode_utf8(&mut [0; 4])) != Some(super::Kind::Flag));
        if valued.chars().count() > 1 {
            return Err(
                "an old-style tar cluster with more than one option that takes a value \
                        (its values are read in an order the judge does not follow)"
                    .into(),
            );
        }
        *first = Word::literal(format!("-{plain}{valued}"));
    }
    let given = |names: &[&str]| args.iter().any(|w| mentions(options, w, names));
    scan(options, name, &args, effects)?;
    let archive = effects
        .values
        .iter()
        .find(|(option, _)| option == "f" || option == "file")
        .map(|(_, value)| value.clone());
    let remote = archive.as_ref().is_some_and(|a| remote(&a.text));
    if remote && !given(&["force-local"]) {
        return Err("tar -f HOST:FILE reads or writes an archive on another machine (rsh)".into());
    }
    if given(WRITES_ARCHIVE) {
        effects.writes.extend(archive.filter(|a| a.text != "-"));
    } else if given(EXTRACTS) && !given(&["O", "to-stdout"]) {
        effects
            .writes
            .push(Word::unknown("<the files in the archive>", false));
    }
    Ok(())
}

/// Whether an archive name is `HOST:FILE`, which tar reaches through rsh.
fn remote(archive: &str) -> bool {
    archive
        .split_once(':')
        .is_some_and(|(host, _)| !host.is_empty() && !host.contains('/'))
}

/// Whether the option word `word` gives one of `names` (short letters in a cluster too).
fn mentions(options: &Options, word: &Word, names: &[&str]) -> bool {
    let Some(arg) = word.exact() else {
        return false;
    };
    if let Some(long) = arg.strip_prefix("--") {
        let long = long.split_once('=').map_or(long, |(n, _)| n);
        return names.contains(&long);
    }
    let Some(cluster) = arg.strip_prefix('-') else {
        return false;
    };
    for (name, _) in super::cluster(options, cluster) {
        if names.contains(&name) {
            return true;
        }
    }
    false
}

/// A compressor replaces each file it is given (writes it), unless it writes to standard
/// output, tests or lists, or is called as its `*cat`.
fn compressor(
    options: &Options,
    name: &str,
    args: &[Word],
    effects: &mut Effects,
) -> Result<(), Why> {
    let operands = scan(options, name, args, effects)?;
    let to_stdout = ["c", "stdout", "to-stdout", "t", "test", "l", "list"];
    let leaves_files =
        name.ends_with("cat") || args.iter().any(|w| mentions(options, w, &to_stdout));
    if !leaves_files {
        let replaced = operands.iter().filter(|w| w.exact() != Some("-"));
        effects.writes.extend(replaced.map(|w| (*w).clone()));
    }
    Ok(())
}

/// `unzip ZIP [members]` extracts (writes the archive's files) unless it lists, tests or
/// prints them.
fn unzip(options: &Options, name: &str, args: &[Word], effects: &mut Effects) -> Result<(), Why> {
    scan(options, name, args, effects)?;
    let reads_only = ["l", "v", "t", "z", "Z", "p", "c"];
    if !args.iter().any(|w| mentions(options, w, &reads_only)) {
        effects
            .writes
            .push(Word::unknown("<the files in the archive>", false));
    }
    Ok(())
}

const fn compressor_entry(names: &'static [&'static str], options: Options) -> Entry {
    Entry {
        names,
        options,
        judged_by: Some(compressor),
        ..ENTRY
    }
}

pub(super) const ENTRIES: &[Entry] = &[
    Entry {
        names: &["tar"],
        options: TAR,
        judged_by: Some(tar),
        ..ENTRY
    },
    compressor_entry(
        &["gzip", "gunzip", "zcat"],
        Options {
            manual: "gzip(1) of gzip 1.12",
            flags: concat!(
                "c d f k l n N q r t v 1 2 3 4 5 6 7 8 9 stdout to-stdout decompress ",
                "uncompress force keep list no-name name quiet recursive rsyncable test ",
                "verbose fast best synchronous"
            ),
            values: "S suffix",
            ..GNU
        },
    ),
    compressor_entry(
        &["bzip2", "bunzip2", "bzcat"],
        Options {
            manual: "bzip2(1) of bzip2 1.0.8",
            flags: concat!(
                "c d z t f k s q v L V 1 2 3 4 5 6 7 8 9 stdout decompress compress test ",
                "force keep small quiet verbose license fast best"
            ),
            ..GNU
        },
    ),
    compressor_entry(
        &["xz", "unxz", "xzcat", "lzma", "unlzma", "lzcat"],
        Options {
            manual: "xz(1) of XZ Utils 5.4.1",
            flags: concat!(
                "z d t l k f c q v Q H h V e 0 1 2 3 4 5 6 7 8 9 compress decompress ",
                "uncompress test list keep force stdout to-stdout single-stream no-sparse ",
                "quiet verbose no-warn robot long-help extreme ignore-check no-adjust ",
                "info-memory"
            ),
            optional: "lzma1 lzma2 x86 powerpc ia64 arm armthumb arm64 sparc delta",
            values: concat!(
                "S F C T M suffix format check threads memlimit memory memlimit-compress ",
                "memlimit-decompress memlimit-mt block-size block-list flush-timeout files ",
                "files0"
            ),
            ..GNU
        },
    ),
    compressor_entry(
        &["zstd", "unzstd", "zstdcat"],
        Options {
            manual: "zstd(1) of zstd 1.5.4",
            flags: concat!(
                "z d t l k f c q v r compress decompress uncompress test list keep rm force ",
                "stdout quiet verbose ultra check no-check content-size no-content-size ",
                "progress no-progress sparse no-sparse exclude-compressed rsyncable ",
                "single-thread no-dictID"
            ),
            optional: "T B M fast long adapt",
            values: "D format stream-size size-hint filelist patch-from",
            writes: "o output-dir-flat output-dir-mirror",
            numeric: true,
            ..GNU
        },
    ),
    Entry {
        names: &["unzip"],
        options: Options {
            manual: "unzip(1) of UnZip 6.00",
            flags: "l v t z Z p c f u n o j C L X a b q U V K x T D",
            values: "d P O I",
            refused: &[("M", "unzip -M pipes its output through more, a pager")],
            ..GNU
        },
        judged_by: Some(unzip),
        ..ENTRY
    },
    Entry {
        names: &["zip"],
        options: Options {
            manual: "zip(1) of Zip 3.0",
            flags: "r R q v j J u f d D x i y X o k g e A F 0 1 2 3 4 5 6 7 8 9 \
                    recurse-paths quiet verbose junk-paths update freshen delete \
                    no-dir-entries exclude include symlinks no-extra latest-time adjust-sfx \
                    fix grow encrypt",
            values: "n t P suffixes from-date password",
            writes: "O b output-file temp-path",
            refused: &[
                (
                    "T TT test unzip-command",
                    "zip -T tests the archive with unzip (-TT: a command it names)",
                ),
                ("m move", "zip -m deletes the files it adds"),
                (
                    "l s logfile-path split-size",
                    "it gives zip an option that writes other files (log files, split \
                     archives) or whose long forms the judge does not read (-l…, -s…)",
                ),
            ],
            ..GNU
        },
        writes_operand: Some(0),
        ..ENTRY
    },
];
