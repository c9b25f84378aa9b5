//! `doca_urom_worker_cmd_task`: one plugin command and its notification.
//!
//! * The pool has the worker's `max_inflight_tasks` tasks (configured at worker start); one
//!   more allocation is `NO_MEMORY`.
//! * Every task has a **payload** and a **response** `doca_buf` of the effective maximum message
//!   size, over memory owned by the worker (`TaskMemory`): the user packs the command at the
//!   payload's data pointer and sets its data length (`doca_buf_set_data`); on completion the
//!   response's data is the plugin's notification body. At allocation the payload's data is
//!   its whole capacity (data at head, length = the message size: NVIDIA's hosts pack into
//!   `doca_buf_get_data_len` bytes at `doca_buf_get_data` and then set the packed length) and
//!   the response is empty. The user must not release them (they are the task's).
//! * `allocate` leaves the plugin unset (0, which no submit accepts: `set_plugin` first);
//!   `allocate_init` is `allocate` + `set_plugin`.
//! * 32 bytes of inline user data, zeroed at allocation.
//! * One callback (`set_cb`) for success and failure; `doca_task_get_status` tells them apart:
//!   the `Notify`'s status, `CONNECTION_ABORTED` when the worker's connection broke, or the
//!   ctx's flush status on stop.
//! * Submit: `NOT_CONNECTED` once the worker's connection broke; `INVALID_VALUE` for a plugin
//!   that is not exactly one of the worker's plugins; `TOO_BIG` for a payload above the
//!   effective message size. The command is sent at once, or queued behind earlier packets if
//!   the socket is momentarily full (never dropped, never blocking).
//! * `release` returns an allocated task to the pool (`IN_PROGRESS` while it is in flight).
//!
//! Layering: this module is the task type, its buffer memory and the per-task entry points
//! (decode and validate). The worker (`worker.rs`), the layer above, owns what moves a
//! command: the task kind's submit and release hooks and the `..._allocate` entry points
//! (which take a worker), so this module never names the worker.

use core::cell::{Cell, UnsafeCell};
use core::ffi::c_void;
use core::ptr;
use std::alloc::{alloc_zeroed, dealloc, Layout};

use super::CMD_USER_DATA_BYTES;
use crate::buf::{doca_buf, doca_buf_dec_refcount, doca_buf_get_data, doca_buf_get_data_len, doca_buf_inventory};
use crate::buf::{
    doca_buf_inventory_buf_get_by_args, doca_buf_inventory_create, doca_buf_inventory_destroy,
    doca_buf_inventory_start, doca_buf_inventory_stop, doca_buf_set_data,
};
use crate::ffi::{guard, guard_err};
use crate::mmap::{
    doca_mmap, doca_mmap_create, doca_mmap_destroy, doca_mmap_set_memrange, doca_mmap_start, doca_mmap_stop,
};
use crate::task::{self, doca_task, TaskState};
use crate::types::*;

/// `struct doca_urom_worker_cmd_task`.
#[repr(C)]
pub struct doca_urom_worker_cmd_task {
    base: doca_task,
    plugin: Cell<u64>,
    payload: Cell<*mut doca_buf>,
    response: Cell<*mut doca_buf>,
    /// The index of this task's buffer pair in the worker's [`TaskMemory`].
    pair: Cell<u32>,
    /// The key of the submitted command (the `ctx` of `Command` and `Notify`).
    pub(crate) key: Cell<u64>,
    user_data: UnsafeCell<[u64; CMD_USER_DATA_BYTES / 8]>,
}

impl doca_urom_worker_cmd_task {
    /// A task as it sits free in the pool: no plugin, no buffers (the pool's `with_header`).
    pub(super) fn idle(base: doca_task) -> Self {
        Self {
            base,
            plugin: Cell::new(0),
            payload: Cell::new(ptr::null_mut()),
            response: Cell::new(ptr::null_mut()),
            pair: Cell::new(u32::MAX),
            key: Cell::new(0),
            user_data: UnsafeCell::new([0; CMD_USER_DATA_BYTES / 8]),
        }
    }

