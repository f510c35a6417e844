//! Runs a line under real bash in a scratch directory where every command is a logging
//! stub, and reports what the line did: which commands ran and which files changed.
//!
//! Layout of a sandbox (one per worker thread, reset before every line):
//!
//! ```text
//! root/
//!   bin/    the only PATH entry: logging stubs, the real bash/sh, the real wrappers
//!   ws/     the working directory and workspace root; holds .env, README.md, out/
//!   home/   HOME; holds out/ (so a missed `cd ~` followed by `> out/x` shows)
//!   log     one line per stub run: its name and arguments
//! ```
//!
//! Stubs write to the log at a path written into them, so a line that clears the
//! environment (`env -i`) is still seen. Wrapper programs that exist on this machine are
//! linked in and really run their command (found through PATH, so a stub); `sudo` and
//! any missing wrapper get a stub that skips sudo-style options and runs the rest.
//!
//! bash runs in a session of its own (`setsid`); a line is over when bash has exited, its
//! output pipes are closed and no process of the session is left, so background jobs are
//! seen. After the time limit the whole session is killed, repeatedly until it is empty
//! (a line can fork faster than one pass kills). `FUNCNEST` bounds self-calling functions.

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

/// Commands that are only ever logging stubs (the denied ones among them).
const STUBS: &[&str] = &[
    "rm", "curl", "wget", "touch", "git", "cargo", "ls", "cat", "grep", "echo", "printf", "true",
    "false", "test", "pwd", "kill", "sleep", "head", "tail", "wc", "sort", "tee", "diff", "make",
    "npm", "node", "python", "python3", "perl", "awk", "sed", "ssh", "nc", "mkdir", "cp", "mv",
    "ln", "chmod", "id", "date", "yes",
];

/// Wrappers linked to the real program when it exists.
const REAL_WRAPPERS: &[&str] = &[
    "env", "timeout", "nice", "nohup", "ionice", "flock", "taskset", "setsid", "stdbuf", "xargs",
    "find",
];

/// Where to look for the real wrappers.
const SYSTEM_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// A file or directory as seen in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    Dir,
    /// Length and modification time (every write sets the latter, to the nanosecond).
    File(u64, Option<SystemTime>),
    Link(PathBuf),
    Other,
}

/// A path under the sandbox root that a line created, changed or removed.
#[derive(Debug, Clone)]
pub struct Change {
    /// Relative to the sandbox root (`ws/pwned`, `home/out/pwned`).
    pub path: PathBuf,
    pub what: &'static str,
}

impl Change {
    /// Whether the change is one the profile allows (under `ws/out/`).
    pub fn is_in_out(&self) -> bool {
        self.path.starts_with("ws/out") && self.path != Path::new("ws/out")
    }
}

/// What one line did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// The stub log: `name arg…` per run, arguments `%q`-quoted.
    pub log: Vec<String>,
    pub changes: Vec<Change>,
    pub timed_out: bool,
    /// Processes of the line still alive after it was killed (0 unless it forks faster
    /// than they can be killed).
    pub leaked: usize,
    /// How long the line took, background jobs included.
    pub elapsed: Duration,
    /// The start of bash's stderr, for the report.
    pub stderr: String,
}

impl Outcome {
    /// The denied commands that ran.
    pub fn denied_ran(&self, denied: &[&str]) -> Vec<&str> {
        self.log
            .iter()
            .filter_map(|l| l.split(' ').next())
            .filter(|name| denied.contains(name))
            .collect()
    }

    /// Changes outside `ws/out/`.
    pub fn stray_changes(&self) -> Vec<&Change> {
        self.changes.iter().filter(|c| !c.is_in_out()).collect()
    }

    /// Whether the line ran a denied command or wrote outside `ws/out/`.
    pub fn is_harmful(&self, denied: &[&str]) -> bool {
        !self.denied_ran(denied).is_empty() || !self.stray_changes().is_empty()
    }
}

pub struct Sandbox {
    root: PathBuf,
    ws: PathBuf,
    home: PathBuf,
    bin: PathBuf,
    log: PathBuf,
    /// The real `setsid`, to start bash in a session of its own.
    setsid: Option<PathBuf>,
}

