//! Connections: the `doca_rdma_connection` object, the export blob, connect, peer liveness.
//!
//! # Life of a connection
//!
//! ```text
//! doca_rdma_export ──▶ Exported ──doca_rdma_connect──▶ Connected ──peer gone / error──▶ Broken(code)
//!                         │                                │                               │
//!                         └────────────── doca_ctx_stop (any state) ──────────────────────┴──▶ Closed
//! ```
//!
//! * **Export** (ctx RUNNING) creates the connection's receive ring (see `ring.rs`) and the
//!   blob ([`BlobKind::RdmaConn`]): blob format version, pid, the ring's memfd number,
//!   segment length and random key, this PE's doorbell address, a random connection id and
//!   the ctx's permissions (what the peer may do to this side's memory with one-sided ops).
//!   The blob is owned by the connection and stays valid until the `doca_rdma` is
//!   destroyed.
//! * **Connect** validates the peer's blob (anything malformed: `DOCA_ERROR_INVALID_VALUE`;
//!   another blob format version: `DOCA_ERROR_UNSUPPORTED_VERSION`), opens a pidfd of the
//!   peer process (cross-process only), maps the peer's ring and claims it as its producer,
//!   and registers the pidfd with the PE (level-triggered: a dead peer wakes an event-mode
//!   PE). Both sides connect, each with the other's blob.
//! * **Broken**: the peer process died (`DOCA_ERROR_CONNECTION_ABORTED`), the peer closed its
//!   side or its ring was found corrupt (`DOCA_ERROR_CONNECTION_RESET`), or this ctx entered
//!   the error state (the ctx's error code). Our side of both rings is marked closed and the
//!   peer's doorbell rung, so the peer learns about it promptly.
//! * **Closed** (`doca_ctx_stop`): rings unmapped and their descriptors closed, pidfd
//!   unregistered and closed. The object itself stays allocated until `doca_rdma_destroy`, so
//!   a stale connection pointer is refused (`DOCA_ERROR_NOT_CONNECTED`) instead of being a
//!   use after free.

use core::cell::{Cell, RefCell};
use core::ptr;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::addr::doca_rdma_addr;
use super::op::Queued;
use super::ring::{capacity_of_seg, ring_bytes_for, RxRing, TxRing};
use super::{doca_rdma, PERMISSIONS_ALL};
use crate::blob::{BlobKind, BlobReader, BlobWriter};
use crate::doorbell::{ring, DoorbellAddr};
use crate::ffi::refused;
use crate::pe::{doca_pe, FdMode};
use crate::shm::{errno_to_doca, own_pid};
use crate::task::doca_task;
use crate::types::*;

/// `"CONN"`: marks a live connection object.
const CONN_MAGIC: u32 = 0x434f_4e4e;

/// Version of the connection blob's payload layout (inside the blob framing's own version).
/// 2: the ring's length varies with the ctx's `max_num_connections` (`ring_bytes_for`); a
/// version-1 peer, which accepts one length only, answers UNSUPPORTED_VERSION instead of
/// refusing the length as an invalid blob.
pub(crate) const CONN_BLOB_VERSION: u16 = 2;

/// Where a connection is in its life (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConnState {
    Exported,
    Connected,
    Broken(doca_error_t),
    Closed,
}

/// What an export blob says (validated).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnBlob {
    pub pid: u32,
    pub ring_fd: i32,
    pub ring_len: u64,
    pub ring_key: u64,
    pub doorbell: DoorbellAddr,
    pub conn_id: u64,
    pub perms: u32,
}

