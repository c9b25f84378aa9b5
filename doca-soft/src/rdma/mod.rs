//! RDMA (`doca_rdma_*`): reliable connections between soft RDMA contexts in one process or
//! in different processes on this host, and the eight RDMA operations.
//!
//! # Model
//!
//! A `doca_rdma` is a ctx kind (see `ctx.rs`). Once RUNNING it exports connections
//! ([`conn`]): each export creates a **receive ring** in a sealed memfd segment ([`ring`])
//! and a blob naming it; the peer connects with that blob, maps the ring and becomes its
//! producer. Connections are set up only by exchanging blobs, like DOCA's.
//!
//! * **Two-sided operations** (send, send with immediate, and the notification of a write
//!   with immediate) append a record to the *peer's* receive ring and ring the peer's PE
//!   doorbell if that PE is armed (asleep or about to sleep). The receiving ctx's progress hook consumes its
//!   rings in order and matches records to posted receives in posting order. A message
//!   waits in the ring while no receive is posted; a full ring keeps the sender's task
//!   pending (flow control: data is never dropped) and the sender's progress retries when
//!   the consumer frees space (the consumer rings the sender's doorbell if the sender's PE is
//!   armed).
//! * **One-sided operations** (read, write, atomics) go straight to the target's memory
//!   through the imported mmap's `RemoteRegion` (shared memory or `process_vm_*`) with its
//!   range, permission and key checks; the target never calls progress for them, as on
//!   hardware. They also need the target ctx's permission for that operation
//!   (`doca_rdma_set_permissions`, carried in the target's connection blob) and memory owned
//!   by the connected peer process.
//! * **Ordering.** Every connection keeps its submitted send-side tasks in one FIFO queue.
//!   An operation runs only when everything submitted before it on that connection has
//!   finished, so completions on one connection are delivered in submission order (a write
//!   submitted behind a send blocked on a full ring waits for it). Fast path: with an empty
//!   queue the operation runs inside `doca_task_submit` (its callback still comes from
//!   progress).
//! * **Errors.** A task that fails moves the ctx to the **error state**: every other in-flight
//!   task is completed with an error at once (tasks of a connection whose peer is gone with
//!   that connection's code, the rest with the ctx's error code), every connection is broken
//!   (the peers see our rings closed and fail with `DOCA_ERROR_CONNECTION_RESET`), and later
//!   allocations and submits fail, until the ctx is stopped, restarted and reconnected with
//!   new blobs on both sides. The ctx's error code is `DOCA_ERROR_CONNECTION_ABORTED` /
//!   `DOCA_ERROR_CONNECTION_RESET` when a peer vanished, `DOCA_ERROR_BAD_STATE` after any
//!   other task failure.
//! * **Peer death.** A remote peer's process is watched with a pidfd registered with the PE
//!   (level mode: its exit makes an event-mode PE's handle readable) and polled by progress
//!   at most every [`LIVENESS_INTERVAL`] and by every arm. A dead peer breaks its connection
//!   with `DOCA_ERROR_CONNECTION_ABORTED` (after delivering complete messages it had already
//!   put in our ring to receives that are posted). A peer that stops or destroys its ctx
//!   closes its rings: `DOCA_ERROR_CONNECTION_RESET`.
//! * **Stop.** `doca_ctx_stop` closes every connection (flags, doorbell, rings unmapped,
//!   pidfds closed) and forgets the tasks; the framework flushes them through their error
//!   callbacks with [`crate::ctx::FLUSH_STATUS`], posted receives included. The ctx is IDLE
//!   once they are freed. Connection objects stay allocated (refusing use) until
//!   `doca_rdma_destroy`.
//!
//! # Where things are
//! Each file names only those listed above it (no import circle), except that every file
//! uses this one's `doca_rdma`:
//! * `op.rs`, `ring.rs`, `addr.rs`: leaves. The decoded form of an operation, the receive
//!   ring in shared memory, `doca_rdma_addr`.
//! * `conn.rs`: the connection object and its state (export, connect, peer liveness, and the
//!   record connection management keeps on it).
//! * `tasks.rs` (its re-use setters in `accessors.rs`), `remote.rs` (the remote-net sync
//!   event tasks): task types. They decode into an `Op` and validate; no state changes.
//! * `props.rs`: the properties stored and read back.
//! * `cm.rs`: connection management by address, on top of `conn.rs`.
//! * `engine.rs`: the data path. Runs `Op`s in connection order, consumes the rings, the
//!   progress and has-work hooks, liveness.
//! * `submit.rs`: the task kinds, admission to the queues and the submit hooks: decodes and
//!   validates once, then hands over to the engine.
//! * this file: the `doca_rdma` object, its configuration entry points, and the ctx-wide
//!   transitions (`finish`, `break_conn`, `enter_error`, `peer_lost`) that `engine.rs` and
//!   `cm.rs` call.
//!
//! Tests: `tests.rs` (this module), `cm/tests.rs`, `remote/tests.rs`; their harness is
//! `crate::testkit::rdma`, whose provider-agnostic core is shared with the conformance suite
//! (`tests/conformance/kit_common.rs`).
//!
//! # Limits and codes (also in `docs/soft-provider.md`)
//! * Messages and one-sided transfers up to [`MAX_MESSAGE_BYTES`]; larger: the submit fails
//!   with `DOCA_ERROR_TOO_BIG`. A receive ring is [`ring_bytes_for`] `max_num_connections`
//!   (64 KiB to 4 MiB); larger messages stream.
//! * Send queue size bounds the in-flight send-side tasks, receive queue size the posted
//!   receives; one more: the submit fails with `DOCA_ERROR_NO_MEMORY` (as a full hardware
//!   queue; NO_MEMORY is DOCA's back-pressure code).
//! * More exports than `max_num_connections` in one start cycle: `DOCA_ERROR_FULL`.
//! * Configuration (`set_*`) only while IDLE: `DOCA_ERROR_BAD_STATE` otherwise.
//!
//! # Threads
//! As in DOCA: a `doca_rdma`, its connections and tasks are used on the thread of its PE.
//! The only shared state between the two sides of a connection is the rings (atomics in
//! shared memory) and the doorbells (sockets), so the peers may be on any threads or
//! processes.

