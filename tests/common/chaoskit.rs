//! Pieces of a chaos harness that do not depend on what the processes do: a seedable random
//! source for schedules, an append-only log that a SIGKILL cannot corrupt beyond its last
//! line, a controller that starts copies of the test binary and talks to them by lines, the
//! faults it injects, and the leak checks after a round.
//!
//! Used by `tests/chaos_links.rs` (connection setup, remote events, DMA, Comch).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// splitmix64: small, seedable, good enough to draw schedules.
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    pub fn fork(&mut self, salt: u64) -> Rng {
        Rng(self.next() ^ salt.wrapping_mul(0xD6E8_FEB8_6659_FD93))
    }
}

/// The append-only log of a child: one `write(2)` per line, so a SIGKILL tears at most the
/// line being written (readers ignore an unterminated last line).
pub struct Log(RefCell<std::fs::File>);

impl Log {
    pub fn create(path: &Path) -> Log {
        Log(RefCell::new(std::fs::OpenOptions::new().create(true).append(true).open(path).expect("chaos log")))
    }
    pub fn line(&self, s: impl AsRef<str>) {
        let mut l = String::with_capacity(s.as_ref().len() + 1);
        l.push_str(s.as_ref());
        l.push('\n');
        self.0.borrow_mut().write_all(l.as_bytes()).expect("chaos log write");
    }
    /// Something the child found wrong itself: logged, printed, and the child exits 3.
    pub fn violation(&self, what: impl AsRef<str>) -> ! {
        self.line(format!("VIOLATION {}", what.as_ref()));
        eprintln!("chaos child violation: {}", what.as_ref());
        std::process::exit(3);
    }
}

/// The complete lines of a log (a torn last line is dropped).
pub fn log_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = text.rfind('\n').map_or("", |i| &text[..i]);
    complete.lines().map(str::to_string).collect()
}

/// A fault the controller injects.
#[derive(Clone, Copy, Debug)]
pub enum Fault {
    /// SIGKILL of process `.0`.
    Kill(usize),
    /// SIGSTOP of process `.0`, SIGCONT after `.1` ms.
    Freeze(usize, u64),
    /// A stranger connects to the round's TCP port and writes `.0` random bytes (0: none)
    /// before closing (a scenario-specific fault the round handles itself).
    Garbage(u64),
}

struct Proc {
    child: Child,
    stdin: Option<ChildStdin>,
    killed: bool,
    lines: VecDeque<String>,
    eof: bool,
}

/// Children of one round: copies of the test binary running one ignored test each, their
/// tagged stdout lines, their stdin, their stderr and logs in the round's directory.
pub struct Round {
    pub dir: PathBuf,
    tag: String,
    procs: Vec<Proc>,
    rx: mpsc::Receiver<(usize, Option<String>)>,
    tx: Option<mpsc::Sender<(usize, Option<String>)>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Everything injected so far, for the failure report.
    pub schedule: Vec<String>,
}

impl Round {
    /// A round whose children print their lines to the controller prefixed with `tag`.
    pub fn new(dir: PathBuf, tag: &str) -> Round {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (tx, rx) = mpsc::channel();
        Round {
            dir,
            tag: tag.to_string(),
            procs: Vec::new(),
            rx,
            tx: Some(tx),
            readers: Vec::new(),
            schedule: Vec::new(),
        }
    }

