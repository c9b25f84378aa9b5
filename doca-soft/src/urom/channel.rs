//! The shared-memory channel beside a host ↔ worker data connection: small messages travel
//! through memory, and a system call is made only to wake a side that sleeps.
//!
//! # Why
//!
//! On a BlueField, UROM commands and notifications cross PCIe through rings in memory. The
//! soft provider carried each one as a `SOCK_SEQPACKET` packet, and a packet costs a
//! `sendmsg` and a `recvmsg` (~2.3 µs together on the 2-CPU VMs we measure on), plus the
//! `recvmsg` that finds the socket empty: ~5 µs of system calls per command round trip,
//! which is most of a command's cost when the worker answers at once. Through the channel a
//! message is a copy into a slot and a store, and the only system call left is an `eventfd`
//! write when the receiver has said it is going to sleep.
//!
//! # Model
//!
//! The host creates the channel when its data connection arrives (`Spawned`) and passes it
//! to the worker as the connection's first message (`HostToWorker::Channel`, with three
//! descriptors: the memory file, the worker's wake-up eventfd and the host's). The worker
//! maps it and sets the header's `attached`; the host writes its ring only once it has seen
//! that, so a worker that declines or ignores the channel (an older one, a failed setup)
//! leaves both sides on the socket alone. From then on each side sends a message through its
//! ring when it fits a slot and the ring has room, otherwise on the socket, which stays the
//! connection: setup, messages larger than a slot, overflow, and the hang-up that tells
//! either side the other is gone.
//!
//! ```text
//!   host                       memory file (sealed)                       worker
//!   writes ──▶ ring 0: host → worker  (SLOTS × SLOT_BYTES) ──▶ reads
//!   reads  ◀── ring 1: worker → host  (SLOTS × SLOT_BYTES) ◀── writes
//!   host wake eventfd   (in the host PE's set, drain mode) ◀── worker writes it
//!   worker wake eventfd (in the worker's poll set)          ◀── host writes it
//! ```
//!
//! # Order across the two paths
//!
//! Messages of one direction are delivered in the order they were sent, whichever path each
//! took. The writer counts the packets it sent on the socket (`socket_sent`); the reader
//! publishes how many it has taken (`socket_taken`, in the ring's reader line). The rule:
//! * a writer uses the ring only when the reader has taken every socket packet it sent, so
//!   no ring message can overtake a packet;
//! * a reader that receives a packet while ring messages are waiting keeps the packet aside
//!   and delivers those messages first: they were published before the packet was sent (a
//!   ring message sent after it would have had to wait for the packet to be taken).
//!
//! The writer also publishes its packet count (`socket_sent`, in the ring's writer line), so a
//! reader that polls memory in a loop needs no system call to learn that a packet is on its
//! way: it looks at the socket only while [`Channel::socket_pending`] says so (and, for
//! hang-ups, now and then).
//!
//! # Where the peer runs
//!
//! Each host send through the ring also stores the CPU the host runs on (`cpu`, in ring 0's
//! writer line; `sched_getcpu`, which glibc answers from the thread's rseq area without a
//! system call). Only the worker reads it, so the worker's sends store nothing. It is a
//! scheduling hint, never trusted for anything else: a worker that has just
//! answered a host whose last command came from the worker's own CPU gives that CPU up at
//! once, since the host (spinning with `sched_yield`, or just woken) needs it to take the
//! answer ([`Channel::peer_cpu`], the worker's `YIELD_AFTER`).
//!
//! # Layout and memory ordering
//!
//! Each ring has a writer line (`tail`: messages published; `socket_sent`), a reader line (`head`: messages
//! consumed; `socket_taken`), a sleep line (`sleeping`) and per-slot lengths, then the slots.
//! Cursors are free-running message counts; slot `i` is `cursor % SLOTS`.
//! * Data: the writer copies the message and stores its length, then stores `tail`
//!   (Release); the reader loads `tail` (Acquire) before reading them, and stores `head`
//!   (Release) after copying out; the writer loads `head` (Acquire) before reusing a slot.
//! * Wake-up (a Dekker pair): the reader stores `sleeping = 1`, a SeqCst fence, then re-reads
//!   `tail`; the writer stores `tail`, a SeqCst fence, then swaps `sleeping` to 0 and writes
//!   the reader's eventfd if it was 1. Either the writer sees the flag or the reader sees the
//!   message. A reader clears the flag itself when it wakes, so a flag left set costs at most
//!   one needless eventfd write.
//!
//! Nothing read from the shared memory is trusted: a peer cursor that would put more than
//! `SLOTS` messages in a ring, or a length beyond a slot, is [`Corrupt`] (the reader drops
//! the connection; a writer that sees it just uses the socket). The segment is sealed against
//! shrinking (see [`crate::shm`]), so no access inside it can fault.

