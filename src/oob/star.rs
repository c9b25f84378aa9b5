//! The star-shaped rendezvous and allgather that [`UnixOob`](super::UnixOob) and
//! [`TcpOob`](super::TcpOob) share; only how a stream is accepted or dialled differs.
//!
//! **Joining** (blocking, bounded by a deadline): rank 0 accepts one stream per other rank;
//! each other rank dials rank 0, retrying while nobody listens yet (start order does not
//! matter), and introduces itself with a [`Hello`]: a magic, its rank and the size it was
//! told. Rank 0 rejects a stranger, a repeated rank or a size that differs from its own, so
//! two jobs that picked the same address fail loudly instead of mixing.
//!
//! **Allgather** (non-blocking): every other rank sends its contribution to rank 0, which
//! answers the concatenation in rank order. Each message is a frame: a little-endian `u32`
//! length, then the bytes. The streams are non-blocking after joining; a request reads and
//! writes what the socket takes and returns, so [`OobRequest::test`] never blocks.

use std::io::{self, ErrorKind as IoKind, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ms, OobRequest};
use crate::error::{Error, ErrorKind, Result};

/// A byte stream a rendezvous runs over (`UnixStream`, `TcpStream`).
pub(super) trait Stream: Read + Write + Send + 'static {
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Stream for std::os::unix::net::UnixStream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_nonblocking(self, on)
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::os::unix::net::UnixStream::set_read_timeout(self, t)
    }
}

impl Stream for std::net::TcpStream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        std::net::TcpStream::set_nonblocking(self, on)
    }
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_read_timeout(self, t)
    }
}

/// What a member sends first: who it is, and the job size it believes in.
struct Hello {
    rank: u32,
    size: u32,
}

impl Hello {
    /// Marks our rendezvous protocol ("async-doca out-of-band, version 1").
    const MAGIC: [u8; 4] = *b"ADO1";
    const LEN: usize = 12;

    fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..4].copy_from_slice(&Self::MAGIC);
        b[4..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..].copy_from_slice(&self.size.to_le_bytes());
        b
    }

    fn decode(b: &[u8; Self::LEN]) -> Option<Hello> {
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        (b[..4] == Self::MAGIC).then(|| Hello { rank: word(4), size: word(8) })
    }
}

/// Rank 0's side of joining: `accept` is a non-blocking accept (`Ok(None)`: nobody waiting).
/// Returns one stream per other rank, in rank order.
pub(super) fn accept_all<S: Stream>(
    size: u32,
    deadline: Instant,
    mut accept: impl FnMut() -> io::Result<Option<S>>,
) -> Result<Vec<S>> {
    let mut by_rank: Vec<Option<S>> = (1..size).map(|_| None).collect();
    while by_rank.iter().any(Option::is_none) {
        let Some(mut s) = accept().map_err(|e| Error::os(e, "oob: accept"))? else {
            if Instant::now() >= deadline {
                let missing: Vec<String> =
                    by_rank.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(i, _)| (i + 1).to_string()).collect();
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    format!("oob: not every member connected in time (missing ranks {})", missing.join(", ")),
                ));
            }
            // Joining is setup, not a data path: a millisecond's nap costs nothing here.
            std::thread::sleep(ms(1));
            continue;
        };
        // The hello is read blocking, bounded by what is left of the deadline.
        s.set_nonblocking(false).map_err(|e| Error::os(e, "oob: accept"))?;
        s.set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(ms(1))))
            .map_err(|e| Error::os(e, "oob: accept"))?;
        let mut b = [0u8; Hello::LEN];
        s.read_exact(&mut b).map_err(|e| Error::os(e, "oob: read a member's hello"))?;
        let hello = Hello::decode(&b)
            .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "oob: a stranger connected (not our protocol)"))?;
        if hello.size != size {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("oob: rank {} was told the job has {} members, rank 0 was told {size}", hello.rank, hello.size),
            ));
        }
        match by_rank.get_mut((hello.rank as usize).wrapping_sub(1)) {
            Some(slot @ None) => *slot = Some(s),
            _ => {
                return Err(Error::new(ErrorKind::InvalidArgument, format!("oob: bad or repeated rank {}", hello.rank)))
            }
        }
    }
    Ok(by_rank.into_iter().flatten().collect())
}

