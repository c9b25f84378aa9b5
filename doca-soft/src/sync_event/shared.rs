//! The part of a sync event that lives in shared memory, and the operations on it that any
//! process may perform: publish (update + wake), blocking waits, and the waiter table.
//!
//! # Layout (`#[repr(C)]`, every field an atomic)
//!
//! ```text
//! magic  u64   "DSSYNCEV" (little-endian), written at creation
//! version u32  LAYOUT_VERSION
//! _pad   u32
//! key    u64   random; must match the key in an export blob
//! counter u64  the event's value
//! seq    u32   futex word: bumped after every update
//! sleepers u32 threads blocked in FUTEX_WAIT on `seq` (any process)
//! slots  [WaiterSlot; WAITER_SLOTS]  doorbells of PEs with pending wait tasks
//! ```
//!
//! Every field is accessed only through atomics: the memory is shared with other processes,
//! which may be buggy or hostile; nothing here trusts what it reads beyond using it as a
//! value (a garbage doorbell address is at worst a spurious ring).
//!
//! # Publisher (any handle, any process)
//! update the counter (SeqCst) → bump `seq` → `FUTEX_WAKE` if `sleepers > 0` → ring every
//! active slot's doorbell, clearing slots whose receiver is gone.
//!
//! # Subscriber in ctx mode (see `tasks.rs`)
//! While a handle has pending wait tasks, its PE's doorbell address is in one slot:
//! *register, then re-check the value* (both SeqCst). Either the publisher's slot scan sees
//! the registration (and rings), or the re-check sees the publisher's value: a wake-up cannot
//! be lost.
//!
//! # Slot protocol
//! `state = generation << 2 | CLAIMED | ACTIVE`. Register: CAS a free slot to CLAIMED, write
//! the address, store `(generation + 1) | ACTIVE`. Unregister: CAS from exactly the value we
//! stored to `(generation + 1)` free (fails harmlessly if a publisher cleared it as stale).
//! Ring: read state, address, state again; ring only if the state did not change (the
//! generation makes torn reads detectable).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

use crate::doorbell::{ring, DoorbellAddr};
use crate::types::*;

/// "DSSYNCEV" as a little-endian u64.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"DSSYNCEV");
/// Version of this layout (checked on import).
pub(crate) const LAYOUT_VERSION: u32 = 1;
/// Number of doorbell slots: at most this many handles (one per PE) can have pending wait
/// tasks on one event at the same time; one more gets `DOCA_ERROR_FULL` at submit.
pub const WAITER_SLOTS: usize = 32;

const ACTIVE: u64 = 1;
const CLAIMED: u64 = 2;

/// One waiter slot: a doorbell address guarded by a state word.
#[repr(C)]
pub(crate) struct WaiterSlot {
    state: AtomicU64,
    pid: AtomicU64,
    nonce: AtomicU64,
}

/// The shared header of a sync event (see the module docs).
#[repr(C)]
pub(crate) struct SyncShared {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    _pad: AtomicU32,
    pub key: AtomicU64,
    pub counter: AtomicU64,
    pub seq: AtomicU32,
    pub sleepers: AtomicU32,
    slots: [WaiterSlot; WAITER_SLOTS],
}

/// Size of the shared segment of an event.
pub(crate) const SHARED_LEN: usize = core::mem::size_of::<SyncShared>();

/// A registration in the waiter table (to unregister exactly what we registered).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Registration {
    slot: usize,
    state: u64,
}

fn next_free(state: u64) -> u64 {
    ((state >> 2).wrapping_add(1)) << 2
}

impl SyncShared {
    /// A zeroed header on the heap (for events whose counter is user memory).
    pub(crate) fn new_private() -> SyncShared {
        SyncShared {
            magic: AtomicU64::new(0),
            version: AtomicU32::new(0),
            _pad: AtomicU32::new(0),
            key: AtomicU64::new(0),
            counter: AtomicU64::new(0),
            seq: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            slots: core::array::from_fn(|_| WaiterSlot {
                state: AtomicU64::new(0),
                pid: AtomicU64::new(0),
                nonce: AtomicU64::new(0),
            }),
        }
    }

    /// Initialises a fresh header (zeroed memory nobody else has seen yet).
    pub(crate) fn init(&self, key: u64) {
        self.key.store(key, SeqCst);
        self.version.store(LAYOUT_VERSION, SeqCst);
        self.magic.store(MAGIC, SeqCst);
    }

