//! `doca_urom_service`: the connection to the daemon, its plugin list and cpuset, and the
//! get-workers-by-gid requests.
//!
//! * Configuration (`set_dev`, `set_max_comm_msg_size`, `set_max_workers`, the soft socket path)
//!   only while IDLE (`BAD_STATE` otherwise). A device is required to start (`BAD_STATE` without
//!   one: the service file is matched on its PCI address).
//! * Start is synchronous: resolve the socket, connect (nobody listening: `NOT_CONNECTED`), send
//!   `Hello`, wait up to [`super::WELCOME_TIMEOUT`] for `Welcome` (`Error` from the daemon: its
//!   status, e.g. `AUTHENTICATION`; a hang-up: `NOT_CONNECTED`; no answer in time:
//!   `TIME_OUT`). The plugin list is then an array owned by the service, valid (same pointer)
//!   until the service stops.
//! * The control connection is registered with the PE in level mode: a reply or a hang-up
//!   makes an armed PE's handle readable; progress reads it. `WorkerExited` is ignored here
//!   (workers watch their own connections). After a hang-up the socket is unregistered and
//!   closed; the ctx stays RUNNING until stopped.
//! * Stop closes the connection; the framework flushes submitted gid tasks.
//! * The get-workers-by-gid task kind (its hooks and the `..._allocate` entry points) lives
//!   here, with the connection that carries the requests; `gid_task.rs` is the task type and
//!   its per-task accessors (the layer below, which never names the service).

use core::cell::{Cell, RefCell};
use core::ffi::{c_char, CStr};
use core::ptr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::conn::{Conn, Recv};
use super::gid_task::doca_urom_service_get_workers_by_gid_task;
use super::wire::{self, Reply};
use super::{resolve, DEFAULT_MAX_WORKERS, MAX_COMM_MSG_SIZE_LIMIT, PACKET_SLACK, PROTO_VERSION, WELCOME_TIMEOUT};
use crate::ctx::{doca_ctx, CtxOps, StartMode};
use crate::dev::{dev_ref, doca_dev, DevRef};
use crate::ffi::{guard, guard_err, out};
use crate::pe::FdMode;
use crate::task::{self, doca_task, SubmitMode, TaskKind, TaskType};
use crate::types::*;

/// `"UROS"`: marks a live service.
const SERVICE_MAGIC: u32 = 0x5552_4f53;

/// The state of the control connection while the ctx is not IDLE.
enum Link {
    /// Not started (IDLE).
    Down,
    /// Connected and registered with the PE.
    Up(Conn),
    /// The daemon hung up (or broke the protocol); the socket is closed.
    Lost,
}

/// `struct doca_urom_service`.
pub struct doca_urom_service {
    ctx: doca_ctx,
    magic: u32,
    dev: RefCell<Option<DevRef>>,
    max_msg_size: Cell<usize>,
    max_workers: Cell<u32>,
    socket_path: RefCell<Option<PathBuf>>,
    /// Workers whose service this is (destroy refuses while any).
    users: AtomicUsize,
    link: RefCell<Link>,
    /// What this start learned, while RUNNING. Workers read it at their start, possibly on
    /// other threads (each worker has its own connection and PE), hence a mutex and an `Arc`.
    info: Mutex<Option<Arc<ServiceInfo>>>,
    /// Submitted gid tasks by request id, oldest first.
    pending: RefCell<Vec<(u64, *const doca_task)>>,
    next_req: Cell<u64>,
}

/// The ctx-kind descriptor of the service.
static SERVICE_OPS: CtxOps = CtxOps {
    name: "urom_service",
    can_connect: None,
    start: service_start,
    stop: service_stop,
    stopped: None,
    progress: Some(service_progress),
    has_work: Some(service_has_work),
    stop_via_progress: false,
};

impl doca_urom_service {
    /// The embedded ctx.
    pub(crate) fn ctx(&self) -> &doca_ctx {
        &self.ctx
    }

