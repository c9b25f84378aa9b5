//! The registry's bytes: the shared-memory file, its layout, its lock and its futex words.
//!
//! Everything in the segment is an atomic, so that a `&Table` can be shared by the threads of
//! a process while other processes write the same bytes: words that are only meaningful under
//! the lock are read and written `Relaxed` while the lock is held (the `flock` is the
//! fence), the futex words (`change_seq`, `applied_seq`) are also read without the lock.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::cpuset::WORDS;
use crate::error::{Error, ErrorKind, Result};
use crate::CpuSet;

/// `"ADDROM01"`: the segment is ours and of this layout.
const MAGIC: u64 = u64::from_le_bytes(*b"ADDROM01");
const VERSION: u32 = 1;
/// Processes (registered or reserved) a registry holds at once.
pub(crate) const MAX_PROCS: usize = 128;

/// A CPU mask in shared memory.
#[repr(C)]
pub(crate) struct Mask([AtomicU64; WORDS]);

impl Mask {
    pub(crate) fn get(&self) -> CpuSet {
        CpuSet::from_words(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }

    pub(crate) fn set(&self, set: CpuSet) {
        for (w, v) in self.0.iter().zip(set.to_words()) {
            w.store(v, Ordering::Relaxed);
        }
    }
}

/// Slot states.
pub(crate) const FREE: u32 = 0;
/// A running process that registered itself (or adopted a reservation).
pub(crate) const REGISTERED: u32 = 1;
/// Reserved by a launcher (`pre_init`) for a child that has not adopted it yet.
pub(crate) const RESERVED: u32 = 2;

/// One process of the registry.
#[repr(C)]
pub(crate) struct Slot {
    pub(crate) state: AtomicU32,
    /// The process (for a reservation: the child once the launcher knows it, else 0).
    pub(crate) pid: AtomicI32,
    /// The process's start time (`/proc/PID/stat` field 22): a reused pid does not match.
    pub(crate) start: AtomicU64,
    /// For a reservation: the launcher, alive while the child has not started.
    pub(crate) owner: AtomicI32,
    _pad: AtomicU32,
    pub(crate) owner_start: AtomicU64,
    /// For a reservation: the secret the child shows to adopt it.
    pub(crate) token: AtomicU64,
    /// Bumped by every change made by someone else; the process waits on it (futex).
    pub(crate) change_seq: AtomicU32,
    /// The last `change_seq` the process applied; setters wait on it (futex). The slot is
    /// *dirty* (a change is pending) while the two differ.
    pub(crate) applied_seq: AtomicU32,
    /// The mask the process runs on (applied).
    pub(crate) current: Mask,
    /// The mask it must move to; meaningful while dirty.
    pub(crate) future: Mask,
    /// CPUs stolen from this process, which it may get back (`recover_stolen`).
    pub(crate) stolen: Mask,
}

impl Slot {
    pub(crate) fn dirty(&self) -> bool {
        self.change_seq.load(Ordering::Acquire) != self.applied_seq.load(Ordering::Acquire)
    }

    /// What the process owns: the future mask while dirty, the current one otherwise.
    pub(crate) fn owned(&self) -> CpuSet {
        if self.dirty() {
            self.future.get()
        } else {
            self.current.get()
        }
    }

