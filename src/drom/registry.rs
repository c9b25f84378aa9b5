//! [`Registry`], [`Membership`] and [`Reservation`]: the operations on the shared table.

use std::fmt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::shm::{self, Locked, Segment, Slot, Table, REGISTERED, RESERVED};
use super::{Flags, ENV_RESERVATION};
use crate::error::{Error, ErrorKind, Result};
use crate::CpuSet;

/// The default time a [`Flags::SYNC_QUERY`] call waits for the target to apply a change.
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(5);

fn my_pid() -> i32 {
    std::process::id() as i32
}

/// What the registry says about one process (see [`Registry::processes`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The process; 0 for a reservation whose child is not started yet.
    pub pid: i32,
    /// The CPUs it owns: the pending mask while [`dirty`](ProcessInfo::dirty), else the
    /// applied one.
    pub mask: CpuSet,
    /// The CPUs it runs on (the last mask it applied).
    pub current: CpuSet,
    /// A change is pending: the process has not applied `mask` yet.
    pub dirty: bool,
    /// CPUs stolen from it, which it may get back ([`Registry::recover_stolen`]).
    pub stolen: CpuSet,
    /// `Some(launcher)` while this is a reservation made by [`Registry::pre_init`] that the
    /// child has not adopted.
    pub reserved_by: Option<i32>,
}

/// An attached registry: the administrator's view (and the way a process registers).
///
/// One registry exists per user and key, as the file `/dev/shm/async-doca-drom.<uid>.<key>`
/// (mode 0600). Each `Registry` has its own open file, so it may be used from several
/// threads; all calls take the registry lock for a few microseconds.
///
/// ```
/// use async_doca::drom::{Flags, Registry};
/// use async_doca::CpuSet;
///
/// let key = format!("doc-registry-{}", std::process::id());
/// let reg = Registry::open(&key)?;                 // create if missing
/// let me = reg.register(&"0".parse()?, Flags::NONE)?;
/// assert_eq!(reg.pids()?, [std::process::id() as i32]);
///
/// // An administrator moves us to CPU 0-1 (when the node has two CPUs); we apply it.
/// let all = reg.system_cpus();
/// reg.set_mask(me.pid(), &all, Flags::NONE)?;
/// assert_eq!(me.poll()?, Some(all));
/// me.applied(&all)?;
/// assert_eq!(reg.get_mask(me.pid(), Flags::NONE)?, all);
/// drop(me);                                        // unregisters
/// Registry::remove(&key)?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Registry {
    seg: Arc<Segment>,
    key: Arc<str>,
    timeout: Duration,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").field("key", &self.key).field("path", &self.seg.path).finish()
    }
}

impl Registry {
    /// Attaches to the existing registry of `key` (DROM's Attach). Fails with
    /// [`ErrorKind::NotFound`] when there is none (DROM's NOSHMEM).
    pub fn attach(key: &str) -> Result<Registry> {
        Ok(Registry { seg: Arc::new(Segment::open(key, false)?), key: key.into(), timeout: DEFAULT_SYNC_TIMEOUT })
    }

    /// Attaches to the registry of `key`, creating it (mode 0600) if missing.
    pub fn open(key: &str) -> Result<Registry> {
        Ok(Registry { seg: Arc::new(Segment::open(key, true)?), key: key.into(), timeout: DEFAULT_SYNC_TIMEOUT })
    }

    /// Deletes the registry file of `key` (processes attached keep their mapping). Missing
    /// is not an error.
    pub fn remove(key: &str) -> Result<()> {
        shm::check_key(key)?;
        match std::fs::remove_file(shm::path_of(key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::os(e, "drom: remove the registry")),
        }
    }

    /// The file of the registry of `key` (whether or not it exists).
    pub fn path_of(key: &str) -> std::path::PathBuf {
        shm::path_of(key)
    }

    /// How long [`Flags::SYNC_QUERY`] calls wait (default [`DEFAULT_SYNC_TIMEOUT`]).
    #[must_use]
    pub fn sync_timeout(mut self, timeout: Duration) -> Registry {
        self.timeout = timeout;
        self
    }

    /// The registry's key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The registry's file.
    pub fn path(&self) -> &Path {
        &self.seg.path
    }