/// A non-blocking listener's `accept` result as [`accept_all`] takes it: `Ok(None)` when
/// nobody is waiting.
pub(super) fn accepted<S, A>(r: io::Result<(S, A)>) -> io::Result<Option<S>> {
    match r {
        Ok((s, _)) => Ok(Some(s)),
        Err(e) if e.kind() == IoKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

/// Another rank's side of joining: `connect` makes one attempt (given the time left);
/// `not_yet` says which failures mean "rank 0 is not listening yet" and are retried.
pub(super) fn dial<S: Stream>(
    rank: u32,
    size: u32,
    deadline: Instant,
    mut connect: impl FnMut(Duration) -> io::Result<S>,
    not_yet: impl Fn(&io::Error) -> bool,
) -> Result<S> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now()).max(ms(1));
        match connect(left) {
            Ok(mut s) => {
                s.write_all(&Hello { rank, size }.encode()).map_err(|e| Error::os(e, "oob: send hello"))?;
                return Ok(s);
            }
            Err(e) if not_yet(&e) => {
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

/// A joined member: its streams, shared with its requests.
#[derive(Debug)]
pub(super) struct Star<S> {
    rank: u32,
    size: u32,
    /// Rank 0: one stream per other rank, in rank order. Others: the stream to rank 0.
    peers: Arc<Mutex<Vec<S>>>,
}

impl<S: Stream> Star<S> {
    /// Makes the joined streams non-blocking, for [`OobRequest::test`].
    pub(super) fn new(rank: u32, size: u32, peers: Vec<S>) -> Result<Star<S>> {
        for p in &peers {
            p.set_nonblocking(true).map_err(|e| Error::os(e, "oob: set non-blocking"))?;
        }
        Ok(Star { rank, size, peers: Arc::new(Mutex::new(peers)) })
    }

    pub(super) fn rank(&self) -> u32 {
        self.rank
    }

    pub(super) fn size(&self) -> u32 {
        self.size
    }

    pub(super) fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        let n = self.peers.lock().unwrap_or_else(|p| p.into_inner()).len();
        let root = self.rank == 0;
        // Every frame's length is known before it arrives (each member's contribution is as
        // long as ours, rank 0's reply is all of them): a frame announcing another length is
        // refused at its header, so a peer cannot make us buffer more than that.
        let total =
            data.len().checked_mul(self.size as usize).filter(|&t| u32::try_from(t).is_ok()).ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidArgument,
                    format!("oob: {} members × {} bytes do not fit a frame's u32 length", self.size, data.len()),
                )
            })?;
        let (inbound, out) = if root {
            ((0..n).map(|_| Frame::new(data.len())).collect(), Vec::new())
        } else {
            (vec![Frame::new(total)], frame(data))
        };
        Ok(Box::new(StarRequest {
            peers: self.peers.clone(),
            root,
            mine: data.to_vec(),
            inbound,
            out,
            sent: vec![0; n],
        }))
    }
}

