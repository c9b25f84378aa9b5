//! A tiny versioned binary format for export blobs (mmap export, sync event export, RDMA
//! connection details).
//!
//! Export blobs cross process boundaries (and, in principle, hosts): whatever reads one must
//! treat it as untrusted bytes. This module is the only place that frames and unframes them,
//! and its reader never panics and never reads out of bounds, whatever the input.
//!
//! # Layout (all integers little-endian)
//!
//! ```text
//! offset  size  field
//!      0     4  magic "DSFT"
//!      4     2  format version (BLOB_VERSION)
//!      6     2  kind (BlobKind)
//!      8     4  payload length N
//!     12     N  payload (fields appended by BlobWriter, read back in the same order)
//!   12+N     8  FNV-1a 64 checksum of bytes [0, 12+N)
//! ```
//!
//! The checksum detects corruption and truncation; it is not a signature (the secrets in a
//! blob are the random keys it carries, not the framing).
//!
//! # Errors
//! Anything malformed is `DOCA_ERROR_INVALID_VALUE`: a wrong magic, kind, length or checksum,
//! a truncated blob, a field read past the end, bytes left over. A well-framed blob with a
//! format version this build does not know is `DOCA_ERROR_UNSUPPORTED_VERSION`.

use crate::types::*;

/// Magic bytes at the start of every blob.
pub const BLOB_MAGIC: [u8; 4] = *b"DSFT";
/// The format version this build writes and reads.
pub const BLOB_VERSION: u16 = 1;
/// Header size in bytes (magic, version, kind, payload length).
pub const HEADER_LEN: usize = 12;
/// Trailer size in bytes (checksum).
pub const TRAILER_LEN: usize = 8;

/// What a blob describes. Values are part of the format: never reuse or renumber them;
/// add new kinds with new numbers.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlobKind {
    /// A `doca_mmap` export (`doca_mmap_export_rdma` / `_pci`).
    Mmap = 1,
    /// A `doca_sync_event` export.
    SyncEvent = 2,
    /// RDMA connection details (`doca_rdma_export`).
    RdmaConn = 3,
    /// One message of the RDMA connection-management handshake (`rdma/cm.rs`).
    CmMessage = 4,
}

/// FNV-1a, 64-bit.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Builds a blob: append fields, then [`BlobWriter::finish`].
#[derive(Debug)]
pub struct BlobWriter {
    kind: BlobKind,
    payload: Vec<u8>,
}

impl BlobWriter {
    /// An empty blob of `kind`.
    pub fn new(kind: BlobKind) -> BlobWriter {
        BlobWriter { kind, payload: Vec::with_capacity(64) }
    }

    /// Appends one byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.payload.push(v);
        self
    }

    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.payload.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.payload.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.payload.extend_from_slice(&v.to_le_bytes());
        self
    }

    /// Appends raw bytes (no length prefix: the reader must know the length).
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.payload.extend_from_slice(v);
        self
    }

    /// Appends a `u32` length followed by the bytes (read back with [`BlobReader::var_bytes`]).
    pub fn var_bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.bytes(v)
    }

    /// The framed blob: header, payload, checksum. Payloads are expected to be far below
    /// 4 GiB; a larger one would be written with a saturated length and so rejected by every
    /// reader (never silently misread).
    pub fn finish(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_LEN + self.payload.len() + TRAILER_LEN);
        out.extend_from_slice(&BLOB_MAGIC);
        out.extend_from_slice(&BLOB_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.kind as u16).to_le_bytes());
        out.extend_from_slice(&u32::try_from(self.payload.len()).unwrap_or(u32::MAX).to_le_bytes());
        out.extend_from_slice(&self.payload);
        let sum = fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }
}

/// Reads a blob's payload field by field. Every read is bounds-checked.
#[derive(Debug)]
pub struct BlobReader<'a> {
    payload: &'a [u8],
    pos: usize,
}