    /// Detaches (DROM's Detach): the same as dropping it. Registrations made through it
    /// ([`Membership`]) keep their own reference and stay.
    pub fn detach(self) {}

    /// The node's CPUs, as recorded when the registry was created.
    pub fn system_cpus(&self) -> CpuSet {
        self.seg.table().system.get()
    }

    /// How many CPUs the node has (DROM's GetNumCpus).
    pub fn num_cpus(&self) -> usize {
        self.system_cpus().len()
    }

    /// The registered processes (DROM's GetPidList), with the children of reservations
    /// once their launcher [bound](Reservation::bind) them.
    pub fn pids(&self) -> Result<Vec<i32>> {
        Ok(self.processes()?.into_iter().filter(|p| p.pid != 0).map(|p| p.pid).collect())
    }

    /// Every process and reservation, with its masks.
    pub fn processes(&self) -> Result<Vec<ProcessInfo>> {
        self.locked(|t| Ok(t.slots.iter().filter(|s| s.state.load(Ordering::Relaxed) != shm::FREE).map(info).collect()))
    }

    /// The CPUs nobody owns.
    pub fn free_cpus(&self) -> Result<CpuSet> {
        self.locked(|t| Ok(free(t)))
    }

    /// The CPUs `pid` owns (DROM's GetProcessMask). With [`Flags::SYNC_QUERY`], first waits
    /// (up to the [sync timeout](Registry::sync_timeout)) until it applied a pending change,
    /// failing with [`ErrorKind::TimedOut`].
    pub fn get_mask(&self, pid: i32, flags: Flags) -> Result<CpuSet> {
        let (i, seq) = self.locked(|t| {
            let i = find(t, pid)?;
            Ok((i, t.slots[i].change_seq.load(Ordering::Relaxed)))
        })?;
        if flags.contains(Flags::SYNC_QUERY) {
            self.wait_applied(&[(i, pid, seq)])?;
        }
        self.locked(|t| Ok(t.slots[find(t, pid)?].owned()))
    }

    /// Gives `pid` exactly `mask` (DROM's SetProcessMask). The CPUs it gains must be free,
    /// or owned by others and [`Flags::STEAL_CPUS`] given (they lose them, which becomes a
    /// pending change for them and is remembered as stolen). CPUs it loses become free.
    ///
    /// Errors: [`ErrorKind::NotFound`] (no such process: NOPROC), [`ErrorKind::BadState`]
    /// (it, or a process to steal from, has a pending change: PDIRTY),
    /// [`ErrorKind::PermissionDenied`] (CPUs owned by others without `STEAL_CPUS`, or a
    /// steal that would leave a process without CPUs: PERM), [`ErrorKind::TimedOut`]
    /// (`SYNC_QUERY` and a process did not apply its change in time: the change stays
    /// pending), [`ErrorKind::InvalidArgument`] (empty mask, CPUs the node lacks, `SYNC_NOW`
    /// for another process).
    pub fn set_mask(&self, pid: i32, mask: &CpuSet, flags: Flags) -> Result<()> {
        self.check_mask(mask)?;
        if flags.contains(Flags::SYNC_NOW) && pid != my_pid() {
            return Err(Error::new(ErrorKind::InvalidArgument, "drom: SYNC_NOW applies only to the calling process"));
        }
        let touched = self.locked(|t| {
            let i = find(t, pid)?;
            let slot = &t.slots[i];
            if slot.dirty() {
                return Err(dirty_error(pid));
            }
            let old = slot.current.get();
            if old == *mask {
                return Ok(Vec::new());
            }
            let mut touched = take_cpus(t, Some(i), &mask.difference(&old), flags)?;
            let seq = change(slot, *mask);
            slot.stolen.set(slot.stolen.get().difference(mask));
            if flags.contains(Flags::SYNC_NOW) {
                slot.current.set(*mask);
                slot.applied_seq.store(seq, Ordering::Release);
            } else {
                touched.push((i, pid, seq));
            }
            Ok(touched)
        })?;
        if flags.contains(Flags::SYNC_QUERY) {
            self.wait_applied(&touched)?;
        }
        Ok(())
    }

