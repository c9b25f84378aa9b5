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

/// What Yama's `ptrace_scope` (`/proc/sys/kernel/yama/ptrace_scope`, absent without Yama)
/// lets an exporter do so that importers of its process_vm path can read and write it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum PtraceGrant {
    /// No Yama, or scope 0: any process of the same user may already.
    NotNeeded,
    /// Scope 1 (Ubuntu's default): only ancestors may, unless the owner names a tracer; the
    /// exporter declares any process of its user one (`PR_SET_PTRACER_ANY`).
    Declare,
    /// Scope 2 or 3: only privileged processes may; importers will get NOT_PERMITTED.
    Impossible,
}

impl PtraceGrant {
    /// The grant a `ptrace_scope` file's contents call for (`None`: no Yama).
    pub(crate) fn for_scope(scope: Option<&str>) -> PtraceGrant {
        match scope.map(str::trim) {
            None | Some("0") => PtraceGrant::NotNeeded,
            Some("1") => PtraceGrant::Declare,
            Some(_) => PtraceGrant::Impossible,
        }
    }
}

/// Lets the importers of this process's process_vm exports reach it, once per process: on a
/// DPU the DMA engine reaches exported memory without asking the exporter again, and NVIDIA's
/// `dma_copy_host` / `dma_copy_dpu` samples (unrelated processes, the exporter's buffer on its
/// heap) rely on that. Under Yama `ptrace_scope` 1 an unrelated importer's `process_vm_*`
/// gets EPERM unless the exporter names a tracer, so the first such export declares every
/// process of this user one (`prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY)`), and says so in the
/// SDK log: exporting memory is granting it, and with this provider that grant is a
/// ptrace permission. Memory from `doca_soft_alloc_shared` needs none of this.
pub(crate) fn grant_importers_once() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").ok();
        match PtraceGrant::for_scope(scope.as_deref()) {
            PtraceGrant::NotNeeded => {}
            PtraceGrant::Declare => {
                // SAFETY: prctl with integer arguments; no memory is passed.
                let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
                if rc == 0 {
                    crate::sdk_log!(
                        INFO,
                        "mmap export: Yama ptrace_scope is 1; this process now lets any process of its user \
                         reach it (PR_SET_PTRACER_ANY), so that importers of its exported heap memory can \
                         copy to and from it (memory from doca_soft_alloc_shared needs no such grant)"
                    );
                } else {
                    crate::sdk_log!(
                        WARNING,
                        "mmap export: Yama ptrace_scope is 1 and PR_SET_PTRACER failed ({}): importers that \
                         are not this process's ancestors will get DOCA_ERROR_NOT_PERMITTED",
                        std::io::Error::last_os_error()
                    );
                }
            }
            PtraceGrant::Impossible => crate::sdk_log!(
                WARNING,
                "mmap export: Yama ptrace_scope is {}: only privileged importers can reach this process's \
                 exported heap memory (others get DOCA_ERROR_NOT_PERMITTED); export memory from \
                 doca_soft_alloc_shared instead",
                scope.as_deref().unwrap_or("?").trim()
            ),
        }
    });
}

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

#[cfg(test)]
mod grant_tests {
    use super::PtraceGrant;

    #[test]
    fn the_grant_follows_the_yama_scope() {
        assert_eq!(PtraceGrant::for_scope(None), PtraceGrant::NotNeeded);
        assert_eq!(PtraceGrant::for_scope(Some("0\n")), PtraceGrant::NotNeeded);
        assert_eq!(PtraceGrant::for_scope(Some("1\n")), PtraceGrant::Declare);
        assert_eq!(PtraceGrant::for_scope(Some("2\n")), PtraceGrant::Impossible);
        assert_eq!(PtraceGrant::for_scope(Some("3")), PtraceGrant::Impossible);
    }
}
