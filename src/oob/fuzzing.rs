//! Entry points for the fuzz target `fuzz/fuzz_targets/oob_rendezvous.rs`: the real
//! star rendezvous (`star::accept_all`, `star::dial`) and
//! allgather (`Star`) run over in-memory byte pipes instead of sockets, so a fuzzer can
//! play every joining member with bytes of its choosing.
//!
//! **Not API**: hidden from the docs, no stability promise, may change or go at any time.
//!
//! A [`Pipe`] hands out the bytes its peer "sent" (a script), a few at a time, then either
//! reports the peer gone (end of stream) or stays silent; it records what the code under
//! test writes. In non-blocking mode it may answer "would block" every other call, as a
//! socket with nothing ready does, so partial frames are exercised.

use std::io::{self, ErrorKind as IoKind, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::star::{self, Star, Stream};
use super::OobRequest;
use crate::error::{Error, ErrorKind, Result};

/// One peer of the code under test: the bytes it sends, and what it does after them.
#[derive(Clone, Debug, Default)]
pub struct Peer {
    /// Everything the peer sends, in order (a hello, then frames, for a joining member).
    pub sends: Vec<u8>,
    /// After its bytes: `false` hangs up (end of stream), `true` stays connected and silent.
    pub silent_after: bool,
}

/// How the in-memory pipes deliver bytes.
#[derive(Clone, Copy, Debug)]
pub struct PipeShape {
    /// At most this many bytes per read or write call (0 is taken as 1).
    pub chunk: usize,
    /// In non-blocking mode, every other call answers "would block".
    pub stall: bool,
}

/// An in-memory byte pipe standing in for a socket (the rendezvous's `Stream`).
#[derive(Debug)]
pub struct Pipe {
    peer: Peer,
    read_at: usize,
    shape: PipeShape,
    nonblocking: AtomicBool,
    flip: bool,
    written: Arc<Mutex<Vec<u8>>>,
}

impl Pipe {
    fn new(peer: Peer, shape: PipeShape, written: Arc<Mutex<Vec<u8>>>) -> Pipe {
        Pipe { peer, read_at: 0, shape, nonblocking: AtomicBool::new(false), flip: false, written }
    }

    /// In non-blocking mode with `stall`, alternate calls would block.
    fn stalls(&mut self) -> bool {
        if self.shape.stall && self.nonblocking.load(Ordering::Relaxed) {
            self.flip = !self.flip;
            return self.flip;
        }
        false
    }
}

impl Read for Pipe {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stalls() {
            return Err(IoKind::WouldBlock.into());
        }
        let left = &self.peer.sends[self.read_at..];
        if left.is_empty() {
            // A silent peer: "would block", which is also what a blocking read of a socket
            // answers when its read timeout passes (here: at once).
            return if self.peer.silent_after { Err(IoKind::WouldBlock.into()) } else { Ok(0) };
        }
        let n = left.len().min(buf.len()).min(self.shape.chunk.max(1));
        buf[..n].copy_from_slice(&left[..n]);
        self.read_at += n;
        Ok(n)
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.stalls() {
            return Err(IoKind::WouldBlock.into());
        }
        let n = buf.len().min(self.shape.chunk.max(1));
        self.written.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Stream for Pipe {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.nonblocking.store(on, Ordering::Relaxed);
        Ok(())
    }
    fn set_read_timeout(&self, _: Option<Duration>) -> io::Result<()> {
        Ok(())
    }
}

/// Tests `req` until it completes, fails, or `deadline` passes (then `TimedOut`).
fn drive(req: &mut dyn OobRequest, deadline: Instant) -> Result<Vec<u8>> {
    loop {
        if let Some(all) = req.test()? {
            return Ok(all);
        }
        if Instant::now() >= deadline {
            return Err(Error::new(ErrorKind::TimedOut, "oob fuzzing: the allgather did not complete in time"));
        }
    }
}

/// Rank 0 of a job of `members.len() + 1`: accepts `members` in order (each a pipe playing
/// that member's script) with `star::accept_all`, then runs one
/// allgather of `contribution` to completion, all within `limit`.
///
/// Returns the allgather's outcome and, per member in the order they connected, the bytes
/// rank 0 wrote to it.
pub fn rank0(
    contribution: &[u8],
    members: Vec<Peer>,
    shape: PipeShape,
    limit: Duration,
) -> (Result<Vec<u8>>, Vec<Vec<u8>>) {
    let written: Vec<Arc<Mutex<Vec<u8>>>> = members.iter().map(|_| Arc::default()).collect();
    let deadline = Instant::now() + limit;
    let result = (|| {
        let size = u32::try_from(members.len() + 1)
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "oob fuzzing: too many members"))?;
        let mut connecting = members.into_iter().zip(written.iter()).map(|(m, w)| Pipe::new(m, shape, w.clone()));
        let streams = star::accept_all(size, deadline, || Ok(connecting.next()))?;
        let me = Star::new(0, size, streams)?;
        let mut req = me.allgather(contribution)?;
        drive(&mut *req, deadline)
    })();
    let written = written.iter().map(|w| w.lock().unwrap_or_else(|p| p.into_inner()).clone()).collect();
    (result, written)
}

