//! The worker process: what a forked child of the daemon runs (docs/urom-soft.md, "The worker").
//!
//! Model. The process is single-threaded and owns everything here for its whole life: one
//! [`Slot`] (a `urom_worker_ctx` plus the plugin's id) per plugin it was spawned with, its
//! control socket to the daemon, and its data connections to hosts (the first one made before
//! the fork, later ones passed in `Attach`). Slots are leaked on purpose: plugins keep the ctx
//! pointer for their life, and the process ends with `_exit` after calling every `close`.
//!
//! Commands become C-`malloc`ed `urom_worker_cmd_desc`s on a one-entry list given to the
//! plugin's `worker_cmd`, which takes and `free`s the entry. Notifications come back from
//! `progress` as `malloc`ed descs the worker packs with `notif_pack` (header + body, as DOCA's
//! plugins pack them), sends the body and the header's status on the connection named by
//! `dest_id`, and `free`s. The domain table (installed by `DomainCreate`) lives in a
//! thread local so the `extern "C"` lookup callbacks, called by plugins from inside
//! `worker_cmd`/`progress`, can read it; it is only changed between plugin calls.
//!
//! A host may pass a shared-memory channel as a connection's first message
//! (`HostToWorker::Channel`, see `urom::channel`): the connection's messages then travel
//! through it when they fit, the loop looks at its rings on every round without a system
//! call, and before it blocks it tells the host to wake it through the channel's eventfd.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::ptr::{self, addr_of_mut};
use std::time::Instant;

use core::ffi::{c_int, c_void};

use super::log::{log_at, Log};
use super::plugins::{err_name, Plugin};
use crate::ffi::{guard, guard_err};
use crate::types::*;
use crate::urom::channel::{self, Channel};
use crate::urom::proto::{
    self, max_packet, DaemonToWorker, Domain, HostToWorker, PluginAddr, WorkerToDaemon, WorkerToHost, PLUGIN_NONE,
};

/// What the daemon hands the child at fork.
pub(crate) struct WorkerSetup<'a> {
    pub id: u64,
    /// The plugins of the worker's plugin mask, in id order.
    pub plugins: Vec<&'a Plugin>,
    pub ctl: OwnedFd,
    /// The first data connection (connection id 1), taken when the loop starts.
    pub data: Option<OwnedFd>,
    /// The notification buffer size (the spawning host's effective max_msg_size).
    pub max_msg_size: usize,
    /// The largest packet accepted from a host (the daemon's max_msg_size + overhead).
    pub recv_packet: usize,
    pub max_inflight: u32,
    pub log: Log,
}

/// One plugin in this worker. `#[repr(C)]` with the ctx first, so the `*mut urom_worker_ctx`
/// a plugin passes back is also the slot's address.
#[repr(C)]
struct Slot {
    ctx: urom_worker_ctx,
    plugin: u64,
    /// Commands given to the plugin that no notification answered yet.
    outstanding: u64,
    /// The plugin's soft-only `urom_plugin_soft_arm`, if it exports one.
    arm: Option<urom_plugin_soft_arm_fn>,
}

/// A domain installed by `DomainCreate` on connection `conn` with key `key`.
struct Installed {
    conn: u64,
    key: u64,
    domain: Domain,
}

thread_local! {
    /// The addresses of this worker's slots and their plugin ids: lookups check a ctx pointer
    /// against it before trusting it.
    static SLOTS: RefCell<Vec<(usize, u64)>> = const { RefCell::new(Vec::new()) };
    /// The domain table. Byte vectors inside never move while installed, so pointers handed
    /// to plugins stay valid until the domain is destroyed or its connection closes.
    static DOMAINS: RefCell<Vec<Installed>> = const { RefCell::new(Vec::new()) };
}

/// What arming the plugins with outstanding commands gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Armed {
    /// Every one is armed: sleep on their fds.
    Sleep,
    /// One has work now: progress without sleeping.
    Work,
    /// One cannot be armed: poll it (spin, then back off).
    Unsupported,
}

struct Conn {
    id: u64,
    fd: OwnedFd,
    outstanding: u32,
    /// The contexts of the commands a plugin took and has not answered yet. A notification
    /// for any other context is dropped: its command was answered already (a plugin that
    /// queues a notification *and* returns an error from `worker_cmd`, as NVIDIA's sandbox and
    /// RDMO plugins do on some errors, is answered once, by the worker, with the error), and
    /// a second answer could complete an unrelated host task that reuses the context.
    pending: std::collections::HashSet<u64>,
    outbox: VecDeque<Vec<u8>>,
    dead: bool,
    /// The host's shared-memory channel, once its `Channel` message arrived.
    chan: Option<Channel>,
}

