//! The server and client objects, their connections, the send task and the internal event
//! task; every `doca_comch_*` entry point is in `chan/entry.rs` (re-exported here). See the
//! module docs of `comch` for the model.

use core::cell::{Cell, RefCell};
use core::ffi::{c_char, c_void};
use core::ptr;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::fastq::FastQueue;
use super::sent::{SentCount, READ_EVERY};
use super::wire::{self, Control};
use super::*;
use crate::ctx::{doca_ctx, mark_start_failed, mark_started, CtxOps, StartMode};
use crate::dev::{dev_ref, devinfo_ref, doca_dev, doca_devinfo, DevRef};
use crate::doorbell::DoorbellAddr;
use crate::ffi::{guard, guard_err, obj, out};
use crate::pe::FdMode;
use crate::retry_pace::RetryPace;
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::thread_mark::ThreadMark;
use crate::types::*;

const SERVER_MAGIC: u32 = 0x434d_5353; // "CMSS"
const CLIENT_MAGIC: u32 = 0x434d_5343; // "CMSC"
const CONN_MAGIC: u32 = 0x434d_434e; // "CMCN"

/// A server keeps the representor it was given (for `get_device_rep`) and never dereferences
/// it: it must be NULL (the soft provider serves every local client then) or a representor
/// opened with `doca_dev_rep_open` (`rep.rs`, DPU role); other pointers are INVALID_VALUE.
pub use crate::rep::doca_dev_rep;

/// `struct doca_comch_event_msg_recv`: the event argument of receive callbacks. DOCA passes
/// an event object; nothing can be done with it through the API, so ours is a dummy address.
#[repr(C)]
pub struct doca_comch_event_msg_recv {
    _private: u8,
}

/// `struct doca_comch_event_connection_status_changed`: as [`doca_comch_event_msg_recv`].
#[repr(C)]
pub struct doca_comch_event_connection_status_changed {
    _private: u8,
}

/// `struct doca_comch_event_consumer`: the event argument of consumer callbacks. DOCA passes
/// an opaque object the callback does not use; so does this provider.
#[repr(C)]
pub struct doca_comch_event_consumer {
    _private: u8,
}

/// A consumer of the peer, as its CONSUMER_NEW record described it (`fastq.rs`): its receive
/// queue, and an mmap imported from the export of its buffers' mmap, through which a
/// producer of ours writes what it sends.
///
/// Shared (`Arc`) between the connection's table and the producers that send to it, which
/// may run on other threads: a producer keeps the one it sends to, so the queue's mapping and
/// the import stay valid under a send even when the peer withdraws the consumer meanwhile
/// (the send then fails at the claim: the consumer closed its queue before withdrawing).
pub(crate) struct RemoteConsumer {
    pub(crate) queue: FastQueue,
    pub(crate) mmap: *mut crate::mmap::doca_mmap,
    /// Set when the table lets go of it (the peer withdrew it, or the connection closed): a
    /// producer that kept it looks it up again, and finds it gone.
    withdrawn: AtomicBool,
}

// Both are shared by the threads of producers: the queue is shared memory used through
// atomics only, and an mmap is thread-safe (its state is behind a mutex and atomics, and its
// destroy, run by whichever thread drops the last reference, takes the registry's lock and
// drops a device reference, an atomic count).
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<FastQueue>();
    shared::<crate::mmap::doca_mmap>();
};

// SAFETY: the only field that is not Send on its own is the raw pointer to the imported
// mmap, owned by this value (destroyed once, in Drop) and of a type that is Send + Sync
// (asserted above); so the value may move to another thread and be dropped there.
unsafe impl Send for RemoteConsumer {}
// SAFETY: through `&RemoteConsumer` the queue is used by its atomics, the mmap only read
// (`remote_region_ref`, a thread-safe accessor of a Sync type), and `withdrawn` is atomic.
unsafe impl Sync for RemoteConsumer {}

impl RemoteConsumer {
    /// Whether the connection's table let go of it (see [`RemoteConsumer::withdrawn`]'s field).
    pub(crate) fn withdrawn(&self) -> bool {
        self.withdrawn.load(Ordering::Relaxed)
    }

    fn withdraw(&self) {
        self.withdrawn.store(true, Ordering::Relaxed);
    }
}

impl Drop for RemoteConsumer {
    fn drop(&mut self) {
        // SAFETY: the mmap was created from the consumer's export for this record and no
        // buffer is ever taken over it (producers write through its region directly); this
        // is the last reference to the record, so nothing uses the mmap any more.
        unsafe { crate::mmap::doca_mmap_destroy(self.mmap) };
    }
}

/// Locks a mutex of a connection, whatever a panic elsewhere left it (`guard` caught the panic;
/// the tables stay consistent, each change being one insert or remove).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Server,
    Client,
}

/// Where a connection is.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum ConnState {
    /// Socket open, HELLO/WELCOME not exchanged yet.
    Handshaking,
    Connected,
    /// Closed by the peer, by us, or by a stop: nothing works any more.
    Closed,
}

/// A connection's [`ConnState`]: changed by the thread that progresses its endpoint, read also
/// by fast-path objects on other threads (their checks), hence atomic.
struct StateCell(AtomicU8);

impl StateCell {
    fn new(s: ConnState) -> StateCell {
        StateCell(AtomicU8::new(s as u8))
    }

    // Inlined to the load: a `match` back to the enum cost `op_cost fast` 60 instructions per
    // message (the state is read for every connection at every progress).
    #[inline(always)]
    fn get(&self) -> ConnState {
        let v = self.0.load(Ordering::Acquire);
        // SAFETY: `ConnState` is `repr(u8)` and the cell only ever holds what `new` and `set`
        // stored, a `ConnState` cast to its discriminant.
        unsafe { core::mem::transmute::<u8, ConnState>(v) }
    }

    fn set(&self, s: ConnState) {
        self.0.store(s as u8, Ordering::Release);
    }
}

/// A flag set by the driving thread and read by others (see [`StateCell`]).
struct FlagCell(AtomicBool);

impl FlagCell {
    fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, v: bool) {
        self.0.store(v, Ordering::Release);
    }
}

/// [`FastHolds`]: the endpoint was destroyed while something of ours held the connection.
const ORPHAN: u32 = 1 << 31;
/// [`FastHolds`]: when it became an orphan, events or send tasks (the driver's `refs`) still
/// held it; cleared by the last of them.
const DRIVER_HELD: u32 = 1 << 30;
/// [`FastHolds`]: the bits that count consumers and producers.
const HOLD_COUNT: u32 = DRIVER_HELD - 1;

/// The holds of consumers and producers on a connection, which may be taken and given back on
/// any thread, and whether the connection is an orphan, in one word. The driver's own holds
/// (events, send tasks: `refs`) stay a plain count, so the message path pays no atomic
/// read-modify-write; the driver folds them into this word once, as [`DRIVER_HELD`], when it
/// makes the connection an orphan.
///
/// Who frees an orphan: the one whose read-modify-write of this word leaves it with
/// [`ORPHAN`] and nothing else (no count, no [`DRIVER_HELD`]). The word's modifications are
/// totally ordered and nothing is added to it after [`ORPHAN`] (an orphan refuses new holds,
/// and its endpoint is gone, so no event or send task is made for it), so exactly one of
/// the endpoint's destroy, the driver's last release and a consumer's or producer's last
/// release sees that transition: the connection is freed exactly once.
struct FastHolds(AtomicU32);

impl FastHolds {
    /// How many consumers and producers hold it; Acquire: a zero read here means their
    /// last uses of the connection happened before (their release is AcqRel).
    fn count(&self) -> u32 {
        self.0.load(Ordering::Acquire) & HOLD_COUNT
    }

