//! Connection management by address (DOCA's "RDMA CM"): `doca_rdma_addr_*`, listening on a
//! port, connecting to an address, accept (with private data), reject, disconnect, and the
//! four connection-state callbacks.
//!
//! # How a connection is made
//! The soft transport's data path is shared memory (see `conn.rs`), so connection management
//! only has to carry the two export blobs between the sides. It does that over a real TCP
//! connection to the given address, with four messages, each a framed, checksummed blob
//! ([`BlobKind::CmMessage`], so garbage on the port is recognised and dropped):
//!
//! ```text
//! client                                           server (listening on the port)
//! connect_to_addr ── TCP connect ──────────────▶   accept(2) in progress
//!                 ── REQUEST(client blob) ─────▶   export a connection, request_cb(conn)
//!                                                  connection_accept(conn, private data):
//!                 ◀── ACCEPT(server blob, priv) ─  connect to the client's ring
//! connect to the server's ring
//!                 ── READY ────────────────────▶
//! established_cb                                   established_cb
//!                 (the TCP connection is closed; the data path is the rings)
//! ```
//!
//! `connection_reject` answers REJECT instead; the client's `failure_cb` follows. A refused
//! port, a timeout (`doca_rdma_set_connection_request_timeout`, measured from
//! `connect_to_addr` to the ACCEPT), a peer that dies or closes mid-handshake, or anything
//! that is not one of these messages ends in `failure_cb` on the side that already reported
//! the connection (the client always; the server once its `request_cb` ran). A server
//! connection that never sent a valid REQUEST is dropped silently (SDK log only).
//!
//! # Where the events come from
//! Everything runs inside `doca_pe_progress` on the ctx's thread: the listening sockets, the
//! handshake sockets and a timerfd for the deadlines are registered in the PE's notification
//! set, so an armed (sleeping) PE wakes on a connection request, an answer, or a timeout.
//! Each callback travels as an internal *event task* of the ctx ([`CmEventTask`]) that
//! completes at once: the PE delivers it from its completion queue, in order with the tasks'
//! completions (an established connection's callback comes before the completions of data
//! received on it), with no internal borrow held and nothing of the provider walking the
//! ctx after it returns. So a callback may call any connection-management function (accept
//! or reject inside `request_cb`, as the samples do), stop the ctx, and even destroy it.
//!
//! # After establishment
//! Either side's `connection_disconnect` closes its rings; the peer's progress notices it
//! (after delivering what was already sent: "Completed means delivered" in `engine.rs`) and
//! reports `disconnect_cb`. Unlike a peer lost on a blob-connected ctx, a lost managed
//! connection does **not** put the ctx in the error state: a server keeps serving its other
//! clients. Pending tasks on that connection fail with `DOCA_ERROR_CONNECTION_RESET` (peer
//! disconnected), `DOCA_ERROR_CONNECTION_ABORTED` (peer process died) or
//! `DOCA_ERROR_NOT_CONNECTED` (this side disconnected).
//!
//! # Same host only
//! The rings are shared memory, so both peers must be on this host: `connect_to_addr` to an
//! address that is not one of this host's own (checked by binding it) fails with
//! `DOCA_ERROR_NOT_SUPPORTED` and says so in the SDK log. Listening binds 127.0.0.1 and ::1
//! (when the host has IPv6).

use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::addr::{addr_ref, doca_rdma_addr, is_local};
use super::conn::{conn_ref, doca_rdma_connection, ConnState, Phase};
use super::{doca_rdma, rdma_ref};
use crate::blob::{BlobKind, BlobReader, BlobWriter, HEADER_LEN, TRAILER_LEN};
use crate::ffi::{guard_err, out};
use crate::pe::{doca_pe, FdMode};
use crate::retry_pace::RetryPace;
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// Version of the handshake messages (inside the blob framing's own version).
pub(crate) const CM_PROTO_VERSION: u16 = 1;
/// Largest handshake message accepted from the wire (a REQUEST or ACCEPT is ~200 bytes).
pub(crate) const MAX_MESSAGE: usize = 4096;
/// How often a TCP connect still in progress is re-checked (it completes in microseconds on
/// this host; a refused one wakes the PE by itself).
const CONNECT_POLL: Duration = Duration::from_millis(1);

// ---- the handshake messages ----

/// One handshake message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Client to server: the client's connection blob.
    Request { blob: Vec<u8> },
    /// Server to client: the server's connection blob and the private data of the accept.
    Accept { blob: Vec<u8>, private: Vec<u8> },
    /// Server to client: the request was rejected.
    Reject,
    /// Client to server: the client is connected to the server's ring.
    Ready,
}

const MSG_REQUEST: u8 = 1;
const MSG_ACCEPT: u8 = 2;
const MSG_REJECT: u8 = 3;
const MSG_READY: u8 = 4;

impl Msg {
    /// The message as bytes on the wire (a framed blob).
    pub fn encode(&self) -> Vec<u8> {
        let mut w = BlobWriter::new(BlobKind::CmMessage);
        w.u16(CM_PROTO_VERSION);
        match self {
            Msg::Request { blob } => w.u8(MSG_REQUEST).var_bytes(blob),
            Msg::Accept { blob, private } => w.u8(MSG_ACCEPT).var_bytes(blob).var_bytes(private),
            Msg::Reject => w.u8(MSG_REJECT),
            Msg::Ready => w.u8(MSG_READY),
        };
        w.finish()
    }

