//! The per-connection message ring: a single-producer, single-consumer byte ring in a sealed
//! memfd segment, through which sends, sends with immediate and write-with-immediate
//! notifications travel from one RDMA connection to its peer.
//!
//! # Ownership
//!
//! Each side of a connection creates its **own receive ring** at `doca_rdma_export` (it is
//! the consumer) and names it in its export blob (pid, memfd number, length, key). The peer
//! maps that segment at `doca_rdma_connect` through `/proc/<pid>/fd/<fd>` and becomes its only
//! producer (it claims the ring with a compare-and-swap on `claim`). So a connection has two
//! rings, one per direction, and every ring has exactly one writer of each cursor:
//!
//! ```text
//!   side A                                        side B
//!   rx ring A  (A creates, A consumes)  <──────  B produces (mapped at B's connect)
//!   A produces (mapped at A's connect)  ──────>  rx ring B  (B creates, B consumes)
//! ```
//!
//! # Layout
//!
//! ```text
//! offset  line        field                 written by
//!      0  ident       magic "DSRDMAR1"      consumer, once, before the blob exists
//!      8              layout version
//!     16              capacity (bytes)
//!     24              key (random; the blob carries it)
//!     64  producer    tail (bytes ever written)          producer
//!     72              producer_closed                    producer
//!     80              claim (the producer's connection id; 0 = unclaimed)
//!    128  consumer    head (bytes ever consumed)         consumer
//!    136              consumer_closed                    consumer
//!    144              consumer_sleeping                  consumer
//!    192  flow        space_wanted                       producer sets, consumer clears
//!   4096  data        capacity bytes, a power of two (`ring_bytes_for`)
//! ```
//!
//! Cursors are free-running `u64` byte counts; a position in the data area is
//! `cursor & (capacity - 1)`. Every header field is an `AtomicU64` and is only ever accessed
//! atomically, by both processes. Nothing read from the header is trusted: the producer keeps
//! its own tail and the consumer its own head, and a peer cursor that would make
//! `tail - head` exceed the capacity is a protocol violation (`Corrupt`).
//!
//! # Records
//!
//! A message is a 16-byte record header followed by its payload, padded to a multiple of 8:
//! `kind u32 | payload_len u32 | report_len u32 | imm u32` (host byte order; both ends are on
//! this host). `report_len` is what the receive reports (the payload length for sends, the
//! number of bytes written for write-with-immediate, which carries no payload). Records are
//! **streamed**: the producer publishes the header, then as much payload as fits, and keeps
//! going as the consumer frees space, so a message may be far larger than the ring (it is
//! bounded by [`super::MAX_MESSAGE_BYTES`] only). The header itself is published whole.
//!
//! # Memory ordering
//!
//! * Data: the producer copies bytes into the data area, then stores `tail` (SeqCst, which
//!   includes Release); the consumer loads `tail` (Acquire) before reading the bytes. The
//!   consumer stores `head` (SeqCst) after it has copied the bytes out; the producer loads
//!   `head` (Acquire) before overwriting them.
//! * Wake-ups are two Dekker pairs, every store and every flag read SeqCst, and a SeqCst fence
//!   between the sleeper's flag store and its re-read (an Acquire load):
//!   - consumer: `consumer_sleeping = 1`, then re-read `tail`; producer: store `tail`, then
//!     read `consumer_sleeping` and ring the consumer's PE doorbell if set. Either the
//!     producer sees the flag or the consumer sees the data.
//!   - producer (blocked on a full ring): `space_wanted = 1`, then re-read `head`; consumer:
//!     store `head`, then swap `space_wanted` to 0 and ring the producer's doorbell if it was
//!     set.
//!
//! # Closing
//!
//! A side that stops, is destroyed or enters the error state sets `consumer_closed` on its
//! receive ring and `producer_closed` on the ring it produces into, then rings the peer's
//! doorbell; the peer sees either flag from its progress and breaks the connection. Each
//! process holds its own descriptor and mapping, so a segment lives until both sides have
//! unmapped it (nothing is ever created under `/dev/shm`).

use core::cell::Cell;
use core::ptr;
use core::sync::atomic::{fence, AtomicU64, Ordering::*};

use crate::shm::ShmSegment;
use crate::types::*;

