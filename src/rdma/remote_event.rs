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

use super::{ops, too_short, Connection, Desc};
use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::completion::{HeldOp, HeldRequest};
use crate::ext::{DocaTask, TaskOutput, TaskSlot};
use crate::mem::Buf;
use crate::sys;

// The three kinds run on the connection's held tasks, as the RDMA operations do (their
// `DocaTask::REUSE` indices, after those of the operations, name them in its pool); a task
// kept by the context is re-initialised in every field (`RemoteTask`'s three setters).
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

/// A remote-event kind's allocation and its setters, in the three sets
/// `DocaCtx::reuse_held_or_alloc` takes: its buffer, its operands (the event and an add's
/// addend: a connection's held task serves every event of the peer) and its connection.
///
/// # Safety
/// `alloc` sets every parameter of a task of this kind through its `*_allocate_init`, and the
/// three setters together set every parameter of one (on a task the caller owns).
unsafe trait RemoteTask: DocaTask {
    /// Whether the scratch buffer is the value's source (a set: the value is in it before
    /// the operation), else the destination of the value DOCA returns (a get, an add's
    /// previous value).
    const SOURCE: bool;

    /// # Safety
    /// A live, running context; `conn`, `ev` and `buf` name a live connection, event and
    /// descriptor; `ud` is the task's user data.
    #[allow(clippy::too_many_arguments)]
    unsafe fn alloc(
        rdma: *mut sys::doca_rdma,
        conn: *mut sys::doca_rdma_connection,
        ev: *mut sys::doca_sync_event_remote_net,
        buf: *mut sys::doca_buf,
        delta: u64,
        ud: sys::doca_data,
        task: &mut *mut Self::Task,
    ) -> sys::doca_error_t;
    /// # Safety (the three setters)
    /// `task` is a task of this kind that DOCA does not own; the handles are live.
    unsafe fn set_buf(task: *mut Self::Task, buf: *mut sys::doca_buf);
    /// See [`set_buf`](RemoteTask::set_buf).
    unsafe fn set_operands(task: *mut Self::Task, ev: *mut sys::doca_sync_event_remote_net, delta: u64);
    /// See [`set_buf`](RemoteTask::set_buf).
    unsafe fn set_conn(task: *mut Self::Task, conn: *mut sys::doca_rdma_connection);
}

/// Implements [`RemoteTask`] for one kind: whether its scratch is a source, its
/// `allocate_init` (closure syntax, so that rustfmt formats the invocations), then its buffer,
/// event, connection and (for an add) addend setters.
macro_rules! remote_task {
    (
        $kind:ty,
        source: $source:literal,
        |$rdma:ident, $conn:ident, $ev:ident, $buf:ident, $delta:ident, $ud:ident, $t:ident| $alloc:expr,
        $set_buf:path, $set_ev:path, $set_conn:path $(, $set_delta:path)? $(,)?
    ) => {
        // SAFETY: the calls are the kind's own `allocate_init` and its setters of every
        // parameter, on a task of this kind as the trait's contract requires.
        unsafe impl RemoteTask for $kind {
            const SOURCE: bool = $source;
            unsafe fn alloc(
                $rdma: *mut sys::doca_rdma,
                $conn: *mut sys::doca_rdma_connection,
                $ev: *mut sys::doca_sync_event_remote_net,
                $buf: *mut sys::doca_buf,
                #[allow(unused_variables)] $delta: u64,
                $ud: sys::doca_data,
                $t: &mut *mut Self::Task,
            ) -> sys::doca_error_t {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $alloc }
            }
            unsafe fn set_buf(task: *mut Self::Task, buf: *mut sys::doca_buf) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $set_buf(task, buf) }
            }
            #[allow(unused_variables)]
            unsafe fn set_operands(task: *mut Self::Task, ev: *mut sys::doca_sync_event_remote_net, delta: u64) {
                // SAFETY: forwarded (the caller's contract).
                unsafe {
                    $set_ev(task, ev);
                    $($set_delta(task, delta);)?
                }
            }
            unsafe fn set_conn(task: *mut Self::Task, conn: *mut sys::doca_rdma_connection) {
                // SAFETY: forwarded (the caller's contract).
                unsafe { $set_conn(task, conn) }
            }
        }
    };
}

