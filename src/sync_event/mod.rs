//! Sync events as futures: a 64-bit counter shared between threads, processes and the DPU.
//!
//! A [`SyncEvent`] is a DOCA sync event driven in asynchronous (ctx) mode: it is connected
//! to the progress engine of the executor that created it, and every operation submits a
//! DOCA task whose completion resolves the returned future. Another process (or the DPU)
//! opens the same counter from the blob of [`SyncEvent::export`] with [`SyncEvent::open`].
//!
//! * `add` / `set` publish; the peers' pending waits are woken by the publisher (on the soft
//!   provider through a doorbell on each waiting PE, never by polling on a timer).
//! * `wait_eq` / `wait_neq` are single DOCA wait tasks. `wait_gt` is built from `get` and
//!   `wait_neq`, as DOCA 3.x has no greater-than wait task: read the value, and if it is
//!   not yet greater, wait until it changes, then look again.
//! * Masked waits compare `value & mask`. NVIDIA's hardware accepts only masks made of 0, 1,
//!   2, 4 or 8 consecutive 0xFF bytes for wait tasks; this crate checks that rule on every
//!   provider, so code that runs here also runs on a BlueField.
//! * The event keeps the tasks its operations run on, one per operation of a kind in flight
//!   at once (held tasks, as an RDMA connection's operations): an operation points one at its
//!   parameters with its kind's setters and submits it, and the completion writes its record
//!   directly. No allocation and no completion slot per operation (`examples/op_cost sync`:
//!   an add and a wait 2 188 → 1 990 instructions with tasks kept on the context, 1 546 →
//!   1 216 on held tasks).
//!
//! # Ownership and threads
//! A `SyncEvent` belongs to the executor it was created on (`!Send`). Dropping it never
//! blocks: a stopped event is destroyed at once; one with tasks in flight is stopped (the
//! tasks are flushed, their futures fail with [`ErrorKind::Cancelled`]) and destroyed by
//! the executor once idle. Dropping an operation's future while its task is in flight is
//! harmless: the result is discarded when DOCA completes the task.
//!
//! [`ErrorKind::Cancelled`]: crate::ErrorKind::Cancelled

use std::fmt;
use std::rc::Rc;

use crate::device::Device;
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::completion::{HeldOp, HeldPool};
use crate::ext::DocaCtx;
use crate::ext::{completion_cb, success_cb, DocaTask, TaskSlot};
use crate::sys;

/// Where a side of the event lives (DOCA's publisher and subscriber locations).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Location {
    /// This host's CPU (through the device the event was built with).
    #[default]
    Cpu,
    /// The other side of the PCI bus: the DPU, when the event is created on the host.
    RemotePci,
    /// A remote node over the network (publisher only, as in DOCA).
    RemoteNet,
}

/// Configures and creates a [`SyncEvent`].
///
/// ```
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::sync_event::{Location, SyncEvent};
/// let dev = async_doca::Device::open_default()?;
/// let ev = SyncEvent::builder(&dev)
///     .publisher(Location::RemotePci) // the DPU (or another process) signals us
///     .max_tasks(32)
///     .build()
///     .await?;
/// assert_eq!(ev.get().await?, 0);
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build() is awaited"]
pub struct SyncEventBuilder {
    dev: Device,
    publisher: Location,
    subscriber: Location,
    max_tasks: u32,
}

/// Default size of each task pool (per operation kind).
pub const DEFAULT_MAX_TASKS: u32 = 64;

impl SyncEventBuilder {
    /// Where the side that updates the counter runs (default: this CPU).
    pub fn publisher(mut self, loc: Location) -> Self {
        self.publisher = loc;
        self
    }

    /// Where the side that waits runs (default: this CPU). `RemoteNet` is not a subscriber
    /// location in DOCA and is rejected by `build`.
    pub fn subscriber(mut self, loc: Location) -> Self {
        self.subscriber = loc;
        self
    }

