//! Out-of-band collectives: how the host processes of a domain find each other.
//!
//! Starting a [`Domain`](super::Domain) exchanges every member's worker addresses and buffer
//! descriptors with an **allgather** that runs outside UROM, over whatever the application
//! already has (MPI, a launcher, a socket). DOCA asks for it as three C callbacks; this module
//! states it as the [`Oob`] trait and provides two implementations:
//!
//! * [`InProcessOob`]: members are threads (or executors) of one process;
//! * [`SocketOob`]: members are processes on this host that meet at a Unix socket, rank 0
//!   accepting the others (rank and size from arguments or the environment).
//!
//! An allgather is started with [`Oob::allgather`] and driven with [`OobRequest::test`], which
//! must never block: it runs inside the progress engine of the executor thread.

use std::collections::HashMap;
use std::io::{ErrorKind as IoKind, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// An out-of-band communicator of `size` members, of which this is `rank`.
pub trait Oob: 'static {
    /// This member's index, `0..size`.
    fn rank(&self) -> u32;
    /// The number of members.
    fn size(&self) -> u32;
    /// Starts an allgather: every member contributes `data` (the same length on every member)
    /// and the request completes with all contributions concatenated in rank order. Members
    /// start their allgathers in the same order; one request at a time per member.
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>>;
}

/// Runs one allgather of `data` to completion from async code, without blocking the
/// executor: the request is tested after a few yields (members usually arrive together),
/// then every millisecond, until `deadline`. Errors are prefixed with `what`.
pub(crate) async fn drive_allgather(oob: &dyn Oob, data: &[u8], deadline: Instant, what: &str) -> Result<Vec<u8>> {
    let mut req = oob.allgather(data).map_err(|e| e.context_prefix(what))?;
    let mut spins = 0u32;
    loop {
        if let Some(all) = req.test().map_err(|e| e.context_prefix(what))? {
            return Ok(all);
        }
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!("{what}: the members did not all join the out-of-band exchange in time"),
            ));
        }
        if spins < 64 {
            spins += 1;
            crate::executor::yield_now().await;
        } else {
            crate::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// An allgather in progress.
pub trait OobRequest {
    /// Makes progress without blocking: `Ok(None)` while in progress, `Ok(Some(all))` once
    /// done (`size × len` bytes, rank order).
    fn test(&mut self) -> Result<Option<Vec<u8>>>;
}

// ---------------------------------------------------------------------------------------
// In-process

/// One allgather among in-process members.
struct Round {
    /// Each member's contribution, once made.
    parts: Vec<Option<Vec<u8>>>,
    /// How many members took the result; the round is forgotten when all did.
    taken: u32,
}

#[derive(Default)]
struct Rounds {
    rounds: HashMap<u64, Round>,
}

impl std::fmt::Debug for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} round(s) open", self.rounds.len())
    }
}

/// An [`Oob`] whose members are threads of this process.
///
/// ```
/// use async_doca::urom::{InProcessOob, Oob, OobRequest};
/// let members = InProcessOob::group(2);
/// let mut reqs: Vec<_> = members.iter().map(|m| m.allgather(&[m.rank() as u8]).unwrap()).collect();
/// assert_eq!(reqs[0].test().unwrap(), Some(vec![0, 1]));
/// assert_eq!(reqs[1].test().unwrap(), Some(vec![0, 1]));
/// ```
#[derive(Debug)]
pub struct InProcessOob {
    rank: u32,
    size: u32,
    next_round: std::cell::Cell<u64>,
    shared: Arc<Mutex<Rounds>>,
}

impl InProcessOob {
    /// `n` connected members, ranks `0..n`; hand one to each thread.
    pub fn group(n: u32) -> Vec<InProcessOob> {
        let shared = Arc::new(Mutex::new(Rounds::default()));
        (0..n)
            .map(|rank| InProcessOob { rank, size: n, next_round: std::cell::Cell::new(0), shared: shared.clone() })
            .collect()
    }
}

impl Oob for InProcessOob {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        let round = self.next_round.get();
        self.next_round.set(round + 1);
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let entry = g.rounds.entry(round).or_insert_with(|| Round { parts: vec![None; self.size as usize], taken: 0 });
        entry.parts[self.rank as usize] = Some(data.to_vec());
        Ok(Box::new(InProcessRequest { shared: self.shared.clone(), round, size: self.size, done: false }))
    }
}

