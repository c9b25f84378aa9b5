//! How a memcpy task moves bytes: from the source list's payloads to the room after the
//! destination list's payloads, between local memory and memory imported from a PCI export.
//!
//! A buffer that is a list of one (nearly every copy) takes the direct path, [`copy_one`]. A
//! list takes [`copy_lists`]: the source's payloads are read in element order as one stream
//! (a gather) and written, in element order, into the free space after each destination
//! element's payload, filling one element before the next (a scatter); each destination
//! element's data_len grows by what it received. Everything is checked before the first byte
//! moves, so a refused copy writes nothing; a copy that fails while moving (the exporter died
//! mid-copy) may have written part of the destination, as on hardware, but grows no data_len.

use std::ptr;

use super::{BOUNCE_BYTES, MAX_BUF_LIST_LEN, MAX_BUF_SIZE};
use crate::buf::doca_buf;
use crate::mmap::RemoteRegion;
use crate::types::*;

/// One side of a copy, resolved from a `doca_buf` (the region borrowed from the buffer's
/// mmap, as in the RDMA engine: no lock and no reference count per copy).
#[derive(Clone, Copy)]
enum Side<'a> {
    Local,
    Remote(&'a RemoteRegion),
}

fn side_of(b: &doca_buf) -> Result<Side<'_>, doca_error_t> {
    let Ok(r) = b.mmap().remote_region_ref() else {
        return Ok(Side::Local);
    };
    if !r.is_pci_export() {
        return Err(DOCA_ERROR_NOT_PERMITTED);
    }
    // On the shared-memory path the mapping outlives its owner: without this check every
    // copy from a dead host would "succeed" with the memory it left. Hardware fails such a
    // copy. Asked of the kernel at most every millisecond or so (`mmap/liveness.rs`): a
    // system call per copy was two thirds of a small copy's cost.
    if !r.owner_alive_lately() {
        return Err(DOCA_ERROR_CONNECTION_ABORTED);
    }
    Ok(Side::Remote(r))
}

/// The submit-time checks of a copy's size: each list at most [`MAX_BUF_LIST_LEN`] elements
/// (INVALID_VALUE), the source's payload at most [`MAX_BUF_SIZE`] bytes (TOO_BIG).
#[inline(always)]
pub(super) fn check_sizes(src: &doca_buf, dst: &doca_buf) -> Result<(), doca_error_t> {
    if src.is_single() && dst.is_single() {
        if src.data().1 as u64 > MAX_BUF_SIZE {
            return Err(DOCA_ERROR_TOO_BIG);
        }
        return Ok(());
    }
    check_list_sizes(src, dst)
}

#[cold]
#[inline(never)]
fn check_list_sizes(src: &doca_buf, dst: &doca_buf) -> Result<(), doca_error_t> {
    if src.list_longer_than(MAX_BUF_LIST_LEN) || dst.list_longer_than(MAX_BUF_LIST_LEN) {
        return Err(crate::sdk_fail!(
            DOCA_ERROR_INVALID_VALUE,
            "doca_dma memcpy: a buffer list is longer than doca_dma_cap_task_memcpy_get_max_buf_list_len ({MAX_BUF_LIST_LEN})"
        ));
    }
    if src.payload_len() as u64 > MAX_BUF_SIZE {
        return Err(DOCA_ERROR_TOO_BIG);
    }
    Ok(())
}

/// Copies the source list's payload after the destination list's payloads (see the module
/// docs); an empty source or too little room is INVALID_VALUE.
pub(super) fn copy(src: &doca_buf, dst: &doca_buf) -> Result<(), doca_error_t> {
    if src.is_single() && dst.is_single() {
        copy_one(src, dst)
    } else {
        copy_lists(src, dst)
    }
}