    fn is_orphan(&self) -> bool {
        self.0.load(Ordering::Acquire) & ORPHAN != 0
    }
}

/// `struct doca_comch_connection`: one client's connection, on either side.
#[repr(C)]
pub struct doca_comch_connection {
    magic: u32,
    owner: *const Endpoint,
    fd: RefCell<Option<OwnedFd>>,
    state: StateCell,
    user_data: Cell<doca_data>,
    /// The smaller of the two sides' message limits (valid once connected).
    max_msg: Cell<u32>,
    /// Sends waiting for room in the socket, in submission order: (task, record); the task is
    /// NULL for a fast-path record (a consumer's announcement).
    outq: RefCell<VecDeque<(*const doca_task, Vec<u8>)>>,
    /// Fast path: the peer's consumers announced on this connection, by id. Behind a mutex:
    /// producers of other threads look theirs up; each producer keeps the one it sends to
    /// (`producer.rs`), so a send locks this only when it changes target.
    remote: Mutex<BTreeMap<u32, Arc<RemoteConsumer>>>,
    /// Fast path: the last id given to a consumer or producer of ours on this connection.
    fast_ids: AtomicU32,
    /// Fast-path records (a consumer's announcement or withdrawal) made on threads other than
    /// the one that progresses the endpoint, which alone touches the socket and `outq`: that
    /// thread moves them to `outq` at its next progress, in the order they came.
    outbox: Mutex<VecDeque<Vec<u8>>>,
    /// `outbox` has records (changed under its lock): read without the lock by progress and
    /// by the driver's sends, which move them first so that they keep their order.
    outbox_due: AtomicBool,
    /// A consumer or producer gave its hold back (on any thread): the connection may have
    /// become freeable, which only its endpoint's thread may act on ([`Endpoint::sweep`]).
    fast_released: AtomicBool,
    /// The endpoint's PE's doorbell (its PE is fixed while the endpoint is started, which is
    /// when connections exist): rung when a record goes to `outbox`, so a sleeping PE wakes.
    wake: DoorbellAddr,
    /// The endpoint's thread mark (see `thread_mark`): whether a fast-path record may be
    /// sent directly. Shared, so that it is read without the endpoint, which may be gone.
    driver: Arc<ThreadMark>,
    /// The endpoint's device, for consumers made on it from any thread without reading the
    /// endpoint (which a thread other than its own may not assume alive).
    dev: DevRef,
    counters: [Cell<u64>; 4],
    snapshot: [Cell<u64>; 4],
    /// The start cycle of the ctx this connection belongs to.
    cycle: u64,
    /// A send found the peer gone: sends fail from now on, but the records the peer sent
    /// before it went are still read (they are its completed sends), up to the end of file.
    peer_gone: FlagCell,
    /// Things of the endpoint's thread that still hold this connection's address: allocated
    /// send tasks and events not yet delivered (or dropped). It is freed only when this and
    /// the fast-path holds ([`FastHolds`]) are zero.
    refs: Cell<u32>,
    /// Consumers and producers holding it, and whether it is an orphan (see [`FastHolds`]).
    holds: FastHolds,
    /// The user can no longer name this connection (see [`Endpoint::sweep`]).
    released: Cell<bool>,
    /// Its endpoint was destroyed while something of ours still held it (see `destroy`):
    /// the last reference frees it ([`release_ref`], [`release_fast`]). The driver's copy of
    /// the [`ORPHAN`] bit, for its own releases.
    orphan: Cell<bool>,
    /// The records this side sent once connected, for the peer to read (`sent.rs`); None
    /// when it could not be created (the peer then reads its socket at every progress).
    sent: Option<SentCount>,
    /// The peer's count, mapped at the handshake; None: read the socket at every progress.
    peer_sent: RefCell<Option<SentCount>>,
    /// Records read from the socket once connected: while the peer's count is ahead, one
    /// may be waiting.
    received: Cell<u64>,
    /// The peer is gone (a send failed): read the socket at every progress until its end of
    /// file, whatever its count says.
    read_always: Cell<bool>,
}

impl doca_comch_connection {
    fn new(ep: &Endpoint, fd: OwnedFd, wake: DoorbellAddr, sent: Option<SentCount>) -> Box<doca_comch_connection> {
        Box::new(doca_comch_connection {
            magic: CONN_MAGIC,
            owner: ep,
            fd: RefCell::new(Some(fd)),
            state: StateCell::new(ConnState::Handshaking),
            user_data: Cell::new(doca_data::from_u64(0)),
            max_msg: Cell::new(0),
            outq: RefCell::new(VecDeque::new()),
            remote: Mutex::new(BTreeMap::new()),
            fast_ids: AtomicU32::new(0),
            outbox: Mutex::new(VecDeque::new()),
            outbox_due: AtomicBool::new(false),
            fast_released: AtomicBool::new(false),
            wake,
            driver: Arc::clone(&ep.driver),
            dev: ep.dev.clone(),
            counters: Default::default(),
            snapshot: Default::default(),
            cycle: ep.cycle.get(),
            peer_gone: FlagCell(AtomicBool::new(false)),
            refs: Cell::new(0),
            holds: FastHolds(AtomicU32::new(0)),
            released: Cell::new(false),
            orphan: Cell::new(false),
            sent,
            peer_sent: RefCell::new(None),
            received: Cell::new(0),
            read_always: Cell::new(false),
        })
    }

    /// One record more went to the peer, or its end of file (counted once connected: see
    /// `sent.rs`).
    fn sent_one(&self) {
        if let Some(s) = &self.sent {
            s.add(1);
        }
    }

    /// Sends a record of a connected connection, counted (`sent.rs`): the count goes up
    /// before the record is handed to the kernel, so that the peer looks while the record
    /// is on its way instead of after this call returns (the system call's return is
    /// otherwise on the message's latency), and down again if the kernel did not take it.
    fn send_counted(&self, fd: RawFd, parts: &[&[u8]]) -> Result<bool, doca_error_t> {
        let Some(count) = &self.sent else { return send_rec(fd, parts) };
        count.add(1);
        let r = send_rec(fd, parts);
        if !matches!(r, Ok(true)) {
            count.add(-1);
        }
        r
    }

    /// Maps the peer's count named by its handshake (none, or one that cannot be mapped:
    /// its socket is then read at every progress).
    fn open_peer_count(&self, at: wire::CountAt) {
        let count = if at.pid == 0 { None } else { SentCount::open(at.pid, at.fd, at.len).ok() };
        *self.peer_sent.borrow_mut() = count;
    }

    fn hold(&self) {
        self.refs.set(self.refs.get() + 1);
    }
}

impl Drop for doca_comch_connection {
    fn drop(&mut self) {
        // As in `close`: the socket first, then the count, so that the peer reads the end
        // of file at once.
        if self.fd.get_mut().take().is_some() {
            self.sent_one();
        }
    }
}

/// Where a side counts its records (`sent.rs`), for its handshake record: nowhere (all zero)
/// without a count.
fn count_at(sent: Option<&SentCount>) -> wire::CountAt {
    sent.map_or_else(wire::CountAt::default, |s| {
        let (pid, fd, len) = s.location();
        wire::CountAt { pid, fd, len }
    })
}