remote_task!(
    RnGet,
    source: false,
    |rdma, conn, ev, buf, delta, ud, t| sys::doca_rdma_task_remote_net_sync_event_get_allocate_init(
        rdma, conn, ev, buf, ud, t
    ),
    sys::doca_rdma_task_remote_net_sync_event_get_set_dst_buf,
    sys::doca_rdma_task_remote_net_sync_event_get_set_sync_event,
    sys::doca_rdma_task_remote_net_sync_event_get_set_rdma_connection,
);
remote_task!(
    RnSet,
    source: true,
    |rdma, conn, ev, buf, delta, ud, t| sys::doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
        rdma, conn, ev, buf, ud, t
    ),
    sys::doca_rdma_task_remote_net_sync_event_notify_set_set_src_buf,
    sys::doca_rdma_task_remote_net_sync_event_notify_set_set_sync_event,
    sys::doca_rdma_task_remote_net_sync_event_notify_set_set_rdma_connection,
);
remote_task!(
    RnAdd,
    source: false,
    |rdma, conn, ev, buf, delta, ud, t| sys::doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
        rdma, conn, ev, buf, delta, ud, t
    ),
    sys::doca_rdma_task_remote_net_sync_event_notify_add_set_result_buf,
    sys::doca_rdma_task_remote_net_sync_event_notify_add_set_sync_event,
    sys::doca_rdma_task_remote_net_sync_event_notify_add_set_rdma_connection,
    sys::doca_rdma_task_remote_net_sync_event_notify_add_set_add_data,
);

/// What a remote-event operation owns until DOCA is done with it: its scratch buffer and
/// the event (kept open).
type EventBuffers = (Buf, Rc<Handle>);

/// A remote-event operation's request: its target and operand; the descriptor of its
/// scratch is made from the buffers when the task is prepared (as the RDMA requests',
/// `ops`).
struct EventReq<'a> {
    t: ops::Target<'a>,
    delta: u64,
}

impl<K: RemoteTask> HeldRequest<K, EventBuffers> for EventReq<'_> {
    #[inline]
    fn prepare(&mut self, slot: &TaskSlot, (scratch, ev): &EventBuffers) -> ops::Alloc<K> {
        let Self { t, delta } = *self;
        let set = t.descs(slot);
        // A source of exactly the value; a destination over all of the scratch.
        let d = Desc::local(scratch);
        let buf = if K::SOURCE { set.src(0, d.prefix(8))? } else { set.dst(0, d)? };
        let (rdma, conn, ev) = (t.rdma, t.conn, ev.ptr);
        // SAFETY: a live, running context, and a connection and an event the operation holds;
        // `buf` describes memory the operation owns; the three setters set every field.
        unsafe {
            t.inner.ctx.reuse_held_or_alloc::<K>(
                slot,
                set.changed(),
                |k| K::set_buf(k, buf),
                |k| K::set_operands(k, ev, delta),
                |k| K::set_conn(k, conn),
                |k| K::alloc(rdma, conn, ev, buf, delta, slot.user_data(), k),
            )
        }
    }
}

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
    /// its 8-byte buffer (`RemoteTask::SOURCE` says which way); `delta` is an add's addend. It runs on a held
    /// task of the connection, as its RDMA operations do (`rdma::ops`); a check that failed
    /// gives the error and the scratch back. Not an `async fn`: inlined, the future is built
    /// in its caller's state, not moved there (a copy of ~60 instructions per operation).
    #[inline(always)]
    fn op<K: RemoteTask>(
        &self,
        op: &'static str,
        scratch: Buf,
        delta: u64,
    ) -> std::result::Result<EventOp<'_, K>, (Error, Buf)> {
        if scratch.len() < 8 {
            return Err((too_short(op, "the scratch buffer needs 8 bytes"), scratch));
        }
        let t = match self.conn.target(op) {
            Ok(t) => t,
            Err(e) => return Err((e, scratch)),
        };
        Ok(self.conn.inner.op::<K, _, _>(op, 8, EventReq { t, delta }, (scratch, self.ev.h.clone())))
    }

    /// Reads the peer's counter.
    ///
    /// # Errors
    /// `scratch` shorter than 8 bytes ([`ErrorKind::InvalidArgument`]); an event of another
    /// process than this connection's peer ([`ErrorKind::PermissionDenied`]).
    pub async fn get(&self, scratch: Buf) -> (Result<u64>, Buf) {
        match self.op::<RnGet>("rdma.remote_event.get", scratch, 0) {
            Ok(f) => value(f.await),
            Err((e, scratch)) => (Err(e), scratch),
        }
    }

    /// Sets the peer's counter to `value` (waking its waiters).
    pub async fn set(&self, value: u64, mut scratch: Buf) -> (Result<()>, Buf) {
        if scratch.len() >= 8 {
            scratch.write_u64(0, value);
        }
        match self.op::<RnSet>("rdma.remote_event.set", scratch, 0) {
            Ok(f) => {
                let (r, (scratch, _)) = f.await;
                (r.map(drop), scratch)
            }
            Err((e, scratch)) => (Err(e), scratch),
        }
    }

    /// Adds `delta` to the peer's counter (waking its waiters); returns the previous value.
    pub async fn add(&self, delta: u64, scratch: Buf) -> (Result<u64>, Buf) {
        match self.op::<RnAdd>("rdma.remote_event.add", scratch, delta) {
            Ok(f) => value(f.await),
            Err((e, scratch)) => (Err(e), scratch),
        }
    }
}

