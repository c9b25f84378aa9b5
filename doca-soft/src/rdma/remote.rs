//! The three remote-net sync event tasks: read, set and add to a peer's sync event through
//! an RDMA connection (`doca_rdma_task_remote_net_sync_event_{get,notify_set,notify_add}`).
//!
//! The target is a `doca_sync_event_remote_net` opened from the peer's
//! `export_to_remote_net` blob (see `sync_event/mod.rs`). The tasks are send-side operations
//! like the one-sided ones: they join their connection's ordered queue (so they complete in
//! submission order with the other operations on that connection) and run without the
//! peer's CPU, as on hardware. Each runs as one 64-bit atomic on the peer's counter and then
//! wakes the peer's waiters (futex sleepers and the doorbells of PEs with wait tasks), so a
//! waiter on the exporting side is woken by a remote notify without polling.
//!
//! Results and checks:
//! * `get` appends the 8-byte value (native byte order, like the event's memory) to the
//!   local `dst_buf`; `notify_set` writes the value held in the first 8 data bytes of
//!   `src_buf` (fewer than 8: `DOCA_ERROR_INVALID_VALUE` at submit); `notify_add` adds
//!   `add_data` and appends the previous value to `result_buf` (8 free bytes needed).
//! * The event must have been exported by the process at the other end of the connection:
//!   any other target fails the task with `DOCA_ERROR_NOT_PERMITTED` (an RDMA NIC would have
//!   no valid key for it either).
//! * A NULL or destroyed event: `DOCA_ERROR_INVALID_VALUE` at allocation or submit.

use core::cell::Cell;
use core::ptr;

use super::conn::doca_rdma_connection;
use super::doca_rdma;
use super::op::Op;
use super::tasks::{alloc_init, event_of, nonnull, SendTask};
use crate::buf::doca_buf;
use crate::sync_event::doca_sync_event_remote_net;
use crate::task::{doca_task, task_field as field};
use crate::types::*;

/// `struct doca_rdma_task_remote_net_sync_event_get`.
#[repr(C)]
pub struct doca_rdma_task_remote_net_sync_event_get {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) event: Cell<*const doca_sync_event_remote_net>,
    pub(super) dst: Cell<*mut doca_buf>,
}

/// `struct doca_rdma_task_remote_net_sync_event_notify_set`.
#[repr(C)]
pub struct doca_rdma_task_remote_net_sync_event_notify_set {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) event: Cell<*mut doca_sync_event_remote_net>,
    pub(super) src: Cell<*const doca_buf>,
}

/// `struct doca_rdma_task_remote_net_sync_event_notify_add`.
#[repr(C)]
pub struct doca_rdma_task_remote_net_sync_event_notify_add {
    base: doca_task,
    pub(super) conn: Cell<*const doca_rdma_connection>,
    pub(super) event: Cell<*mut doca_sync_event_remote_net>,
    pub(super) result: Cell<*mut doca_buf>,
    pub(super) add: Cell<u64>,
}

impl doca_rdma_task_remote_net_sync_event_get {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self { base, conn: Cell::new(ptr::null()), event: Cell::new(ptr::null()), dst: Cell::new(ptr::null_mut()) }
    }
}
impl doca_rdma_task_remote_net_sync_event_notify_set {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self { base, conn: Cell::new(ptr::null()), event: Cell::new(ptr::null_mut()), src: Cell::new(ptr::null()) }
    }
}
impl doca_rdma_task_remote_net_sync_event_notify_add {
    /// The task's value in a fresh pool slot (every field neutral), for `TaskType::with_header`
    /// (`submit.rs` binds the type to its kind).
    pub(super) fn new(base: doca_task) -> Self {
        Self {
            base,
            conn: Cell::new(ptr::null()),
            event: Cell::new(ptr::null_mut()),
            result: Cell::new(ptr::null_mut()),
            add: Cell::new(0),
        }
    }
}

impl SendTask for doca_rdma_task_remote_net_sync_event_get {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        (self.conn.get(), Op::RemoteGet { event: self.event.get(), dst: self.dst.get() })
    }
}

impl SendTask for doca_rdma_task_remote_net_sync_event_notify_set {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        (self.conn.get(), Op::RemoteSet { event: self.event.get(), src: self.src.get() })
    }
}

impl SendTask for doca_rdma_task_remote_net_sync_event_notify_add {
    fn decode(&self) -> (*const doca_rdma_connection, Op) {
        (self.conn.get(), Op::RemoteAdd { event: self.event.get(), result: self.result.get(), add: self.add.get() })
    }
}

// ---- entry points ----

macro_rules! entry_points {
    ($ty:ident, $cb:ident, $set_conf:ident, $as_task:ident, $cap:ident) => {
        super::tasks::task_entry_points!($ty, $cb, $set_conf, $as_task);

        /// Supported on every soft device.
        #[no_mangle]
        pub unsafe extern "C" fn $cap(devinfo: *const crate::dev::doca_devinfo) -> doca_error_t {
            crate::ffi::guard_err(|| crate::dev::devinfo_ref(devinfo).map(|_| ()))
        }
    };
}