/// Drops one reference of the endpoint's thread on a connection (an event or a send task let
/// go of it); the last reference on an orphan (its endpoint destroyed under it) frees it,
/// unless a consumer or producer still holds it (see [`FastHolds`]).
///
/// # Safety
/// `p` is a live connection the caller held a reference on, on the thread that progresses
/// (or progressed) its endpoint; it is not used afterwards.
unsafe fn release_ref(p: *const doca_comch_connection) {
    let free = {
        // SAFETY: the caller's reference keeps it alive until here.
        let c = unsafe { &*p };
        let n = c.refs.get().saturating_sub(1);
        c.refs.set(n);
        if n != 0 {
            false
        } else if !c.orphan.get() {
            // SAFETY: not an orphan, so its endpoint is alive (only this thread destroys it).
            unsafe { &*c.owner }.sweep_due.set(true);
            false
        } else {
            // The driver's part of the orphan's holds goes; whoever leaves none frees it.
            c.holds.0.fetch_and(!DRIVER_HELD, Ordering::AcqRel) & HOLD_COUNT == 0
        }
    };
    if free {
        // SAFETY: an orphan was given up by its endpoint with Box::into_raw (`destroy`) and
        // this read-modify-write left it with no hold at all: nothing else names it, and no
        // other thread frees it (see `FastHolds`), so it is freed once.
        drop(unsafe { Box::from_raw(p.cast_mut()) });
    }
}

impl doca_comch_connection {
    /// Whether [`Endpoint::sweep`] may free it: closed, out of the user's hands, and
    /// referenced by nothing of ours.
    fn freeable(&self) -> bool {
        self.state.get() == ConnState::Closed && self.released.get() && self.refs.get() == 0 && self.holds.count() == 0
    }

    /// Moves the records other threads left in `outbox` to the end of `outq`, in their order.
    /// On the endpoint's thread only (it owns `outq`); a load when there are none, inlined:
    /// it runs for every connection at every progress and before every send (a call there
    /// cost `op_cost fast` 84 instructions per message).
    #[inline(always)]
    fn take_outbox(&self) {
        if self.outbox_due.load(Ordering::Relaxed) {
            self.move_outbox();
        }
    }

    /// [`take_outbox`](Self::take_outbox)'s work when records wait.
    #[cold]
    #[inline(never)]
    fn move_outbox(&self) {
        let mut outbox = lock(&self.outbox);
        self.outbox_due.store(false, Ordering::Relaxed);
        self.outq.borrow_mut().extend(outbox.drain(..).map(|r| (ptr::null::<doca_task>(), r)));
    }

    fn raw_fd(&self) -> Option<RawFd> {
        self.fd.borrow().as_ref().map(|f| f.as_raw_fd())
    }

    fn count(&self, sent: bool, bytes: usize) {
        let (m, b) = if sent { (0, 1) } else { (2, 3) };
        self.counters[m].set(self.counters[m].get() + 1);
        self.counters[b].set(self.counters[b].get() + bytes as u64);
    }

    /// Closes the socket (the peer sees end of file), unregisters it from the PE, and fails
    /// the queued sends with `code`. Returns whether it was open.
    fn close(&self, ep: &Endpoint, code: Option<doca_error_t>) -> bool {
        let fd = self.fd.borrow_mut().take();
        self.state.set(ConnState::Closed);
        ep.sweep_due.set(true);
        let was_open = fd.is_some();
        if let (Some(fd), Some(pe)) = (&fd, ep.ctx.pe()) {
            pe.unregister_fd(fd.as_raw_fd());
        }
        drop(fd);
        // The end of file is in the peer's socket now: the count tells the peer to read it
        // (otherwise only its periodic read would, see `sent.rs`).
        if was_open {
            self.sent_one();
        }
        // The peer's consumers are unreachable now: producers of ours answer NOT_CONNECTED
        // (those that kept one see it withdrawn and look again). Dropped outside the lock.
        let gone = core::mem::take(&mut *lock(&self.remote));
        for rc in gone.values() {
            rc.withdraw();
        }
        drop(gone);
        // Records of other threads not sent yet are dropped: nobody can receive them. Under
        // the lock, after the state became Closed: a thread that pushes later sees it closed.
        lock(&self.outbox).clear();
        self.outbox_due.store(false, Ordering::Relaxed);
        let queued: Vec<_> = self.outq.borrow_mut().drain(..).collect();
        if let Some(code) = code {
            for (t, _) in queued.into_iter().filter(|(t, _)| !t.is_null()) {
                // SAFETY: queued tasks are submitted tasks of this ctx's live pool.
                task::complete(unsafe { &*t }, code);
            }
        }
        was_open
    }
}

/// An event waiting to reach the user (see [`EventTask`]). Each holds a reference on its
/// connection ([`Endpoint::post`]) until it is delivered or dropped ([`Event::done`]).
enum Event {
    Connect(*const doca_comch_connection, u8),
    Disconnect(*const doca_comch_connection),
    Recv(*const doca_comch_connection, Vec<u8>),
    /// The peer created (true) or withdrew (false) the consumer of that id.
    Consumer(*const doca_comch_connection, u32, bool),
}

impl Event {
    fn conn(&self) -> *const doca_comch_connection {
        match self {
            Event::Connect(c, _) | Event::Disconnect(c) | Event::Recv(c, _) | Event::Consumer(c, _, _) => *c,
        }
    }

    /// The event was delivered (its callback returned) or dropped: its reference goes, and
    /// a connection whose last event this was (a departure, a failed attempt) leaves the
    /// user's hands.
    fn done(self) {
        let p = self.conn();
        if matches!(self, Event::Disconnect(_) | Event::Connect(_, 0)) {
            // SAFETY: an undelivered event holds a reference, so its connection is not freed.
            unsafe { &*p }.released.set(true);
        }
        // SAFETY: the event's reference, given back; `p` is not used afterwards.
        unsafe { release_ref(p) };
    }
}

/// The internal task that carries one event to the user's callback from `doca_pe_progress`.
/// Never handed to the user.
#[repr(C)]
pub struct EventTask {
    base: doca_task,
    event: RefCell<Option<Event>>,
}

static EVENT_KIND: TaskKind = TaskKind::new::<EventTask>("comch.event", submit_event, Some(release_event), None);

/// An event task freed with its event still inside (not delivered): the event is dropped.
unsafe fn release_event(t: &doca_task) {
    // SAFETY: this hook is only registered for the event kind.
    let x = unsafe { t.downcast::<EventTask>() };
    let ev = x.event.borrow_mut().take();
    if let Some(ev) = ev {
        ev.done();
    }
}

// SAFETY: #[repr(C)] with the header first; KIND is built for this type.
unsafe impl TaskType for EventTask {
    const KIND: &'static TaskKind = &EVENT_KIND;
    fn with_header(base: doca_task) -> Self {
        EventTask { base, event: RefCell::new(None) }
    }
}

unsafe fn submit_event(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    task::complete(t, DOCA_SUCCESS);
    Ok(())
}

/// `struct doca_comch_task_send`.
#[repr(C)]
pub struct doca_comch_task_send {
    base: doca_task,
    conn: Cell<*const doca_comch_connection>,
    msg: Cell<*const u8>,
    len: Cell<u32>,
}

static SEND_KIND: TaskKind = TaskKind::new::<doca_comch_task_send>("comch.send", submit_send, Some(release_send), None);

/// A freed send task drops its reference on its connection (taken in `send_alloc`).
unsafe fn release_send(t: &doca_task) {
    // SAFETY: this hook is only registered for the send kind.
    let x = unsafe { t.downcast::<doca_comch_task_send>() };
    let c = x.conn.replace(ptr::null());
    if !c.is_null() {
        // SAFETY: the task's reference kept the connection alive until now; not used after.
        unsafe { release_ref(c) };
    }
}

// SAFETY: #[repr(C)] with the header first; KIND is built for this type.
unsafe impl TaskType for doca_comch_task_send {
    const KIND: &'static TaskKind = &SEND_KIND;
    fn with_header(base: doca_task) -> Self {
        doca_comch_task_send { base, conn: Cell::new(ptr::null()), msg: Cell::new(ptr::null()), len: Cell::new(0) }
    }
}