struct InProcessRequest {
    shared: Arc<Mutex<Rounds>>,
    round: u64,
    size: u32,
    done: bool,
}

impl OobRequest for InProcessRequest {
    fn test(&mut self) -> Result<Option<Vec<u8>>> {
        if self.done {
            return Err(Error::new(ErrorKind::BadState, "oob: request already completed"));
        }
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = g.rounds.get_mut(&self.round) else {
            return Err(Error::new(ErrorKind::BadState, "oob: round vanished"));
        };
        if entry.parts.iter().any(|c| c.is_none()) {
            return Ok(None);
        }
        let all: Vec<u8> = entry.parts.iter().flat_map(|c| c.as_deref().unwrap_or(&[])).copied().collect();
        entry.taken += 1;
        if entry.taken == self.size {
            g.rounds.remove(&self.round);
        }
        self.done = true;
        Ok(Some(all))
    }
}

// ---------------------------------------------------------------------------------------
// Unix socket rendezvous

/// Environment variable naming the rendezvous socket of [`SocketOob::from_env`].
pub const OOB_PATH_ENV: &str = "ASYNC_DOCA_OOB_PATH";
/// Environment variable holding this process's rank for [`SocketOob::from_env`].
pub const OOB_RANK_ENV: &str = "ASYNC_DOCA_OOB_RANK";
/// Environment variable holding the number of processes for [`SocketOob::from_env`].
pub const OOB_SIZE_ENV: &str = "ASYNC_DOCA_OOB_SIZE";

/// An [`Oob`] whose members are processes on this host meeting at a Unix socket.
///
/// Rank 0 listens at the path and the others connect (retrying until the timeout, so start
/// order does not matter); once all are connected rank 0 removes the socket file. Allgathers
/// are star-shaped through rank 0: every member sends its contribution, rank 0 answers the
/// concatenation. Each message is a little-endian `u32` length and the bytes.
#[derive(Debug)]
pub struct SocketOob {
    rank: u32,
    size: u32,
    /// Rank 0: one stream per other rank, in rank order. Others: the stream to rank 0.
    peers: Arc<Mutex<Vec<UnixStream>>>,
}

impl SocketOob {
    /// Joins the rendezvous at `path` as `rank` of `size`, waiting at most `timeout` for the
    /// others (or for rank 0 to listen).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for `rank >= size`, [`ErrorKind::TimedOut`] when the
    /// members did not all arrive, [`ErrorKind::Os`] for socket failures.
    pub fn connect(path: impl AsRef<Path>, rank: u32, size: u32, timeout: Duration) -> Result<SocketOob> {
        let path = path.as_ref();
        if size == 0 || rank >= size {
            return Err(Error::new(ErrorKind::InvalidArgument, format!("oob: rank {rank} is not below size {size}")));
        }
        let deadline = Instant::now() + timeout;
        let peers =
            if rank == 0 { Self::accept_all(path, size, deadline)? } else { vec![Self::dial(path, rank, deadline)?] };
        for p in &peers {
            p.set_nonblocking(true).map_err(|e| Error::os(e, "oob: set non-blocking"))?;
        }
        Ok(SocketOob { rank, size, peers: Arc::new(Mutex::new(peers)) })
    }