    /// Takes one message off the front of `buf`: `Ok(None)` while incomplete, `Err` for
    /// anything that is not a message of this protocol (never panics, never reads past `buf`).
    pub fn take(buf: &mut Vec<u8>) -> Result<Option<Msg>, doca_error_t> {
        const BAD: doca_error_t = DOCA_ERROR_INVALID_VALUE;
        if buf.len() < HEADER_LEN {
            // Reject a wrong start early (a peer speaking something else).
            if !crate::blob::BLOB_MAGIC.starts_with(&buf[..buf.len().min(4)]) {
                return Err(BAD);
            }
            return Ok(None);
        }
        let plen = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
        let total = HEADER_LEN.saturating_add(plen).saturating_add(TRAILER_LEN);
        if total > MAX_MESSAGE {
            return Err(BAD);
        }
        if buf.len() < total {
            return Ok(None);
        }
        let msg = Msg::decode(&buf[..total])?;
        buf.drain(..total);
        Ok(Some(msg))
    }

    /// Parses one whole framed message.
    pub fn decode(bytes: &[u8]) -> Result<Msg, doca_error_t> {
        const BAD: doca_error_t = DOCA_ERROR_INVALID_VALUE;
        let mut r = BlobReader::new(bytes, BlobKind::CmMessage)?;
        if r.u16()? != CM_PROTO_VERSION {
            return Err(DOCA_ERROR_UNSUPPORTED_VERSION);
        }
        let m = match r.u8()? {
            MSG_REQUEST => Msg::Request { blob: r.var_bytes()?.to_vec() },
            MSG_ACCEPT => {
                let blob = r.var_bytes()?.to_vec();
                let private = r.var_bytes()?.to_vec();
                if private.len() > usize::from(u8::MAX) {
                    return Err(BAD);
                }
                Msg::Accept { blob, private }
            }
            MSG_REJECT => Msg::Reject,
            MSG_READY => Msg::Ready,
            _ => return Err(BAD),
        };
        r.finish()?;
        Ok(m)
    }
}

// ---- per-ctx state ----

/// The four callbacks.
#[derive(Clone, Copy, Default)]
pub(crate) struct Callbacks {
    request: doca_rdma_connection_request_cb_t,
    established: doca_rdma_connection_established_cb_t,
    failure: doca_rdma_connection_failure_cb_t,
    disconnect: doca_rdma_connection_disconnection_cb_t,
}

/// A port this ctx listens on (one socket per loopback family).
struct Listener {
    port: u16,
    socks: Vec<TcpListener>,
}

/// What a handshake waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Client: the TCP connect is in progress.
    TcpConnecting,
    /// Client: REQUEST sent, waiting for ACCEPT/REJECT.
    AwaitAnswer,
    /// Server: waiting for a REQUEST.
    AwaitRequest,
    /// Server: `request_cb` reported; waiting for the user's accept/reject.
    Requested,
    /// Server: ACCEPT sent, waiting for READY.
    AwaitReady,
}

/// One handshake in flight.
struct Shake {
    stream: TcpStream,
    stage: Stage,
    /// The connection (none while a server waits for a REQUEST).
    conn: *const doca_rdma_connection,
    /// None while the user decides (the client's own timeout covers that wait).
    deadline: Option<Instant>,
    inbuf: Vec<u8>,
    peer: SocketAddr,
    /// Server: the client's blob from its REQUEST.
    client_blob: Vec<u8>,
}

/// A callback to deliver (connections are kept until the rdma is destroyed, so the pointers
/// stay valid while an event waits).
#[derive(Clone, Copy, Debug)]
enum Event {
    Request(*const doca_rdma_connection),
    Established(*const doca_rdma_connection),
    Failure(*const doca_rdma_connection),
    Disconnect(*const doca_rdma_connection),
}

/// The connection-management state of one `doca_rdma`.
#[derive(Default)]
pub(crate) struct Cm {
    cbs: Cell<Callbacks>,
    listeners: RefCell<Vec<Listener>>,
    shakes: RefCell<Vec<Shake>>,
    events: RefCell<VecDeque<Event>>,
    /// A timerfd for the deadlines (created at first use, registered with the PE).
    timer: RefCell<Option<OwnedFd>>,
    /// The PE the sockets and the timer are registered with.
    pe: Cell<*const doca_pe>,
    /// When the timer is set to fire (None: disarmed), so that a progress with nothing new
    /// to time costs no system call.
    timer_due: Cell<Option<Instant>>,
    /// When progress calls `accept(2)` on the listeners.
    accept: RetryPace,
    /// `has_work`'s poll set, kept between calls: the PE asks at every arm, and a server
    /// with a listener would otherwise allocate it each time.
    poll_fds: Cell<Vec<libc::pollfd>>,
}

impl Cm {
    fn pe(&self) -> Option<&doca_pe> {
        // SAFETY: set while the ctx is RUNNING on that PE; the PE outlives its connected ctxs,
        // and `close_all` (ctx stop) unregisters everything before the ctx leaves the PE.
        unsafe { self.pe.get().as_ref() }
    }

    /// Registers `fd` with the PE (level: readiness is the work).
    fn watch(&self, fd: RawFd) -> Result<(), doca_error_t> {
        match self.pe() {
            Some(pe) => pe.register_fd(fd, FdMode::Level),
            None => Err(DOCA_ERROR_BAD_STATE),
        }
    }

    fn unwatch(&self, fd: RawFd) {
        if let Some(pe) = self.pe() {
            pe.unregister_fd(fd);
        }
    }

