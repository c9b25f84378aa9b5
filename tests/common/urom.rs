//! A soft UROM service daemon per test: `async-doca urom-service` started on a socket in a
//! directory of its own, stopped (and checked to leave nothing behind) at the end.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::Reap;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A directory unique to this test process and call, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("async-doca-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running daemon. Dropping it kills the daemon and any worker left; [`Daemon::stop`] is the
/// orderly end that also checks the daemon cleaned up after itself.
pub struct Daemon {
    child: Reap,
    pub pid: u32,
    pub socket: PathBuf,
    pub dir: TempDir,
    seen_workers: std::cell::RefCell<Vec<u32>>,
    /// Every line the daemon and its workers wrote to stdout so far.
    stdout: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Daemon {
    /// Starts `async-doca urom-service` with `args` (its socket is chosen here) and waits for
    /// its `listening on` line.
    pub fn start(args: &[&str]) -> Daemon {
        let dir = TempDir::new("urom");
        let socket = dir.path().join("urom.sock");
        let mut child = Command::new(super::cli::exe())
            .arg("urom-service")
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .env_remove("UROM_PLUGIN_PATH")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start async-doca urom-service");
        let stdout = child.stdout.take().unwrap();
        let pid = child.id();
        let child = Reap(Some(child));
        let (tx, rx) = mpsc::channel();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("listening on") {
                    let _ = tx.send(());
                }
                keep.lock().unwrap().push(line);
            }
        });
        rx.recv_timeout(Duration::from_secs(20)).expect("the daemon did not start listening");
        Daemon { child, pid, socket, dir, seen_workers: Default::default(), stdout: lines }
    }

    /// Waits (bounded) until a line the daemon or a worker wrote to stdout contains `s`;
    /// every line so far if none did.
    pub fn stdout_line(&self, s: &str) -> Result<String, Vec<String>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(l) = self.stdout.lock().unwrap().iter().find(|l| l.contains(s)) {
                return Ok(l.clone());
            }
            if Instant::now() > deadline {
                return Err(self.stdout.lock().unwrap().clone());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The pids of the daemon's live child processes (its workers).
    pub fn workers(&self) -> Vec<u32> {
        let mut pids = Vec::new();
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) {
            for t in tasks.flatten() {
                if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                    pids.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
                }
            }
        }
        pids.retain(|p| !is_zombie(*p));
        self.seen_workers.borrow_mut().extend(pids.iter().copied());
        pids
    }

    /// Waits (bounded) until the daemon has `n` live workers; returns their pids.
    pub fn wait_workers(&self, n: usize) -> Vec<u32> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let w = self.workers();
            if w.len() == n || Instant::now() > deadline {
                assert_eq!(w.len(), n, "daemon workers: {w:?}");
                return w;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGTERM, then checks: exit status 0, socket removed, no worker process left.
    pub fn stop(mut self) {
        let workers = {
            let mut w = self.workers();
            w.extend(self.seen_workers.borrow().iter().copied());
            w
        };
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let mut child = self.child.0.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("the daemon did not exit on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(status.success(), "daemon exit status {status}");
        assert!(!self.socket.exists(), "the daemon left its socket behind");
        for p in workers {
            assert!(!alive(p), "worker {p} outlived the daemon");
        }
    }

    /// Kills the daemon with SIGKILL (a crash), reaping it.
    pub fn kill(&mut self) {
        self.workers();
        if let Some(mut c) = self.child.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let mut pids = self.workers();
        pids.extend(self.seen_workers.borrow().iter().copied());
        if let Some(mut c) = self.child.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in pids {
            // SAFETY: plain kill(2); the pid was our daemon's child moments ago.
            unsafe { libc::kill(p as i32, libc::SIGKILL) };
        }
    }
}

/// Whether `pid` is a live (not zombie) process.
pub fn alive(pid: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    // A process that was just told to exit may take a moment: wait, bounded.
    loop {
        let gone = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(_) => is_zombie(pid),
        };
        if gone {
            return false;
        }
        if Instant::now() > deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().map(|r| r.trim_start().starts_with('Z')).unwrap_or(false))
        .unwrap_or(true)
}

/// The `Cpus_allowed_list` of a process, from /proc.
pub fn cpus_allowed(pid: u32) -> String {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_owned()
}
