//! A peer's sync event driven through an RDMA connection (DOCA's remote-net sync events).
//!
//! The peer builds a [`SyncEvent`](crate::sync_event::SyncEvent) with a
//! [`Location::RemoteNet`](crate::sync_event::Location::RemoteNet) publisher and
//! [exports](crate::sync_event::SyncEvent::export) it; this side opens the blob with
//! [`RemoteEvent::open`] and reads, sets or adds to the counter with
//! [`Connection::remote_event`] — one-sided, without the peer's CPU; the peer's waiters wake.
//!
//! ```
//! use async_doca::rdma::{Rdma, RemoteEvent};
//! use async_doca::sync_event::{Location, SyncEvent};
//! use async_doca::{Access, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let (a, b) = (Rdma::builder(&dev).build().await?, Rdma::builder(&dev).build().await?);
//!     let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
//!     let (to_b, _to_a) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
//!     // b's event, exported for the network; a opens it.
//!     let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
//!     let remote = RemoteEvent::open(&dev, &ev.export()?)?;
//!     let scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
//!     let ops = to_b.remote_event(&remote);
//!     let (r, scratch) = ops.set(5, scratch).await;
//!     r?;
//!     let (old, scratch) = ops.add(2, scratch).await;
//!     assert_eq!(old?, 5);
//!     let (v, _) = ops.get(scratch).await;
//!     assert_eq!(v?, 7);
//!     ev.wait_eq(7).await?;
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::fmt;
use std::rc::Rc;

use super::{too_short, Connection, Desc};
use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::ext::DocaTask;
use crate::mem::Buf;
use crate::sys;

// The three kinds keep their completed tasks for reuse, as the RDMA operations do (indices
// after theirs, see `DocaTask::REUSE`); every operation re-initialises all of a kept task's
// fields (`RemoteTask::reinit`).
task_kind!(RnGet, doca_rdma_task_remote_net_sync_event_get, doca_rdma_task_remote_net_sync_event_get_as_task, Some(7));
task_kind!(
    RnSet,
    doca_rdma_task_remote_net_sync_event_notify_set,
    doca_rdma_task_remote_net_sync_event_notify_set_as_task,
    Some(8)
);
task_kind!(
    RnAdd,
    doca_rdma_task_remote_net_sync_event_notify_add,
    doca_rdma_task_remote_net_sync_event_notify_add_as_task,
    Some(9)
);

/// What an operation sets on a remote-event task: the connection, the event, its 8-byte
/// buffer and (for an add) the addend.
#[derive(Clone, Copy)]
struct Args {
    conn: *mut sys::doca_rdma_connection,
    ev: *mut sys::doca_sync_event_remote_net,
    buf: *mut sys::doca_buf,
    delta: u64,
}

/// A remote-event kind's allocation and its re-initialisation of a kept task.
///
/// # Safety
/// Both functions set every parameter of a task of this kind (`alloc` through its
/// `*_allocate_init`, `reinit` through its setters, on a task the caller owns).
unsafe trait RemoteTask: DocaTask {
    /// # Safety
    /// A live, running context; `a` names a live connection, event and descriptor.
    unsafe fn alloc(
        rdma: *mut sys::doca_rdma,
        a: Args,
        ud: sys::doca_data,
        task: &mut *mut Self::Task,
    ) -> sys::doca_error_t;
    /// # Safety
    /// `task` is a kept task of this kind (completed, ours); `a` as for `alloc`.
    unsafe fn reinit(task: *mut Self::Task, a: Args);
}

/// Implements [`RemoteTask`] for one kind, as `lane_task!` does for the lanes: two closures in
/// order, its `allocate_init` and its setters (closure syntax, so that rustfmt formats the
/// invocations).
macro_rules! remote_task {
    ($kind:ty, |$rdma:ident, $a:ident, $ud:ident, $t:ident| $alloc:expr, |$rt:ident, $ra:ident| $reinit:block $(,)?) => {
        // SAFETY: the calls are the kind's own `allocate_init` and its setters of every
        // parameter, on a task of this kind as the trait's contract requires.
        unsafe impl RemoteTask for $kind {
            unsafe fn alloc(
                $rdma: *mut sys::doca_rdma,
                $a: Args,
                $ud: sys::doca_data,
                $t: &mut *mut Self::Task,
            ) -> sys::doca_error_t {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $alloc }
            }
            unsafe fn reinit($rt: *mut Self::Task, $ra: Args) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $reinit }
            }
        }
    };
}