pub(crate) mod accessors;
pub mod addr;
pub mod cm;
pub mod conn;
mod engine;
mod op;
pub(crate) mod props;
pub mod remote;
pub mod ring;
mod submit;
pub(crate) mod tasks;
#[cfg(test)]
mod tests;

use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::ctx::{doca_ctx, CtxOps, StartMode};
use crate::dev::{dev_ref, doca_dev, DevRef};
use crate::ffi::{guard, guard_err, out, refused};
use crate::task::doca_task;
use crate::types::*;
use conn::ConnState;

pub use conn::doca_rdma_connection;
pub use ring::{ring_bytes_for, RING_BUDGET_BYTES, RING_MAX_BYTES, RING_MIN_BYTES};
pub use tasks::{
    doca_rdma_task_atomic_cmp_swp, doca_rdma_task_atomic_fetch_add, doca_rdma_task_read, doca_rdma_task_receive,
    doca_rdma_task_send, doca_rdma_task_send_imm, doca_rdma_task_write, doca_rdma_task_write_imm,
};

/// Largest message (send, send with immediate) and one-sided transfer (read, write):
/// 1 GiB, the usual hardware `max_msg_sz`. Larger fails the submit with TOO_BIG.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;
/// Default send queue size (in-flight send-side tasks).
pub const DEFAULT_SEND_QUEUE_SIZE: u32 = 256;
/// Default receive queue size (posted receives).
pub const DEFAULT_RECV_QUEUE_SIZE: u32 = 256;
/// Largest accepted queue size (also what `doca_rdma_cap_get_max_{send,recv}_queue_size`
/// report).
pub const MAX_QUEUE_SIZE: u32 = 1 << 16;
/// Default `max_num_connections` (DOCA's default).
pub const DEFAULT_MAX_CONNECTIONS: u16 = 1;
/// Default permissions (DOCA's): local access only; peers need `doca_rdma_set_permissions`
/// with RDMA_READ / RDMA_WRITE / RDMA_ATOMIC for one-sided operations on this side's memory.
pub const DEFAULT_PERMISSIONS: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
/// How often progress polls the liveness of remote peers at most (arming always polls).
pub const LIVENESS_INTERVAL: Duration = Duration::from_millis(1);

/// Permission bits a `doca_rdma` accepts (DOCA: every access flag except the PCI ones).
pub(crate) const PERMISSIONS_ALL: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
    | DOCA_ACCESS_FLAG_RDMA_READ
    | DOCA_ACCESS_FLAG_RDMA_WRITE
    | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

/// `"RDMA"`: marks a live object.
const RDMA_MAGIC: u32 = 0x5244_4d41;

