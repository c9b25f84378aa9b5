//! The peer side of a two-process test: starting it (`perf-peer`, a child of this process),
//! reaping it, and the [`Link`] the two sides exchange blobs over.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::{Error, ErrorKind, Result};

use super::{IdleArg, Params, PEER_TIMEOUT};

/// The `perf-peer` command line for `test` with the parameters of `p`.
pub fn peer_command(test: &str, p: &Params, cpu: usize) -> Result<Command> {
    let exe = std::env::current_exe().map_err(|e| Error::os(e, "perf: find own executable"))?;
    let idle = match p.idle {
        IdleArg::Polling => "polling",
        IdleArg::Adaptive => "adaptive",
        IdleArg::Event => "event",
    };
    let mut cmd = Command::new(exe);
    dies_with_this_thread(&mut cmd);
    cmd.args(["perf-peer", "--test", test, "--mode", p.mode.name(), "--idle", idle])
        .args(["--iters", &p.iters.to_string(), "--warmup", &p.warmup.to_string()])
        .args(["--size", &p.size.to_string(), "--cpu", &cpu.to_string()]);
    if p.park {
        cmd.arg("--park");
    }
    Ok(cmd)
}

/// Makes the process `cmd` starts get SIGTERM when the thread that starts it ends
/// (`PR_SET_PDEATHSIG`), so that a `perf` killed by a signal does not leave its peers and its
/// UROM service running. `perf` starts them from its main thread, which lives as long as the
/// run. A child whose parent is already gone when it gets there does not start at all.
pub(super) fn dies_with_this_thread(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl and
    // getppid, which are async-signal-safe, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died before the prctl: then nobody would ever stop us.
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
}

/// Starts the peer side of a two-process test as a child of this process.
pub fn spawn_peer(test: &str, p: &Params, blob: &[u8], cpu: usize) -> Result<PeerChild> {
    let child = peer_command(test, p, cpu)?
        .args(["--blob", &hex_encode(blob)])
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| Error::os(e, "perf: start peer process"))?;
    Ok(PeerChild(Some(child)))
}

/// Starts the peer side as a child whose stdin and stdout are a [`Link`] to this
/// process (blobs go both ways).
pub fn spawn_linked_peer(test: &str, p: &Params, cpu: usize) -> Result<(PeerChild, Link)> {
    let mut child = peer_command(test, p, cpu)?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Error::os(e, "perf: start peer process"))?;
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    let child = PeerChild(Some(child));
    match (stdin, stdout) {
        (Some(w), Some(r)) => Ok((child, Link::over(r, w))),
        _ => Err(Error::new(ErrorKind::Other, "perf: peer process without pipes")),
    }
}

/// A peer process that is killed if the test fails before it is waited for.
pub struct PeerChild(Option<Child>);

impl PeerChild {
    /// Starts `cmd` as a peer.
    // Only the collective tests (soft provider only) start peers this way.
    #[cfg_attr(not(feature = "soft"), allow(dead_code))]
    pub fn spawn(mut cmd: Command) -> Result<PeerChild> {
        cmd.spawn().map(|c| PeerChild(Some(c))).map_err(|e| Error::os(e, "perf: start peer process"))
    }

    /// Waits for the peer to exit (bounded by [`PEER_TIMEOUT`]) and checks it succeeded.
    pub fn finish(mut self) -> Result<()> {
        let mut child = self.0.take().expect("peer waited once");
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(Error::new(ErrorKind::Other, format!("perf peer process failed: {status}")))
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::new(ErrorKind::TimedOut, "perf peer process did not exit"));
                }
                Err(e) => return Err(Error::os(e, "wait for perf peer")),
            }
        }
    }
}

impl Drop for PeerChild {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn hex_decode(s: &str) -> Result<Vec<u8>> {
    let bad = || Error::new(ErrorKind::InvalidArgument, "perf-peer: blob is not hex");
    if s.len() % 2 != 0 {
        return Err(bad());
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2).ok_or_else(bad)?, 16).map_err(|_| bad()))
        .collect()
}

/// How the two sides exchange blobs and the final `done`: channels between two threads of
/// one process (or to the control thread of `perf --server`/`--client`, which carries them
/// over an RDMA connection made by address), or a byte stream (a child's stdin/stdout)
/// carrying length-prefixed frames. Frames from a stream are read by a helper thread into a channel,
/// so both kinds are received the same way, without blocking an executor.
pub struct Link {
    out: Out,
    rx: mpsc::Receiver<Vec<u8>>,
}

enum Out {
    Chan(mpsc::Sender<Vec<u8>>),
    Stream(Box<dyn Write + Send>),
}

impl Link {
    /// Two connected ends in this process.
    pub fn pair() -> (Link, Link) {
        let (tx_a, rx_b) = mpsc::channel();
        let (tx_b, rx_a) = mpsc::channel();
        (Link { out: Out::Chan(tx_a), rx: rx_a }, Link { out: Out::Chan(tx_b), rx: rx_b })
    }

    /// A link whose frames go out on `out` and come in on `rx` (a control thread carries
    /// them, see `cm_link`).
    pub fn from_channels(out: mpsc::Sender<Vec<u8>>, rx: mpsc::Receiver<Vec<u8>>) -> Link {
        Link { out: Out::Chan(out), rx }
    }

    /// A link over a byte stream: frames are a little-endian u32 length and the bytes.
    pub fn over(mut reader: impl Read + Send + 'static, writer: impl Write + Send + 'static) -> Link {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut len = [0u8; 4];
            while reader.read_exact(&mut len).is_ok() {
                let mut frame = vec![0u8; u32::from_le_bytes(len) as usize];
                if reader.read_exact(&mut frame).is_err() || tx.send(frame).is_err() {
                    break;
                }
            }
        });
        Link { out: Out::Stream(Box::new(writer)), rx }
    }

    pub fn send(&mut self, blob: &[u8]) -> Result<()> {
        match &mut self.out {
            Out::Chan(tx) => tx.send(blob.to_vec()).map_err(|_| peer_gone()),
            Out::Stream(w) => {
                let len = u32::try_from(blob.len())
                    .map_err(|_| Error::new(ErrorKind::InvalidArgument, "perf: blob too large"))?;
                w.write_all(&len.to_le_bytes())
                    .and_then(|()| w.write_all(blob))
                    .and_then(|()| w.flush())
                    .map_err(|e| Error::os(e, "perf: send to peer"))
            }
        }
    }

    /// The next blob, without blocking the calling executor (polled with short sleeps).
    pub async fn recv(&mut self) -> Result<Vec<u8>> {
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match self.rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(mpsc::TryRecvError::Disconnected) => return Err(peer_gone()),
                Err(mpsc::TryRecvError::Empty) if Instant::now() > deadline => return Err(timed_out()),
                Err(mpsc::TryRecvError::Empty) => async_doca::time::sleep(Duration::from_micros(200)).await,
            }
        }
    }

    /// The next blob, blocking this thread.
    pub fn recv_blocking(&mut self) -> Result<Vec<u8>> {
        self.rx.recv_timeout(PEER_TIMEOUT).map_err(|e| match e {
            mpsc::RecvTimeoutError::Timeout => timed_out(),
            mpsc::RecvTimeoutError::Disconnected => peer_gone(),
        })
    }
}

pub fn peer_gone() -> Error {
    Error::new(ErrorKind::ConnectionLost, "perf: peer side is gone")
}

pub fn timed_out() -> Error {
    Error::new(ErrorKind::TimedOut, "perf: peer did not answer")
}
