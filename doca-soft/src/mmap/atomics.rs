//! Remote atomics (fetch-add, compare-and-swap) on imported memory.
//!
//! Only possible on the shared-memory path, where the importer maps the owner's memory and
//! can use a real `AtomicU64` on it; on the process_vm path they fail with
//! `DOCA_ERROR_NOT_SUPPORTED`. Separate from plain reads and writes (`remote.rs`) because
//! this is the one place that reinterprets remote memory as an atomic, with its own
//! alignment and permission rules.

use std::sync::atomic::{AtomicU64, Ordering};

use super::remote::{shm_key, Op, RemotePath, RemoteRegion};
use crate::ffi::refused;
use crate::types::*;

#[allow(dead_code)] // API for the RDMA engine
impl RemoteRegion {
    /// The 8-byte remote word at `offset` as an atomic, after all checks.
    #[inline(always)]
    fn atomic_at(&self, offset: usize) -> Result<&AtomicU64, doca_error_t> {
        self.permit(Op::Atomic)?;
        self.bounds(offset, 8)?;
        // The path is matched once: `local` and `check_key` are written out below.
        let RemotePath::Shm { seg, offset: base, slot, writable } = &self.mem.path else {
            return Err(not_shared_memory());
        };
        // In bounds of the mapping (see `RemoteRegion::local`).
        let p = seg.as_ptr().wrapping_add(base + offset);
        if p as usize % 8 != 0 {
            return Err(refused(DOCA_ERROR_INVALID_VALUE));
        }
        if !*writable {
            return Err(refused(DOCA_ERROR_NOT_PERMITTED));
        }
        self.key_is(shm_key(seg, *slot))?;
        // SAFETY: `p` is 8-aligned, inside the live writable mapping (bounds checked), and the
        // returned reference borrows `self`, which keeps the mapping alive. Other parties may
        // access the word non-atomically (an RDMA write over it); that is the same hazard as
        // on hardware, where atomics are only atomic with respect to other atomics.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// Atomically adds `add` to the native-endian u64 at `offset`; returns the old value.
    #[inline(always)]
    pub(crate) fn atomic_fetch_add(&self, offset: usize, add: u64) -> Result<u64, doca_error_t> {
        Ok(self.atomic_at(offset)?.fetch_add(add, Ordering::AcqRel))
    }

    /// Atomically replaces the u64 at `offset` with `swap` if it equals `cmp`; returns the
    /// old value (equal to `cmp` when the swap happened).
    #[inline(always)]
    pub(crate) fn atomic_cas(&self, offset: usize, cmp: u64, swap: u64) -> Result<u64, doca_error_t> {
        let a = self.atomic_at(offset)?;
        Ok(match a.compare_exchange(cmp, swap, Ordering::AcqRel, Ordering::Acquire) {
            Ok(v) | Err(v) => v,
        })
    }
}

/// The refusal of an atomic on the process_vm path, out of line: the formatting machinery
/// of the diagnostic made every atomic save registers it never needs.
#[cold]
#[inline(never)]
fn not_shared_memory() -> doca_error_t {
    crate::sdk_fail!(
        DOCA_ERROR_NOT_SUPPORTED,
        "RDMA atomic on memory the peer reaches through process_vm_readv/writev: the soft \
         provider can only do atomics on shared memory (allocate it with doca_soft_alloc_shared)"
    )
}