    /// Registers the calling process with `mask` (the CPUs must be free, or stolen with
    /// [`Flags::STEAL_CPUS`]). Fails with [`ErrorKind::BadState`] if it is registered
    /// already (DROM's INIT). The registration lasts as long as the [`Membership`].
    pub fn register(&self, mask: &CpuSet, flags: Flags) -> Result<Membership> {
        self.register_pid(my_pid(), mask, flags)
    }

    /// Registers another running process of ours (a supervisor registering the processes
    /// it starts, like the UROM service its workers), with the rules of
    /// [`register`](Registry::register). The returned [`Membership`] is the supervisor's
    /// handle: it polls the changes and applies them to that process (with
    /// `sched_setaffinity`), and unregisters it when dropped.
    pub fn register_pid(&self, pid: i32, mask: &CpuSet, flags: Flags) -> Result<Membership> {
        self.check_mask(mask)?;
        let start = shm::proc_start(pid)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("drom: process {pid} is not running")))?;
        let slot = self.locked(|t| {
            if find(t, pid).is_ok() {
                return Err(Error::new(ErrorKind::BadState, format!("drom: pid {pid} is already registered")));
            }
            let i = free_slot(t)?;
            take_cpus(t, None, mask, flags)?;
            let s = &t.slots[i];
            s.pid.store(pid, Ordering::Relaxed);
            s.start.store(start, Ordering::Relaxed);
            s.current.set(*mask);
            s.state.store(REGISTERED, Ordering::Release);
            Ok(i)
        })?;
        Ok(Membership { reg: self.clone(), slot, pid })
    }

    /// Reserves `mask` for a child about to be started (DROM's PreInit), with the same rules
    /// as [`register`](Registry::register). Pass [`Reservation::env`] to the child (a
    /// runtime built with [`Builder::drom`](crate::Builder::drom) adopts it), and tell the
    /// reservation the child's pid ([`Reservation::bind`]) once it is known. Until then the
    /// reservation lives as long as this process.
    pub fn pre_init(&self, mask: &CpuSet, flags: Flags) -> Result<Reservation> {
        self.check_mask(mask)?;
        let owner = my_pid();
        let owner_start = shm::proc_start(owner).unwrap_or(0);
        let token = random_token()?;
        let slot = self.locked(|t| {
            let i = free_slot(t)?;
            take_cpus(t, None, mask, flags)?;
            let s = &t.slots[i];
            s.owner.store(owner, Ordering::Relaxed);
            s.owner_start.store(owner_start, Ordering::Relaxed);
            s.token.store(token, Ordering::Relaxed);
            s.current.set(*mask);
            s.state.store(RESERVED, Ordering::Release);
            Ok(i)
        })?;
        Ok(Reservation { reg: self.clone(), slot, token, mask: *mask })
    }

    /// Ends `pid`'s registration after it exited (DROM's PostFinalize): its CPUs become
    /// free (a process that unregistered itself is not an error). With
    /// [`Flags::RETURN_STOLEN`], free CPUs that had been stolen from live processes are given
    /// back to them (as pending changes).
    pub fn post_finalize(&self, pid: i32, flags: Flags) -> Result<()> {
        self.locked(|t| {
            if let Ok(i) = find(t, pid) {
                t.slots[i].clear();
            }
            if flags.contains(Flags::RETURN_STOLEN) {
                for i in 0..t.slots.len() {
                    give_back(t, i);
                }
            }
            Ok(())
        })
    }

    /// Gives `pid` back the CPUs stolen from it that are free now (DROM's
    /// RecoverStolenCpus), as a pending change; returns them (empty: nothing to recover).
    pub fn recover_stolen(&self, pid: i32) -> Result<CpuSet> {
        self.locked(|t| {
            let i = find(t, pid)?;
            if t.slots[i].dirty() {
                return Err(dirty_error(pid));
            }
            Ok(give_back(t, i))
        })
    }

    #[cfg(test)]
    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }

    fn check_mask(&self, mask: &CpuSet) -> Result<()> {
        let system = self.system_cpus();
        if mask.is_empty() || !mask.is_subset(&system) {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("drom: mask {mask:?} must be a non-empty subset of the node's CPUs {system}"),
            ));
        }
        Ok(())
    }

    /// Runs `f` under the lock, after repairing a table left half-written by a dead holder
    /// and freeing the slots of dead processes.
    fn locked<R>(&self, f: impl FnOnce(&Table) -> Result<R>) -> Result<R> {
        let guard = self.seg.lock()?;
        let t = guard.table();
        let interrupted = t.writer.load(Ordering::Relaxed) != 0;
        t.writer.store(my_pid(), Ordering::Relaxed);
        reap_dead(t);
        if interrupted {
            repair(t);
        }
        let r = f(t);
        t.writer.store(0, Ordering::Release);
        drop::<Locked<'_>>(guard);
        r
    }

    /// Waits until each `(slot, pid, seq)` applied `seq` (or the process is gone).
    fn wait_applied(&self, what: &[(usize, i32, u32)]) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let t = self.seg.table();
        for &(i, pid, seq) in what {
            let s = &t.slots[i];
            loop {
                let applied = s.applied_seq.load(Ordering::Acquire);
                if applied == seq
                    || s.pid.load(Ordering::Relaxed) != pid
                    || s.state.load(Ordering::Relaxed) == shm::FREE
                {
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    return Err(Error::new(
                        ErrorKind::TimedOut,
                        format!("drom: pid {pid} did not apply its new mask within {:?} (still pending)", self.timeout),
                    ));
                }
                shm::futex_wait(&s.applied_seq, applied, deadline - now);
            }
        }
        Ok(())
    }
}