    /// Gives a freshly allocated task its buffer pair (`pair`: payload `payload`, response
    /// `response`) and its plugin, and clears its key and inline user data.
    ///
    /// # Safety
    /// The task was just allocated and is not handed out yet: no other reference to its user
    /// data exists.
    pub(super) unsafe fn assign(&self, pair: u32, payload: *mut doca_buf, response: *mut doca_buf, plugin: u64) {
        self.pair.set(pair);
        self.payload.set(payload);
        self.response.set(response);
        self.plugin.set(plugin);
        self.key.set(0);
        // SAFETY: the task is ours (allocated, not handed out yet): no other reference to its
        // user data exists (the caller's contract).
        unsafe { *self.user_data.get() = [0; CMD_USER_DATA_BYTES / 8] };
    }

    /// Takes the task's buffer pair away (it is being freed): the pair index, or `u32::MAX`
    /// when it had none.
    pub(super) fn detach_pair(&self) -> u32 {
        let pair = self.pair.replace(u32::MAX);
        self.payload.set(ptr::null_mut());
        self.response.set(ptr::null_mut());
        pair
    }

    /// The command's plugin.
    pub(crate) fn plugin(&self) -> u64 {
        self.plugin.get()
    }

    /// The payload bytes the user packed, borrowed from the task's payload buffer for as long
    /// as the submit that reads them (DOCA's contract: the user does not change a task's
    /// buffers while submitting it).
    pub(crate) fn payload_bytes(&self) -> Result<&[u8], doca_error_t> {
        let b = self.payload.get();
        let mut data: *mut c_void = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: `b` is this task's payload buffer (alive while the worker's TaskMemory is,
        // which outlives every allocated task); valid out-pointers.
        let r = unsafe { doca_buf_get_data(b, &mut data) };
        if r != DOCA_SUCCESS {
            return Err(r);
        }
        // SAFETY: as above.
        let r = unsafe { doca_buf_get_data_len(b, &mut len) };
        if r != DOCA_SUCCESS {
            return Err(r);
        }
        if len == 0 {
            return Ok(&[]);
        }
        // SAFETY: the buffer module keeps [data, data+len) inside the buffer's head range, which
        // lies in the worker's TaskMemory region: alive while this task is (the memory
        // outlives every allocated task), so for the borrow of `self`. The user does not write
        // it while the task is being submitted (DOCA's contract), the only time it is read.
        Ok(unsafe { std::slice::from_raw_parts(data as *const u8, len) })
    }

    /// Writes the packed notification into the response buffer (data at head). TOO_BIG when
    /// it does not fit (the response keeps no data then).
    pub(crate) fn set_response(&self, mem: &TaskMemory, packed: &[u8]) -> Result<(), doca_error_t> {
        let (head, cap) = mem.region(self.pair.get(), 1);
        let r = self.response.get();
        if packed.len() > cap {
            // SAFETY: `r` is this task's live response buffer; head is its own head.
            unsafe { doca_buf_set_data(r, head.cast(), 0) };
            return Err(DOCA_ERROR_TOO_BIG);
        }
        // SAFETY: [head, head+cap) is this task's response region inside the live TaskMemory
        // allocation; nobody else writes it while the task is in flight.
        unsafe { ptr::copy_nonoverlapping(packed.as_ptr(), head, packed.len()) };
        // SAFETY: `r` is this task's live response buffer; the range is inside its head range.
        let st = unsafe { doca_buf_set_data(r, head.cast(), packed.len()) };
        if st == DOCA_SUCCESS {
            Ok(())
        } else {
            Err(st)
        }
    }
}

/// The payload and response buffers of a worker's command tasks: one zeroed region of
/// `2 × tasks × cap` bytes (pages are committed lazily by the kernel), a private mmap over it,
/// and an inventory holding two buffers per task for the region's whole life.
pub(crate) struct TaskMemory {
    base: *mut u8,
    layout: Layout,
    cap: usize,
    tasks: u32,
    mmap: *mut doca_mmap,
    inv: *mut doca_buf_inventory,
    bufs: Vec<*mut doca_buf>,
    free: Vec<u32>,
}