    /// How many operations of each kind (get, set, add, wait) may be in flight at once.
    /// More wait for a free task (back-pressure), they do not fail.
    pub fn max_tasks(mut self, n: u32) -> Self {
        self.max_tasks = n;
        self
    }

    /// Creates the event on the current executor and starts it.
    ///
    /// # Errors
    /// Outside an executor ([`ErrorKind::BadState`]), for an invalid configuration
    /// ([`ErrorKind::InvalidArgument`]), or when DOCA refuses.
    pub async fn build(self) -> Result<SyncEvent> {
        if self.max_tasks == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "sync_event: max_tasks must be at least 1"));
        }
        if self.subscriber == Location::RemoteNet {
            return Err(Error::new(ErrorKind::InvalidArgument, "sync_event: RemoteNet is not a subscriber location"));
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: valid out-pointer; ownership of the new event passes to `DocaCtx` below.
        check(unsafe { sys::doca_sync_event_create(&mut ev) }, "sync_event: create")?;
        let dev = self.dev.as_ptr();
        // SAFETY: `ev` is a fresh, unstarted event; `dev` is open for the event's life (the
        // destroy closure of `adopt` keeps a clone of the device).
        let located = unsafe {
            match self.publisher {
                Location::Cpu => {
                    check(sys::doca_sync_event_add_publisher_location_cpu(ev, dev), "sync_event: publisher")
                }
                Location::RemotePci => {
                    check(sys::doca_sync_event_add_publisher_location_remote_pci(ev), "sync_event: publisher")
                }
                Location::RemoteNet => {
                    check(sys::doca_sync_event_add_publisher_location_remote_net(ev), "sync_event: publisher")
                }
            }
            .and_then(|()| match self.subscriber {
                Location::RemotePci => {
                    check(sys::doca_sync_event_add_subscriber_location_remote_pci(ev), "sync_event: subscriber")
                }
                _ => check(sys::doca_sync_event_add_subscriber_location_cpu(ev, dev), "sync_event: subscriber"),
            })
        };
        if let Err(e) = located {
            // SAFETY: the event is ours, unstarted, and not used afterwards.
            unsafe { sys::doca_sync_event_destroy(ev) };
            return Err(e);
        }
        let export_net = self.publisher == Location::RemoteNet;
        SyncEvent::adopt(ev, self.dev, self.max_tasks, Origin::Created { export_net }).await
    }
}

#[derive(Debug, Clone, Copy)]
enum Origin {
    Created { export_net: bool },
    Imported,
}

/// A DOCA sync event on the current executor: a 64-bit counter with async operations.
///
/// ```
/// # async_doca::Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
/// use async_doca::sync_event::SyncEvent;
/// let dev = async_doca::Device::open_default()?;
/// let ev = SyncEvent::builder(&dev).build().await?;
/// // Another executor, process or the DPU opens the same counter from this blob.
/// let peer = SyncEvent::open(&dev, &ev.export()?).await?;
/// assert_eq!(peer.add(5).await?, 0); // add returns the previous value
/// ev.wait_eq(5).await?;
/// assert_eq!(ev.wait_gt(4).await?, 5); // wait_gt returns the value it saw
/// # Ok::<(), async_doca::Error>(()) })?;
/// # Ok::<(), async_doca::Error>(())
/// ```
pub struct SyncEvent {
    /// The tasks the event's operations run on, one per operation of a kind in flight at once
    /// (see `completion::held_op`). Before `ctx`: its idle tasks go back before the context
    /// is stopped.
    pool: HeldPool,
    ctx: DocaCtx<sys::doca_sync_event>,
    dev: Device,
    origin: Origin,
}

impl SyncEvent {
    /// A builder for a new event on `dev`.
    pub fn builder(dev: &Device) -> SyncEventBuilder {
        SyncEventBuilder {
            dev: dev.clone(),
            publisher: Location::Cpu,
            subscriber: Location::Cpu,
            max_tasks: DEFAULT_MAX_TASKS,
        }
    }