use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering::*};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use crate::eventfd;
use crate::shm::ShmSegment;
use crate::types::*;

/// Slots per ring: more than a worker's default in-flight commands (64 is DOCA's default
/// `max_inflight_tasks` in the samples), so a full ring is rare and only means the socket.
pub(crate) const SLOTS: u64 = 128;
/// The largest message a slot holds. Commands and notifications of the collectives and the
/// sample plugins are a few hundred bytes; larger ones take the socket.
pub(crate) const SLOT_BYTES: usize = 1024;
/// `"DSUROMC3"`: the first word of a channel's memory. (Version 1 had no published
/// `socket_sent`: its reader had to poll the socket on every round; version 2 no writer's
/// `cpu`.)
const MAGIC: u64 = u64::from_le_bytes(*b"DSUROMC3");
/// The ring the host writes (and the worker reads); the other carries the answers.
const HOST_RING: usize = 0;
/// A writer line's `cpu` before the first send, or when `sched_getcpu` fails.
const NO_CPU: u32 = u32::MAX;
/// Where the slots start (after the header, page-aligned).
const DATA_OFFSET: usize = 4096;
/// Bytes of the memory file.
pub(crate) const CHANNEL_LEN: usize = DATA_OFFSET + 2 * SLOTS as usize * SLOT_BYTES;

#[repr(C, align(64))]
struct WriterLine {
    tail: AtomicU64,
    /// Packets the writer sent (or queued) on the socket: a hint for the reader's look,
    /// never trusted for anything else.
    socket_sent: AtomicU64,
    /// The CPU the host ran on at its last ring send ([`NO_CPU`]: not known; the worker's
    /// ring never has one). A hint for the worker's scheduling (see "Where the peer runs"
    /// above).
    cpu: AtomicU32,
}

#[repr(C, align(64))]
struct ReaderLine {
    head: AtomicU64,
    socket_taken: AtomicU64,
}

#[repr(C, align(64))]
struct SleepLine {
    sleeping: AtomicU64,
}

#[repr(C)]
struct RingHeader {
    writer: WriterLine,
    reader: ReaderLine,
    sleep: SleepLine,
    /// Written by the writer before it publishes the slot.
    lens: [AtomicU32; SLOTS as usize],
}

#[repr(C)]
struct Header {
    /// Written by the host at creation.
    magic: AtomicU64,
    /// Set to 1 by the worker once it has attached.
    attached: AtomicU64,
    rings: [RingHeader; 2],
}

const _: () = assert!(core::mem::size_of::<Header>() <= DATA_OFFSET);

/// The CPU this thread runs on, if the system says. glibc answers `sched_getcpu` from the
/// rseq area (no system call) where the kernel supports it.
pub(crate) fn current_cpu() -> Option<u32> {
    // SAFETY: sched_getcpu takes no arguments; it returns -1 on failure.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).ok()
}

/// The peer broke the channel's rules (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// Which end of the channel this is: the host writes ring 0 and reads ring 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Host,
    Worker,
}