/// A server or a client (the C types `doca_comch_server` and `doca_comch_client` are both
/// this struct, told apart by their magic).
#[repr(C)]
pub struct Endpoint {
    ctx: doca_ctx,
    magic: u32,
    role: Role,
    dev: DevRef,
    repr: *mut doca_dev_rep,
    name: Vec<u8>,
    max_msg: Cell<u32>,
    recv_queue: Cell<u32>,
    recv_cb: Cell<doca_comch_event_msg_recv_cb_t>,
    connect_cb: Cell<doca_comch_event_connection_status_changed_cb_t>,
    disconnect_cb: Cell<doca_comch_event_connection_status_changed_cb_t>,
    /// The new- and expired-consumer callbacks (`*_event_consumer_register`), run for the
    /// peer's CONSUMER records.
    pub(crate) consumer_cbs: Cell<(doca_comch_event_consumer_cb_t, doca_comch_event_consumer_cb_t)>,
    send_conf: Cell<bool>,
    #[allow(clippy::vec_box)] // the boxes give connections stable addresses
    conns: RefCell<Vec<Box<doca_comch_connection>>>,
    listener: RefCell<Option<OwnedFd>>,
    events: RefCell<VecDeque<Event>>,
    /// Client: retrying the connection until this instant.
    connect_deadline: Cell<Option<Instant>>,
    /// Client: when progress tries `connect(2)` again ([`CONNECT_RETRY`]).
    connect_pace: RetryPace,
    /// Server: when progress calls `accept(2)` on the listener.
    accept: RetryPace,
    cycle: Cell<u64>,
    /// The thread that progresses it (its creator until a progress): the only one that
    /// touches its connections' sockets and queues. Shared with its connections, whose
    /// fast-path objects on any thread read it (see `thread_mark`).
    driver: Arc<ThreadMark>,
    /// Progress calls so far, and the PE's arm count at the last one: when every socket is
    /// read whatever the counts say (see `sent.rs` and [`Endpoint::must_read`]).
    progress_calls: Cell<u32>,
    armings_seen: Cell<u64>,
    /// See [`Endpoint::rec_buf`]. Borrowed only by progress, which is not re-entered.
    rec: RefCell<Vec<u8>>,
    /// A connection may have become freeable since the last sweep (see
    /// [`doca_comch_connection::freeable`]: set when one closes, and when one's last
    /// reference goes, the two of its three conditions that come last).
    sweep_due: Cell<bool>,
}

/// `struct doca_comch_server`.
pub type doca_comch_server = Endpoint;
/// `struct doca_comch_client`.
pub type doca_comch_client = Endpoint;

static SERVER_OPS: CtxOps = CtxOps {
    name: "comch_server",
    can_connect: None,
    start: server_start,
    stop: ep_stop,
    stopped: None,
    progress: Some(ep_progress),
    has_work: Some(ep_has_work),
    stop_via_progress: false,
};

static CLIENT_OPS: CtxOps = CtxOps {
    name: "comch_client",
    can_connect: None,
    start: client_start,
    stop: ep_stop,
    stopped: None,
    progress: Some(ep_progress),
    has_work: Some(ep_has_work),
    stop_via_progress: false,
};

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The abstract socket address of `name` for this user.
fn address(name: &[u8]) -> Result<(libc::sockaddr_un, libc::socklen_t), doca_error_t> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut path = format!("async-doca-comch.{uid}.").into_bytes();
    path.extend_from_slice(name);
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut a: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    if path.len() + 1 > a.sun_path.len() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // Abstract namespace: a leading NUL, then the bytes (no terminator).
    for (i, b) in path.iter().enumerate() {
        a.sun_path[i + 1] = *b as c_char;
    }
    let len = core::mem::size_of::<libc::sa_family_t>() + 1 + path.len();
    Ok((a, len as libc::socklen_t))
}

fn seqpacket() -> Result<OwnedFd, doca_error_t> {
    // SAFETY: plain socket creation; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(DOCA_ERROR_OPERATING_SYSTEM);
    }
    // SAFETY: a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends one record (never blocks). Ok(false): the socket is full.