    /// Starts the ignored test `test` as a child with `envs`; returns its index.
    pub fn spawn(&mut self, test: &str, envs: &[(&str, String)]) -> usize {
        let i = self.procs.len();
        let err = std::fs::File::create(self.dir.join(format!("err-{i}"))).unwrap();
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", test, "--ignored", "--nocapture", "--test-threads=1"]);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut c = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(err).spawn().unwrap();
        let out = c.stdout.take().unwrap();
        let tx = self.tx.clone().unwrap();
        let tag = self.tag.clone();
        self.readers.push(std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(&tag) {
                    if tx.send((i, Some(line[at + tag.len()..].to_string()))).is_err() {
                        return;
                    }
                }
            }
            let _ = tx.send((i, None));
        }));
        self.procs.push(Proc { stdin: c.stdin.take(), child: c, killed: false, lines: VecDeque::new(), eof: false });
        i
    }

    pub fn pid(&self, i: usize) -> u32 {
        self.procs[i].child.id()
    }

    pub fn pids(&self) -> Vec<u32> {
        self.procs.iter().map(|p| p.child.id()).collect()
    }

    pub fn killed(&self, i: usize) -> bool {
        self.procs[i].killed
    }

    pub fn stderr_of(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("err-{i}"))).unwrap_or_default()
    }

    fn pump(&mut self, until: Instant) -> bool {
        match self.rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok((i, Some(l))) => {
                self.procs[i].lines.push_back(l);
                true
            }
            Ok((i, None)) => {
                self.procs[i].eof = true;
                true
            }
            Err(_) => false,
        }
    }

    /// The next line of child `i` starting with `prefix` (earlier other lines are dropped),
    /// within `within`. `Err` says why not (the child ended, or the time ran out).
    pub fn expect(&mut self, i: usize, prefix: &str, within: Duration) -> Result<String, String> {
        let until = Instant::now() + within;
        loop {
            while let Some(l) = self.procs[i].lines.pop_front() {
                if let Some(rest) = l.strip_prefix(prefix) {
                    return Ok(rest.trim().to_string());
                }
            }
            if self.procs[i].eof {
                return Err(format!("child {i} ended before '{prefix}': {}", self.stderr_of(i)));
            }
            if !self.pump(until) && Instant::now() >= until {
                return Err(format!("child {i} did not say '{prefix}' within {within:?} (hang)"));
            }
        }
    }

    /// Writes one line to child `i`'s stdin (ignored if it is gone).
    pub fn tell(&mut self, i: usize, line: &str) {
        if let Some(s) = self.procs[i].stdin.as_mut() {
            let _ = writeln!(s, "{line}");
            let _ = s.flush();
        }
    }

    /// Injects a kill or a freeze (the caller handles `Garbage`).
    pub fn inject(&mut self, f: Fault, at_ms: u64) {
        match f {
            Fault::Kill(v) if !self.procs[v].killed => {
                let _ = self.procs[v].child.kill();
                let _ = self.procs[v].child.wait();
                self.procs[v].killed = true;
                self.schedule.push(format!("kill {v}@{at_ms}ms"));
            }
            Fault::Freeze(v, ms) if !self.procs[v].killed => {
                let pid = self.procs[v].child.id() as i32;
                // SAFETY: signals to our own child, not reaped (not killed above).
                unsafe { libc::kill(pid, libc::SIGSTOP) };
                std::thread::sleep(Duration::from_millis(ms));
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGCONT) };
                self.schedule.push(format!("freeze {v} {ms}ms@{at_ms}ms"));
            }
            _ => {}
        }
    }

    /// Waits for child `i` to exit within `within`; it must exit 0 (unless killed).
    pub fn wait_exit(&mut self, i: usize, within: Duration) -> Result<(), String> {
        if self.procs[i].killed {
            return Ok(());
        }
        self.procs[i].stdin = None;
        let until = Instant::now() + within;
        let status: ExitStatus = loop {
            if let Some(s) = self.procs[i].child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > until {
                return Err(format!("child {i} did not exit within {within:?} (hang)"));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        if !status.success() {
            return Err(format!("child {i} exited with {status}: {}", self.stderr_of(i)));
        }
        Ok(())
    }

    /// Kills whatever is left (a failed round), reaps every child and joins the readers,
    /// so that the controller's descriptors are all closed again.
    pub fn finish(&mut self) {
        for p in &mut self.procs {
            p.stdin = None;
            if p.child.try_wait().ok().flatten().is_none() {
                let _ = p.child.kill();
            }
            let _ = p.child.wait();
        }
        self.tx = None;
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Round {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The failures of a run of rounds (the chaos controllers' loop). The first one panics at
/// once, unless `keep_going` (the soak): then each is printed when it happens and kept, and
/// the run checks [`Failures::list`] at its end.
pub struct Failures {
    keep_going: bool,
    /// The controller's open fds after the first round: later rounds must not add any.
    fds_base: Option<usize>,
    pub list: Vec<String>,
}

impl Failures {
    pub fn new(keep_going: bool) -> Failures {
        Failures { keep_going, fds_base: None, list: Vec::new() }
    }

    pub fn fail(&mut self, msg: String) {
        assert!(self.keep_going, "{msg}");
        eprintln!("{msg}");
        self.list.push(msg);
    }

    /// After round `index`: a failure if the controller holds more fds than after the first.
    pub fn check_fds(&mut self, index: u64, seed: u64) {
        let fds = fd_count();
        match self.fds_base {
            Some(b) if fds > b => {
                self.fail(format!("controller fds grew from {b} to {fds} after round {index} (seed {seed})"));
                self.fds_base = Some(fds);
            }
            Some(_) => {}
            None => self.fds_base = Some(fds),
        }
    }
}

pub fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

fn alive_pids_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The fields after the command (in parentheses, which may contain spaces).
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        if rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) {
            out.push(pid);
        }
    }
    out
}

/// Whether some socket listens on TCP `port` (IPv4 or IPv6).
pub fn tcp_listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // local_address is field 1, state field 3 (0A = LISTEN).
            w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
        })
    })
}

/// Whether `pid` is one of the numbers in the file name `name`: a whole number, not a part of
/// one. The round's own files carry the controller's pid (`async-doca-drom.0.chaos-32595-8`),
/// which must not count as child 325's.
pub fn names_pid(name: &str, pid: u32) -> bool {
    let pid = pid.to_string();
    name.split(|c: char| !c.is_ascii_digit()).any(|n| n == pid)
}

/// What a finished round left behind: child processes of the controller, abstract sockets
/// of its children (doca-soft's `@doca-soft.PID.*`) or named in `names` (Comch rendezvous),
/// `/dev/shm` files named after a child, a listener on `port`.
pub fn leaks(pids: &[u32], names: &[String], port: Option<u16>) -> Vec<String> {
    let mut out = Vec::new();
    let kids = alive_pids_of(std::process::id());
    if !kids.is_empty() {
        out.push(format!("child processes left: {kids:?}"));
    }
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    for pid in pids {
        let name = format!("@doca-soft.{pid}.");
        if unix.lines().any(|l| l.contains(&name)) {
            out.push(format!("abstract socket of child {pid} left"));
        }
        for e in std::fs::read_dir("/dev/shm").into_iter().flatten().flatten() {
            if names_pid(&e.file_name().to_string_lossy(), *pid) {
                out.push(format!("/dev/shm/{} of child {pid} left", e.file_name().to_string_lossy()));
            }
        }
    }
    for n in names {
        if unix.lines().any(|l| l.contains(n.as_str())) {
            out.push(format!("socket {n} left"));
        }
    }
    if let Some(p) = port {
        if tcp_listening(p) {
            out.push(format!("TCP port {p} still listening"));
        }
    }
    out
}