impl ConnBlob {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = BlobWriter::new(BlobKind::RdmaConn);
        w.u16(CONN_BLOB_VERSION)
            .u32(self.pid)
            .u32(self.ring_fd as u32)
            .u64(self.ring_len)
            .u64(self.ring_key)
            .u64(self.doorbell.pid)
            .u64(self.doorbell.nonce)
            .u64(self.conn_id)
            .u32(self.perms);
        w.finish()
    }

    /// Parses untrusted bytes; never panics.
    pub(crate) fn decode(bytes: &[u8]) -> Result<ConnBlob, doca_error_t> {
        const BAD: doca_error_t = DOCA_ERROR_INVALID_VALUE;
        let mut r = BlobReader::new(bytes, BlobKind::RdmaConn)?;
        if r.u16()? != CONN_BLOB_VERSION {
            return Err(DOCA_ERROR_UNSUPPORTED_VERSION);
        }
        let b = ConnBlob {
            pid: r.u32()?,
            ring_fd: i32::try_from(r.u32()?).map_err(|_| BAD)?,
            ring_len: r.u64()?,
            ring_key: r.u64()?,
            doorbell: DoorbellAddr { pid: r.u64()?, nonce: r.u64()? },
            conn_id: r.u64()?,
            perms: r.u32()?,
        };
        r.finish()?;
        if b.pid == 0
            || b.pid > i32::MAX as u32
            || capacity_of_seg(b.ring_len).is_none()
            || b.ring_key == 0
            || b.doorbell.pid == 0
            || b.conn_id == 0
            || b.perms & !PERMISSIONS_ALL != 0
        {
            return Err(BAD);
        }
        Ok(b)
    }
}

/// The peer of a connected connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    pub pid: u32,
    pub doorbell: DoorbellAddr,
    /// The peer ctx's permissions (checked for one-sided operations).
    pub perms: u32,
    /// True when the peer is another process.
    pub remote: bool,
}

/// Where a matched receive's payload goes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReceiveTarget {
    /// The free space of a single buffer, from this address.
    Single(usize),
    /// The room of a destination list's elements, in order (`doca_buf::room_spans`).
    List(*const crate::buf::doca_buf),
}

/// A receive that has matched a message and is being filled (large messages stream).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Incoming {
    pub task: *const doca_task,
    pub record: super::ring::Record,
    /// Where the payload goes (the destination's free space at match time, or its list's).
    pub dst: ReceiveTarget,
    /// Payload bytes copied so far.
    pub copied: u32,
}

/// `struct doca_rdma_connection`.
pub struct doca_rdma_connection {
    magic: u32,
    pub(crate) rdma: *const doca_rdma,
    /// The start cycle of the ctx this connection belongs to.
    pub(crate) cycle: u64,
    pub(crate) id: u64,
    state: Cell<ConnState>,
    blob: Box<[u8]>,
    pub(crate) rx: RefCell<Option<RxRing>>,
    pub(crate) tx: RefCell<Option<TxRing>>,
    peer: Cell<Option<Peer>>,
    /// pidfd of a remote peer, registered with `pe` while connected.
    pidfd: RefCell<Option<OwnedFd>>,
    pe: Cell<*const doca_pe>,
    /// Submitted send-side tasks in submission order (the head may be partly done).
    pub(crate) ops: RefCell<VecDeque<Queued>>,
    /// The receive being filled by the message at the ring's head, if any.
    pub(crate) incoming: RefCell<Option<Incoming>>,
    /// The peer process was seen dead (pidfd readable) and that is not processed yet.
    pub(crate) death_seen: Cell<bool>,
    /// The peer is gone (with this code) and the send side failed, but records it had
    /// completed still wait in our ring: the connection is drained before it breaks (see
    /// "Completed means delivered" in `engine.rs`).
    pub(crate) draining: Cell<Option<doca_error_t>>,
    /// Position among the rdma's connections (`doca_rdma_connection_get_id`).
    pub(crate) num: u32,
    /// Connection management by address (`cm.rs`); `Phase::Blob` for export/connect.
    pub(crate) cm: ConnCm,
}

/// A ring or the operation queue looked at while it is borrowed mutably, which never
/// happens (rings are replaced only by connect, stop and release, and the queue is changed
/// only in short borrows, none of which looks at them through the unguarded accessors): the
/// plain borrow then panics as it always did, with the same message.
#[cold]
#[inline(never)]
fn borrowed_mutably<T>(cell: &RefCell<T>) -> ! {
    let _panics = cell.borrow();
    unreachable!("a RefCell that refused an unguarded borrow lent a guarded one")
}