    /// [`connect`](SocketOob::connect) with the path, rank and size from
    /// [`OOB_PATH_ENV`], [`OOB_RANK_ENV`] and [`OOB_SIZE_ENV`].
    pub fn from_env(timeout: Duration) -> Result<SocketOob> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("oob: {name} is not set")))
        };
        let num = |name: &str| -> Result<u32> {
            var(name)?
                .parse()
                .map_err(|_| Error::new(ErrorKind::InvalidArgument, format!("oob: {name} is not a number")))
        };
        Self::connect(PathBuf::from(var(OOB_PATH_ENV)?), num(OOB_RANK_ENV)?, num(OOB_SIZE_ENV)?, timeout)
    }

    fn accept_all(path: &Path, size: u32, deadline: Instant) -> Result<Vec<UnixStream>> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).map_err(|e| Error::os(e, "oob: bind the rendezvous socket"))?;
        listener.set_nonblocking(true).map_err(|e| Error::os(e, "oob: set non-blocking"))?;
        let mut by_rank: Vec<Option<UnixStream>> = (1..size).map(|_| None).collect();
        let result = (|| {
            while by_rank.iter().any(|s| s.is_none()) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false).map_err(|e| Error::os(e, "oob: accept"))?;
                        s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(ms(1))))
                            .map_err(|e| Error::os(e, "oob: accept"))?;
                        let mut r = [0u8; 4];
                        s.read_exact(&mut r).map_err(|e| Error::os(e, "oob: read a member's rank"))?;
                        let r = u32::from_le_bytes(r);
                        match by_rank.get_mut((r as usize).wrapping_sub(1)) {
                            Some(slot @ None) => *slot = Some(s),
                            _ => {
                                return Err(Error::new(
                                    ErrorKind::InvalidArgument,
                                    format!("oob: bad or repeated rank {r}"),
                                ))
                            }
                        }
                    }
                    Err(e) if e.kind() == IoKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            return Err(Error::new(ErrorKind::TimedOut, "oob: not every member connected in time"));
                        }
                        std::thread::sleep(ms(1));
                    }
                    Err(e) => return Err(Error::os(e, "oob: accept")),
                }
            }
            Ok(())
        })();
        // Everybody is in (or we give up): the socket file is not needed any more.
        let _ = std::fs::remove_file(path);
        result?;
        Ok(by_rank.into_iter().flatten().collect())
    }

    fn dial(path: &Path, rank: u32, deadline: Instant) -> Result<UnixStream> {
        loop {
            match UnixStream::connect(path) {
                Ok(mut s) => {
                    s.write_all(&rank.to_le_bytes()).map_err(|e| Error::os(e, "oob: send rank"))?;
                    return Ok(s);
                }
                Err(e) if matches!(e.kind(), IoKind::NotFound | IoKind::ConnectionRefused) => {
                    if Instant::now() >= deadline {
                        return Err(Error::new(ErrorKind::TimedOut, "oob: rank 0 did not listen in time"));
                    }
                    // Rank 0 may not be listening yet: this is setup, not a data path.
                    std::thread::sleep(ms(2));
                }
                Err(e) => return Err(Error::os(e, "oob: connect")),
            }
        }
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Oob for SocketOob {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        let n = self.peers.lock().unwrap_or_else(|p| p.into_inner()).len();
        let mut req = SocketRequest {
            peers: self.peers.clone(),
            root: self.rank == 0,
            mine: data.to_vec(),
            inbound: (0..n).map(|_| Frame::default()).collect(),
            outbound: (0..n).map(|_| (Vec::new(), 0)).collect(),
            result: None,
        };
        if !req.root {
            req.outbound[0].0 = frame(data);
        }
        Ok(Box::new(req))
    }
}

fn frame(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + data.len());
    v.extend_from_slice(&(data.len() as u32).to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// A length-prefixed message being read.
#[derive(Default)]
struct Frame {
    buf: Vec<u8>,
    done: bool,
}

impl Frame {
    /// Reads what is available; true once the whole frame is in.
    fn pump(&mut self, s: &mut UnixStream) -> Result<bool> {
        let mut chunk = [0u8; 16 * 1024];
        while !self.done {
            let want = if self.buf.len() < 4 {
                4 - self.buf.len()
            } else {
                let len = u32::from_le_bytes(self.buf[..4].try_into().unwrap_or_default()) as usize;
                4 + len - self.buf.len()
            };
            if want == 0 {
                self.done = true;
                break;
            }
            let n = want.min(chunk.len());
            match s.read(&mut chunk[..n]) {
                Ok(0) => return Err(Error::new(ErrorKind::ConnectionLost, "oob: a member disconnected")),
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == IoKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) => return Err(Error::os(e, "oob: read")),
            }
        }
        Ok(true)
    }
    fn payload(&self) -> &[u8] {
        &self.buf[4..]
    }
}

struct SocketRequest {
    peers: Arc<Mutex<Vec<UnixStream>>>,
    root: bool,
    mine: Vec<u8>,
    inbound: Vec<Frame>,
    /// Bytes to send to each peer and how many are sent.
    outbound: Vec<(Vec<u8>, usize)>,
    result: Option<Vec<u8>>,
}

