//! The receive queue of a fast-path consumer, in shared memory: what a producer on the other
//! side of the connection (another process, or this one) reads and writes to hand it a buffer.
//!
//! # Model
//!
//! A consumer owns one segment ([`ShmSegment`], memfd) from its start to its stop, with one
//! slot per post-receive task of its pool and a ring of slot numbers in posting order:
//!
//! ```text
//! header   magic, cap, imm_len (the consumer's immediate length), closed,
//!          doorbell (the consumer PE's), tail (posts: the consumer), head (claims: producers),
//!          sleeping (the consumer's sleep line)
//! slots    [cap] state, status, producer_id, imm_len, addr, room, len, claimer pid, imm[32]
//! ring     [cap] slot numbers, in posting order
//! ```
//!
//! * **Post** (consumer): a free slot gets the buffer's free space (address in the consumer's
//!   address space, room), becomes POSTED, its number goes to `ring[tail % cap]`, then `tail`
//!   advances (release).
//! * **Claim** (producer): while `head < tail` (acquire), take `head` by compare-and-swap; the
//!   slot at `ring[head % cap]` is the producer's (CLAIMED). `head == tail`: nothing posted, the
//!   producer's submit answers `DOCA_ERROR_AGAIN`, as DOCA's does.
//! * **Close** (the consumer stops): later claims fail; the stop then waits for the claims
//!   taken before (ring positions below `head`) to be finished. A claim reads `closed` after
//!   its swap of `head`, the stop reads `head` after its close (SeqCst, a Dekker pair), so a
//!   claim the stop did not count sees the queue closed and writes nothing.
//! * **Finish** (producer): writes the payload into the consumer's memory (through the
//!   consumer's mmap export, not through this segment), then the slot's results, then DONE
//!   (release), and rings the consumer's doorbell.
//! * **Complete** (consumer): its progress completes post-receive tasks in posting order as
//!   their slots become DONE, and frees the slots.
//! * **Sleep and wake**: the doorbell is a system call (a datagram to the consumer PE's
//!   socket), which a polling consumer does not need: it sees DONE slots by itself. So the
//!   header has a sleep line, `sleeping`, which the consumer keeps equal to "its PE is armed
//!   and a receive is posted", and a producer rings only when it is set. A Dekker pair makes
//!   this lose no wake-up: the consumer stores `sleeping = 1`, a SeqCst fence, then re-reads
//!   its oldest slot; the producer stores DONE, a SeqCst fence, then reads `sleeping`. Either
//!   the producer sees the line set and rings, or the consumer sees the slot done and does
//!   not sleep. (Before the line, every message cost a ring: the fast path's raw ping-pong
//!   measured 4.6 µs per message here, slower than Comch's messages.)
//!
//! A ring position is reused only after its slot was completed: at most `cap` slots are out,
//! so `tail - completed <= cap`, and every position below `head` was claimed.
//!
//! Producers of any process and thread use the atomics only; the consumer is the only one to
//! move slots out of DONE and back to FREE.

use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use crate::doorbell::DoorbellAddr;
use crate::shm::{own_pid, ShmSegment};
use crate::types::*;

/// Largest immediate data (`doca_comch_consumer_cap_get_max_imm_data_len`): 32 bytes, the
/// DPA message queue's documented limit and what NVIDIA's libraries use.
pub const MAX_IMM: usize = 32;

// Version 2: the header grew its sleep line (a version-1 queue is not opened).
const MAGIC: u64 = u64::from_le_bytes(*b"CCFASTQ2");

pub const FREE: u32 = 0;
pub const POSTED: u32 = 1;
pub const CLAIMED: u32 = 2;
pub const DONE: u32 = 3;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    cap: AtomicU32,
    imm_len: AtomicU32,
    closed: AtomicU32,
    _pad: u32,
    doorbell: [AtomicU64; 2],
    tail: AtomicU64,
    head: AtomicU64,
    sleeping: AtomicU64,
}

#[repr(C)]
struct Slot {
    state: AtomicU32,
    status: AtomicU32,
    producer_id: AtomicU32,
    imm_len: AtomicU32,
    addr: AtomicU64,
    room: AtomicU64,
    len: AtomicU64,
    claimer: AtomicU32,
    _pad: u32,
    imm: [AtomicU64; MAX_IMM / 8],
}

