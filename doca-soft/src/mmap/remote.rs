//! The importer's side: [`RemoteRegion`], bounds-, permission- and key-checked access to
//! memory another process (or this one) exported.
//!
//! A region is connected once from a decoded blob (`export.rs`): on the shared-memory path it
//! maps the owner's segment and validates its header (`alloc.rs`); on the process_vm path it
//! probes the key cell (`vm.rs`). Every access then checks permission, bounds and the key.
//! Atomics are in `atomics.rs`, the owner's liveness in `liveness.rs`. This is what the RDMA
//! engine and DMA use for remote memory; the error contract is in the module docs of `mmap`.

use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::alloc::{
    hdr_u64, slot_of, slot_of_unchecked, H_HDR_LEN, H_MAGIC, H_SEG_LEN, H_VERSION, SEG_KEY_AREA, SEG_LAYOUT_VERSION,
    SEG_MAGIC, SEG_NSLOTS,
};
use super::export::{ExportDesc, ExportType, Transport};
use super::liveness::OwnerLiveness;
use super::vm::{pvm_read, pvm_write};
use super::REMOTE_WRITE_BITS;
use crate::ffi::refused;
use crate::shm::ShmSegment;
use crate::types::*;

/// How an import reaches the memory. Built only by [`RemoteMemory::connect`], which checks
/// what the accessors then rely on (the key slot is in range of the mapping).
#[derive(Debug)]
pub(super) enum RemotePath {
    Shm { seg: ShmSegment, offset: usize, slot: usize, writable: bool },
    ProcessVm { key_cell: u64 },
}

/// The importer's handle on exported memory; shared by the imported mmap and every
/// [`RemoteRegion`] cloned from it.
#[derive(Debug)]
pub(super) struct RemoteMemory {
    pub(super) desc: ExportDesc,
    pub(super) path: RemotePath,
    /// The owner process, for liveness checks.
    pub(super) owner: OwnerLiveness,
    /// The accesses `desc` allows, one bit per [`Op`] ([`Op::allowed`], decided once at
    /// connect: the export's type and permissions never change).
    allowed: u8,
}

/// Kind of remote access, for permission checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Read,
    Write,
    Atomic,
}

impl Op {
    /// This access's bit in [`RemoteMemory::allowed`].
    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Whether an export of `export_type` with permissions `perms` allows this access.
    fn allowed(self, export_type: ExportType, perms: u32) -> bool {
        let p = perms;
        match (export_type, self) {
            (ExportType::Rdma, Op::Read) => p & DOCA_ACCESS_FLAG_RDMA_READ != 0,
            (ExportType::Rdma, Op::Write) => p & DOCA_ACCESS_FLAG_RDMA_WRITE != 0,
            (ExportType::Rdma, Op::Atomic) => p & DOCA_ACCESS_FLAG_RDMA_ATOMIC != 0,
            (ExportType::Pci, Op::Read) => p & (DOCA_ACCESS_FLAG_PCI_READ_ONLY | DOCA_ACCESS_FLAG_PCI_READ_WRITE) != 0,
            (ExportType::Pci, Op::Write) => p & DOCA_ACCESS_FLAG_PCI_READ_WRITE != 0,
            (ExportType::Pci, Op::Atomic) => false,
        }
    }
}

impl RemoteMemory {
    /// Maps or probes the memory a blob describes. Errors: NOT_FOUND when the owner, its
    /// descriptor or the export (key) is gone; NOT_PERMITTED when the kernel refuses access;
    /// INVALID_VALUE when the segment does not match the blob.
    fn connect(desc: ExportDesc) -> Result<RemoteMemory, doca_error_t> {
        let owner = OwnerLiveness::watch(desc.pid)?;
        let path = match desc.transport {
            Transport::Shm { fd, seg_len, offset, slot } => {
                let writable = desc.perms & REMOTE_WRITE_BITS != 0;
                let seg = ShmSegment::open_remote_with(desc.pid, fd, seg_len, writable)?;
                if seg.len() < SEG_KEY_AREA
                    || hdr_u64(&seg, H_MAGIC) != SEG_MAGIC
                    || hdr_u64(&seg, H_VERSION) != u64::from(SEG_LAYOUT_VERSION) | ((SEG_NSLOTS as u64) << 32)
                    || hdr_u64(&seg, H_SEG_LEN) != seg_len as u64
                    || hdr_u64(&seg, H_HDR_LEN) > offset as u64
                {
                    return Err(DOCA_ERROR_INVALID_VALUE);
                }
                if slot_of(&seg, slot).load(Ordering::Acquire) != desc.key {
                    return Err(DOCA_ERROR_NOT_FOUND);
                }
                RemotePath::Shm { seg, offset, slot, writable }
            }
            Transport::ProcessVm { key_cell } => {
                let mut k = [0u8; 8];
                pvm_read(desc.pid, key_cell, &mut k).map_err(|e| match e {
                    DOCA_ERROR_CONNECTION_ABORTED | DOCA_ERROR_IO_FAILED => DOCA_ERROR_NOT_FOUND,
                    e => e,
                })?;
                if u64::from_ne_bytes(k) != desc.key {
                    return Err(DOCA_ERROR_NOT_FOUND);
                }
                RemotePath::ProcessVm { key_cell }
            }
        };
        let allowed = [Op::Read, Op::Write, Op::Atomic]
            .into_iter()
            .filter(|op| op.allowed(desc.export_type, desc.perms))
            .fold(0, |bits, op| bits | op.bit());
        Ok(RemoteMemory { desc, path, owner, allowed })
    }
}

