//! The slot table of one executor: where a task's completion lands (see the
//! [module documentation](super) for the ownership rules).

use super::waiters::KeptWaker;
use super::{TaskOutput, OUT_WORDS};
use crate::mem::descriptors::TaskDescs;
use crate::sys;
use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::ptr::NonNull;

const CHUNK: usize = 64;
const NONE: u32 = u32::MAX;
/// Generations wrap at 31 bits, so that a slot key (generation above the index) never has
/// the bit that marks a held task's user data (`held::HELD_TAG`).
const GENERATION_MASK: u32 = 0x7fff_ffff;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum SlotState {
    Free,
    /// Reserved by a future; its task is not submitted (yet).
    Reserved,
    /// The task is submitted; DOCA owns it and may write the result area.
    InFlight,
    /// Completed; the future has not taken the result yet.
    Done,
    /// The future was dropped while the task was in flight; released at completion.
    Orphaned,
}

pub(super) struct Slot {
    pub(super) generation: Cell<u32>,
    pub(super) state: Cell<SlotState>,
    pub(super) status: Cell<sys::doca_error_t>,
    /// Written by DOCA through raw pointers while in flight; read only once `Done`.
    pub(super) out: UnsafeCell<TaskOutput>,
    pub(super) waker: Cell<Option<KeptWaker>>,
    pub(super) keepalive: Cell<Option<Box<dyn Any>>>,
    /// The `doca_buf` descriptors of the slot's task (at most two), taken by the allocation
    /// closure ([`TaskSlot::descs`](super::TaskSlot::descs)) and given back as soon as the
    /// task is over: by the completion callback right after it freed the task, or when the
    /// slot is released (a failed or abandoned operation). The slot holding them replaces a
    /// side table: nothing per operation is allocated or looked up to find them again.
    pub(super) descs: TaskDescs,
    pub(super) next_free: Cell<u32>,
    /// Reserved for a kind whose completion is another processor's answer
    /// ([`DocaTask::REMOTE`](super::DocaTask::REMOTE)): counted in `Slots::remote`.
    remote: Cell<bool>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            generation: Cell::new(1),
            state: Cell::new(SlotState::Free),
            status: Cell::new(sys::DOCA_SUCCESS),
            out: UnsafeCell::new([0; OUT_WORDS]),
            waker: Cell::new(None),
            keepalive: Cell::new(None),
            descs: TaskDescs::new(),
            next_free: Cell::new(NONE),
            remote: Cell::new(false),
        }
    }

    pub(super) fn out_ptr(&self) -> *mut u64 {
        self.out.get().cast::<u64>()
    }

    /// Gives the task's descriptors back (see [`TaskDescs::release`]).
    #[inline]
    pub(super) fn release_descs(&self) {
        self.descs.release();
    }
}

type Chunk = [Slot; CHUNK];

/// The slot table of one executor (see the module documentation).
pub(crate) struct Slots {
    /// Chunks from `Box::into_raw`: never moved, freed in `Drop` (unless leaked).
    chunks: RefCell<Vec<NonNull<Chunk>>>,
    free_head: Cell<u32>,
    in_use: Cell<usize>,
    /// Slots in use for remote kinds (see [`Slots::only_remote`]).
    remote: Cell<usize>,
    /// Set when slots were leaked at shutdown: DOCA may still write them, so the chunks must
    /// never be freed.
    leaked: Cell<bool>,
    /// While set (inline progress inside a task's poll, see `Core::progress_inline`), the
    /// buffers kept by released orphaned slots are not dropped but moved to `deferred`:
    /// their destructors are user code, which must not run in the middle of another task's
    /// poll. The loop drops them after its next drain ([`Slots::drop_deferred`]).
    defer: Cell<bool>,
    deferred: RefCell<Vec<Box<dyn Any>>>,
    /// Whether `deferred` may hold a buffer: set with each push, cleared when they are
    /// dropped. The loop's look after every drain is then one flag, not the list's borrow.
    any_deferred: Cell<bool>,
}