fn dirty_error(pid: i32) -> Error {
    Error::new(ErrorKind::BadState, format!("drom: pid {pid} has a pending change (dirty)"))
}

fn info(s: &Slot) -> ProcessInfo {
    let reserved = s.state.load(Ordering::Relaxed) == RESERVED;
    ProcessInfo {
        pid: s.pid.load(Ordering::Relaxed),
        mask: s.owned(),
        current: s.current.get(),
        dirty: s.dirty(),
        stolen: s.stolen.get(),
        reserved_by: reserved.then(|| s.owner.load(Ordering::Relaxed)),
    }
}

fn live(s: &Slot) -> bool {
    s.state.load(Ordering::Relaxed) != shm::FREE
}

fn free(t: &Table) -> CpuSet {
    let owned = t.slots.iter().filter(|s| live(s)).fold(CpuSet::new(), |acc, s| acc.union(&s.owned()));
    t.system.get().difference(&owned)
}

/// The slot of `pid` (registered, or a reservation bound to it).
fn find(t: &Table, pid: i32) -> Result<usize> {
    if pid > 0 {
        if let Some(i) = t.slots.iter().position(|s| live(s) && s.pid.load(Ordering::Relaxed) == pid) {
            return Ok(i);
        }
    }
    Err(Error::new(ErrorKind::NotFound, format!("drom: no registered process {pid}")))
}

fn free_slot(t: &Table) -> Result<usize> {
    t.slots.iter().position(|s| !live(s)).ok_or_else(|| {
        Error::new(ErrorKind::ResourceExhausted, format!("drom: the registry is full ({} processes)", shm::MAX_PROCS))
    })
}

/// Records a new mask for the process of `s` and wakes it; returns the change's number.
fn change(s: &Slot, mask: CpuSet) -> u32 {
    s.future.set(mask);
    let seq = s.change_seq.load(Ordering::Relaxed).wrapping_add(1);
    s.change_seq.store(seq, Ordering::Release);
    shm::futex_wake(&s.change_seq);
    seq
}

/// Makes `cpus` available to slot `me` (None: a slot being filled): checks every owner
/// first, then takes the CPUs from them (all or nothing). Returns the victims' changes.
fn take_cpus(t: &Table, me: Option<usize>, cpus: &CpuSet, flags: Flags) -> Result<Vec<(usize, i32, u32)>> {
    let mut victims = Vec::new();
    for (i, s) in t.slots.iter().enumerate() {
        if Some(i) == me || !live(s) {
            continue;
        }
        let owned = s.owned();
        let taken = owned.intersection(cpus);
        if taken.is_empty() {
            continue;
        }
        let pid = s.pid.load(Ordering::Relaxed);
        if !flags.contains(Flags::STEAL_CPUS) {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!("drom: CPUs {taken} belong to pid {pid} (steal them with STEAL_CPUS)"),
            ));
        }
        if s.dirty() {
            return Err(dirty_error(pid));
        }
        if owned.difference(&taken).is_empty() {
            return Err(Error::new(
                ErrorKind::PermissionDenied,
                format!("drom: cannot steal CPUs {taken}: pid {pid} would have none left"),
            ));
        }
        victims.push((i, pid, taken));
    }
    Ok(victims
        .into_iter()
        .map(|(i, pid, taken)| {
            let s = &t.slots[i];
            let seq = change(s, s.owned().difference(&taken));
            s.stolen.set(s.stolen.get().union(&taken));
            (i, pid, seq)
        })
        .collect())
}