impl TaskMemory {
    /// Buffers for `tasks` tasks of `cap` bytes each way.
    pub(crate) fn new(tasks: u32, cap: usize) -> Result<TaskMemory, doca_error_t> {
        let cap = cap.max(1);
        let total = cap.checked_mul(2 * tasks as usize).ok_or(DOCA_ERROR_NO_MEMORY)?;
        let layout = Layout::from_size_align(total, 64).map_err(|_| DOCA_ERROR_NO_MEMORY)?;
        // SAFETY: `total` > 0 (cap ≥ 1, tasks ≥ 1 by the worker's validation).
        let base = unsafe { alloc_zeroed(layout) };
        if base.is_null() {
            return Err(DOCA_ERROR_NO_MEMORY);
        }
        let mut m = TaskMemory {
            base,
            layout,
            cap,
            tasks,
            mmap: ptr::null_mut(),
            inv: ptr::null_mut(),
            bufs: Vec::with_capacity(2 * tasks as usize),
            free: (0..tasks).rev().collect(),
        };
        // On error, Drop releases whatever was set up.
        m.setup()?;
        Ok(m)
    }

    fn setup(&mut self) -> Result<(), doca_error_t> {
        let ok = |r: doca_error_t| if r == DOCA_SUCCESS { Ok(()) } else { Err(r) };
        // SAFETY: (every call below) the provider's own entry points with valid out-pointers and
        // objects created just before; the memrange is our live allocation of `layout.size()`.
        unsafe {
            ok(doca_mmap_create(&mut self.mmap))?;
            ok(doca_mmap_set_memrange(self.mmap, self.base.cast(), self.layout.size()))?;
            ok(doca_mmap_start(self.mmap))?;
            ok(doca_buf_inventory_create(2 * self.tasks as usize, &mut self.inv))?;
            ok(doca_buf_inventory_start(self.inv))?;
            for i in 0..2 * self.tasks as usize {
                let p = self.base.add(i * self.cap);
                let mut b = ptr::null_mut();
                ok(doca_buf_inventory_buf_get_by_args(self.inv, self.mmap, p.cast(), self.cap, p.cast(), 0, &mut b))?;
                self.bufs.push(b);
            }
        }
        Ok(())
    }

    /// Whether this memory serves `tasks` tasks of `cap` bytes.
    pub(crate) fn fits(&self, tasks: u32, cap: usize) -> bool {
        self.tasks == tasks && self.cap == cap.max(1)
    }

    /// (start, capacity) of the payload (`which` 0) or response (1) region of `pair`.
    fn region(&self, pair: u32, which: usize) -> (*mut u8, usize) {
        debug_assert!(pair < self.tasks);
        // SAFETY: pair < tasks, so the offset stays inside the allocation.
        (unsafe { self.base.add((2 * pair as usize + which) * self.cap) }, self.cap)
    }

    /// Takes a free pair and resets its buffers: (pair, payload, response).
    fn take(&mut self) -> Option<(u32, *mut doca_buf, *mut doca_buf)> {
        let pair = self.free.pop()?;
        let (p, r) = (self.bufs[2 * pair as usize], self.bufs[2 * pair as usize + 1]);
        // The payload offers its whole capacity as data (DOCA's hosts pack into data_len bytes
        // at the data pointer, then set the packed length); the response is empty.
        for (b, which, len) in [(p, 0, self.cap), (r, 1, 0)] {
            let (head, _) = self.region(pair, which);
            // SAFETY: `b` is one of our live buffers, `head` its own head, `len` ≤ its size.
            unsafe { doca_buf_set_data(b, head.cast(), len) };
        }
        Some((pair, p, r))
    }

    pub(crate) fn give_back(&mut self, pair: u32) {
        if pair < self.tasks && !self.free.contains(&pair) {
            self.free.push(pair);
        }
    }
}

