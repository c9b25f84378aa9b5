//! What plugins that talk in messages share: a strict little-endian codec for command and
//! notification bodies ([`Reader`], [`Writer`], [`DecodeError`]) and a datagram socket of
//! their own for traffic between the workers of a domain ([`bind_unique_datagram`]).
//!
//! Every format here is little-endian, the byte order of every platform DOCA runs on, so C
//! structs in native order (NVIDIA's sample formats) and this project's own length-prefixed
//! formats decode with the same reader. Decoding is strict: a short message, trailing bytes
//! or a count larger than what is left is a [`DecodeError`], which a plugin answers with
//! `DOCA_ERROR_INVALID_VALUE` (`From<DecodeError> for Status`).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Status;

/// A message that does not decode exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    /// What was being decoded.
    pub what: &'static str,
    /// What was wrong with it.
    pub why: &'static str,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed {}: {}", self.what, self.why)
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for Status {
    fn from(_: DecodeError) -> Status {
        Status::INVALID_VALUE
    }
}

/// Cursor over a message being decoded; `what` names the message in errors.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

// The small methods of `Reader` and `Writer` are `#[inline]`: they are called across crates
// (plugins, the runtime's command encoders) once per field of every command and answer, and
// without the hint each field was a call (an offloaded collective's command, ~450
// instructions to encode).
impl<'a> Reader<'a> {
    /// Reads `buf`, a `what` (e.g. "worker_graph command").
    #[inline]
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(self.invalid("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// The next byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    /// The next little-endian `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    /// The next little-endian `u64`.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// The next `n` bytes as they are.
    #[inline]
    pub fn raw(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        self.take(n)
    }

    /// Passes over `n` bytes (a C struct's padding, whose contents are unspecified).
    #[inline]
    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(drop)
    }

    /// A `u32` length, then that many bytes ([`Writer::bytes`]).
    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// A `u32` count, then that many `u64`s ([`Writer::u64s`]). The count is checked against
    /// what is left before anything is allocated, so a forged count cannot make the decoder
    /// reserve gigabytes.
    pub fn u64s(&mut self) -> Result<Vec<u64>, DecodeError> {
        let n = self.u32()? as usize;
        if n > self.buf.len() / 8 {
            return Err(self.invalid("truncated"));
        }
        (0..n).map(|_| self.u64()).collect()
    }

    /// Bytes left to read.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// An error about this message.
    #[inline]
    pub fn invalid(&self, why: &'static str) -> DecodeError {
        DecodeError { what: self.what, why }
    }

    /// The error of a type tag this format does not know.
    pub fn unknown_tag(&self) -> DecodeError {
        self.invalid("unknown tag")
    }

    /// Ends decoding: the message must have been read to its last byte.
    #[inline]
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.invalid("trailing bytes"))
        }
    }
}

/// Builder of a message being encoded (the mirror of [`Reader`]).
#[derive(Debug, Default)]
pub struct Writer(Vec<u8>);

impl Writer {
    /// A writer whose buffer holds `bytes` without growing: a message of known size (a
    /// per-operation command) is then one allocation, where a default writer reallocates as
    /// it grows.
    #[inline]
    pub fn with_capacity(bytes: usize) -> Self {
        Writer(Vec::with_capacity(bytes))
    }

