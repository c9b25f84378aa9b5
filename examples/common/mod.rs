//! What the two-process RDMA examples share: starting this same program again as the peer
//! process, exchanging export blobs with it over its stdin/stdout pipes, and bounded waits.
//!
//! Not an example itself (cargo builds only `examples/*.rs` and `examples/*/main.rs`); each
//! example includes it with `#[path = "common/mod.rs"] mod common;`.
//!
//! The blob exchange is one line each way: the blobs in hex, separated by spaces. The parent
//! writes its line to the child's stdin and then reads the child's line from its stdout; the
//! child does the same the other way round. The lines fit in the pipes' buffers, so the order
//! of the two steps does not matter and neither side can block the other.

#![allow(dead_code)] // every example uses a different part

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::rdma::{Connection, Rdma, Received};
use async_doca::time::timeout;
use async_doca::{spawn_local, Access, Buf, Device, Error, ErrorKind, JoinHandle, RemoteMemory, Result, Runtime};

/// How long one side waits for the other before giving up: the examples never hang.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// The argument that makes the program the child (the peer process).
const CHILD_ARG: &str = "--child";

/// Runs the parent side, or the child side when started as the peer, on a fresh runtime.
/// The parent's `Ok` is the line printed on success; errors are printed to stderr and make
/// the exit status 1.
pub fn main<P, PF, C, CF>(name: &str, parent: P, child: C) -> ExitCode
where
    P: FnOnce(Peer) -> PF,
    PF: Future<Output = Result<String>>,
    C: FnOnce(Peer) -> CF,
    CF: Future<Output = Result<()>>,
{
    main_env(name, parent, child, &[])
}

/// The environment variable that puts the soft provider's devices on the DPU side.
pub const ROLE_ENV: &str = "DOCA_SOFT_ROLE";

/// As [`main`] for a host program (the parent) and its DPU program (the child): the child
/// runs with `DOCA_SOFT_ROLE=dpu`, so its devices list the host's representor as a
/// BlueField's do. (On a BlueField the variable is ignored: the sides are real machines.)
pub fn main_host_dpu<P, PF, C, CF>(name: &str, host: P, dpu: C) -> ExitCode
where
    P: FnOnce(Peer) -> PF,
    PF: Future<Output = Result<String>>,
    C: FnOnce(Peer) -> CF,
    CF: Future<Output = Result<()>>,
{
    main_env(name, host, dpu, &[(ROLE_ENV, "dpu")])
}

/// [`main`] with extra environment variables for the child.
fn main_env<P, PF, C, CF>(name: &str, parent: P, child: C, child_env: &[(&str, &str)]) -> ExitCode
where
    P: FnOnce(Peer) -> PF,
    PF: Future<Output = Result<String>>,
    C: FnOnce(Peer) -> CF,
    CF: Future<Output = Result<()>>,
{
    let is_child = std::env::args().nth(1).as_deref() == Some(CHILD_ARG);
    let result = Runtime::new().and_then(|rt| {
        rt.block_on(async {
            if is_child {
                child(Peer::parent()).await.map(|()| None)
            } else {
                let (peer, mut proc) = Peer::spawn_child(child_env)?;
                match parent(peer).await {
                    Ok(line) => proc.finish().map(|()| Some(line)),
                    Err(e) => {
                        proc.kill();
                        Err(e)
                    }
                }
            }
        })
    });
    match result {
        Ok(line) => {
            if let Some(line) = line {
                println!("{line}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let side = if is_child { "child" } else { "parent" };
            eprintln!("{name} ({side}): {e}");
            ExitCode::FAILURE
        }
    }
}

/// The other process, as seen from this one: where blobs go to and come from.
pub struct Peer {
    out: Box<dyn Write>,
    lines: mpsc::Receiver<std::io::Result<String>>,
}

/// The child process, owned by the parent: killed if it is still running when dropped.
struct ChildProc(Option<Child>);

impl Peer {
    /// The child's view: blobs go to stdout and come from stdin.
    fn parent() -> Peer {
        Peer { out: Box::new(std::io::stdout()), lines: reader(std::io::stdin()) }
    }

    /// Starts this program again as the child, with piped stdin and stdout (stderr is shared,
    /// so the child's errors show up).
    fn spawn_child(env: &[(&str, &str)]) -> Result<(Peer, ChildProc)> {
        let exe = std::env::current_exe().map_err(|e| Error::os(e, "find own executable"))?;
        let mut child = Command::new(exe)
            .arg(CHILD_ARG)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Error::os(e, "start the peer process"))?;
        let stdin: ChildStdin = child.stdin.take().expect("piped");
        let lines = reader(child.stdout.take().expect("piped"));
        Ok((Peer { out: Box::new(stdin), lines }, ChildProc(Some(child))))
    }

    /// Sends our blobs and returns the peer's `N` blobs (a blocking exchange, bounded by
    /// [`PEER_TIMEOUT`]; done once, before the RDMA traffic starts).
    pub fn exchange<const N: usize>(&mut self, blobs: &[&[u8]]) -> Result<[Vec<u8>; N]> {
        let line: Vec<String> = blobs.iter().map(|b| hex(b)).collect();
        writeln!(self.out, "{}", line.join(" "))
            .and_then(|()| self.out.flush())
            .map_err(|e| Error::os(e, "send blobs to the peer"))?;
        let line = match self.lines.recv_timeout(PEER_TIMEOUT) {
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(Error::os(e, "read the peer's blobs")),
            Err(_) => return Err(Error::new(ErrorKind::TimedOut, "the peer sent no blobs")),
        };
        let blobs = line
            .split_whitespace()
            .map(unhex)
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "the peer's blobs are not hex"))?;
        let n = blobs.len();
        blobs
            .try_into()
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("the peer sent {n} blobs, not {N}")))
    }
}