impl<'a> BlobReader<'a> {
    /// Validates the framing of `bytes` (magic, version, kind, length, checksum) and returns a
    /// reader positioned at the start of the payload.
    pub fn new(bytes: &'a [u8], expected_kind: BlobKind) -> Result<BlobReader<'a>, doca_error_t> {
        if bytes.len() < HEADER_LEN + TRAILER_LEN {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if bytes[0..4] != BLOB_MAGIC {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != BLOB_VERSION {
            return Err(DOCA_ERROR_UNSUPPORTED_VERSION);
        }
        let kind = u16::from_le_bytes([bytes[6], bytes[7]]);
        if kind != expected_kind as u16 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let plen = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
        let total = HEADER_LEN.checked_add(plen).and_then(|n| n.checked_add(TRAILER_LEN));
        if total != Some(bytes.len()) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let body_end = HEADER_LEN + plen;
        let mut sum = [0u8; 8];
        sum.copy_from_slice(&bytes[body_end..]);
        if u64::from_le_bytes(sum) != fnv1a64(&bytes[..body_end]) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        Ok(BlobReader { payload: &bytes[HEADER_LEN..body_end], pos: 0 })
    }

    /// Bytes of payload not read yet.
    pub fn remaining(&self) -> usize {
        self.payload.len() - self.pos
    }

    /// The next `n` raw bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], doca_error_t> {
        let end = self.pos.checked_add(n).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        let s = self.payload.get(self.pos..end).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], doca_error_t> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, doca_error_t> {
        Ok(self.array::<1>()?[0])
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, doca_error_t> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, doca_error_t> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, doca_error_t> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A `u32` length and that many bytes (written by [`BlobWriter::var_bytes`]).
    pub fn var_bytes(&mut self) -> Result<&'a [u8], doca_error_t> {
        let n = self.u32()? as usize;
        self.bytes(n)
    }

    /// Succeeds only if the whole payload was read.
    pub fn finish(self) -> Result<(), doca_error_t> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(DOCA_ERROR_INVALID_VALUE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut w = BlobWriter::new(BlobKind::Mmap);
        w.u8(7).u16(0xbeef).u32(0xdead_beef).u64(u64::MAX - 1).var_bytes(b"hello").bytes(&[1, 2, 3]);
        w.finish()
    }

    type Fields = (u8, u16, u32, u64, Vec<u8>, Vec<u8>);

    fn parse(b: &[u8]) -> Result<Fields, doca_error_t> {
        let mut r = BlobReader::new(b, BlobKind::Mmap)?;
        let v = (r.u8()?, r.u16()?, r.u32()?, r.u64()?, r.var_bytes()?.to_vec(), r.bytes(3)?.to_vec());
        r.finish()?;
        Ok(v)
    }

    #[test]
    fn round_trip() {
        let b = sample();
        assert_eq!(&b[0..4], b"DSFT");
        let (a, b2, c, d, e, f) = parse(&b).unwrap();
        assert_eq!((a, b2, c, d), (7, 0xbeef, 0xdead_beef, u64::MAX - 1));
        assert_eq!(e, b"hello");
        assert_eq!(f, [1, 2, 3]);
    }

    #[test]
    fn empty_payload() {
        let b = BlobWriter::new(BlobKind::RdmaConn).finish();
        assert_eq!(b.len(), HEADER_LEN + TRAILER_LEN);
        let mut r = BlobReader::new(&b, BlobKind::RdmaConn).unwrap();
        assert_eq!(r.u8().unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(r.bytes(usize::MAX).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        r.finish().unwrap();
    }

    #[test]
    fn wrong_kind() {
        assert_eq!(BlobReader::new(&sample(), BlobKind::SyncEvent).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }

    #[test]
    fn unknown_version() {
        let mut b = sample();
        b[4] = 9;
        let n = b.len() - TRAILER_LEN;
        let sum = fnv1a64(&b[..n]);
        b[n..].copy_from_slice(&sum.to_le_bytes());
        assert_eq!(BlobReader::new(&b, BlobKind::Mmap).unwrap_err(), DOCA_ERROR_UNSUPPORTED_VERSION);
    }

    #[test]
    fn leftover_bytes() {
        let b = sample();
        let mut r = BlobReader::new(&b, BlobKind::Mmap).unwrap();
        r.u8().unwrap();
        assert_eq!(r.finish().unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }

    #[test]
    fn every_truncation_fails() {
        let b = sample();
        for n in 0..b.len() {
            assert!(parse(&b[..n]).is_err(), "truncated at {n}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(parse(&longer).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }

    #[test]
    fn every_flipped_byte_fails() {
        let b = sample();
        for i in 0..b.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut c = b.clone();
                c[i] ^= mask;
                let e = parse(&c).unwrap_err();
                assert!(
                    e == DOCA_ERROR_INVALID_VALUE || (e == DOCA_ERROR_UNSUPPORTED_VERSION && (i == 4 || i == 5)),
                    "byte {i} mask {mask:#x}: {e:?}"
                );
            }
        }
    }

    #[test]
    fn garbage_never_panics() {
        // A deterministic pseudo-random stream of inputs, including ones with a valid header.
        let mut x: u64 = 0x1234_5678;
        for len in 0..200usize {
            let mut v = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push(x as u8);
            }
            if len >= HEADER_LEN {
                v[0..4].copy_from_slice(&BLOB_MAGIC);
                v[4..6].copy_from_slice(&BLOB_VERSION.to_le_bytes());
                v[6..8].copy_from_slice(&1u16.to_le_bytes());
            }
            let _ = parse(&v);
        }
    }
}