    /// First use on a RUNNING ctx: remember the PE and create the timer.
    fn ensure_ready(&self, pe: &doca_pe) -> Result<(), doca_error_t> {
        if self.timer.borrow().is_some() {
            return Ok(());
        }
        self.pe.set(pe);
        // SAFETY: timerfd_create with constant flags; no memory is passed.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(crate::shm::errno_to_doca(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
        }
        // SAFETY: a fresh descriptor nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Drain mode: the timer is only a wake-up; `has_work` checks the deadlines themselves.
        pe.register_fd(fd.as_raw_fd(), FdMode::Drain)?;
        *self.timer.borrow_mut() = Some(fd);
        Ok(())
    }

    /// Sets the timer to the earliest deadline (or the connect poll), or disarms it; no system
    /// call when that is what it is set to already (the usual case: every progress asks).
    fn rearm(&self) {
        // The clock is read only when there is a handshake to time (a progress with none
        // costs no clock read either).
        let mut now = None;
        let mut next: Option<Instant> = None;
        for s in self.shakes.borrow().iter() {
            let now = *now.get_or_insert_with(Instant::now);
            let due = if s.stage == Stage::TcpConnecting { Some(now + CONNECT_POLL) } else { s.deadline };
            if let Some(due) = due {
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        if next == self.timer_due.get() {
            return;
        }
        let Some(fd) = self.timer.borrow().as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        self.timer_due.set(next);
        // A zero it_value disarms; a due deadline still needs a (tiny) nonzero value.
        let d = next.zip(now).map(|(due, now)| due.saturating_duration_since(now).max(Duration::from_micros(1)));
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: d.map_or(0, |d| d.as_secs() as libc::time_t),
                tv_nsec: d.map_or(0, |d| d.subsec_nanos() as libc::c_long),
            },
        };
        // SAFETY: a valid itimerspec; the old value is not wanted (NULL allowed).
        unsafe { libc::timerfd_settime(fd, 0, &spec, ptr::null_mut()) };
    }

    /// Closes every listener and handshake, no callbacks (ctx stop).
    /// Nothing to accept, step, time or report: the state of a client once its connections
    /// are made, in which progress has nothing to do (and reads no clock).
    fn idle(&self) -> bool {
        self.listeners.borrow().is_empty()
            && self.shakes.borrow().is_empty()
            && self.events.borrow().is_empty()
            && self.timer_due.get().is_none()
    }

    pub(crate) fn close_all(&self) {
        let listeners: Vec<Listener> = self.listeners.borrow_mut().drain(..).collect();
        for l in &listeners {
            for s in &l.socks {
                self.unwatch(s.as_raw_fd());
            }
        }
        let shakes: Vec<Shake> = self.shakes.borrow_mut().drain(..).collect();
        for s in &shakes {
            self.unwatch(s.stream.as_raw_fd());
        }
        self.events.borrow_mut().clear();
        if let Some(t) = self.timer.borrow_mut().take() {
            self.unwatch(t.as_raw_fd());
        }
        self.timer_due.set(None);
        self.pe.set(ptr::null());
    }

    fn push(&self, e: Event) {
        self.events.borrow_mut().push_back(e);
        if let Some(pe) = self.pe() {
            pe.notify_work();
        }
    }

    /// Removes the handshake of `conn`, closing its socket.
    fn drop_shake_of(&self, conn: *const doca_rdma_connection) {
        let s = {
            let mut v = self.shakes.borrow_mut();
            v.iter().position(|s| ptr::eq(s.conn, conn)).map(|i| v.swap_remove(i))
        };
        if let Some(s) = s {
            self.unwatch(s.stream.as_raw_fd());
        }
    }
}

// ---- the engine side: called from the rdma progress and has-work hooks ----

/// A managed connection lost its peer after establishment (or while the server waited for
/// READY): break it and report it. The ctx stays usable.
pub(crate) fn lost(r: &doca_rdma, c: &doca_rdma_connection, code: doca_error_t) {
    r.break_conn(c, code);
    match c.cm.phase.get() {
        Phase::Established => {
            c.cm.phase.set(Phase::Disconnected);
            c.cm.release_addr();
            r.cm.push(Event::Disconnect(c));
        }
        // The client reports established once it sent READY, and its sends may have reached
        // us already: if it left right after, its READY is still to be read. Let the
        // handshake step decide (READY: established, then disconnected; EOF or the
        // deadline: failed) instead of failing a connection the client used.
        Phase::Accepted => c.cm.lost_early.set(Some(code)),
        Phase::Connecting | Phase::Requested => fail(r, c, code),
        _ => {}
    }
}

/// The handshake of `c` failed with `code`: close it, break the connection, report failure.
fn fail(r: &doca_rdma, c: &doca_rdma_connection, code: doca_error_t) {
    crate::sdk_log!(
        DEBUG,
        "rdma cm: connection {} failed: {}",
        c.num,
        DOCA_ERROR_NAMES.get(code.0 as usize).copied().unwrap_or("?")
    );
    r.cm.drop_shake_of(c);
    r.break_conn(c, code);
    c.cm.lost_early.set(None);
    c.cm.phase.set(Phase::Failed);
    c.cm.release_addr();
    r.cm.push(Event::Failure(c));
}

/// Writes a whole (small) message to a non-blocking socket whose buffer is empty.
fn send_msg(stream: &mut TcpStream, m: &Msg) -> Result<(), doca_error_t> {
    stream.write_all(&m.encode()).map_err(|_| DOCA_ERROR_CONNECTION_ABORTED)
}

