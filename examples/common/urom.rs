//! What the UROM examples share: finding a UROM service, or starting a private one for the
//! duration of the example, and a peer process that is killed if it is left behind.
//!
//! Not an example itself; each UROM example includes it with
//! `#[path = "common/urom.rs"] mod urom;`.
//!
//! # Which service
//! An example uses the service the user runs when there is one: `DOCA_UROM_SERVICE_FILE` is
//! set (DOCA's way to name a service), or the default per-user socket
//! ([`default_socket_path`]) accepts a connection (`async-doca urom-service` is running).
//! Otherwise it starts a **private** service: it runs this same program again with
//! [`SERVICE_ARG`] and a socket path as its arguments, and that process runs the daemon with
//! the two sample plugins compiled in. The daemon forks its workers, which is only sound in a
//! process with no other threads, so the examples call [`serve_if_asked`] first thing in
//! `main`, before any runtime or thread exists.
//!
//! # Cleanup
//! [`UromService`] owns a directory of its own under the temp dir (unique per pid; the private
//! daemon's socket and the examples' rendezvous sockets go there) and the private daemon's
//! process. [`UromService::stop`] (or dropping it, on the error paths) sends the daemon
//! SIGTERM, which makes it stop its workers and remove its socket, waits for it (bounded;
//! SIGKILL after) and removes the directory. The daemon also gets SIGTERM from the kernel if
//! the example dies without cleaning up (`PR_SET_PDEATHSIG`), so even a killed example leaves
//! no service or worker behind.

#![allow(dead_code)] // each example uses a different part

use std::ffi::OsStr;
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::time::timeout;
use async_doca::urom::daemon::{self, default_socket_path, sample_builtins, Config, LogLevel};
use async_doca::urom::Service;
use async_doca::{Device, Error, ErrorKind, Result};

/// The hidden first argument that makes the program the private service; the socket path follows.
pub const SERVICE_ARG: &str = "--urom-service";
/// DOCA's variable naming the service file; when set, DOCA finds the service itself.
pub const SERVICE_FILE_ENV: &str = "DOCA_UROM_SERVICE_FILE";
/// How long the private service has to start listening, and a connection to be made.
pub const START_LIMIT: Duration = Duration::from_secs(10);
/// How long a stopped process has to exit before it is killed.
pub const STOP_LIMIT: Duration = Duration::from_secs(5);
/// The pid of the process that started the private service, checked by the service at start.
const PARENT_ENV: &str = "ASYNC_DOCA_EXAMPLE_UROM_PARENT";
/// The start of the private directories' names; the service only ever removes such a directory.
const DIR_PREFIX: &str = "async-doca-urom-example-";

/// Runs the private service if this process was started as one (see the module docs) and
/// returns its exit code; `None` for an ordinary start. Call it first thing in `main`, before
/// creating any runtime or thread.
pub fn serve_if_asked(example: &str) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(SERVICE_ARG)) {
        return None;
    }
    let Some(socket) = args.next().map(PathBuf::from) else {
        eprintln!("{example} (service): {SERVICE_ARG} needs a socket path");
        return Some(ExitCode::FAILURE);
    };
    if let Some(parent) = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse::<libc::pid_t>().ok()) {
        // SAFETY: prctl(PR_SET_PDEATHSIG) takes a signal number and no pointers.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) };
        // The example may have died before the prctl took effect; then this process has been
        // re-parented already and nobody would ever stop it.
        // SAFETY: getppid cannot fail.
        if unsafe { libc::getppid() } != parent {
            eprintln!("{example} (service): the example that started this service is gone");
            return Some(ExitCode::FAILURE);
        }
    }
    let mut cfg = Config::new(socket.clone());
    cfg.builtins = sample_builtins();
    cfg.log_level = LogLevel::Warn;
    let result = daemon::run(cfg);
    // The daemon removed its socket. Remove the private directory too if it is empty (the
    // example normally does it; this covers an example that was killed). Only a directory
    // named like the examples' ones, and `remove_dir` never removes anything but an empty one.
    if let Some(dir) = socket.parent() {
        if dir.file_name().and_then(OsStr::to_str).is_some_and(|n| n.starts_with(DIR_PREFIX)) {
            let _ = std::fs::remove_dir(dir);
        }
    }
    match result {
        Ok(()) => Some(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("{example} (service): {e}");
            Some(ExitCode::FAILURE)
        }
    }
}

