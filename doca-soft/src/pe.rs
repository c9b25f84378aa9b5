//! The progress engine (`doca_pe_*`): completion queue, progress, and the notification handle.
//!
//! The top of the core (task ← ctx ← pe, see "Layers of the core" in
//! `docs/soft-provider.md`): the PE drives its connected ctxs and delivers their tasks'
//! completions; the layers below reach it through [`PeLink`], implemented here.
//!
//! # Model
//!
//! A [`doca_pe`] owns
//! * a FIFO **completion queue** of tasks (intrusive, through the task headers): kinds
//!   complete tasks with [`crate::task::complete`], which appends here;
//! * the list of **connected ctxs** (pointers; the ctxs are owned by their kind objects and
//!   must be destroyed before the PE);
//! * its **notification handle**, a real file descriptor: an epoll instance aggregating
//!   - an internal *eventfd* that the PE writes itself when it is armed and has work,
//!   - its [`Doorbell`] (an abstract unix datagram socket other threads and processes ring,
//!     e.g. a sync event publisher in another process),
//!   - descriptors ctxs register with [`doca_pe::register_fd`] (e.g. later RDMA ring
//!     doorbells).
//!
//! # Notification protocol (DOCA's)
//! progress until 0 → `doca_pe_request_notification` (arm) → progress until 0 once more →
//! wait for the handle to be readable → `doca_pe_clear_notification` → progress until 0 → …
//!
//! * **Arm** drains the doorbell and drain-mode descriptors, then asks: is there work now
//!   (queued completions, a due ctx state transition, or a ctx whose `has_work` hook says
//!   so — e.g. a sync event wait already satisfied)? If so the eventfd is written and the
//!   handle is readable at once; otherwise it stays quiet until work arrives: a completion is
//!   queued or a transition becomes due while armed (eventfd), or a doorbell is rung.
//! * **Clear** drains everything that is readable (eventfd, doorbell, drain-mode
//!   descriptors) and disarms. The handle argument is unused (as in DOCA on Linux).
//!   Draining never loses work: doorbells carry no data, and progress re-reads the real state
//!   (shared counters, rings) after the clear.
//! * A doorbell rung while the PE is *not* armed still makes the handle readable (the kernel
//!   does that, not us); the next arm drains it first, so after arming the handle is
//!   readable exactly when there is work. Waking spuriously is allowed by DOCA anyway.
//! * `doca_pe_progress` does not drain the doorbell (that would cost a system call per call
//!   in busy-polling loops); the kernel bounds the queue, and ringers treat a full queue as
//!   "already rung".
//!
//! # Progress
//! One unit of work per call, returning 1, else 0:
//! 1. deliver the oldest queued completion (its callback runs here, on this thread);
//! 2. else report one due ctx state transition (STARTING→RUNNING, STOPPING→IDLE…); the ctxs
//!    tell the PE when one may have become due, so with none due this costs no walk;
//! 3. else run every connected ctx's progress hook (sync event: check pending waits; later
//!    RDMA: poll rings), then deliver a completion or transition they produced, or return 1
//!    if a hook reported other work.
//!
//! Callbacks may allocate, submit and free tasks of this PE and start/stop/destroy ctxs, but
//! a nested `doca_pe_progress` returns 0 without doing anything, and `doca_pe_destroy` from a
//! callback returns `DOCA_ERROR_IN_USE`.
//!
//! # Event mode
//! `doca_pe_set_event_mode` stores the mode; both modes behave the same here (every connected
//! ctx is progressed on every call, which is what PROGRESS_ALL means, and is also a correct
//! implementation of PROGRESS_SELECTIVE).
//!
//! # Threads
//! A PE, its ctxs and their tasks are used from one thread (DOCA's rule; nothing here is
//! locked). The only cross-thread/cross-process entry is ringing its doorbell, which goes
//! through the kernel.

