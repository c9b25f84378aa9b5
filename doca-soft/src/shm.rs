//! Shared-memory segments backed by `memfd`, and random keys.
//!
//! # Model
//!
//! A [`ShmSegment`] owns one `MAP_SHARED` mapping of an anonymous memory file (`memfd_create`)
//! and the file descriptor of that file. Nothing is ever created under `/dev/shm` or anywhere
//! else in the file system: the memory lives as long as some process holds the descriptor or
//! a mapping, and disappears with the last of them, so a crashed process leaves nothing behind.
//!
//! Another process reaches a segment knowing only the owner's pid and descriptor number: it
//! opens `/proc/<pid>/fd/<fd>` (which re-opens the same memory file) and maps it
//! ([`ShmSegment::open_remote`]). This needs the same permissions as reading `/proc/<pid>/fd`
//! (normally: same user). The importer then holds its own descriptor and mapping, so the memory
//! stays valid for it even after the owner exits.
//!
//! Segments made by [`ShmSegment::create`] are *sealed* against shrinking and growing
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`), and [`ShmSegment::open_remote`] refuses files
//! without `F_SEAL_SHRINK`: no process can truncate a segment under another's mapping, so an
//! access inside the mapped length can never raise `SIGBUS`.
//!
//! # Errors
//! * `DOCA_ERROR_INVALID_VALUE`: a zero length, a name with a NUL byte, a file smaller than the
//!   requested length, a file that is not a sealed regular memory file;
//! * `DOCA_ERROR_NOT_FOUND`: the process or the descriptor is gone (`ENOENT`, `ESRCH`);
//! * `DOCA_ERROR_NOT_PERMITTED`: the kernel refused access to the other process (`EACCES`,
//!   `EPERM`);
//! * `DOCA_ERROR_NO_MEMORY`: the kernel is out of memory or descriptors (`ENOMEM`, `EMFILE`...);
//! * `DOCA_ERROR_OPERATING_SYSTEM`: any other failing system call.

use std::ffi::CString;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use crate::types::*;

/// A mapped shared-memory segment (memfd + `MAP_SHARED` mapping). Dropping it unmaps the
/// memory and closes the descriptor.
#[derive(Debug)]
pub struct ShmSegment {
    ptr: *mut u8,
    len: usize,
    fd: libc::c_int,
    owner_pid: u32,
}

// SAFETY: the segment is a process-wide mapping plus a descriptor; neither is tied to a
// thread. The struct only hands out raw pointers, and whoever dereferences them is
// responsible for synchronising (the memory is shared with other processes anyway).
unsafe impl Send for ShmSegment {}
// SAFETY: `&ShmSegment` only exposes the address, length and descriptor number (plain
// values); see the `Send` argument for the memory itself.
unsafe impl Sync for ShmSegment {}

/// The `errno` of the last failing system call.
fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Maps an `errno` value to the DOCA error this module reports for it.
pub(crate) fn errno_to_doca(e: i32) -> doca_error_t {
    match e {
        libc::ENOENT | libc::ESRCH => DOCA_ERROR_NOT_FOUND,
        libc::EACCES | libc::EPERM => DOCA_ERROR_NOT_PERMITTED,
        libc::ENOMEM | libc::EMFILE | libc::ENFILE | libc::ENOSPC => DOCA_ERROR_NO_MEMORY,
        libc::EINVAL => DOCA_ERROR_INVALID_VALUE,
        _ => DOCA_ERROR_OPERATING_SYSTEM,
    }
}

/// This process's id, once asked for (0: not yet, or cleared in a forked child).
static OWN_PID: AtomicU32 = AtomicU32::new(0);

/// Our own process id, cached: a Comch producer's claim records it at every send, and
/// `getpid` is a system call each time (glibc no longer caches it). A `pthread_atfork` child
/// handler, registered at the first call, clears the cache in a forked child (a UROM worker
/// is one), which then reads its own.
pub(crate) fn own_pid() -> u32 {
    let pid = OWN_PID.load(Ordering::Relaxed);
    if pid != 0 {
        return pid;
    }
    static AT_FORK: Once = Once::new();
    AT_FORK.call_once(|| {
        extern "C" fn forked_child() {
            OWN_PID.store(0, Ordering::Relaxed);
        }
        // SAFETY: registers a handler that only stores to an atomic (async-signal-safe, as
        // a child handler of a multithreaded fork must be).
        unsafe { libc::pthread_atfork(None, None, Some(forked_child)) };
    });
    let pid = std::process::id();
    OWN_PID.store(pid, Ordering::Relaxed);
    pid
}

/// Closes `fd`, ignoring errors (used on failure paths and in `Drop`).
fn close_fd(fd: libc::c_int) {
    // SAFETY: `fd` is a descriptor this module opened and still owns; it is closed once.
    unsafe { libc::close(fd) };
}

impl ShmSegment {
    /// Creates a zero-filled segment of `len` bytes. `name` only labels the memory file (it
    /// shows in `/proc/<pid>/fd` as `/memfd:<name>`); it creates no file anywhere.
    pub fn create(len: usize, name: &str) -> Result<ShmSegment, doca_error_t> {
        if len == 0 || len > isize::MAX as usize {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // memfd names are limited to 249 bytes; cut on a char boundary.
        let mut end = name.len().min(200);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let cname = CString::new(&name[..end]).map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
        // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
        let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
        if fd < 0 {
            return Err(errno_to_doca(errno()));
        }
        let off = libc::off_t::try_from(len).map_err(|_| {
            close_fd(fd);
            DOCA_ERROR_INVALID_VALUE
        })?;
        // SAFETY: `fd` is the memory file just created; ftruncate only sets its size.
        if unsafe { libc::ftruncate(fd, off) } != 0 {
            let e = errno();
            close_fd(fd);
            return Err(errno_to_doca(e));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on our own memfd (created with MFD_ALLOW_SEALING); no memory is
        // touched.
        if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) } != 0 {
            let e = errno();
            close_fd(fd);
            return Err(errno_to_doca(e));
        }
        match Self::map(fd, len, true) {
            Ok(ptr) => Ok(ShmSegment { ptr, len, fd, owner_pid: own_pid() }),
            Err(e) => {
                close_fd(fd);
                Err(e)
            }
        }
    }

    /// Maps the segment another process created: `fd` is the descriptor number in process
    /// `pid`, and at least `len` bytes are mapped read-write. For our own pid the descriptor
    /// is duplicated instead of re-opened.
    pub fn open_remote(pid: u32, fd: i32, len: usize) -> Result<ShmSegment, doca_error_t> {
        Self::open_remote_with(pid, fd, len, true)
    }

    /// As [`ShmSegment::open_remote`]; with `writable == false` the file is opened and mapped
    /// read-only (a write through [`ShmSegment::as_ptr`] would then fault: callers must not).
    pub fn open_remote_with(pid: u32, fd: i32, len: usize, writable: bool) -> Result<ShmSegment, doca_error_t> {
        if len == 0 || len > isize::MAX as usize || fd < 0 || pid == 0 || pid > i32::MAX as u32 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let local_fd = if pid == own_pid() {
            // SAFETY: F_DUPFD_CLOEXEC only duplicates a descriptor number; an invalid one
            // fails with EBADF, which we report.
            let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
            if d < 0 {
                let e = errno();
                return Err(if e == libc::EBADF { DOCA_ERROR_NOT_FOUND } else { errno_to_doca(e) });
            }
            d
        } else {
            let path = CString::new(format!("/proc/{pid}/fd/{fd}")).map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
            let flags = if writable { libc::O_RDWR } else { libc::O_RDONLY };
            // SAFETY: `path` is a valid NUL-terminated string; open has no memory effects.
            let d = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
            if d < 0 {
                return Err(errno_to_doca(errno()));
            }
            d
        };
        match Self::check_and_map(local_fd, len, writable) {
            Ok(ptr) => Ok(ShmSegment { ptr, len, fd: local_fd, owner_pid: pid }),
            Err(e) => {
                close_fd(local_fd);
                Err(e)
            }
        }
    }

    /// Maps a segment whose descriptor another process passed to us (`SCM_RIGHTS`):
    /// read-write, at least `len` bytes, sealed against shrinking like
    /// [`ShmSegment::open_remote`]'s. The segment owns `fd` from now on.
    pub fn from_fd(fd: std::os::fd::OwnedFd, len: usize) -> Result<ShmSegment, doca_error_t> {
        use std::os::fd::IntoRawFd;
        if len == 0 || len > isize::MAX as usize {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let fd = fd.into_raw_fd();
        match Self::check_and_map(fd, len, true) {
            // The sender is not known here; 0 never names a process.
            Ok(ptr) => Ok(ShmSegment { ptr, len, fd, owner_pid: 0 }),
            Err(e) => {
                close_fd(fd);
                Err(e)
            }
        }
    }

    /// Checks that `fd` is a sealed regular file of at least `len` bytes, then maps it.
    fn check_and_map(fd: libc::c_int, len: usize, writable: bool) -> Result<*mut u8, doca_error_t> {
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `st` is a valid, writable `stat` for the duration of the call.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            return Err(errno_to_doca(errno()));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let size = u64::try_from(st.st_size).map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
        if size < len as u64 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: F_GET_SEALS only queries the file; no memory is touched.
        let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
        if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            // Not one of our sealed memory files: it could be truncated under the mapping.
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        Self::map(fd, len, writable)
    }

    /// `mmap(MAP_SHARED)` of the first `len` bytes of `fd`.
    fn map(fd: libc::c_int, len: usize, writable: bool) -> Result<*mut u8, doca_error_t> {
        let prot = if writable { libc::PROT_READ | libc::PROT_WRITE } else { libc::PROT_READ };
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) cannot alias any Rust
        // object; `fd` is an open descriptor and `len` is non-zero.
        let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, libc::MAP_SHARED, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(errno_to_doca(errno()));
        }
        Ok(p.cast())
    }

    /// Start of the mapping in this process.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: segments are never empty. (Present for clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// This process's descriptor of the memory file (valid while the segment lives), or -1
    /// once `close_descriptor` closed it.
    pub fn fd(&self) -> i32 {
        self.fd
    }

    /// Closes the descriptor and keeps the mapping, for a segment nobody will be told about
    /// from this process (a mapping of another's segment): one descriptor less per segment
    /// for its whole life. [`fd`](ShmSegment::fd) answers -1 afterwards.
    pub(crate) fn close_descriptor(&mut self) {
        if self.fd >= 0 {
            close_fd(self.fd);
            self.fd = -1;
        }
    }

    /// The pid of the process that created the segment (ours for [`ShmSegment::create`]).
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }

    /// True when `[p, p+len)` lies inside the mapping.
    pub fn contains(&self, p: usize, len: usize) -> bool {
        let base = self.ptr as usize;
        p >= base && p.checked_add(len).is_some_and(|end| end <= base + self.len)
    }
}

impl Drop for ShmSegment {
    fn drop(&mut self) {
        // SAFETY: `ptr/len` is exactly the mapping made in `map`, unmapped only here, once.
        // Any raw pointers into it handed out earlier must no longer be used (documented
        // contract of `as_ptr`: valid while the segment lives).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
        if self.fd >= 0 {
            close_fd(self.fd);
        }
    }
}

/// A random 64-bit value from the kernel (`getrandom(2)`), used as the keys of export blobs.
/// Falls back to `/dev/urandom`, then to a hash of time and address (never panics).
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    let mut filled = 0usize;
    let mut tries = 0;
    while filled < buf.len() && tries < 16 {
        tries += 1;
        // SAFETY: the destination range `buf[filled..]` is valid and writable for
        // `8 - filled` bytes; getrandom writes at most that many.
        let r = unsafe {
            libc::syscall(libc::SYS_getrandom, buf.as_mut_ptr().add(filled), buf.len() - filled, 0 as libc::c_uint)
        };
        if r > 0 {
            filled += r as usize;
        } else if r < 0 && errno() != libc::EINTR {
            break;
        }
    }
    if filled == buf.len() {
        return u64::from_ne_bytes(buf);
    }
    use std::io::Read;
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut buf).is_ok() {
            return u64::from_ne_bytes(buf);
        }
    }
    // Last resort: not cryptographic, but unique enough to keep working.
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let local = 0u8;
    crate::blob::fnv1a64(&[t.to_ne_bytes(), (&local as *const u8 as u64).to_ne_bytes()].concat())
}

/// A random non-zero `u64` (zero marks free key slots).
pub(crate) fn random_nonzero_u64() -> u64 {
    loop {
        let v = random_u64();
        if v != 0 {
            return v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pid_is_cached_and_a_forked_child_reads_its_own() {
        assert_eq!(own_pid(), std::process::id());
        assert_eq!(OWN_PID.load(Ordering::Relaxed), std::process::id(), "cached");
        // SAFETY: the child only reads its pid, compares and leaves with _exit (no
        // allocation, no lock another thread of the test process may hold).
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: getpid and _exit are async-signal-safe.
            unsafe {
                let ok = own_pid() == libc::getpid() as u32;
                libc::_exit(if ok { 0 } else { 1 });
            }
        }
        assert!(child > 0, "fork");
        let mut status = 0;
        // SAFETY: our child, reaped once.
        assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "the child read its own pid ({status:#x})");
    }

    #[test]
    fn create_is_zeroed_and_writable() {
        let s = ShmSegment::create(8192, "shm-test-create").unwrap();
        assert_eq!(s.len(), 8192);
        assert_eq!(s.owner_pid(), std::process::id());
        assert!(s.fd() >= 0);
        // SAFETY: the mapping is 8192 bytes, readable and writable, and lives for `s`.
        let mem = unsafe { std::slice::from_raw_parts_mut(s.as_ptr(), s.len()) };
        assert!(mem.iter().all(|&b| b == 0));
        mem[100] = 7;
        assert!(s.contains(s.as_ptr() as usize, 8192));
        assert!(!s.contains(s.as_ptr() as usize + 1, 8192));
    }

    #[test]
    fn a_mapping_outlives_its_closed_descriptor() {
        let owner = ShmSegment::create(4096, "shm-test-close").unwrap();
        let mut reader = ShmSegment::open_remote(owner.owner_pid(), owner.fd(), 4096).unwrap();
        reader.close_descriptor();
        // (Whether the number is free again is not asked: another test's thread may have
        // been given it since.)
        assert_eq!(reader.fd(), -1);
        // SAFETY: both map the same 4096 bytes, alive for both values.
        unsafe {
            *owner.as_ptr().add(9) = 42;
            assert_eq!(*reader.as_ptr().add(9), 42, "the mapping still shares the memory");
        }
        drop(reader); // unmaps, closes nothing more
        assert!(owner.fd() >= 0);
    }

    #[test]
    fn create_rejects_bad_args() {
        assert_eq!(ShmSegment::create(0, "x").unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(ShmSegment::create(16, "a\0b").unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        // A very long name is cut, not refused.
        let long = "é".repeat(300);
        assert!(ShmSegment::create(16, &long).is_ok());
    }

    #[test]
    fn open_own_and_via_proc() {
        let s = ShmSegment::create(4096, "shm-test-open").unwrap();
        // SAFETY: inside the 4096-byte mapping.
        unsafe { *s.as_ptr().add(10) = 42 };
        // Own pid: dup path.
        let a = ShmSegment::open_remote(std::process::id(), s.fd(), 4096).unwrap();
        // SAFETY: inside the 4096-byte mapping of the same file.
        assert_eq!(unsafe { *a.as_ptr().add(10) }, 42);
        assert_ne!(a.as_ptr(), s.as_ptr());
        // Via /proc/self/fd, as another process would.
        let b = ShmSegment::open_remote_with(std::process::id(), s.fd(), 4096, false).unwrap();
        // SAFETY: as above; read-only mapping, only read.
        assert_eq!(unsafe { *b.as_ptr().add(10) }, 42);
        // Too long.
        assert_eq!(ShmSegment::open_remote(std::process::id(), s.fd(), 8192).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        // Missing fd.
        assert_eq!(ShmSegment::open_remote(std::process::id(), 999_999, 16).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        // Bad pid.
        assert_eq!(ShmSegment::open_remote(0, s.fd(), 16).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        // A process that does not exist (pid_max is at most 2^22).
        assert_eq!(ShmSegment::open_remote(i32::MAX as u32, 3, 16).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    }

    #[test]
    fn open_refuses_unsealed_files() {
        let f = std::fs::File::open("/proc/self/status").unwrap();
        use std::os::fd::AsRawFd;
        let e = ShmSegment::open_remote(std::process::id(), f.as_raw_fd(), 1).unwrap_err();
        assert_eq!(e, DOCA_ERROR_INVALID_VALUE);
    }

    #[test]
    fn random_differs() {
        let a = random_u64();
        let b = random_u64();
        let c = random_u64();
        assert!(a != b || b != c);
        assert_ne!(random_nonzero_u64(), 0);
    }
}
