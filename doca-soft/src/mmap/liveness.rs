//! Liveness of an export's owner process, seen from the importer.
//!
//! On the shared-memory path the importer's mapping outlives the owner, so a dead owner is
//! not visible as a failed access; [`OwnerLiveness`] answers "is the owner still there" with
//! a pidfd poll (or `kill(pid, 0)` on kernels without pidfd). Its own file because it is a
//! process question, not a memory one: the remote-access code only asks it.
//!
//! **Per access, at most every [`OWNER_RECHECK`].** A pidfd poll is a system call, ~100 ns
//! here: on a DMA copy of 8 bytes from imported memory it was two thirds of the provider's
//! whole cost (`perf --test dma_lat --mode raw`, docs/cost.md, twentieth session).
//! [`alive_lately`](OwnerLiveness::alive_lately) asks the kernel only when the last answer
//! is older than that (read on the coarse monotonic clock, a few nanoseconds through the
//! vDSO), as the RDMA engine polls its peers' liveness at most every
//! `rdma::LIVENESS_INTERVAL`. So an access started within `OWNER_RECHECK` plus one tick of
//! the coarse clock (1–4 ms, the kernel's HZ) after the owner died may still complete,
//! against the mapping the owner left: the bytes it last wrote, or a write it will never
//! read, as if it had died a moment later. Hardware, too, learns of a host's death some time
//! after it. A death once seen is final.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::errno;
use crate::shm::errno_to_doca;
use crate::types::*;

/// How old the last answer of [`OwnerLiveness::alive_lately`] may be (see the module docs).
pub(crate) const OWNER_RECHECK: Duration = Duration::from_millis(1);

/// [`OwnerLiveness::seen_alive_at`] once the owner was seen dead: above every time, so that
/// `fetch_max` keeps it.
const SEEN_DEAD: u64 = u64::MAX;

/// A watch on the owner of imported memory: its pid and, where the kernel has it, a pidfd.
#[derive(Debug)]
pub(super) struct OwnerLiveness {
    pid: u32,
    /// pidfd of the owner (None if the kernel lacks pidfd_open).
    pidfd: Option<OwnedFd>,
    /// When the owner was last seen alive (coarse monotonic nanoseconds), or [`SEEN_DEAD`].
    /// Only ever raised (`fetch_max`): an import may be used from several threads, and a
    /// thread that saw the owner alive must not overwrite another's "dead".
    seen_alive_at: AtomicU64,
}

impl OwnerLiveness {
    /// Starts watching `pid`. NOT_FOUND when the process is already gone.
    pub(super) fn watch(pid: u32) -> Result<OwnerLiveness, doca_error_t> {
        let pidfd = pidfd_open(pid)?;
        Ok(OwnerLiveness { pid, pidfd, seen_alive_at: AtomicU64::new(coarse_now_ns()) })
    }

    /// Whether the owner lives, as the kernel said at most [`OWNER_RECHECK`] (plus a tick of
    /// the coarse clock) ago: what an access checks (see the module docs).
    #[inline]
    pub(super) fn alive_lately(&self) -> bool {
        // Relaxed: the verdict guards no other memory; a stale read only asks the kernel again.
        let seen = self.seen_alive_at.load(Ordering::Relaxed);
        if seen == SEEN_DEAD {
            return false;
        }
        let now = coarse_now_ns();
        if now.saturating_sub(seen) < OWNER_RECHECK.as_nanos() as u64 {
            return true;
        }
        self.alive_now(now)
    }

    /// Asks the kernel, and keeps the answer.
    #[cold]
    fn alive_now(&self, now: u64) -> bool {
        let alive = self.alive();
        self.seen_alive_at.fetch_max(if alive { now } else { SEEN_DEAD }, Ordering::Relaxed);
        alive
    }

    /// Whether the owner process still exists, asked now (pidfd poll; `kill(pid, 0)` without
    /// pidfd).
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

/// The coarse monotonic clock in nanoseconds: the time of the kernel's last tick, read
/// without the TSC (a few nanoseconds through the vDSO).
fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC_COARSE exists on every Linux we run on.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
