//! `doca_urom_worker`: one worker process spawned by the daemon, and its command tasks.
//!
//! * Configuration (`set_*`) only while IDLE (`BAD_STATE` otherwise). `max_inflight_tasks` must
//!   be a power of two (default [`super::DEFAULT_MAX_INFLIGHT`]); environment strings are copied
//!   and must be `KEY=VALUE` UTF-8.
//! * Start validates (service set and RUNNING: `BAD_STATE`; plugins the service does not offer:
//!   `NOT_FOUND`; a cpuset outside the service's: `NOT_PERMITTED`), configures the command pool,
//!   opens this worker's own control connection (nobody listening: `NOT_CONNECTED`), sends
//!   `Hello` and `Spawn`, and returns `IN_PROGRESS` (STARTING). Progress then reads the replies:
//!   `Spawned` (with the data connection) makes it RUNNING; `Error` or a hang-up makes the start
//!   fail (STARTING → IDLE), and the code and reason are kept for
//!   `doca_soft_urom_worker_get_start_error` / `..._get_start_error_reason`.
//! * Both connections are registered with the PE in level mode.
//! * Error state: a data-connection hang-up, a control hang-up, or a `WorkerExited` for this
//!   worker fails every in-flight command with `CONNECTION_ABORTED` (and pending domain
//!   requests); later submits fail with `NOT_CONNECTED`. The ctx stays RUNNING until stopped.
//! * Stop sends `Stop` if it can (best effort) and closes both connections at once, so the ctx
//!   reaches IDLE (once the user has freed its tasks) whether or not the daemon is still there;
//!   closing also detaches from the worker on the daemon's side.
//! * The command task kind (its submit and release hooks and the `..._allocate` entry points)
//!   lives here, with the connection that carries the commands; `cmd_task.rs` is the task
//!   type, its buffer memory and its per-task accessors (the layer below, which never names
//!   the worker).

use core::cell::{Cell, RefCell};
use core::ffi::{c_char, CStr};
use core::ptr;
use std::collections::HashMap;
use std::ffi::CString;
use std::hash::{BuildHasherDefault, Hasher};
use std::rc::Rc;

use super::cmd_task::{doca_urom_worker_cmd_task, TaskMemory};
use super::conn::{Conn, Recv};
use super::service::{doca_urom_service, service_ref};
use super::wire::{self, PluginAddr, Reply};
use super::{DEFAULT_MAX_INFLIGHT, MAX_INFLIGHT_LIMIT, PACKET_SLACK};
use crate::ctx::{self, doca_ctx, CtxOps, StartMode};
use crate::ffi::{guard, guard_err, out};
use crate::pe::{doca_pe, FdMode};
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// Hashes the in-flight map's keys, which this ctx hands out itself (`next_key`, one per
/// message: never chosen by a peer), so nothing needs SipHash's resistance to chosen keys,
/// and SipHash's insert and remove were 1.5% of a host's CPU time per offloaded allreduce
/// (`perf record`).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, k: u64) {
        // An odd multiplier: consecutive keys get distinct low bits (hashbrown's bucket
        // index) and well-mixed top bits (its tag).
        self.0 = k.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// `"UROW"`: marks a live worker.
const WORKER_MAGIC: u32 = 0x5552_4f57;

/// The answer to a domain request (`DomainCreate`/`DomainDestroy`) sent through a worker: the
/// worker fills it when the `Notify { plugin: 0 }` arrives (or the connection breaks) and wakes
/// the domain's PE. Shared by the two (Rc); the domain withdraws it when it stops.
pub(crate) struct DomainReply {
    status: Cell<Option<doca_error_t>>,
    pe: Cell<*const doca_pe>,
}

impl DomainReply {
    /// A reply slot that wakes `pe` (the domain's PE) when it is filled.
    pub(crate) fn new(pe: *const doca_pe) -> Rc<DomainReply> {
        Rc::new(DomainReply { status: Cell::new(None), pe: Cell::new(pe) })
    }

    /// The status, once answered.
    pub(crate) fn status(&self) -> Option<doca_error_t> {
        self.status.get()
    }

    /// Stops waking the PE (the domain no longer listens; its PE may go away).
    pub(crate) fn detach(&self) {
        self.pe.set(ptr::null());
    }

