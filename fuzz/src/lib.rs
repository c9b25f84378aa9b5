//! Shared helpers of the doca-soft fuzz targets: the device every importer needs, checks of
//! the status codes the C entry points return, an independent reference implementation of
//! the blob framing (the oracle of the `blob_reader*` targets), and the edit program of the
//! structure-aware (`*_mutate`) targets.
//!
//! libFuzzer calls a target from one thread only, so the raw DOCA pointers kept in statics
//! here are only ever used from that thread (hence the `unsafe impl Send/Sync` wrappers).

use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use doca_soft::blob::{BlobKind, BLOB_MAGIC, BLOB_VERSION, HEADER_LEN, TRAILER_LEN};
use doca_soft::dev::{doca_dev, doca_dev_open, doca_devinfo, doca_devinfo_create_list, doca_devinfo_destroy_list};
use doca_soft::types::*;

/// A raw pointer that may sit in a `static` (used from the fuzzing thread only).
pub struct Ptr<T>(pub *mut T);

impl<T> std::fmt::Debug for Ptr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:p}", self.0)
    }
}
// SAFETY: see the module docs: the pointee is only used from libFuzzer's single thread.
unsafe impl<T> Send for Ptr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Ptr<T> {}

/// The symbolic name of a status.
pub fn name(e: doca_error_t) -> &'static str {
    usize::try_from(e.0).ok().and_then(|i| DOCA_ERROR_NAMES.get(i).copied()).unwrap_or("?")
}

/// Panics (a crash for libFuzzer) unless `e` is `DOCA_SUCCESS`. For the targets' own setup.
#[track_caller]
pub fn ok(e: doca_error_t, what: &str) {
    assert_eq!(e, DOCA_SUCCESS, "{what}: {}", name(e));
}

/// Panics unless `e` is one of `allowed`. `DOCA_ERROR_UNEXPECTED` is never allowed: it is what
/// `ffi::guard` returns after catching a panic at the C boundary (libfuzzer-sys' panic hook
/// aborts on that panic already; this is the second line).
#[track_caller]
pub fn expect_one_of(e: doca_error_t, allowed: &[doca_error_t], what: &str) {
    assert_ne!(e, DOCA_ERROR_UNEXPECTED, "{what}: a panic was caught at the C boundary");
    assert!(allowed.contains(&e), "{what}: unexpected status {} ({})", name(e), e.0);
}

/// What an importer may answer to bytes that are not a usable export of a live object:
/// malformed, another version, a process/descriptor/key that is gone or not ours, or the
/// kernel refusing a resource.
pub const IMPORT_ERRORS: &[doca_error_t] = &[
    DOCA_ERROR_INVALID_VALUE,
    DOCA_ERROR_UNSUPPORTED_VERSION,
    DOCA_ERROR_NOT_FOUND,
    DOCA_ERROR_NOT_PERMITTED,
    DOCA_ERROR_NO_MEMORY,
    DOCA_ERROR_OPERATING_SYSTEM,
];

/// The first configured soft device (`DOCA_SOFT_DEVICES`, default `soft0`), opened once and
/// never closed (imported objects hold references to it until they are destroyed).
pub fn device() -> *mut doca_dev {
    static DEV: OnceLock<Ptr<doca_dev>> = OnceLock::new();
    DEV.get_or_init(|| {
        let mut list: *mut *mut doca_devinfo = ptr::null_mut();
        let mut n = 0u32;
        let mut dev = ptr::null_mut();
        // SAFETY: valid out-pointers; the list holds `n` devinfo pointers until destroyed, and
        // devinfos outlive their list.
        unsafe {
            ok(doca_devinfo_create_list(&mut list, &mut n), "doca_devinfo_create_list");
            assert!(n > 0, "no soft device: unset DOCA_SOFT_DEVICES or name one");
            ok(doca_dev_open(*list, &mut dev), "doca_dev_open");
            ok(doca_devinfo_destroy_list(list), "doca_devinfo_destroy_list");
        }
        Ptr(dev)
    })
    .0
}

/// Number of open file descriptors of this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