/// "DSRDMAR1" as a little-endian u64.
const RING_MAGIC: u64 = u64::from_le_bytes(*b"DSRDMAR1");
/// Version of this layout (checked at connect).
const RING_LAYOUT_VERSION: u64 = 1;
/// The smallest data area a ring has (a ctx with many connections).
pub const RING_MIN_BYTES: usize = 64 * 1024;
/// The largest data area a ring has (a ctx with one connection).
pub const RING_MAX_BYTES: usize = 1024 * 1024;
/// What the receive rings of one ctx's connections take together, at most (unless each is
/// at its minimum): see [`ring_bytes_for`].
pub const RING_BUDGET_BYTES: usize = 1024 * 1024;
/// Bytes of the header page.
const RING_HEADER_BYTES: usize = 4096;
/// Bytes of a record header.
pub(crate) const RECORD_HEADER: usize = 16;

const _: () = assert!(RING_MIN_BYTES.is_power_of_two() && RING_MAX_BYTES.is_power_of_two());
const _: () = assert!(RING_MIN_BYTES >= 64 && RING_MIN_BYTES <= RING_MAX_BYTES);

/// The data area of each receive ring of a ctx with `max_conns` connections: the budget
/// shared among them, rounded down to a power of two, within
/// [`RING_MIN_BYTES`]..=[`RING_MAX_BYTES`].
///
/// The ring stands in for what hardware does not need: a send lands in the receiver's posted
/// buffer, so a window of sends never waits for room. Here a send completes once its record
/// is in the ring, and a window larger than the ring makes the sender wait for the receiver
/// record by record, in lock step: `send_bw` with 64 sends of 4 KiB in flight ran at 0.52–0.59
/// of its rate with a ring that holds them all (docs/soft-provider.md, "The receive ring's
/// size"). So a ctx with few connections gets larger rings. Why not larger still: a ring's
/// pages become resident as bytes pass through them, in both processes (the producer maps
/// it), so a connection that carried a ring's worth costs its size twice; 4 MiB rings made
/// the chaos test's children grow by 16–17 MiB in a round, past its leak bound.
pub const fn ring_bytes_for(max_conns: u16) -> usize {
    let conns = if max_conns == 0 { 1 } else { max_conns as usize };
    let share = RING_BUDGET_BYTES / conns;
    // Rounded down to a power of two (`share` >= 1).
    let pow2 = 1usize << (usize::BITS - 1 - share.leading_zeros());
    if pow2 < RING_MIN_BYTES {
        RING_MIN_BYTES
    } else if pow2 > RING_MAX_BYTES {
        RING_MAX_BYTES
    } else {
        pow2
    }
}

/// Whether `cap` is a data area a ring may have (what a producer accepts at connect).
fn valid_capacity(cap: usize) -> bool {
    cap.is_power_of_two() && (RING_MIN_BYTES..=RING_MAX_BYTES).contains(&cap)
}

/// The length of the segment of a ring whose data area is `cap` bytes.
pub(crate) fn seg_len(cap: usize) -> usize {
    RING_HEADER_BYTES + cap
}

/// The data area of the ring whose segment is `len` bytes long, if that is a valid ring
/// length (for the export blob's check).
pub(crate) fn capacity_of_seg(len: u64) -> Option<usize> {
    let cap = usize::try_from(len).ok()?.checked_sub(RING_HEADER_BYTES)?;
    valid_capacity(cap).then_some(cap)
}

/// One 64-byte line of header fields.
#[repr(C, align(64))]
struct Line([AtomicU64; 8]);

/// The ring header at the start of the segment (see the module docs).
#[repr(C)]
struct RingHeader {
    ident: Line,
    producer: Line,
    consumer: Line,
    flow: Line,
}

const _: () = assert!(core::mem::size_of::<RingHeader>() <= RING_HEADER_BYTES);