    /// Wakes everybody waiting on `counter` after an update: blocked synchronous waiters
    /// (futex) and PEs with pending wait tasks (doorbells).
    pub(crate) fn wake_all(&self) {
        self.seq.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            futex_wake(&self.seq);
        }
        self.ring_waiters();
    }

    /// Rings every active doorbell; clears slots whose receiver is gone.
    fn ring_waiters(&self) {
        for slot in &self.slots {
            let s = slot.state.load(SeqCst);
            if s & ACTIVE == 0 {
                continue;
            }
            let addr = DoorbellAddr { pid: slot.pid.load(Acquire), nonce: slot.nonce.load(Acquire) };
            if slot.state.load(SeqCst) != s {
                // Re-registered meanwhile: the new owner re-checks the value itself.
                continue;
            }
            if ring(addr) == Err(DOCA_ERROR_NOT_FOUND) {
                let _ = slot.state.compare_exchange(s, next_free(s), SeqCst, Relaxed);
            }
        }
    }

    /// Puts `addr` in a free slot. When the table is full, stale slots (receivers gone) are
    /// reclaimed first; if it is still full: `DOCA_ERROR_FULL`.
    pub(crate) fn register(&self, addr: DoorbellAddr) -> Result<Registration, doca_error_t> {
        for attempt in 0..2 {
            for (i, slot) in self.slots.iter().enumerate() {
                let s = slot.state.load(SeqCst);
                if s & (ACTIVE | CLAIMED) != 0 {
                    continue;
                }
                if slot.state.compare_exchange(s, s | CLAIMED, SeqCst, Relaxed).is_err() {
                    continue;
                }
                slot.pid.store(addr.pid, Release);
                slot.nonce.store(addr.nonce, Release);
                let active = next_free(s) | ACTIVE;
                slot.state.store(active, SeqCst);
                return Ok(Registration { slot: i, state: active });
            }
            if attempt == 0 {
                // Reclaim slots of dead receivers (costs a spurious ring to live ones).
                self.ring_waiters();
            }
        }
        Err(DOCA_ERROR_FULL)
    }

    /// Removes a registration (no effect if the slot was reclaimed meanwhile).
    pub(crate) fn unregister(&self, reg: Registration) {
        if let Some(slot) = self.slots.get(reg.slot) {
            let _ = slot.state.compare_exchange(reg.state, next_free(reg.state), SeqCst, Relaxed);
        }
    }

    /// Number of active slots (tests).
    #[cfg(test)]
    pub(crate) fn active_waiters(&self) -> usize {
        self.slots.iter().filter(|s| s.state.load(SeqCst) & ACTIVE != 0).count()
    }
}

/// Blocks until `pred(counter)` holds.
///
/// First `spins` checks separated by `sched_yield` (DOCA's "yield" flavour; 0 for the plain
/// waits), then sleeps on the futex word `seq`, which every publisher bumps (and wakes)
/// after updating the counter; no timed sleeping. The order — announce as sleeper, read
/// `seq`, check the value, `FUTEX_WAIT(seq)` — means an update made after the check changes
/// `seq` before the wait starts (the wait then returns at once) or finds us counted in
/// `sleepers` (and wakes us).
pub(crate) fn wait_until(shared: &SyncShared, counter: &AtomicU64, spins: u32, pred: impl Fn(u64) -> bool) {
    if pred(counter.load(SeqCst)) {
        return;
    }
    for _ in 0..spins {
        // SAFETY: sched_yield has no arguments and no memory effects.
        unsafe { libc::sched_yield() };
        if pred(counter.load(SeqCst)) {
            return;
        }
    }
    shared.sleepers.fetch_add(1, SeqCst);
    loop {
        let s = shared.seq.load(SeqCst);
        if pred(counter.load(SeqCst)) {
            break;
        }
        futex_wait(&shared.seq, s);
    }
    shared.sleepers.fetch_sub(1, SeqCst);
}

/// `FUTEX_WAIT` on a word that may be in shared memory (so not FUTEX_PRIVATE). Returns on
/// wake, on a value change (EAGAIN), or on a signal (EINTR); callers loop.
fn futex_wait(word: &AtomicU32, expected: u32) {
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the timeout and
    // second address are NULL/unused for FUTEX_WAIT.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            core::ptr::null::<libc::timespec>(),
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// `FUTEX_WAKE` of every waiter on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE ignores the remaining arguments.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            core::ptr::null::<libc::timespec>(),
            core::ptr::null::<u32>(),
            0u32,
        )
    };
}