    fn fill(&self, status: doca_error_t) {
        if self.status.get().is_none() {
            self.status.set(Some(status));
            // SAFETY: the pointer is the domain's PE, which outlives the domain's connection to
            // it; the domain detaches every reply it holds before it can leave its PE.
            if let Some(pe) = unsafe { self.pe.get().as_ref() } {
                pe.notify_work();
            }
        }
    }
}

/// What a notification answers ([`doca_urom_worker::take_answer`]).
enum Answer<'a> {
    /// A command task and its status: complete it.
    Task(&'a doca_task, doca_error_t),
    /// A domain request's reply: fill it.
    Domain(Rc<DomainReply>, doca_error_t),
    /// Nothing any more.
    Late,
}

/// Where the worker is between start and stop.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    Idle,
    /// `Hello` and `Spawn` sent with these request ids.
    Starting {
        hello: u64,
        spawn: u64,
    },
    Running,
    /// The connection broke: in-flight commands failed, submits refused.
    Broken(doca_error_t),
}

/// `struct doca_urom_worker`.
pub struct doca_urom_worker {
    ctx: doca_ctx,
    magic: u32,
    service: Cell<*const doca_urom_service>,
    req_id: Cell<u64>,
    gid: Cell<u32>,
    plugins: Cell<u64>,
    cpuset: Cell<doca_cpu_set_t>,
    max_inflight: Cell<u32>,
    env: RefCell<Vec<String>>,
    phase: Cell<Phase>,
    ctrl: RefCell<Option<Conn>>,
    data: RefCell<Option<Conn>>,
    /// The id the daemon gave this start (`Spawned`).
    assigned: Cell<Option<u64>>,
    /// The plugins' addresses reported by the worker process (for domains).
    addrs: RefCell<Vec<PluginAddr>>,
    eff_max_msg: Cell<usize>,
    mem: RefCell<Option<TaskMemory>>,
    /// Submitted commands by key.
    inflight: RefCell<HashMap<u64, *const doca_task, BuildHasherDefault<KeyHasher>>>,
    /// Pending domain requests by key.
    domain_waits: RefCell<Vec<(u64, Rc<DomainReply>)>>,
    next_key: Cell<u64>,
    next_req: Cell<u64>,
    start_error: Cell<doca_error_t>,
    start_reason: RefCell<CString>,
}

static WORKER_OPS: CtxOps = CtxOps {
    name: "urom_worker",
    can_connect: None,
    start: worker_start,
    stop: worker_stop,
    stopped: Some(worker_stopped),
    progress: Some(worker_progress),
    has_work: Some(worker_has_work),
    // DOCA's samples need a progress call that reports STOPPING → IDLE (docs/urom-soft.md).
    stop_via_progress: true,
};

/// The worker embedding `ctx`.
///
/// # Safety
/// `ctx` must be the ctx of a `doca_urom_worker` (true for every ctx with WORKER_OPS).
pub(crate) unsafe fn worker_of(ctx: &doca_ctx) -> &doca_urom_worker {
    // SAFETY: workers bind themselves as the owner of their ctx in create.
    unsafe { ctx.owner::<doca_urom_worker>() }
}

impl doca_urom_worker {
    /// The embedded ctx.
    pub(crate) fn ctx(&self) -> &doca_ctx {
        &self.ctx
    }

    fn next_req(&self) -> u64 {
        let r = self.next_req.get().wrapping_add(1);
        self.next_req.set(r);
        r
    }

    fn next_key(&self) -> u64 {
        let k = self.next_key.get().wrapping_add(1);
        self.next_key.set(k);
        k
    }

    pub(crate) fn take_pair(&self) -> Option<(u32, *mut crate::buf::doca_buf, *mut crate::buf::doca_buf)> {
        self.mem.borrow_mut().as_mut()?.take_pair()
    }

    pub(crate) fn return_pair(&self, pair: u32) {
        if let Some(m) = self.mem.borrow_mut().as_mut() {
            m.give_back(pair);
        }
    }

    /// Closes both connections (unregistering them from the PE first).
    fn close_conns(&self) {
        let pe = self.ctx.pe();
        for c in [self.ctrl.borrow_mut().take(), self.data.borrow_mut().take()].into_iter().flatten() {
            if let Some(pe) = pe {
                pe.unregister_fd(c.fd());
                if let Some(fd) = c.wake_fd() {
                    pe.unregister_fd(fd);
                }
            }
            drop(c);
        }
    }