    pub(crate) fn clear(&self) {
        self.state.store(FREE, Ordering::Relaxed);
        self.pid.store(0, Ordering::Relaxed);
        self.start.store(0, Ordering::Relaxed);
        self.owner.store(0, Ordering::Relaxed);
        self.owner_start.store(0, Ordering::Relaxed);
        self.token.store(0, Ordering::Relaxed);
        // Wake whoever waits on this slot: the process is gone, so a sync setter must not
        // wait for its acknowledgement.
        let seq = self.change_seq.load(Ordering::Relaxed);
        self.applied_seq.store(seq, Ordering::Release);
        futex_wake(&self.applied_seq);
        self.current.set(CpuSet::new());
        self.future.set(CpuSet::new());
        self.stolen.set(CpuSet::new());
    }
}

#[repr(C)]
pub(crate) struct Table {
    magic: AtomicU64,
    version: AtomicU32,
    max_procs: AtomicU32,
    /// The pid holding the lock while it writes; non-zero when the lock is taken means the
    /// previous holder died mid-update (the kernel dropped its `flock`), so the table is
    /// repaired before use.
    pub(crate) writer: AtomicI32,
    _pad: AtomicU32,
    /// The node's CPUs, fixed when the registry was created.
    pub(crate) system: Mask,
    pub(crate) slots: [Slot; MAX_PROCS],
}

const SIZE: usize = std::mem::size_of::<Table>();

/// An open registry segment: the mapping plus its own open file (hence its own `flock`).
pub(crate) struct Segment {
    file: File,
    table: NonNull<Table>,
    /// `flock` does not exclude threads sharing one open file: this does.
    local: Mutex<()>,
    pub(crate) path: PathBuf,
}

// SAFETY: the mapping is shared memory made only of atomics; it is unmapped only on drop.
unsafe impl Send for Segment {}
// SAFETY: as above: every access through `&Table` is atomic.
unsafe impl Sync for Segment {}

/// Whether a registry key is usable in a file name.
pub(crate) fn check_key(key: &str) -> Result<()> {
    let ok = !key.is_empty()
        && key.len() <= 64
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
        && !key.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::InvalidArgument,
            format!("drom: bad registry key {key:?} (1-64 characters of [A-Za-z0-9_.-], not starting with '.')"),
        ))
    }
}

/// The file of a key: per user, so that users never share (or block) a registry.
pub(crate) fn path_of(key: &str) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/dev/shm/async-doca-drom.{uid}.{key}"))
}

impl Segment {
    /// Opens the registry of `key`; creates it (mode 0600) when `create` and it is missing.
    pub(crate) fn open(key: &str, create: bool) -> Result<Segment> {
        check_key(key)?;
        let path = path_of(key);
        let cpath = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "drom: registry path has a NUL byte"))?;
        let mut flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        if create {
            flags |= libc::O_CREAT;
        }
        // SAFETY: a valid NUL-terminated path; the mode argument is read only with O_CREAT.
        let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::NotFound {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("drom: no registry {} (nobody registered under key {key:?})", path.display()),
                ));
            }
            return Err(Error::os(e, &format!("drom: open {}", path.display())));
        }
        // SAFETY: `fd` is a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        let meta = file.metadata().map_err(|e| Error::os(e, "drom: fstat the registry"))?;
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        if meta.uid() != uid || meta.mode() & 0o077 != 0 {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "drom: registry {} is not private to uid {uid} (owner {}, mode {:o})",
                    path.display(),
                    meta.uid(),
                    meta.mode() & 0o777
                ),
            ));
        }
        // SAFETY: `file` stays open until the end of this function: it is moved into the
        // segment, which lives until after `seg_lock` is dropped (or both drop on an error).
        let seg_lock = unsafe { FileLock::take_raw(file.as_raw_fd())? };
        let len = file.metadata().map_err(|e| Error::os(e, "drom: fstat the registry"))?.len();
        let fresh = len == 0;
        if fresh {
            if !create {
                return Err(Error::new(ErrorKind::NotFound, format!("drom: registry {} is empty", path.display())));
            }
            file.set_len(SIZE as u64).map_err(|e| Error::os(e, "drom: size the registry"))?;
        } else if len != SIZE as u64 {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("drom: {} has {len} bytes, not a registry of this version ({SIZE})", path.display()),
            ));
        }
        let system = if fresh { online_cpus()? } else { CpuSet::new() };
        // SAFETY: maps SIZE bytes of a file that has SIZE bytes; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            drop(seg_lock);
            return Err(Error::os(io::Error::last_os_error(), "drom: mmap the registry"));
        }
        let seg = Segment {
            file,
            table: NonNull::new(ptr.cast()).expect("mmap never returns NULL on success"),
            local: Mutex::new(()),
            path,
        };
        let t = seg.table();
        if fresh {
            // A new file is zero-filled: every slot is FREE already.
            t.system.set(system);
            t.version.store(VERSION, Ordering::Relaxed);
            t.max_procs.store(MAX_PROCS as u32, Ordering::Relaxed);
            t.magic.store(MAGIC, Ordering::Release);
        } else if t.magic.load(Ordering::Acquire) != MAGIC
            || t.version.load(Ordering::Relaxed) != VERSION
            || t.max_procs.load(Ordering::Relaxed) != MAX_PROCS as u32
        {
            // Unlock before `seg` closes the descriptor.
            drop(seg_lock);
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("drom: {} is not a registry of this version", seg.path.display()),
            ));
        }
        drop(seg_lock);
        Ok(seg)
    }

    pub(crate) fn table(&self) -> &Table {
        // SAFETY: the mapping lives as long as `self` and holds a `Table` (checked size and
        // magic); all its fields are atomics, so shared references are sound.
        unsafe { self.table.as_ref() }
    }

    /// Takes the registry lock (this process's threads, then other processes).
    pub(crate) fn lock(&self) -> Result<Locked<'_>> {
        let local = self.local.lock().unwrap_or_else(|p| p.into_inner());
        let file = FileLock::take(&self.file)?;
        Ok(Locked { seg: self, _file: file, _local: local })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping created in `open`; no reference to it outlives `self`.
        unsafe { libc::munmap(self.table.as_ptr().cast(), SIZE) };
    }
}

