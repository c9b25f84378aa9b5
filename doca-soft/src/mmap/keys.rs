//! Key cells: where an export's key lives in the owner's process, so that revoking it is a store.
//!
//! Every export has a random non-zero key; an importer checks the cell before each access.
//! On the shared-memory path the cell is a slot in the segment's header (`alloc.rs`); on the
//! process_vm path it is an 8-byte cell from a pool that is never freed, so an importer
//! reading a revoked cell never reads unmapped memory. Dropping the [`KeyHolder`] revokes the
//! key. Separate from the blob codec (`export.rs`) because this is owner-side state with a
//! lifetime (claim, revoke, recycle), while the blob is just bytes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::alloc::{find_shared, SharedSeg, SEG_NSLOTS};
use super::lock;

/// Free key cells for the process_vm path. Cells are leaked on purpose and recycled, so
/// their addresses stay mapped for the life of the process (an importer reading a revoked
/// cell reads 0 or another export's key, never unmapped memory).
static KEY_CELLS: Mutex<Vec<&'static AtomicU64>> = Mutex::new(Vec::new());

/// Where an export's key lives in this (the owner's) process; dropping it revokes the key.
#[derive(Debug)]
pub(super) enum KeyHolder {
    Shm { seg: Arc<SharedSeg>, slot: usize },
    Cell(&'static AtomicU64),
}

impl KeyHolder {
    /// Claims a key cell for `key` over `[addr, addr+len)`.
    pub(super) fn claim(addr: usize, len: usize, key: u64) -> KeyHolder {
        if let Some(seg) = find_shared(addr, len) {
            for i in 0..SEG_NSLOTS {
                if seg.slot(i).compare_exchange(0, key, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
                    return KeyHolder::Shm { seg, slot: i };
                }
            }
            // All slots taken: fall through to the process_vm path (works, minus atomics).
        }
        let cell = lock(&KEY_CELLS).pop().unwrap_or_else(|| Box::leak(Box::new(AtomicU64::new(0))));
        cell.store(key, Ordering::Release);
        KeyHolder::Cell(cell)
    }
}

impl Drop for KeyHolder {
    fn drop(&mut self) {
        match self {
            KeyHolder::Shm { seg, slot } => seg.slot(*slot).store(0, Ordering::Release),
            KeyHolder::Cell(c) => {
                c.store(0, Ordering::Release);
                lock(&KEY_CELLS).push(c);
            }
        }
    }
}