use core::any::Any;
use core::cell::{Cell, RefCell};
use core::ptr::{self, NonNull};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::ctx::{self, ctx_ref, doca_ctx, PeLink};
use crate::doorbell::{drain_fd, Doorbell, DoorbellAddr};
use crate::eventfd;
use crate::ffi::{guard, guard_err, out};
use crate::task::{doca_task, CompletionQueue};
use crate::types::*;

/// `"PE!!"`: marks a live PE.
const PE_MAGIC: u32 = 0x5045_2121;

/// epoll tags: the internal eventfd, the doorbell, and registered fds (`FD_TAG_BASE + fd`).
const TAG_EVENTFD: u64 = 0;
const TAG_DOORBELL: u64 = 1;
const FD_TAG_BASE: u64 = 2;

/// How the PE treats a descriptor a ctx registers in its notification set.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum FdMode {
    /// A pure wake-up source (eventfd, doorbell socket): the PE reads it empty when arming and
    /// clearing. The ctx's `has_work` hook must reflect the real state behind it.
    Drain,
    /// A descriptor whose readiness is the work itself (data to consume): the PE never reads
    /// it; the ctx's progress hook consumes it, and it stays readable until then.
    Level,
    /// An eventfd used as a wake-up source: as [`FdMode::Drain`], but one read empties it
    /// (no second read to find it empty).
    Eventfd,
}

/// The readiness of the level-mode descriptors, as the last look found it (see
/// [`doca_pe::fd_ready`]).
struct Scan {
    /// The last walk that used this look (`doca_pe::walk`).
    walk: u64,
    /// When the look was taken; `None`: never (or known to be stale).
    at: Option<std::time::Instant>,
    /// The look's age as of `walk` (read once per walk; `Duration::MAX` without a look).
    age: std::time::Duration,
    /// The first `n` entries are the registered descriptors that were ready. `n` is
    /// `usize::MAX` when the look may have missed some (it returned as many sources as it
    /// could take, or failed): then every descriptor may be ready.
    ready: [RawFd; SCAN_EVENTS],
    n: usize,
}

/// The most events one look collects (see [`doca_pe::fd_ready`]).
const SCAN_EVENTS: usize = 32;

/// How long a look at the level-mode descriptors answers for later walks over the progress
/// hooks (see [`doca_pe::fd_ready`]).
pub const SCAN_FRESH: std::time::Duration = std::time::Duration::from_micros(20);

/// `struct doca_pe`.
pub struct doca_pe {
    magic: u32,
    epfd: OwnedFd,
    evfd: OwnedFd,
    doorbell: Doorbell,
    /// The eventfd has been written since the last drain.
    signalled: Cell<bool>,
    /// How many times the PE was armed (`doca_pe_request_notification`): a context that
    /// skips system calls while its PE polls learns from a change that the PE may have slept,
    /// and that a descriptor of its may be what woke it (`comch::sent`).
    armings: Cell<u64>,
    /// Completed tasks waiting for delivery (connected ctxs queue them here directly), and
    /// whether the PE is armed.
    cq: CompletionQueue,
    ctxs: RefCell<Vec<*const doca_ctx>>,
    /// False only when no connected ctx has an asynchronous transition due: set by every
    /// change that can make one due ([`PeLink::transition_may_be_due`]), cleared when a look
    /// for one finds none. While it is false, progress does not walk the ctxs for one.
    transitions: Cell<bool>,
    /// A ctx a failed task stops may be waiting to report it ([`PeLink::failure_may_be_due`]):
    /// progress reports that before any delivery. Cleared when a look finds none.
    failures: Cell<bool>,
    fds: RefCell<Vec<(RawFd, FdMode)>>,
    /// What [`doca_pe::fd_ready`] found during a walk over the progress hooks.
    scan: RefCell<Scan>,
    /// Counts the walks over the progress hooks (one per hook-running progress call): the
    /// scan of an earlier walk is stale. A counter, not a state set before and reset after
    /// each walk, so that a progress whose hooks never ask pays one increment.
    walk: Cell<u64>,
    in_progress: Cell<bool>,
    event_mode: Cell<doca_pe_event_mode>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn os_err() -> doca_error_t {
    crate::shm::errno_to_doca(errno())
}

fn epoll_add(epfd: RawFd, fd: RawFd, tag: u64) -> Result<(), doca_error_t> {
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: tag };
    // SAFETY: `ev` is a valid epoll_event for the duration of the call.
    if unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
        return Err(match errno() {
            libc::EEXIST => DOCA_ERROR_ALREADY_EXIST,
            libc::EBADF | libc::EPERM => DOCA_ERROR_INVALID_VALUE,
            e => crate::shm::errno_to_doca(e),
        });
    }
    Ok(())
}