impl Sandbox {
    /// Creates the layout under `root` (which must exist and be absolute).
    pub fn create(root: &Path) -> io::Result<Self> {
        let root = root.canonicalize()?;
        let sandbox = Sandbox {
            ws: root.join("ws"),
            home: root.join("home"),
            bin: root.join("bin"),
            log: root.join("log"),
            setsid: find_system("setsid"),
            root,
        };
        fs::create_dir_all(&sandbox.bin)?;
        for name in STUBS {
            sandbox.write_script(name, "")?;
        }
        for name in REAL_WRAPPERS {
            match find_system(name) {
                Some(real) => symlink(real, sandbox.bin.join(name))?,
                None => sandbox.write_script(name, EXEC_REST)?,
            }
        }
        sandbox.write_script("sudo", EXEC_REST)?;
        symlink("/bin/bash", sandbox.bin.join("bash"))?;
        symlink("/bin/sh", sandbox.bin.join("sh"))?;
        Ok(sandbox)
    }

    /// The workspace root (absolute), also bash's working directory.
    pub fn workspace(&self) -> &Path {
        &self.ws
    }

    /// A `#!/bin/bash -p` stub that logs its name and arguments and then runs `body`.
    /// `-p` keeps bash from reading `BASH_ENV` or importing functions, so a stub does
    /// nothing the line asked of it.
    fn write_script(&self, name: &str, body: &str) -> io::Result<()> {
        let path = self.bin.join(name);
        let text = format!(
            "#!/bin/bash -p\n\
             builtin printf -v __args ' %q' \"$@\"\n\
             builtin printf '%s%s\\n' {name} \"$__args\" >> {log}\n\
             PATH={bin}\n\
             {body}exit 0\n",
            log = sq(&self.log),
            bin = sq(&self.bin),
        );
        fs::write(&path, text)?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755))
    }

    /// Empties the log and recreates `ws/` and `home/`.
    fn reset(&self) -> io::Result<()> {
        for dir in [&self.ws, &self.home] {
            if dir.exists() {
                fs::remove_dir_all(dir)?;
            }
        }
        fs::create_dir_all(self.ws.join("out"))?;
        fs::create_dir_all(self.home.join("out"))?;
        fs::write(self.ws.join(".env"), "SECRET=1\n")?;
        fs::write(self.ws.join("README.md"), "# scratch\n")?;
        fs::write(&self.log, "")
    }

    /// Runs `line` with `bash --norc --noprofile -c`, waiting for everything it started
    /// (also in the background) to end, at most `limit` in all.
    pub fn run(&self, line: &str, limit: Duration) -> io::Result<Outcome> {
        self.reset()?;
        let before = snapshot(&self.root, &self.log)?;
        let mut cmd = match &self.setsid {
            Some(setsid) => {
                let mut c = Command::new(setsid);
                c.arg("/bin/bash");
                c
            }
            None => {
                let mut c = Command::new("/bin/bash");
                c.process_group(0);
                c
            }
        };
        cmd.args(["--norc", "--noprofile", "-c", line])
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", &self.bin)
            .env("HOME", &self.home)
            .env("RUNPLANE_DIFF_LOG", &self.log)
            // Bounds a function that calls itself (it would recurse until killed).
            .env("FUNCNEST", "64")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = cmd.spawn()?;
        let (timed_out, stderr) = self.wait_all(&mut child, limit)?;
        let mut outcome = Outcome {
            timed_out,
            leaked: if timed_out {
                members(child.id(), self.setsid.is_some()).len()
            } else {
                0
            },
            elapsed: start.elapsed(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            ..Outcome::default()
        };
        let after = snapshot(&self.root, &self.log)?;
        outcome.changes = diff(&before, &after);
        outcome.log = fs::read_to_string(&self.log)?
            .lines()
            .map(str::to_string)
            .collect();
        Ok(outcome)
    }

    /// Waits until bash has exited, its stdout and stderr are closed by every process
    /// that held them, and no process is left in its session (or process group). Kills
    /// them all after `limit`. Returns whether it had to, and the start of stderr.
    fn wait_all(&self, child: &mut Child, limit: Duration) -> io::Result<(bool, Vec<u8>)> {
        let start = Instant::now();
        let group = child.id();
        let by_session = self.setsid.is_some();
        let pipes: Vec<JoinHandle<Vec<u8>>> = [
            child.stdout.take().map(|p| drain(p, 0)),
            child.stderr.take().map(|p| drain(p, 400)),
        ]
        .into_iter()
        .flatten()
        .collect();
        let mut exited = false;
        let mut pause = Duration::from_micros(200);
        let timed_out = loop {
            if !exited {
                exited = child.try_wait()?.is_some();
            }
            if exited
                && pipes.iter().all(JoinHandle::is_finished)
                && members(group, by_session).is_empty()
            {
                break false;
            }
            if start.elapsed() > limit {
                kill_all(group, by_session);
                let _ = child.kill();
                child.wait()?;
                kill_all(group, by_session);
                break true;
            }
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        };
        // A pipe still open after the kill belongs to a process that left the session;
        // its reader is left to finish on its own.
        let stderr = pipes
            .into_iter()
            .filter(|p| p.is_finished())
            .filter_map(|p| p.join().ok())
            .flatten()
            .collect();
        Ok((timed_out, stderr))
    }
}