/// `struct doca_rdma`.
pub struct doca_rdma {
    ctx: doca_ctx,
    magic: u32,
    _dev: DevRef,
    perms: Cell<u32>,
    sq_size: Cell<u32>,
    rq_size: Cell<u32>,
    max_conns: Cell<u16>,
    /// The properties of `props.rs`: stored, validated and read back; the soft transport
    /// has no wire, so none of them changes how data moves (see that module).
    transport: Cell<doca_rdma_transport_type>,
    mtu: Cell<doca_mtu_size>,
    grh: Cell<u8>,
    gid_index: Cell<u32>,
    sl: Cell<u32>,
    rnr_retry: Cell<u8>,
    conn_request_timeout_ms: Cell<u16>,
    send_buf_list_len: Cell<u32>,
    recv_buf_list_len: Cell<u32>,
    /// Every connection ever exported (boxed: addresses are handed to the user); those of
    /// the current start cycle start at `first_current`.
    #[allow(clippy::vec_box)] // the boxes give connections stable addresses
    conns: RefCell<Vec<Box<doca_rdma_connection>>>,
    first_current: Cell<usize>,
    /// Start cycle (incremented by every start).
    cycle: Cell<u64>,
    /// The error state and its code.
    error: Cell<Option<doca_error_t>>,
    /// Posted receive tasks in posting order.
    recvs: RefCell<VecDeque<*const doca_task>>,
    /// Submitted send-side tasks not yet completed.
    sq_inflight: Cell<u32>,
    /// Send-side tasks submitted without FLUSH and not yet flushed: their place in the send
    /// queue is taken at submit (see `submit::admit_op`).
    sq_held: Cell<u32>,
    /// Receives submitted without FLUSH and not yet flushed (their receive-queue place).
    rq_held: Cell<u32>,
    /// Last liveness poll of remote peers.
    last_liveness: Cell<Instant>,
    /// Unforced liveness polls so far (see `engine::LIVENESS_CLOCK_EVERY`).
    liveness_calls: Cell<u32>,
    /// False only when no receive ring of a current connection has `consumer_sleeping` set,
    /// so a progress of a PE that is not armed has no flag to clear (see
    /// `engine::sync_sleep_flags`).
    sleep_flags_set: Cell<bool>,
    /// Connection management by address (listeners, handshakes, callbacks).
    cm: cm::Cm,
}

impl doca_rdma {
    fn new(dev: DevRef) -> doca_rdma {
        doca_rdma {
            ctx: doca_ctx::new(&RDMA_CTX_OPS),
            magic: RDMA_MAGIC,
            _dev: dev,
            perms: Cell::new(DEFAULT_PERMISSIONS),
            sq_size: Cell::new(DEFAULT_SEND_QUEUE_SIZE),
            rq_size: Cell::new(DEFAULT_RECV_QUEUE_SIZE),
            max_conns: Cell::new(DEFAULT_MAX_CONNECTIONS),
            transport: Cell::new(DOCA_RDMA_TRANSPORT_TYPE_RC),
            mtu: Cell::new(props::DEFAULT_MTU),
            grh: Cell::new(1),
            gid_index: Cell::new(0),
            sl: Cell::new(0),
            rnr_retry: Cell::new(props::DEFAULT_RNR_RETRY),
            conn_request_timeout_ms: Cell::new(props::DEFAULT_CONN_REQUEST_TIMEOUT_MS),
            send_buf_list_len: Cell::new(1),
            recv_buf_list_len: Cell::new(1),
            conns: RefCell::new(Vec::new()),
            first_current: Cell::new(0),
            cycle: Cell::new(0),
            error: Cell::new(None),
            recvs: RefCell::new(VecDeque::new()),
            sq_inflight: Cell::new(0),
            sq_held: Cell::new(0),
            rq_held: Cell::new(0),
            last_liveness: Cell::new(Instant::now()),
            liveness_calls: Cell::new(0),
            sleep_flags_set: Cell::new(false),
            cm: cm::Cm::default(),
        }
    }

    /// The embedded ctx.
    pub(crate) fn ctx(&self) -> &doca_ctx {
        &self.ctx
    }

    /// Current-cycle connection `i` (0-based), if any.
    pub(crate) fn current(&self, i: usize) -> Option<&doca_rdma_connection> {
        let v = self.conns.borrow();
        let c: *const doca_rdma_connection = &**v.get(self.first_current.get() + i)?;
        // SAFETY: connections are boxed and only dropped with the rdma itself, so the
        // reference stays valid for as long as `self` is borrowed, whatever is pushed.
        Some(unsafe { &*c })
    }