impl SocketRequest {
    fn flush(&mut self, peers: &mut [UnixStream]) -> Result<bool> {
        let mut all = true;
        for (s, (bytes, sent)) in peers.iter_mut().zip(self.outbound.iter_mut()) {
            while *sent < bytes.len() {
                match s.write(&bytes[*sent..]) {
                    Ok(k) => *sent += k,
                    Err(e) if e.kind() == IoKind::WouldBlock => break,
                    Err(e) if e.kind() == IoKind::Interrupted => {}
                    Err(e) => return Err(Error::os(e, "oob: write")),
                }
            }
            all &= *sent == bytes.len();
        }
        Ok(all)
    }
}

impl OobRequest for SocketRequest {
    fn test(&mut self) -> Result<Option<Vec<u8>>> {
        let peers_arc = self.peers.clone();
        let mut peers = peers_arc.lock().unwrap_or_else(|p| p.into_inner());
        if self.root {
            if self.result.is_none() {
                let mut all_in = true;
                for (s, f) in peers.iter_mut().zip(self.inbound.iter_mut()) {
                    all_in &= f.pump(s)?;
                }
                if !all_in {
                    return Ok(None);
                }
                let mut all = self.mine.clone();
                for f in &self.inbound {
                    if f.payload().len() != self.mine.len() {
                        return Err(Error::new(ErrorKind::InvalidArgument, "oob: members sent different lengths"));
                    }
                    all.extend_from_slice(f.payload());
                }
                let reply = frame(&all);
                for o in &mut self.outbound {
                    *o = (reply.clone(), 0);
                }
                self.result = Some(all);
            }
            if self.flush(&mut peers)? {
                return Ok(self.result.take());
            }
            Ok(None)
        } else {
            if !self.flush(&mut peers)? {
                return Ok(None);
            }
            if !self.inbound[0].pump(&mut peers[0])? {
                return Ok(None);
            }
            Ok(Some(self.inbound[0].payload().to_vec()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(mut reqs: Vec<Box<dyn OobRequest>>) -> Vec<Vec<u8>> {
        let mut out: Vec<Option<Vec<u8>>> = reqs.iter().map(|_| None).collect();
        for _ in 0..100_000 {
            for (r, o) in reqs.iter_mut().zip(out.iter_mut()) {
                if o.is_none() {
                    *o = r.test().unwrap();
                }
            }
            if out.iter().all(|o| o.is_some()) {
                return out.into_iter().flatten().collect();
            }
            std::thread::yield_now();
        }
        panic!("allgather did not finish");
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn in_process_rounds_in_order() {
        let g = InProcessOob::group(3);
        for round in 0..3u8 {
            let reqs = g.iter().map(|m| m.allgather(&[round, m.rank() as u8]).unwrap()).collect();
            for all in drive(reqs) {
                assert_eq!(all, vec![round, 0, round, 1, round, 2]);
            }
        }
        assert_eq!(g[0].shared.lock().unwrap().rounds.len(), 0, "finished rounds are removed");
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn socket_rendezvous_gathers_in_rank_order() {
        let path = std::env::temp_dir().join(format!("async-doca-oob-test-{}.sock", std::process::id()));
        let threads: Vec<_> = (1..4u32)
            .map(|rank| {
                let path = path.clone();
                std::thread::spawn(move || SocketOob::connect(&path, rank, 4, Duration::from_secs(10)).unwrap())
            })
            .collect();
        let root = SocketOob::connect(&path, 0, 4, Duration::from_secs(10)).unwrap();
        assert!(!path.exists(), "rank 0 removes the socket file once everybody is in");
        let mut members = vec![root];
        members.extend(threads.into_iter().map(|t| t.join().unwrap()));
        for len in [0usize, 5, 70_000] {
            let reqs = members.iter().map(|m| m.allgather(&vec![m.rank() as u8; len]).unwrap()).collect();
            let want: Vec<u8> = (0..4u8).flat_map(|r| std::iter::repeat_n(r, len)).collect();
            for all in drive(reqs) {
                assert_eq!(all, want);
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn socket_rendezvous_times_out_without_peers() {
        let path = std::env::temp_dir().join(format!("async-doca-oob-timeout-{}.sock", std::process::id()));
        let e = SocketOob::connect(&path, 0, 2, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(!path.exists());
        let e = SocketOob::connect(&path, 1, 2, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
    }
}