impl Drop for TaskMemory {
    fn drop(&mut self) {
        // SAFETY: (every call below) objects created in `setup`, each released once; the
        // region is freed only when no buffer can reference it any more.
        unsafe {
            for b in self.bufs.drain(..) {
                doca_buf_dec_refcount(b, ptr::null_mut());
            }
            let mut leak = false;
            if !self.inv.is_null() {
                doca_buf_inventory_stop(self.inv);
                leak |= doca_buf_inventory_destroy(self.inv) != DOCA_SUCCESS;
            }
            if !self.mmap.is_null() && !leak {
                doca_mmap_stop(self.mmap);
                leak |= doca_mmap_destroy(self.mmap) != DOCA_SUCCESS;
            }
            if leak {
                // The user kept extra references to a command buffer: freeing the memory would
                // leave them dangling, so it stays allocated.
                crate::sdk_log!(WARNING, "urom worker command buffers still referenced by the user; memory kept");
                return;
            }
            dealloc(self.base, self.layout);
        }
    }
}

/// Validates a command task pointer from C (a live task of this kind, not free).
///
/// # Safety
/// A non-NULL `p` must point to a task handed out by this provider.
unsafe fn cmd_ref<'a>(p: *const doca_urom_worker_cmd_task) -> Result<&'a doca_urom_worker_cmd_task, doca_error_t> {
    // SAFETY: per the contract (the header is the first field).
    let h = unsafe { crate::task::task_ref(p.cast::<doca_task>()) }?;
    if !h.is::<doca_urom_worker_cmd_task>() || h.state() == TaskState::Free {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: kind checked just above.
    Ok(unsafe { h.downcast::<doca_urom_worker_cmd_task>() })
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_release(task: *mut doca_urom_worker_cmd_task) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in cmd_ref.
        let c = unsafe { cmd_ref(task) }?;
        if task::header(c).state() != TaskState::Allocated {
            return Err(DOCA_ERROR_IN_PROGRESS);
        }
        // SAFETY: an allocated task of ours; the release hook returns its buffers.
        unsafe { crate::task::doca_task_free(task.cast()) };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_set_plugin(task: *mut doca_urom_worker_cmd_task, plugin: u64) {
    guard((), || {
        // SAFETY: as in cmd_ref.
        if let Ok(c) = unsafe { cmd_ref(task) } {
            if task::header(c).state() == TaskState::Allocated {
                c.plugin.set(plugin);
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_set_cb(
    task: *mut doca_urom_worker_cmd_task,
    cb: doca_urom_worker_cmd_task_completion_cb_t,
) {
    guard((), || {
        // SAFETY: as in cmd_ref.
        if let Ok(c) = unsafe { cmd_ref(task) } {
            if task::header(c).state() == TaskState::Allocated {
                task::set_callbacks(c, cb, cb);
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_get_payload(task: *mut doca_urom_worker_cmd_task) -> *mut doca_buf {
    guard(ptr::null_mut(), || {
        // SAFETY: as in cmd_ref.
        unsafe { cmd_ref(task) }.map(|c| c.payload.get()).unwrap_or(ptr::null_mut())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_get_response(task: *mut doca_urom_worker_cmd_task) -> *mut doca_buf {
    guard(ptr::null_mut(), || {
        // SAFETY: as in cmd_ref.
        unsafe { cmd_ref(task) }.map(|c| c.response.get()).unwrap_or(ptr::null_mut())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_get_user_data(task: *mut doca_urom_worker_cmd_task) -> *mut c_void {
    guard(ptr::null_mut(), || {
        // SAFETY: as in cmd_ref.
        unsafe { cmd_ref(task) }.map(|c| c.user_data.get().cast::<c_void>()).unwrap_or(ptr::null_mut())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_urom_worker_cmd_task_as_task(task: *mut doca_urom_worker_cmd_task) -> *mut doca_task {
    guard(ptr::null_mut(), || {
        // SAFETY: as in cmd_ref.
        match unsafe { cmd_ref(task) } {
            Ok(_) => task.cast(),
            Err(_) => ptr::null_mut(),
        }
    })
}

impl TaskMemory {
    /// Takes a pair (used by the worker, which owns the memory).
    pub(crate) fn take_pair(&mut self) -> Option<(u32, *mut doca_buf, *mut doca_buf)> {
        self.take()
    }
}