    /// Appends a byte.
    #[inline]
    pub fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }

    /// Appends a little-endian `u32`.
    #[inline]
    pub fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a little-endian `u64`.
    #[inline]
    pub fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends bytes as they are.
    #[inline]
    pub fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }

    /// Appends zero bytes up to a total length of `len` (a C struct's padding).
    #[inline]
    pub fn pad_to(mut self, len: usize) -> Self {
        if self.0.len() < len {
            self.0.resize(len, 0);
        }
        self
    }

    /// Appends a `u32` length, then the bytes.
    ///
    /// # Panics
    /// If `b` is 4 GiB or longer (no plugin message is).
    #[inline]
    pub fn bytes(self, b: &[u8]) -> Self {
        let n = u32::try_from(b.len()).expect("a field of at most 4 GiB");
        self.u32(n).raw(b)
    }

    /// Appends a `u32` count, then the `u64`s.
    ///
    /// # Panics
    /// If there are 2^32 values or more.
    pub fn u64s(self, v: &[u64]) -> Self {
        let n = u32::try_from(v.len()).expect("fewer than 2^32 values");
        v.iter().fold(self.u32(n), |w, &x| w.u64(x))
    }

    /// The encoded message.
    #[inline]
    pub fn done(self) -> Vec<u8> {
        self.0
    }
}

/// Binds a non-blocking datagram socket in the abstract namespace under a name no other
/// socket has: `{prefix}-{pid}-{counter}-{64 random bits}`. Returns it with its name (the
/// address a plugin announces to its peers). Abstract names vanish with the socket, so a
/// crashed worker leaves nothing behind.
///
/// # Errors
/// The socket cannot be made or bound; `ALREADY_EXIST` if eight attempts all met a name in
/// use (it takes the same pid, counter and random bits, so only a freak collision).
pub fn bind_unique_datagram(prefix: &str) -> Result<(UnixDatagram, Vec<u8>), Status> {
    static INSTANCE: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    let mut last = Status::UNEXPECTED;
    for _ in 0..8 {
        let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let random = RandomState::new().hash_one((pid, n, std::time::SystemTime::now()));
        let name = format!("{prefix}-{pid}-{n}-{random:016x}").into_bytes();
        let addr = SocketAddr::from_abstract_name(&name).map_err(|e| Status::from_io(&e))?;
        match UnixDatagram::bind_addr(&addr) {
            Ok(sock) => {
                sock.set_nonblocking(true).map_err(|e| Status::from_io(&e))?;
                return Ok((sock, name));
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => last = Status::ALREADY_EXIST,
            Err(e) => return Err(Status::from_io(&e)),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let m = Writer::default().u8(7).u32(9).u64(11).bytes(b"abc").u64s(&[1, 2]).raw(&[5]).pad_to(48).done();
        assert_eq!(m.len(), 48);
        let mut r = Reader::new(&m, "test message");
        assert_eq!((r.u8().unwrap(), r.u32().unwrap(), r.u64().unwrap()), (7, 9, 11));
        assert_eq!(r.bytes().unwrap(), b"abc");
        assert_eq!(r.u64s().unwrap(), [1, 2]);
        assert_eq!(r.raw(1).unwrap(), [5]);
        assert_eq!(r.remaining(), 48 - 1 - 4 - 8 - 7 - 20 - 1, "the padding");
        r.skip(7).unwrap();
        r.finish().unwrap();
        let r = Reader::new(&m, "test message");
        assert_eq!(r.finish().unwrap_err().why, "trailing bytes");
        // A forged count larger than the message is refused before any allocation.
        let forged = Writer::default().u32(u32::MAX).done();
        assert_eq!(Reader::new(&forged, "x").u64s().unwrap_err().why, "truncated");
        assert_eq!(Reader::new(&[1, 2], "x").u32().unwrap_err().to_string(), "malformed x: truncated");
        assert_eq!(Status::from(Reader::new(&[], "x").unknown_tag()), Status::INVALID_VALUE);
    }

    #[test]
    fn datagram_names_are_unique() {
        let (a, na) = bind_unique_datagram("wire-test").unwrap();
        let (b, nb) = bind_unique_datagram("wire-test").unwrap();
        assert_ne!(na, nb);
        let to = SocketAddr::from_abstract_name(&nb).unwrap();
        a.send_to_addr(b"hi", &to).unwrap();
        let mut buf = [0u8; 4];
        // Non-blocking: the datagram is already queued on a local socket.
        assert_eq!(b.recv(&mut buf).unwrap(), 2);
    }
}