fn send_rec(fd: RawFd, parts: &[&[u8]]) -> Result<bool, doca_error_t> {
    let iov: Vec<libc::iovec> =
        parts.iter().map(|p| libc::iovec { iov_base: p.as_ptr() as *mut c_void, iov_len: p.len() }).collect();
    // SAFETY: msghdr is plain old data; the iovecs point at live slices for the call.
    let mut m: libc::msghdr = unsafe { core::mem::zeroed() };
    m.msg_iov = iov.as_ptr() as *mut libc::iovec;
    m.msg_iovlen = iov.len() as _;
    // SAFETY: a valid descriptor and message header.
    let n = unsafe { libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
    if n >= 0 {
        return Ok(true);
    }
    match errno() {
        libc::EAGAIN => Ok(false),
        _ => Err(DOCA_ERROR_CONNECTION_RESET),
    }
}

/// Receives one record into `buf`. Ok(None): nothing there; Ok(Some(0)) end of file.
fn recv_rec(fd: RawFd, buf: &mut [u8]) -> Result<Option<usize>, doca_error_t> {
    // SAFETY: `buf` is writable for its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT | libc::MSG_TRUNC) };
    if n >= 0 {
        let n = n as usize;
        if n > buf.len() {
            // Larger than any record the peer may send: a broken peer.
            return Err(DOCA_ERROR_BAD_STATE);
        }
        return Ok(Some(n));
    }
    match errno() {
        libc::EAGAIN => Ok(None),
        // A peer that closed with records of ours unread makes the kernel report
        // ECONNRESET once, *before* the records it had sent us (still queued here).
        libc::ECONNRESET => Err(DOCA_ERROR_CONNECTION_RESET),
        _ => Err(DOCA_ERROR_OPERATING_SYSTEM),
    }
}

impl Endpoint {
    fn new(role: Role, dev: DevRef, repr: *mut doca_dev_rep, name: Vec<u8>) -> Box<Endpoint> {
        Box::new(Endpoint {
            ctx: doca_ctx::new(if role == Role::Server { &SERVER_OPS } else { &CLIENT_OPS }),
            magic: if role == Role::Server { SERVER_MAGIC } else { CLIENT_MAGIC },
            role,
            dev,
            repr,
            name,
            max_msg: Cell::new(DEFAULT_MAX_MSG_SIZE),
            recv_queue: Cell::new(DEFAULT_RECV_QUEUE),
            recv_cb: Cell::new(None),
            connect_cb: Cell::new(None),
            disconnect_cb: Cell::new(None),
            consumer_cbs: Cell::new((None, None)),
            send_conf: Cell::new(false),
            conns: RefCell::new(Vec::new()),
            listener: RefCell::new(None),
            events: RefCell::new(VecDeque::new()),
            connect_deadline: Cell::new(None),
            connect_pace: RetryPace::every(CONNECT_RETRY),
            accept: RetryPace::default(),
            cycle: Cell::new(0),
            driver: Arc::new(ThreadMark::here()),
            progress_calls: Cell::new(0),
            armings_seen: Cell::new(0),
            rec: RefCell::new(Vec::new()),
            sweep_due: Cell::new(false),
        })
    }

    /// Whether this progress reads every socket whatever the peers' counts say: every
    /// [`READ_EVERY`] calls (the end of file of a peer that died is counted by nobody), and
    /// at the first call after the PE was armed (a readable socket may have woken it).
    fn must_read(&self) -> bool {
        let calls = self.progress_calls.get().wrapping_add(1);
        self.progress_calls.set(calls);
        let armings = self.ctx.pe().map_or(0, |pe| pe.armings());
        calls % READ_EVERY == 0 || self.armings_seen.replace(armings) != armings
    }

    fn register(&self, fd: RawFd) -> Result<(), doca_error_t> {
        self.ctx.pe().ok_or(DOCA_ERROR_NOT_CONNECTED)?.register_fd(fd, FdMode::Level)
    }

    fn push_conn(&self, fd: OwnedFd, sent: Option<SentCount>) -> Result<(), doca_error_t> {
        self.register(fd.as_raw_fd())?;
        let wake = self.ctx.pe().ok_or(DOCA_ERROR_NOT_CONNECTED)?.doorbell_address();
        let c = doca_comch_connection::new(self, fd, wake, sent);
        self.conns.borrow_mut().push(c);
        Ok(())
    }

    /// The connection at index `i`. The reference is used within one pass of progress or
    /// stop, and [`sweep`](Self::sweep), the only place boxes go, runs at their ends.
    fn conn_at(&self, i: usize) -> Option<&doca_comch_connection> {
        let v = self.conns.borrow();
        let c: *const doca_comch_connection = &**v.get(i)?;
        // SAFETY: the box is not freed before the next sweep (above), and never while
        // anything of ours holds it.
        Some(unsafe { &*c })
    }

    /// How many connection objects exist (tests: none outlives its use).
    #[cfg(test)]
    pub(crate) fn connection_objects(&self) -> usize {
        self.conns.borrow().len()
    }

    /// Queues an event for the user; it holds its connection until delivered or dropped.
    fn post(&self, ev: Event) {
        // SAFETY: events are made for live connections of this endpoint.
        unsafe { &*ev.conn() }.hold();
        self.events.borrow_mut().push_back(ev);
    }

    /// Frees the connections the user can no longer name and nothing of ours holds.
    ///
    /// When a connection leaves the user's hands (DOCA gives no explicit rule; we follow
    /// what its callbacks imply and what NVIDIA's samples do, dropping their pointer there):
    /// * server: when the disconnect callback returned (the client left), when the connect
    ///   callback of a failed attempt returned, when the user called
    ///   `doca_comch_server_disconnect`, or when the server stopped;
    /// * client: when the client stopped (its next start makes a new connection).
    ///
    /// Until then a connection stays, closed or not, so every call on it answers (e.g.
    /// `update_info` with CONNECTION_ABORTED). Send tasks still allocated on it and events not
    /// yet delivered keep it too. Without this a long-running server kept every connection
    /// it ever had until it was destroyed.
    fn sweep(&self) {
        self.conns.borrow_mut().retain(|c| !c.freeable());
    }

    /// Whether `c` is a current connection of this endpoint.
    fn owns(&self, c: &doca_comch_connection) -> bool {
        ptr::eq(c.owner, self) && c.cycle == self.cycle.get()
    }

    fn the_client_conn(&self) -> Option<&doca_comch_connection> {
        let n = self.conns.borrow().len();
        (0..n).rev().filter_map(|i| self.conn_at(i)).find(|c| c.cycle == self.cycle.get())
    }

    /// The receive buffer size: a record is the type byte plus up to max_msg bytes.
    /// The buffer records are read into: kept from one progress to the next, sized for
    /// the largest record (a type byte and `max_msg`, which changes only while IDLE). A
    /// fresh zeroed one per progress cost a `calloc` and a `memset` of the whole size at
    /// every call (24 720 instructions per message of `op_cost fast`).
    fn rec_buf(&self) -> std::cell::RefMut<'_, Vec<u8>> {
        let mut buf = self.rec.borrow_mut();
        let need = self.max_msg.get() as usize + 1;
        if buf.len() != need {
            *buf = vec![0u8; need];
        }
        buf
    }

    fn event_slots(&self) -> u32 {
        self.recv_queue.get() + if self.role == Role::Server { 2 * MAX_CLIENTS.min(64) } else { 2 }
    }

    /// Moves queued events into event tasks while the pool has room.
    fn flush_events(&self) -> bool {
        let mut did = false;
        loop {
            if self.events.borrow().is_empty() {
                return did;
            }
            let Ok(t) = task::alloc::<EventTask>(&self.ctx, doca_data::from_u64(0)) else { return did };
            // SAFETY: a freshly allocated slot of this ctx's pool.
            let t = unsafe { t.as_ref() };
            *t.event.borrow_mut() = self.events.borrow_mut().pop_front();
            if task::submit_internal(task::header(t)).is_err() {
                // Not RUNNING any more: the event is dropped (by the release hook).
                // SAFETY: our own allocated task.
                unsafe { task::doca_task_free(task::header(t).raw()) };
                return did;
            }
            did = true;
        }
    }

    /// Drives one connection: handshake, queued sends, incoming records. Returns whether it
    /// did anything.
    /// Handshakes, sends what waits, and reads what arrived: the socket is read when the
    /// peer's count says a record may be waiting, or when `must_read` (see `sent.rs`).
    fn drive(&self, c: &doca_comch_connection, buf: &mut [u8], must_read: bool) -> bool {
        let Some(fd) = c.raw_fd() else { return false };
        let mut did = false;
        let mut hs = [0u8; wire::HANDSHAKE_LEN];
        match c.state.get() {
            ConnState::Closed => return false,
            // Its own buffer: the handshake is longer than a small max_msg's record buffer.
            ConnState::Handshaking => match recv_rec(fd, &mut hs) {
                Ok(None) => return false,
                Ok(Some(n)) => {
                    did = true;
                    self.handshake(c, fd, if n == 0 { Err(()) } else { Ok(&hs[..n]) });
                }
                Err(_) => {
                    did = true;
                    self.handshake(c, fd, Err(()));
                }
            },
            ConnState::Connected => {}
        }
        if c.state.get() != ConnState::Connected {
            return did;
        }
        // Queued sends first (order on a connection is submission order), those of other
        // threads after the ones already queued.
        c.take_outbox();
        loop {
            let front = c.outq.borrow().front().map(|(t, r)| (*t, r.as_ptr(), r.len()));
            let Some((t, p, n)) = front else { break };
            // SAFETY: the record is owned by the queue entry, alive during the call.
            match c.send_counted(fd, &[unsafe { core::slice::from_raw_parts(p, n) }]) {
                Ok(true) => {
                    c.outq.borrow_mut().pop_front();
                    if !t.is_null() {
                        c.count(true, n - 1);
                        // SAFETY: a submitted task of this ctx's live pool.
                        task::complete(unsafe { &*t }, DOCA_SUCCESS);
                    }
                    did = true;
                }
                Ok(false) => break,
                Err(e) => {
                    // Read what the peer sent before it went (below) before closing.
                    self.send_failed(c, e);
                    did = true;
                    break;
                }
            }
        }
        // Incoming records, while events can be delivered (else they wait in the socket).
        if self.ctx.state() != DOCA_CTX_STATE_RUNNING {
            return did;
        }
        // The peer's count (see `sent.rs`): no record on its way, and no reason to look
        // anyway: no system call.
        let waiting = c.peer_sent.borrow().as_ref().is_none_or(|count| count.get() > c.received.get());
        if !waiting && !must_read && !c.read_always.get() {
            return did;
        }
        let mut reset_seen = false;
        while self.events.borrow().len() < self.recv_queue.get() as usize {
            match recv_rec(fd, buf) {
                Ok(None) => break,
                // Reported once, ahead of the records still queued: read those first (they
                // are sends the peer saw complete), the end of file follows them.
                Err(e) if e == DOCA_ERROR_CONNECTION_RESET && !reset_seen => {
                    reset_seen = true;
                    self.send_failed(c, e);
                    did = true;
                }
                Ok(Some(0)) | Err(_) => {
                    self.lost(c, DOCA_ERROR_CONNECTION_RESET);
                    return true;
                }
                Ok(Some(n)) => {
                    did = true;
                    c.received.set(c.received.get() + 1);
                    let rec = &buf[..n];
                    if wire::is_consumer(rec) {
                        if self.consumer_record(c, rec).is_err() {
                            self.lost(c, DOCA_ERROR_CONNECTION_RESET);
                            return true;
                        }
                        continue;
                    }
                    if !wire::is_data(rec) {
                        // Only DATA and the fast path's records are valid once connected: a
                        // broken peer.
                        self.lost(c, DOCA_ERROR_CONNECTION_RESET);
                        return true;
                    }
                    c.count(false, n - 1);
                    self.post(Event::Recv(c, rec[1..].to_vec()));
                }
            }
        }
        did
    }

    /// A fast-path record of the peer: a consumer announced (its queue opened, its buffers'
    /// export imported, then the new-consumer event) or withdrawn (the expired event). A
    /// record that does not decode is a broken peer (Err); a consumer that cannot be reached
    /// is logged and not registered, so producers of ours answer NOT_CONNECTED for it.
    fn consumer_record(&self, c: &doca_comch_connection, rec: &[u8]) -> Result<(), ()> {
        match wire::decode_consumer(rec).map_err(|_| ())? {
            wire::Consumer::New { id, pid, fd, len, blob } => {
                let queue = match FastQueue::open(pid, fd, len as usize) {
                    Ok(q) => q,
                    Err(e) => {
                        crate::sdk_log!(ERROR, "comch: the peer's consumer {id} cannot be reached ({e:?})");
                        return Ok(());
                    }
                };
                let mut m = ptr::null_mut();
                // SAFETY: the blob is read for its length; the device is the endpoint's.
                let rc = unsafe {
                    crate::mmap::doca_mmap_create_from_export(
                        ptr::null(),
                        blob.as_ptr().cast(),
                        blob.len(),
                        self.dev.as_ptr(),
                        &mut m,
                    )
                };
                if rc != DOCA_SUCCESS {
                    crate::sdk_log!(ERROR, "comch: the memory of the peer's consumer {id} cannot be imported ({rc:?})");
                    return Ok(());
                }
                let rc = Arc::new(RemoteConsumer { queue, mmap: m, withdrawn: AtomicBool::new(false) });
                // A peer that announces an id twice replaces the first: a producer that kept
                // it sees it withdrawn.
                let old = lock(&c.remote).insert(id, rc);
                if let Some(old) = old {
                    old.withdraw();
                }
                self.post(Event::Consumer(c, id, true));
            }
            wire::Consumer::Gone { id } => {
                let gone = lock(&c.remote).remove(&id);
                if let Some(rc) = gone {
                    rc.withdraw();
                    self.post(Event::Consumer(c, id, false));
                }
            }
        }
        Ok(())
    }

    /// A send found the peer gone: this and the queued sends fail with `code`, later ones
    /// at submit; the connection stays open for reading until the end of file.
    fn send_failed(&self, c: &doca_comch_connection, code: doca_error_t) {
        c.peer_gone.set(true);
        // The end of file follows what the peer sent: read the socket at every progress from
        // now on, whatever its count says (it may never move again).
        c.read_always.set(true);
        let queued: Vec<_> = c.outq.borrow_mut().drain(..).collect();
        for (t, _) in queued.into_iter().filter(|(t, _)| !t.is_null()) {
            // SAFETY: queued tasks are submitted tasks of this ctx's live pool.
            task::complete(unsafe { &*t }, code);
        }
    }

    /// The peer is gone (or broke the protocol).
    fn lost(&self, c: &doca_comch_connection, code: doca_error_t) {
        if c.close(self, Some(code)) && self.role == Role::Server {
            self.post(Event::Disconnect(c));
        }
    }

    fn handshake(&self, c: &doca_comch_connection, fd: RawFd, rec: Result<&[u8], ()>) {
        let parsed = rec.ok().and_then(|r| wire::decode(r).ok());
        match (self.role, parsed) {
            (Role::Server, Some(Control::Hello { version, max_msg, sent })) if version == wire::VERSION => {
                let current = self.conns.borrow().iter().filter(|x| x.state.get() == ConnState::Connected).count();
                if current as u32 >= MAX_CLIENTS {
                    let _ = send_rec(fd, &[&wire::encode(Control::Reject { reason: DOCA_ERROR_FULL.0 })]);
                    c.close(self, None);
                    self.post(Event::Connect(c, 0));
                    return;
                }
                let welcome = wire::encode(Control::Welcome {
                    version: wire::VERSION,
                    max_msg: self.max_msg.get(),
                    sent: count_at(c.sent.as_ref()),
                });
                match send_rec(fd, &[&welcome]) {
                    Ok(true) => {
                        c.open_peer_count(sent);
                        c.max_msg.set(max_msg.min(self.max_msg.get()));
                        c.state.set(ConnState::Connected);
                        self.post(Event::Connect(c, 1));
                    }
                    _ => {
                        c.close(self, None);
                        self.post(Event::Connect(c, 0));
                    }
                }
            }
            (Role::Server, Some(Control::Hello { .. })) => {
                let _ = send_rec(fd, &[&wire::encode(Control::Reject { reason: DOCA_ERROR_NOT_SUPPORTED.0 })]);
                c.close(self, None);
                self.post(Event::Connect(c, 0));
            }
            (Role::Server, _) => {
                c.close(self, None);
                self.post(Event::Connect(c, 0));
            }
            (Role::Client, Some(Control::Welcome { version, max_msg, sent })) if version == wire::VERSION => {
                c.open_peer_count(sent);
                c.max_msg.set(max_msg.min(self.max_msg.get()));
                c.state.set(ConnState::Connected);
                mark_started(&self.ctx);
            }
            (Role::Client, _) => {
                c.close(self, None);
                mark_start_failed(&self.ctx);
            }
        }
    }

    /// Client: one connection attempt. Ok(true): connected (HELLO sent).
    fn try_connect(&self) -> Result<bool, doca_error_t> {
        let s = seqpacket()?;
        let (a, len) = address(&self.name)?;
        // SAFETY: a valid socket and address of `len` bytes.
        let r = unsafe { libc::connect(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) };
        if r != 0 {
            return match errno() {
                // No server yet (or its backlog is full): try again later.
                libc::ECONNREFUSED | libc::ENOENT | libc::EAGAIN => Ok(false),
                _ => Err(DOCA_ERROR_CONNECTION_ABORTED),
            };
        }
        let sent = SentCount::create().ok();
        let at = count_at(sent.as_ref());
        let hello = wire::encode(Control::Hello { version: wire::VERSION, max_msg: self.max_msg.get(), sent: at });
        if !send_rec(s.as_raw_fd(), &[&hello])? {
            return Ok(false);
        }
        self.push_conn(s, sent)?;
        Ok(true)
    }
}