/// Copies `src`'s payload after `dst`'s payload; grows dst's data_len on success.
fn copy_one(src: &doca_buf, dst: &doca_buf) -> Result<(), doca_error_t> {
    let (saddr, n) = src.data();
    let (daddr, room) = dst.tail_space();
    // An empty source fails on hardware (NVIDIA's `pe_task_error` sample makes its failing
    // copy that way).
    if n == 0 || n > room {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    match (side_of(src)?, side_of(dst)?) {
        (Side::Local, Side::Local) => {
            // SAFETY: the payload is registered local memory the caller leaves untouched
            // while the task is in flight (DOCA contract); dropped before returning. `append`
            // copies with `ptr::copy`, which tolerates overlap of the two buffers.
            let payload = unsafe { src.payload_slice() }?;
            dst.append(payload)
        }
        (Side::Remote(r), Side::Local) => {
            let off = r.offset_of(saddr as u64, n)?;
            // SAFETY: the destination is registered local memory the caller does not touch
            // while the task is in flight (DOCA contract), so the &mut is exclusive.
            unsafe { dst.append_with(n, |buf| r.read(off, buf)) }
        }
        (Side::Local, Side::Remote(r)) => {
            let off = r.offset_of(daddr as u64, n)?;
            // SAFETY: as for the local-to-local payload above.
            let payload = unsafe { src.payload_slice() }?;
            r.write(off, payload)?;
            dst.grow_data_len(n)
        }
        (Side::Remote(rs), Side::Remote(rd)) => {
            let soff = rs.offset_of(saddr as u64, n)?;
            let doff = rd.offset_of(daddr as u64, n)?;
            move_bytes(Side::Remote(rs), soff, Side::Remote(rd), doff, n)?;
            dst.grow_data_len(n)
        }
    }
}

/// A checked piece of one list element: where its bytes are (a local address, or an offset
/// into the remote region) and how many the copy uses.
struct Piece<'a> {
    side: Side<'a>,
    at: usize,
    len: usize,
}

impl<'a> Piece<'a> {
    /// Resolves `[addr, addr + len)` of `b` on its side; remote ranges are checked against the
    /// export here, local ones were checked when the buffer's data was set.
    fn of(b: &'a doca_buf, addr: usize, len: usize, write: bool) -> Result<Self, doca_error_t> {
        let side = side_of(b)?;
        let at = match side {
            Side::Local => {
                b.check_local(write)?;
                addr
            }
            Side::Remote(r) => r.offset_of(addr as u64, len)?,
        };
        Ok(Piece { side, at, len })
    }
}

/// The gather/scatter copy of [`copy`] for lists (the spans: `buf/list.rs`).
#[cold]
#[inline(never)]
fn copy_lists(src: &doca_buf, dst: &doca_buf) -> Result<(), doca_error_t> {
    let total = src.payload_len();
    if total == 0 || dst.room_len() < total {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let sources = src.payload_spans().map(|(b, at, n)| Piece::of(b, at, n, false)).collect::<Result<Vec<_>, _>>()?;
    let targets =
        dst.room_spans(0, total).map(|(b, at, n)| Piece::of(b, at, n, true)).collect::<Result<Vec<_>, _>>()?;

    // Everything checked: move the bytes, a chunk at a time where a source piece and a
    // target piece overlap.
    let (mut si, mut soff) = (0, 0);
    for t in &targets {
        let mut toff = 0;
        while toff < t.len {
            let s = &sources[si];
            let k = (s.len - soff).min(t.len - toff);
            move_bytes(s.side, s.at + soff, t.side, t.at + toff, k)?;
            soff += k;
            toff += k;
            if soff == s.len {
                si += 1;
                soff = 0;
            }
        }
    }
    dst.appended_to_list(total);
    Ok(())
}

/// Moves `n` bytes between two checked pieces' positions (local addresses or remote
/// offsets).
fn move_bytes(from: Side<'_>, src: usize, to: Side<'_>, dst: usize, n: usize) -> Result<(), doca_error_t> {
    match (from, to) {
        (Side::Local, Side::Local) => {
            // SAFETY: both ranges lie inside registered local memory of this process (the
            // pieces were checked against their buffers and mmaps, the destination with
            // LOCAL_READ_WRITE), which the caller leaves alone while the task is in flight
            // (DOCA contract); `ptr::copy` tolerates overlap.
            unsafe { ptr::copy(src as *const u8, dst as *mut u8, n) };
            Ok(())
        }
        (Side::Remote(r), Side::Local) => {
            // SAFETY: as above; the destination range is exclusively the task's while it is
            // in flight, so the &mut does not alias a live reference.
            r.read(src, unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) })
        }
        (Side::Local, Side::Remote(r)) => {
            // SAFETY: as above, for the source range.
            r.write(dst, unsafe { std::slice::from_raw_parts(src as *const u8, n) })
        }
        (Side::Remote(rs), Side::Remote(rd)) => {
            let mut bounce = vec![0u8; n.min(BOUNCE_BYTES)];
            let mut done = 0;
            while done < n {
                let k = (n - done).min(bounce.len());
                rs.read(src + done, &mut bounce[..k])?;
                rd.write(dst + done, &bounce[..k])?;
                done += k;
            }
            Ok(())
        }
    }
}