impl doca_pe {
    fn new() -> Result<doca_pe, doca_error_t> {
        // SAFETY: epoll_create1 with a constant flag; no memory is passed.
        let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if ep < 0 {
            return Err(os_err());
        }
        // SAFETY: `ep` is a fresh descriptor owned by nobody else.
        let epfd = unsafe { OwnedFd::from_raw_fd(ep) };
        let evfd = eventfd::create()?;
        let doorbell = Doorbell::new()?;
        epoll_add(epfd.as_raw_fd(), evfd.as_raw_fd(), TAG_EVENTFD)?;
        epoll_add(epfd.as_raw_fd(), doorbell.fd(), TAG_DOORBELL)?;
        Ok(doca_pe {
            magic: PE_MAGIC,
            epfd,
            evfd,
            doorbell,
            signalled: Cell::new(false),
            armings: Cell::new(0),
            cq: CompletionQueue::new(),
            ctxs: RefCell::new(Vec::new()),
            transitions: Cell::new(false),
            failures: Cell::new(false),
            fds: RefCell::new(Vec::new()),
            scan: RefCell::new(Scan {
                walk: 0,
                at: None,
                age: std::time::Duration::MAX,
                ready: [-1; SCAN_EVENTS],
                n: 0,
            }),
            walk: Cell::new(0),
            in_progress: Cell::new(false),
            event_mode: Cell::new(DOCA_PE_EVENT_MODE_PROGRESS_ALL),
        })
    }

    /// The address of this PE's doorbell: store it where a remote publisher can find it, and
    /// a [`crate::doorbell::ring`] of it makes this PE's notification handle readable.
    pub fn doorbell_address(&self) -> DoorbellAddr {
        self.doorbell.address()
    }

    /// The notification handle (the epoll descriptor).
    pub fn notification_fd(&self) -> RawFd {
        self.epfd.as_raw_fd()
    }

    /// Adds `fd` to the notification set (see [`FdMode`]). The caller keeps ownership and must
    /// [`doca_pe::unregister_fd`] it before closing it.
    pub fn register_fd(&self, fd: RawFd, mode: FdMode) -> Result<(), doca_error_t> {
        if fd < 0 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        epoll_add(self.epfd.as_raw_fd(), fd, FD_TAG_BASE + fd as u64)?;
        self.fds.borrow_mut().push((fd, mode));
        Ok(())
    }