/// While commands are outstanding on a plugin that cannot be armed (no `urom_plugin_soft_arm`,
/// see `doca_urom_plugin.h`), keep polling without blocking for this long after the last time a
/// plugin made progress, then back off to 1 ms poll timeouts. Such a plugin has no fd the
/// worker could wait on, so a quiet period is the only sign that an answer is not imminent:
/// time-based rather than counted, so a tight exchange (a ping-pong between workers, answers
/// every few microseconds) never meets the back-off, while a command that waits for a long
/// time (a receive nobody sends to) costs at most one wake-up per millisecond.
const SPIN_TIME: std::time::Duration = std::time::Duration::from_micros(500);
/// When every plugin with outstanding commands can be armed, the worker polls only this long
/// after the last progress before it arms them and sleeps on their fds: long enough to catch
/// an answer that is already on its way, short enough that a worker waiting for another
/// process gives its CPU to that process (on a machine with fewer CPUs than busy processes, a
/// spinning worker delays the very answer it waits for). Polling as long as [`SPIN_TIME`]
/// was tried: it steadied the offloaded 8 B allreduce a little (2 members on 2 CPUs, p99
/// 33 µs against 65–87) but workers polling beside a member's host cut `coll_overlap` at
/// 64 KiB from 91–97% to 41–80%.
const ARMED_SPIN_TIME: std::time::Duration = std::time::Duration::from_micros(20);
/// With nothing outstanding, how long the loop polls memory (its channels) without a system
/// call before a round that finds nothing gives the CPU up with `sched_yield`. A yield is
/// ~0.5 µs on the VMs we measure on, longer than a round that polls only memory, so yielding
/// from the first empty round made the yield the unit of time in which a host's next command
/// is seen (back-to-back commands from a host on another CPU: 0.65 → 0.82 µs a round trip once
/// the rounds no longer `poll`ed their sockets; 0.50 µs with this). Not after an answer to a
/// host whose last command came from this worker's CPU (`Channel::peer_cpu`): that host,
/// spinning with `sched_yield` or just woken, needs this CPU to take the answer, so the worker
/// yields at once until a host's message shows it has run (an offloaded 8 B allreduce of two
/// members on two CPUs, each host beside its worker: p50 12.1 → 8.1 µs; the rule was first
/// "after an answer woke a sleeping host", which a spinning host never is). A host elsewhere
/// keeps the short poll: yielding at once after every answer made back-to-back commands from
/// another CPU 0.47–0.64 → 0.81–0.86 µs a round trip. Not while commands are outstanding either:
/// the answer then depends on another process (a peer worker), which may be waiting for this
/// CPU (four members on two CPUs: 39 → 44 µs with the spin first).
const YIELD_AFTER: std::time::Duration = std::time::Duration::from_micros(2);
/// The longest sleep on armed plugins' fds: a plugin whose fd misses a wake-up (a bug) costs
/// this much time per miss, never a hang.
const ARMED_SLEEP_MS: c_int = 100;
/// After the last answer with nothing outstanding, keep polling without blocking (yielding
/// the CPU between polls) for this long before blocking in `poll`.
const IDLE_SPIN_TIME: std::time::Duration = std::time::Duration::from_micros(50);
/// Bytes of the pack buffer beyond a notification's header and announced body (a plugin's
/// own framing).
const PACK_SLACK: usize = 256;
/// The largest pack buffer the worker grows to (a notification larger than this is packed
/// into the buffer it has, by a plugin that honours the length, or answered TOO_BIG).
const MAX_PACK_BUF: usize = 64 << 20;
/// With nothing outstanding, a plugin that cannot be armed (any of NVIDIA's, which do not
/// know the soft-only extension) is still progressed this often: plugins may have work of
/// their own between commands (NVIDIA's RDMO plugin serves UCX messages a host sends it
/// directly), and NVIDIA's worker keeps progressing them.
const IDLE_POLL_MS: c_int = 1;
/// How often a worker that polls without blocking looks at every socket anyway: for what no
/// channel announces (a host's hang-up, the daemon's `Attach` and `Exit`). A round that is
/// about to block always looks at every socket.
const SOCKET_LOOK_INTERVAL: std::time::Duration = std::time::Duration::from_micros(100);
/// Messages read from one connection per round, so one busy host cannot starve the others.
const READ_BATCH: usize = 16;
/// Initial room for a plugin's address; grown when the plugin asks for more.
const ADDR_START: usize = 256;

static LOOKUPS: urom_domain_lookups_iface = urom_domain_lookups_iface {
    addr_lookup: Some(addr_lookup),
    seg_lookup: Some(seg_lookup),
    memh_lookup: Some(memh_lookup),
    mkey_lookup: Some(mkey_lookup),
};

/// The plugin id of a ctx pointer, if it is one of this worker's.
fn slot_plugin(ctx: *mut urom_worker_ctx) -> Result<u64, doca_error_t> {
    SLOTS.with(|s| s.borrow().iter().find(|(a, _)| *a == ctx as usize).map(|(_, p)| *p)).ok_or(DOCA_ERROR_INVALID_VALUE)
}

/// Runs `f` on the member `worker_id` of the most recently installed domain holding it.
fn with_member<T>(
    worker_id: u64,
    f: impl FnOnce(&proto::Member) -> Result<T, doca_error_t>,
) -> Result<T, doca_error_t> {
    DOMAINS.with(|d| {
        let d = d.borrow();
        let m = d
            .iter()
            .rev()
            .flat_map(|i| i.domain.members.iter())
            .find(|m| m.worker_id == worker_id)
            .ok_or(DOCA_ERROR_NOT_FOUND)?;
        f(m)
    })
}

fn seg_of(m: &proto::Member, seg: c_int) -> Result<&proto::Seg, doca_error_t> {
    usize::try_from(seg).ok().and_then(|i| m.segs.get(i)).ok_or(DOCA_ERROR_NOT_FOUND)
}

unsafe extern "C" fn addr_lookup(ctx: *mut urom_worker_ctx, domain_id: u64, addr: *mut *mut c_void) -> doca_error_t {
    guard_err(|| {
        let plugin = slot_plugin(ctx)?;
        let p = with_member(domain_id, |m| {
            let a = m.addrs.iter().find(|a| a.plugin == plugin).ok_or(DOCA_ERROR_NOT_FOUND)?;
            Ok(a.addr.as_ptr() as *mut c_void)
        })?;
        // SAFETY: a non-NULL out-pointer is the plugin's contract for this callback.
        unsafe { crate::ffi::out(addr, p) }
    })
}

unsafe extern "C" fn seg_lookup(ctx: *mut urom_worker_ctx, domain_id: u64, va: u64, seg: *mut c_int) -> doca_error_t {
    guard_err(|| {
        slot_plugin(ctx)?;
        let i = with_member(domain_id, |m| {
            m.segs.iter().position(|s| va >= s.va && va - s.va < s.len).ok_or(DOCA_ERROR_NOT_FOUND)
        })?;
        let i = c_int::try_from(i).map_err(|_| DOCA_ERROR_NOT_FOUND)?;
        // SAFETY: as in addr_lookup.
        unsafe { crate::ffi::out(seg, i) }
    })
}

/// memh_lookup and mkey_lookup: one of the segment's byte strings.
fn seg_bytes(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    seg: c_int,
    len: *mut usize,
    out: *mut *mut c_void,
    which: fn(&proto::Seg) -> &Vec<u8>,
) -> Result<(), doca_error_t> {
    slot_plugin(ctx)?;
    if len.is_null() || out.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let (p, n) = with_member(domain_id, |m| {
        let b = which(seg_of(m, seg)?);
        Ok((b.as_ptr() as *mut c_void, b.len()))
    })?;
    // SAFETY: both out-pointers were checked non-NULL; their validity is the plugin's contract.
    unsafe {
        len.write(n);
        out.write(p);
    }
    Ok(())
}