    /// Opens the event another side exported, on the current executor, with the default
    /// task-pool size. The exporter must still exist when this is called.
    ///
    /// # Errors
    /// A corrupted, truncated or foreign blob gives [`ErrorKind::InvalidArgument`] (or
    /// [`ErrorKind::PermissionDenied`] for a wrong key); an exporter that is gone gives
    /// [`ErrorKind::NotFound`]; a blob exported to the remote network (publisher
    /// [`Location::RemoteNet`]) gives [`ErrorKind::NotSupported`]: DOCA opens only PCI
    /// exports as events.
    pub async fn open(dev: &Device, blob: &[u8]) -> Result<SyncEvent> {
        Self::open_with_tasks(dev, blob, DEFAULT_MAX_TASKS).await
    }

    /// [`open`](SyncEvent::open) with a task-pool size per operation kind.
    pub async fn open_with_tasks(dev: &Device, blob: &[u8], max_tasks: u32) -> Result<SyncEvent> {
        if max_tasks == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "sync_event: max_tasks must be at least 1"));
        }
        let mut ev = std::ptr::null_mut();
        // SAFETY: `blob` is readable for its length; valid out-pointer.
        let rc = unsafe { sys::doca_sync_event_create_from_export(dev.as_ptr(), blob.as_ptr(), blob.len(), &mut ev) };
        if rc == sys::DOCA_ERROR_NOT_SUPPORTED {
            // DOCA opens only PCI exports here; the runtime cannot tell an opaque network
            // export apart, so it says what the likely cause is.
            return Err(Error::from_doca(
                rc,
                "sync_event: open from export blob: DOCA opens only blobs exported to a remote PCI \
                 peer here (publisher Location::RemotePci or Cpu); a blob exported to the remote \
                 network (publisher Location::RemoteNet) is a target of RDMA remote-net operations \
                 instead",
            ));
        }
        check(rc, "sync_event: open from export blob")?;
        Self::adopt(ev, dev.clone(), max_tasks, Origin::Imported).await
    }

    /// Hands `ev` to a [`DocaCtx`] on this executor, configures the task pools, starts it.
    async fn adopt(ev: *mut sys::doca_sync_event, dev: Device, max_tasks: u32, origin: Origin) -> Result<SyncEvent> {
        let keep_dev = dev.clone();
        // SAFETY: `ev` is a live, unstarted event created on this thread that only the
        // DocaCtx destroys; its ctx is IDLE and unconnected. The destroy closure keeps the
        // device open until the event is gone (which may be after this SyncEvent dropped).
        let ctx = unsafe {
            DocaCtx::new("sync_event", ev, sys::doca_sync_event_as_ctx(ev), move |ev| {
                let rc = sys::doca_sync_event_destroy(ev);
                drop(keep_dev);
                rc
            })
        }?;
        // SAFETY: the event is live and IDLE; each callback is the monomorphised completion
        // callback of the matching kind, with the exact C signature.
        unsafe {
            check(
                sys::doca_sync_event_task_get_set_conf(
                    ev,
                    Some(success_cb::<Get>),
                    Some(completion_cb::<Get>),
                    max_tasks,
                ),
                "sync_event: configure get tasks",
            )?;
            check(
                sys::doca_sync_event_task_notify_set_set_conf(
                    ev,
                    Some(success_cb::<NotifySet>),
                    Some(completion_cb::<NotifySet>),
                    max_tasks,
                ),
                "sync_event: configure set tasks",
            )?;
            check(
                sys::doca_sync_event_task_notify_add_set_conf(
                    ev,
                    Some(success_cb::<NotifyAdd>),
                    Some(completion_cb::<NotifyAdd>),
                    max_tasks,
                ),
                "sync_event: configure add tasks",
            )?;
            check(
                sys::doca_sync_event_task_wait_eq_set_conf(
                    ev,
                    Some(success_cb::<WaitEq>),
                    Some(completion_cb::<WaitEq>),
                    max_tasks,
                ),
                "sync_event: configure wait_eq tasks",
            )?;
            check(
                sys::doca_sync_event_task_wait_neq_set_conf(
                    ev,
                    Some(success_cb::<WaitNeq>),
                    Some(completion_cb::<WaitNeq>),
                    max_tasks,
                ),
                "sync_event: configure wait_neq tasks",
            )?;
        }
        ctx.start().await?;
        // An event's operations take no descriptors: nothing to keep for an abandoned one.
        let pool = HeldPool::new(ctx.record(), Rc::new(()));
        Ok(SyncEvent { pool, ctx, dev, origin })
    }

    /// The blob that lets another process (or the DPU) open this counter with
    /// [`SyncEvent::open`]. It contains a secret key: send it only to the intended peer.
    ///
    /// # Errors
    /// [`ErrorKind::BadState`] for an event that was itself opened from a blob.
    pub fn export(&self) -> Result<Vec<u8>> {
        let export_net = match self.origin {
            Origin::Created { export_net } => export_net,
            Origin::Imported => {
                return Err(Error::new(ErrorKind::BadState, "sync_event.export: an opened event cannot be re-exported"))
            }
        };
        let ev = self.ctx.as_ptr()?;
        let mut data = std::ptr::null();
        let mut len = 0usize;
        // SAFETY: live, started event of this thread; valid out-pointers.
        let rc = unsafe {
            if export_net {
                sys::doca_sync_event_export_to_remote_net(ev, &mut data, &mut len)
            } else {
                sys::doca_sync_event_export_to_remote_pci(ev, self.dev.as_ptr(), &mut data, &mut len)
            }
        };
        check(rc, "sync_event.export")?;
        if data.is_null() {
            return Err(Error::new(ErrorKind::Other, "sync_event.export: DOCA returned no data"));
        }
        // SAFETY: DOCA returned `len` readable bytes owned by the event, which is alive; they
        // are copied before anything else touches the event.
        Ok(unsafe { std::slice::from_raw_parts(data, len) }.to_vec())
    }

    /// Operation `op` of kind `K`, prepared by `alloc`, as a future on one of the event's
    /// held tasks (see `completion::held_op`).
    #[inline(always)]
    fn op<K, F>(&self, op: &'static str, alloc: F) -> HeldOp<'_, K, F, ()>
    where
        K: DocaTask,
        F: FnMut(&TaskSlot) -> std::result::Result<*mut K::Task, sys::doca_error_t>,
    {
        HeldOp::new(self.ctx.core(), &self.pool, op, alloc, None, 0, ())
    }

    /// The counter's current value.
    pub async fn get(&self) -> Result<u64> {
        let ev = self.ctx.as_ptr()?;
        let out = self
            .op::<Get, _>("sync_event.get", |slot| {
                // SAFETY: live event; the result pointer, a get's only parameter, is set;
                // `out_ptr(0)` stays valid until the task completes, even if this future is
                // dropped first (its slot or held record outlives the task).
                unsafe {
                    // Every parameter is an operand: set on a held task (the event's own) or a kept one.
                    let point = |k| sys::doca_sync_event_task_get_set_ret_val_ptr(k, slot.out_ptr(0));
                    self.ctx.reuse_held_or_alloc::<Get>(
                        slot,
                        false,
                        |_| {},
                        point,
                        |_| {},
                        |t| sys::doca_sync_event_task_get_alloc_init(ev, slot.out_ptr(0), slot.user_data(), t),
                    )
                }
            })
            .await
            .0?;
        Ok(out[0])
    }

    /// Sets the counter to `value`, waking waiters whose condition now holds.
    pub async fn set(&self, value: u64) -> Result<()> {
        let ev = self.ctx.as_ptr()?;
        self.op::<NotifySet, _>("sync_event.set", |slot| {
            // SAFETY: live event; the value, a set's only parameter, is set.
            unsafe {
                // Every parameter is an operand: set on a held task (the event's own) or a kept one.
                let point = |k| sys::doca_sync_event_task_notify_set_set_set_val(k, value);
                self.ctx.reuse_held_or_alloc::<NotifySet>(
                    slot,
                    false,
                    |_| {},
                    point,
                    |_| {},
                    |t| sys::doca_sync_event_task_notify_set_alloc_init(ev, value, slot.user_data(), t),
                )
            }
        })
        .await
        .0?;
        Ok(())
    }

    /// Adds `delta` (wrapping) to the counter and returns the value it had before.
    pub async fn add(&self, delta: u64) -> Result<u64> {
        let ev = self.ctx.as_ptr()?;
        let out = self
            .op::<NotifyAdd, _>("sync_event.add", |slot| {
                // SAFETY: live event; both parameters of an add are set (the increment and
                // the result pointer, `out_ptr(0)`, valid until the task completes).
                unsafe {
                    // Every parameter is an operand: set on a held task (the event's own) or a kept one.
                    let point = |k| {
                        sys::doca_sync_event_task_notify_add_set_inc_val(k, delta);
                        sys::doca_sync_event_task_notify_add_set_fetched_val_ptr(k, slot.out_ptr(0));
                    };
                    self.ctx.reuse_held_or_alloc::<NotifyAdd>(
                        slot,
                        false,
                        |_| {},
                        point,
                        |_| {},
                        |t| {
                            sys::doca_sync_event_task_notify_add_alloc_init(
                                ev,
                                delta,
                                slot.out_ptr(0),
                                slot.user_data(),
                                t,
                            )
                        },
                    )
                }
            })
            .await
            .0?;
        Ok(out[0])
    }

    /// Waits until the counter equals `value`.
    pub async fn wait_eq(&self, value: u64) -> Result<()> {
        self.wait_eq_masked(value, u64::MAX).await
    }

    /// Waits until `counter & mask == value`. See [`SyncEvent::wait_gt_masked`] for the mask
    /// rule.
    pub async fn wait_eq_masked(&self, value: u64, mask: u64) -> Result<()> {
        check_mask(mask, "sync_event.wait_eq")?;
        let ev = self.ctx.as_ptr()?;
        self.op::<WaitEq, _>("sync_event.wait_eq", |slot| {
            // SAFETY: live event; both parameters of a wait are set (value and mask).
            unsafe {
                // Every parameter is an operand: set on a held task (the event's own) or a kept one.
                let point = |k| {
                    sys::doca_sync_event_task_wait_eq_set_wait_val(k, value);
                    sys::doca_sync_event_task_wait_eq_set_mask(k, mask);
                };
                self.ctx.reuse_held_or_alloc::<WaitEq>(
                    slot,
                    false,
                    |_| {},
                    point,
                    |_| {},
                    |t| sys::doca_sync_event_task_wait_eq_alloc_init(ev, value, mask, slot.user_data(), t),
                )
            }
        })
        .await
        .0?;
        Ok(())
    }

    /// Waits until the counter differs from `value`.
    pub async fn wait_neq(&self, value: u64) -> Result<()> {
        self.wait_neq_masked(value, u64::MAX).await
    }

    /// Waits until `counter & mask != value`. See [`SyncEvent::wait_gt_masked`] for the mask
    /// rule.
    pub async fn wait_neq_masked(&self, value: u64, mask: u64) -> Result<()> {
        check_mask(mask, "sync_event.wait_neq")?;
        let ev = self.ctx.as_ptr()?;
        self.op::<WaitNeq, _>("sync_event.wait_neq", |slot| {
            // SAFETY: live event; both parameters of a wait are set (value and mask).
            unsafe {
                // Every parameter is an operand: set on a held task (the event's own) or a kept one.
                let point = |k| {
                    sys::doca_sync_event_task_wait_neq_set_wait_val(k, value);
                    sys::doca_sync_event_task_wait_neq_set_mask(k, mask);
                };
                self.ctx.reuse_held_or_alloc::<WaitNeq>(
                    slot,
                    false,
                    |_| {},
                    point,
                    |_| {},
                    |t| sys::doca_sync_event_task_wait_neq_alloc_init(ev, value, mask, slot.user_data(), t),
                )
            }
        })
        .await
        .0?;
        Ok(())
    }

    /// Waits until the counter is greater than `value`; returns the counter as seen then.
    pub async fn wait_gt(&self, value: u64) -> Result<u64> {
        self.wait_gt_masked(value, u64::MAX).await
    }

    /// Waits until `counter & mask > value`; returns the full counter as seen then.
    ///
    /// Masks follow the hardware rule for wait tasks: 0, or 1, 2, 4 or 8 consecutive 0xFF
    /// bytes (`0xFF`, `0xFFFF_0000`, `u64::MAX`, ...). Other masks are
    /// [`ErrorKind::InvalidArgument`] on every provider.
    pub async fn wait_gt_masked(&self, value: u64, mask: u64) -> Result<u64> {
        check_mask(mask, "sync_event.wait_gt")?;
        loop {
            let now = self.get().await?;
            if now & mask > value {
                return Ok(now);
            }
            // Not yet: sleep until the masked value moves, then look again. A change that
            // lands between the get and the wait makes the wait complete at once.
            self.wait_neq_masked(now & mask, mask).await?;
        }
    }

    /// Stops the event: operations in flight fail with [`ErrorKind::Cancelled`]. The event
    /// is then unusable; dropping it afterwards destroys it at once.
    pub async fn stop(&self) -> Result<()> {
        self.ctx.stop().await
    }

    /// The device the event was created or opened on.
    pub fn device(&self) -> &Device {
        &self.dev
    }
}