impl ChildProc {
    /// Waits (bounded) for the child to exit; fails unless it exited with status 0.
    fn finish(&mut self) -> Result<()> {
        let Some(mut child) = self.0.take() else { return Ok(()) };
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match child.try_wait().map_err(|e| Error::os(e, "wait for the peer process"))? {
                Some(status) if status.success() => return Ok(()),
                Some(status) => {
                    return Err(Error::new(ErrorKind::Other, format!("the peer process failed: {status}")));
                }
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::new(ErrorKind::TimedOut, "the peer process did not exit"));
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Lines from `input`, read on a thread so that waiting for them can be bounded.
fn reader(input: impl std::io::Read + Send + 'static) -> mpsc::Receiver<std::io::Result<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(input).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

/// Awaits `f`, failing with [`ErrorKind::TimedOut`] (naming `what`) after [`PEER_TIMEOUT`].
pub async fn bounded<T>(what: &str, f: impl Future<Output = T>) -> Result<T> {
    timeout(PEER_TIMEOUT, f).await.map_err(|_| Error::new(ErrorKind::TimedOut, format!("{what}: no answer")))
}

/// A deterministic byte pattern both sides can compute (`seed` tells patterns apart).
pub fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n).map(|i| ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(97)) >> 13) as u8).collect()
}

/// An [`ErrorKind::Other`] error with `msg`: a failed check.
pub fn mismatch(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg.into())
}

/// The requester's half of the setup the one-sided examples share: an RDMA context connected
/// to the responder's, the responder's memory imported, and a receive already posted for the
/// responder's answer (posted first, so nothing the requester does can race past it).
pub struct Requester {
    pub dev: Device,
    pub rdma: Rdma,
    pub conn: Connection,
    pub remote: RemoteMemory,
    pub answer: JoinHandle<(Result<Received>, Buf)>,
}

/// Connects to the responder: sends this side's connection blob and takes the responder's
/// connection and memory blobs in return.
pub async fn connect_requester(peer: &mut Peer) -> Result<Requester> {
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).build().await?;
    let (blob, pending) = rdma.export()?;
    let [conn_blob, mem_blob] = peer.exchange(&[&blob])?;
    let conn = pending.connect(&conn_blob).await?;
    let remote = dev.import(&mem_blob)?;
    let answer = spawn_local({
        let (rdma, buf) = (rdma.clone(), dev.alloc(64, Access::LOCAL_READ_WRITE)?.buf());
        async move { rdma.recv(buf).await }
    });
    Ok(Requester { dev, rdma, conn, remote, answer })
}