    /// The start failed with `status`: keep why, close, and let progress report IDLE.
    fn fail_start(&self, status: doca_error_t, reason: &str) {
        self.start_error.set(if status == DOCA_SUCCESS { DOCA_ERROR_UNEXPECTED } else { status });
        *self.start_reason.borrow_mut() = CString::new(reason.replace('\0', " ")).unwrap_or_default();
        self.close_conns();
        self.phase.set(Phase::Idle);
        ctx::mark_start_failed(&self.ctx);
    }

    /// Enters the error state: in-flight commands and domain requests fail.
    fn break_with(&self, code: doca_error_t) {
        if let Phase::Broken(_) = self.phase.get() {
            return;
        }
        self.phase.set(Phase::Broken(code));
        self.close_conns();
        let mut tasks: Vec<_> = self.inflight.borrow_mut().drain().collect();
        // Keys grow with every submit: fail them in submission order.
        tasks.sort_unstable_by_key(|&(k, _)| k);
        for (_, t) in tasks {
            // SAFETY: in-flight entries are submitted command tasks of this ctx (removed on
            // completion, cleared by stop before the framework flushes them).
            task::complete(unsafe { &*t }, DOCA_ERROR_CONNECTION_ABORTED);
        }
        let waits: Vec<_> = self.domain_waits.borrow_mut().drain(..).collect();
        for (_, r) in waits {
            r.fill(DOCA_ERROR_CONNECTION_ABORTED);
        }
    }

    /// Submit hook of command tasks.
    pub(crate) fn submit_cmd(&self, t: &doca_task, c: &doca_urom_worker_cmd_task) -> Result<(), doca_error_t> {
        match self.phase.get() {
            Phase::Running => {}
            Phase::Broken(_) => return Err(DOCA_ERROR_NOT_CONNECTED),
            _ => return Err(DOCA_ERROR_BAD_STATE),
        }
        let p = c.plugin();
        if p == 0 || !p.is_power_of_two() || p & self.plugins.get() == 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let payload = c.payload_bytes()?;
        if payload.len() > self.eff_max_msg.get() {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        let key = self.next_key();
        let mut data = self.data.borrow_mut();
        let conn = data.as_mut().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
        conn.send_parts(&[&wire::command_head(key, p, payload.len()), payload]).map_err(|e| match e {
            // The hang-up is noticed (and the others failed) by progress.
            DOCA_ERROR_CONNECTION_ABORTED => DOCA_ERROR_NOT_CONNECTED,
            e => e,
        })?;
        drop(data);
        c.key.set(key);
        self.inflight.borrow_mut().insert(key, t);
        Ok(())
    }

    /// For domains: (worker id, plugin addresses) of a RUNNING, connected worker.
    pub(crate) fn domain_info(&self) -> Result<(u64, Vec<PluginAddr>), doca_error_t> {
        if self.ctx.state() != DOCA_CTX_STATE_RUNNING || self.phase.get() != Phase::Running {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        Ok((self.assigned.get().unwrap_or(self.req_id.get()), self.addrs.borrow().clone()))
    }

    /// For domains: sends the message `build(key)` on the data connection; `reply` (if any) is
    /// filled by the `Notify` with that key. Returns the key.
    pub(crate) fn send_domain(
        &self,
        build: impl FnOnce(u64) -> Vec<u8>,
        reply: Option<Rc<DomainReply>>,
    ) -> Result<u64, doca_error_t> {
        if self.phase.get() != Phase::Running {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        }
        let key = self.next_key();
        let mut data = self.data.borrow_mut();
        let conn = data.as_mut().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
        conn.send(build(key))
            .map_err(|e| if e == DOCA_ERROR_CONNECTION_ABORTED { DOCA_ERROR_NOT_CONNECTED } else { e })?;
        drop(data);
        if let Some(r) = reply {
            self.domain_waits.borrow_mut().push((key, r));
        }
        Ok(key)
    }

    /// For domains: `DomainDestroy` of the domain installed by the `DomainCreate` of `key`.
    /// Its answer is not awaited (it finds no reply registered and is dropped).
    pub(crate) fn send_domain_destroy(&self, key: u64) -> Result<(), doca_error_t> {
        if self.phase.get() != Phase::Running {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        }
        let mut data = self.data.borrow_mut();
        let conn = data.as_mut().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
        conn.send(wire::domain_destroy(key))
    }

    /// Whether commands wait for room in the data socket (tests check the queue is used).
    #[cfg(test)]
    pub(crate) fn data_backlog(&self) -> bool {
        self.data.borrow().as_ref().is_some_and(|c| c.has_backlog())
    }

    /// For domains: forget the reply of `key` (the domain stopped waiting).
    pub(crate) fn withdraw_domain(&self, key: u64) {
        self.domain_waits.borrow_mut().retain(|(k, _)| *k != key);
    }

    /// Who a notification answers: a command task (its response is copied into the task's
    /// memory here, while the packet is borrowed), a domain request, or nobody any more.
    fn take_answer<'a>(&self, n: wire::Notify<'_>) -> Answer<'a> {
        let t = self.inflight.borrow_mut().remove(&n.ctx);
        if let Some(t) = t {
            // SAFETY: as in break_with; in-flight tasks outlive their completion.
            let t = unsafe { &*t };
            // SAFETY: only command tasks are in `inflight`.
            let c = unsafe { t.downcast::<doca_urom_worker_cmd_task>() };
            let mut status = n.status;
            if let Some(mem) = self.mem.borrow().as_ref() {
                if let Err(e) = c.set_response(mem, n.packed) {
                    if status == DOCA_SUCCESS {
                        status = e;
                    }
                }
            }
            return Answer::Task(t, status);
        }
        let r = {
            let mut w = self.domain_waits.borrow_mut();
            w.iter().position(|(k, _)| *k == n.ctx).map(|i| w.remove(i).1)
        };
        // None: a late answer to something already failed or withdrawn.
        r.map_or(Answer::Late, |r| Answer::Domain(r, n.status))
    }

