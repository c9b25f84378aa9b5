//! The command and notification formats of the two sample plugins, shared by the plugins
//! (`plugins/worker_graph`, `plugins/worker_sandbox`) and the host programs that drive them.
//!
//! `worker_graph` speaks the format of NVIDIA's sample of the same name (see [`graph`]).
//! `worker_sandbox`'s format is this project's: little-endian, a `u32` tag naming the message,
//! then its fields; `bytes` is a `u32` length and the bytes. Decoding is strict: a short message, trailing bytes, an
//! unknown tag or a length beyond the message is a [`DecodeError`], which a plugin answers
//! with `DOCA_ERROR_INVALID_VALUE` (`From<DecodeError> for Status`). A failed command's
//! notification has an empty body: only successful answers carry a body to decode.

use std::fmt;

use crate::Status;

pub mod graph;
pub mod sandbox;

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

/// Cursor over a message being decoded.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    fn err(&self, why: &'static str) -> DecodeError {
        DecodeError { what: self.what, why }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(self.err("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    pub(crate) fn unknown_tag(&self) -> DecodeError {
        self.err("unknown tag")
    }

    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(self.err("trailing bytes"))
        }
    }
}

/// Builder of a message being encoded.
#[derive(Default)]
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Panics on more than `u32::MAX` bytes, which no UROM message can hold; callers bound
    /// their data first (see `sandbox::MAX_DATA`).
    pub(crate) fn bytes(self, v: &[u8]) -> Self {
        let n = u32::try_from(v.len()).expect("message field longer than u32::MAX");
        let mut w = self.u32(n);
        w.0.extend_from_slice(v);
        w
    }

    pub(crate) fn done(self) -> Vec<u8> {
        self.0
    }
}