fn layout(cap: u32) -> (usize, usize, usize) {
    let slots = core::mem::size_of::<Header>();
    let ring = slots + cap as usize * core::mem::size_of::<Slot>();
    (slots, ring, ring + cap as usize * 4)
}

/// What a finished slot reports to its post-receive task.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub status: doca_error_t,
    pub len: usize,
    pub producer_id: u32,
    pub imm_len: u32,
    pub imm: [u8; MAX_IMM],
}

/// A slot a producer claimed: where its payload goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub slot: u32,
    /// The start of the posted buffer's free space, in the consumer's address space.
    pub addr: u64,
    pub room: u64,
}

/// A queue segment, mapped by its consumer ([`FastQueue::create`]) or by a producer
/// ([`FastQueue::open`]).
#[derive(Debug)]
pub struct FastQueue {
    seg: ShmSegment,
    cap: u32,
}

// SAFETY: the segment is shared memory accessed only through atomics (the layout above); the
// mapping lives as long as the value.
unsafe impl Send for FastQueue {}

impl FastQueue {
    /// The consumer's queue of `cap` slots, rung at `doorbell`.
    pub fn create(cap: u32, imm_len: u32, doorbell: DoorbellAddr) -> Result<FastQueue, doca_error_t> {
        if cap == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let seg = ShmSegment::create(layout(cap).2, "async-doca-comch-consumer")?;
        let q = FastQueue { seg, cap };
        let h = q.header();
        h.cap.store(cap, Ordering::Relaxed);
        h.imm_len.store(imm_len, Ordering::Relaxed);
        let [a, b] = doorbell.to_words();
        h.doorbell[0].store(a, Ordering::Relaxed);
        h.doorbell[1].store(b, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(q)
    }

    /// A producer's mapping of the queue described by (owner pid, descriptor, length), as the
    /// consumer announced it; INVALID_VALUE for a segment that is not a queue.
    pub fn open(pid: u32, fd: i32, len: usize) -> Result<FastQueue, doca_error_t> {
        if len < core::mem::size_of::<Header>() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let seg = ShmSegment::open_remote(pid, fd, len)?;
        let probe = FastQueue { seg, cap: 0 };
        if probe.header().magic.load(Ordering::Acquire) != MAGIC {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let cap = probe.header().cap.load(Ordering::Relaxed);
        if cap == 0 || layout(cap).2 > len {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut seg = probe.seg;
        // A producer's mapping: nobody is told where it is, so its descriptor can go.
        seg.close_descriptor();
        Ok(FastQueue { seg, cap })
    }

    /// (owner pid, descriptor, length): what a producer needs to [`open`](FastQueue::open) it.
    pub fn location(&self) -> (u32, i32, usize) {
        (self.seg.owner_pid(), self.seg.fd(), self.seg.len())
    }

    pub fn cap(&self) -> u32 {
        self.cap
    }

    fn header(&self) -> &Header {
        // SAFETY: the segment is at least a header long (checked at create/open), page-aligned
        // and mapped for the life of `self`; all fields are atomics.
        unsafe { &*self.seg.as_ptr().cast::<Header>() }
    }

    fn slot(&self, i: u32) -> &Slot {
        assert!(i < self.cap, "slot number out of range");
        // SAFETY: `i < cap` and the layout of `cap` slots fits the mapping (checked at
        // create/open); slots are 8-byte aligned after the header and made of atomics.
        unsafe { &*self.seg.as_ptr().add(layout(self.cap).0).cast::<Slot>().add(i as usize) }
    }

    fn ring(&self, pos: u64) -> &AtomicU32 {
        let i = (pos % u64::from(self.cap)) as usize;
        // SAFETY: `i < cap` and the ring of `cap` u32 fits the mapping; 4-byte aligned.
        unsafe { &*self.seg.as_ptr().add(layout(self.cap).1).cast::<AtomicU32>().add(i) }
    }

    /// The consumer's immediate length.
    pub fn imm_len(&self) -> u32 {
        self.header().imm_len.load(Ordering::Relaxed)
    }

    pub fn doorbell(&self) -> DoorbellAddr {
        let h = self.header();
        DoorbellAddr::from_words([h.doorbell[0].load(Ordering::Relaxed), h.doorbell[1].load(Ordering::Relaxed)])
    }

    pub fn is_closed(&self) -> bool {
        self.header().closed.load(Ordering::Acquire) != 0
    }

    // ---- consumer side ----

    /// Posts the free space `(addr, room)` in slot `slot` (a FREE slot of this consumer).
    pub fn post(&self, slot: u32, addr: u64, room: u64) {
        let s = self.slot(slot);
        debug_assert_eq!(s.state.load(Ordering::Relaxed), FREE);
        s.addr.store(addr, Ordering::Relaxed);
        s.room.store(room, Ordering::Relaxed);
        s.state.store(POSTED, Ordering::Relaxed);
        let h = self.header();
        let tail = h.tail.load(Ordering::Relaxed);
        self.ring(tail).store(slot, Ordering::Relaxed);
        h.tail.store(tail + 1, Ordering::Release);
    }

    /// The results of slot `slot` once a producer finished it (DONE).
    pub fn finished(&self, slot: u32) -> Option<Received> {
        let s = self.slot(slot);
        if s.state.load(Ordering::Acquire) != DONE {
            return None;
        }
        let mut imm = [0u8; MAX_IMM];
        for (k, w) in s.imm.iter().enumerate() {
            imm[k * 8..k * 8 + 8].copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        Some(Received {
            status: doca_error_t(s.status.load(Ordering::Relaxed) as i32),
            len: s.len.load(Ordering::Relaxed) as usize,
            producer_id: s.producer_id.load(Ordering::Relaxed),
            imm_len: s.imm_len.load(Ordering::Relaxed),
            imm,
        })
    }

    /// Sets or clears the sleep line (see the module docs). After setting it the caller
    /// re-reads its oldest slot: the fence here orders that read after the store.
    pub fn set_sleeping(&self, on: bool) {
        self.header().sleeping.store(u64::from(on), Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Frees a slot the consumer completed.
    pub fn free(&self, slot: u32) {
        self.slot(slot).state.store(FREE, Ordering::Relaxed);
    }

    /// The process that claimed slot `slot`, if it is CLAIMED (being written) now.
    pub fn claimer(&self, slot: u32) -> Option<u32> {
        let s = self.slot(slot);
        (s.state.load(Ordering::Acquire) == CLAIMED).then(|| s.claimer.load(Ordering::Relaxed))
    }

    /// Refuses every later claim (the consumer stops). SeqCst: one half of the Dekker pair
    /// with [`claim`](FastQueue::claim) (see [`claims_in_flight`](FastQueue::claims_in_flight)).
    pub fn close(&self) {
        self.header().closed.store(1, Ordering::SeqCst);
    }

    /// After [`close`](FastQueue::close), with the `posted` receives the consumer has not
    /// completed: whether a producer may still write into one of their buffers. Every ring
    /// position below `head` was claimed; such a claim is over once its slot is DONE, or when
    /// `alive` says its producer process is gone. A claim still POSTED is between its
    /// compare-and-swap and its CLAIMED store.
    ///
    /// The close, then the read of `head` here; the claim's swap of `head`, then its read of
    /// `closed`: all SeqCst, so either this counts the claim, or the claim sees the queue closed
    /// and gives its slot back DONE without writing (a Dekker pair).
    pub fn claims_in_flight(&self, posted: usize, alive: impl Fn(u32) -> bool) -> bool {
        let h = self.header();
        let head = h.head.load(Ordering::SeqCst);
        // The consumer's own counter.
        let tail = h.tail.load(Ordering::Relaxed);
        let first = tail.saturating_sub(posted as u64);
        (first..head.max(first)).any(|pos| {
            let slot = self.ring(pos).load(Ordering::Relaxed);
            if slot >= self.cap {
                return false;
            }
            let s = self.slot(slot);
            match s.state.load(Ordering::Acquire) {
                DONE => false,
                CLAIMED => alive(s.claimer.load(Ordering::Relaxed)),
                _ => true,
            }
        })
    }

    // ---- producer side ----

    /// Claims the oldest posted slot; None when nothing is posted. NOT_CONNECTED once the
    /// consumer closed the queue.
    pub fn claim(&self) -> Result<Option<Claim>, doca_error_t> {
        let h = self.header();
        loop {
            if self.is_closed() {
                return Err(DOCA_ERROR_NOT_CONNECTED);
            }
            let head = h.head.load(Ordering::Acquire);
            if head >= h.tail.load(Ordering::Acquire) {
                return Ok(None);
            }
            // SeqCst: the claim's half of the Dekker pair with the consumer's stop (see
            // `claims_in_flight`); the same instruction as AcqRel on x86 and aarch64.
            if h.head.compare_exchange(head, head + 1, Ordering::SeqCst, Ordering::Acquire).is_err() {
                continue;
            }
            let slot = self.ring(head).load(Ordering::Relaxed);
            if slot >= self.cap {
                // Only a broken consumer writes such a number.
                return Err(DOCA_ERROR_BAD_STATE);
            }
            let s = self.slot(slot);
            s.claimer.store(own_pid(), Ordering::Relaxed);
            s.state.store(CLAIMED, Ordering::Release);
            if h.closed.load(Ordering::SeqCst) != 0 {
                // Closed after our look above: the consumer's stop may not have counted this
                // claim, and may be giving the buffer back. Nothing is written; the slot is
                // done, so a stop that did count it stops waiting.
                self.finish(slot, DOCA_ERROR_NOT_CONNECTED, 0, 0, &[]);
                return Err(DOCA_ERROR_NOT_CONNECTED);
            }
            return Ok(Some(Claim {
                slot,
                addr: s.addr.load(Ordering::Relaxed),
                room: s.room.load(Ordering::Relaxed),
            }));
        }
    }

    /// [`claim`](FastQueue::claim) on behalf of process `pid` (tests: a producer that dies
    /// between its claim and its finish).
    #[cfg(test)]
    pub fn claim_as(&self, pid: u32) -> Option<Claim> {
        let c = self.claim().ok()??;
        self.slot(c.slot).claimer.store(pid, Ordering::Relaxed);
        Some(c)
    }

    /// Finishes a claimed slot: its results, then DONE.
    pub fn finish(&self, slot: u32, status: doca_error_t, len: u64, producer_id: u32, imm: &[u8]) {
        let s = self.slot(slot);
        let mut words = [0u8; MAX_IMM];
        let n = imm.len().min(MAX_IMM);
        words[..n].copy_from_slice(&imm[..n]);
        for (k, w) in s.imm.iter().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&words[k * 8..k * 8 + 8]);
            w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
        }
        s.status.store(status.0 as u32, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        s.producer_id.store(producer_id, Ordering::Relaxed);
        s.imm_len.store(n as u32, Ordering::Relaxed);
        s.state.store(DONE, Ordering::Release);
    }

    /// Whether the consumer must be rung for a slot just finished: its sleep line is set.
    /// The fence orders the line's read after the DONE store (see the module docs).
    pub fn consumer_sleeping(&self) -> bool {
        fence(Ordering::SeqCst);
        self.header().sleeping.load(Ordering::SeqCst) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posts_are_claimed_in_order_finished_and_reused() {
        let q = FastQueue::create(2, 8, DoorbellAddr { pid: 1, nonce: 2 }).unwrap();
        let (pid, fd, len) = q.location();
        let p = FastQueue::open(pid, fd, len).unwrap();
        assert_eq!((p.cap(), p.imm_len(), p.doorbell()), (2, 8, DoorbellAddr { pid: 1, nonce: 2 }));
        assert_eq!(p.claim(), Ok(None), "nothing posted");
        q.post(1, 0x1000, 64);
        q.post(0, 0x2000, 32);
        let a = p.claim().unwrap().unwrap();
        let b = p.claim().unwrap().unwrap();
        assert_eq!((a, b), (Claim { slot: 1, addr: 0x1000, room: 64 }, Claim { slot: 0, addr: 0x2000, room: 32 }));
        assert_eq!(p.claim(), Ok(None));
        assert_eq!(q.claimer(1), Some(own_pid()));
        assert!(q.finished(1).is_none());
        p.finish(1, DOCA_SUCCESS, 5, 7, b"imm");
        let r = q.finished(1).unwrap();
        assert_eq!((r.status, r.len, r.producer_id, r.imm_len, &r.imm[..3]), (DOCA_SUCCESS, 5, 7, 3, &b"imm"[..]));
        q.free(1);
        // Positions wrap: slot 1 posted again at ring position 2.
        q.post(1, 0x3000, 16);
        assert_eq!(p.claim().unwrap().unwrap().addr, 0x3000);
        q.close();
        assert_eq!(p.claim(), Err(DOCA_ERROR_NOT_CONNECTED));
        assert!(FastQueue::open(pid, fd, 8).is_err(), "too short to be a queue");
    }
}