    /// What the running service learned from the daemon; None unless RUNNING.
    pub(crate) fn info(&self) -> Option<Arc<ServiceInfo>> {
        self.info.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn add_user(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn remove_user(&self) {
        self.users.fetch_sub(1, Ordering::Relaxed);
    }

    fn next_req(&self) -> u64 {
        let r = self.next_req.get().wrapping_add(1);
        self.next_req.set(r);
        r
    }

    /// Sends `WorkersByGid` for a submitted task (its submit hook).
    pub(crate) fn submit_gid(&self, t: &doca_task, gid: u32) -> Result<(), doca_error_t> {
        let req = self.next_req();
        let mut link = self.link.borrow_mut();
        let Link::Up(conn) = &mut *link else {
            return Err(DOCA_ERROR_NOT_CONNECTED);
        };
        match conn.send(wire::workers_by_gid(req, gid)) {
            Ok(()) => {}
            Err(DOCA_ERROR_CONNECTION_ABORTED) => {
                // The daemon is gone: progress notices the hang-up and fails the others.
                return Err(DOCA_ERROR_NOT_CONNECTED);
            }
            Err(e) => return Err(e),
        }
        drop(link);
        self.pending.borrow_mut().push((req, t));
        Ok(())
    }

    /// The daemon hung up: close the socket, fail every pending gid task.
    fn lose_link(&self) {
        let old = core::mem::replace(&mut *self.link.borrow_mut(), Link::Lost);
        if let Link::Up(conn) = old {
            if let Some(pe) = self.ctx.pe() {
                pe.unregister_fd(conn.fd());
            }
        }
        let pending: Vec<_> = self.pending.borrow_mut().drain(..).collect();
        for (_, t) in pending {
            // SAFETY: pending entries are submitted gid tasks of this ctx (removed when they
            // complete and cleared by stop before the framework flushes them).
            task::complete(unsafe { &*t }, DOCA_ERROR_CONNECTION_ABORTED);
        }
    }

    /// Completes the pending task of request `req`, if any.
    fn finish(&self, req: u64, status: doca_error_t, ids: Vec<u64>) {
        let t = {
            let mut p = self.pending.borrow_mut();
            match p.iter().position(|(r, _)| *r == req) {
                Some(i) => p.remove(i).1,
                None => return,
            }
        };
        // SAFETY: as in lose_link.
        let t = unsafe { &*t };
        // SAFETY: only gid tasks are pending here.
        let g = unsafe { t.downcast::<doca_urom_service_get_workers_by_gid_task>() };
        g.set_result(if status == DOCA_SUCCESS { ids } else { Vec::new() });
        task::complete(t, status);
    }
}

/// What a service start learned: immutable, shared with the workers that start meanwhile.
pub(crate) struct ServiceInfo {
    /// The daemon's socket (workers open their own connections to it).
    pub socket: PathBuf,
    /// The plugin array handed out by `get_plugins_list`.
    pub plugins: Vec<doca_urom_service_plugin_info>,
    /// The OR of the plugin ids.
    pub plugin_mask: u64,
    /// The daemon's cpuset.
    pub cpuset: doca_cpu_set_t,
    /// The effective maximum message size (the smaller of ours and the daemon's).
    pub eff_max_msg: usize,
    /// What every `Hello` carries: our worker limit and message size.
    pub max_workers: u32,
    pub max_msg: usize,
}

/// The service embedding `ctx`.
///
/// # Safety
/// `ctx` must be the ctx of a `doca_urom_service` (true for every ctx with SERVICE_OPS).
pub(crate) unsafe fn service_of(ctx: &doca_ctx) -> &doca_urom_service {
    // SAFETY: services bind themselves as the owner of their ctx in create.
    unsafe { ctx.owner::<doca_urom_service>() }
}

/// The status of an `Error` the daemon already sent on `conn` (a refusal at accept), if any.
pub(crate) fn pending_refusal(conn: &mut Conn) -> Option<doca_error_t> {
    match conn.recv() {
        Recv::Packet(n, _) => match wire::decode_reply(conn.packet(n)) {
            Some(Reply::Error { status, .. }) if status != DOCA_SUCCESS => Some(status),
            _ => None,
        },
        _ => None,
    }
}

/// Connects and waits for `Welcome`; on success, the connection and what it taught.
fn handshake(s: &doca_urom_service) -> Result<(Conn, ServiceInfo), doca_error_t> {
    let pci = {
        let dev = s.dev.borrow();
        let d = dev.as_ref().ok_or(DOCA_ERROR_BAD_STATE)?;
        d.dev().devinfo().pci_addr().to_string()
    };
    let path = resolve::resolve_from_env(s.socket_path.borrow().clone(), &pci)?;
    let (max_workers, max_msg) = (s.max_workers.get(), s.max_msg_size.get());
    // The Welcome's plugin list does not depend on our message size: leave room for it.
    let mut conn = Conn::connect(&path, max_msg.max(64 << 10) + PACKET_SLACK)?;
    let req = s.next_req();
    // A daemon that refuses us answers `Error` at once and closes, possibly before our Hello
    // reaches it; the send then fails but the refusal is still queued for us. So send errors
    // are not the verdict: the reply (or a hang-up, NOT_CONNECTED) is.
    let _ = conn.send(wire::hello(req, std::process::id(), max_workers, max_msg as u64));
    let deadline = Instant::now() + WELCOME_TIMEOUT;
    loop {
        let _ = conn.flush();
        let (n, _fd) = match conn.recv_until(deadline) {
            None => return Err(DOCA_ERROR_TIME_OUT),
            Some(Recv::HangUp) => return Err(DOCA_ERROR_NOT_CONNECTED),
            Some(Recv::Empty) => continue,
            Some(Recv::Packet(n, fd)) => (n, fd),
        };
        match wire::decode_reply(conn.packet(n)) {
            Some(Reply::Welcome { req: r, proto, max_msg_size, cpuset, plugins, .. }) if r == req => {
                if proto != PROTO_VERSION {
                    return Err(DOCA_ERROR_UNSUPPORTED_VERSION);
                }
                let eff = (max_msg_size.min(max_msg as u64) as usize).max(1);
                let list: Vec<_> = plugins
                    .iter()
                    .map(|p| {
                        let mut info = doca_urom_service_plugin_info {
                            id: p.id,
                            version: p.version,
                            plugin_name: [0; DOCA_UROM_PLUGIN_NAME_MAX_LEN],
                        };
                        for (d, b) in
                            info.plugin_name.iter_mut().zip(p.name.bytes().take(DOCA_UROM_PLUGIN_NAME_MAX_LEN - 1))
                        {
                            *d = b as c_char;
                        }
                        info
                    })
                    .collect();
                let info = ServiceInfo {
                    socket: path,
                    plugin_mask: list.iter().fold(0, |m, p| m | p.id),
                    plugins: list,
                    cpuset: wire::cpuset_from_wire(&cpuset),
                    eff_max_msg: eff,
                    max_workers,
                    max_msg,
                };
                return Ok((conn, info));
            }
            Some(Reply::Error { status, .. }) => {
                return Err(if status == DOCA_SUCCESS { DOCA_ERROR_UNEXPECTED } else { status });
            }
            Some(Reply::WorkerExited { .. }) => continue,
            // Anything else before Welcome breaks the protocol.
            _ => return Err(DOCA_ERROR_NOT_CONNECTED),
        }
    }
}

unsafe fn service_start(ctx: &doca_ctx) -> Result<StartMode, doca_error_t> {
    // SAFETY: ops contract.
    let s = unsafe { service_of(ctx) };
    if s.dev.borrow().is_none() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    task::configure::<doca_urom_service_get_workers_by_gid_task>(ctx, None, None, super::GID_TASKS)?;
    let (mut conn, info) = handshake(s)?;
    // Service tasks are answered within the daemon's own time (a worker's start is a fork):
    // the answers need no microsecond look.
    conn.set_control();
    let pe = ctx.pe().ok_or(DOCA_ERROR_NOT_CONNECTED)?;
    pe.register_fd(conn.fd(), FdMode::Level)?;
    s.pending.borrow_mut().clear();
    *s.info.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(info));
    *s.link.borrow_mut() = Link::Up(conn);
    Ok(StartMode::Sync)
}

unsafe fn service_stop(ctx: &doca_ctx) {
    // SAFETY: ops contract.
    let s = unsafe { service_of(ctx) };
    let old = core::mem::replace(&mut *s.link.borrow_mut(), Link::Down);
    if let Link::Up(conn) = old {
        if let Some(pe) = ctx.pe() {
            pe.unregister_fd(conn.fd());
        }
        drop(conn);
    }
    // The framework flushes the submitted tasks right after this.
    s.pending.borrow_mut().clear();
    *s.info.lock().unwrap_or_else(|e| e.into_inner()) = None;
}

unsafe fn service_progress(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let s = unsafe { service_of(ctx) };
    let mut did = false;
    // Bounded so one busy connection cannot starve the other ctxs of this PE.
    for _ in 0..64 {
        let mut link = s.link.borrow_mut();
        let Link::Up(conn) = &mut *link else {
            return did;
        };
        match conn.flush() {
            Ok(d) => did |= d,
            Err(_) => {
                drop(link);
                s.lose_link();
                return true;
            }
        }
        let (n, _fd) = match conn.recv_if_ready(ctx.pe()) {
            Recv::Empty => return did,
            Recv::HangUp => {
                drop(link);
                s.lose_link();
                return true;
            }
            Recv::Packet(n, fd) => (n, fd),
        };
        let reply = wire::decode_reply(conn.packet(n));
        drop(link);
        did = true;
        match reply {
            Some(Reply::Workers { req, ids }) => s.finish(req, DOCA_SUCCESS, ids),
            Some(Reply::Error { req, status, .. }) => {
                s.finish(req, if status == DOCA_SUCCESS { DOCA_ERROR_UNEXPECTED } else { status }, Vec::new())
            }
            // Worker deaths matter on the workers' own connections.
            Some(Reply::WorkerExited { .. }) => {}
            Some(_) | None => {
                // A reply we never asked for on this connection, or an undecodable packet.
                s.lose_link();
                return true;
            }
        }
    }
    did
}

unsafe fn service_has_work(ctx: &doca_ctx) -> bool {
    // SAFETY: ops contract.
    let s = unsafe { service_of(ctx) };
    // Readable data wakes the PE by itself (level mode); only a send backlog needs polling.
    matches!(&*s.link.borrow(), Link::Up(c) if c.has_backlog())
}

/// Validates a service pointer from C.
///
/// # Safety
/// A non-NULL `p` must point to a service created by this provider and not destroyed.
pub(crate) unsafe fn service_ref<'a>(p: *const doca_urom_service) -> Result<&'a doca_urom_service, doca_error_t> {
    // SAFETY: per the contract.
    let s = unsafe { crate::ffi::obj(p) }?;
    if s.magic != SERVICE_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(s)
}

/// Runs `f` on an IDLE service; BAD_STATE otherwise.
///
/// # Safety
/// As [`service_ref`].
unsafe fn configure(
    p: *mut doca_urom_service,
    f: impl FnOnce(&doca_urom_service) -> Result<(), doca_error_t>,
) -> Result<(), doca_error_t> {
    // SAFETY: forwarded contract.
    let s = unsafe { service_ref(p) }?;
    if s.ctx.state() != DOCA_CTX_STATE_IDLE {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    f(s)
}

// ---- the get-workers-by-gid task kind: the service owns how a request moves (gid_task.rs is
// the type) ----

static GID_KIND: TaskKind = TaskKind::new::<doca_urom_service_get_workers_by_gid_task>(
    "urom.get_workers_by_gid",
    gid_submit_hook,
    Some(gid_release_hook),
    Some(gid_release_hook),
);

// SAFETY: #[repr(C)] with the doca_task header first; KIND is built with TaskKind::new::<Self>.
unsafe impl TaskType for doca_urom_service_get_workers_by_gid_task {
    const KIND: &'static TaskKind = &GID_KIND;
    fn with_header(base: doca_task) -> Self {
        doca_urom_service_get_workers_by_gid_task::idle(base)
    }
}

unsafe fn gid_submit_hook(t: &doca_task, _mode: SubmitMode) -> Result<(), doca_error_t> {
    // SAFETY: this hook is only called for gid tasks, whose ctx is a service ctx.
    let (g, s) = unsafe { (t.downcast::<doca_urom_service_get_workers_by_gid_task>(), service_of(t.ctx())) };
    g.clear_result();
    s.submit_gid(t, g.gid())
}

unsafe fn gid_release_hook(t: &doca_task) {
    // SAFETY: only called for gid tasks.
    let g = unsafe { t.downcast::<doca_urom_service_get_workers_by_gid_task>() };
    g.free_result();
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_allocate_init(
    service: *mut doca_urom_service,
    gid: u32,
    cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
    task: *mut *mut doca_urom_service_get_workers_by_gid_task,
) -> doca_error_t {
    // SAFETY: forwarded; the caller's contract is the same.
    unsafe { allocate(service, gid, cb, task, true) }
}

/// The split form of `allocate_init`: a task with gid 0 and no callback; set them with
/// `doca_urom_service_get_workers_by_gid_task_set_gid` / `_set_cb` before submitting (a submit
/// without a callback is `DOCA_ERROR_INVALID_VALUE`: its result could never be delivered).
#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_workers_by_gid_task_allocate(
    service: *mut doca_urom_service,
    task: *mut *mut doca_urom_service_get_workers_by_gid_task,
) -> doca_error_t {
    // SAFETY: forwarded; the caller's contract is the same.
    unsafe { allocate(service, 0, None, task, false) }
}

/// Both allocation forms: `allocate_init` requires the callback, `allocate` leaves it unset.
///
/// # Safety
/// As `doca_urom_service_get_workers_by_gid_task_allocate_init`.
unsafe fn allocate(
    service: *mut doca_urom_service,
    gid: u32,
    cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
    task: *mut *mut doca_urom_service_get_workers_by_gid_task,
    cb_required: bool,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL service pointers come from doca_urom_service_create (contract).
        let s = unsafe { service_ref(service) }?;
        if task.is_null() || (cb_required && cb.is_none()) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let t = task::alloc::<doca_urom_service_get_workers_by_gid_task>(s.ctx(), doca_data::from_u64(0))?;
        // SAFETY: a freshly allocated slot of this pool, owned by us until written out.
        let g = unsafe { t.as_ref() };
        g.reset(gid);
        task::set_callbacks(g, cb, cb);
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(task, t.as_ptr()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_create(service: *mut *mut doca_urom_service) -> doca_error_t {
    guard_err(|| {
        if service.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let raw = Box::into_raw(Box::new(doca_urom_service {
            ctx: doca_ctx::new(&SERVICE_OPS),
            magic: SERVICE_MAGIC,
            dev: RefCell::new(None),
            max_msg_size: Cell::new(DOCA_UROM_DEFAULT_MAX_COMM_MSG_SIZE),
            max_workers: Cell::new(DEFAULT_MAX_WORKERS),
            socket_path: RefCell::new(None),
            users: AtomicUsize::new(0),
            link: RefCell::new(Link::Down),
            info: Mutex::new(None),
            pending: RefCell::new(Vec::new()),
            next_req: Cell::new(0),
        }));
        // SAFETY: `raw` was just created from a Box; only shared access follows.
        unsafe { (*raw).ctx.bind_owner(raw) };
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(service, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_destroy(service: *mut doca_urom_service) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL service pointers come from doca_urom_service_create (DOCA contract).
        let s = unsafe { service_ref(service) }?;
        if s.users.load(Ordering::Relaxed) != 0 {
            return Err(DOCA_ERROR_IN_USE);
        }
        s.ctx.teardown()?;
        // SAFETY: created by Box::into_raw in create; IDLE, no task allocated, disconnected
        // from its PE and no worker refers to it: nothing references the object any more.
        let mut b = unsafe { Box::from_raw(service) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_as_ctx(service: *mut doca_urom_service) -> *mut doca_ctx {
    guard(ptr::null_mut(), || {
        // SAFETY: as in doca_urom_service_destroy.
        match unsafe { service_ref(service) } {
            // SAFETY: `service` is live; the field address stays valid for its life.
            Ok(_) => unsafe { ptr::addr_of_mut!((*service).ctx) },
            Err(_) => ptr::null_mut(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_set_max_comm_msg_size(
    service: *mut doca_urom_service,
    msg_size: usize,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(service, |s| {
            if msg_size == 0 || msg_size > MAX_COMM_MSG_SIZE_LIMIT {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            s.max_msg_size.set(msg_size);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_set_max_workers(
    service: *mut doca_urom_service,
    max_workers: u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    guard_err(|| unsafe {
        configure(service, |s| {
            if max_workers == 0 {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            s.max_workers.set(max_workers);
            Ok(())
        })
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_set_dev(
    service: *mut doca_urom_service,
    dev: *mut doca_dev,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract (argument checks before state checks).
        unsafe { service_ref(service) }?;
        let d = dev_ref(dev)?;
        // SAFETY: forwarded contract.
        unsafe {
            configure(service, |s| {
                *s.dev.borrow_mut() = Some(d);
                Ok(())
            })
        }
    })
}

/// Soft extension: the daemon's socket for this service (see `doca-sys/src/urom.rs`).
#[no_mangle]
pub unsafe extern "C" fn doca_soft_urom_service_set_socket_path(
    service: *mut doca_urom_service,
    path: *const c_char,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { service_ref(service) }?;
        if path.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL; the caller passes a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        if bytes.is_empty() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let p = PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes));
        // SAFETY: forwarded contract.
        unsafe {
            configure(service, |s| {
                *s.socket_path.borrow_mut() = Some(p);
                Ok(())
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_plugins_list(
    service: *mut doca_urom_service,
    plugins: *mut *const doca_urom_service_plugin_info,
    plugins_count: *mut usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let s = unsafe { service_ref(service) }?;
        if plugins.is_null() || plugins_count.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let info = s.info().ok_or(DOCA_ERROR_BAD_STATE)?;
        let list = &info.plugins;
        // SAFETY: both out-pointers checked non-NULL, writable by the caller's contract. The
        // array is owned by the service (its Arc is kept until the service stops).
        unsafe {
            plugins.write(if list.is_empty() { ptr::null() } else { list.as_ptr() });
            plugins_count.write(list.len());
        }
        // DOCA: "NOT_FOUND - no plugins were discovered on DPU side" (NVIDIA's samples then
        // end with that error rather than a success that ran nothing).
        if list.is_empty() {
            return Err(DOCA_ERROR_NOT_FOUND);
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_service_get_cpuset(
    service: *mut doca_urom_service,
    cpuset: *mut doca_cpu_set_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let s = unsafe { service_ref(service) }?;
        if cpuset.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let info = s.info().ok_or(DOCA_ERROR_BAD_STATE)?;
        // SAFETY: non-NULL checked; writable by the caller's contract.
        unsafe { out(cpuset, info.cpuset) }
    })
}