unsafe extern "C" fn memh_lookup(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    seg: c_int,
    len: *mut usize,
    memh: *mut *mut c_void,
) -> doca_error_t {
    guard_err(|| seg_bytes(ctx, domain_id, seg, len, memh, |s| &s.memh))
}

unsafe extern "C" fn mkey_lookup(
    ctx: *mut urom_worker_ctx,
    domain_id: u64,
    seg: c_int,
    len: *mut usize,
    rkey: *mut *mut c_void,
) -> doca_error_t {
    guard_err(|| seg_bytes(ctx, domain_id, seg, len, rkey, |s| &s.mkey))
}

/// An empty intrusive list head, pointing to itself. Boxed so its address is stable.
fn new_list() -> Box<ucs_list_link> {
    let mut head = Box::new(ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() });
    let p: *mut ucs_list_link = &mut *head;
    head.prev = p;
    head.next = p;
    head
}

/// Unlinks and returns every entry left on the list (C-`malloc`ed descs the caller frees).
///
/// # Safety
/// `head` is a well-formed circular list whose entries are live.
unsafe fn drain_list(head: *mut ucs_list_link) -> Vec<*mut ucs_list_link> {
    let mut out = Vec::new();
    // SAFETY: the caller guarantees a well-formed list; we stop when we are back at the head
    // and bound the walk so a corrupted list cannot loop forever.
    unsafe {
        let mut e = (*head).next;
        while e != head && !e.is_null() && out.len() < 1 << 20 {
            out.push(e);
            e = (*e).next;
        }
        (*head).next = head;
        (*head).prev = head;
    }
    out
}

/// Whether any connection's channel sent a message since last asked to a host whose last
/// command came from the CPU this thread runs on (a hint: see `Channel::peer_cpu`). Every
/// channel's flag is taken, with no short cut: one left set would later pass for an answer
/// that round did not send.
fn answered_a_host_here(conns: &mut [Conn]) -> bool {
    let mut here = false;
    let mut mine = None;
    for ch in conns.iter_mut().filter_map(|c| c.chan.as_mut()) {
        if ch.take_sent() && !here {
            let cpu = *mine.get_or_insert_with(channel::current_cpu);
            here = cpu.is_some() && ch.peer_cpu() == cpu;
        }
    }
    here
}

/// Tells the C allocator to keep the memory the worker frees, so that the next operation
/// reuses it instead of faulting fresh pages in.
///
/// A plugin's operation allocates and frees buffers of its messages' size (`worker_coll`: up
/// to a 64 KiB chunk, several per collective). glibc gives the top of its heap back to the
/// kernel whenever more than `M_TRIM_THRESHOLD` (128 KiB) is free there, and the next
/// allocation grows it again: during offloaded 64 KiB allreduces the worker made 13–17 K `brk`
/// calls and 34–44 K page faults a second (about 1.5–3 and 4–7 per allreduce at those runs'
/// rates), and an allreduce took 154–205 µs where a build that happened not to churn took
/// 104–117. Setting the thresholds by hand
/// also turns off glibc's own adjustment of them, so both are set: blocks below 32 MiB (glibc's
/// largest automatic mmap threshold) come from the heap, and the heap is trimmed only when
/// 64 MiB lie free at its top. The worker's memory stays at its high-water mark, as a DPU
/// worker's pools do.
fn keep_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; the worker calls it once, first thing
    // in its process, with no allocation in flight on another thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 64 << 20);
    }
}

struct Worker<'a> {
    setup: WorkerSetup<'a>,
    slots: Vec<*mut Slot>,
    conns: Vec<Conn>,
    next_conn: u64,
    pack_buf: Vec<u8>,
    recv_buf: Vec<u8>,
    /// The list head handed to `worker_cmd` and `progress`, empty between calls (allocated
    /// once: `progress` runs on every turn of a busy loop).
    list: Box<ucs_list_link>,
    exit: bool,
}

/// Runs the worker; returns the process exit code. Never unwinds (a panic becomes code 70).
pub(crate) fn run(setup: WorkerSetup<'_>) -> i32 {
    let log = setup.log;
    keep_heap();
    guard(70, move || {
        let mut w = Worker {
            pack_buf: vec![0; setup.max_msg_size],
            recv_buf: vec![0; setup.recv_packet],
            list: new_list(),
            setup,
            slots: Vec::new(),
            conns: Vec::new(),
            next_conn: 2,
            exit: false,
        };
        match w.open() {
            Ok(addrs) => {
                let ready = WorkerToDaemon::Ready { addrs }.encode();
                if let Err(e) = proto::send_msg(w.setup.ctl.as_fd(), &ready, None) {
                    log_at!(log, Error, "cannot report ready to the daemon: {e}");
                    w.close();
                    return 1;
                }
            }
            Err((status, reason)) => {
                log_at!(log, Warn, "start failed: {reason}");
                let m = WorkerToDaemon::Failed { status, reason }.encode();
                let _ = proto::send_msg(w.setup.ctl.as_fd(), &m, None);
                w.close();
                return 1;
            }
        }
        log_at!(log, Debug, "worker {:#x} ready with {} plugins", w.setup.id, w.slots.len());
        if let Some(first) = w.setup.data.take() {
            w.add_conn(1, first);
        }
        w.serve();
        w.close();
        0
    })
}