/// A joining member `rank` of `size`: dials rank 0 with `star::dial` (which
/// sends its hello), then runs one allgather of `contribution` to completion within `limit`,
/// reading rank 0's side from `root`.
///
/// Returns the allgather's outcome and the bytes the member wrote (its hello, then its frame).
pub fn member(
    rank: u32,
    size: u32,
    contribution: &[u8],
    root: Peer,
    shape: PipeShape,
    limit: Duration,
) -> (Result<Vec<u8>>, Vec<u8>) {
    let written: Arc<Mutex<Vec<u8>>> = Arc::default();
    let deadline = Instant::now() + limit;
    let result = (|| {
        let mut root = Some(Pipe::new(root, shape, written.clone()));
        let s = star::dial(
            rank,
            size,
            deadline,
            |_| root.take().ok_or_else(|| io::Error::from(IoKind::ConnectionRefused)),
            |_| false,
        )?;
        let me = Star::new(rank, size, vec![s])?;
        let mut req = me.allgather(contribution)?;
        drive(&mut *req, deadline)
    })();
    let written = written.lock().unwrap_or_else(|p| p.into_inner()).clone();
    (result, written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: PipeShape = PipeShape { chunk: 3, stall: true };
    const LIMIT: Duration = Duration::from_secs(5);

    fn hello(rank: u32, size: u32) -> Vec<u8> {
        [&b"ADO1"[..], &rank.to_le_bytes(), &size.to_le_bytes()].concat()
    }

    fn frame(b: &[u8]) -> Vec<u8> {
        [&(b.len() as u32).to_le_bytes()[..], b].concat()
    }

    #[test]
    fn members_out_of_order_are_gathered_in_rank_order() {
        // Rank 2 connects first; both hang up after their frame.
        let m2 = Peer { sends: [hello(2, 3), frame(b"cc")].concat(), silent_after: false };
        let m1 = Peer { sends: [hello(1, 3), frame(b"bb")].concat(), silent_after: true };
        let (r, written) = rank0(b"aa", vec![m2, m1], SHAPE, LIMIT);
        assert_eq!(r.unwrap(), b"aabbcc");
        assert_eq!(written, vec![frame(b"aabbcc"), frame(b"aabbcc")]);
        // A member reading that reply gets the same, and sent its hello and frame.
        let root = Peer { sends: frame(b"aabbcc"), silent_after: false };
        let (r, sent) = member(1, 3, b"bb", root, SHAPE, LIMIT);
        assert_eq!(r.unwrap(), b"aabbcc");
        assert_eq!(sent, [hello(1, 3), frame(b"bb")].concat());
    }

    #[test]
    fn strangers_short_hellos_and_silence_end_in_errors() {
        let stranger = Peer { sends: b"GET / HTTP/1.1\r\n".to_vec(), silent_after: false };
        assert_eq!(rank0(b"a", vec![stranger], SHAPE, LIMIT).0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        let short = Peer { sends: hello(1, 2)[..7].to_vec(), silent_after: false };
        assert!(rank0(b"a", vec![short], SHAPE, LIMIT).0.is_err());
        let wrong_size = Peer { sends: [hello(1, 3), frame(b"b")].concat(), silent_after: false };
        assert_eq!(rank0(b"a", vec![wrong_size], SHAPE, LIMIT).0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        // A frame's prefix, then silence: the deadline ends it.
        let silent = Peer { sends: [hello(1, 2), vec![1, 0, 0, 0]].concat(), silent_after: true };
        let r = rank0(b"a", vec![silent], SHAPE, Duration::from_millis(20)).0;
        assert_eq!(r.unwrap_err().kind(), ErrorKind::TimedOut);
        // A frame announcing more than every member contributes is refused at once.
        let long = Peer { sends: [hello(1, 2), vec![9, 0, 0, 0, 1]].concat(), silent_after: true };
        assert_eq!(rank0(b"a", vec![long], SHAPE, LIMIT).0.unwrap_err().kind(), ErrorKind::InvalidArgument);
        // A member refuses a reply that is not `size` contributions long.
        let root = Peer { sends: frame(b"aab"), silent_after: false };
        assert_eq!(member(1, 2, b"b", root, SHAPE, LIMIT).0.unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}