impl fmt::Debug for SyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SyncEvent")
            .field("state", &self.ctx.state().ok())
            .field("origin", &self.origin)
            .field("in_flight", &self.ctx.outstanding_tasks())
            .finish()
    }
}

/// The hardware rule for wait masks: 0, or a run of 1, 2, 4 or 8 consecutive 0xFF bytes
/// (every other byte 0x00).
pub fn is_valid_wait_mask(mask: u64) -> bool {
    if mask == 0 || mask == u64::MAX {
        // The common cases (every unmasked wait), without the byte scan.
        return true;
    }
    let bytes = mask.to_le_bytes();
    if bytes.iter().any(|&b| b != 0 && b != 0xFF) {
        return false;
    }
    let first = bytes.iter().position(|&b| b == 0xFF).unwrap_or(0);
    let run = bytes[first..].iter().take_while(|&&b| b == 0xFF).count();
    let total = bytes.iter().filter(|&&b| b == 0xFF).count();
    run == total && matches!(run, 1 | 2 | 4 | 8)
}

fn check_mask(mask: u64, op: &'static str) -> Result<()> {
    if is_valid_wait_mask(mask) {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("{op}: mask {mask:#x} is not 0 or 1, 2, 4 or 8 consecutive 0xFF bytes"),
        ))
    }
}