/// Gives slot `i` the free CPUs stolen from it (if it is in use and clean; a reservation's
/// launcher applies the change for a child that did not adopt it).
fn give_back(t: &Table, i: usize) -> CpuSet {
    let s = &t.slots[i];
    if !live(s) || s.dirty() {
        return CpuSet::new();
    }
    let give = s.stolen.get().intersection(&free(t));
    if !give.is_empty() {
        change(s, s.owned().union(&give));
        s.stolen.set(s.stolen.get().difference(&give));
    }
    give
}

/// Frees the slots of processes that are gone (pid dead, reused, or a zombie).
fn reap_dead(t: &Table) {
    for s in &t.slots {
        let (pid, start) = match s.state.load(Ordering::Relaxed) {
            REGISTERED => (s.pid.load(Ordering::Relaxed), s.start.load(Ordering::Relaxed)),
            RESERVED if s.pid.load(Ordering::Relaxed) != 0 => {
                (s.pid.load(Ordering::Relaxed), s.start.load(Ordering::Relaxed))
            }
            RESERVED => (s.owner.load(Ordering::Relaxed), s.owner_start.load(Ordering::Relaxed)),
            _ => continue,
        };
        if shm::proc_start(pid) != Some(start) {
            s.clear();
        }
    }
}

/// Restores the invariant after a holder died mid-update: owned masks are non-empty,
/// inside the node, and disjoint (a CPU claimed twice stays with the first slot; the others
/// get a pending change without it).
fn repair(t: &Table) {
    let system = t.system.get();
    let mut seen = CpuSet::new();
    for s in t.slots.iter().filter(|s| live(s)) {
        let owned = s.owned();
        let keep = owned.intersection(&system).difference(&seen);
        if keep.is_empty() {
            s.clear();
            continue;
        }
        if keep != owned {
            if s.dirty() {
                s.future.set(keep);
            } else {
                change(s, keep);
            }
        }
        seen = seen.union(&keep);
    }
}

fn random_token() -> Result<u64> {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into the 8-byte buffer.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        return Err(Error::os(std::io::Error::last_os_error(), "drom: getrandom"));
    }
    Ok(u64::from_le_bytes(b) | 1)
}

/// The calling process's registration: it reads the changes others make to its mask and
/// says when it applied them. Dropping it unregisters the process (its CPUs become free).
///
/// A runtime built with [`Builder::drom`](crate::Builder::drom) holds one and follows it by
/// itself; this type is for programs that manage their threads themselves.
#[must_use = "dropping the membership unregisters the process at once"]
pub struct Membership {
    reg: Registry,
    slot: usize,
    pid: i32,
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Membership").field("key", &self.reg.key).field("pid", &self.pid).finish()
    }
}

/// What [`ENV_RESERVATION`] names: a reservation's registry key, slot and token, in the form
/// `KEY:SLOT:TOKEN` (slot in decimal, token in hex) that [`Reservation::env`] writes. It comes
/// from the environment, that is, from outside the process: [`ReservationRef::parse`] accepts
/// only a valid key, a slot inside the table and a token, and never panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservationRef<'a> {
    pub key: &'a str,
    pub slot: usize,
    pub token: u64,
}

impl<'a> ReservationRef<'a> {
    /// Parses the value of [`ENV_RESERVATION`].
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] for anything else than `KEY:SLOT:TOKEN` with a usable
    /// registry key and a slot of the table.
    pub fn parse(value: &'a str) -> Result<ReservationRef<'a>> {
        let bad = || Error::new(ErrorKind::InvalidArgument, format!("drom: bad {ENV_RESERVATION} value {value:?}"));
        let mut parts = value.rsplitn(3, ':');
        let token = u64::from_str_radix(parts.next().ok_or_else(bad)?, 16).map_err(|_| bad())?;
        let slot: usize = parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let key = parts.next().ok_or_else(bad)?;
        if slot >= shm::MAX_PROCS || shm::check_key(key).is_err() {
            return Err(bad());
        }
        Ok(ReservationRef { key, slot, token })
    }
}

