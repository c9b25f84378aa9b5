//! The daemon's signals: SIGTERM/SIGINT (stop) and SIGCHLD (a worker may have died) reach
//! the poll loop through a self-pipe, whichever thread the kernel delivers them to.
//!
//! Its own file because it is the one process-wide, async-signal-safe part of the daemon: the
//! handler may only touch an atomic and `write(2)`, and only one daemon per process may
//! install it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Write end of the self-pipe, -1 when no daemon runs in this process.
static SIG_PIPE: AtomicI32 = AtomicI32::new(-1);
/// One daemon per process: the signal handlers are process-wide.
static RUNNING: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    // Async-signal-safe only: an atomic load, write(2), and errno saved around it.
    // SAFETY: __errno_location returns this thread's errno slot.
    let saved = unsafe { *libc::__errno_location() };
    let fd = SIG_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: writing one byte from a live stack variable; a full pipe drops the byte,
        // which is fine: a pending byte already wakes the loop, which then checks everything.
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved };
}

/// The installed handlers; restores the previous ones on drop.
pub(super) struct Signals {
    pub(super) read: OwnedFd,
    _write: OwnedFd,
    old: Vec<(libc::c_int, libc::sigaction)>,
}

const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGCHLD];

impl Signals {
    pub(super) fn install() -> Result<Signals, String> {
        if RUNNING.swap(true, Ordering::AcqRel) {
            return Err("a UROM daemon already runs in this process".into());
        }
        let mut p = [-1; 2];
        // SAFETY: `p` is a valid array of two ints for pipe2 to fill.
        if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            RUNNING.store(false, Ordering::Release);
            return Err(format!("pipe: {}", io::Error::last_os_error()));
        }
        // SAFETY: both fds were just created and are owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        SIG_PIPE.store(write.as_raw_fd(), Ordering::Release);
        let mut s = Signals { read, _write: write, old: Vec::new() };
        for sig in SIGNALS {
            // SAFETY: sigaction is plain old data; we fill handler, mask and flags.
            let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            act.sa_flags = libc::SA_RESTART | if sig == libc::SIGCHLD { libc::SA_NOCLDSTOP } else { 0 };
            // SAFETY: as above.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: valid sigaction structs; the handler is async-signal-safe.
            if unsafe { libc::sigemptyset(&mut act.sa_mask) } != 0
                // SAFETY: as above.
                || unsafe { libc::sigaction(sig, &act, &mut old) } != 0
            {
                return Err(format!("sigaction: {}", io::Error::last_os_error()));
            }
            s.old.push((sig, old));
        }
        Ok(s)
    }

    /// Empties the pipe; whether SIGTERM or SIGINT was among the bytes.
    pub(super) fn drain(&self) -> bool {
        let mut stop = false;
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading into a live stack buffer of the given size.
            let n = unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return stop;
            }
            stop |= buf[..n as usize].iter().any(|b| *b as i32 == libc::SIGTERM || *b as i32 == libc::SIGINT);
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for (sig, old) in self.old.drain(..) {
            // SAFETY: restoring the handler sigaction returned at install.
            unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
        }
        SIG_PIPE.store(-1, Ordering::Release);
        RUNNING.store(false, Ordering::Release);
    }
}