macro_rules! sync_event_task_kind {
    ($(#[$m:meta])* $kind:ident, $task:ident, $as_task:ident, $reuse:expr) => {
        sync_event_task_kind!($(#[$m])* $kind, $task, $as_task, $reuse, false);
    };
    ($(#[$m:meta])* $kind:ident, $task:ident, $as_task:ident, $reuse:expr, $ahead:expr) => {
        $(#[$m])*
        struct $kind;
        // SAFETY: `as_task` is DOCA's conversion for this task type; freeing with
        // doca_task_free (the default) is how sync event tasks are released.
        unsafe impl DocaTask for $kind {
            type Task = sys::$task;
            const REUSE: Option<usize> = Some($reuse);
            const POSTED_AHEAD: bool = $ahead;
            #[inline]
            unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
                // SAFETY: forwarded; the caller passes a live task of this type.
                unsafe { sys::$as_task(task) }
            }
        }
    };
}

sync_event_task_kind!(
    /// `get`: DOCA writes the value through the slot's result pointer.
    Get, doca_sync_event_task_get, doca_sync_event_task_get_as_doca_task, 0
);
sync_event_task_kind!(NotifySet, doca_sync_event_task_notify_set, doca_sync_event_task_notify_set_as_doca_task, 1);
sync_event_task_kind!(
    /// `add`: DOCA writes the previous value through the slot's result pointer.
    NotifyAdd, doca_sync_event_task_notify_add, doca_sync_event_task_notify_add_as_doca_task, 2
);
// The waits are posted ahead of what completes them (`DocaTask::POSTED_AHEAD`): they spin in
// their poll only while the executor's spins for such waits catch their completions.
sync_event_task_kind!(WaitEq, doca_sync_event_task_wait_eq, doca_sync_event_task_wait_eq_as_doca_task, 3, true);
sync_event_task_kind!(WaitNeq, doca_sync_event_task_wait_neq, doca_sync_event_task_wait_neq_as_doca_task, 4, true);

#[cfg(test)]
mod tests {
    use super::{is_valid_wait_mask, NotifyAdd, SyncEvent, WaitEq};
    use crate::executor::local::with_current;
    use crate::Device;

    fn slots_in_use() -> usize {
        with_current(|core| core.slots.in_use()).expect("inside the runtime")
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider")]
    fn an_event_runs_its_operations_on_held_tasks_and_a_dropped_wait_on_its_own() {
        crate::testkit::runtime()
            .block_on(async {
                let ev = SyncEvent::builder(&Device::open_default()?).build().await?;
                let slots = slots_in_use();
                for i in 0..5 {
                    assert_eq!(ev.add(1).await?, i);
                    ev.wait_eq(i + 1).await?;
                }
                assert_eq!((ev.pool.idle_of::<NotifyAdd>().0, ev.pool.idle_of::<WaitEq>().0), (1, 1));
                assert_eq!(slots_in_use(), slots, "no completion slot");
                // A wait that cannot complete yet, polled once and dropped: its task stays
                // posted on a group of its own until the value comes.
                let mut wait = Box::pin(ev.wait_eq(7));
                let polled = poll_once(wait.as_mut());
                assert!(polled.is_pending());
                drop(wait);
                assert_eq!(ev.pool.idle_of::<WaitEq>().0, 0, "the dropped wait's task is not reused");
                assert_eq!(ev.ctx.outstanding_tasks(), 1);
                ev.set(7).await?;
                for _ in 0..100 {
                    if ev.ctx.outstanding_tasks() == 0 {
                        break;
                    }
                    crate::executor::yield_now().await;
                }
                assert_eq!(ev.ctx.outstanding_tasks(), 0, "the dropped wait completed and went");
                ev.wait_eq(7).await?;
                assert_eq!(ev.pool.idle_of::<WaitEq>().0, 1);
                Ok::<_, crate::Error>(())
            })
            .unwrap();
    }

    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
        f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn wait_masks_follow_the_hardware_rule() {
        for ok in [0, 0xFF, 0xFF00, 0xFFFF, 0xFFFF_0000, 0xFFFF_FFFF, 0xFFFF_FFFF_0000_0000, u64::MAX, 0xFF << 56] {
            assert!(is_valid_wait_mask(ok), "{ok:#x}");
        }
        for bad in [1, 0xF0, 0xFF_FFFF, 0xFF00FF, 0x1FF, 0xFFFF_FF00_0000_0000, 0x00FF_FFFF_FFFF_FF00] {
            assert!(!is_valid_wait_mask(bad), "{bad:#x}");
        }
    }
}