impl Membership {
    /// Adopts the reservation a launcher made for this process (see
    /// [`Registry::pre_init`]), described by `value` (the value of
    /// [`ENV_RESERVATION`]). Fails with [`ErrorKind::NotFound`] if it is gone.
    pub fn adopt(value: &str) -> Result<Membership> {
        let ReservationRef { key, slot, token } = ReservationRef::parse(value)?;
        let reg = Registry::attach(key)?;
        let pid = my_pid();
        let start = shm::proc_start(pid).unwrap_or(0);
        reg.locked(|t| {
            let s = &t.slots[slot];
            let bound = s.pid.load(Ordering::Relaxed);
            if s.state.load(Ordering::Relaxed) != RESERVED
                || s.token.load(Ordering::Relaxed) != token
                || (bound != 0 && bound != pid)
            {
                return Err(Error::new(ErrorKind::NotFound, "drom: the reservation for this process is gone"));
            }
            s.pid.store(pid, Ordering::Relaxed);
            s.start.store(start, Ordering::Relaxed);
            s.token.store(0, Ordering::Relaxed);
            s.state.store(REGISTERED, Ordering::Release);
            Ok(())
        })?;
        Ok(Membership { reg, slot, pid })
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.reg
    }

    /// This process's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The mask the process applied last.
    pub fn current(&self) -> CpuSet {
        self.slot().current.get()
    }

    /// The pending new mask, if someone changed it since the last [`applied`]
    /// (DROM's PollDROM; `None` is its NOUPDT). Only reads: the process applies the mask to
    /// its threads, then calls [`applied`](Membership::applied).
    ///
    /// [`applied`]: Membership::applied
    pub fn poll(&self) -> Result<Option<CpuSet>> {
        if !self.slot().dirty() {
            return Ok(None);
        }
        self.reg.locked(|t| {
            let s = self.mine(t)?;
            Ok(s.dirty().then(|| s.future.get()))
        })
    }

    /// Says the process now runs on `mask`, the pending mask [`poll`](Membership::poll)
    /// returned; wakes setters waiting with [`Flags::SYNC_QUERY`].
    pub fn applied(&self, mask: &CpuSet) -> Result<()> {
        self.reg.locked(|t| {
            let s = self.mine(t)?;
            if !s.dirty() || s.future.get() != *mask {
                return Err(Error::new(
                    ErrorKind::BadState,
                    format!("drom: {mask} is not this process's pending mask"),
                ));
            }
            s.current.set(*mask);
            s.applied_seq.store(s.change_seq.load(Ordering::Relaxed), Ordering::Release);
            shm::futex_wake(&s.applied_seq);
            Ok(())
        })
    }

    /// Blocks until a change may be pending or `timeout` passed (returns at once when one
    /// is pending already). Spurious returns are possible: call [`poll`](Membership::poll).
    pub fn wait(&self, timeout: Duration) {
        let s = self.slot();
        let seq = s.change_seq.load(Ordering::Acquire);
        if seq == s.applied_seq.load(Ordering::Acquire) {
            shm::futex_wait(&s.change_seq, seq, timeout);
        }
    }

    /// Whether a change is pending, without the lock (a load from shared memory).
    pub fn is_dirty(&self) -> bool {
        self.slot().dirty()
    }

    /// Wakes threads blocked in [`wait`](Membership::wait).
    pub(crate) fn wake_waiters(&self) {
        shm::futex_wake(&self.slot().change_seq);
    }

    /// Ends the registration now (idempotent; dropping does it too): the CPUs become free.
    pub(crate) fn unregister(&self) {
        let _ = self.reg.locked(|t| {
            if let Ok(s) = self.mine(t) {
                s.clear();
            }
            Ok(())
        });
    }

    fn slot(&self) -> &Slot {
        &self.reg.seg.table().slots[self.slot]
    }

    fn mine<'t>(&self, t: &'t Table) -> Result<&'t Slot> {
        let s = &t.slots[self.slot];
        if s.state.load(Ordering::Relaxed) == REGISTERED && s.pid.load(Ordering::Relaxed) == self.pid {
            Ok(s)
        } else {
            Err(Error::new(ErrorKind::NotFound, format!("drom: pid {} is no longer registered", self.pid)))
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.unregister();
    }
}