/// One end of a channel.
pub(crate) struct Channel {
    seg: ShmSegment,
    tx: usize,
    rx: usize,
    /// Messages this end published (our own copy of the tx ring's `tail`).
    tail: u64,
    /// Messages this end consumed (our own copy of the rx ring's `head`).
    head: u64,
    /// Packets this end sent on the socket since the channel exists.
    socket_sent: u64,
    /// The peer uses the channel (always true on the worker's end; on the host's, once the
    /// worker has set `attached`).
    peer_attached: bool,
    /// Packets this end took from the socket (published as the rx ring's `socket_taken`).
    socket_taken: u64,
    /// A packet that arrived while ring messages sent before it were waiting.
    stash: Option<Vec<u8>>,
    /// Written by the peer to wake us; we sleep on it.
    my_wake: OwnedFd,
    /// Written by us to wake the peer.
    peer_wake: OwnedFd,
    /// Whether this end sent a message (ring or socket) since [`Channel::take_sent`] last
    /// asked.
    sent: bool,
}

impl core::fmt::Debug for Channel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Channel").field("tail", &self.tail).field("head", &self.head).finish_non_exhaustive()
    }
}

impl Channel {
    /// The host's end of a new channel. Pass [`Channel::fds_to_pass`] to the worker.
    pub(crate) fn create() -> Result<Channel, doca_error_t> {
        let seg = ShmSegment::create(CHANNEL_LEN, "doca-soft-urom-channel")?;
        let ch = Channel::new(seg, Side::Host, eventfd::create()?, eventfd::create()?);
        for ring in &ch.header().rings {
            ring.writer.cpu.store(NO_CPU, Relaxed);
        }
        ch.header().magic.store(MAGIC, Release);
        Ok(ch)
    }