/// The UROM service an example uses, and the private directory it keeps its sockets in.
pub struct UromService {
    /// The socket to connect to; `None`: DOCA finds the service (service file).
    socket: Option<PathBuf>,
    /// Set when this process started the service.
    daemon: Option<PrivateDaemon>,
    dir: PrivateDir,
    what: String,
}

impl UromService {
    /// Uses the running service, or starts a private one (see the module docs). Call it from
    /// the main thread: the private service is told to stop when the thread that started it
    /// exits.
    pub fn find_or_start(example: &str) -> Result<UromService> {
        let dir = PrivateDir::create(example)?;
        if let Some(file) = std::env::var_os(SERVICE_FILE_ENV) {
            let what = format!("using the UROM service named by {SERVICE_FILE_ENV}={}", file.to_string_lossy());
            return Ok(UromService { socket: None, daemon: None, dir, what });
        }
        let default = default_socket_path();
        if accepts_connection(&default) {
            let what = format!("using the running UROM service at {}", default.display());
            return Ok(UromService { socket: Some(default), daemon: None, dir, what });
        }
        let socket = dir.path().join("urom.sock");
        let daemon = PrivateDaemon::start(&socket)?;
        let what = format!(
            "no UROM service running: started a private one (pid {}) at {}",
            daemon.child.as_ref().map_or(0, Child::id),
            socket.display()
        );
        Ok(UromService { socket: Some(socket), daemon: Some(daemon), dir, what })
    }

    /// Where the service is, for other threads and processes of the example.
    pub fn addr(&self) -> ServiceAddr {
        ServiceAddr { socket: self.socket.clone() }
    }

    /// One line saying which service is used.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// The socket of the service (to hand to another process), `None` when DOCA finds it
    /// through the service file (which other processes inherit with the environment).
    pub fn socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// A directory of this process's own, removed at the end.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Stops the private service (if this process started one) and removes the directory.
    ///
    /// # Errors
    /// When the service did not exit cleanly on SIGTERM.
    pub fn stop(mut self) -> Result<()> {
        match self.daemon.take() {
            Some(mut d) => d.stop(),
            None => Ok(()),
        }
    }
}

/// Whether a service listens at `path`: a connection to it (the daemon's sockets are
/// `SOCK_SEQPACKET`) succeeds without blocking. It is closed at once, before any message;
/// the daemon just forgets it.
fn accepts_connection(path: &Path) -> bool {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return false;
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns; OwnedFd closes it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    // SAFETY: `addr` is a valid, NUL-terminated sockaddr_un of `len` bytes, alive for the call.
    let rc =
        unsafe { libc::connect(std::os::fd::AsRawFd::as_raw_fd(&fd), (&addr as *const libc::sockaddr_un).cast(), len) };
    // Non-blocking, so a full backlog answers EAGAIN instead of blocking: someone listens.
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// Where the service is: its socket, or `None` when DOCA finds it through the service file
/// (which other processes inherit with the environment).
#[derive(Clone, Debug)]
pub struct ServiceAddr {
    /// The daemon's socket; `None`: the service file names it.
    pub socket: Option<PathBuf>,
}

impl ServiceAddr {
    /// Connects to the service on the current executor (bounded by [`START_LIMIT`]).
    pub async fn connect(&self, dev: &Device) -> Result<Service> {
        let builder = match &self.socket {
            Some(s) => Service::builder(dev).socket_path(s),
            None => Service::builder(dev),
        };
        let what = match &self.socket {
            Some(s) => format!("the UROM service at {}", s.display()),
            None => format!("the UROM service named by {SERVICE_FILE_ENV}"),
        };
        bounded(&format!("connect to {what}"), START_LIMIT, builder.connect())
            .await?
            .map_err(|e| e.context_prefix(&format!("connect to {what}")))
    }
}

/// A directory under the temp dir, unique to this process, removed on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(example: &str) -> Result<PrivateDir> {
        let path = std::env::temp_dir().join(format!("{DIR_PREFIX}{example}-{}", std::process::id()));
        // A directory of that name was left by a dead process that had this pid: nobody else
        // can use it.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| Error::os(e, &format!("create the directory {}", path.display())))?;
        Ok(PrivateDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The private service's process: stopped on drop.
struct PrivateDaemon {
    child: Option<Child>,
}

impl PrivateDaemon {
    /// Starts this program as the service on `socket` and waits (bounded) until it listens.
    fn start(socket: &Path) -> Result<PrivateDaemon> {
        let exe = std::env::current_exe().map_err(|e| Error::os(e, "find this program's executable"))?;
        let mut child = Command::new(exe)
            .arg(SERVICE_ARG)
            .arg(socket)
            .env(PARENT_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::os(e, "start the private UROM service"))?;
        let stdout = child.stdout.take();
        let mut daemon = PrivateDaemon { child: Some(child) };
        let Some(stdout) = stdout else {
            return Err(Error::new(ErrorKind::Other, "the private UROM service has no stdout pipe"));
        };
        let (tx, rx) = mpsc::channel();
        // Reads the `listening on` line, then drains the pipe until the service and its
        // workers close it, so that nothing they print can ever block them.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("listening on") {
                    let _ = tx.send(());
                }
            }
        });
        match rx.recv_timeout(START_LIMIT) {
            Ok(()) => Ok(daemon),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = daemon.child.take().map(|c| reap(c, STOP_LIMIT));
                let status = status.map_or_else(String::new, |s| format!(" ({})", describe_exit(&s)));
                Err(Error::new(ErrorKind::Other, format!("the private UROM service exited before listening{status}")))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(Error::new(
                ErrorKind::TimedOut,
                format!("the private UROM service did not listen within {} s", START_LIMIT.as_secs()),
            )),
        }
    }

    /// SIGTERM, then a bounded wait (SIGKILL after it); fails unless the service exited 0.
    fn stop(&mut self) -> Result<()> {
        let Some(child) = self.child.take() else { return Ok(()) };
        if let Ok(pid) = libc::pid_t::try_from(child.id()) {
            // SAFETY: kill(2) on our own child, not reaped yet, so the pid is still ours.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        match reap(child, STOP_LIMIT) {
            Reaped::Exited(s) if s.success() => Ok(()),
            other => Err(Error::new(ErrorKind::Other, format!("the private UROM service {}", describe_exit(&other)))),
        }
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("{e}");
        }
    }
}