// ---- the connection-management record (driven by `cm.rs`) ----

/// Where a connection is in connection management (`Blob` = made by export/connect).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Not managed: exported and connected with blobs.
    Blob,
    /// Client: TCP connect, REQUEST sent or to send, waiting for the answer.
    Connecting,
    /// Server: `request_cb` delivered (or queued), waiting for accept/reject.
    Requested,
    /// Server: ACCEPT sent, waiting for READY.
    Accepted,
    Established,
    /// The handshake failed (failure_cb reported).
    Failed,
    /// This server rejected it.
    Rejected,
    /// Disconnected after establishment (by either side).
    Disconnected,
}

/// The connection-management part of a connection.
pub(crate) struct ConnCm {
    pub phase: Cell<Phase>,
    pub user_data: Cell<u64>,
    /// The peer's address: the client's `doca_rdma_addr` (user-owned), or an address object
    /// this connection owns (server side).
    pub(super) addr: Cell<*const doca_rdma_addr>,
    pub(super) owned_addr: RefCell<Option<Box<doca_rdma_addr>>>,
    /// Private data the server sent with its ACCEPT (client side).
    pub private: RefCell<Vec<u8>>,
    /// Server: the data path lost the client while we waited for its READY. The client may
    /// have completed its side and left at once (its READY then is in the handshake socket):
    /// the handshake decides between "established, then disconnected" and "failed".
    pub lost_early: Cell<Option<doca_error_t>>,
}

impl Default for ConnCm {
    fn default() -> Self {
        ConnCm {
            phase: Cell::new(Phase::Blob),
            user_data: Cell::new(0),
            addr: Cell::new(ptr::null()),
            owned_addr: RefCell::new(None),
            private: RefCell::new(Vec::new()),
            lost_early: Cell::new(None),
        }
    }
}

impl ConnCm {
    /// Whether a managed connection is over (failed, rejected or disconnected).
    pub(crate) fn ended(&self) -> bool {
        matches!(self.phase.get(), Phase::Failed | Phase::Rejected | Phase::Disconnected)
    }

    /// Whether the connection was made by connection management.
    pub(crate) fn managed(&self) -> bool {
        self.phase.get() != Phase::Blob
    }

    /// Lets go of the client's address object (it may be destroyed again).
    pub(crate) fn release_addr(&self) {
        if self.owned_addr.borrow().is_none() {
            // SAFETY: a client's addr is user-owned and cannot be destroyed while in_use > 0,
            // which this connection holds until here.
            if let Some(a) = unsafe { self.addr.get().as_ref() } {
                a.in_use.set(a.in_use.get().saturating_sub(1));
            }
            self.addr.set(ptr::null());
        }
    }
}

/// `pidfd_open(pid)`; `None` when the kernel has no pidfds (liveness then uses `kill(pid, 0)`).
fn pidfd_open(pid: u32) -> Result<Option<OwnedFd>, doca_error_t> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor; no memory effects.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if fd < 0 {
        let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return match e {
            libc::ENOSYS => Ok(None),
            libc::ESRCH => Err(DOCA_ERROR_NOT_FOUND),
            e => Err(errno_to_doca(e)),
        };
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }))
}

/// True when the pidfd reports its process exited (readable), without blocking.
fn pidfd_exited(fd: &OwnedFd) -> bool {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, zero timeout.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
}