/// The endpoint embedding `ctx`.
///
/// # Safety
/// `ctx` must be the ctx of an [`Endpoint`] (true for both ops tables here).
unsafe fn ep_of(ctx: &doca_ctx) -> &Endpoint {
    // SAFETY: endpoints bind themselves as the owner of their ctx in create.
    unsafe { ctx.owner::<Endpoint>() }
}

fn configure_events(ep: &Endpoint) -> Result<(), doca_error_t> {
    task::configure::<EventTask>(&ep.ctx, Some(deliver_event), Some(deliver_event), ep.event_slots())
}

unsafe fn server_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let ep = unsafe { ep_of(ctx) };
    if !ep.send_conf.get() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    configure_events(ep)?;
    ep.cycle.set(ep.cycle.get() + 1);
    let s = seqpacket()?;
    let (a, len) = address(&ep.name)?;
    // SAFETY: a valid socket and address of `len` bytes.
    if unsafe { libc::bind(s.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) } != 0 {
        // Another server of this name is running.
        return Err(if errno() == libc::EADDRINUSE { DOCA_ERROR_IN_USE } else { DOCA_ERROR_OPERATING_SYSTEM });
    }
    // SAFETY: a bound socket.
    if unsafe { libc::listen(s.as_raw_fd(), 128) } != 0 {
        return Err(DOCA_ERROR_OPERATING_SYSTEM);
    }
    ep.register(s.as_raw_fd())?;
    *ep.listener.borrow_mut() = Some(s);
    Ok(StartMode::Sync)
}