impl RingHeader {
    fn magic(&self) -> &AtomicU64 {
        &self.ident.0[0]
    }
    fn version(&self) -> &AtomicU64 {
        &self.ident.0[1]
    }
    fn capacity(&self) -> &AtomicU64 {
        &self.ident.0[2]
    }
    fn key(&self) -> &AtomicU64 {
        &self.ident.0[3]
    }
    fn tail(&self) -> &AtomicU64 {
        &self.producer.0[0]
    }
    fn producer_closed(&self) -> &AtomicU64 {
        &self.producer.0[1]
    }
    fn claim(&self) -> &AtomicU64 {
        &self.producer.0[2]
    }
    fn head(&self) -> &AtomicU64 {
        &self.consumer.0[0]
    }
    fn consumer_closed(&self) -> &AtomicU64 {
        &self.consumer.0[1]
    }
    fn consumer_sleeping(&self) -> &AtomicU64 {
        &self.consumer.0[2]
    }
    fn space_wanted(&self) -> &AtomicU64 {
        &self.flow.0[0]
    }
}

/// A protocol violation seen in shared memory (cursors out of range, a malformed record).
/// The connection is broken with `DOCA_ERROR_CONNECTION_RESET`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// What a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordKind {
    Send,
    SendImm,
    WriteImm,
}

const KIND_SEND: u32 = 0xD0CA_5E01;
const KIND_SEND_IMM: u32 = 0xD0CA_5E02;
const KIND_WRITE_IMM: u32 = 0xD0CA_5E03;

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub kind: RecordKind,
    /// Payload bytes that follow the header.
    pub payload_len: u32,
    /// What the receive reports as its length.
    pub report_len: u32,
    /// Immediate data (already big-endian as given by the user: copied through unchanged).
    pub imm: u32,
}

impl Record {
    pub(crate) fn encode(&self) -> [u8; RECORD_HEADER] {
        let kind = match self.kind {
            RecordKind::Send => KIND_SEND,
            RecordKind::SendImm => KIND_SEND_IMM,
            RecordKind::WriteImm => KIND_WRITE_IMM,
        };
        let mut b = [0u8; RECORD_HEADER];
        b[0..4].copy_from_slice(&kind.to_ne_bytes());
        b[4..8].copy_from_slice(&self.payload_len.to_ne_bytes());
        b[8..12].copy_from_slice(&self.report_len.to_ne_bytes());
        b[12..16].copy_from_slice(&self.imm.to_ne_bytes());
        b
    }

    /// Parses a header read from the ring (untrusted bytes).
    pub(crate) fn decode(b: &[u8; RECORD_HEADER], max_payload: u32) -> Result<Record, Corrupt> {
        let word = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let kind = match word(0) {
            KIND_SEND => RecordKind::Send,
            KIND_SEND_IMM => RecordKind::SendImm,
            KIND_WRITE_IMM => RecordKind::WriteImm,
            _ => return Err(Corrupt),
        };
        let r = Record { kind, payload_len: word(4), report_len: word(8), imm: word(12) };
        let consistent = match kind {
            RecordKind::WriteImm => r.payload_len == 0,
            _ => r.payload_len == r.report_len,
        };
        if !consistent || r.payload_len > max_payload || r.report_len > max_payload {
            return Err(Corrupt);
        }
        Ok(r)
    }

    /// Total bytes of the record in the ring (header, payload, padding).
    pub(crate) fn ring_len(&self) -> u64 {
        record_len(self.payload_len as u64)
    }
}

/// Ring bytes of a record with `payload` bytes: header plus payload rounded up to 8.
pub(crate) fn record_len(payload: u64) -> u64 {
    RECORD_HEADER as u64 + payload.div_ceil(8) * 8
}

/// A mapped ring segment with its header.
#[derive(Debug)]
struct Mapped {
    seg: ShmSegment,
    /// Bytes of the data area: a valid capacity (checked at create/open), which the header's
    /// capacity field also holds.
    cap: usize,
}

impl Mapped {
    fn hdr(&self) -> &RingHeader {
        // SAFETY: the segment is `seg_len(cap)` bytes (checked at create/open), page-aligned, and
        // lives as long as `self`; RingHeader is all atomics (any bit pattern is valid, and
        // concurrent atomic access from other processes is fine).
        unsafe { &*self.seg.as_ptr().cast::<RingHeader>() }
    }

    fn data(&self) -> *mut u8 {
        // In bounds: the data area starts RING_HEADER_BYTES into a `seg_len(cap)` mapping.
        self.seg.as_ptr().wrapping_add(RING_HEADER_BYTES)
    }