/// Checks, every 1024 calls, that the process does not accumulate file descriptors: a failed
/// or undone import must close every descriptor it opened (segments, pidfds). The first call
/// (after the target's setup) sets the baseline; libFuzzer's own files come and go.
pub fn check_fd_leaks() {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static BASELINE: OnceLock<usize> = OnceLock::new();
    let n = CALLS.fetch_add(1, Ordering::Relaxed);
    let base = *BASELINE.get_or_init(open_fds);
    if n % 1024 == 1023 {
        let now = open_fds();
        assert!(now <= base + 16, "file descriptors leak: {base} open after setup, {now} now");
    }
}

// ---------------------------------------------------------------------------------------------
// Reference framing (written from the format description in doca-soft/src/blob.rs, not from
// its code)
// ---------------------------------------------------------------------------------------------

/// FNV-1a, 64-bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The blob kinds, in the order the targets index them.
pub const KINDS: [BlobKind; 3] = [BlobKind::Mmap, BlobKind::SyncEvent, BlobKind::RdmaConn];

/// What `BlobReader::new(bytes, kind)` must answer: the payload, or the error.
pub fn reference_unframe(bytes: &[u8], kind: BlobKind) -> Result<&[u8], doca_error_t> {
    let bad = Err(DOCA_ERROR_INVALID_VALUE);
    let Some(body_len) = bytes.len().checked_sub(TRAILER_LEN) else { return bad };
    if body_len < HEADER_LEN || bytes[..4] != BLOB_MAGIC {
        return bad;
    }
    if bytes[4..6] != BLOB_VERSION.to_le_bytes() {
        return Err(DOCA_ERROR_UNSUPPORTED_VERSION);
    }
    if bytes[6..8] != (kind as u16).to_le_bytes() {
        return bad;
    }
    let plen = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as u64;
    if plen != (body_len - HEADER_LEN) as u64 {
        return bad;
    }
    if bytes[body_len..] != fnv1a64(&bytes[..body_len]).to_le_bytes() {
        return bad;
    }
    Ok(&bytes[HEADER_LEN..body_len])
}