/// Reads what is available; Err(()) at EOF or on a socket error.
fn fill(s: &mut Shake) -> Result<(), ()> {
    let mut buf = [0u8; 1024];
    loop {
        match s.stream.read(&mut buf) {
            Ok(0) => return Err(()),
            Ok(n) => {
                s.inbuf.extend_from_slice(&buf[..n]);
                if s.inbuf.len() > MAX_MESSAGE {
                    return Err(());
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return Err(()),
        }
    }
}

/// What to do with a handshake after looking at it.
enum Next {
    Keep,
    /// Drop silently (a server connection that never made a request).
    Drop,
    /// The connection failed with this code.
    Fail(doca_error_t),
    /// Done: established.
    Established,
}

/// One step of handshake `s` (taken out of the list, so user-visible state can change).
fn step(r: &doca_rdma, s: &mut Shake, now: Instant) -> Next {
    // SAFETY: connections of this rdma are boxed and live until it is destroyed. Updated when
    // a REQUEST makes the connection: the same step may then meet the end of the stream (a
    // client that sent its REQUEST and left), which must fail that connection, not drop it.
    let mut conn = unsafe { s.conn.as_ref() };
    if s.stage == Stage::TcpConnecting {
        match s.stream.take_error() {
            Ok(None) => {}
            _ => return Next::Fail(DOCA_ERROR_CONNECTION_ABORTED),
        }
        let mut p = libc::pollfd { fd: s.stream.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0 {
            return Next::Fail(DOCA_ERROR_CONNECTION_ABORTED);
        }
        if n > 0 && p.revents & libc::POLLOUT != 0 {
            let Some(c) = conn else { return Next::Drop };
            if let Err(e) = send_msg(&mut s.stream, &Msg::Request { blob: c.blob().to_vec() }) {
                return Next::Fail(e);
            }
            s.stage = Stage::AwaitAnswer;
        } else if s.deadline.is_some_and(|d| now >= d) {
            return Next::Fail(DOCA_ERROR_TIME_OUT);
        } else {
            return Next::Keep;
        }
    }
    let eof = fill(s).is_err();
    loop {
        let m = match Msg::take(&mut s.inbuf) {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(_) => {
                crate::sdk_log!(WARNING, "rdma cm: not a handshake message from {}: connection dropped", s.peer);
                return match conn {
                    Some(_) => Next::Fail(DOCA_ERROR_CONNECTION_ABORTED),
                    None => Next::Drop,
                };
            }
        };
        match (s.stage, m) {
            (Stage::AwaitRequest, Msg::Request { blob }) => {
                // Cheap validation first: a REQUEST must carry a connection blob.
                if super::conn::ConnBlob::decode(&blob).is_err() {
                    crate::sdk_log!(WARNING, "rdma cm: bad connection details from {}: dropped", s.peer);
                    return Next::Drop;
                }
                if r.live_count() >= usize::from(r.max_conns.get()) {
                    crate::sdk_log!(
                        WARNING,
                        "rdma cm: request from {} rejected: max_num_connections ({}) reached",
                        s.peer,
                        r.max_conns.get()
                    );
                    let _ = send_msg(&mut s.stream, &Msg::Reject);
                    return Next::Drop;
                }
                let c = match r.new_connection() {
                    Ok(c) => c,
                    Err(e) => {
                        crate::sdk_log!(ERROR, "rdma cm: cannot create a connection for {}: {:?}", s.peer, e);
                        let _ = send_msg(&mut s.stream, &Msg::Reject);
                        return Next::Drop;
                    }
                };
                c.cm.phase.set(Phase::Requested);
                *c.cm.owned_addr.borrow_mut() = Some(Box::new(doca_rdma_addr::of_peer(s.peer)));
                let a: *const doca_rdma_addr = c.cm.owned_addr.borrow().as_deref().map_or(ptr::null(), |a| a);
                c.cm.addr.set(a);
                s.conn = c;
                conn = Some(c);
                s.client_blob = blob;
                s.stage = Stage::Requested;
                s.deadline = None;
                r.cm.push(Event::Request(c));
            }
            (Stage::AwaitAnswer, Msg::Accept { blob, private }) => {
                let Some(c) = conn else { return Next::Drop };
                let Some(pe) = r.ctx().pe() else { return Next::Fail(DOCA_ERROR_BAD_STATE) };
                if let Err(e) = c.connect(&blob, pe) {
                    crate::sdk_log!(WARNING, "rdma cm: cannot use the server's connection details: {:?}", e);
                    return Next::Fail(DOCA_ERROR_CONNECTION_ABORTED);
                }
                *c.cm.private.borrow_mut() = private;
                if let Err(e) = send_msg(&mut s.stream, &Msg::Ready) {
                    return Next::Fail(e);
                }
                return Next::Established;
            }
            (Stage::AwaitAnswer, Msg::Reject) => return Next::Fail(DOCA_ERROR_CONNECTION_ABORTED),
            (Stage::AwaitReady, Msg::Ready) => return Next::Established,
            (stage, m) => {
                crate::sdk_log!(WARNING, "rdma cm: unexpected {:?} from {} while {:?}", m, s.peer, stage);
                return match conn {
                    Some(_) => Next::Fail(DOCA_ERROR_CONNECTION_ABORTED),
                    None => Next::Drop,
                };
            }
        }
    }
    if eof {
        return match (s.stage, conn) {
            (Stage::AwaitRequest, _) | (_, None) => Next::Drop,
            (Stage::AwaitAnswer, _) => Next::Fail(DOCA_ERROR_CONNECTION_ABORTED),
            _ => Next::Fail(DOCA_ERROR_CONNECTION_ABORTED),
        };
    }
    if s.deadline.is_some_and(|d| now >= d) {
        return match s.stage {
            Stage::AwaitRequest => Next::Drop,
            _ => Next::Fail(DOCA_ERROR_TIME_OUT),
        };
    }
    Next::Keep
}

/// Accepts pending TCP connections on every listener (paced: [`RetryPace`]).
fn accept_new(r: &doca_rdma, now: Instant) -> bool {
    if !r.cm.accept.due(now) || r.cm.listeners.borrow().is_empty() {
        return false;
    }
    let timeout = Duration::from_millis(u64::from(r.conn_request_timeout_ms.get()));
    let mut fresh = Vec::new();
    for l in r.cm.listeners.borrow().iter() {
        for sock in &l.socks {
            loop {
                match sock.accept() {
                    Ok((stream, peer)) => fresh.push((stream, peer)),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        }
    }
    let did = !fresh.is_empty();
    r.cm.accept.tried(now, did);
    for (stream, peer) in fresh {
        if stream.set_nonblocking(true).is_err() || r.cm.watch(stream.as_raw_fd()).is_err() {
            continue;
        }
        r.cm.shakes.borrow_mut().push(Shake {
            stream,
            stage: Stage::AwaitRequest,
            conn: ptr::null(),
            deadline: Some(Instant::now() + timeout),
            inbuf: Vec::new(),
            peer,
            client_blob: Vec::new(),
        });
    }
    did
}

/// Connection-management work of the progress hook: new requests, handshake steps,
/// deadlines, then the callbacks. Returns whether anything happened.
#[inline]
pub(crate) fn progress(r: &doca_rdma) -> bool {
    // Called by every progress of the ctx once connection management was used, so the
    // idle case (established connections, no listener) must cost no system call, and is
    // inlined into the caller.
    if !busy(r) {
        return false;
    }
    progress_busy(r)
}

/// Whether [`progress`] has anything to do: connection management was used and is not idle.
#[inline]
pub(crate) fn busy(r: &doca_rdma) -> bool {
    !r.cm.pe.get().is_null() && !r.cm.idle()
}

/// [`progress`] with something to accept, step, time or report.
#[inline(never)]
fn progress_busy(r: &doca_rdma) -> bool {
    let now = Instant::now();
    let mut did = accept_new(r, now);
    let mut i = 0;
    loop {
        // Take the handshake out so `step` may push new ones or look at the list.
        let mut s = {
            let mut v = r.cm.shakes.borrow_mut();
            if i >= v.len() {
                break;
            }
            v.swap_remove(i)
        };
        let before = (s.stage, s.inbuf.len());
        let next = step(r, &mut s, now);
        let conn = s.conn;
        match next {
            Next::Keep => {
                did |= before != (s.stage, s.inbuf.len());
                let mut v = r.cm.shakes.borrow_mut();
                v.push(s);
                let last = v.len() - 1;
                v.swap(i, last);
                i += 1;
            }
            Next::Drop => {
                r.cm.unwatch(s.stream.as_raw_fd());
                did = true;
            }
            Next::Fail(code) => {
                r.cm.unwatch(s.stream.as_raw_fd());
                drop(s);
                // SAFETY: a live connection of this rdma (see `step`).
                if let Some(c) = unsafe { conn.as_ref() } {
                    fail(r, c, code);
                }
                did = true;
            }
            Next::Established => {
                r.cm.unwatch(s.stream.as_raw_fd());
                drop(s);
                // SAFETY: as above.
                if let Some(c) = unsafe { conn.as_ref() } {
                    c.cm.phase.set(Phase::Established);
                    r.cm.push(Event::Established(c));
                    if c.cm.lost_early.take().is_some() {
                        // Its client left right after completing (see `lost`).
                        c.cm.phase.set(Phase::Disconnected);
                        c.cm.release_addr();
                        r.cm.push(Event::Disconnect(c));
                    }
                }
                did = true;
            }
        }
    }
    r.cm.rearm();
    did | flush_events(r)
}

/// How many connection-management events may wait in the PE's completion queue at once
/// (more wait in [`Cm::events`] until some are delivered).
pub(crate) const CM_EVENT_SLOTS: u32 = 32;

/// The internal task that carries one connection-management event to the user's callback
/// from `doca_pe_progress` (see the module docs). Never handed to the user.
#[repr(C)]
pub struct CmEventTask {
    base: doca_task,
    event: Cell<Option<Event>>,
}

static CM_EVENT_KIND: TaskKind = TaskKind::new::<CmEventTask>("rdma.cm_event", submit_cm_event, None, None);

// SAFETY: #[repr(C)] with the header first; KIND is built for this type.
unsafe impl TaskType for CmEventTask {
    const KIND: &'static TaskKind = &CM_EVENT_KIND;
    fn with_header(base: doca_task) -> Self {
        CmEventTask { base, event: Cell::new(None) }
    }
}

/// An event task completes as it is submitted: the PE delivers it in queue order.
unsafe fn submit_cm_event(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    task::complete(t, DOCA_SUCCESS);
    Ok(())
}

/// Configures the event tasks (from the rdma's start hook, while the ctx is still IDLE).
pub(crate) fn configure_events(r: &doca_rdma) -> Result<(), doca_error_t> {
    task::configure::<CmEventTask>(&r.ctx, Some(deliver_event), Some(deliver_event), CM_EVENT_SLOTS)
}

/// Moves queued events into event tasks while the pool has room.
fn flush_events(r: &doca_rdma) -> bool {
    let mut did = false;
    loop {
        let Some(e) = r.cm.events.borrow().front().copied() else { return did };
        let Ok(t) = task::alloc::<CmEventTask>(&r.ctx, doca_data::from_u64(0)) else { return did };
        r.cm.events.borrow_mut().pop_front();
        // SAFETY: a freshly allocated slot of this ctx's pool.
        let t = unsafe { t.as_ref() };
        t.event.set(Some(e));
        if task::submit_internal(task::header(t)).is_err() {
            // Not RUNNING any more: a stop drops the events that were not delivered.
            // SAFETY: our own allocated task, never submitted.
            unsafe { task::doca_task_free(task::header(t).raw()) };
            return did;
        }
        did = true;
    }
}

/// Delivers one event task to the user's callback (from `doca_pe_progress`, and with an
/// error status when a stop flushes it: then no callback runs, as a stop reports nothing).
unsafe extern "C" fn deliver_event(task: *mut CmEventTask, _ud: doca_data, _cud: doca_data) {
    crate::ffi::guard((), || {
        // SAFETY: the framework passes a live event task back to us (its own callback).
        let t = unsafe { &*task };
        let ev = t.event.take();
        // SAFETY: event tasks are allocated only from a `doca_rdma`'s ctx.
        let r = unsafe { super::rdma_of(task::header(t).ctx()) };
        // The task goes back to the pool before the callback, which may stop or destroy the
        // ctx; nothing below touches `r` after the callback.
        // SAFETY: our own task, delivered, not used afterwards.
        unsafe { task::doca_task_free(task::header(t).raw()) };
        if let Some(e) = ev {
            if r.ctx.state() == DOCA_CTX_STATE_RUNNING {
                deliver(r, e);
            }
        }
    })
}

/// Calls the user's callback for `e`, holding no borrow while user code runs. Nothing uses
/// `r` after the callback (it may have destroyed it).
fn deliver(r: &doca_rdma, e: Event) {
    let cbs = r.cm.cbs.get();
    let ctx_ud = r.ctx().user_data();
    let (c, f) = match e {
        Event::Request(c) => {
            match cbs.request {
                // SAFETY: a user callback with a live connection of this rdma.
                Some(f) => unsafe { f(c as *mut _, ctx_ud) },
                None => {
                    // No request callback (a pure client): nobody can accept, so refuse.
                    crate::sdk_log!(WARNING, "rdma cm: request refused: no connection request callback");
                    // SAFETY: a live connection of this rdma.
                    let _ = reject(r, unsafe { &*c });
                }
            }
            return;
        }
        Event::Established(c) => (c, cbs.established),
        Event::Failure(c) => (c, cbs.failure),
        Event::Disconnect(c) => (c, cbs.disconnect),
    };
    // SAFETY: a live connection of this rdma.
    let ud = doca_data::from_u64(unsafe { &*c }.cm.user_data.get());
    if let Some(f) = f {
        // SAFETY: as above.
        unsafe { f(c as *mut _, ud, ctx_ud) };
    }
}

/// Whether connection management has work for progress now (asked when the PE is armed).
pub(crate) fn has_work(r: &doca_rdma) -> bool {
    if r.cm.pe.get().is_null() {
        return false;
    }
    if !r.cm.events.borrow().is_empty() {
        return true;
    }
    let now = Instant::now();
    let mut fds = r.cm.poll_fds.take();
    fds.clear();
    let work = poll_ready(r, now, &mut fds);
    r.cm.poll_fds.set(fds);
    work
}

/// [`has_work`]'s check of the sockets and deadlines, with `fds` as the poll set.
fn poll_ready(r: &doca_rdma, now: Instant, fds: &mut Vec<libc::pollfd>) -> bool {
    for l in r.cm.listeners.borrow().iter() {
        for s in &l.socks {
            fds.push(libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
    }
    let listening = fds.len();
    for s in r.cm.shakes.borrow().iter() {
        if s.stage == Stage::TcpConnecting || s.deadline.is_some_and(|d| now >= d) {
            return true;
        }
        if s.stage != Stage::Requested {
            fds.push(libc::pollfd { fd: s.stream.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
    }
    if fds.is_empty() {
        return false;
    }
    // SAFETY: `fds` is a valid array for the call; zero timeout.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
    if n <= 0 {
        return false;
    }
    // Only a readable listener has a request for the next progress: an error on one is
    // nothing accept(2) would take, and counting it would keep an event-mode PE spinning.
    // A handshake socket's error or hang-up is work (the next progress reads the end).
    let request = fds[..listening].iter().any(|f| f.revents & libc::POLLIN != 0);
    if request {
        r.cm.accept.readable(); // a request is waiting: the next progress accepts it
    }
    request || fds[listening..].iter().any(|f| f.revents != 0)
}

/// Whether the request `c` may still be answered (accepted or rejected).
///
/// A request whose handshake failed before the answer (the client left, or the request timed
/// out) is a CM failure, which DOCA reports as CONNECTION_ABORTED: a server that answers from
/// a task of its own rather than inside the request callback meets this race in normal
/// operation and must be able to tell it from a mistake. Answering twice, or a connection
/// that was never a request, is BAD_STATE.
fn answerable(c: &doca_rdma_connection, what: &str) -> Result<(), doca_error_t> {
    match c.cm.phase.get() {
        Phase::Requested => Ok(()),
        Phase::Failed => {
            crate::sdk_log!(
                DEBUG,
                "rdma cm: {what} of connection {}: its request ended before the answer (the client left or it timed out)",
                c.num
            );
            Err(DOCA_ERROR_CONNECTION_ABORTED)
        }
        _ => Err(DOCA_ERROR_BAD_STATE),
    }
}

/// Rejects a requested connection (the user's `connection_reject`, or no request callback).
fn reject(r: &doca_rdma, c: &doca_rdma_connection) -> Result<(), doca_error_t> {
    answerable(c, "reject")?;
    let s = {
        let mut v = r.cm.shakes.borrow_mut();
        v.iter().position(|s| ptr::eq(s.conn, c)).map(|i| v.swap_remove(i))
    };
    if let Some(mut s) = s {
        let _ = send_msg(&mut s.stream, &Msg::Reject);
        r.cm.unwatch(s.stream.as_raw_fd());
    }
    r.break_conn(c, DOCA_ERROR_NOT_CONNECTED);
    c.cm.phase.set(Phase::Rejected);
    Ok(())
}

// ---- entry points ----

/// The rdma of a connection, RUNNING and not in the error state (BAD_STATE otherwise).
///
/// # Safety
/// As [`conn_ref`].
unsafe fn running_conn<'a>(
    p: *const doca_rdma_connection,
) -> Result<(&'a doca_rdma, &'a doca_rdma_connection), doca_error_t> {
    // SAFETY: forwarded contract.
    let c = unsafe { conn_ref(p) }?;
    // SAFETY: a connection's rdma lives as long as the connection.
    let r = unsafe { rdma_ref(c.rdma) }?;
    if r.ctx().state() != DOCA_CTX_STATE_RUNNING || c.cycle != r.cycle.get() || r.error.get().is_some() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    Ok((r, c))
}

/// A RUNNING rdma ready for connection management.
///
/// # Safety
/// As [`rdma_ref`].
unsafe fn running<'a>(rdma: *const doca_rdma) -> Result<&'a doca_rdma, doca_error_t> {
    // SAFETY: forwarded contract.
    let r = unsafe { rdma_ref(rdma) }?;
    if r.ctx().state() != DOCA_CTX_STATE_RUNNING || r.error.get().is_some() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    let pe = r.ctx().pe().ok_or(DOCA_ERROR_BAD_STATE)?;
    r.cm.ensure_ready(pe)?;
    Ok(r)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_connection_state_callbacks(
    rdma: *mut doca_rdma,
    doca_rdma_connect_request_cb: doca_rdma_connection_request_cb_t,
    doca_rdma_connect_established_cb: doca_rdma_connection_established_cb_t,
    doca_rdma_connect_failure_cb: doca_rdma_connection_failure_cb_t,
    doca_rdma_disconnect_cb: doca_rdma_connection_disconnection_cb_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { rdma_ref(rdma) }?;
        if r.ctx().state() != DOCA_CTX_STATE_IDLE {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        // The request callback may be NULL (a pure client); the others are needed to learn
        // how a connection ends.
        if doca_rdma_connect_established_cb.is_none()
            || doca_rdma_connect_failure_cb.is_none()
            || doca_rdma_disconnect_cb.is_none()
        {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        r.cm.cbs.set(Callbacks {
            request: doca_rdma_connect_request_cb,
            established: doca_rdma_connect_established_cb,
            failure: doca_rdma_connect_failure_cb,
            disconnect: doca_rdma_disconnect_cb,
        });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_start_listen_to_port(rdma: *mut doca_rdma, port: u16) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { running(rdma) }?;
        if port == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if r.cm.listeners.borrow().iter().any(|l| l.port == port) {
            return Err(DOCA_ERROR_ALREADY_EXIST);
        }
        let v4 = TcpListener::bind(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)).map_err(|e| {
            crate::sdk_fail!(DOCA_ERROR_CONNECTION_ABORTED, "doca_rdma_start_listen_to_port: port {port}: {e}")
        })?;
        let mut socks = vec![v4];
        match TcpListener::bind(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), port)) {
            Ok(s) => socks.push(s),
            Err(e) if e.kind() == ErrorKind::AddrInUse => {
                return Err(crate::sdk_fail!(
                    DOCA_ERROR_CONNECTION_ABORTED,
                    "doca_rdma_start_listen_to_port: port {port} on ::1: {e}"
                ))
            }
            Err(_) => {} // no IPv6 on this host: IPv4 only
        }
        for (i, s) in socks.iter().enumerate() {
            let ok = s.set_nonblocking(true).is_ok() && r.cm.watch(s.as_raw_fd()).is_ok();
            if !ok {
                for s in &socks[..i] {
                    r.cm.unwatch(s.as_raw_fd());
                }
                return Err(DOCA_ERROR_OPERATING_SYSTEM);
            }
        }
        r.cm.listeners.borrow_mut().push(Listener { port, socks });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_stop_listen_to_port(rdma: *mut doca_rdma, port: u16) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { rdma_ref(rdma) }?;
        let l = {
            let mut v = r.cm.listeners.borrow_mut();
            let i = v.iter().position(|l| l.port == port).ok_or(DOCA_ERROR_NOT_FOUND)?;
            v.swap_remove(i)
        };
        for s in &l.socks {
            r.cm.unwatch(s.as_raw_fd());
        }
        Ok(())
    })
}

/// Starts a non-blocking TCP connect to `sa`.
fn tcp_connect(sa: SocketAddr) -> Result<TcpStream, doca_error_t> {
    let fam = if sa.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(DOCA_ERROR_OPERATING_SYSTEM);
    }
    // SAFETY: a fresh descriptor nothing else owns.
    let stream = unsafe { TcpStream::from_raw_fd(fd) };
    // SAFETY: sockaddr_storage is plain data; all-zero is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match sa {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `ss` holds a valid socket address of `len` bytes.
    let rc = unsafe { libc::connect(fd, (&ss as *const libc::sockaddr_storage).cast(), len as libc::socklen_t) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            // Refused at once: report it through failure_cb like a late refusal. Keep the
            // socket: its pending error says so at the first progress.
            if e.raw_os_error() != Some(libc::ECONNREFUSED) {
                return Err(DOCA_ERROR_CONNECTION_ABORTED);
            }
        }
    }
    Ok(stream)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connect_to_addr(
    rdma: *mut doca_rdma,
    addr: *mut doca_rdma_addr,
    connection_user_data: doca_data,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let r = unsafe { running(rdma) }?;
        // SAFETY: forwarded contract.
        let a = unsafe { addr_ref(addr) }?;
        if a.port == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if !is_local(a.ip) {
            return Err(crate::sdk_fail!(
                DOCA_ERROR_NOT_SUPPORTED,
                "doca_rdma_connect_to_addr: {} is not an address of this host; the soft provider's \
                 data path is shared memory, so both peers must run on the same host",
                a.socket_addr()
            ));
        }
        if r.live_count() >= usize::from(r.max_conns.get()) {
            return Err(DOCA_ERROR_FULL);
        }
        let stream = tcp_connect(a.handshake_addr())?;
        r.cm.watch(stream.as_raw_fd())?;
        let c = match r.new_connection() {
            Ok(c) => c,
            Err(e) => {
                r.cm.unwatch(stream.as_raw_fd());
                return Err(e);
            }
        };
        c.cm.phase.set(Phase::Connecting);
        c.cm.user_data.set(connection_user_data.as_u64());
        c.cm.addr.set(a);
        a.in_use.set(a.in_use.get() + 1);
        let timeout = Duration::from_millis(u64::from(r.conn_request_timeout_ms.get()));
        r.cm.shakes.borrow_mut().push(Shake {
            stream,
            stage: Stage::TcpConnecting,
            conn: c,
            deadline: Some(Instant::now() + timeout),
            inbuf: Vec::new(),
            peer: a.socket_addr(),
            client_blob: Vec::new(),
        });
        r.cm.rearm();
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_accept(
    rdma_connection: *mut doca_rdma_connection,
    private_data: *mut c_void,
    private_data_len: u8,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let (r, c) = unsafe { running_conn(rdma_connection) }?;
        if private_data.is_null() && private_data_len != 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        answerable(c, "accept")?;
        let private = if private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: non-NULL, and the caller provides that many readable bytes.
            unsafe { core::slice::from_raw_parts(private_data.cast::<u8>(), usize::from(private_data_len)) }.to_vec()
        };
        let mut shakes = r.cm.shakes.borrow_mut();
        let s = shakes.iter_mut().find(|s| ptr::eq(s.conn, c)).ok_or(DOCA_ERROR_BAD_STATE)?;
        let pe = r.ctx().pe().ok_or(DOCA_ERROR_BAD_STATE)?;
        let step = c
            .connect(&s.client_blob, pe)
            .and_then(|()| send_msg(&mut s.stream, &Msg::Accept { blob: c.blob().to_vec(), private: private.clone() }));
        match step {
            Ok(()) => {
                let timeout = Duration::from_millis(u64::from(r.conn_request_timeout_ms.get()));
                s.stage = Stage::AwaitReady;
                s.deadline = Some(Instant::now() + timeout);
                drop(shakes);
                c.cm.phase.set(Phase::Accepted);
                r.cm.rearm();
                Ok(())
            }
            Err(e) => {
                drop(shakes);
                crate::sdk_log!(WARNING, "rdma cm: accept of connection {} failed: {:?}", c.num, e);
                fail(r, c, DOCA_ERROR_CONNECTION_ABORTED);
                Err(DOCA_ERROR_CONNECTION_ABORTED)
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_reject(rdma_connection: *mut doca_rdma_connection) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let (r, c) = unsafe { running_conn(rdma_connection) }?;
        reject(r, c)
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_disconnect(rdma_connection: *mut doca_rdma_connection) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { conn_ref(rdma_connection) }?;
        // SAFETY: a connection's rdma lives as long as the connection.
        let r = unsafe { rdma_ref(c.rdma) }?;
        if r.ctx().state() == DOCA_CTX_STATE_STOPPING && c.cycle == r.cycle.get() {
            // The stop already shut every connection (`rdma_stop`); NVIDIA's multi-connection
            // samples disconnect theirs on the STOPPING report.
            return Ok(());
        }
        if r.ctx().state() != DOCA_CTX_STATE_RUNNING || c.cycle != r.cycle.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        match c.cm.phase.get() {
            // Already over (the peer disconnected first, as in the samples' answer to
            // disconnect_cb): nothing left to do.
            Phase::Disconnected | Phase::Failed | Phase::Rejected => Ok(()),
            Phase::Established | Phase::Blob => {
                if c.state() == ConnState::Exported {
                    return Err(DOCA_ERROR_NOT_CONNECTED);
                }
                r.break_conn(c, DOCA_ERROR_NOT_CONNECTED);
                if c.cm.managed() {
                    c.cm.phase.set(Phase::Disconnected);
                    c.cm.release_addr();
                }
                Ok(())
            }
            Phase::Connecting | Phase::Requested | Phase::Accepted => {
                // Abandon the handshake; the peer sees the socket close and fails it.
                r.cm.drop_shake_of(c);
                r.break_conn(c, DOCA_ERROR_NOT_CONNECTED);
                c.cm.phase.set(Phase::Failed);
                c.cm.release_addr();
                Ok(())
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_set_user_data(
    rdma_connection: *mut doca_rdma_connection,
    connection_user_data: doca_data,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { conn_ref(rdma_connection) }?;
        c.cm.user_data.set(connection_user_data.as_u64());
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_get_user_data(
    rdma_connection: *const doca_rdma_connection,
    connection_user_data: *mut doca_data,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { conn_ref(rdma_connection) }?;
        // SAFETY: checked non-NULL by `out`; writable by the caller's contract.
        unsafe { out(connection_user_data, doca_data::from_u64(c.cm.user_data.get())) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_get_id(
    rdma_connection: *const doca_rdma_connection,
    connection_id: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { conn_ref(rdma_connection) }?;
        // SAFETY: as above.
        unsafe { out(connection_id, c.num) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connection_get_addr(
    rdma_connection: *const doca_rdma_connection,
    addr: *mut *mut doca_rdma_addr,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { conn_ref(rdma_connection) }?;
        let a = c.cm.addr.get();
        if a.is_null() {
            // Not made by address (export/connect), or its address was let go.
            return Err(DOCA_ERROR_NOT_FOUND);
        }
        // SAFETY: as above.
        unsafe { out(addr, a as *mut doca_rdma_addr) }
    })
}

/// `doca_soft_rdma_connection_get_private_data` (doca_soft.h): the private data the server
/// passed to `doca_rdma_connection_accept`, on the client's connection after its
/// established callback (DOCA hands it to rdma_cm applications in the established event;
/// its C API has no getter).
#[no_mangle]
pub unsafe extern "C" fn doca_soft_rdma_connection_get_private_data(
    rdma_connection: *const doca_rdma_connection,
    data: *mut u8,
    len: *mut u8,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let c = unsafe { conn_ref(rdma_connection) }?;
        if data.is_null() || len.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let p = c.cm.private.borrow();
        // SAFETY: `data` has room for 255 bytes (the documented contract) and `len` is
        // writable; private data is at most 255 bytes (checked when it was received).
        unsafe {
            ptr::copy_nonoverlapping(p.as_ptr(), data, p.len().min(255));
            len.write(p.len().min(255) as u8);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests;