unsafe fn client_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let ep = unsafe { ep_of(ctx) };
    if !ep.send_conf.get() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    configure_events(ep)?;
    ep.cycle.set(ep.cycle.get() + 1);
    if !ep.try_connect()? {
        let now = Instant::now();
        ep.connect_deadline.set(Some(now + super::connect_timeout()));
        ep.connect_pace.tried(now, false);
    }
    Ok(StartMode::Async)
}

unsafe fn ep_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let ep = unsafe { ep_of(ctx) };
    let n = ep.conns.borrow().len();
    for i in 0..n {
        if let Some(c) = ep.conn_at(i) {
            // The framework flushes the submitted sends right after this hook.
            c.close(ep, None);
        }
    }
    if let Some(l) = ep.listener.borrow_mut().take() {
        if let Some(pe) = ep.ctx.pe() {
            pe.unregister_fd(l.as_raw_fd());
        }
    }
    let dropped: Vec<Event> = ep.events.borrow_mut().drain(..).collect();
    for ev in dropped {
        ev.done();
    }
    ep.connect_deadline.set(None);
    // A stopped server or client has no connections the user may name any more.
    for i in 0..n {
        if let Some(c) = ep.conn_at(i) {
            c.released.set(true);
        }
    }
    ep.sweep();
}

unsafe fn ep_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let ep = unsafe { ep_of(ctx) };
    ep.driver.touch();
    let mut did = false;
    if let Some(deadline) = ep.connect_deadline.get() {
        let now = Instant::now();
        let attempt = if ep.connect_pace.due(now) {
            // Once connected the pace is not looked at again (no deadline).
            ep.connect_pace.tried(now, false);
            ep.try_connect()
        } else {
            Ok(false)
        };
        match attempt {
            Ok(true) => {
                ep.connect_deadline.set(None);
                did = true;
            }
            Ok(false) if now < deadline => {}
            _ => {
                ep.connect_deadline.set(None);
                mark_start_failed(&ep.ctx);
                return true;
            }
        }
    }
    // New clients (paced: RetryPace).
    let lfd = ep.listener.borrow().as_ref().map(|l| l.as_raw_fd());
    if let Some(lfd) = lfd {
        let now = Instant::now();
        if ep.accept.due(now) {
            let mut accepted = false;
            loop {
                // SAFETY: a listening socket; no address wanted.
                let fd = unsafe {
                    libc::accept4(lfd, ptr::null_mut(), ptr::null_mut(), libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC)
                };
                if fd < 0 {
                    break;
                }
                // SAFETY: a fresh descriptor we own.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                accepted = true;
                if ep.push_conn(fd, SentCount::create().ok()).is_err() {
                    break;
                }
            }
            did |= accepted;
            ep.accept.tried(now, accepted);
        }
    }
    let mut buf = ep.rec_buf();
    let must_read = ep.must_read();
    let n = ep.conns.borrow().len();
    for i in 0..n {
        if let Some(c) = ep.conn_at(i) {
            // A consumer or producer let go of it on some thread: once none holds it, it may
            // be freeable. The flag is cleared only then; one set again between the two
            // accesses would be for a hold taken meanwhile, so on a connection that is still
            // open (a closed one takes no hold), whose close asks for a sweep anyway.
            if c.fast_released.load(Ordering::Relaxed) && c.holds.count() == 0 {
                c.fast_released.store(false, Ordering::Relaxed);
                ep.sweep_due.set(true);
            }
            did |= ep.drive(c, &mut buf, must_read);
        }
    }
    did |= ep.flush_events();
    // Only when a connection may have become freeable: a busy-polling PE walked every
    // connection at every call to free none (138 instructions per fast-path message,
    // `op_cost fast`).
    if ep.sweep_due.replace(false) {
        ep.sweep();
    }
    did
}

unsafe fn ep_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let ep = unsafe { ep_of(ctx) };
    // Retrying a connection has no descriptor to wait on: keep the PE awake meanwhile.
    if ep.connect_deadline.get().is_some() || !ep.events.borrow().is_empty() {
        return true;
    }
    // Records another thread left for us (it rang the doorbell, which the arm drained).
    if ep.conns.borrow().iter().any(|c| c.outbox_due.load(Ordering::Relaxed)) {
        return true;
    }
    // A client waiting on the listener: the next progress accepts it, interval or not
    // (the PE would otherwise wake on the readable listener and find nothing to do).
    let lfd = ep.listener.borrow().as_ref().map(|l| l.as_raw_fd());
    let Some(lfd) = lfd else { return false };
    let mut p = libc::pollfd { fd: lfd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; zero timeout.
    // Readable only: an error on the listener is nothing accept(2) would take, and counting
    // it as work would keep an event-mode PE spinning.
    let readable = unsafe { libc::poll(&mut p, 1, 0) } > 0 && p.revents & libc::POLLIN != 0;
    if readable {
        ep.accept.readable();
    }
    readable
}

/// Delivers one event task to the user's callback (from `doca_pe_progress`).
unsafe extern "C" fn deliver_event(task: *mut EventTask, _ud: doca_data, _cud: doca_data) {
    guard((), || {
        // SAFETY: the framework passes a live event task back to us (its own callback).
        let t = unsafe { &*task };
        let ev = t.event.borrow_mut().take();
        // SAFETY: the event task belongs to an endpoint's ctx.
        let ep = unsafe { ep_of(task::header(t).ctx()) };
        // The task goes back to the pool first: the callback may stop the ctx.
        // SAFETY: our own task, delivered and not used afterwards (its event was taken out,
        // so the release hook finds none).
        unsafe { task::doca_task_free(task::header(t).raw()) };
        let Some(mut ev) = ev else { return };
        if ep.ctx.state() == DOCA_CTX_STATE_RUNNING {
            let mut dummy_recv = doca_comch_event_msg_recv { _private: 0 };
            let mut dummy_status = doca_comch_event_connection_status_changed { _private: 0 };
            match &mut ev {
                Event::Recv(c, data) => {
                    if let Some(cb) = ep.recv_cb.get() {
                        // SAFETY: the user's registered callback with its documented
                        // arguments; the buffer lives for the call, the connection is held
                        // by the event.
                        unsafe { cb(&mut dummy_recv, data.as_mut_ptr(), data.len() as u32, *c as *mut _) };
                    }
                }
                Event::Connect(c, ok) => {
                    if let Some(cb) = ep.connect_cb.get() {
                        // SAFETY: as above.
                        unsafe { cb(&mut dummy_status, *c as *mut _, *ok) };
                    }
                }
                Event::Disconnect(c) => {
                    if let Some(cb) = ep.disconnect_cb.get() {
                        // SAFETY: as above.
                        unsafe { cb(&mut dummy_status, *c as *mut _, 1) };
                    }
                }
                Event::Consumer(c, id, new) => {
                    let (on_new, on_expired) = ep.consumer_cbs.get();
                    if let Some(cb) = if *new { on_new } else { on_expired } {
                        let mut dummy_consumer = doca_comch_event_consumer { _private: 0 };
                        // SAFETY: as above.
                        unsafe { cb(&mut dummy_consumer, *c as *mut _, *id) };
                    }
                }
            }
        }
        // After the callback: a departed connection may be freed from the next sweep on.
        ev.done();
    })
}