    fn current_count(&self) -> usize {
        self.conns.borrow().len() - self.first_current.get()
    }

    /// Current-cycle connections that hold a slot of `max_num_connections` for connection
    /// management: all but those whose handshake failed, that were rejected, or that were
    /// disconnected. The limit is on connections at a time, so a server serves clients for
    /// as long as it runs, not `max_num_connections` clients in its life. (The objects of
    /// ended connections stay until the rdma is destroyed; their rings are released.)
    pub(crate) fn live_count(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while let Some(c) = self.current(i) {
            if !c.cm.ended() {
                n += 1;
            }
            i += 1;
        }
        n
    }

    /// A new exported connection of the current cycle (ctx RUNNING, checked by the caller),
    /// kept until the rdma is destroyed.
    pub(crate) fn new_connection(&self) -> Result<&doca_rdma_connection, doca_error_t> {
        let pe = self.ctx.pe().ok_or(DOCA_ERROR_BAD_STATE)?;
        let num = u32::try_from(self.conns.borrow().len()).map_err(|_| DOCA_ERROR_FULL)?;
        let c = doca_rdma_connection::export(
            self,
            self.max_conns.get(),
            self.cycle.get(),
            num,
            pe.doorbell_address(),
            self.perms.get(),
        )?;
        let cp: *const doca_rdma_connection = &*c;
        self.conns.borrow_mut().push(c);
        // SAFETY: connections are boxed and only dropped with the rdma itself.
        Ok(unsafe { &*cp })
    }

    /// Whether `c` belongs to this rdma.
    pub(crate) fn owns(&self, c: &doca_rdma_connection) -> bool {
        ptr::eq(c.rdma, self)
    }

    /// The state of `c` for the data path: Err with the code a task on it fails with.
    /// `state` is `c.state()`, read by the caller.
    #[inline]
    pub(crate) fn conn_usable(&self, c: &doca_rdma_connection, state: ConnState) -> Result<(), doca_error_t> {
        debug_assert_eq!(state, c.state());
        if c.cycle != self.cycle.get() {
            return Err(refused(DOCA_ERROR_NOT_CONNECTED));
        }
        // Connected first, by itself: the submit path's case costs one compare.
        if state != ConnState::Connected {
            return Err(refused(match state {
                ConnState::Broken(code) => code,
                _ => DOCA_ERROR_NOT_CONNECTED,
            }));
        }
        match self.error.get() {
            Some(e) => Err(refused(e)),
            None => Ok(()),
        }
    }