/// The future of a remote-event operation of kind `K`.
type EventOp<'a, K> = HeldOp<'a, K, EventReq<'a>, EventBuffers>;

/// The value DOCA wrote into the scratch of a get or an add, with the scratch.
fn value((r, (scratch, _)): (Result<TaskOutput>, EventBuffers)) -> (Result<u64>, Buf) {
    (r.map(|_| scratch.read_u64(0)), scratch)
}

// Not under Miri: RDMA over the provider (see `rdma::tests`).
#[cfg(all(test, not(miri)))]
mod tests {
    use super::*;
    use crate::sync_event::{Location, SyncEvent};
    use crate::Access;

    /// Rounds of set, add and get through one connection give the right values, and each
    /// kind runs on one held task of the connection, taken again by every round: one idle
    /// group with its task per kind at the end, no task kept by the context.
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
                assert_eq!((rec.kept_of::<RnGet>(), rec.kept_of::<RnSet>(), rec.kept_of::<RnAdd>()), (0, 0, 0));
                let pool = &to_b.inner.pool;
                assert_eq!([pool.idle_of::<RnGet>(), pool.idle_of::<RnSet>(), pool.idle_of::<RnAdd>()], [(1, 1); 3]);
                Ok::<_, crate::Error>(())
            })
            .unwrap();
    }

    /// An add dropped in flight still happens: its held task is abandoned with the scratch
    /// and the event, which the completion gives back; the connection's next add takes a
    /// new group (the abandoned one is not reused).
    #[test]
    fn an_operation_dropped_in_flight_keeps_its_buffer_until_its_completion() {
        let rt = crate::Runtime::builder().cpus("0".parse().unwrap()).inline_progress(false).build().unwrap();
        rt.block_on(async {
            let dev = Device::open_default()?;
            let (_a, _b, to_b, _to_a) = crate::testkit::rdma_pair(&dev).await?;
            let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
            let remote = RemoteEvent::open(&dev, &ev.export()?)?;
            let ops = to_b.remote_event(&remote);
            let mem = dev.alloc(8, Access::LOCAL_READ_WRITE)?;
            let handles = mem.handles();
            {
                let mut add = Box::pin(ops.add(5, mem.buf()));
                assert!(crate::rdma::tests::poll_once(&mut add).is_pending(), "in flight (no inline progress)");
                assert_eq!(mem.handles(), handles + 1);
            }
            assert_eq!(mem.handles(), handles + 1, "the abandoned task keeps the scratch");
            ev.wait_eq(5).await?;
            // Given back with the completion.
            crate::rdma::tests::until(|| mem.handles() == handles).await;
            let (old, _) = ops.add(1, mem.buf()).await;
            assert_eq!(old?, 5);
            assert_eq!(to_b.inner.pool.idle_of::<RnAdd>().0, 1, "one idle group: the new one");
            Ok::<_, crate::Error>(())
        })
        .unwrap();
    }
}