    /// Copies `n` bytes out of the data area starting at free-running cursor `pos`
    /// (wrapping), to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for `n` writes and not overlap the ring; `n <= cap`.
    unsafe fn copy_out(&self, pos: u64, dst: *mut u8, n: usize) {
        debug_assert!(n <= self.cap);
        let at = (pos as usize) & (self.cap - 1);
        let first = n.min(self.cap - at);
        // SAFETY: `[at, at+first)` and `[0, n-first)` lie inside the data area (first <=
        // capacity - at, n - first < capacity); the destination is the caller's contract.
        // Another process may write other parts of the ring concurrently, never these bytes
        // (the SPSC protocol: they are between head and the acquired tail).
        unsafe {
            ptr::copy_nonoverlapping(self.data().add(at), dst, first);
            ptr::copy_nonoverlapping(self.data(), dst.add(first), n - first);
        }
    }

    /// Copies `src` into the data area starting at free-running cursor `pos` (wrapping).
    fn copy_in(&self, pos: u64, src: &[u8]) {
        let n = src.len();
        debug_assert!(n <= self.cap);
        let at = (pos as usize) & (self.cap - 1);
        let first = n.min(self.cap - at);
        // SAFETY: as in copy_out, both pieces lie inside the data area of the live, writable
        // mapping; the consumer never reads these bytes before the tail store that follows
        // (they are between the acquired head + capacity and the unpublished tail).
        unsafe {
            ptr::copy_nonoverlapping(src.as_ptr(), self.data().add(at), first);
            ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data(), n - first);
        }
    }
}

/// The consumer side: this connection's own receive ring.
#[derive(Debug)]
pub(crate) struct RxRing {
    map: Mapped,
    /// Our head (bytes consumed locally; published with [`RxRing::publish`]).
    head: Cell<u64>,
    /// Head value last stored in the header.
    published: Cell<u64>,
    /// Mirror of `consumer_sleeping` (to avoid redundant stores).
    sleeping: Cell<bool>,
}

impl RxRing {
    /// Creates a zeroed ring with `key` and a data area of `cap` bytes (from
    /// [`ring_bytes_for`]; INVALID_VALUE for another size).
    pub(crate) fn create(key: u64, cap: usize) -> Result<RxRing, doca_error_t> {
        if !valid_capacity(cap) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let seg = ShmSegment::create(seg_len(cap), "doca-soft-rdma-ring")?;
        let map = Mapped { seg, cap };
        let h = map.hdr();
        h.capacity().store(cap as u64, Relaxed);
        h.key().store(key, Relaxed);
        h.version().store(RING_LAYOUT_VERSION, Relaxed);
        h.magic().store(RING_MAGIC, Release);
        Ok(RxRing { map, head: Cell::new(0), published: Cell::new(0), sleeping: Cell::new(false) })
    }

    /// The memfd number in this process (for the export blob).
    pub(crate) fn fd(&self) -> i32 {
        self.map.seg.fd()
    }

    /// The length of its segment (for the export blob).
    pub(crate) fn seg_len(&self) -> usize {
        seg_len(self.map.cap)
    }

    /// Bytes published by the producer and not consumed yet.
    pub(crate) fn available(&self) -> Result<u64, Corrupt> {
        let tail = self.map.hdr().tail().load(Acquire);
        let n = tail.wrapping_sub(self.head.get());
        if n > self.map.cap as u64 {
            return Err(Corrupt);
        }
        Ok(n)
    }

    /// Whether [`RxRing::available`] is `Ok(n)` with `n < min` and every consumed byte is
    /// published: the test by which progress skips a ring with nothing to do. `min` counts
    /// as at most the capacity + 1, so a corrupt cursor is never quiet.
    #[inline]
    pub(crate) fn quiet(&self, min: u64) -> bool {
        let min = min.min(self.map.cap as u64 + 1);
        let head = self.head.get();
        head == self.published.get() && self.map.hdr().tail().load(Acquire).wrapping_sub(head) < min
    }

    /// Reads the record header at the head (needs `available() >= RECORD_HEADER`).
    pub(crate) fn peek_header(&self) -> [u8; RECORD_HEADER] {
        let mut b = [0u8; RECORD_HEADER];
        // SAFETY: `b` is a distinct local array of RECORD_HEADER bytes.
        unsafe { self.map.copy_out(self.head.get(), b.as_mut_ptr(), RECORD_HEADER) };
        b
    }