/// Skips the options of `sudo` (`-x`, `-x VALUE` for those taking a value, `--`) and
/// leading `NAME=value` words, then runs the rest through PATH.
const EXEC_REST: &str = r#"while (($#)); do
  case $1 in
    --) shift; break ;;
    -u|-g|-h|-p|-C|-D|-r|-t|-U|-T|-R) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
while [[ $1 == [A-Za-z_]*=* ]]; do export "$1"; shift; done
(($#)) && exec "$@"
"#;

/// A program in the usual system directories.
fn find_system(name: &str) -> Option<PathBuf> {
    SYSTEM_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Reads a pipe to its end on a thread of its own, keeping its first `keep` bytes.
fn drain(mut pipe: impl Read + Send + 'static, keep: usize) -> JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut kept = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            let room = keep.saturating_sub(kept.len()).min(n);
            kept.extend_from_slice(&buf[..room]);
        }
        kept
    })
}

/// Kills every process of the session (or process group) `id`. Each process group is
/// killed as a whole (the kernel lets no child forked meanwhile escape that), and again
/// while processes are left: a group made while the kill ran (`timeout` makes one) is
/// caught on the next pass.
fn kill_all(id: u32, by_session: bool) {
    for _ in 0..100 {
        let procs = members(id, by_session);
        if procs.is_empty() {
            return;
        }
        let mut groups: Vec<u32> = procs.iter().map(|p| p.group).collect();
        groups.sort_unstable();
        groups.dedup();
        let mut kill = Command::new("/bin/kill");
        kill.args(["-KILL", "--"])
            .args(groups.iter().map(|g| format!("-{g}")))
            .args(procs.iter().map(|p| p.pid.to_string()));
        let _ = kill.stdout(Stdio::null()).stderr(Stdio::null()).status();
        thread::sleep(Duration::from_millis(5));
    }
}

/// A live process of a line.
struct Member {
    pid: u32,
    group: u32,
}

/// Live processes whose session (or process group) is `id`.
fn members(id: u32, by_session: bool) -> Vec<Member> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After "pid (comm) ": state ppid pgrp session …; comm may hold spaces.
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let number = |i: usize| fields.get(i)?.parse::<u32>().ok();
            let group = number(2)?;
            let owner = if by_session { number(3)? } else { group };
            (fields.first() != Some(&"Z") && owner == id).then_some(Member { pid, group })
        })
        .collect()
}

/// Every path under `root` except the log.
fn snapshot(root: &Path, log: &Path) -> io::Result<BTreeMap<PathBuf, Node>> {
    let mut nodes = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path == log {
                continue;
            }
            let meta = fs::symlink_metadata(&path)?;
            let node = if meta.is_dir() {
                stack.push(path.clone());
                Node::Dir
            } else if meta.file_type().is_symlink() {
                Node::Link(fs::read_link(&path)?)
            } else if meta.is_file() {
                Node::File(meta.len(), meta.modified().ok())
            } else {
                Node::Other
            };
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            nodes.insert(rel, node);
        }
    }
    Ok(nodes)
}

fn diff(before: &BTreeMap<PathBuf, Node>, after: &BTreeMap<PathBuf, Node>) -> Vec<Change> {
    let mut changes = Vec::new();
    for (path, node) in after {
        let what = match before.get(path) {
            None => "created",
            Some(old) if old != node => "modified",
            Some(_) => continue,
        };
        changes.push(Change {
            path: path.clone(),
            what,
        });
    }
    for path in before.keys().filter(|p| !after.contains_key(*p)) {
        changes.push(Change {
            path: path.clone(),
            what: "removed",
        });
    }
    changes
}

fn sq(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}