    /// Removes a descriptor added with [`doca_pe::register_fd`]. Unknown descriptors are
    /// ignored.
    pub fn unregister_fd(&self, fd: RawFd) {
        let mut fds = self.fds.borrow_mut();
        if let Some(i) = fds.iter().position(|&(f, _)| f == fd) {
            fds.swap_remove(i);
            // SAFETY: EPOLL_CTL_DEL ignores the event argument (NULL allowed since 2.6.9).
            unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, ptr::null_mut()) };
        }
    }

    /// Whether the level-mode descriptor `fd` may be readable now: its ctx's progress hook
    /// asks before reading it, so that a PE whose ctxs own several sockets (a UROM worker's
    /// data and control connections and its service's) pays at most one `epoll_wait` for all
    /// of them, instead of one `recvmsg` per socket (each ~1 µs on a VM; idle progress of a
    /// UROM host was nearly all of them). The look is the PE's own epoll set,
    /// level-triggered, so a descriptor with data, a hang-up or an error is in it until the
    /// hook consumes that.
    ///
    /// A look answers for the walk that took it and for later walks within [`SCAN_FRESH`]
    /// of it; the sweeps of arming and clearing the notification are looks too. So a
    /// descriptor that becomes readable while progress runs busy is seen within
    /// `SCAN_FRESH` (never lost: it stays readable), one that becomes readable while the PE
    /// sleeps wakes it and is seen by the clearing sweep, and the few walks of one wake-up
    /// (deliver, go idle, arm, drain once more) share the sweep's look instead of each
    /// taking its own (`epoll_wait` was 9 of an offloaded allreduce's 12 host system calls).
    /// A hook that finds a ready descriptor empty says so with [`doca_pe::fd_empty`].
    ///
    /// True outside a walk over the hooks, for a descriptor not registered in level mode,
    /// and when the look was full (it may have missed some).
    pub fn fd_ready(&self, fd: RawFd) -> bool {
        self.fd_ready_within(fd, SCAN_FRESH)
    }

    /// [`fd_ready`](doca_pe::fd_ready) for a descriptor whose traffic may be seen up to
    /// `fresh` late while the PE progresses busy: a look younger than `fresh` answers for it
    /// (a sleeping PE still wakes on it at once). For sockets whose packets are rare and need
    /// no microsecond latency (control connections, hang-ups), so that a PE that also carries
    /// fast traffic through memory does not pay an `epoll_wait` every [`SCAN_FRESH`] for them.
    pub fn fd_ready_within(&self, fd: RawFd, fresh: std::time::Duration) -> bool {
        // Hooks run only inside progress; its walk count names the current walk (0: none yet).
        if !self.in_progress.get() || self.walk.get() == 0 {
            return true;
        }
        if !self.fds.borrow().iter().any(|&(f, m)| f == fd && m == FdMode::Level) {
            return true;
        }
        let mut scan = self.scan.borrow_mut();
        let walk = self.walk.get();
        if scan.walk != walk {
            // One clock read per walk, whichever descriptors ask.
            scan.age = scan.at.map_or(std::time::Duration::MAX, |at| at.elapsed());
            scan.walk = walk;
        }
        if scan.age >= fresh {
            *scan = self.look();
        }
        scan.n == usize::MAX || scan.ready[..scan.n].contains(&fd)
    }

    /// Whether the last look at the notification set (a walk's, or the sweep of the last
    /// arm or clear) saw the level-mode descriptor `fd` ready, or may have missed it (a full
    /// look). For a hook that asks right after such a look: the ctx's `has_work` hook, which
    /// the PE calls just after its arming sweep.
    pub fn fd_in_last_look(&self, fd: RawFd) -> bool {
        let scan = self.scan.borrow();
        scan.at.is_none() || scan.n == usize::MAX || scan.ready[..scan.n].contains(&fd)
    }

    /// Tests: dates the last look `at`, so that a test decides whether later walks find it
    /// fresh instead of racing [`SCAN_FRESH`] (a loaded debug build may take longer than that
    /// between two walks).
    #[cfg(test)]
    pub(crate) fn date_last_look_for_test(&self, at: std::time::Instant) {
        if let Some(a) = &mut self.scan.borrow_mut().at {
            *a = at;
        }
    }

    /// A hook found `fd`, which [`doca_pe::fd_ready`] said may be readable, empty: later
    /// walks within the same look skip it.
    pub fn fd_empty(&self, fd: RawFd) {
        let mut scan = self.scan.borrow_mut();
        if scan.n == usize::MAX {
            return;
        }
        let n = scan.n;
        if let Some(i) = scan.ready[..n].iter().position(|&f| f == fd) {
            scan.ready.swap(i, n - 1);
            scan.n = n - 1;
        }
    }

    /// One look at the notification set: the level-mode descriptors that are ready.
    // Out of line: its event array (and the memset of it) made the frame of every
    // `fd_ready_within` that inlined it heavy, though few calls look.
    #[inline(never)]
    fn look(&self) -> Scan {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; SCAN_EVENTS];
        // SAFETY: `evs` is valid for SCAN_EVENTS entries; zero timeout never blocks.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), SCAN_EVENTS as i32, 0) };
        self.scan_of(n, &evs)
    }

    /// The scan an `epoll_wait` that returned `n` events in `evs` makes, taken now.
    fn scan_of(&self, n: i32, evs: &[libc::epoll_event]) -> Scan {
        let mut ready = [-1; SCAN_EVENTS];
        let mut k = 0;
        if n < 0 || n as usize >= SCAN_EVENTS {
            // An error (no EINTR without a timeout), or maybe more than one look holds.
            k = usize::MAX;
        } else {
            for e in evs[..n as usize].iter().filter(|e| e.u64 >= FD_TAG_BASE) {
                ready[k] = (e.u64 - FD_TAG_BASE) as RawFd;
                k += 1;
            }
        }
        Scan { walk: self.walk.get(), at: Some(std::time::Instant::now()), age: std::time::Duration::ZERO, ready, n: k }
    }

    /// Tells the PE that work became available (a completion, a due transition, a kind's
    /// internal event on this thread): if armed, the notification handle becomes readable.
    pub fn notify_work(&self) {
        if self.cq.armed() && !self.signalled.get() {
            eventfd::signal(self.evfd.as_raw_fd());
            self.signalled.set(true);
        }
    }

    /// A ctx's transition may have become due (see [`PeLink::transition_may_be_due`]).
    fn transition_may_be_due(&self) {
        self.transitions.set(true);
        self.notify_work();
    }

    /// A ctx's stop after a failed task may be due (see [`PeLink::failure_may_be_due`]).
    fn failure_may_be_due(&self) {
        self.failures.set(true);
        self.transition_may_be_due();
    }

    fn pop(&self) -> Option<*const doca_task> {
        self.cq.pop()
    }

    /// Tasks submitted to the connected ctxs and not yet delivered. Summed when asked rather
    /// than counted on every submit and delivery: a ctx's tasks can be in flight only while
    /// it is connected (it disconnects at destroy, IDLE with no task allocated).
    fn inflight(&self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while let Some(c) = self.ctx_at(i) {
            // SAFETY: connected ctxs are live (they disconnect in teardown before being freed).
            n += unsafe { &*c }.inflight_tasks();
            i += 1;
        }
        n
    }

    pub(crate) fn disconnect(&self, ctx: &doca_ctx) {
        let mut ctxs = self.ctxs.borrow_mut();
        if let Some(i) = ctxs.iter().position(|&c| ptr::eq(c, ctx)) {
            // Keep the order (fairness of hook order is by connection order).
            ctxs.remove(i);
        }
    }

    fn ctx_at(&self, i: usize) -> Option<*const doca_ctx> {
        self.ctxs.borrow().get(i).copied()
    }

    /// Whether the PE is armed (between `doca_pe_request_notification` and
    /// `doca_pe_clear_notification`): only then does anyone need to ring its doorbell.
    pub(crate) fn is_armed(&self) -> bool {
        self.cq.armed()
    }

    /// How many times the PE was armed so far (see `armings`).
    pub(crate) fn armings(&self) -> u64 {
        self.armings.get()
    }

    /// Work that progress would do now.
    fn has_work(&self) -> bool {
        if !self.cq.is_empty() {
            return true;
        }
        let mut i = 0;
        while let Some(c) = self.ctx_at(i) {
            // SAFETY: connected ctxs are live (they disconnect in teardown before being freed).
            if unsafe { &*c }.has_work() {
                return true;
            }
            i += 1;
        }
        false
    }

    /// Drains every readable wake-up source (eventfd, doorbell, drain-mode fds).
    /// Its first look is also the level-mode descriptors' scan (see [`doca_pe::fd_ready`]).
    fn sweep(&self) {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; SCAN_EVENTS];
        let mut first = true;
        loop {
            // SAFETY: `evs` is valid for SCAN_EVENTS entries; zero timeout never blocks.
            let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), evs.len() as i32, 0) };
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if first {
                // Drained sources are not level-mode ones: the scan stays true after this pass.
                *self.scan.borrow_mut() = self.scan_of(n, &evs);
                first = false;
            }
            if n <= 0 {
                break;
            }
            let mut drained_any = false;
            for ev in &evs[..n as usize] {
                let tag = ev.u64;
                match tag {
                    TAG_EVENTFD => {
                        eventfd::drain(self.evfd.as_raw_fd());
                        drained_any = true;
                    }
                    TAG_DOORBELL => {
                        self.doorbell.drain();
                        drained_any = true;
                    }
                    _ => {
                        let fd = (tag - FD_TAG_BASE) as RawFd;
                        let mode = self.fds.borrow().iter().find(|&&(f, _)| f == fd).map(|&(_, m)| m);
                        match mode {
                            Some(FdMode::Drain) => {
                                drain_fd(fd);
                            }
                            Some(FdMode::Eventfd) => eventfd::drain(fd),
                            Some(FdMode::Level) | None => continue,
                        }
                        drained_any = true;
                    }
                }
            }
            // Level-mode fds stay readable; stop once a pass drained nothing new.
            if !drained_any || (n as usize) < evs.len() {
                break;
            }
        }
        self.signalled.set(false);
    }

    /// What [`progress`](doca_pe::progress) does when a completion is queued (and no
    /// progress is running): deliver the oldest one. `None` otherwise, for `progress`.
    ///
    /// The call that delivers an operation's completion is the busy case; on its own, it
    /// saves only the registers it uses instead of those of the progress hooks' walk.
    #[inline(always)]
    fn progress_delivering(&self) -> Option<u8> {
        // The queue first: an idle progress (nothing queued) pays one look before `progress`.
        // So does a ctx that a failed task stops: it reports that before any delivery
        // (`report_one_failure`).
        if self.cq.is_empty() || self.in_progress.get() || self.failures.get() {
            return None;
        }
        self.in_progress.set(true);
        let _reset = ProgressReset(&self.in_progress);
        self.deliver_one();
        Some(1)
    }

    #[inline(never)]
    fn progress(&self) -> u8 {
        if self.in_progress.get() {
            // A callback called progress: not allowed by DOCA; do nothing.
            return 0;
        }
        struct Reset<'a>(&'a Cell<bool>);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.set(false);
            }
        }
        self.in_progress.set(true);
        let _reset = Reset(&self.in_progress);

        // A ctx that a failed task stops says so before any completion is delivered, the
        // failed task's included: a program that learns of the failure from its callback
        // finds the ctx STOPPING, as on hardware (see `ctx::mark_failed`).
        if self.failures.get() && self.report_one_failure() {
            return 1;
        }
        if self.deliver_one() || self.report_one_transition() {
            return 1;
        }
        let mut did = false;
        // Hooks that ask `fd_ready` share one look at the epoll set per walk.
        self.walk.set(self.walk.get().wrapping_add(1).max(1));
        // One borrow of the list for the whole loop: hooks run no user code, so no ctx is
        // connected or torn down while they run (a hook that did would panic here, at the
        // C boundary's guard, rather than find the list changed under it).
        for &c in self.ctxs.borrow().iter() {
            // SAFETY: connected ctxs are live; hooks do not call user code.
            did |= unsafe { &*c }.run_progress_hook();
        }
        if self.deliver_one() || self.report_one_transition() {
            return 1;
        }
        u8::from(did)
    }

    fn deliver_one(&self) -> bool {
        match self.pop() {
            Some(t) => {
                // SAFETY: just popped from our completion queue; the task is live.
                unsafe { crate::task::deliver(t) };
                true
            }
            None => false,
        }
    }

    /// Reports the stop of the first ctx that a failed task stops ([`crate::ctx::mark_failed`]),
    /// if any. Looked for only while `failures` is set; a look that finds none clears it.
    #[cold]
    fn report_one_failure(&self) -> bool {
        self.report_first(doca_ctx::failing, &self.failures)
    }

    /// Reports the first due transition of the connected ctxs, if any. The walk is skipped
    /// while `transitions` says none can be due, and a walk that finds none clears it (the
    /// walk runs no user code, so nothing can become due during it). After a report it stays
    /// set: another ctx may have one due too, and the callback may have made one due.
    fn report_one_transition(&self) -> bool {
        if !self.transitions.get() {
            debug_assert!(
                // SAFETY: connected ctxs are live.
                !self.ctxs.borrow().iter().any(|&c| unsafe { &*c }.transition_due()),
                "a ctx has a transition due that the PE was not told about"
            );
            return false;
        }
        self.report_first(doca_ctx::transition_due, &self.transitions)
    }

    /// Reports the due transition of the first connected ctx for which `due` holds; clears
    /// `flag` (the hint that one may be due) when none does.
    fn report_first(&self, due: fn(&doca_ctx) -> bool, flag: &Cell<bool>) -> bool {
        let mut i = 0;
        while let Some(c) = self.ctx_at(i) {
            // SAFETY: connected ctxs are live.
            if due(unsafe { &*c }) {
                // SAFETY: live ctx connected to this PE.
                return unsafe { ctx::report_due_transition(c) };
            }
            i += 1;
        }
        flag.set(false);
        false
    }
}