/// The lock held: the table may be changed.
pub(crate) struct Locked<'a> {
    pub(crate) seg: &'a Segment,
    _file: FileLock<'a>,
    _local: MutexGuard<'a, ()>,
}

impl Locked<'_> {
    pub(crate) fn table(&self) -> &Table {
        self.seg.table()
    }
}

/// A held `flock`. It keeps the descriptor number only: the lock is taken on a file that
/// outlives it (the caller's borrow or the segment).
struct FileLock<'a>(std::os::fd::RawFd, std::marker::PhantomData<&'a File>);

impl<'a> FileLock<'a> {
    fn take(file: &'a File) -> Result<FileLock<'a>> {
        // SAFETY: only the descriptor number is kept, and every caller keeps the file open
        // while the lock is held (the open path drops the lock before moving the file).
        unsafe { Self::take_raw(file.as_raw_fd()) }
    }

    /// # Safety
    /// `fd` must stay open while the lock is held.
    unsafe fn take_raw(fd: std::os::fd::RawFd) -> Result<FileLock<'a>> {
        loop {
            // SAFETY: flock on a descriptor that is open (caller's contract).
            if unsafe { libc::flock(fd, libc::LOCK_EX) } == 0 {
                return Ok(FileLock(fd, std::marker::PhantomData));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::os(e, "drom: lock the registry"));
            }
        }
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: unlocks the descriptor locked in `take`.
        unsafe { libc::flock(self.0, libc::LOCK_UN) };
    }
}

/// The CPUs of the node (`/sys/devices/system/cpu/online`, else this process's affinity).
fn online_cpus() -> Result<CpuSet> {
    match std::fs::read_to_string("/sys/devices/system/cpu/online") {
        Ok(s) => s.trim().parse(),
        Err(_) => CpuSet::current_affinity(),
    }
}

/// Waits while `*word == expected`, at most `timeout`. Spurious returns are allowed.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a shared (not private) futex wait on a live, aligned 32-bit word of the
    // mapping, with a valid relative timeout; the kernel only reads them.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, &ts as *const libc::timespec);
    }
}

/// Wakes every waiter on `word`, in any process.
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: a shared futex wake on a live, aligned word; the kernel does not write it.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// The start time of `pid` and whether it is alive (not gone, not a zombie).
pub(crate) fn proc_start(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // Fields after the name start at 3 (state); starttime is field 22.
    fields.nth(22 - 4)?.parse().ok()
}