impl Worker<'_> {
    fn log(&self) -> Log {
        self.setup.log
    }

    /// Opens every plugin and collects their addresses; on failure closes the ones opened.
    fn open(&mut self) -> Result<Vec<PluginAddr>, (doca_error_t, String)> {
        let mut addrs = Vec::new();
        let limit = max_packet(self.setup.max_msg_size);
        for p in self.setup.plugins.clone() {
            let slot = Box::into_raw(Box::new(Slot {
                ctx: urom_worker_ctx { iface: p.iface, domain_iface: LOOKUPS, plugin_ctx: ptr::null_mut() },
                plugin: p.id,
                outstanding: 0,
                arm: p.arm,
            }));
            // SAFETY: `slot` was just allocated; ctx is its first field.
            let ctx = unsafe { addr_of_mut!((*slot).ctx) };
            SLOTS.with(|s| s.borrow_mut().push((ctx as usize, p.id)));
            let open = p.iface.open.expect("checked non-NULL at load");
            // SAFETY: `ctx` is a fully initialized urom_worker_ctx that lives for the process.
            let st = unsafe { open(ctx) };
            if st != DOCA_SUCCESS {
                SLOTS.with(|s| s.borrow_mut().pop());
                return Err((st, format!("plugin {} open failed: {}", p.name, err_name(st))));
            }
            self.slots.push(slot);
            let addr_fn = p.iface.addr.expect("checked non-NULL at load");
            let mut buf = vec![0u8; ADDR_START];
            let addr = loop {
                let mut len = buf.len();
                // SAFETY: `buf` has `len` writable bytes; `ctx` is the opened plugin's ctx.
                let st = unsafe { addr_fn(ctx, buf.as_mut_ptr().cast(), &mut len) };
                if st == DOCA_SUCCESS && len <= buf.len() {
                    buf.truncate(len);
                    break buf;
                }
                if st == DOCA_ERROR_INVALID_VALUE && len > buf.len() && len <= limit {
                    buf = vec![0u8; len];
                    continue;
                }
                let st = if st == DOCA_SUCCESS || st == DOCA_ERROR_INVALID_VALUE { DOCA_ERROR_TOO_BIG } else { st };
                return Err((st, format!("plugin {} addr failed: {} (length {len})", p.name, err_name(st))));
            };
            addrs.push(PluginAddr { plugin: p.id, addr });
        }
        // The host's Spawned carries these addresses, in a packet of at most `limit` bytes.
        let ready = WorkerToDaemon::Ready { addrs: addrs.clone() };
        if ready.encode().len() + 64 > limit {
            return Err((DOCA_ERROR_TOO_BIG, "plugin addresses do not fit in a message".into()));
        }
        Ok(addrs)
    }

    /// Calls every opened plugin's close, once.
    fn close(&mut self) {
        for slot in self.slots.drain(..) {
            // SAFETY: each slot is a leaked Box, live for the process; close is non-NULL.
            unsafe {
                let close = (*slot).ctx.iface.close.expect("checked non-NULL at load");
                close(addr_of_mut!((*slot).ctx));
            }
        }
    }

    fn add_conn(&mut self, id: u64, fd: OwnedFd) {
        if let Err(e) = proto::set_nonblocking(fd.as_fd(), true) {
            log_at!(self.log(), Warn, "connection {id}: {e}");
            return;
        }
        // Notifications are at most one packet each and a host has at most max_inflight in
        // flight; a buffer too small only makes sends wait in the outbox.
        let _ = proto::fit_packet(fd.as_fd(), max_packet(self.setup.max_msg_size));
        log_at!(self.log(), Debug, "connection {id} attached");
        self.conns.push(Conn {
            id,
            fd,
            outstanding: 0,
            pending: std::collections::HashSet::new(),
            outbox: VecDeque::new(),
            dead: false,
            chan: None,
        });
    }

    fn outstanding(&self) -> u64 {
        // SAFETY: slots are live leaked Boxes; only this thread touches them outside plugin calls.
        self.slots.iter().map(|s| unsafe { (**s).outstanding }).sum()
    }

    /// Arms every plugin with outstanding commands (see `doca_urom_plugin.h`) and adds their
    /// fds to `fds`.
    fn arm(&self, fds: &mut Vec<libc::pollfd>) -> Armed {
        self.arm_slots(fds, false)
    }

    /// [`arm`](Worker::arm) for an idle worker: every plugin, outstanding commands or not
    /// (one that cannot be armed is then progressed every [`IDLE_POLL_MS`]).
    fn arm_idle(&self, fds: &mut Vec<libc::pollfd>) -> Armed {
        self.arm_slots(fds, true)
    }

    fn arm_slots(&self, fds: &mut Vec<libc::pollfd>, all: bool) -> Armed {
        // All or none: arming some (a system call each) is wasted when one must be polled.
        for &slot in &self.slots {
            // SAFETY: slots are live leaked Boxes; only this thread touches them.
            if unsafe { (all || (*slot).outstanding > 0) && (*slot).arm.is_none() } {
                return Armed::Unsupported;
            }
        }
        for &slot in &self.slots {
            // SAFETY: slots are live leaked Boxes; only this thread touches them.
            let (arm, outstanding) = unsafe { ((*slot).arm, (*slot).outstanding) };
            if outstanding == 0 && !all {
                continue;
            }
            let Some(arm) = arm else { return Armed::Unsupported };
            let mut fd: c_int = -1;
            // SAFETY: the slot's ctx is the opened plugin's; `fd` is a valid out-pointer.
            let st = unsafe { arm(addr_of_mut!((*slot).ctx), &mut fd) };
            match st {
                DOCA_SUCCESS if fd >= 0 => fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 }),
                // Nothing of its own to wait for: the worker's sockets bring its work.
                DOCA_SUCCESS if fd == -1 => {}
                DOCA_ERROR_AGAIN => return Armed::Work,
                _ => return Armed::Unsupported,
            }
        }
        Armed::Sleep
    }

    /// The worker's loop: serve the control socket and the host connections, call the plugins'
    /// `progress` while commands are outstanding (and while idle for a plugin that cannot say
    /// when it has work), and sleep when there is nothing to do.
    ///
    /// How long `poll` may block:
    /// * nothing outstanding: not at all for [`IDLE_SPIN_TIME`] after the last activity (the
    ///   next command of a host issuing them back to back comes within microseconds), then
    ///   every plugin is armed and the worker sleeps on their fds and its sockets; if one
    ///   cannot be armed (NVIDIA's plugins know nothing of the soft-only extension), it is
    ///   progressed every [`IDLE_POLL_MS`] instead: a plugin may have work between commands;
    /// * outstanding, every such plugin armable: not at all for [`ARMED_SPIN_TIME`] after the
    ///   last progress, then the plugins are armed and the worker sleeps on their fds and its
    ///   sockets (at most [`ARMED_SLEEP_MS`]): an idle worker costs no CPU;
    /// * outstanding on a plugin that cannot be armed: not at all for [`SPIN_TIME`] (yielding
    ///   the CPU between polls), then 1 ms timeouts.
    ///
    /// Which sockets a round that does not block looks at: see [`Worker::sockets_to_look_at`].
    /// A round that looks at none makes no `poll` at all.
    fn serve(&mut self) {
        let mut last_progress = Instant::now();
        let mut last_look = last_progress;
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut plugin_fds: Vec<libc::pollfd> = Vec::new();
        // What fds[k] is, for the sockets: None for the control socket, Some(i) for conns[i].
        let mut owners: Vec<Option<usize>> = Vec::new();
        // Each connection's revents of this round (0 when its socket was not looked at).
        let mut revents: Vec<libc::c_short> = Vec::new();
        // An answer went to a host on this worker's CPU since the last message from a host
        // (see YIELD_AFTER).
        let mut answered_here = false;
        while !self.exit {
            let now = Instant::now();
            let busy = self.outstanding() > 0;
            let quiet = now.duration_since(last_progress);
            let mut armed = Armed::Unsupported;
            plugin_fds.clear();
            // Idle past the spin: the plugins are armed too (or polled, see IDLE_POLL_MS).
            let idle_armed = !busy && quiet >= IDLE_SPIN_TIME;
            let timeout = if !busy {
                if !idle_armed {
                    0
                } else {
                    armed = self.arm_idle(&mut plugin_fds);
                    match armed {
                        Armed::Sleep => -1,
                        Armed::Work => 0,
                        Armed::Unsupported => IDLE_POLL_MS,
                    }
                }
            } else if quiet < ARMED_SPIN_TIME {
                0
            } else {
                armed = self.arm(&mut plugin_fds);
                match armed {
                    Armed::Sleep => ARMED_SLEEP_MS,
                    Armed::Work => 0,
                    Armed::Unsupported if quiet < SPIN_TIME => 0,
                    Armed::Unsupported => 1,
                }
            };
            // Before blocking, the hosts are told to wake us through the channels' eventfds
            // (unless a channel message already waits: then poll without blocking).
            let sleep = timeout != 0 && self.prepare_sleep();
            let timeout = if sleep { timeout } else { 0 };
            let look_all = timeout != 0 || now.duration_since(last_look) >= SOCKET_LOOK_INTERVAL;
            if look_all {
                last_look = now;
            }
            fds.clear();
            self.sockets_to_look_at(look_all, &mut fds, &mut owners);
            let sockets = fds.len();
            // A plugin fd that wakes the poll only means "call progress", which a busy worker
            // does anyway: only a sleeping worker waits on them.
            if armed == Armed::Sleep {
                fds.extend_from_slice(&plugin_fds);
            }
            let wake_fds = fds.len();
            if sleep {
                let chans = self.conns.iter().filter_map(|c| c.chan.as_ref());
                fds.extend(chans.map(|ch| libc::pollfd { fd: ch.wake_fd(), events: libc::POLLIN, revents: 0 }));
            }
            let n = if fds.is_empty() {
                0
            } else {
                // SAFETY: `fds` is a valid array of `fds.len()` pollfds.
                unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) }
            };
            if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                log_at!(self.log(), Error, "poll: {}", io::Error::last_os_error());
                return;
            }
            if sleep {
                self.awake();
                // The eventfds were added in the connections' order; none changed meanwhile.
                let chans = self.conns.iter().filter_map(|c| c.chan.as_ref());
                for (ch, f) in chans.zip(&fds[wake_fds..]) {
                    if f.revents != 0 {
                        ch.drain_wake();
                    }
                }
            }
            let ready = |c: &Conn| c.chan.as_ref().is_some_and(|ch| ch.has_data());
            let traffic = n > 0 && fds[..sockets].iter().any(|f| f.revents != 0) || self.conns.iter().any(ready);
            if traffic {
                // A host's message: whichever host was answered has run since.
                answered_here = false;
                revents.clear();
                revents.resize(self.conns.len(), 0);
                let mut control = false;
                for (f, owner) in fds[..sockets].iter().zip(&owners) {
                    match owner {
                        None => control = f.revents != 0,
                        Some(i) => revents[*i] = f.revents,
                    }
                }
                if control {
                    self.on_control();
                }
                // revents[i] is conns[i]'s: connections are only appended (by on_control,
                // after these) or marked dead before reap_conns below, so the indices hold.
                for (i, &rev) in revents.iter().enumerate() {
                    let id = self.conns[i].id;
                    if rev & libc::POLLOUT != 0 {
                        self.flush(id);
                    }
                    let socket = rev & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
                    if socket || ready(&self.conns[i]) {
                        self.on_data(id, socket);
                    }
                }
                // A command (or any traffic) is activity too: the spin timers restart.
                last_progress = Instant::now();
            }
            let fruitless = n == 0 && timeout == 0;
            // An idle plugin's turn: it said it has work, it cannot say (polled), or its fd
            // woke the sleep.
            let plugin_woke = n > 0 && fds[sockets..wake_fds].iter().any(|f| f.revents != 0);
            let idle_turn = idle_armed && (armed != Armed::Sleep || plugin_woke);
            if self.outstanding() > 0 || busy || idle_turn {
                if self.progress() {
                    last_progress = Instant::now();
                    answered_here |= answered_a_host_here(&mut self.conns);
                } else if fruitless {
                    // Spinning on an answer that depends on another process (a peer worker,
                    // a host): on a machine with fewer CPUs than busy processes that process
                    // may be the one waiting for this CPU, so give it up for a moment. This
                    // holds after a plugin said it had work (Armed::Work) and progress then
                    // advanced nothing too: that plugin waits for someone else (worker_coll's
                    // hello waiting for room in a peer's socket), and would otherwise be
                    // polled without a pause for as long as it waits.
                    // SAFETY: sched_yield takes no arguments and cannot fail on Linux.
                    unsafe { libc::sched_yield() };
                }
            } else if fruitless && (answered_here || quiet >= YIELD_AFTER) {
                // Waiting for a host's next command: the CPU is given up once the loop has
                // been quiet for YIELD_AFTER (see there), or at once after an answer to a
                // host on this CPU, which needs it to take the answer and send that command.
                // SAFETY: as above.
                unsafe { libc::sched_yield() };
            }
            self.reap_conns();
        }
    }

    /// Fills `fds` with the sockets this round's `poll` looks at, and `owners` with whose each
    /// one is (`None`: the control socket; `Some(i)`: `conns[i]`'s).
    ///
    /// `look_all` (a round about to block, and otherwise once per [`SOCKET_LOOK_INTERVAL`]):
    /// every socket. Otherwise, only the sockets that have something for us we know of without
    /// a system call: a connection without a channel (its socket is its only path), one whose
    /// channel says the host sent packets on the socket (`Channel::socket_pending`), one
    /// with answers waiting for room in its socket (`POLLOUT`). The rest is hang-ups and the
    /// daemon's rare control messages, which can wait for the next full look. A polling round
    /// therefore makes no system call for its sockets: a `poll` of two sockets costs ~0.37 µs
    /// on the VMs we measure on, and a worker serving commands back to back makes two or three
    /// rounds per command.
    fn sockets_to_look_at(&self, look_all: bool, fds: &mut Vec<libc::pollfd>, owners: &mut Vec<Option<usize>>) {
        owners.clear();
        if look_all {
            fds.push(libc::pollfd { fd: self.setup.ctl.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            owners.push(None);
        }
        for (i, c) in self.conns.iter().enumerate() {
            let pending = c.chan.as_ref().is_none_or(|ch| ch.socket_pending());
            if look_all || pending || !c.outbox.is_empty() {
                let ev = libc::POLLIN | if c.outbox.is_empty() { 0 } else { libc::POLLOUT };
                fds.push(libc::pollfd { fd: c.fd.as_raw_fd(), events: ev, revents: 0 });
                owners.push(Some(i));
            }
        }
    }

    /// About to block in `poll`: asks every channel's host to wake us. `false`: a channel
    /// message already waits, so do not block (and no host is asked).
    fn prepare_sleep(&self) -> bool {
        for ch in self.conns.iter().filter_map(|c| c.chan.as_ref()) {
            if !ch.prepare_sleep() {
                self.awake();
                return false;
            }
        }
        true
    }

    /// Awake: no host need wake us any more.
    fn awake(&self) {
        for ch in self.conns.iter().filter_map(|c| c.chan.as_ref()) {
            ch.awake();
        }
    }

    fn on_control(&mut self) {
        let (n, fd) = match proto::recv_msg(self.setup.ctl.as_fd(), &mut self.recv_buf[..]) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                log_at!(self.log(), Warn, "control socket: {e}; exiting");
                self.exit = true;
                return;
            }
        };
        if n == 0 {
            log_at!(self.log(), Info, "daemon hung up; exiting");
            self.exit = true;
            return;
        }
        match (DaemonToWorker::decode(&self.recv_buf[..n]), fd) {
            (Ok(DaemonToWorker::Attach { conn }), Some(fd)) => {
                if self.conns.iter().any(|c| c.id == conn) {
                    log_at!(self.log(), Warn, "duplicate connection id {conn}; refused");
                } else {
                    self.next_conn = self.next_conn.max(conn.wrapping_add(1));
                    self.add_conn(conn, fd);
                }
            }
            (Ok(DaemonToWorker::Exit), None) => {
                log_at!(self.log(), Debug, "exit requested");
                self.exit = true;
            }
            (m, _) => {
                log_at!(self.log(), Error, "protocol error on the control socket ({m:?}); exiting");
                self.exit = true;
            }
        }
    }

    fn conn_mut(&mut self, id: u64) -> Option<&mut Conn> {
        self.conns.iter_mut().find(|c| c.id == id && !c.dead)
    }

    /// The next message of connection `i` into `recv_buf`, in the order the host sent it:
    /// from its channel or, if `socket` (its `poll` said readable), its socket (see
    /// `urom::channel`). `None`: nothing now, or the connection was dropped.
    fn next_message(&mut self, i: usize, socket: &mut bool) -> Option<(usize, Vec<OwnedFd>)> {
        let id = self.conns[i].id;
        if let Some(ch) = &mut self.conns[i].chan {
            match ch.next(&mut self.recv_buf) {
                Ok(Some(n)) => return Some((n, Vec::new())),
                Ok(None) => {}
                Err(_) => {
                    log_at!(self.log(), Warn, "connection {id}: the host broke the channel's rules; dropping it");
                    self.kill_conn(id);
                    return None;
                }
            }
        }
        if !*socket {
            return None;
        }
        let r = proto::recv_msg_fds(self.conns[i].fd.as_fd(), &mut self.recv_buf[..]);
        let (n, passed) = match r {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                *socket = false;
                return None;
            }
            // The host closed with answers still unread (it stopped without waiting for a
            // DomainDestroy reply, say): an ordinary close, not a fault.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                log_at!(self.log(), Debug, "connection {id} closed by the host (reset)");
                self.kill_conn(id);
                return None;
            }
            Err(e) => {
                log_at!(self.log(), Warn, "connection {id}: {e}; dropping it");
                self.kill_conn(id);
                return None;
            }
        };
        if n == 0 {
            log_at!(self.log(), Debug, "connection {id} closed by the host");
            self.kill_conn(id);
            return None;
        }
        if let Some(ch) = &mut self.conns[i].chan {
            if ch.on_socket_packet(&self.recv_buf[..n]) {
                // Channel messages sent before this packet come first.
                return self.next_message(i, socket);
            }
        }
        Some((n, passed))
    }

    /// Attaches the channel a host passed (`HostToWorker::Channel`). A channel of another
    /// geometry is declined (the connection goes on without it); a second channel, or one
    /// without its three descriptors, is a protocol error.
    fn attach_channel(&mut self, id: u64, slots: u32, slot_bytes: u32, fds: Vec<OwnedFd>) -> Result<(), ()> {
        let Some(c) = self.conns.iter_mut().find(|c| c.id == id && !c.dead) else { return Ok(()) };
        if c.chan.is_some() || fds.len() != 3 {
            return Err(());
        }
        if (slots as u64, slot_bytes as usize) != (channel::SLOTS, channel::SLOT_BYTES) {
            log_at!(self.setup.log, Warn, "connection {id}: channel of {slots} × {slot_bytes} bytes declined");
            return Ok(());
        }
        match Channel::attach(fds) {
            Ok(ch) => c.chan = Some(ch),
            Err(e) => log_at!(self.setup.log, Warn, "connection {id}: channel unusable ({}); socket only", err_name(e)),
        }
        Ok(())
    }

    /// Handles up to [`READ_BATCH`] messages of connection `id`; `socket`: its socket is
    /// readable (without it only the channel is read: no `recvmsg` that finds nothing).
    fn on_data(&mut self, id: u64, mut socket: bool) {
        for _ in 0..READ_BATCH {
            let Some(i) = self.conns.iter().position(|c| c.id == id && !c.dead) else { return };
            let Some((n, passed)) = self.next_message(i, &mut socket) else { return };
            if passed.is_empty() {
                // The common message, decoded in place: its payload is copied once, into the
                // plugin's desc. (`recv_buf` is lent out of `self` for the call.)
                let buf = std::mem::take(&mut self.recv_buf);
                let handled = match HostToWorker::decode_command(&buf[..n]) {
                    Ok(Some(c)) => {
                        self.command(id, c.ctx, c.plugin, c.payload);
                        true
                    }
                    Ok(None) => false,
                    Err(_) => {
                        log_at!(self.log(), Warn, "connection {id}: protocol error; dropping it");
                        self.kill_conn(id);
                        true
                    }
                };
                self.recv_buf = buf;
                if handled {
                    continue;
                }
            }
            let msg = HostToWorker::decode(&self.recv_buf[..n]);
            // Only a channel comes with descriptors.
            if !passed.is_empty() && !matches!(msg, Ok(HostToWorker::Channel { .. })) {
                log_at!(self.log(), Warn, "connection {id}: unexpected descriptor; dropping the connection");
                self.kill_conn(id);
                return;
            }
            match msg {
                Ok(HostToWorker::Channel { slots, slot_bytes }) => {
                    if self.attach_channel(id, slots, slot_bytes, passed).is_err() {
                        log_at!(self.log(), Warn, "connection {id}: unexpected channel; dropping the connection");
                        self.kill_conn(id);
                        return;
                    }
                }
                // Only one that came with descriptors gets here (and is refused above).
                Ok(HostToWorker::Command { ctx, plugin, payload }) => self.command(id, ctx, plugin, &payload),
                Ok(HostToWorker::DomainCreate { ctx, domain }) => {
                    DOMAINS.with(|d| {
                        let mut d = d.borrow_mut();
                        d.retain(|i| !(i.conn == id && i.key == ctx));
                        d.push(Installed { conn: id, key: ctx, domain });
                    });
                    self.notify(id, ctx, PLUGIN_NONE, DOCA_SUCCESS, &[]);
                }
                Ok(HostToWorker::DomainDestroy { ctx }) => {
                    let found = DOMAINS.with(|d| {
                        let mut d = d.borrow_mut();
                        let before = d.len();
                        d.retain(|i| !(i.conn == id && i.key == ctx));
                        d.len() != before
                    });
                    let st = if found { DOCA_SUCCESS } else { DOCA_ERROR_NOT_FOUND };
                    self.notify(id, ctx, PLUGIN_NONE, st, &[]);
                }
                Err(_) => {
                    log_at!(self.log(), Warn, "connection {id}: protocol error; dropping it");
                    self.kill_conn(id);
                    return;
                }
            }
        }
    }

    fn kill_conn(&mut self, id: u64) {
        if let Some(c) = self.conns.iter_mut().find(|c| c.id == id) {
            c.dead = true;
        }
        DOMAINS.with(|d| d.borrow_mut().retain(|i| i.conn != id));
    }

    fn reap_conns(&mut self) {
        self.conns.retain(|c| !c.dead);
    }

    fn slot_for(&self, plugin: u64) -> Option<*mut Slot> {
        // SAFETY: slots are live leaked Boxes.
        self.slots.iter().copied().find(|s| unsafe { (**s).plugin } == plugin)
    }

    fn command(&mut self, conn: u64, ctx: u64, plugin: u64, payload: &[u8]) {
        let Some(slot) = self.slot_for(plugin) else {
            self.notify(conn, ctx, plugin, DOCA_ERROR_NOT_FOUND, &[]);
            return;
        };
        let max = self.setup.max_inflight;
        match self.conn_mut(conn) {
            Some(c) if c.outstanding >= max => {
                self.notify(conn, ctx, plugin, DOCA_ERROR_FULL, &[]);
                return;
            }
            Some(_) => {}
            None => return,
        }
        let size = size_of::<urom_worker_cmd_desc>() + payload.len();
        // SAFETY: malloc of a positive size; the plugin frees the entry with free().
        let desc = unsafe { libc::malloc(size) }.cast::<urom_worker_cmd_desc>();
        if desc.is_null() {
            self.notify(conn, ctx, plugin, DOCA_ERROR_NO_MEMORY, &[]);
            return;
        }
        let head_p: *mut ucs_list_link = &mut *self.list;
        // SAFETY: `desc` points to `size` fresh bytes, enough for the header and the payload;
        // fields are written through raw pointers (the memory is uninitialized).
        unsafe {
            addr_of_mut!((*desc).entry).write(ucs_list_link { prev: head_p, next: head_p });
            addr_of_mut!((*desc).dest_id).write(conn);
            addr_of_mut!((*desc).worker_cmd).write(urom_worker_cmd {
                type_: plugin,
                urom_context: ctx,
                len: payload.len() as u64,
                plugin_cmd: [],
            });
            let body = addr_of_mut!((*desc).worker_cmd.plugin_cmd).cast::<u8>();
            ptr::copy_nonoverlapping(payload.as_ptr(), body, payload.len());
            (*head_p).next = addr_of_mut!((*desc).entry);
            (*head_p).prev = addr_of_mut!((*desc).entry);
        }
        // SAFETY: slot is live; worker_cmd is non-NULL (checked at load); the list is
        // well-formed and outlives the call.
        let st = unsafe {
            let f = (*slot).ctx.iface.worker_cmd.expect("checked non-NULL at load");
            f(addr_of_mut!((*slot).ctx), head_p)
        };
        // SAFETY: the list is still well-formed (the plugin only unlinks entries it takes).
        let left = unsafe { drain_list(head_p) };
        for e in &left {
            // SAFETY: entries are the malloc'ed descs we put on the list (entry is first).
            unsafe { libc::free(e.cast()) };
        }
        if st != DOCA_SUCCESS {
            log_at!(self.log(), Debug, "worker_cmd of plugin {plugin:#x} failed: {}", err_name(st));
            self.notify(conn, ctx, plugin, st, &[]);
        } else if !left.is_empty() {
            log_at!(self.log(), Warn, "plugin {plugin:#x} left a command on the list; answered UNEXPECTED");
            self.notify(conn, ctx, plugin, DOCA_ERROR_UNEXPECTED, &[]);
        } else {
            // SAFETY: slot is live.
            unsafe { (*slot).outstanding += 1 };
            if let Some(c) = self.conn_mut(conn) {
                c.outstanding += 1;
                c.pending.insert(ctx);
            }
        }
    }

    /// Progresses every plugin and delivers their notifications; whether any plugin made
    /// progress (answered something, or reported SUCCESS: work advanced).
    fn progress(&mut self) -> bool {
        let mut any = false;
        // By index: `deliver` needs `self`, and cloning the slots would allocate every turn.
        for i in 0..self.slots.len() {
            let slot = self.slots[i];
            let head_p: *mut ucs_list_link = &mut *self.list;
            // SAFETY: slot is live; progress is non-NULL; the list head is empty and stable.
            let st = unsafe {
                let f = (*slot).ctx.iface.progress.expect("checked non-NULL at load");
                f(addr_of_mut!((*slot).ctx), head_p)
            };
            // SUCCESS with no notification: the plugin says it advanced work that has no
            // answer yet (a long collective), which keeps the loop from backing off.
            any |= st == DOCA_SUCCESS;
            if st != DOCA_SUCCESS && st != DOCA_ERROR_EMPTY {
                // SAFETY: slot is live.
                log_at!(self.log(), Debug, "progress of plugin {:#x}: {}", unsafe { (*slot).plugin }, err_name(st));
            }
            // SAFETY: the plugin appended well-formed, malloc'ed notif descs.
            let notifs = unsafe { drain_list(head_p) };
            for e in notifs {
                any = true;
                self.deliver(slot, e.cast());
            }
        }
        any
    }

    /// Packs one notification, sends it to its connection, frees it.
    fn deliver(&mut self, slot: *mut Slot, desc: *mut urom_worker_notif_desc) {
        // SAFETY: `desc` is a live notif desc the plugin handed over; slot is live.
        let (conn, ctx, plugin, status, body) = unsafe {
            let notif = addr_of_mut!((*desc).worker_notif);
            let pack = (*slot).ctx.iface.notif_pack.expect("checked non-NULL at load");
            // Room for the header and the whole body, whatever the message limit: NVIDIA's
            // sandbox and RDMO `notif_pack` write them without looking at the length they are
            // given (a receive's data, chosen by the host). An answer over the limit is then
            // refused below, not written past the buffer.
            let need = UROM_NOTIFY_HEADER_LEN.saturating_add((*notif).len as usize).saturating_add(PACK_SLACK);
            if self.pack_buf.len() < need && need <= MAX_PACK_BUF {
                self.pack_buf.resize(need, 0);
            }
            let cap = self.pack_buf.len().min(self.setup.max_msg_size.max(UROM_NOTIFY_HEADER_LEN));
            let mut len = cap;
            let st = pack(notif, &mut len, self.pack_buf.as_mut_ptr().cast());
            // NVIDIA's wire: the plugin packs header + body; the host gets only the body and
            // the header's status (docs/urom-soft.md, "The worker").
            let (status, body) = match st {
                DOCA_SUCCESS if len <= cap => match urom_notify_unpack(&self.pack_buf[..len]) {
                    // The body follows the header (`urom_notify_unpack`'s layout).
                    Some((status, body)) => (status, UROM_NOTIFY_HEADER_LEN..UROM_NOTIFY_HEADER_LEN + body.len()),
                    None => (DOCA_ERROR_UNEXPECTED, 0..0),
                },
                DOCA_SUCCESS => (DOCA_ERROR_TOO_BIG, 0..0),
                e => (e, 0..0),
            };
            let r = ((*desc).dest_id, (*notif).urom_context, (*slot).plugin, status, body);
            libc::free(desc.cast());
            r
        };
        match self.conn_mut(conn).map(|c| (c.pending.remove(&ctx), c)) {
            Some((false, _)) => {
                log_at!(self.log(), Debug, "notification for context {ctx:#x}, answered already, dropped");
                return;
            }
            Some((true, c)) => c.outstanding = c.outstanding.saturating_sub(1),
            None => {
                // SAFETY: slot is live.
                unsafe { (*slot).outstanding = (*slot).outstanding.saturating_sub(1) };
                log_at!(self.log(), Debug, "notification for closed connection {conn} dropped");
                return;
            }
        }
        // SAFETY: slot is live.
        unsafe { (*slot).outstanding = (*slot).outstanding.saturating_sub(1) };
        // The body goes from the pack buffer straight into the channel (lent out of `self`).
        let buf = std::mem::take(&mut self.pack_buf);
        self.notify(conn, ctx, plugin, status, &buf[body]);
        self.pack_buf = buf;
    }

    /// Answers `ctx` on connection `conn`: through its channel, the packet's head and `packed`
    /// copied into the slot, or else as one packet on its socket.
    fn notify(&mut self, conn: u64, ctx: u64, plugin: u64, status: doca_error_t, packed: &[u8]) {
        let Some(c) = self.conn_mut(conn) else { return };
        let head = WorkerToHost::notify_head(ctx, plugin, status, packed.len());
        if c.chan.as_mut().is_some_and(|ch| ch.try_send_parts(&[&head, packed])) {
            return;
        }
        // On the socket (sent now or queued): counted for the channel's order rule.
        if let Some(ch) = &mut c.chan {
            ch.sent_on_socket();
        }
        let msg = [&head[..], packed].concat();
        if c.outbox.is_empty() {
            match proto::send_msg(c.fd.as_fd(), &msg, None) {
                Ok(()) => return,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => {
                    self.kill_conn(conn);
                    return;
                }
            }
        }
        c.outbox.push_back(msg);
    }

    fn flush(&mut self, id: u64) {
        let Some(c) = self.conn_mut(id) else { return };
        while let Some(m) = c.outbox.front() {
            match proto::send_msg(c.fd.as_fd(), m, None) {
                Ok(()) => {
                    c.outbox.pop_front();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.kill_conn(id);
                    return;
                }
            }
        }
    }
}