    fn on_ctrl(&self, reply: Reply, fd: Option<std::os::fd::OwnedFd>) {
        let phase = self.phase.get();
        match reply {
            Reply::Welcome { .. } => {}
            Reply::Spawned { req, worker_id, addrs, .. } => {
                let Phase::Starting { spawn, .. } = phase else { return };
                if req != spawn {
                    return;
                }
                let Some(fd) = fd else {
                    self.fail_start(DOCA_ERROR_CONNECTION_ABORTED, "Spawned without a data connection");
                    return;
                };
                let mut conn = match Conn::from_fd(fd, self.eff_max_msg.get() + PACKET_SLACK) {
                    Ok(c) => c,
                    Err(e) => return self.fail_start(e, "data connection unusable"),
                };
                // Commands and notifications through memory; without it, the socket alone.
                if let Err(e) = conn.open_channel() {
                    crate::sdk_log!(WARNING, "urom worker: no shared-memory channel ({e:?}); commands use the socket");
                }
                if let Some(pe) = self.ctx.pe() {
                    let watched = pe.register_fd(conn.fd(), FdMode::Level).and_then(|()| match conn.wake_fd() {
                        Some(fd) => pe.register_fd(fd, FdMode::Eventfd),
                        None => Ok(()),
                    });
                    if let Err(e) = watched {
                        pe.unregister_fd(conn.fd());
                        return self.fail_start(e, "cannot watch the data connection");
                    }
                }
                *self.data.borrow_mut() = Some(conn);
                self.assigned.set(Some(worker_id));
                *self.addrs.borrow_mut() = addrs;
                self.phase.set(Phase::Running);
                ctx::mark_started(&self.ctx);
            }
            Reply::Error { req, status, reason } => {
                if let Phase::Starting { hello, spawn } = phase {
                    if req == hello || req == spawn {
                        self.fail_start(status, &reason);
                    }
                }
            }
            Reply::WorkerExited { worker_id, .. } => {
                if phase == Phase::Running && self.assigned.get() == Some(worker_id) {
                    self.break_with(DOCA_ERROR_CONNECTION_ABORTED);
                }
            }
            Reply::Stopped { .. } | Reply::Workers { .. } => {}
        }
    }

    fn on_ctrl_lost(&self) {
        match self.phase.get() {
            Phase::Starting { .. } => self.fail_start(DOCA_ERROR_NOT_CONNECTED, "the daemon closed the connection"),
            Phase::Running => self.break_with(DOCA_ERROR_CONNECTION_ABORTED),
            Phase::Idle | Phase::Broken(_) => self.close_conns(),
        }
    }