/// A handle on imported (remote) memory, for the RDMA engine: bounds-, permission- and
/// key-checked reads, writes and atomics. Offsets are relative to the start of the exported
/// range ([`RemoteRegion::addr`], the owner's virtual address). Cheap to clone; it keeps the
/// mapping alive even if the imported mmap is destroyed.
#[derive(Debug, Clone)]
pub(crate) struct RemoteRegion {
    pub(super) mem: Arc<RemoteMemory>,
}

#[allow(dead_code)] // API for the RDMA engine
impl RemoteRegion {
    /// Connects to the memory a decoded blob describes (see [`RemoteMemory::connect`]).
    pub(super) fn connect(desc: ExportDesc) -> Result<RemoteRegion, doca_error_t> {
        Ok(RemoteRegion { mem: Arc::new(RemoteMemory::connect(desc)?) })
    }

    /// Start of the exported range (the owner's virtual address).
    pub(crate) fn addr(&self) -> u64 {
        self.mem.desc.addr
    }
    /// Length of the exported range.
    pub(crate) fn len(&self) -> usize {
        self.mem.desc.len
    }
    /// The exported access mask.
    pub(crate) fn permissions(&self) -> u32 {
        self.mem.desc.perms
    }
    /// The owner's pid.
    pub(crate) fn owner_pid(&self) -> u32 {
        self.mem.desc.pid
    }
    /// True when the memory was exported with `doca_mmap_export_pci` (what DMA needs; RDMA
    /// needs an RDMA export).
    pub(crate) fn is_pci_export(&self) -> bool {
        matches!(self.mem.desc.export_type, ExportType::Pci)
    }
    /// True on the shared-memory path (atomics available).
    pub(crate) fn is_shared_memory(&self) -> bool {
        matches!(self.mem.path, RemotePath::Shm { .. })
    }
    /// The offset of `[addr, addr+len)` (owner addresses) in the region, or INVALID_VALUE
    /// when it is not inside.
    pub(crate) fn offset_of(&self, addr: u64, len: usize) -> Result<usize, doca_error_t> {
        let Some(off) = addr.checked_sub(self.addr()).and_then(|off| usize::try_from(off).ok()) else {
            return Err(refused(DOCA_ERROR_INVALID_VALUE));
        };
        self.bounds(off, len)?;
        Ok(off)
    }
    /// Whether the owner process still exists, asked now (pidfd poll; `kill(pid, 0)` without
    /// pidfd).
    pub(crate) fn owner_alive(&self) -> bool {
        self.mem.owner.alive()
    }

    /// Whether the owner process lived when last asked, at most
    /// [`OWNER_RECHECK`](super::liveness::OWNER_RECHECK) and a tick of the coarse clock ago:
    /// the check of every access that needs one (a DMA copy), without a system call each.
    pub(crate) fn owner_alive_lately(&self) -> bool {
        self.mem.owner.alive_lately()
    }

    #[inline(always)]
    pub(super) fn permit(&self, op: Op) -> Result<(), doca_error_t> {
        if self.mem.allowed & op.bit() != 0 {
            Ok(())
        } else {
            Err(refused(DOCA_ERROR_NOT_PERMITTED))
        }
    }