    /// Allocation and submit checks of the error state (tasks on `conn`, or receives).
    pub(crate) fn check_usable(&self, conn: Option<&doca_rdma_connection>) -> Result<(), doca_error_t> {
        if let Some(c) = conn {
            if let ConnState::Broken(code) = c.state() {
                if c.cycle == self.cycle.get() {
                    return Err(code);
                }
            }
        }
        match self.error.get() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Completes `t` (a submitted task of this ctx) with `status`, keeping the counts.
    pub(crate) fn finish(&self, t: &doca_task, status: doca_error_t) {
        if !t.is::<doca_rdma_task_receive>() {
            self.sq_inflight.set(self.sq_inflight.get().saturating_sub(1));
        }
        crate::task::complete(t, status);
    }

    /// [`finish`](doca_rdma::finish) of a send-side task (the engine's queues hold no
    /// receives), without asking the task its kind.
    #[inline]
    pub(crate) fn finish_send(&self, t: &doca_task, status: doca_error_t) {
        debug_assert!(!t.is::<doca_rdma_task_receive>());
        self.sq_inflight.set(self.sq_inflight.get().saturating_sub(1));
        crate::task::complete_inlined(t, status);
    }

    /// Breaks `c` with `code` and fails its tasks with it.
    pub(crate) fn break_conn(&self, c: &doca_rdma_connection, code: doca_error_t) {
        c.set_broken(code);
        let inc = c.incoming.borrow_mut().take();
        if let Some(inc) = inc {
            // SAFETY: the incoming receive is a submitted task of this ctx.
            self.finish(unsafe { &*inc.task }, code);
        }
        let ops: Vec<_> = c.ops.borrow_mut().drain(..).collect();
        for q in ops {
            // SAFETY: queued tasks are submitted tasks of this ctx.
            self.finish(unsafe { &*q.task }, code);
        }
        if c.cm.managed() {
            // A connection made by address that ended does not hold its memory until the
            // ctx stops (a server may see thousands come and go); no task uses it any more.
            c.release_rings();
        }
    }

    /// Enters the error state with `code` (no-op if already in it): every connection is
    /// broken and every in-flight task completed (see the module docs).
    pub(crate) fn enter_error(&self, code: doca_error_t) {
        if self.error.get().is_some() {
            return;
        }
        self.error.set(Some(code));
        let mut i = 0;
        while let Some(c) = self.current(i) {
            let own = match c.state() {
                ConnState::Broken(own) => own,
                _ => code,
            };
            self.break_conn(c, own);
            i += 1;
        }
        let recvs: Vec<_> = self.recvs.borrow_mut().drain(..).collect();
        for t in recvs {
            // SAFETY: posted receives are submitted tasks of this ctx.
            self.finish(unsafe { &*t }, code);
        }
    }

    /// A peer of `c` is gone (`code`): break it, then the ctx enters the error state.
    pub(crate) fn peer_lost(&self, c: &doca_rdma_connection, code: doca_error_t) {
        if c.cm.managed() {
            // A connection made by address ends alone (disconnect_cb); see `cm.rs`.
            cm::lost(self, c, code);
            return;
        }
        self.break_conn(c, code);
        self.enter_error(code);
    }
}

/// The ctx-kind descriptor of RDMA.
static RDMA_CTX_OPS: CtxOps = CtxOps {
    name: "rdma",
    can_connect: None,
    start: rdma_start,
    stop: rdma_stop,
    stopped: None,
    progress: Some(engine::progress_hook),
    has_work: Some(engine::has_work_hook),
    // An RDMA stop always goes through STOPPING: NVIDIA's rdma_sync_event_requester stops
    // from a completion callback with every task freed and expects IN_PROGRESS, and the
    // multi-connection samples disconnect their connections on the STOPPING report.
    stop_via_progress: true,
};

/// The rdma embedding `ctx`.
///
/// # Safety
/// `ctx` must be the ctx of a `doca_rdma` (true for every ctx with RDMA_CTX_OPS).
pub(crate) unsafe fn rdma_of(ctx: &doca_ctx) -> &doca_rdma {
    // SAFETY: rdma objects bind themselves as the owner of their ctx in create.
    unsafe { ctx.owner::<doca_rdma>() }
}

unsafe fn rdma_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let r = unsafe { rdma_of(ctx) };
    r.cycle.set(r.cycle.get() + 1);
    r.first_current.set(r.conns.borrow().len());
    r.error.set(None);
    r.sq_inflight.set(0);
    r.sq_held.set(0);
    r.rq_held.set(0);
    r.recvs.borrow_mut().clear();
    r.last_liveness.set(Instant::now());
    cm::configure_events(r)?;
    Ok(StartMode::Sync)
}

unsafe fn rdma_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let r = unsafe { rdma_of(ctx) };
    r.cm.close_all();
    let mut i = 0;
    while let Some(c) = r.current(i) {
        c.shut();
        c.cm.release_addr();
        i += 1;
    }
    r.recvs.borrow_mut().clear();
    r.sq_inflight.set(0);
    // Held tasks are flushed by the stop with every other submitted task.
    r.sq_held.set(0);
    r.rq_held.set(0);
}

/// Validates an rdma pointer from C.
///
/// # Safety
/// A non-NULL `p` must point to a `doca_rdma` created by this provider and not destroyed.
pub(crate) unsafe fn rdma_ref<'a>(p: *const doca_rdma) -> Result<&'a doca_rdma, doca_error_t> {
    // SAFETY: per the contract.
    let r = unsafe { crate::ffi::obj(p) }?;
    if r.magic != RDMA_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(r)
}

/// Runs `f` on a configurable (IDLE) rdma; BAD_STATE otherwise.
///
/// # Safety
/// As [`rdma_ref`].
unsafe fn configure(
    rdma: *mut doca_rdma,
    f: impl FnOnce(&doca_rdma) -> Result<(), doca_error_t>,
) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let r = unsafe { rdma_ref(rdma) }?;
    if r.ctx.state() != DOCA_CTX_STATE_IDLE {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    f(r)
}