impl doca_rdma_connection {
    /// A new exported connection of `rdma` (its receive ring, sized for a ctx of
    /// `max_conns` connections, and its blob).
    pub(crate) fn export(
        rdma: *const doca_rdma,
        max_conns: u16,
        cycle: u64,
        num: u32,
        doorbell: DoorbellAddr,
        perms: u32,
    ) -> Result<Box<doca_rdma_connection>, doca_error_t> {
        let key = crate::shm::random_nonzero_u64();
        let id = crate::shm::random_nonzero_u64();
        let rx = RxRing::create(key, ring_bytes_for(max_conns))?;
        let blob = ConnBlob {
            pid: own_pid(),
            ring_fd: rx.fd(),
            ring_len: rx.seg_len() as u64,
            ring_key: key,
            doorbell,
            conn_id: id,
            perms,
        }
        .encode()
        .into_boxed_slice();
        Ok(Box::new(doca_rdma_connection {
            magic: CONN_MAGIC,
            rdma,
            cycle,
            id,
            state: Cell::new(ConnState::Exported),
            blob,
            rx: RefCell::new(Some(rx)),
            tx: RefCell::new(None),
            peer: Cell::new(None),
            pidfd: RefCell::new(None),
            pe: Cell::new(core::ptr::null()),
            ops: RefCell::new(VecDeque::new()),
            incoming: RefCell::new(None),
            draining: Cell::new(None),
            death_seen: Cell::new(false),
            num,
            cm: ConnCm::default(),
        }))
    }

    /// The export blob (owned by the connection).
    pub(crate) fn blob(&self) -> &[u8] {
        &self.blob
    }

    pub(crate) fn state(&self) -> ConnState {
        self.state.get()
    }

    pub(crate) fn peer(&self) -> Option<Peer> {
        self.peer.get()
    }

    /// The receive ring, borrowed without touching the `RefCell`'s borrow count (its
    /// increment and decrement, with the overflow check, were a tenth of a submit's own
    /// checks: every submit looks at both rings).
    ///
    /// # Safety
    /// Nothing may replace or release the rings (`connect`, `shut`, `release_rings`) while
    /// the reference lives: the caller only reads through it and calls nothing that changes
    /// connections.
    #[inline(always)]
    pub(crate) unsafe fn rx_unguarded(&self) -> Option<&RxRing> {
        // SAFETY: no mutable borrow is taken while the reference lives (the contract above),
        // and `try_borrow_unguarded` refuses if one is alive now.
        match unsafe { self.rx.try_borrow_unguarded() } {
            Ok(rx) => rx.as_ref(),
            Err(_) => borrowed_mutably(&self.rx),
        }
    }

    /// The send ring, as [`rx_unguarded`](Self::rx_unguarded).
    ///
    /// # Safety
    /// As [`rx_unguarded`](Self::rx_unguarded).
    #[inline(always)]
    pub(crate) unsafe fn tx_unguarded(&self) -> Option<&TxRing> {
        // SAFETY: as in `rx_unguarded`.
        match unsafe { self.tx.try_borrow_unguarded() } {
            Ok(tx) => tx.as_ref(),
            Err(_) => borrowed_mutably(&self.tx),
        }
    }

    /// Whether send-side operations are queued (`ops` is not empty), looked at without
    /// touching the borrow count (see [`rx_unguarded`](Self::rx_unguarded)).
    #[inline(always)]
    pub(crate) fn ops_queued(&self) -> bool {
        // SAFETY: only the length is read, and the reference does not outlive this call.
        match unsafe { self.ops.try_borrow_unguarded() } {
            Ok(ops) => !ops.is_empty(),
            Err(_) => borrowed_mutably(&self.ops),
        }
    }

    /// Connects to the peer described by `bytes` (see the module docs for the errors).
    /// On failure nothing changes.
    pub(crate) fn connect(&self, bytes: &[u8], pe: &doca_pe) -> Result<(), doca_error_t> {
        let b = ConnBlob::decode(bytes)?;
        let remote = b.pid != own_pid();
        // The pidfd first: if the pid is recycled after this, the segment lookup below goes
        // to the new process and fails the key check.
        let pidfd = if remote { pidfd_open(b.pid)? } else { None };
        let tx = TxRing::open(b.pid, b.ring_fd, b.ring_len as usize, b.ring_key)?;
        if let Some(fd) = &pidfd {
            if pidfd_exited(fd) {
                return Err(DOCA_ERROR_NOT_FOUND);
            }
        }
        tx.claim(self.id)?;
        if let Some(fd) = &pidfd {
            if let Err(e) = pe.register_fd(fd.as_raw_fd(), FdMode::Level) {
                tx.close();
                return Err(e);
            }
            self.pe.set(pe);
        }
        *self.pidfd.borrow_mut() = pidfd;
        *self.tx.borrow_mut() = Some(tx);
        self.peer.set(Some(Peer { pid: b.pid, doorbell: b.doorbell, perms: b.perms, remote }));
        self.state.set(ConnState::Connected);
        Ok(())
    }