/// Clears `in_progress` when a delivery ends, even by a panic (caught at the C boundary).
struct ProgressReset<'a>(&'a Cell<bool>);

impl Drop for ProgressReset<'_> {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Validates a PE pointer from C.
///
/// # Safety
/// A non-NULL `pe` must point to a PE created by `doca_pe_create` and not destroyed.
pub(crate) unsafe fn pe_ref<'a>(pe: *const doca_pe) -> Result<&'a doca_pe, doca_error_t> {
    // SAFETY: per the contract.
    let p = unsafe { crate::ffi::obj(pe) }?;
    if p.magic != PE_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(p)
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_pe_create(pe: *mut *mut doca_pe) -> doca_error_t {
    guard_err(|| {
        if pe.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let p = Box::into_raw(Box::new(doca_pe::new()?));
        // SAFETY: `pe` is non-NULL and writable (caller contract).
        unsafe { out(pe, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_destroy(pe: *mut doca_pe) -> doca_error_t {
    guard_err(|| {
        // SAFETY: non-NULL PE pointers come from doca_pe_create (DOCA contract).
        let p = unsafe { pe_ref(pe) }?;
        if p.in_progress.get() || !p.ctxs.borrow().is_empty() {
            return Err(DOCA_ERROR_IN_USE);
        }
        // SAFETY: `pe` came from Box::into_raw in doca_pe_create; no ctx references it any
        // more and we are not inside its progress, so this is the last use.
        drop(unsafe { Box::from_raw(pe) });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_progress(pe: *mut doca_pe) -> u8 {
    guard(0, || {
        // SAFETY: as in doca_pe_destroy.
        match unsafe { pe_ref(pe) } {
            Ok(p) => p.progress_delivering().unwrap_or_else(|| p.progress()),
            Err(_) => 0,
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_get_notification_handle(
    pe: *const doca_pe,
    handle: *mut doca_notification_handle_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_pe_destroy.
        let p = unsafe { pe_ref(pe) }?;
        // SAFETY: non-NULL out-pointers are writable (caller contract); NULL is rejected.
        unsafe { out(handle, p.epfd.as_raw_fd()) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_request_notification(pe: *mut doca_pe) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_pe_destroy.
        let p = unsafe { pe_ref(pe) }?;
        p.sweep();
        p.cq.set_armed(true);
        p.armings.set(p.armings.get() + 1);
        if p.has_work() {
            p.notify_work();
        }
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_clear_notification(
    pe: *mut doca_pe,
    _handle: doca_notification_handle_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_pe_destroy.
        let p = unsafe { pe_ref(pe) }?;
        p.sweep();
        p.cq.set_armed(false);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_get_num_inflight_tasks(
    pe: *const doca_pe,
    num_inflight_tasks: *mut usize,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_pe_destroy.
        let p = unsafe { pe_ref(pe) }?;
        // SAFETY: as in doca_pe_get_notification_handle.
        unsafe { out(num_inflight_tasks, p.inflight()) }
    })
}

/// The ctx layer reaches its PE through [`PeLink`] (the PE is the layer above it).
impl PeLink for doca_pe {
    fn completions(&self) -> &CompletionQueue {
        &self.cq
    }
    fn notify_work(&self) {
        doca_pe::notify_work(self)
    }
    fn transition_may_be_due(&self) {
        doca_pe::transition_may_be_due(self)
    }
    fn failure_may_be_due(&self) {
        doca_pe::failure_may_be_due(self)
    }
    fn disconnect(&self, ctx: &doca_ctx) {
        doca_pe::disconnect(self, ctx)
    }
}

impl doca_ctx {
    /// The PE this ctx is connected to, if any. The PE outlives its connected ctxs
    /// (`doca_pe_destroy` refuses while any is connected).
    ///
    /// Defined here rather than in `ctx.rs` because the ctx layer knows its PE only as a
    /// [`PeLink`]; the only PE there is, `doca_pe`, is this module's.
    ///
    /// The link is read as a `doca_pe` without asking its type (an `Any` downcast, a virtual
    /// call and a 128-bit compare, was a tenth of an idle RDMA progress, which asks whether
    /// the PE is armed): it only ever is one.
    #[inline]
    pub fn pe(&self) -> Option<&doca_pe> {
        let link = self.pe_link()?;
        debug_assert!((link as &dyn Any).is::<doca_pe>());
        // SAFETY: a ctx's link is set only by `set_pe`, whose contract is that it points to a
        // doca_pe (its one caller, doca_pe_connect_ctx, passes one); the data pointer of the
        // `dyn PeLink` is that PE's address, alive while the ctx is connected (see above).
        Some(unsafe { &*(link as *const dyn PeLink).cast::<doca_pe>() })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_connect_ctx(pe: *mut doca_pe, ctx: *mut doca_ctx) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_pe_destroy.
        let p = unsafe { pe_ref(pe) }?;
        // SAFETY: non-NULL ctx pointers come from `*_as_ctx` of live objects (DOCA contract).
        let c = unsafe { ctx_ref(ctx) }?;
        if c.state() != DOCA_CTX_STATE_IDLE {
            return Err(DOCA_ERROR_BAD_STATE);
        }
        if c.pe().is_some() {
            // Connected already (to this PE or another): a ctx has exactly one PE for life.
            // NOT_PERMITTED is DOCA's documented answer ("already attached to a PE").
            return Err(DOCA_ERROR_NOT_PERMITTED);
        }
        c.can_connect()?;
        // SAFETY: the link points to a doca_pe, as set_pe requires.
        unsafe { c.set_pe(NonNull::from(p)) };
        p.ctxs.borrow_mut().push(ctx);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_pe_set_event_mode(pe: *mut doca_pe, event_mode: doca_pe_event_mode) -> doca_error_t {
    guard_err(|| {
        // SAFETY: as in doca_pe_destroy.
        let p = unsafe { pe_ref(pe) }?;
        if event_mode != DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE && event_mode != DOCA_PE_EVENT_MODE_PROGRESS_ALL {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        p.event_mode.set(event_mode);
        Ok(())
    })
}

impl doca_pe {
    /// The stored event mode (behaviour does not depend on it; see the module docs).
    pub fn event_mode(&self) -> doca_pe_event_mode {
        self.event_mode.get()
    }
}

#[cfg(test)]
mod tests;