// ---- entry points: object and configuration ----

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_create(dev: *mut doca_dev, rdma: *mut *mut doca_rdma) -> doca_error_t {
    guard_err(|| {
        let d = dev_ref(dev)?;
        if rdma.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = Box::into_raw(Box::new(doca_rdma::new(d)));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(rdma, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_destroy(rdma: *mut doca_rdma) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL rdma pointers come from doca_rdma_create (DOCA contract).
        let r = unsafe { rdma_ref(rdma) }?;
        r.ctx.teardown()?;
        // SAFETY: created by Box::into_raw in create; the ctx is IDLE with no task allocated
        // and disconnected from its PE, so nothing references the object any more. Dropping
        // it drops the (already closed) connections.
        let mut b = unsafe { Box::from_raw(rdma) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_as_ctx(rdma: *mut doca_rdma) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_rdma_destroy.
        match unsafe { rdma_ref(rdma) } {
            // SAFETY: `rdma` is live; the field address stays valid for its life.
            Ok(_) => unsafe { ptr::addr_of_mut!((*rdma).ctx) },
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_permissions(rdma: *mut doca_rdma, permissions: u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe {
            configure(rdma, |r| {
                if permissions & !PERMISSIONS_ALL != 0 {
                    return Err(DOCA_ERROR_INVALID_VALUE);
                }
                r.perms.set(permissions);
                Ok(())
            })
        }
    })
}

/// A requested queue size as the size in use: rounded up to a power of two, as DOCA does
/// (its getters report the rounded size). 0 or more than [`MAX_QUEUE_SIZE`]: INVALID_VALUE.
fn queue_size(size: u32) -> Result<u32, doca_error_t> {
    if size == 0 || size > MAX_QUEUE_SIZE {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(size.next_power_of_two())
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_send_queue_size(rdma: *mut doca_rdma, size: u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(rdma, |r| {
            r.sq_size.set(queue_size(size)?);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_recv_queue_size(rdma: *mut doca_rdma, size: u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(rdma, |r| {
            r.rq_size.set(queue_size(size)?);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_max_num_connections(rdma: *mut doca_rdma, max: u16) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe {
            configure(rdma, |r| {
                if max == 0 {
                    // DOCA: NOT_SUPPORTED below the minimum (one connection). Reason: an RDMA
                    // context without any connection could never carry a task.
                    return Err(crate::sdk_fail!(
                        DOCA_ERROR_NOT_SUPPORTED,
                        "doca_rdma_set_max_num_connections: at least one connection is needed"
                    ));
                }
                r.max_conns.set(max);
                Ok(())
            })
        }
    })
}

// ---- entry points: connections ----

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_export(
    rdma: *mut doca_rdma,
    local_conn_details: *mut *const c_void,
    local_conn_details_size: *mut usize,
    rdma_connection: *mut *mut doca_rdma_connection,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_rdma_destroy.
        let r = unsafe { rdma_ref(rdma) }?;
        if local_conn_details.is_null() || local_conn_details_size.is_null() || rdma_connection.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if r.ctx.state() != DOCA_CTX_STATE_RUNNING {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        r.check_usable(None)?;
        if r.current_count() >= usize::from(r.max_conns.get()) {
            return Err(DOCA_ERROR_FULL);
        }
        let c = r.new_connection()?;
        let (blob, len) = (c.blob().as_ptr(), c.blob().len());
        let cp: *const doca_rdma_connection = c;
        // SAFETY: the three out-pointers were checked non-NULL; writable by the caller's
        // contract. The blob is owned by the connection, which lives until destroy.
        unsafe {
            local_conn_details.write(blob.cast());
            local_conn_details_size.write(len);
            rdma_connection.write(cp as *mut doca_rdma_connection);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_connect(
    rdma: *mut doca_rdma,
    remote_conn_details: *const c_void,
    remote_conn_details_size: usize,
    rdma_connection: *mut doca_rdma_connection,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_rdma_destroy.
        let r = unsafe { rdma_ref(rdma) }?;
        if remote_conn_details.is_null() || remote_conn_details_size == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL connection pointers come from doca_rdma_export (contract).
        let c = unsafe { conn::conn_ref(rdma_connection) }?;
        if !r.owns(c) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        if r.ctx.state() != DOCA_CTX_STATE_RUNNING || c.cycle != r.cycle.get() {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        r.check_usable(Some(c))?;
        if c.state() != ConnState::Exported {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        // SAFETY: non-NULL checked; the caller guarantees that many readable bytes. They are
        // only parsed (BlobReader never reads out of bounds).
        let bytes = unsafe { core::slice::from_raw_parts(remote_conn_details.cast::<u8>(), remote_conn_details_size) };
        let pe = r.ctx.pe().ok_or(DOCA_ERROR_BAD_STATE)?;
        c.connect(bytes, pe)
    })
}