    /// Reads up to `budget` packets from the control connection (only if `pe` says it may
    /// be readable: see [`doca_pe::fd_ready`]).
    fn pump_ctrl(&self, pe: Option<&doca_pe>, budget: usize) -> bool {
        let mut did = false;
        for _ in 0..budget {
            let mut ctrl = self.ctrl.borrow_mut();
            let Some(conn) = ctrl.as_mut() else { return did };
            let flushed = conn.flush();
            let r = if flushed.is_err() { Recv::HangUp } else { conn.recv_if_ready(pe) };
            did |= matches!(flushed, Ok(true));
            match r {
                Recv::Empty => return did,
                Recv::HangUp => {
                    drop(ctrl);
                    self.on_ctrl_lost();
                    return true;
                }
                Recv::Packet(n, fd) => {
                    let reply = wire::decode_reply(conn.packet(n));
                    drop(ctrl);
                    did = true;
                    match reply {
                        Some(reply) => self.on_ctrl(reply, fd),
                        None => {
                            self.on_ctrl_lost();
                            return true;
                        }
                    }
                }
            }
        }
        did
    }

    /// Reads up to `budget` packets from the data connection (as [`Self::pump_ctrl`]).
    fn pump_data(&self, pe: Option<&doca_pe>, budget: usize) -> bool {
        let mut did = false;
        for _ in 0..budget {
            let mut data = self.data.borrow_mut();
            let Some(conn) = data.as_mut() else { return did };
            let flushed = conn.flush();
            let r = if flushed.is_err() { Recv::HangUp } else { conn.recv_if_ready(pe) };
            did |= matches!(flushed, Ok(true));
            match r {
                Recv::Empty => return did,
                Recv::HangUp => {
                    drop(data);
                    self.break_with(DOCA_ERROR_CONNECTION_ABORTED);
                    return true;
                }
                Recv::Packet(n, _fd) => {
                    did = true;
                    // The notification is read in place; the answer's completion runs once the
                    // connection is no longer borrowed (its callback may submit again).
                    let answer = wire::decode_notify(conn.packet(n)).map(|nt| self.take_answer(nt));
                    drop(data);
                    match answer {
                        Some(Answer::Task(t, status)) => task::complete(t, status),
                        Some(Answer::Domain(r, status)) => r.fill(status),
                        Some(Answer::Late) => {}
                        None => {
                            self.break_with(DOCA_ERROR_CONNECTION_ABORTED);
                            return true;
                        }
                    }
                }
            }
        }
        did
    }
}

unsafe fn worker_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let w = unsafe { worker_of(ctx) };
    let sp = w.service.get();
    if sp.is_null() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    // SAFETY: the service counts this worker as a user and cannot be destroyed before it.
    let s = unsafe { service_ref(sp) }?;
    // Only the shared snapshot is read: the service may live on another thread.
    let info = s.info().ok_or(DOCA_ERROR_BAD_STATE)?;
    if w.plugins.get() & !info.plugin_mask != 0 {
        return Err(DOCA_ERROR_NOT_FOUND);
    }
    if !w.cpuset.get().is_subset_of(&info.cpuset) {
        return Err(DOCA_ERROR_NOT_PERMITTED);
    }
    let eff = info.eff_max_msg;
    let n = w.max_inflight.get();
    task::configure::<doca_urom_worker_cmd_task>(ctx, None, None, n)?;
    {
        let mut mem = w.mem.borrow_mut();
        if !mem.as_ref().is_some_and(|m| m.fits(n, eff)) {
            // All tasks are free while IDLE, so the old buffers can go.
            *mem = None;
            *mem = Some(TaskMemory::new(n, eff)?);
        }
    }
    w.eff_max_msg.set(eff);
    let mut conn = Conn::connect(&info.socket, eff.max(64 << 10) + PACKET_SLACK)?;
    let (max_workers, max_msg) = (info.max_workers, info.max_msg);
    let (hello, spawn) = (w.next_req(), w.next_req());
    let sent = conn.send(wire::hello(hello, std::process::id(), max_workers, max_msg as u64)).and_then(|_| {
        conn.send(wire::spawn(spawn, w.req_id.get(), w.gid.get(), w.plugins.get(), &w.cpuset.get(), n, &w.env.borrow()))
    });
    if let Err(e) = sent {
        // Refused at accept (the daemon answered and closed): report its status.
        if let Some(status) = super::service::pending_refusal(&mut conn) {
            return Err(status);
        }
        return Err(if e == DOCA_ERROR_CONNECTION_ABORTED { DOCA_ERROR_NOT_CONNECTED } else { e });
    }
    // The control connection carries the worker's start and end; commands take the data
    // connection.
    conn.set_control();
    let pe = ctx.pe().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
    pe.register_fd(conn.fd(), FdMode::Level)?;
    *w.ctrl.borrow_mut() = Some(conn);
    w.inflight.borrow_mut().clear();
    w.assigned.set(None);
    w.addrs.borrow_mut().clear();
    w.start_error.set(DOCA_SUCCESS);
    *w.start_reason.borrow_mut() = CString::default();
    w.phase.set(Phase::Starting { hello, spawn });
    Ok(StartMode::Async)
}