    pub(super) fn bounds(&self, offset: usize, n: usize) -> Result<(), doca_error_t> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(refused(DOCA_ERROR_INVALID_VALUE)),
        }
    }

    /// Checks that the export is still live (the key cell holds our key).
    #[inline(always)]
    pub(crate) fn check_key(&self) -> Result<(), doca_error_t> {
        let current = match &self.mem.path {
            RemotePath::Shm { seg, slot, .. } => shm_key(seg, *slot),
            RemotePath::ProcessVm { key_cell } => self.read_key_cell(*key_cell)?,
        };
        self.key_is(current)
    }

    /// [`check_key`](RemoteRegion::check_key) with the key cell's current value.
    #[inline(always)]
    pub(super) fn key_is(&self, current: u64) -> Result<(), doca_error_t> {
        if current == self.mem.desc.key {
            Ok(())
        } else {
            Err(refused(DOCA_ERROR_NOT_PERMITTED))
        }
    }

    /// The key cell on the process_vm path (a system call), out of line so that the check
    /// on the shared-memory path stays small enough to inline into every access.
    #[inline(never)]
    fn read_key_cell(&self, key_cell: u64) -> Result<u64, doca_error_t> {
        let mut k = [0u8; 8];
        pvm_read(self.mem.desc.pid, key_cell, &mut k)?;
        Ok(u64::from_ne_bytes(k))
    }

    /// Local address of `offset` on the shared-memory path.
    pub(super) fn local(&self, offset: usize) -> Option<*mut u8> {
        match &self.mem.path {
            // In bounds of the mapping once `bounds(offset, n)` passed (the exported range lies
            // inside the segment, validated at decode time); callers check before use.
            RemotePath::Shm { seg, offset: base, .. } => Some(seg.as_ptr().wrapping_add(base + offset)),
            RemotePath::ProcessVm { .. } => None,
        }
    }

    /// Copies `dst.len()` bytes at `offset` of the remote range into `dst`.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), doca_error_t> {
        self.permit(Op::Read)?;
        self.bounds(offset, dst.len())?;
        match &self.mem.path {
            RemotePath::Shm { .. } => {
                self.check_key()?;
                let src = self.local(offset).ok_or(DOCA_ERROR_UNEXPECTED)?;
                // SAFETY: `[src, src+len)` is inside the live mapping (bounds checked against
                // the exported range, which lies inside the segment); `dst` is a distinct
                // Rust buffer (a different virtual range from our private mapping). Other
                // processes may write the shared memory concurrently: the bytes read are
                // then unspecified, as with RDMA, but the copy itself is sound.
                unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
                Ok(())
            }
            RemotePath::ProcessVm { .. } => {
                let copied = pvm_read(self.mem.desc.pid, self.addr() + offset as u64, dst);
                // The key is checked after the copy (one system call less); the data is
                // discarded on mismatch. A revoked export wins over a copy error (its memory
                // may already be unmapped).
                match (copied, self.check_key()) {
                    (Err(DOCA_ERROR_CONNECTION_ABORTED), _) => Err(DOCA_ERROR_CONNECTION_ABORTED),
                    (_, Err(e)) => Err(e),
                    (r, Ok(())) => r,
                }
            }
        }
    }

    /// Copies `src` to `offset` of the remote range.
    // The path is matched once: the key check (`check_key`) is written out in each arm.
    #[inline(always)]
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> Result<(), doca_error_t> {
        self.permit(Op::Write)?;
        self.bounds(offset, src.len())?;
        match &self.mem.path {
            RemotePath::Shm { seg, offset: base, slot, writable } => {
                self.key_is(shm_key(seg, *slot))?;
                if !*writable {
                    return Err(refused(DOCA_ERROR_NOT_PERMITTED));
                }
                // In bounds of the mapping (see `local`).
                let dst = seg.as_ptr().wrapping_add(base + offset);
                // SAFETY: `[dst, dst+len)` is inside the live mapping (bounds checked), which
                // is mapped writable (checked just above); `src` is a distinct Rust buffer.
                unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
                Ok(())
            }
            RemotePath::ProcessVm { key_cell } => {
                self.key_is(self.read_key_cell(*key_cell)?)?;
                pvm_write(self.mem.desc.pid, self.addr() + offset as u64, src)
            }
        }
    }
}

/// The key cell of an import on the shared-memory path.
#[inline(always)]
pub(super) fn shm_key(seg: &ShmSegment, slot: usize) -> u64 {
    // SAFETY: a Shm path is built only by `RemoteMemory::connect`, which looked at this slot
    // of this mapping with `slot_of` (so both are in range); neither changes.
    unsafe { slot_of_unchecked(seg, slot) }.load(Ordering::Acquire)
}