    /// Copies `n` bytes at the head to `dst` and consumes them (locally).
    ///
    /// # Safety
    /// `dst` must be valid for `n` writes, must not overlap the ring, and
    /// `n <= available()`.
    pub(crate) unsafe fn take_into(&self, dst: *mut u8, n: usize) {
        let mut done = 0usize;
        while done < n {
            let k = (n - done).min(self.map.cap);
            // SAFETY: `dst + done` is valid for `k` writes (caller's contract); k <= capacity.
            unsafe { self.map.copy_out(self.head.get(), dst.add(done), k) };
            self.skip(k as u64);
            done += k;
        }
    }

    /// Consumes `n` bytes locally without reading them.
    pub(crate) fn skip(&self, n: u64) {
        self.head.set(self.head.get().wrapping_add(n));
    }

    /// Publishes the local head. Returns true when the producer asked to be told about
    /// freed space (the caller rings its doorbell).
    pub(crate) fn publish(&self) -> bool {
        let h = self.head.get();
        if h == self.published.get() {
            return false;
        }
        self.published.set(h);
        let hdr = self.map.hdr();
        hdr.head().store(h, SeqCst);
        hdr.space_wanted().load(SeqCst) != 0 && hdr.space_wanted().swap(0, SeqCst) != 0
    }

    /// Sets or clears `consumer_sleeping` (see the module docs).
    pub(crate) fn set_sleeping(&self, on: bool) {
        if self.sleeping.get() != on {
            self.sleeping.set(on);
            self.map.hdr().consumer_sleeping().store(u64::from(on), SeqCst);
            if on {
                // The caller re-reads `tail` next (`available`, an Acquire load): the fence
                // keeps that load after the flag's store, as the Dekker pair needs (a SeqCst
                // store does not order a later Acquire load of another address, and on CPUs
                // with weaker acquire loads, Arm's `ldapr`, it may move ahead).
                fence(SeqCst);
            }
        }
    }

    /// Whether the producer closed its side.
    pub(crate) fn producer_closed(&self) -> bool {
        self.map.hdr().producer_closed().load(Acquire) != 0
    }

    /// Closes the consumer side (the producer's next look fails its connection).
    pub(crate) fn close(&self) {
        self.map.hdr().consumer_closed().store(1, SeqCst);
    }
}

/// The producer side: the peer's receive ring, mapped at connect.
#[derive(Debug)]
pub(crate) struct TxRing {
    map: Mapped,
    /// Our tail (bytes written locally; published with [`TxRing::publish`]).
    tail: Cell<u64>,
    /// Tail value last stored in the header.
    published: Cell<u64>,
}