unsafe fn worker_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let w = unsafe { worker_of(ctx) };
    if let Some(id) = w.assigned.get() {
        let req = w.next_req();
        if let Some(c) = w.ctrl.borrow_mut().as_mut() {
            // Best effort: closing the connection right after detaches us anyway.
            let _ = c.send(wire::stop(req, id));
        }
    }
    w.close_conns();
    // The framework flushes the submitted commands right after this.
    w.inflight.borrow_mut().clear();
    let waits: Vec<_> = w.domain_waits.borrow_mut().drain(..).collect();
    for (_, r) in waits {
        r.fill(DOCA_ERROR_NOT_CONNECTED);
    }
    w.phase.set(Phase::Idle);
}

unsafe fn worker_stopped(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let w = unsafe { worker_of(ctx) };
    w.close_conns();
    w.inflight.borrow_mut().clear();
    w.assigned.set(None);
    w.phase.set(Phase::Idle);
}

unsafe fn worker_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let w = unsafe { worker_of(ctx) };
    // Bounded so one busy worker cannot starve the other ctxs of this PE.
    let pe = ctx.pe();
    let a = w.pump_ctrl(pe, 16);
    let b = w.pump_data(pe, 64);
    a || b
}

unsafe fn worker_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let w = unsafe { worker_of(ctx) };
    // Readable sockets wake the PE by themselves (level mode); a send backlog needs polling.
    // The PE calls this when it arms: the channel's writer is told to wake us from now on
    // (its eventfd is in the PE's set), unless a message already waits.
    w.ctrl.borrow().as_ref().is_some_and(|c| c.has_backlog())
        || w.data.borrow().as_ref().is_some_and(|c| c.has_backlog() || c.ready_to_sleep_or_work())
}

/// Validates a worker pointer from C.
///
/// # Safety
/// A non-NULL `p` must point to a worker created by this provider and not destroyed.
pub(crate) unsafe fn worker_ref<'a>(p: *const doca_urom_worker) -> Result<&'a doca_urom_worker, doca_error_t> {
    // SAFETY: per the contract.
    let w = unsafe { crate::ffi::obj(p) }?;
    if w.magic != WORKER_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(w)
}

/// Runs `f` on an IDLE worker; BAD_STATE otherwise.
///
/// # Safety
/// As [`worker_ref`].
unsafe fn configure(
    p: *mut doca_urom_worker,
    f: impl FnOnce(&doca_urom_worker) -> Result<(), doca_error_t>,
) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let w = unsafe { worker_ref(p) }?;
    if w.ctx.state() != DOCA_CTX_STATE_IDLE {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    f(w)
}

// ---- the command task kind: the worker owns how a command moves (cmd_task.rs is the type) ----

static CMD_KIND: TaskKind =
    TaskKind::new::<doca_urom_worker_cmd_task>("urom.worker_cmd", cmd_submit_hook, Some(cmd_release_hook), None);

// SAFETY: #[repr(C)] with the doca_task header first; KIND is built with TaskKind::new::<Self>.
unsafe impl TaskType for doca_urom_worker_cmd_task {
    const KIND: &'static TaskKind = &CMD_KIND;
    fn with_header(base: doca_task) -> Self {
        doca_urom_worker_cmd_task::idle(base)
    }
}