/// `data` with its length in front. The callers checked that the length fits a `u32`.
fn frame(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(4 + data.len());
    v.extend_from_slice(&(data.len() as u32).to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// A length-prefixed message of a known length being read.
struct Frame {
    /// The length prefix, then the payload.
    buf: Vec<u8>,
    /// How much of `buf` has arrived.
    got: usize,
}

impl Frame {
    /// A frame whose payload must be `len` bytes long.
    fn new(len: usize) -> Frame {
        Frame { buf: vec![0; 4 + len], got: 0 }
    }

    /// Reads what is available; true once the whole frame is in.
    fn pump(&mut self, s: &mut impl Read) -> Result<bool> {
        while self.got < self.buf.len() {
            // The prefix alone first: a wrong length is refused before its bytes are read.
            let end = if self.got < 4 { 4 } else { self.buf.len() };
            match s.read(&mut self.buf[self.got..end]) {
                Ok(0) => return Err(Error::new(ErrorKind::ConnectionLost, "oob: a member disconnected")),
                Ok(k) => {
                    self.got += k;
                    let want = self.buf.len() - 4;
                    let announced = u32::from_le_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]);
                    if self.got == 4 && announced as usize != want {
                        return Err(Error::new(
                            ErrorKind::InvalidArgument,
                            format!("oob: members sent different lengths (a frame of {announced} bytes, not {want})"),
                        ));
                    }
                }
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

struct StarRequest<S> {
    peers: Arc<Mutex<Vec<S>>>,
    root: bool,
    mine: Vec<u8>,
    /// Rank 0: each other rank's contribution, in rank order. The others: rank 0's reply.
    inbound: Vec<Frame>,
    /// The one frame this member sends every peer: rank 0's reply (empty until every
    /// contribution is in), another rank's contribution.
    out: Vec<u8>,
    /// How much of `out` each peer took.
    sent: Vec<usize>,
}

/// Writes what the sockets take of `out`; true once every peer has all of it.
fn flush<S: Stream>(peers: &mut [S], out: &[u8], sent: &mut [usize]) -> Result<bool> {
    let mut all = true;
    for (s, sent) in peers.iter_mut().zip(sent) {
        while *sent < out.len() {
            match s.write(&out[*sent..]) {
                Ok(k) => *sent += k,
                Err(e) if e.kind() == IoKind::WouldBlock => break,
                Err(e) if e.kind() == IoKind::Interrupted => {}
                Err(e) => return Err(Error::os(e, "oob: write")),
            }
        }
        all &= *sent == out.len();
    }
    Ok(all)
}

impl<S: Stream> OobRequest for StarRequest<S> {
    fn test(&mut self) -> Result<Option<Vec<u8>>> {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if self.root && self.out.is_empty() {
            let mut all_in = true;
            for (s, f) in peers.iter_mut().zip(&mut self.inbound) {
                all_in &= f.pump(s)?;
            }
            if !all_in {
                return Ok(None);
            }
            let mut all = Vec::with_capacity(self.mine.len() * (1 + self.inbound.len()));
            all.extend_from_slice(&self.mine);
            for f in &self.inbound {
                all.extend_from_slice(f.payload());
            }
            self.out = frame(&all);
        }
        if !flush(&mut peers, &self.out, &mut self.sent)? {
            return Ok(None);
        }
        if self.root {
            return Ok(Some(self.out[4..].to_vec()));
        }
        if !self.inbound[0].pump(&mut peers[0])? {
            return Ok(None);
        }
        Ok(Some(self.inbound[0].payload().to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_rejects_strangers() {
        let b = Hello { rank: 3, size: 9 }.encode();
        let h = Hello::decode(&b).unwrap();
        assert_eq!((h.rank, h.size), (3, 9));
        let mut bad = b;
        bad[0] = b'G'; // an HTTP client, say
        assert!(Hello::decode(&bad).is_none());
    }

    #[test]
    fn frames_arrive_in_pieces() {
        // A reader that hands out one byte per call, then "would block" every other call.
        struct Trickle(Vec<u8>, usize, bool);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.2 = !self.2;
                if self.2 {
                    return Err(IoKind::WouldBlock.into());
                }
                match self.0.get(self.1) {
                    Some(&b) => {
                        buf[0] = b;
                        self.1 += 1;
                        Ok(1)
                    }
                    None => Ok(0),
                }
            }
        }
        let mut src = Trickle(frame(b"hello"), 0, false);
        let mut f = Frame::new(5);
        let mut polls = 0;
        while !f.pump(&mut src).unwrap() {
            polls += 1;
        }
        assert_eq!(f.payload(), b"hello");
        assert!(polls >= 9, "every byte after a would-block");
        // The stream ends: the next frame reports the member as gone.
        let mut next = Frame::new(5);
        let e = loop {
            match next.pump(&mut src) {
                Ok(false) => continue,
                Ok(true) => panic!("a frame out of nothing"),
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), ErrorKind::ConnectionLost);
    }

    /// A member that went away is ConnectionLost on the write side too (found by the chaos
    /// soak: a UROM domain's stop failed with `oob: write: Broken pipe` as an OS error after a
    /// member was killed, which the caller could not tell from a local failure).
    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn a_member_gone_is_connection_lost_when_writing() {
        let (mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(theirs);
        let star = Star::new(1, 2, vec![mine]).unwrap();
        let mut req = star.allgather(b"contribution").unwrap();
        let e = loop {
            match req.test() {
                Ok(None) => continue,
                Ok(Some(_)) => panic!("an exchange with a member that is gone"),
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
        assert!(std::error::Error::source(&e).is_some(), "the io::Error is kept");
    }

    #[test]
    fn a_frame_of_another_length_is_refused_at_its_prefix() {
        // Announces 4 GiB - 1 bytes: refused after the prefix, nothing more is read or buffered.
        let mut src = io::Cursor::new([&u32::MAX.to_le_bytes()[..], b"more"].concat());
        let e = Frame::new(5).pump(&mut src).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(src.position(), 4);
        let mut src = io::Cursor::new(frame(b"abc"));
        assert_eq!(Frame::new(2).pump(&mut src).unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}
