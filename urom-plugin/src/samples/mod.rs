//! The command and notification formats of the two sample plugins, shared by the plugins
//! (`plugins/worker_graph`, `plugins/worker_sandbox`) and the host programs that drive them.
//!
//! Both speak the formats of NVIDIA's samples of the same names: C structs (a `u64` type, then
//! a union of per-type structs) in native byte order, which is little-endian on every platform
//! DOCA runs on, so NVIDIA's host code drives these plugins and this crate's host code drives
//! NVIDIA's. Decoding is strict: a short message, trailing bytes, an unknown type or a length
//! that disagrees with the message is a [`DecodeError`], which a plugin answers with
//! `DOCA_ERROR_INVALID_VALUE` (`From<DecodeError> for Status`) and an empty body.

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

    pub(crate) fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    /// The next `n` bytes as they are.
    pub(crate) fn raw(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        self.take(n)
    }

    /// Passes over `n` bytes (a C struct's padding, whose contents are unspecified).
    pub(crate) fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(drop)
    }

    /// Bytes left to read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// An error about this message.
    pub(crate) fn invalid(&self, why: &'static str) -> DecodeError {
        self.err(why)
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
    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends bytes as they are.
    pub(crate) fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }

    /// Appends zero bytes up to a total length of `len` (a C struct's padding).
    pub(crate) fn pad_to(mut self, len: usize) -> Self {
        if self.0.len() < len {
            self.0.resize(len, 0);
        }
        self
    }

    pub(crate) fn done(self) -> Vec<u8> {
        self.0
    }
}