unsafe fn cmd_submit_hook(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only called for command tasks, whose ctx is a worker ctx.
    let (c, w) = unsafe { (t.downcast::<doca_urom_worker_cmd_task>(), worker_of(t.ctx())) };
    w.submit_cmd(t, c)
}

unsafe fn cmd_release_hook(t: &doca_task) {
    // SAFETY: only called for command tasks, whose ctx is a worker ctx.
    let (c, w) = unsafe { (t.downcast::<doca_urom_worker_cmd_task>(), worker_of(t.ctx())) };
    let pair = c.detach_pair();
    if pair != u32::MAX {
        w.return_pair(pair);
    }
}

// ---- entry points ----

/// `doca_urom_worker_cmd_task_allocate`: a task with no plugin yet (set it with
/// `doca_urom_worker_cmd_task_set_plugin` before submitting; a submit without one is
/// `DOCA_ERROR_INVALID_VALUE`).
#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_allocate(
    worker: *mut doca_urom_worker,
    task: *mut *mut doca_urom_worker_cmd_task,
) -> doca_error_t {
    // SAFETY: forwarded; the caller's contract is the same.
    unsafe { doca_urom_worker_cmd_task_allocate_init(worker, 0, task) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_allocate_init(
    worker: *mut doca_urom_worker,
    plugin: u64,
    task: *mut *mut doca_urom_worker_cmd_task,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL worker pointers come from doca_urom_worker_create (contract).
        let w = unsafe { worker_ref(worker) }?;
        if task.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let t = task::alloc::<doca_urom_worker_cmd_task>(w.ctx(), doca_data::from_u64(0))?;
        // SAFETY: a freshly allocated slot of this pool, owned by us until written out.
        let c = unsafe { t.as_ref() };
        let Some((pair, p, r)) = w.take_pair() else {
            // Cannot happen (one pair per pool slot); give the slot back rather than hand out
            // a task without buffers.
            // SAFETY: the task was allocated just above and is ours.
            unsafe { crate::task::doca_task_free(t.as_ptr().cast()) };
            return Err(DOCA_ERROR_NO_MEMORY);
        };
        // SAFETY: the task is ours (allocated, not handed out yet): no other reference to its
        // user data exists.
        unsafe { c.assign(pair, p, r, plugin) };
        task::set_callbacks(c, None, None);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(task, t.as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_create(worker: *mut *mut doca_urom_worker) -> doca_error_t {
    guard_err(|| {
        if worker.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = Box::into_raw(Box::new(doca_urom_worker {
            ctx: doca_ctx::new(&WORKER_OPS),
            magic: WORKER_MAGIC,
            service: Cell::new(ptr::null()),
            req_id: Cell::new(DOCA_UROM_WORKER_ID_ANY),
            gid: Cell::new(0),
            plugins: Cell::new(0),
            cpuset: Cell::new(doca_cpu_set_t::empty()),
            max_inflight: Cell::new(DEFAULT_MAX_INFLIGHT),
            env: RefCell::new(Vec::new()),
            phase: Cell::new(Phase::Idle),
            ctrl: RefCell::new(None),
            data: RefCell::new(None),
            assigned: Cell::new(None),
            addrs: RefCell::new(Vec::new()),
            eff_max_msg: Cell::new(DOCA_UROM_DEFAULT_MAX_COMM_MSG_SIZE),
            mem: RefCell::new(None),
            inflight: RefCell::new(HashMap::default()),
            domain_waits: RefCell::new(Vec::new()),
            next_key: Cell::new(0),
            next_req: Cell::new(0),
            start_error: Cell::new(DOCA_SUCCESS),
            start_reason: RefCell::new(CString::default()),
        }));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(worker, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_destroy(worker: *mut doca_urom_worker) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL worker pointers come from doca_urom_worker_create (contract).
        let w = unsafe { worker_ref(worker) }?;
        w.ctx.teardown()?;
        // SAFETY: a set service counts this worker and is therefore still alive.
        if let Ok(s) = unsafe { service_ref(w.service.get()) } {
            s.remove_user();
        }
        // SAFETY: created by Box::into_raw in create; IDLE, no task allocated, disconnected from
        // its PE: nothing references the object any more (a domain using it is the caller's
        // contract violation, as in DOCA).
        let mut b = unsafe { Box::from_raw(worker) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_as_ctx(worker: *mut doca_urom_worker) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_urom_worker_destroy.
        match unsafe { worker_ref(worker) } {
            // SAFETY: `worker` is live; the field address stays valid for its life.
            Ok(_) => unsafe { ptr::addr_of_mut!((*worker).ctx) },
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_service(
    worker: *mut doca_urom_worker,
    service: *mut doca_urom_service,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract (argument checks before state checks).
        unsafe { worker_ref(worker) }?;
        // SAFETY: as above.
        let s = unsafe { service_ref(service) }?;
        // SAFETY: forwarded contract.
        unsafe {
            configure(worker, |w| {
                // SAFETY: a previously set service counts this worker, so it is alive.
                if let Ok(old) = service_ref(w.service.get()) {
                    old.remove_user();
                }
                s.add_user();
                w.service.set(s);
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_id(worker: *mut doca_urom_worker, worker_id: u64) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(worker, |w| {
            w.req_id.set(worker_id);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_gid(worker: *mut doca_urom_worker, gid: u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(worker, |w| {
            w.gid.set(gid);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_plugins(worker: *mut doca_urom_worker, plugins: u64) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(worker, |w| {
            w.plugins.set(plugins);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_cpuset(
    worker: *mut doca_urom_worker,
    cpuset: doca_cpu_set_t,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(worker, |w| {
            w.cpuset.set(cpuset);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_max_inflight_tasks(
    worker: *mut doca_urom_worker,
    max_tasks: u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(worker, |w| {
            if !max_tasks.is_power_of_two() || max_tasks > MAX_INFLIGHT_LIMIT {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            w.max_inflight.set(max_tasks);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_set_env(
    worker: *mut doca_urom_worker,
    env: *const *mut c_char,
    count: usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { worker_ref(worker) }?;
        if env.is_null() && count != 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut v = Vec::with_capacity(count);
        for i in 0..count {
            // SAFETY: non-NULL array of `count` entries (the caller's contract).
            let p = unsafe { *env.add(i) };
            if p.is_null() {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            // SAFETY: non-NULL; the caller passes NUL-terminated strings.
            let s = unsafe { CStr::from_ptr(p) }.to_str().map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
            match s.split_once('=') {
                Some((k, _)) if !k.is_empty() => v.push(s.to_string()),
                _ => return Err(DOCA_ERROR_INVALID_VALUE),
            }
        }
        // SAFETY: forwarded contract.
        unsafe {
            configure(worker, |w| {
                *w.env.borrow_mut() = v;
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_get_id(worker: *mut doca_urom_worker, worker_id: *mut u64) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let w = unsafe { worker_ref(worker) }?;
        let id = match (w.ctx.state(), w.assigned.get()) {
            (DOCA_CTX_STATE_RUNNING, Some(id)) => id,
            _ => w.req_id.get(),
        };
        // SAFETY: `out` checks NULL; writable by the caller's contract.
        unsafe { out(worker_id, id) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_get_gid(worker: *mut doca_urom_worker, gid: *mut u32) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let w = unsafe { worker_ref(worker) }?;
        // SAFETY: `out` checks NULL; writable by the caller's contract.
        unsafe { out(gid, w.gid.get()) }
    })
}

/// Soft extension: why the last start of `worker` failed (`DOCA_SUCCESS` if it did not).
#[no_mangle]
pub unsafe extern "C" fn doca_soft_urom_worker_get_start_error(
    worker: *mut doca_urom_worker,
    error: *mut doca_error_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let w = unsafe { worker_ref(worker) }?;
        // SAFETY: `out` checks NULL; writable by the caller's contract.
        unsafe { out(error, w.start_error.get()) }
    })
}

/// Soft extension: the daemon's reason for the last failed start (empty string if none). The
/// string belongs to the worker and stays valid until its next start or destroy.
#[no_mangle]
pub unsafe extern "C" fn doca_soft_urom_worker_get_start_error_reason(
    worker: *mut doca_urom_worker,
    reason: *mut *const c_char,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let w = unsafe { worker_ref(worker) }?;
        let p = w.start_reason.borrow().as_ptr();
        // SAFETY: `out` checks NULL; writable by the caller's contract. The CString's buffer is
        // replaced only by a start or a failed start.
        unsafe { out(reason, p) }
    })
}