/// How a waited-for process ended.
pub enum Reaped {
    Exited(ExitStatus),
    /// It did not exit in time and was killed.
    Killed,
    /// Waiting failed (it was reaped elsewhere).
    Lost(std::io::Error),
}

/// Waits at most `limit` for `child` to exit, then SIGKILLs and reaps it.
pub fn reap(mut child: Child, limit: Duration) -> Reaped {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Reaped::Exited(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Reaped::Killed;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Reaped::Lost(e),
        }
    }
}

/// "exited with status 0", "did not exit in time and was killed", ...
pub fn describe_exit(r: &Reaped) -> String {
    match r {
        Reaped::Exited(s) => format!("ended: {s}"),
        Reaped::Killed => format!("did not exit within {} s and was killed", STOP_LIMIT.as_secs()),
        Reaped::Lost(e) => format!("could not be waited for: {e}"),
    }
}

/// Another process of the example: killed and reaped if still running when dropped.
pub struct Peer(Option<Child>);

impl Peer {
    /// Starts `cmd` (stdin closed; stdout and stderr shared with this process).
    pub fn spawn(mut cmd: Command) -> Result<Peer> {
        let child = cmd.stdin(Stdio::null()).spawn().map_err(|e| Error::os(e, "start the peer process"))?;
        Ok(Peer(Some(child)))
    }

    /// Waits at most `limit` for the peer to exit; fails unless it exited 0.
    pub fn finish(&mut self, limit: Duration) -> Result<()> {
        let Some(child) = self.0.take() else { return Ok(()) };
        match reap(child, limit) {
            Reaped::Exited(s) if s.success() => Ok(()),
            other => Err(Error::new(ErrorKind::Other, format!("the peer process {}", describe_exit(&other)))),
        }
    }

    /// How the peer ended, if it has (without waiting).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.0.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Awaits `f` for at most `limit`, failing with [`ErrorKind::TimedOut`] that names `what`.
pub async fn bounded<T>(what: &str, limit: Duration, f: impl Future<Output = T>) -> Result<T> {
    timeout(limit, f)
        .await
        .map_err(|_| Error::new(ErrorKind::TimedOut, format!("{what}: no answer within {} s", limit.as_secs())))
}

/// Awaits the fallible `f` for at most `limit`; its error, or the timeout, names `what`.
pub async fn step<T>(what: &str, limit: Duration, f: impl Future<Output = Result<T>>) -> Result<T> {
    bounded(what, limit, f).await?.map_err(|e| e.context_prefix(what))
}

/// An [`ErrorKind::Other`] error: a check that failed.
pub fn mismatch(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg.into())
}

/// Median and 99th percentile of `samples` (sorted in place); zero for none.
pub fn median_p99(samples: &mut [Duration]) -> (Duration, Duration) {
    if samples.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// A duration in microseconds with one decimal, for the summaries.
pub fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}
