//! [`SentCount`]: how many records one side of a connection has sent, in shared memory its
//! peer reads, so that the peer's progress calls `recv(2)` only when a record may be waiting.
//!
//! # Why
//! A connection's records travel on a socket, and a socket tells whether it holds anything
//! only through a system call. Progress looked at every connected socket on every call: a
//! busy-polling PE made one failing `recvfrom` per connection per `doca_pe_progress` (a Comch
//! fast-path ping-pong, which sends no message at all, made 3.5 to 5.6 of them per message;
//! each costs more than the message's own work). DOCA's progress polls completion queues in
//! memory; this makes the soft one do the same for the common case.
//!
//! # Model
//! * Each side creates its count (a memfd segment holding one `u64`) with its connection and
//!   names it in its handshake record (HELLO, WELCOME: owner pid, descriptor, length); the
//!   peer maps it ([`SentCount::open`]). A side without the peer's count (it could not be
//!   mapped) reads its socket at every progress, as before.
//! * The owner adds one for every record it sends once connected ([`SentCount::add`]),
//!   *before* it hands the record to the kernel (and takes it back if the kernel did not
//!   take it): the peer then looks while the record is on its way. Counting after the send
//!   put the return of the sender's system call on every message's latency (`comch_lat`
//!   2.2–2.5 → 2.6–3.0 µs). A connection that closes adds one for its end of file.
//! * The reader counts the records it read, and reads its socket while the peer's count is
//!   ahead (a record on its way is read at the first progress after the kernel queued it, as
//!   before). A record is counted by both sides or by neither, so the reader never waits for
//!   one that was not sent.
//! * What no count announces: the end of file of a peer that died, and a record of a peer
//!   that stopped counting. The endpoint therefore still reads every socket now and then
//!   (`Endpoint::must_read`: every [`READ_EVERY`] progress calls, and at the first progress
//!   after its PE was armed, whose sleep a readable socket may have ended).

use core::sync::atomic::{AtomicU64, Ordering};

use crate::shm::ShmSegment;
use crate::types::*;

/// Progress calls of an endpoint between two reads of every socket whatever the counts say
/// (the end of file of a dead peer is announced by none): about 50–100 µs of a busy-polling
/// loop.
pub(crate) const READ_EVERY: u32 = 1024;

/// Bytes of a count's segment.
const LEN: usize = 8;

/// One side's count of the records it sent (see the module docs): created by the side that
/// sends ([`create`](SentCount::create)), mapped by its peer ([`open`](SentCount::open)).
#[derive(Debug)]
pub(crate) struct SentCount {
    seg: ShmSegment,
}

// SAFETY: the segment holds one atomic; the mapping lives as long as the value.
unsafe impl Send for SentCount {}

impl SentCount {
    /// A count of zero records, for this side of a new connection.
    pub(crate) fn create() -> Result<SentCount, doca_error_t> {
        Ok(SentCount { seg: ShmSegment::create(LEN, "async-doca-comch-sent")? })
    }

    /// The peer's count at `(pid, fd, len)`, as its handshake named it. INVALID_VALUE for a
    /// segment of another size.
    pub(crate) fn open(pid: u32, fd: i32, len: u32) -> Result<SentCount, doca_error_t> {
        if len as usize != LEN {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut seg = ShmSegment::open_remote_with(pid, fd, LEN, false)?;
        // Mapped: the descriptor is not needed again (one per connection less).
        seg.close_descriptor();
        Ok(SentCount { seg })
    }

    /// `(owner pid, descriptor, length)`: what the handshake tells the peer.
    pub(crate) fn location(&self) -> (u32, i32, u32) {
        (self.seg.owner_pid(), self.seg.fd(), LEN as u32)
    }

    fn count(&self) -> &AtomicU64 {
        // SAFETY: the segment is at least LEN bytes, page-aligned and mapped for the life of
        // `self`; it holds one u64, accessed only atomically.
        unsafe { &*self.seg.as_ptr().cast::<AtomicU64>() }
    }

    /// `n` more records on their way (the owner only: one writer, so no read-modify-write);
    /// -1 takes back one the kernel did not take.
    pub(crate) fn add(&self, n: i64) {
        let c = self.count();
        c.store(c.load(Ordering::Relaxed).wrapping_add_signed(n), Ordering::Release);
    }

    /// The records the owner has sent so far (the peer's read).
    pub(crate) fn get(&self) -> u64 {
        self.count().load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_sees_what_the_owner_adds() {
        let mine = SentCount::create().unwrap();
        let (pid, fd, len) = mine.location();
        let theirs = SentCount::open(pid, fd, len).unwrap();
        assert_eq!(theirs.get(), 0);
        mine.add(1);
        mine.add(1);
        mine.add(-1);
        assert_eq!(theirs.get(), 1);
        assert_eq!(SentCount::open(pid, fd, len + 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }
}