remote_task!(
    RnGet,
    |rdma, a, ud, t| sys::doca_rdma_task_remote_net_sync_event_get_allocate_init(rdma, a.conn, a.ev, a.buf, ud, t),
    |t, a| {
        sys::doca_rdma_task_remote_net_sync_event_get_set_sync_event(t, a.ev);
        sys::doca_rdma_task_remote_net_sync_event_get_set_dst_buf(t, a.buf);
        sys::doca_rdma_task_remote_net_sync_event_get_set_rdma_connection(t, a.conn);
    }
);
remote_task!(
    RnSet,
    |rdma, a, ud, t| sys::doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
        rdma, a.conn, a.ev, a.buf, ud, t
    ),
    |t, a| {
        sys::doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event(t, a.ev);
        sys::doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf(t, a.buf);
        sys::doca_rdma_task_remote_net_sync_event_notify_set_set_rdma_connection(t, a.conn);
    }
);
remote_task!(
    RnAdd,
    |rdma, a, ud, t| sys::doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
        rdma, a.conn, a.ev, a.buf, a.delta, ud, t
    ),
    |t, a| {
        sys::doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event(t, a.ev);
        sys::doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf(t, a.buf);
        sys::doca_rdma_task_remote_net_sync_event_notify_add_set_add_data(t, a.delta);
        sys::doca_rdma_task_remote_net_sync_event_notify_add_set_rdma_connection(t, a.conn);
    }
);

/// Configures the three task pools on an IDLE `rdma`.
///
/// # Safety
/// `rdma` is live and IDLE.
pub(super) unsafe fn configure(rdma: *mut sys::doca_rdma, n: u32) -> Result<()> {
    use crate::ext::{completion_cb, success_cb};
    // SAFETY: the caller's contract; each callback is the completion callback of its kind.
    unsafe {
        check(
            sys::doca_rdma_task_remote_net_sync_event_get_set_conf(
                rdma,
                Some(success_cb::<RnGet>),
                Some(completion_cb::<RnGet>),
                n,
            ),
            "rdma: configure remote event get tasks",
        )?;
        check(
            sys::doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
                rdma,
                Some(success_cb::<RnSet>),
                Some(completion_cb::<RnSet>),
                n,
            ),
            "rdma: configure remote event set tasks",
        )?;
        check(
            sys::doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
                rdma,
                Some(success_cb::<RnAdd>),
                Some(completion_cb::<RnAdd>),
                n,
            ),
            "rdma: configure remote event add tasks",
        )
    }
}

struct Handle {
    ptr: *mut sys::doca_sync_event_remote_net,
    _dev: Device,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: our handle; no task uses it any more (every operation keeps a clone of the
        // Rc until DOCA is done with it).
        unsafe { sys::doca_sync_event_remote_net_destroy(self.ptr) };
    }
}

/// A peer's sync event opened from its network export, driven with
/// [`Connection::remote_event`] (the peer builds a `SyncEvent` with a `RemoteNet` publisher).
/// Cheap to clone.
#[derive(Clone)]
pub struct RemoteEvent {
    h: Rc<Handle>,
}

impl RemoteEvent {
    /// Opens the blob of the peer's `SyncEvent::export` (a `RemoteNet` publisher).
    ///
    /// # Errors
    /// A corrupted blob ([`ErrorKind::InvalidArgument`]), a PCI export
    /// ([`ErrorKind::NotSupported`]), a peer that is gone ([`ErrorKind::NotFound`]).
    pub fn open(dev: &Device, blob: &[u8]) -> Result<RemoteEvent> {
        if blob.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "remote_event.open: empty blob"));
        }
        let mut p = std::ptr::null_mut();
        check(
            // SAFETY: an open device; the blob is readable for its length; valid out-pointer.
            unsafe {
                sys::doca_sync_event_remote_net_create_from_export(dev.as_ptr(), blob.as_ptr(), blob.len(), &mut p)
            },
            "remote_event.open",
        )?;
        Ok(RemoteEvent { h: Rc::new(Handle { ptr: p, _dev: dev.clone() }) })
    }
}

impl fmt::Debug for RemoteEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteEvent").finish_non_exhaustive()
    }
}

/// Operations on a [`RemoteEvent`] through one [`Connection`] (to the event's exporter).
/// Each takes an 8-byte scratch [`Buf`] (registered with
/// [`Access::LOCAL_READ_WRITE`](crate::Access::LOCAL_READ_WRITE)) and gives it back.
pub struct RemoteEventOps<'a> {
    conn: &'a Connection,
    ev: &'a RemoteEvent,
}