entry_points!(
    doca_rdma_task_remote_net_sync_event_get,
    doca_rdma_task_remote_net_sync_event_get_completion_cb_t,
    doca_rdma_task_remote_net_sync_event_get_set_conf,
    doca_rdma_task_remote_net_sync_event_get_as_task,
    doca_rdma_cap_task_remote_net_sync_event_get_is_supported
);
entry_points!(
    doca_rdma_task_remote_net_sync_event_notify_set,
    doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t,
    doca_rdma_task_remote_net_sync_event_notify_set_set_conf,
    doca_rdma_task_remote_net_sync_event_notify_set_as_task,
    doca_rdma_cap_task_remote_net_sync_event_notify_set_is_supported
);
entry_points!(
    doca_rdma_task_remote_net_sync_event_notify_add,
    doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t,
    doca_rdma_task_remote_net_sync_event_notify_add_set_conf,
    doca_rdma_task_remote_net_sync_event_notify_add_as_task,
    doca_rdma_cap_task_remote_net_sync_event_notify_add_is_supported
);

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_remote_net_sync_event_get_allocate_init(
    rdma: *mut doca_rdma,
    rdma_connection: *mut doca_rdma_connection,
    event: *const doca_sync_event_remote_net,
    dst_buf: *mut doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_remote_net_sync_event_get,
) -> doca_error_t {
    crate::ffi::guard_err(|| {
        nonnull(rdma_connection)?;
        nonnull(dst_buf)?;
        event_of(event)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(rdma, Some(rdma_connection), user_data, task, |t: &doca_rdma_task_remote_net_sync_event_get| {
                t.conn.set(rdma_connection);
                t.event.set(event);
                t.dst.set(dst_buf);
            })
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
    rdma: *mut doca_rdma,
    rdma_connection: *mut doca_rdma_connection,
    event: *mut doca_sync_event_remote_net,
    src_buf: *const doca_buf,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_remote_net_sync_event_notify_set,
) -> doca_error_t {
    crate::ffi::guard_err(|| {
        nonnull(rdma_connection)?;
        nonnull(src_buf)?;
        event_of(event)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(
                rdma,
                Some(rdma_connection),
                user_data,
                task,
                |t: &doca_rdma_task_remote_net_sync_event_notify_set| {
                    t.conn.set(rdma_connection);
                    t.event.set(event);
                    t.src.set(src_buf);
                },
            )
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
    rdma: *mut doca_rdma,
    rdma_connection: *mut doca_rdma_connection,
    event: *mut doca_sync_event_remote_net,
    result_buf: *mut doca_buf,
    add_data: u64,
    user_data: doca_data,
    task: *mut *mut doca_rdma_task_remote_net_sync_event_notify_add,
) -> doca_error_t {
    crate::ffi::guard_err(|| {
        nonnull(rdma_connection)?;
        nonnull(result_buf)?;
        event_of(event)?;
        // SAFETY: forwarded contract.
        unsafe {
            alloc_init(
                rdma,
                Some(rdma_connection),
                user_data,
                task,
                |t: &doca_rdma_task_remote_net_sync_event_notify_add| {
                    t.conn.set(rdma_connection);
                    t.event.set(event);
                    t.result.set(result_buf);
                    t.add.set(add_data);
                },
            )
        }
    })
}

// ---- getters and setters (re-use; see accessors.rs for the rules) ----

type Conn = doca_rdma_connection;
type Buf = doca_buf;
type Ev = doca_sync_event_remote_net;

field!(doca_rdma_task_remote_net_sync_event_get, event,
    doca_rdma_task_remote_net_sync_event_get_set_sync_event(*const Ev),
    doca_rdma_task_remote_net_sync_event_get_get_sync_event -> *const Ev = ptr::null());
field!(doca_rdma_task_remote_net_sync_event_get, dst,
    doca_rdma_task_remote_net_sync_event_get_set_dst_buf(*mut Buf),
    doca_rdma_task_remote_net_sync_event_get_get_dst_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_remote_net_sync_event_get, conn,
    doca_rdma_task_remote_net_sync_event_get_set_rdma_connection(*mut Conn),
    doca_rdma_task_remote_net_sync_event_get_get_rdma_connection -> *const Conn = ptr::null());

field!(doca_rdma_task_remote_net_sync_event_notify_set, event,
    doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(*mut Ev),
    doca_rdma_task_remote_net_sync_event_notify_set_get_sync_event -> *mut Ev = ptr::null_mut());
field!(doca_rdma_task_remote_net_sync_event_notify_set, src,
    doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(*const Buf),
    doca_rdma_task_remote_net_sync_event_notify_set_get_src_buf -> *const Buf = ptr::null());
field!(doca_rdma_task_remote_net_sync_event_notify_set, conn,
    doca_rdma_task_remote_net_sync_event_notify_set_set_rdma_connection(*mut Conn),
    doca_rdma_task_remote_net_sync_event_notify_set_get_rdma_connection -> *const Conn = ptr::null());

field!(doca_rdma_task_remote_net_sync_event_notify_add, event,
    doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(*mut Ev),
    doca_rdma_task_remote_net_sync_event_notify_add_get_sync_event -> *mut Ev = ptr::null_mut());
field!(doca_rdma_task_remote_net_sync_event_notify_add, result,
    doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(*mut Buf),
    doca_rdma_task_remote_net_sync_event_notify_add_get_result_buf -> *mut Buf = ptr::null_mut());
field!(doca_rdma_task_remote_net_sync_event_notify_add, add,
    doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(u64),
    doca_rdma_task_remote_net_sync_event_notify_add_get_add_data -> u64 = 0);
field!(doca_rdma_task_remote_net_sync_event_notify_add, conn,
    doca_rdma_task_remote_net_sync_event_notify_add_set_rdma_connection(*mut Conn),
    doca_rdma_task_remote_net_sync_event_notify_add_get_rdma_connection -> *const Conn = ptr::null());

#[cfg(test)]
mod tests;
