//! Liveness of an export's owner process, seen from the importer.
//!
//! On the shared-memory path the importer's mapping outlives the owner, so a dead owner is
//! not visible as a failed access; [`OwnerLiveness`] answers "is the owner still there" with
//! a pidfd poll (or `kill(pid, 0)` on kernels without pidfd). Its own file because it is a
//! process question, not a memory one: the remote-access code only asks it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::errno;
use crate::shm::errno_to_doca;
use crate::types::*;

/// A watch on the owner of imported memory: its pid and, where the kernel has it, a pidfd.
#[derive(Debug)]
pub(super) struct OwnerLiveness {
    pid: u32,
    /// pidfd of the owner (None if the kernel lacks pidfd_open).
    pidfd: Option<OwnedFd>,
}

impl OwnerLiveness {
    /// Starts watching `pid`. NOT_FOUND when the process is already gone.
    pub(super) fn watch(pid: u32) -> Result<OwnerLiveness, doca_error_t> {
        Ok(OwnerLiveness { pid, pidfd: pidfd_open(pid)? })
    }

    /// Whether the owner process still exists (pidfd poll; `kill(pid, 0)` without pidfd).
    pub(super) fn alive(&self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: `p` is one valid pollfd; timeout 0, no blocking.
                let n = unsafe { libc::poll(&mut p, 1, 0) };
                !(n > 0 && p.revents & libc::POLLIN != 0)
            }
            None => {
                // SAFETY: signal 0 only checks for existence.
                let r = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
                r == 0 || errno() == libc::EPERM
            }
        }
    }
}

fn pidfd_open(pid: u32) -> Result<Option<OwnedFd>, doca_error_t> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor; no memory
    // effects.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0 as libc::c_uint) };
    if fd < 0 {
        let e = errno();
        return match e {
            libc::ENOSYS | libc::EPERM => Ok(None),
            libc::ESRCH => Err(DOCA_ERROR_NOT_FOUND),
            _ => Err(errno_to_doca(e)),
        };
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }))
}
