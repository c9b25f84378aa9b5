//! The process_vm path: copying to and from another process's memory with
//! `process_vm_readv` / `process_vm_writev`.
//!
//! This is how an importer reaches exported memory that is not in a shared segment (any heap
//! or stack range), and how it reads key cells on that path. It needs ptrace permission over
//! the owner (same user; under Yama `ptrace_scope >= 1` the owner must allow it). Kept apart
//! because it is the one place that talks to the kernel about another address space, and its
//! errno mapping is part of the module's documented error contract.

use std::ffi::c_void;

use super::errno;
use crate::types::*;

/// Maps a process_vm_* failure to the error this module reports (see the module docs).
fn pvm_error(e: i32) -> doca_error_t {
    match e {
        libc::ESRCH => DOCA_ERROR_CONNECTION_ABORTED,
        libc::EFAULT => DOCA_ERROR_IO_FAILED,
        libc::EPERM | libc::EACCES => DOCA_ERROR_NOT_PERMITTED,
        libc::ENOMEM => DOCA_ERROR_NO_MEMORY,
        _ => DOCA_ERROR_OPERATING_SYSTEM,
    }
}

/// The signature shared by `process_vm_readv` and `process_vm_writev`.
type PvmOp = unsafe extern "C" fn(
    libc::pid_t,
    *const libc::iovec,
    libc::c_ulong,
    *const libc::iovec,
    libc::c_ulong,
    libc::c_ulong,
) -> isize;

/// Moves `len` bytes between `local` (ours) and `remote` (in `pid`) with `op`, all or error.
///
/// # Safety
/// `local` is valid for `len` bytes in the direction `op` uses it: writable for
/// `process_vm_readv`, readable for `process_vm_writev`.
unsafe fn pvm_copy(op: PvmOp, pid: u32, remote: u64, local: *mut u8, len: usize) -> Result<(), doca_error_t> {
    let mut done = 0usize;
    while done < len {
        // SAFETY: `done < len`, so the pointer stays inside the caller's buffer.
        let local_iov = libc::iovec { iov_base: unsafe { local.add(done) }.cast(), iov_len: len - done };
        let remote_iov =
            libc::iovec { iov_base: (remote as usize).wrapping_add(done) as *mut c_void, iov_len: len - done };
        // SAFETY: the local iovec covers exactly the rest of the caller's buffer (valid for
        // this direction by the contract above); the kernel validates the remote iovec
        // against the other process's address space (faults there are EFAULT and never
        // touch our memory).
        let n = unsafe { op(pid as libc::pid_t, &local_iov, 1, &remote_iov, 1, 0) };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(pvm_error(e));
        }
        if n == 0 {
            return Err(DOCA_ERROR_IO_FAILED);
        }
        done += n as usize;
    }
    Ok(())
}

/// `process_vm_readv` of `dst.len()` bytes at `remote` in `pid`, all or error.
pub(super) fn pvm_read(pid: u32, remote: u64, dst: &mut [u8]) -> Result<(), doca_error_t> {
    // SAFETY: `dst` is borrowed mutably for the call: writable for its length.
    unsafe { pvm_copy(libc::process_vm_readv, pid, remote, dst.as_mut_ptr(), dst.len()) }
}

/// `process_vm_writev` of `src` to `remote` in `pid`, all or error.
pub(super) fn pvm_write(pid: u32, remote: u64, src: &[u8]) -> Result<(), doca_error_t> {
    // SAFETY: the kernel only reads through the local iovec of process_vm_writev, and `src`
    // is readable for its length while borrowed.
    unsafe { pvm_copy(libc::process_vm_writev, pid, remote, src.as_ptr().cast_mut(), src.len()) }
}