impl TxRing {
    /// Maps the ring another connection exported (`pid`, `fd`, `len` from its blob) and
    /// checks it: INVALID_VALUE for a segment that is not a ring of this layout, NOT_FOUND for
    /// a wrong key (a stale blob) or a ring already closed by its consumer; errors of
    /// [`ShmSegment::open_remote`] otherwise.
    pub(crate) fn open(pid: u32, fd: i32, len: usize, key: u64) -> Result<TxRing, doca_error_t> {
        let Some(cap) = capacity_of_seg(len as u64) else {
            return Err(DOCA_ERROR_INVALID_VALUE);
        };
        let seg = ShmSegment::open_remote(pid, fd, len)?;
        let map = Mapped { seg, cap };
        let h = map.hdr();
        if h.magic().load(Acquire) != RING_MAGIC
            || h.version().load(Acquire) != RING_LAYOUT_VERSION
            || h.capacity().load(Acquire) != cap as u64
        {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if h.key().load(Acquire) != key || h.consumer_closed().load(Acquire) != 0 {
            return Err(DOCA_ERROR_NOT_FOUND);
        }
        let tail = h.tail().load(Acquire);
        Ok(TxRing { map, tail: Cell::new(tail), published: Cell::new(tail) })
    }

    /// Becomes the ring's only producer: IN_USE if another connection claimed it already.
    pub(crate) fn claim(&self, id: u64) -> Result<(), doca_error_t> {
        self.map.hdr().claim().compare_exchange(0, id, SeqCst, SeqCst).map(|_| ()).map_err(|_| DOCA_ERROR_IN_USE)
    }

    /// Free bytes (capacity minus unconsumed bytes, counting our unpublished ones).
    pub(crate) fn free(&self) -> Result<u64, Corrupt> {
        let head = self.map.hdr().head().load(Acquire);
        let used = self.tail.get().wrapping_sub(head);
        if used > self.map.cap as u64 {
            return Err(Corrupt);
        }
        Ok(self.map.cap as u64 - used)
    }

    /// Appends `src` at the local tail (the caller checked `free()`).
    pub(crate) fn push(&self, src: &[u8]) {
        debug_assert!(src.len() <= self.map.cap);
        self.map.copy_in(self.tail.get(), src);
        self.skip(src.len() as u64);
    }

    /// Advances the local tail by `n` bytes without writing them (padding).
    pub(crate) fn skip(&self, n: u64) {
        self.tail.set(self.tail.get().wrapping_add(n));
    }

    /// Publishes the local tail. Returns true when the consumer is (or may be) asleep and
    /// its PE doorbell must be rung.
    pub(crate) fn publish(&self) -> bool {
        let t = self.tail.get();
        if t == self.published.get() {
            return false;
        }
        self.published.set(t);
        let h = self.map.hdr();
        h.tail().store(t, SeqCst);
        h.consumer_sleeping().load(SeqCst) != 0
    }

    /// Whether bytes were pushed since the last [`TxRing::publish`].
    #[inline]
    pub(crate) fn unpublished(&self) -> bool {
        self.tail.get() != self.published.get()
    }

    /// Asks the consumer to ring us when it frees space (then re-check [`TxRing::free`]).
    pub(crate) fn want_space(&self) {
        // Only on the slow path (a full ring), so always the full SeqCst store, and a fence
        // that keeps the caller's re-read of `head` (`free`, an Acquire load) after it (see
        // `RxRing::set_sleeping`).
        self.map.hdr().space_wanted().store(1, SeqCst);
        fence(SeqCst);
    }

    /// Whether the consumer closed its side.
    pub(crate) fn consumer_closed(&self) -> bool {
        self.map.hdr().consumer_closed().load(Acquire) != 0
    }

    /// Closes the producer side.
    pub(crate) fn close(&self) {
        self.map.hdr().producer_closed().store(1, SeqCst);
    }
}

#[cfg(test)]
impl RxRing {
    /// Bytes of its data area.
    pub(crate) fn capacity(&self) -> usize {
        self.map.cap
    }

    /// The shared `consumer_sleeping` flag, as the producer reads it.
    pub(crate) fn sleeping_in_header(&self) -> bool {
        self.map.hdr().consumer_sleeping().load(SeqCst) != 0
    }