    /// Liveness of a remote peer as the PE's last look at its notification set saw it: the
    /// pidfd is registered there (level-triggered, readable once the process exited), so when
    /// the look did not report it the peer was alive then, and no system call is needed.
    /// Without a pidfd, or when the look may have missed it, this is [`Self::poll_alive`].
    pub(crate) fn alive_in_last_look(&self, pe: &doca_pe) -> bool {
        let quiet = self.pidfd.borrow().as_ref().is_some_and(|fd| !pe.fd_in_last_look(fd.as_raw_fd()));
        if quiet && !self.death_seen.get() {
            return true;
        }
        self.poll_alive()
    }

    /// Liveness of a remote peer right now (a pidfd poll; `kill(pid, 0)` without pidfds).
    /// Records a death in `death_seen`. Always true for in-process peers.
    pub(crate) fn poll_alive(&self) -> bool {
        let Some(peer) = self.peer.get().filter(|p| p.remote) else {
            return true;
        };
        if self.death_seen.get() {
            return false;
        }
        let alive = match self.pidfd.borrow().as_ref() {
            Some(fd) => !pidfd_exited(fd),
            None => {
                // SAFETY: signal 0 only checks for existence.
                let r = unsafe { libc::kill(peer.pid as libc::pid_t, 0) };
                r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
            }
        };
        if !alive {
            self.death_seen.set(true);
        }
        alive
    }

    /// Why the connected peer is gone, if it is: it closed its side (RESET) or its process
    /// was seen dead (ABORTED).
    pub(crate) fn peer_gone(&self) -> Option<doca_error_t> {
        // SAFETY: only the two flags are read; nothing here changes the connection.
        let closed = unsafe { self.rx_unguarded() }.is_some_and(|r| r.producer_closed())
            // SAFETY: as just above.
            || unsafe { self.tx_unguarded() }.is_some_and(|t| t.consumer_closed());
        if closed {
            Some(DOCA_ERROR_CONNECTION_RESET)
        } else if self.death_seen.get() {
            Some(DOCA_ERROR_CONNECTION_ABORTED)
        } else {
            None
        }
    }

    /// Rings the peer's PE doorbell (errors ignored: liveness is tracked separately).
    pub(crate) fn ring_peer(&self) {
        if let Some(p) = self.peer.get() {
            let _ = ring(p.doorbell);
        }
    }

    /// Marks the connection broken with `code`: our side of both rings is closed (the peer
    /// is told through the flags and its doorbell) and the pidfd is unregistered. The
    /// caller fails the connection's tasks.
    pub(crate) fn set_broken(&self, code: doca_error_t) {
        match self.state.get() {
            ConnState::Exported | ConnState::Connected => {}
            ConnState::Broken(_) | ConnState::Closed => return,
        }
        self.state.set(ConnState::Broken(code));
        self.close_rings();
        self.drop_pidfd();
    }

    /// Closes the connection for good (ctx stop): as [`Self::set_broken`], then the rings are
    /// unmapped and their descriptors closed. The caller forgets the tasks (the framework
    /// flushes them).
    pub(crate) fn shut(&self) {
        if self.state.get() != ConnState::Closed {
            self.close_rings();
            self.drop_pidfd();
        }
        self.state.set(ConnState::Closed);
        self.ops.borrow_mut().clear();
        self.incoming.borrow_mut().take();
        self.rx.borrow_mut().take();
        self.tx.borrow_mut().take();
    }