/// Frames `payload` as a blob of `kind`.
pub fn reference_frame(kind: BlobKind, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(HEADER_LEN + payload.len() + TRAILER_LEN);
    v.extend_from_slice(&BLOB_MAGIC);
    v.extend_from_slice(&BLOB_VERSION.to_le_bytes());
    v.extend_from_slice(&(kind as u16).to_le_bytes());
    v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    v.extend_from_slice(payload);
    let sum = fnv1a64(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

// ---------------------------------------------------------------------------------------------
// Edit program of the structure-aware targets
// ---------------------------------------------------------------------------------------------

/// Keep the checksum as edited (otherwise it is recomputed after the edits).
pub const KEEP_CHECKSUM: u8 = 0x04;
/// Rewrite the header's payload length to match the (resized) blob.
pub const FIX_LENGTH: u8 = 0x08;
/// Resize the blob: the byte after the flags is the new total length (growth appends zeros).
pub const RESIZE: u8 = 0x10;

/// Applies the edit program `data` to one of the valid `bases` and returns (index of the
/// base, edited blob).
///
/// ```text
/// byte 0      flags: bits 0-1 which base (mod bases.len()), KEEP_CHECKSUM, FIX_LENGTH, RESIZE
/// [byte 1]    new length (RESIZE only)
/// then        (position, xor) pairs: blob[position % len] ^= xor
/// ```
///
/// By default the checksum is recomputed over the edited blob, so the fuzzer gets past the
/// framing and into the field validation and the import itself. An empty program gives the
/// first base unchanged.
pub fn edit(bases: &[&[u8]], data: &[u8]) -> (usize, Vec<u8>) {
    let flags = data.first().copied().unwrap_or(0);
    let mut rest = data.get(1..).unwrap_or(&[]);
    let which = usize::from(flags & 3) % bases.len();
    let mut blob = bases[which].to_vec();
    if flags & RESIZE != 0 {
        if let Some((&n, tail)) = rest.split_first() {
            blob.resize(usize::from(n), 0);
            rest = tail;
        }
    }
    if !blob.is_empty() {
        for pair in rest.chunks_exact(2) {
            let i = usize::from(pair[0]) % blob.len();
            blob[i] ^= pair[1];
        }
    }
    if flags & FIX_LENGTH != 0 && blob.len() >= HEADER_LEN + TRAILER_LEN {
        let plen = (blob.len() - HEADER_LEN - TRAILER_LEN) as u32;
        blob[8..12].copy_from_slice(&plen.to_le_bytes());
    }
    if flags & KEEP_CHECKSUM == 0 && blob.len() >= TRAILER_LEN {
        let body = blob.len() - TRAILER_LEN;
        let sum = fnv1a64(&blob[..body]);
        blob[body..].copy_from_slice(&sum.to_le_bytes());
    }
    (which, blob)
}

#[cfg(test)]
mod tests {
    use super::*;
    use doca_soft::blob::{BlobReader, BlobWriter};

    #[test]
    fn reference_matches_the_writer() {
        let mut w = BlobWriter::new(BlobKind::SyncEvent);
        w.u32(7).var_bytes(b"abc");
        let b = w.finish();
        assert_eq!(b, reference_frame(BlobKind::SyncEvent, &b[HEADER_LEN..b.len() - TRAILER_LEN]));
        assert_eq!(reference_unframe(&b, BlobKind::SyncEvent).unwrap().len(), 4 + 4 + 3);
        assert!(BlobReader::new(&b, BlobKind::SyncEvent).is_ok());
    }

    #[test]
    fn empty_program_is_the_base() {
        let base = reference_frame(BlobKind::Mmap, b"xyz");
        assert_eq!(edit(&[&base], &[]), (0, base.clone()));
        let (_, e) = edit(&[&base], &[0, 13, 0xff]);
        assert_ne!(e, base);
        assert_eq!(reference_unframe(&e, BlobKind::Mmap).unwrap(), [b'x', b'y' ^ 0xff, b'z']);
    }
}

// ---------------------------------------------------------------------------------------------
// Importers: call the C entry point, check the status, destroy what was created
// ---------------------------------------------------------------------------------------------

/// `doca_mmap_create_from_export(bytes)` with [`device`]; an mmap it creates is checked (started, range
/// readable) and destroyed. Returns whether the import succeeded.
#[track_caller]
pub fn mmap_import(bytes: &[u8], what: &str) -> bool {
    use doca_soft::mmap::*;
    let dev = device();
    let mut m = ptr::null_mut();
    let ud = doca_data::from_u64(0x5eed);
    // SAFETY: `bytes` is readable for its length; valid out-pointer.
    let r = unsafe { doca_mmap_create_from_export(&ud, bytes.as_ptr().cast(), bytes.len(), dev, &mut m) };
    if r != DOCA_SUCCESS {
        assert!(m.is_null(), "{what}: out-pointer written on failure");
        expect_one_of(r, IMPORT_ERRORS, what);
        return false;
    }
    let (mut addr, mut len) = (ptr::null_mut(), 0usize);
    // SAFETY: `m` is the live mmap just created; valid out-pointers.
    unsafe {
        ok(doca_mmap_get_memrange(m, &mut addr, &mut len), "doca_mmap_get_memrange of an import");
        assert!(!addr.is_null() && len > 0);
        ok(doca_mmap_destroy(m), "doca_mmap_destroy of an import");
    }
    true
}

/// `doca_sync_event_create_from_export(bytes)` with [`device`]; an event it creates is started, read, stopped
/// and destroyed. Returns whether the import succeeded.
#[track_caller]
pub fn sync_event_import(bytes: &[u8], what: &str) -> bool {
    use doca_soft::sync_event::*;
    let dev = device();
    let mut e = ptr::null_mut();
    // SAFETY: `bytes` is readable for its length; valid out-pointer.
    let r = unsafe { doca_sync_event_create_from_export(dev, bytes.as_ptr(), bytes.len(), &mut e) };
    if r != DOCA_SUCCESS {
        assert!(e.is_null(), "{what}: out-pointer written on failure");
        expect_one_of(r, IMPORT_ERRORS, what);
        return false;
    }
    let mut v = 0u64;
    // SAFETY: `e` is the live event just created; valid out-pointer.
    unsafe {
        ok(doca_sync_event_start(e), "doca_sync_event_start of an import");
        ok(doca_sync_event_get(e, &mut v), "doca_sync_event_get of an import");
        ok(doca_sync_event_stop(e), "doca_sync_event_stop of an import");
        ok(doca_sync_event_destroy(e), "doca_sync_event_destroy of an import");
    }
    true
}

// ---------------------------------------------------------------------------------------------
// RDMA: a running ctx with two exported connections; connect attempts go to the first
// ---------------------------------------------------------------------------------------------

/// A progress engine, a running `doca_rdma` on it, and two exported connections: `conn`
/// (the one every connect attempt uses) and a second one. `blobs` are their export blobs, the
/// valid inputs of `doca_rdma_connect` (a connection may connect to its own blob: loopback).
#[derive(Debug)]
pub struct RdmaSide {
    pe: Ptr<doca_soft::pe::doca_pe>,
    rdma: Ptr<doca_soft::rdma::doca_rdma>,
    conn: Ptr<doca_soft::rdma::doca_rdma_connection>,
    /// Export blobs of `conn` and of the second connection.
    pub blobs: Vec<Vec<u8>>,
}

impl RdmaSide {
    /// Builds the side on a new progress engine.
    pub fn new() -> RdmaSide {
        let mut pe = ptr::null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { doca_soft::pe::doca_pe_create(&mut pe) }, "doca_pe_create");
        Self::build(pe)
    }

    fn build(pe: *mut doca_soft::pe::doca_pe) -> RdmaSide {
        use doca_soft::rdma::*;
        let mut rdma = ptr::null_mut();
        let mut conns = Vec::new();
        let mut blobs = Vec::new();
        // SAFETY: valid out-pointers; the blobs are owned by the connections, copied at once.
        unsafe {
            ok(doca_rdma_create(device(), &mut rdma), "doca_rdma_create");
            let perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                | DOCA_ACCESS_FLAG_RDMA_READ
                | DOCA_ACCESS_FLAG_RDMA_WRITE
                | DOCA_ACCESS_FLAG_RDMA_ATOMIC;
            ok(doca_rdma_set_permissions(rdma, perms), "doca_rdma_set_permissions");
            ok(doca_rdma_set_max_num_connections(rdma, 2), "doca_rdma_set_max_num_connections");
            ok(doca_soft::pe::doca_pe_connect_ctx(pe, doca_rdma_as_ctx(rdma)), "doca_pe_connect_ctx");
            ok(doca_soft::ctx::doca_ctx_start(doca_rdma_as_ctx(rdma)), "doca_ctx_start");
            for _ in 0..2 {
                let (mut p, mut n, mut c) = (ptr::null(), 0usize, ptr::null_mut());
                ok(doca_rdma_export(rdma, &mut p, &mut n, &mut c), "doca_rdma_export");
                blobs.push(std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec());
                conns.push(c);
            }
        }
        RdmaSide { pe: Ptr(pe), rdma: Ptr(rdma), conn: Ptr(conns[0]), blobs }
    }

    /// Stops and destroys the ctx (closing every connection and freeing them), then builds a
    /// fresh one on the same engine: after a successful connect, nothing of it is left.
    fn rebuild(&mut self) {
        use doca_soft::rdma::*;
        // SAFETY: `rdma` is live; with no task allocated the stop is synchronous (IDLE), so
        // the destroy that follows is allowed.
        unsafe {
            ok(doca_soft::ctx::doca_ctx_stop(doca_rdma_as_ctx(self.rdma.0)), "doca_ctx_stop");
            ok(doca_rdma_destroy(self.rdma.0), "doca_rdma_destroy");
        }
        *self = Self::build(self.pe.0);
    }

    /// `doca_rdma_connect(bytes)` on the first connection. A connection that succeeds is torn
    /// down with its ctx, which is rebuilt (so `blobs` change). Returns whether it succeeded.
    #[track_caller]
    pub fn connect(&mut self, bytes: &[u8], what: &str) -> bool {
        // SAFETY: `rdma` and `conn` are live; `bytes` is readable for its length.
        let r =
            unsafe { doca_soft::rdma::doca_rdma_connect(self.rdma.0, bytes.as_ptr().cast(), bytes.len(), self.conn.0) };
        if r != DOCA_SUCCESS {
            expect_one_of(r, IMPORT_ERRORS, what);
            return false;
        }
        self.rebuild();
        true
    }
}

impl Default for RdmaSide {
    fn default() -> Self {
        Self::new()
    }
}

/// The fuzzer's bytes read as a structure-aware target's script, front to back: each value
/// is `None` once the bytes run out (the script ends there).
pub struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    pub fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    /// Little endian.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes([self.u8()?, self.u8()?]))
    }
    /// Little endian.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes([self.u8()?, self.u8()?, self.u8()?, self.u8()?]))
    }
    /// The next `n` bytes, fewer if the script ends first.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let n = n.min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b.to_vec()
    }
}