    /// The worker's end, from the descriptors the host passed: the memory file, the
    /// worker's wake-up eventfd, the host's. Anything else is `INVALID_VALUE`.
    pub(crate) fn attach(fds: Vec<OwnedFd>) -> Result<Channel, doca_error_t> {
        let [mem, mine, peer]: [OwnedFd; 3] = fds.try_into().map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
        let seg = ShmSegment::from_fd(mem, CHANNEL_LEN)?;
        for fd in [&mine, &peer] {
            if !is_eventfd(fd.as_fd()) {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
        }
        let ch = Channel::new(seg, Side::Worker, mine, peer);
        if ch.header().magic.load(Acquire) != MAGIC {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        ch.header().attached.store(1, Release);
        Ok(ch)
    }

    fn new(seg: ShmSegment, side: Side, my_wake: OwnedFd, peer_wake: OwnedFd) -> Channel {
        let (tx, rx) = if side == Side::Host { (HOST_RING, 1) } else { (1, HOST_RING) };
        Channel {
            seg,
            tx,
            rx,
            tail: 0,
            head: 0,
            socket_sent: 0,
            peer_attached: side == Side::Worker,
            socket_taken: 0,
            stash: None,
            my_wake,
            peer_wake,
            sent: false,
        }
    }

    /// What the host passes to the worker, in [`Channel::attach`]'s order.
    pub(crate) fn fds_to_pass(&self) -> [BorrowedFd<'_>; 3] {
        // SAFETY: the segment's descriptor is open for as long as `self.seg` lives, which
        // outlives the returned borrow.
        let mem = unsafe { BorrowedFd::borrow_raw(self.seg.fd()) };
        // On the host, `my_wake` is the host's and `peer_wake` the worker's.
        [mem, self.peer_wake.as_fd(), self.my_wake.as_fd()]
    }

    /// The descriptor the peer writes to wake this end.
    pub(crate) fn wake_fd(&self) -> RawFd {
        self.my_wake.as_raw_fd()
    }

    /// Reads this end's wake-up eventfd empty (the worker, after its `poll` saw it readable;
    /// the host's PE drains it itself).
    pub(crate) fn drain_wake(&self) {
        eventfd::drain(self.my_wake.as_raw_fd());
    }

    fn header(&self) -> &Header {
        // SAFETY: the segment is CHANNEL_LEN bytes, page-aligned, and lives as long as
        // `self`; the header holds only atomics, which both processes access atomically.
        unsafe { &*self.seg.as_ptr().cast::<Header>() }
    }

    fn slot(&self, ring: usize, cursor: u64) -> *mut u8 {
        let index = ring * SLOTS as usize + (cursor % SLOTS) as usize;
        // SAFETY: index < 2 × SLOTS, so the slot lies inside the CHANNEL_LEN-byte mapping.
        unsafe { self.seg.as_ptr().add(DATA_OFFSET + index * SLOT_BYTES) }
    }

    /// Sends `msg` through the ring if the order rule allows it, it fits a slot and the ring
    /// has room, waking the peer if it sleeps. `false`: send it on the socket (or queue it
    /// behind the packets waiting for room there), then call [`Channel::sent_on_socket`].
    /// While packets wait in such a queue the answer is always `false`: they are counted and
    /// the reader cannot have taken them, so the caller needs no check of its own.
    pub(crate) fn try_send(&mut self, msg: &[u8]) -> bool {
        self.try_send_parts(&[msg])
    }

    /// [`Channel::try_send`] of the message that is `parts` one after the other, copied
    /// straight into the slot (a header built on the stack and a borrowed body need no
    /// buffer of their own).
    pub(crate) fn try_send_parts(&mut self, parts: &[&[u8]]) -> bool {
        if !self.peer_attached() {
            return false;
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let ring = &self.header().rings[self.tx];
        if len > SLOT_BYTES || ring.reader.socket_taken.load(Acquire) != self.socket_sent {
            return false;
        }
        let head = ring.reader.head.load(Acquire);
        let used = self.tail.wrapping_sub(head);
        if used >= SLOTS {
            // Full, or a peer cursor beyond ours (Corrupt): the socket still works.
            return false;
        }
        let cursor = self.tail;
        let slot = self.slot(self.tx, cursor);
        let mut at = 0;
        for p in parts {
            // SAFETY: the slot is SLOT_BYTES long and the parts' total length is at most
            // SLOT_BYTES; the reader does not read it until `tail` says so, and it consumed
            // the slot's previous message (head > cursor - SLOTS), so nobody else touches it.
            unsafe { core::ptr::copy_nonoverlapping(p.as_ptr(), slot.add(at), p.len()) };
            at += p.len();
        }
        ring.lens[(cursor % SLOTS) as usize].store(len as u32, Relaxed);
        if self.tx == HOST_RING {
            ring.writer.cpu.store(current_cpu().unwrap_or(NO_CPU), Relaxed);
        }
        ring.writer.tail.store(cursor + 1, Release);
        fence(SeqCst);
        if ring.sleep.sleeping.load(Relaxed) != 0 && ring.sleep.sleeping.swap(0, AcqRel) != 0 {
            eventfd::signal(self.peer_wake.as_raw_fd());
        }
        self.tail = cursor + 1;
        self.sent = true;
        true
    }

    /// Whether this end sent a message (through the ring or on the socket) since the last
    /// call.
    pub(crate) fn take_sent(&mut self) -> bool {
        std::mem::take(&mut self.sent)
    }

    /// The CPU the peer ran on when it last sent through its ring, if known: a hint (see
    /// "Where the peer runs" in the module docs). Only the host publishes it: on the
    /// host's end this is always `None`.
    pub(crate) fn peer_cpu(&self) -> Option<u32> {
        match self.header().rings[self.rx].writer.cpu.load(Relaxed) {
            NO_CPU => None,
            cpu => Some(cpu),
        }
    }

    /// A message of this direction went on the socket (sent or queued behind others).
    pub(crate) fn sent_on_socket(&mut self) {
        self.sent = true;
        self.socket_sent += 1;
        self.header().rings[self.tx].writer.socket_sent.store(self.socket_sent, Release);
    }

    /// Whether the peer attached the channel (always, seen from the worker). From then on
    /// every packet it sends on the socket is counted, so [`Channel::socket_pending`] says
    /// when the socket is worth a look.
    pub(crate) fn peer_attached(&mut self) -> bool {
        if !self.peer_attached && self.header().attached.load(Acquire) != 0 {
            self.peer_attached = true;
        }
        self.peer_attached
    }

    /// Whether the writer sent packets on the socket that this end has not received yet, so
    /// the socket is worth a look. A reader that reads its ring in a polling loop asks this
    /// instead of polling the socket every round; it still looks now and then for what the
    /// count cannot say (a hang-up). A packet already kept aside is received.
    pub(crate) fn socket_pending(&self) -> bool {
        let sent = self.header().rings[self.rx].writer.socket_sent.load(Acquire);
        sent != self.socket_taken + u64::from(self.stash.is_some())
    }

    /// Messages waiting in the ring (published, not consumed).
    fn waiting(&self) -> Result<u64, Corrupt> {
        let tail = self.header().rings[self.rx].writer.tail.load(Acquire);
        let n = tail.wrapping_sub(self.head);
        if n > SLOTS {
            return Err(Corrupt);
        }
        Ok(n)
    }

    /// Whether a message waits (in the ring, or a packet kept aside).
    pub(crate) fn has_data(&self) -> bool {
        // A corrupt ring is "data": the reader looks and drops the connection.
        self.stash.is_some() || self.waiting() != Ok(0)
    }

    /// The next message in order, copied into `buf`: ring messages first, then a packet kept
    /// aside. `None`: read the socket next, and hand what it gives to
    /// [`Channel::on_socket_packet`].
    pub(crate) fn next(&mut self, buf: &mut [u8]) -> Result<Option<usize>, Corrupt> {
        if self.waiting()? == 0 {
            let Some(p) = self.stash.take() else { return Ok(None) };
            buf[..p.len()].copy_from_slice(&p);
            self.took_from_socket();
            return Ok(Some(p.len()));
        }
        let cursor = self.head;
        let ring = &self.header().rings[self.rx];
        let len = ring.lens[(cursor % SLOTS) as usize].load(Relaxed) as usize;
        if len > SLOT_BYTES || len > buf.len() {
            return Err(Corrupt);
        }
        // SAFETY: the slot is published (tail > cursor, loaded with Acquire after the writer
        // stored the bytes) and len <= SLOT_BYTES; the writer does not reuse it until `head`
        // passes it.
        unsafe { core::ptr::copy_nonoverlapping(self.slot(self.rx, cursor), buf.as_mut_ptr(), len) };
        self.head = cursor + 1;
        self.header().rings[self.rx].reader.head.store(self.head, Release);
        Ok(Some(len))
    }

    /// A packet arrived on the socket (after [`Channel::next`] said `None`). `true`: ring
    /// messages sent before it arrived meanwhile, so it was kept aside and [`Channel::next`]
    /// delivers them, then it. `false`: handle it now.
    pub(crate) fn on_socket_packet(&mut self, packet: &[u8]) -> bool {
        debug_assert!(self.stash.is_none(), "a packet read while one was kept aside");
        if self.waiting() != Ok(0) {
            self.stash = Some(packet.to_vec());
            return true;
        }
        self.took_from_socket();
        false
    }

    fn took_from_socket(&mut self) {
        self.socket_taken += 1;
        self.header().rings[self.rx].reader.socket_taken.store(self.socket_taken, Release);
    }

    /// About to sleep: tells the writer to wake us. `false`: a message is already waiting,
    /// do not sleep (the flag is cleared again).
    pub(crate) fn prepare_sleep(&self) -> bool {
        let s = &self.header().rings[self.rx].sleep.sleeping;
        s.store(1, SeqCst);
        fence(SeqCst);
        if self.has_data() {
            s.store(0, Relaxed);
            return false;
        }
        true
    }

    /// Awake again: the writer need not wake us any more.
    pub(crate) fn awake(&self) {
        let s = &self.header().rings[self.rx].sleep.sleeping;
        if s.load(Relaxed) != 0 {
            s.store(0, Relaxed);
        }
    }
}

/// Whether `fd` is an eventfd (what `/proc/self/fd` names `anon_inode:[eventfd]`).
fn is_eventfd(fd: BorrowedFd<'_>) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .is_ok_and(|p| p.as_os_str() == std::ffi::OsStr::new("anon_inode:[eventfd]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends in one process: the worker's end attaches duplicates of the passed fds.
    fn pair() -> (Channel, Channel) {
        let host = Channel::create().unwrap();
        let fds = Vec::from(host.fds_to_pass().map(|fd| fd.try_clone_to_owned().unwrap()));
        let worker = Channel::attach(fds).unwrap();
        (host, worker)
    }

    fn recv(ch: &mut Channel) -> Option<Vec<u8>> {
        let mut buf = vec![0; 4096];
        ch.next(&mut buf).unwrap().map(|n| buf[..n].to_vec())
    }

    #[test]
    fn messages_cross_in_order_and_the_ring_fills() {
        let (mut h, mut w) = pair();
        assert!(!w.has_data());
        for i in 0..SLOTS {
            assert!(h.try_send(&i.to_le_bytes()), "message {i}");
        }
        assert!(!h.try_send(b"full"), "a full ring refuses");
        assert!(!h.try_send(&vec![0; SLOT_BYTES + 1]), "too big for a slot");
        for i in 0..SLOTS {
            assert_eq!(recv(&mut w).unwrap(), i.to_le_bytes());
        }
        assert_eq!(recv(&mut w), None);
        // Both directions, wrapping around.
        for i in 0..3 * SLOTS {
            assert!(w.try_send(&[i as u8; SLOT_BYTES]));
            assert_eq!(recv(&mut h).unwrap(), [i as u8; SLOT_BYTES]);
        }
    }

    #[test]
    fn a_message_in_parts_arrives_whole() {
        let (mut h, mut w) = pair();
        assert!(h.try_send_parts(&[b"head", b"", b"body"]));
        assert_eq!(recv(&mut w).unwrap(), b"headbody");
        let half = vec![7u8; SLOT_BYTES / 2];
        assert!(h.try_send_parts(&[&half, &half]), "exactly a slot");
        assert_eq!(recv(&mut w).unwrap(), [half.clone(), half.clone()].concat());
        assert!(!h.try_send_parts(&[&half, &half, b"x"]), "a byte more than a slot");
    }

    #[test]
    fn a_socket_packet_keeps_its_place_between_ring_messages() {
        let (mut h, mut w) = pair();
        assert!(h.try_send(b"a"));
        // "b" is too big for a slot: it goes on the socket.
        let big = vec![b'b'; SLOT_BYTES + 1];
        assert!(!h.try_send(&big));
        h.sent_on_socket();
        // Until the worker takes "b", "c" must not overtake it through the ring.
        assert!(!h.try_send(b"c"));
        h.sent_on_socket();
        // The worker reads the socket first (say its poll saw it before the ring): "b" is
        // kept aside until "a" is delivered.
        assert!(w.on_socket_packet(&big));
        assert_eq!(recv(&mut w).unwrap(), b"a");
        assert_eq!(recv(&mut w).unwrap(), big);
        assert_eq!(recv(&mut w), None);
        // "c" arrives on the socket with nothing in the ring: handled at once.
        assert!(!w.on_socket_packet(b"c"));
        // Every packet taken: the ring is open to the host again.
        assert!(h.try_send(b"d"));
        assert_eq!(recv(&mut w).unwrap(), b"d");
    }

    #[test]
    fn a_reader_learns_of_socket_packets_without_looking_at_the_socket() {
        let (mut h, mut w) = pair();
        assert!(!w.socket_pending(), "nothing sent");
        assert!(h.try_send(b"a"));
        assert!(!w.socket_pending(), "a ring message is not a packet");
        let big = vec![b'b'; SLOT_BYTES + 1];
        assert!(!h.try_send(&big));
        h.sent_on_socket();
        assert!(w.socket_pending(), "the packet is announced");
        // Received before "a" was delivered: kept aside, so received, no longer pending.
        assert!(w.on_socket_packet(&big));
        assert!(!w.socket_pending(), "a packet kept aside is not pending");
        assert_eq!(recv(&mut w).unwrap(), b"a");
        assert_eq!(recv(&mut w).unwrap(), big);
        assert!(!w.socket_pending());
        // Two more, taken one by one.
        for _ in 0..2 {
            assert!(!h.try_send(&big));
            h.sent_on_socket();
        }
        assert!(w.socket_pending());
        assert!(!w.on_socket_packet(&big));
        assert!(w.socket_pending(), "one of two taken");
        assert!(!w.on_socket_packet(&big));
        assert!(!w.socket_pending());
        // The other direction has its own count.
        assert!(!w.try_send(&big));
        w.sent_on_socket();
        assert!(h.socket_pending() && !w.socket_pending());
    }

    #[test]
    fn a_sleeping_reader_is_woken_once() {
        let (mut h, w) = pair();
        let readable = |fd: RawFd| {
            let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; zero timeout.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        assert!(h.try_send(b"x"));
        assert!(!readable(w.wake_fd()), "an awake reader is not woken");
        assert!(!w.prepare_sleep(), "a message waits: do not sleep");
        let mut w = w;
        recv(&mut w).unwrap();
        assert!(w.prepare_sleep());
        assert!(h.try_send(b"y"));
        assert!(readable(w.wake_fd()), "the sleeper is woken");
        w.drain_wake();
        assert!(h.try_send(b"z"));
        assert!(!readable(w.wake_fd()), "once: the writer cleared the flag");
        w.awake();
    }

    #[test]
    fn a_writer_says_it_sent_and_where_it_ran() {
        let (mut h, mut w) = pair();
        assert_eq!(w.peer_cpu(), None, "nothing sent yet");
        assert!(!h.take_sent());
        assert!(h.try_send(b"x"));
        assert!(h.take_sent() && !h.take_sent(), "the writer knows, once");
        // The thread may have moved since: only that a CPU was published.
        assert!(w.peer_cpu().is_some(), "the host's CPU, as the worker sees it");
        assert_eq!(h.peer_cpu(), None, "the worker has sent nothing");
        w.sent_on_socket();
        assert!(w.take_sent(), "a packet on the socket is a send too");
        assert_eq!(h.peer_cpu(), None, "only ring sends say where they ran");
    }

    #[test]
    fn a_worker_that_never_attaches_leaves_the_host_on_the_socket() {
        let mut h = Channel::create().unwrap();
        assert!(!h.try_send(b"x"));
        h.sent_on_socket();
        let mut w = Channel::attach(Vec::from(h.fds_to_pass().map(|fd| fd.try_clone_to_owned().unwrap()))).unwrap();
        // Attached now, but the packet sent before must be taken first.
        assert!(!h.try_send(b"y"));
        h.sent_on_socket();
        assert!(!w.on_socket_packet(b"x"));
        assert!(!w.on_socket_packet(b"y"));
        assert!(h.try_send(b"z"));
        assert_eq!(recv(&mut w).unwrap(), b"z");
    }

    #[test]
    fn a_corrupt_peer_is_refused() {
        let (h, mut w) = pair();
        // The host claims more messages than the ring holds.
        h.header().rings[0].writer.tail.store(SLOTS + 1, SeqCst);
        assert_eq!(w.next(&mut [0; 16]), Err(Corrupt));
        assert!(w.has_data(), "so that the reader looks and drops the connection");
        // A length beyond a slot.
        let (mut h, mut w) = pair();
        assert!(h.try_send(b"ok"));
        h.header().rings[0].lens[0].store(SLOT_BYTES as u32 + 1, SeqCst);
        assert_eq!(w.next(&mut [0; 4096]), Err(Corrupt));
        // Wrong descriptors.
        let h = Channel::create().unwrap();
        let [m, a, _] = h.fds_to_pass().map(|fd| fd.try_clone_to_owned().unwrap());
        let not_eventfd = h.seg_fd_clone();
        assert_eq!(Channel::attach(vec![m, a]).err(), Some(DOCA_ERROR_INVALID_VALUE));
        let mut h = h;
        assert!(!h.try_send(b"no worker attached: the socket"));
        let [m, a, _] = h.fds_to_pass().map(|fd| fd.try_clone_to_owned().unwrap());
        assert_eq!(Channel::attach(vec![m, a, not_eventfd]).err(), Some(DOCA_ERROR_INVALID_VALUE));
    }

    impl Channel {
        fn seg_fd_clone(&self) -> OwnedFd {
            self.fds_to_pass()[0].try_clone_to_owned().unwrap()
        }
    }
}