    /// Lets go of the rings of a broken connection (unmapped, descriptors closed) while the
    /// object stays, still reporting its code: a connection made by address that ended does
    /// not hold memory until the ctx stops (a server may see thousands come and go).
    pub(crate) fn release_rings(&self) {
        if matches!(self.state.get(), ConnState::Broken(_)) {
            self.incoming.borrow_mut().take();
            self.rx.borrow_mut().take();
            self.tx.borrow_mut().take();
        }
    }

    fn close_rings(&self) {
        let mut told = false;
        if let Some(rx) = self.rx.borrow().as_ref() {
            rx.close();
            told = true;
        }
        if let Some(tx) = self.tx.borrow().as_ref() {
            tx.close();
            told = true;
        }
        if told && !self.death_seen.get() {
            self.ring_peer();
        }
    }

    /// The peer is gone and the send side failed: records it completed stay in our ring to
    /// be delivered. Its pidfd (level-triggered, readable for good) stops waking the PE.
    pub(crate) fn start_draining(&self, code: doca_error_t) {
        self.draining.set(Some(code));
        self.drop_pidfd();
    }

    fn drop_pidfd(&self) {
        if let Some(fd) = self.pidfd.borrow_mut().take() {
            // SAFETY: `pe` was set when the pidfd was registered; the PE outlives its
            // connected ctxs (and so this connection's use of it).
            if let Some(pe) = unsafe { self.pe.get().as_ref() } {
                pe.unregister_fd(fd.as_raw_fd());
            }
            drop(fd);
        }
    }
}

/// Validates a connection pointer from C (NULL or foreign: INVALID_VALUE).
///
/// # Safety
/// A non-NULL `p` must point to a connection of a live `doca_rdma` of this provider.
pub(crate) unsafe fn conn_ref<'a>(p: *const doca_rdma_connection) -> Result<&'a doca_rdma_connection, doca_error_t> {
    // SAFETY: per the contract.
    match unsafe { p.as_ref() } {
        Some(c) if c.magic == CONN_MAGIC => Ok(c),
        _ => Err(refused(DOCA_ERROR_INVALID_VALUE)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConnBlob {
        ConnBlob {
            pid: 1234,
            ring_fd: 7,
            ring_len: super::super::ring::seg_len(ring_bytes_for(1)) as u64,
            ring_key: 0x55,
            doorbell: DoorbellAddr { pid: 1234, nonce: 9 },
            conn_id: 3,
            perms: DOCA_ACCESS_FLAG_RDMA_WRITE,
        }
    }

    #[test]
    fn blob_round_trip_and_field_checks() {
        let b = sample();
        assert_eq!(ConnBlob::decode(&b.encode()).unwrap(), b);
        let bad = [
            ConnBlob { pid: 0, ..b },
            ConnBlob { pid: u32::MAX, ..b },
            ConnBlob { ring_fd: -1, ..b },
            ConnBlob { ring_len: 4096, ..b },
            ConnBlob { ring_len: b.ring_len + 4096, ..b },
            ConnBlob { ring_key: 0, ..b },
            ConnBlob { doorbell: DoorbellAddr { pid: 0, nonce: 1 }, ..b },
            ConnBlob { conn_id: 0, ..b },
            ConnBlob { perms: 1 << 20, ..b },
        ];
        for x in bad {
            assert_eq!(ConnBlob::decode(&x.encode()).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "{x:?}");
        }
        // Another payload version inside a valid frame.
        let mut w = BlobWriter::new(BlobKind::RdmaConn);
        w.u16(CONN_BLOB_VERSION + 1);
        assert_eq!(ConnBlob::decode(&w.finish()).unwrap_err(), DOCA_ERROR_UNSUPPORTED_VERSION);
        // A blob of another kind.
        let mut w = BlobWriter::new(BlobKind::Mmap);
        w.u16(CONN_BLOB_VERSION);
        assert_eq!(ConnBlob::decode(&w.finish()).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }
}