    /// Stores `tail` as a (hostile) producer would.
    pub(crate) fn store_tail(&self, tail: u64) {
        self.map.hdr().tail().store(tail, SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: usize = RING_MIN_BYTES;
    const SEG: usize = RING_HEADER_BYTES + CAP;

    fn pair() -> (RxRing, TxRing) {
        let rx = RxRing::create(0x1234, CAP).unwrap();
        let tx = TxRing::open(std::process::id(), rx.fd(), SEG, 0x1234).unwrap();
        (rx, tx)
    }

    #[test]
    fn ring_sizes_share_a_budget_within_bounds() {
        assert_eq!(ring_bytes_for(1), RING_MAX_BYTES);
        assert_eq!(ring_bytes_for(0), RING_MAX_BYTES, "0 is refused earlier; never a division by zero");
        assert_eq!(ring_bytes_for(4), RING_BUDGET_BYTES / 4);
        assert_eq!(ring_bytes_for(3), RING_BUDGET_BYTES / 4, "rounded down to a power of two");
        assert_eq!(ring_bytes_for(u16::MAX), RING_MIN_BYTES);
        for n in 1..=u16::MAX {
            let cap = ring_bytes_for(n);
            assert!(valid_capacity(cap), "{n} connections: {cap}");
            assert!(cap == RING_MIN_BYTES || cap * usize::from(n) <= RING_BUDGET_BYTES, "{n}: {cap}");
        }
        assert_eq!(capacity_of_seg(seg_len(RING_MIN_BYTES) as u64), Some(RING_MIN_BYTES));
        for bad in [0, 4096, seg_len(RING_MIN_BYTES) as u64 + 8, seg_len(RING_MAX_BYTES * 2) as u64, u64::MAX] {
            assert_eq!(capacity_of_seg(bad), None, "{bad}");
        }
        assert_eq!(RxRing::create(1, RING_MIN_BYTES / 2).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }

    #[test]
    fn a_producer_takes_the_capacity_the_consumer_chose() {
        let rx = RxRing::create(0x77, RING_MAX_BYTES).unwrap();
        assert_eq!(rx.seg_len(), seg_len(RING_MAX_BYTES));
        // The blob's length must name the segment the consumer made.
        assert_eq!(
            TxRing::open(std::process::id(), rx.fd(), seg_len(RING_MIN_BYTES), 0x77).unwrap_err(),
            DOCA_ERROR_INVALID_VALUE
        );
        let tx = TxRing::open(std::process::id(), rx.fd(), rx.seg_len(), 0x77).unwrap();
        assert_eq!(tx.free().unwrap(), RING_MAX_BYTES as u64);
    }

    #[test]
    fn records_round_trip_and_reject_garbage() {
        let r = Record { kind: RecordKind::SendImm, payload_len: 5, report_len: 5, imm: 0xAABB_CCDD };
        assert_eq!(Record::decode(&r.encode(), 100).unwrap(), r);
        assert_eq!(r.ring_len(), 24);
        assert_eq!(record_len(0), 16);
        assert_eq!(Record::decode(&r.encode(), 4), Err(Corrupt));
        let mut b = r.encode();
        b[0] ^= 1;
        assert_eq!(Record::decode(&b, 100), Err(Corrupt));
        let w = Record { kind: RecordKind::WriteImm, payload_len: 1, report_len: 8, imm: 0 };
        assert_eq!(Record::decode(&w.encode(), 100), Err(Corrupt));
    }

    #[test]
    fn wraps_and_checks_keys_and_claims() {
        let (rx, tx) = pair();
        assert_eq!(TxRing::open(std::process::id(), rx.fd(), SEG, 99).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        assert_eq!(TxRing::open(std::process::id(), rx.fd(), 4096, 0x1234).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        tx.claim(7).unwrap();
        let tx2 = TxRing::open(std::process::id(), rx.fd(), SEG, 0x1234).unwrap();
        assert_eq!(tx2.claim(8), Err(DOCA_ERROR_IN_USE));
        // Fill almost all, consume, then write across the end.
        let big = vec![0xA5u8; CAP - 8];
        assert_eq!(tx.free().unwrap(), CAP as u64);
        tx.push(&big);
        assert!(!tx.publish(), "consumer not sleeping");
        assert_eq!(rx.available().unwrap(), big.len() as u64);
        rx.skip(big.len() as u64);
        tx.want_space();
        assert!(rx.publish(), "producer asked for space");
        assert!(!rx.publish(), "nothing new to publish");
        let msg: Vec<u8> = (0..64u8).collect();
        tx.push(&msg);
        rx.set_sleeping(true);
        assert!(tx.publish(), "consumer asleep: ring");
        let mut out = [0u8; 64];
        // SAFETY: `out` is 64 writable bytes; 64 bytes are available.
        unsafe { rx.take_into(out.as_mut_ptr(), 64) };
        assert_eq!(&out[..], &msg[..]);
        rx.publish();
        assert!(!rx.producer_closed() && !tx.consumer_closed());
        tx.close();
        rx.close();
        assert!(rx.producer_closed() && tx.consumer_closed());
        assert_eq!(TxRing::open(std::process::id(), rx.fd(), SEG, 0x1234).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    }

    #[test]
    fn corrupt_cursors_are_detected() {
        let (rx, tx) = pair();
        // A hostile producer publishes a tail beyond the capacity.
        rx.map.hdr().tail().store(CAP as u64 + 1, SeqCst);
        assert_eq!(rx.available(), Err(Corrupt));
        // A hostile consumer publishes a head beyond our tail.
        tx.map.hdr().head().store(5, SeqCst);
        assert_eq!(tx.free(), Err(Corrupt));
    }
}