unsafe fn submit_send(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only registered for the send kind.
    let x = unsafe { t.downcast::<doca_comch_task_send>() };
    // SAFETY: the send belongs to an endpoint's ctx.
    let ep = unsafe { ep_of(t.ctx()) };
    // SAFETY: connection pointers given to alloc_init are checked there, and the task holds
    // a reference on its connection until it is freed (see `release_send`).
    let c = unsafe { &*x.conn.get() };
    match c.state.get() {
        ConnState::Connected => {}
        ConnState::Closed if c.cycle == ep.cycle.get() => return Err(DOCA_ERROR_CONNECTION_RESET),
        _ => return Err(DOCA_ERROR_NOT_CONNECTED),
    }
    if c.peer_gone.get() {
        return Err(DOCA_ERROR_CONNECTION_RESET);
    }
    let len = x.len.get() as usize;
    if len > c.max_msg.get() as usize {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let msg: &[u8] = if len == 0 {
        &[]
    } else {
        // SAFETY: the caller keeps `len` readable bytes at `msg` until the completion (DOCA
        // contract, what the samples do); they are copied by the kernel or into the queue now.
        unsafe { core::slice::from_raw_parts(x.msg.get(), len) }
    };
    let fd = c.raw_fd().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
    // What other threads sent before goes first (a load when nothing waits).
    c.take_outbox();
    if c.outq.borrow().is_empty() {
        match c.send_counted(fd, &[&[wire::T_DATA], msg]) {
            Ok(true) => {
                c.count(true, len);
                task::complete(t, DOCA_SUCCESS);
                return Ok(());
            }
            Ok(false) => {}
            Err(e) => {
                // The records the peer sent before it went are still to be read.
                ep.send_failed(c, e);
                return Err(e);
            }
        }
    }
    let mut rec = Vec::with_capacity(len + 1);
    rec.push(wire::T_DATA);
    rec.extend_from_slice(msg);
    c.outq.borrow_mut().push_back((t as *const doca_task, rec));
    Ok(())
}

// ---- what the fast path (consumer.rs, producer.rs) uses of a connection ----
//
// Consumers and producers may live on threads other than the endpoint's (DOCA allows one per
// thread, each on its own PE). Of their connection they touch only what is made for that:
// `state`, `peer_gone` and the orphan bit (atomics, checks), `holds` (hold and release),
// `fast_ids`, `remote` (a mutex), `outbox` (a mutex, for records), and the immutable `dev`,
// `wake`, `driver` and `magic`. Everything else is the endpoint's thread's alone.

impl doca_comch_connection {
    /// A connection a consumer or producer may be created on: connected, its peer there, not
    /// an orphan (BAD_STATE otherwise, DOCA's answer for a connection not established). The
    /// new object holds the connection ([`release_fast`]) so that it stays valid until it is
    /// destroyed, whatever happens to the endpoint meanwhile.
    pub(crate) fn hold_for_fast_path(&self) -> Result<u32, doca_error_t> {
        self.check_fast_path()?;
        // Relaxed, as a reference count's increment: the caller's own reference (DOCA's
        // contract: a connection is used only while it exists) keeps it alive meanwhile.
        self.holds.0.fetch_add(1, Ordering::Relaxed);
        Ok(self.fast_ids.fetch_add(1, Ordering::Relaxed).wrapping_add(1))
    }

    /// The device of the connection's server or client, for a consumer about to be created on
    /// it: BAD_STATE as [`Self::hold_for_fast_path`]. The connection's own reference, so that
    /// no thread but the endpoint's reads the endpoint.
    pub(crate) fn fast_path_device(&self) -> Result<*mut doca_dev, doca_error_t> {
        self.check_fast_path()?;
        Ok(self.dev.as_ptr())
    }

    /// BAD_STATE unless connected with the peer there and not an orphan. The orphan bit first:
    /// an orphan is closed anyway, but its endpoint is gone.
    fn check_fast_path(&self) -> Result<(), doca_error_t> {
        if self.holds.is_orphan() || self.state.get() != ConnState::Connected || self.peer_gone.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        Ok(())
    }

    /// Sends a fast-path record in order with the connection's messages (queued behind them
    /// when the socket is full). NOT_CONNECTED once the connection is over.
    ///
    /// On the endpoint's thread the record goes to the socket now, as a message does. On
    /// another thread it waits in `outbox`, in this thread's order, and the endpoint's PE is
    /// rung: its next progress sends it (ahead of any later send of the endpoint's thread).
    pub(crate) fn send_fast_record(&self, rec: Vec<u8>) -> Result<(), doca_error_t> {
        if self.state.get() != ConnState::Connected || self.peer_gone.get() {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        }
        if self.driver.is_here() {
            self.take_outbox();
            let fd = self.raw_fd().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
            if self.outq.borrow().is_empty() && self.send_counted(fd, &[&rec])? {
                return Ok(());
            }
            self.outq.borrow_mut().push_back((ptr::null(), rec));
            return Ok(());
        }
        {
            let mut outbox = lock(&self.outbox);
            // Again under the lock: `close` marks the connection closed, then empties the
            // outbox under it, so a record pushed here is either sent or dropped by it.
            if self.state.get() != ConnState::Connected {
                return Err(DOCA_ERROR_NOT_CONNECTED);
            }
            outbox.push_back(rec);
            self.outbox_due.store(true, Ordering::Relaxed);
        }
        // A PE that is gone (its endpoint stopped meanwhile) has nobody to wake: ignored.
        let _ = crate::doorbell::ring(self.wake);
        Ok(())
    }

    /// The peer's consumer `id`, if it is announced and not withdrawn. Locks the table: a
    /// producer asks only when it changes target, or when its target was withdrawn.
    pub(crate) fn remote_consumer(&self, id: u32) -> Option<Arc<RemoteConsumer>> {
        lock(&self.remote).get(&id).cloned()
    }
}

/// Checks a connection pointer passed to any `doca_comch_*` call.
///
/// # Safety
/// A non-NULL `p` must point to a connection of this provider (DOCA contract).
pub(crate) unsafe fn conn_ref<'a>(p: *const doca_comch_connection) -> Result<&'a doca_comch_connection, doca_error_t> {
    // SAFETY: forwarded.
    let c = unsafe { obj(p) }?;
    if c.magic != CONN_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(c)
}

/// Gives back the hold a consumer or producer took on its connection, on any thread. The
/// last hold of an orphan frees it (see [`FastHolds`]); otherwise the endpoint's thread is
/// told (`fast_released`) that the connection may have become freeable, since only it may
/// free one it owns.
///
/// # Safety
/// `p` is the connection the object held, not used by it afterwards.
pub(crate) unsafe fn release_fast(p: *const doca_comch_connection) {
    let free = {
        // SAFETY: the caller's hold keeps it alive until the read-modify-write below.
        let c = unsafe { &*p };
        // Before the release: once it is given back the connection may be freed at once.
        c.fast_released.store(true, Ordering::Relaxed);
        // AcqRel: this thread's uses happen before whoever frees it, and an orphan freed here
        // sees the endpoint thread's last uses.
        c.holds.0.fetch_sub(1, Ordering::AcqRel) == ORPHAN | 1
    };
    if free {
        // SAFETY: an orphan was given up by its endpoint with Box::into_raw (`destroy`) and
        // this release left it with no hold at all (no other consumer, producer, event or
        // send task): nothing else names it and no other thread frees it (`FastHolds`). Its
        // fields are not bound to a thread: it is closed (the endpoint stopped before its
        // destroy), so its queues are empty, its table of remote consumers too, and the rest
        // are descriptors, shared memory and atomically counted references.
        drop(unsafe { Box::from_raw(p.cast_mut()) });
    }
}

// The `doca_comch_*` C entry points: thin checked wrappers over the objects above, in their own
// file so this one reads as the model; re-exported here, their Rust path before the split.
mod entry;
pub use entry::*;