impl Connection {
    /// Operations on `ev`, a sync event of this connection's peer.
    pub fn remote_event<'a>(&'a self, ev: &'a RemoteEvent) -> RemoteEventOps<'a> {
        RemoteEventOps { conn: self, ev }
    }
}

impl RemoteEventOps<'_> {
    /// One operation of kind `K` on the event with `scratch` (checked: at least 8 bytes) as
    /// its 8-byte buffer, a source when `src` (the value is already in it) and otherwise the
    /// destination of the value DOCA returns; `delta` is an add's addend. The task is one the
    /// context kept from an earlier operation of the kind, re-initialised, or a fresh one.
    async fn run<K: RemoteTask>(&self, op: &'static str, scratch: Buf, src: bool, delta: u64) -> (Result<()>, Buf) {
        if scratch.len() < 8 {
            return (Err(too_short(op, "the scratch buffer needs 8 bytes")), scratch);
        }
        let (conn, ev) = (self.conn.inner.conn, self.ev.h.ptr);
        // A source of exactly the value; a destination over all of the scratch.
        let d = Desc::local(&scratch);
        let d = if src { d.prefix(8) } else { d };
        let keep = (scratch, self.ev.h.clone());
        let inner = &*self.conn.inner.rdma;
        let (r, (scratch, _)) = inner
            .run::<K, _, _>(op, Some(self.conn.id()), 8, keep, |rdma, set, slot| {
                let buf = if src { set.src(0, d)? } else { set.dst(0, d)? };
                let a = Args { conn, ev, buf, delta };
                // SAFETY: a live, running context, and a connection and an event `self` holds;
                // `buf` describes memory the operation owns; `reinit` sets every field.
                unsafe {
                    inner.ctx.reuse_or_alloc::<K>(slot, |t| K::reinit(t, a), |t| K::alloc(rdma, a, slot.user_data(), t))
                }
            })
            .await;
        (r.map(drop), scratch)
    }

    /// Reads the peer's counter.
    ///
    /// # Errors
    /// `scratch` shorter than 8 bytes ([`ErrorKind::InvalidArgument`]); an event of another
    /// process than this connection's peer ([`ErrorKind::PermissionDenied`]).
    pub async fn get(&self, scratch: Buf) -> (Result<u64>, Buf) {
        let (r, scratch) = self.run::<RnGet>("rdma.remote_event.get", scratch, false, 0).await;
        (r.map(|()| scratch.read_u64(0)), scratch)
    }

    /// Sets the peer's counter to `value` (waking its waiters).
    pub async fn set(&self, value: u64, mut scratch: Buf) -> (Result<()>, Buf) {
        if scratch.len() >= 8 {
            scratch.write_u64(0, value);
        }
        self.run::<RnSet>("rdma.remote_event.set", scratch, true, 0).await
    }

    /// Adds `delta` to the peer's counter (waking its waiters); returns the previous value.
    pub async fn add(&self, delta: u64, scratch: Buf) -> (Result<u64>, Buf) {
        let (r, scratch) = self.run::<RnAdd>("rdma.remote_event.add", scratch, false, delta).await;
        (r.map(|()| scratch.read_u64(0)), scratch)
    }
}

// Not under Miri: RDMA over the provider (see `rdma::tests`).
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use crate::sync_event::{Location, SyncEvent};
    use crate::Access;

    /// Rounds of set, add and get through one connection give the right values, and each
    /// kind's completed task is kept and taken again: one kept task of each kind at the end,
    /// not one allocation per operation.
    #[test]
    fn operations_reuse_their_kinds_tasks() {
        crate::testkit::runtime()
            .block_on(async {
                let dev = Device::open_default()?;
                let (a, _b, to_b, _to_a) = crate::testkit::rdma_pair(&dev).await?;
                let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
                let remote = RemoteEvent::open(&dev, &ev.export()?)?;
                let ops = to_b.remote_event(&remote);
                let mut scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
                for round in 0..100u64 {
                    let (r, s) = ops.set(round * 10, scratch).await;
                    r?;
                    let (old, s) = ops.add(3, s).await;
                    assert_eq!(old?, round * 10);
                    let (v, s) = ops.get(s).await;
                    assert_eq!(v?, round * 10 + 3);
                    scratch = s;
                }
                let rec = a.ctx_record();
                assert_eq!((rec.kept_of::<RnGet>(), rec.kept_of::<RnSet>(), rec.kept_of::<RnAdd>()), (1, 1, 1));
                Ok::<_, crate::Error>(())
            })
            .unwrap();
    }
}
