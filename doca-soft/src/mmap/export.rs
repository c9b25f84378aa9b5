//! The export blob of an mmap: what `doca_mmap_export_*` hands out and
//! `doca_mmap_create_from_export` parses.
//!
//! [`ExportDesc`] is the decoded, validated content (owner pid, range, permissions, key, and
//! the transport: shared-memory segment or process_vm key cell); it is written with the
//! crate's versioned blob format (`crate::blob`, kind `Mmap`). Decoding is the trust
//! boundary for bytes from another process, so it lives apart from the code that acts on
//! them: everything malformed is rejected here, and nothing here panics.

use super::alloc::{SEG_KEY_AREA, SEG_NSLOTS};
use super::keys::KeyHolder;
use super::ACCESS_MASK_ALL;
use crate::blob::{BlobKind, BlobReader, BlobWriter};
use crate::types::*;

/// Which export call made a blob (decides which permission bits govern remote access).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ExportType {
    Rdma = 1,
    Pci = 2,
}

const TRANSPORT_SHM: u8 = 1;
const TRANSPORT_PVM: u8 = 2;

/// How an importer reaches the memory (parsed from a blob).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Transport {
    Shm { fd: i32, seg_len: usize, offset: usize, slot: usize },
    ProcessVm { key_cell: u64 },
}

/// A parsed, validated export blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ExportDesc {
    pub(super) export_type: ExportType,
    pub(super) pid: u32,
    pub(super) addr: u64,
    pub(super) len: usize,
    pub(super) perms: u32,
    pub(super) key: u64,
    pub(super) transport: Transport,
}

impl ExportDesc {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut w = BlobWriter::new(BlobKind::Mmap);
        w.u8(self.export_type as u8);
        match self.transport {
            Transport::Shm { .. } => w.u8(TRANSPORT_SHM),
            Transport::ProcessVm { .. } => w.u8(TRANSPORT_PVM),
        };
        w.u32(self.pid).u64(self.addr).u64(self.len as u64).u32(self.perms).u64(self.key);
        match self.transport {
            Transport::Shm { fd, seg_len, offset, slot } => {
                w.u32(fd as u32).u64(seg_len as u64).u64(offset as u64).u32(slot as u32);
            }
            Transport::ProcessVm { key_cell } => {
                w.u64(key_cell);
            }
        }
        w.finish()
    }

    /// Parses and validates a blob. Anything malformed or out of range is INVALID_VALUE
    /// (UNSUPPORTED_VERSION for a future format); never panics.
    pub(super) fn decode(bytes: &[u8]) -> Result<ExportDesc, doca_error_t> {
        const BAD: doca_error_t = DOCA_ERROR_INVALID_VALUE;
        let mut r = BlobReader::new(bytes, BlobKind::Mmap)?;
        let export_type = match r.u8()? {
            1 => ExportType::Rdma,
            2 => ExportType::Pci,
            _ => return Err(BAD),
        };
        let transport_tag = r.u8()?;
        let pid = r.u32()?;
        let addr = r.u64()?;
        let len = usize::try_from(r.u64()?).map_err(|_| BAD)?;
        let perms = r.u32()?;
        let key = r.u64()?;
        let transport = match transport_tag {
            TRANSPORT_SHM => {
                let fd = i32::try_from(r.u32()?).map_err(|_| BAD)?;
                let seg_len = usize::try_from(r.u64()?).map_err(|_| BAD)?;
                let offset = usize::try_from(r.u64()?).map_err(|_| BAD)?;
                let slot = r.u32()? as usize;
                if slot >= SEG_NSLOTS
                    || seg_len > isize::MAX as usize
                    || offset < SEG_KEY_AREA
                    || offset.checked_add(len).is_none_or(|end| end > seg_len)
                {
                    return Err(BAD);
                }
                Transport::Shm { fd, seg_len, offset, slot }
            }
            TRANSPORT_PVM => {
                let key_cell = r.u64()?;
                if key_cell == 0 || key_cell % 8 != 0 {
                    return Err(BAD);
                }
                Transport::ProcessVm { key_cell }
            }
            _ => return Err(BAD),
        };
        r.finish()?;
        if pid == 0
            || pid > i32::MAX as u32
            || addr == 0
            || len == 0
            || len > isize::MAX as usize
            || addr.checked_add(len as u64).is_none()
            || perms & !ACCESS_MASK_ALL != 0
            || key == 0
        {
            return Err(BAD);
        }
        Ok(ExportDesc { export_type, pid, addr, len, perms, key, transport })
    }
}

/// An mmap's live export (one key for both export types, per start cycle).
#[derive(Debug)]
pub(super) struct ExportState {
    pub(super) desc: ExportDesc,
    pub(super) _holder: KeyHolder,
    pub(super) rdma_blob: Option<Box<[u8]>>,
    pub(super) pci_blob: Option<Box<[u8]>>,
}
