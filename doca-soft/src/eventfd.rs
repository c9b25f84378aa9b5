//! Eventfds as wake-up sources: the PE's own notification counter and the UROM channel's
//! two wake-ups. One write makes the descriptor readable for `epoll`/`poll`; one read empties
//! its counter, however many writes came before.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use crate::types::*;

/// A new non-blocking, close-on-exec eventfd with its counter at 0.
pub(crate) fn create() -> Result<OwnedFd, doca_error_t> {
    // SAFETY: eventfd with constant flags; no memory is passed.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(crate::shm::errno_to_doca(std::io::Error::last_os_error().raw_os_error().unwrap_or(0)));
    }
    // SAFETY: a descriptor the kernel just returned to us; nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to the counter of eventfd `fd`, which makes it readable. A failure (the counter
/// full: it is readable already) loses nothing.
pub(crate) fn signal(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from a valid u64; `fd` is a non-blocking eventfd the caller owns
    // or was given by its peer.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Empties eventfd `fd`: one read takes its whole counter (EAGAIN: it was empty).
pub(crate) fn drain(fd: RawFd) {
    let mut v = 0u64;
    // SAFETY: reads 8 bytes into a valid u64 from a non-blocking eventfd.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}