fn slot_key(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

impl Slots {
    pub(crate) fn new() -> Slots {
        Slots {
            chunks: RefCell::new(Vec::new()),
            free_head: Cell::new(NONE),
            in_use: Cell::new(0),
            remote: Cell::new(0),
            leaked: Cell::new(false),
            defer: Cell::new(false),
            deferred: RefCell::new(Vec::new()),
            any_deferred: Cell::new(false),
        }
    }

    /// Sets whether the drops of kept buffers are deferred (see `defer`): only by the inline
    /// progress's guard ([`Core::enter_inline_progress`](crate::executor::local::Core::enter_inline_progress)),
    /// which sets it for its region and clears it after.
    #[inline(always)]
    pub(crate) fn set_defer(&self, defer: bool) {
        self.defer.set(defer);
    }

    /// Whether buffers wait for [`drop_deferred`](Slots::drop_deferred).
    pub(crate) fn has_deferred(&self) -> bool {
        self.any_deferred.get()
    }

    /// Drops the buffers whose drop was deferred (see `defer`). Inlined for its common case,
    /// called at every progress of the loop: nothing deferred.
    #[inline]
    pub(crate) fn drop_deferred(&self) {
        if !self.any_deferred.get() || self.defer.get() {
            return;
        }
        self.drop_deferred_now();
    }

    #[cold]
    fn drop_deferred_now(&self) {
        self.any_deferred.set(false);
        let deferred = std::mem::take(&mut *self.deferred.borrow_mut());
        // Outside the borrow: a destructor may release more slots.
        drop(deferred);
    }

    #[inline]
    fn slot_at(&self, index: u32) -> Option<&Slot> {
        let chunk = *self.chunks.borrow().get(index as usize / CHUNK)?;
        // SAFETY: chunks are allocated by `grow` and freed only in `Drop`, so the pointer is
        // valid for the lifetime of `&self`; slots are only accessed through shared
        // references (all their fields are cells).
        Some(unsafe { &(*chunk.as_ptr())[index as usize % CHUNK] })
    }

    /// The slot of `key` if the key is current and the slot is in use.
    pub(super) fn get(&self, key: u64) -> Option<&Slot> {
        let slot = self.slot_at((key & 0xffff_ffff) as u32)?;
        (slot.generation.get() == (key >> 32) as u32 && slot.state.get() != SlotState::Free).then_some(slot)
    }

    fn grow(&self) {
        let mut chunks = self.chunks.borrow_mut();
        let base = chunks.len() * CHUNK;
        assert!(base + CHUNK < NONE as usize, "completion slots: too many operations in flight");
        let chunk: Box<Chunk> = Box::new(std::array::from_fn(|_| Slot::new()));
        // Link the new slots into the free list, lowest index first.
        for (i, s) in chunk.iter().enumerate() {
            let next = if i + 1 < CHUNK { (base + i + 1) as u32 } else { self.free_head.get() };
            s.next_free.set(next);
        }
        self.free_head.set(base as u32);
        chunks.push(NonNull::from(Box::leak(chunk)));
    }

    /// Reserves a slot; returns its key and the slot. The pointer stays valid as long as the
    /// table (chunks are never moved or freed before it), and the slot stays the caller's
    /// until it releases it (only an orphaned slot is released by someone else: the
    /// completion callback).
    // Inlined, as are `slot_at` and `Slot::release_descs`: each runs once per operation, and
    // out of line their calls and register saves cost a write future 20, 11 and 30
    // instructions of its ~1 240 (`op_cost write`, docs/cost.md, fourteenth session; a hint
    // on `get` or `release_slot` changed nothing, so they have none).
    #[inline]
    pub(super) fn reserve(&self) -> (u64, NonNull<Slot>) {
        if self.free_head.get() == NONE {
            self.grow();
        }
        let index = self.free_head.get();
        let slot = self.slot_at(index).expect("free list points past the slot table");
        self.free_head.set(slot.next_free.get());
        slot.state.set(SlotState::Reserved);
        slot.status.set(sys::DOCA_SUCCESS);
        // SAFETY: the slot was free, so nobody (DOCA included) holds a pointer into it.
        unsafe { *slot.out.get() = [0; OUT_WORDS] };
        self.in_use.set(self.in_use.get() + 1);
        (slot_key(index, slot.generation.get()), NonNull::from(slot))
    }

    /// [`reserve`](Slots::reserve) for an operation of a kind whose `DocaTask::REMOTE` is
    /// `remote` (a constant at every call site, so the common kinds pay nothing).
    #[inline(always)]
    pub(super) fn reserve_kind(&self, remote: bool) -> (u64, NonNull<Slot>) {
        let (key, slot) = self.reserve();
        if remote {
            if let Some(s) = self.get(key) {
                s.remote.set(true);
                self.remote.set(self.remote.get() + 1);
            }
        }
        (key, slot)
    }

    /// Whether operations are in flight (or done and not collected yet) and every one of
    /// them is of a remote kind: then an adaptive idle spins the yielding way (see
    /// `Core::turn`).
    #[inline]
    pub(crate) fn only_remote(&self) -> bool {
        let n = self.remote.get();
        n > 0 && n == self.in_use.get()
    }

    /// Returns the slot of `key` (`slot`, the live slot of that key, already looked up) to
    /// the free list, dropping its waker and keep-alive afterwards.
    pub(super) fn release_slot(&self, key: u64, slot: &Slot) {
        debug_assert!(slot.generation.get() == (key >> 32) as u32 && slot.state.get() != SlotState::Free);
        // Descriptors first: the kept buffers (dropped below) may hold their inventory.
        slot.release_descs();
        let waker = slot.waker.take();
        let keep = slot.keepalive.take();
        slot.state.set(SlotState::Free);
        // 31 bits: a key never has `HELD_TAG` (bit 63) set.
        let next_gen = match slot.generation.get().wrapping_add(1) & GENERATION_MASK {
            0 => 1,
            g => g,
        };
        slot.generation.set(next_gen);
        let index = (key & 0xffff_ffff) as u32;
        slot.next_free.set(self.free_head.get());
        self.free_head.set(index);
        self.in_use.set(self.in_use.get() - 1);
        if slot.remote.get() {
            slot.remote.set(false);
            self.remote.set(self.remote.get() - 1);
        }
        // Arbitrary destructors run last, when the table is consistent again.
        drop(waker);
        if let Some(k) = keep {
            self.drop_or_defer(k);
        }
    }

    /// Drops `keep` (memory an operation kept alive until DOCA was done), or defers its drop
    /// while an inline progress runs (see `defer`).
    pub(crate) fn drop_or_defer(&self, keep: Box<dyn Any>) {
        if self.defer.get() {
            self.deferred.borrow_mut().push(keep);
            self.any_deferred.set(true);
        } else {
            drop(keep);
        }
    }

    /// Leaks every slot whose task DOCA may still own (shutdown, contexts that never
    /// stopped); returns how many. Their memory is never freed afterwards.
    pub(crate) fn leak_pending(&self) -> usize {
        let mut n = 0;
        let total = self.chunks.borrow().len() * CHUNK;
        for i in 0..total {
            let Some(slot) = self.slot_at(i as u32) else {
                break;
            };
            if matches!(slot.state.get(), SlotState::InFlight | SlotState::Orphaned) {
                n += 1;
                if let Some(k) = slot.keepalive.take() {
                    std::mem::forget(k);
                }
            }
        }
        if n > 0 {
            self.leaked.set(true);
        }
        n
    }

    /// Slots in use (reserved, in flight, done or orphaned).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        self.in_use.get()
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn reserve_for_test(&self) -> u64 {
        self.reserve().0
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn reserve_kind_for_test(&self, remote: bool) -> u64 {
        self.reserve_kind(remote).0
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn release_for_test(&self, key: u64) {
        if let Some(slot) = self.get(key) {
            self.release_slot(key, slot);
        }
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn chunks_for_test(&self) -> usize {
        self.chunks.borrow().len()
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_live_for_test(&self, key: u64) -> bool {
        self.get(key).is_some()
    }

    #[cfg(all(test, not(loom)))]
    pub(crate) fn out_ptr_for_test(&self, key: u64) -> *mut u64 {
        self.get(key).map_or(std::ptr::null_mut(), Slot::out_ptr)
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        if self.leaked.get() {
            return;
        }
        for chunk in self.chunks.get_mut().drain(..) {
            // SAFETY: every chunk came from `Box::leak` in `grow` and is freed once, here; no
            // slot is in flight (otherwise `leaked` would be set), so DOCA holds no pointer
            // into it.
            drop(unsafe { Box::from_raw(chunk.as_ptr()) });
        }
    }
}