/// CPUs reserved by [`Registry::pre_init`] for a child not started yet.
///
/// ```no_run
/// use async_doca::drom::{Flags, Registry};
///
/// let reg = Registry::open("default")?;
/// let res = reg.pre_init(&"1".parse()?, Flags::NONE)?;
/// let (var, value) = res.env();
/// let mut child = std::process::Command::new("my-service").env(var, value).spawn()
///     .map_err(|e| async_doca::Error::os(e, "spawn"))?;
/// res.bind(child.id() as i32)?;
/// let _ = child.wait();
/// reg.post_finalize(child.id() as i32, Flags::RETURN_STOLEN)?;
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Debug)]
pub struct Reservation {
    reg: Registry,
    slot: usize,
    token: u64,
    mask: CpuSet,
}

impl Reservation {
    /// The reserved CPUs.
    pub fn mask(&self) -> CpuSet {
        self.mask
    }

    /// The environment variable (name, value) that lets the child adopt the reservation.
    pub fn env(&self) -> (&'static str, String) {
        (ENV_RESERVATION, format!("{}:{}:{:x}", self.reg.key, self.slot, self.token))
    }

    /// For a launcher whose child may not take part itself (any program): the pending mask
    /// of the reservation while the child has not adopted it, so that the launcher applies
    /// it to the child ([`pin_process`](super::pin_process)) and says so
    /// ([`applied`](Reservation::applied)). `None` when nothing is pending or the child
    /// adopted the reservation (it follows its mask itself then).
    pub fn poll(&self) -> Result<Option<CpuSet>> {
        self.reg.locked(|t| {
            let s = &t.slots[self.slot];
            let ours = s.state.load(Ordering::Relaxed) == RESERVED && s.token.load(Ordering::Relaxed) == self.token;
            Ok((ours && s.dirty()).then(|| s.future.get()))
        })
    }

    /// Says the child now runs on `mask`, the pending mask [`poll`](Reservation::poll)
    /// returned.
    pub fn applied(&self, mask: &CpuSet) -> Result<()> {
        self.reg.locked(|t| {
            let s = &t.slots[self.slot];
            let ours = s.state.load(Ordering::Relaxed) == RESERVED && s.token.load(Ordering::Relaxed) == self.token;
            if !ours || !s.dirty() || s.future.get() != *mask {
                return Err(Error::new(
                    ErrorKind::BadState,
                    format!("drom: {mask} is not the reservation's pending mask"),
                ));
            }
            s.current.set(*mask);
            s.applied_seq.store(s.change_seq.load(Ordering::Relaxed), Ordering::Release);
            shm::futex_wake(&s.applied_seq);
            Ok(())
        })
    }

    /// Blocks until a change to the reservation may be pending, at most `timeout`.
    pub fn wait(&self, timeout: Duration) {
        let s = &self.reg.seg.table().slots[self.slot];
        let seq = s.change_seq.load(Ordering::Acquire);
        if seq == s.applied_seq.load(Ordering::Acquire) {
            shm::futex_wait(&s.change_seq, seq, timeout);
        }
    }

    /// Records the child's pid: from now on the reservation lives as long as the child (not
    /// the launcher), and [`Registry::set_mask`] and [`Registry::post_finalize`] find it by
    /// that pid. Harmless if the child adopted it already.
    pub fn bind(&self, pid: i32) -> Result<()> {
        let start = shm::proc_start(pid)
            .ok_or_else(|| Error::new(ErrorKind::NotFound, format!("drom: process {pid} is not running")))?;
        self.reg.locked(|t| {
            let s = &t.slots[self.slot];
            let state = s.state.load(Ordering::Relaxed);
            if state == RESERVED && s.token.load(Ordering::Relaxed) == self.token {
                s.pid.store(pid, Ordering::Relaxed);
                s.start.store(start, Ordering::Relaxed);
                Ok(())
            } else if state == REGISTERED && s.pid.load(Ordering::Relaxed) == pid {
                Ok(())
            } else {
                Err(Error::new(ErrorKind::NotFound, "drom: the reservation is gone"))
            }
        })
    }
}
