//! Write UROM worker plugins in safe Rust.
//!
//! A UROM worker (a process the UROM service spawns; see `docs/urom-soft.md`) `dlopen`s plugin
//! shared objects and drives them through a C table of entry points (`urom_plugin_iface`). This
//! crate puts that ABI behind the [`Plugin`] trait: implement it, add
//! `crate-type = ["cdylib"]`, and call [`export_plugin!`]; the plugin itself needs no `unsafe`.
//!
//! ```
//! use doca_urom_plugin::{export_plugin, Command, Notifications, Plugin, Status, WorkerCtx};
//!
//! /// Answers every command with its own payload.
//! struct Echo;
//!
//! impl Plugin for Echo {
//!     const VERSION: u64 = 1;
//!     fn open(_: &WorkerCtx) -> Result<Self, Status> {
//!         Ok(Echo)
//!     }
//!     fn command(&mut self, _: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
//!         out.push(cmd.reply_to().ok(cmd.payload.to_vec()));
//!         Ok(())
//!     }
//! }
//!
//! export_plugin!(Echo);
//!
//! # fn main() {
//! // In-process, through the C entry points, as a worker drives it:
//! use doca_urom_plugin::testing::{Domain, Worker};
//! let mut w = Worker::open(urom_plugin_get_iface, Domain::new()).unwrap();
//! w.command(1 << 0, 7, 0, b"ping").unwrap();
//! assert_eq!(w.progress().unwrap()[0].packed.as_deref(), Ok(&b"ping"[..]));
//! # }
//! ```
//!
//! # The model
//! * **Threads.** The worker calls every entry point of a plugin from one thread, so a plugin
//!   is neither `Send` nor `Sync` and needs no locks.
//! * **Ownership.** `open` boxes the plugin value into `urom_worker_ctx::plugin_ctx`; `close`
//!   drops it (so `Drop` is the plugin's close). Command descriptors are the worker's `malloc`
//!   allocations: the SDK takes each off the list, hands the plugin a borrowed [`Command`] and
//!   `free`s the descriptor when the call returns. Notifications are owned Rust values
//!   ([`Notification`]) until `progress`, which copies each into a `malloc`ed
//!   `urom_worker_notif_desc` on the worker's list; from then on the worker owns (and frees) it.
//! * **Answers.** Every command gets exactly one answer. Notifications a plugin pushes during
//!   `command` or `progress` wait in the SDK and go to the worker at the next `progress` (the
//!   ABI only lets a plugin hand over notifications there). A `command` that returns
//!   `Err(status)` is answered by the SDK with `status` and an empty body; whatever that call
//!   pushed is discarded, so a failed command never gets two answers.
//! * **Panics** never cross into C: a panic in `open` is `DOCA_ERROR_UNEXPECTED`; in
//!   `command` it answers the command with `UNEXPECTED`; in `progress` that call's pushes are
//!   discarded and it returns `UNEXPECTED` (earlier queued answers go out on the next call).
//! * **Wire form** (DOCA's). A command's payload is exactly the bytes the host packed into the
//!   task's payload buffer; the worker hands it over as `urom_worker_cmd{type, urom_context,
//!   len}` + those bytes. `notif_pack` writes the `urom_worker_notify` header (type,
//!   urom_context, len, status) followed by the packed body ([`Plugin::pack`], default: the
//!   body bytes), as DOCA's plugins do; the worker strips the header, so the host task's
//!   response buffer receives exactly the packed body and the task completes with the
//!   header's status.
//! * **Addresses.** The worker exchanges each plugin's address among domain members but the
//!   lookup ABI returns only a pointer, no length. So the address an SDK plugin reports is
//!   framed: `u32` little-endian length, then the bytes of [`Plugin::address`];
//!   [`WorkerCtx::addr`] reads the frame back. Only the calling plugin's own addresses are
//!   ever looked up, so the framing never meets another plugin's format.
//!
//! * **Sleeping** (soft provider only). [`Plugin::arm`] lets the soft worker sleep on an fd
//!   of the plugin while commands are outstanding instead of calling `progress` in a loop;
//!   [`export_plugin!`] exports it as `urom_plugin_soft_arm`, an extension of this project
//!   that NVIDIA's worker never looks up.
//!
//! [`wire`] is the little-endian message codec and the worker-to-worker datagram socket that
//! plugins share; [`samples`] defines the command and notification formats of the two sample plugins
//! (`plugins/worker_graph`, `plugins/worker_sandbox`) for plugins and hosts alike, and
//! [`testing`] drives plugins in-process (fake worker with a fake domain, loading `.so` files,
//! building the C test plugin).

#![warn(missing_docs)]

mod ffi;
pub mod list;
pub mod samples;
#[allow(dead_code, non_camel_case_types, missing_docs, clippy::all)]
mod sys;
pub mod testing;
pub mod wire;

use std::collections::VecDeque;
use std::fmt;
use std::marker::PhantomData;

pub use ffi::FRAME_HEADER_LEN;

/// The raw C ABI (`doca_urom_plugin.h`): the structs, the entry-point types and the status
/// codes, for code that drives plugins (the worker, tests) rather than writes them.
pub mod abi {
    pub use crate::sys::{
        doca_error_t, doca_urom_worker_domain_addr_lookup, doca_urom_worker_domain_memh_lookup,
        doca_urom_worker_domain_mkey_lookup, doca_urom_worker_domain_seg_lookup, ucs_list_link,
        urom_domain_lookups_iface, urom_notify_pack, urom_notify_unpack, urom_plugin_get_iface_fn,
        urom_plugin_get_version_fn, urom_plugin_iface, urom_plugin_soft_arm_fn, urom_worker_cmd, urom_worker_cmd_desc,
        urom_worker_ctx, urom_worker_notif_desc, urom_worker_notify, DOCA_ERROR_AGAIN, DOCA_ERROR_ALREADY_EXIST,
        DOCA_ERROR_AUTHENTICATION, DOCA_ERROR_BAD_CONFIG, DOCA_ERROR_BAD_STATE, DOCA_ERROR_CONNECTION_ABORTED,
        DOCA_ERROR_CONNECTION_INPROGRESS, DOCA_ERROR_CONNECTION_RESET, DOCA_ERROR_DRIVER, DOCA_ERROR_EMPTY,
        DOCA_ERROR_FULL, DOCA_ERROR_INITIALIZATION, DOCA_ERROR_INVALID_VALUE, DOCA_ERROR_IN_PROGRESS,
        DOCA_ERROR_IN_USE, DOCA_ERROR_IO_FAILED, DOCA_ERROR_NAMES, DOCA_ERROR_NOT_CONNECTED, DOCA_ERROR_NOT_FOUND,
        DOCA_ERROR_NOT_PERMITTED, DOCA_ERROR_NOT_SUPPORTED, DOCA_ERROR_NO_LOCK, DOCA_ERROR_NO_MEMORY,
        DOCA_ERROR_OPERATING_SYSTEM, DOCA_ERROR_SHUTDOWN, DOCA_ERROR_SKIPPED, DOCA_ERROR_TIME_OUT, DOCA_ERROR_TOO_BIG,
        DOCA_ERROR_UNEXPECTED, DOCA_ERROR_UNKNOWN, DOCA_ERROR_UNSUPPORTED_VERSION, DOCA_SUCCESS, DOCA_VERSION_EXACT,
        UROM_NOTIFY_HEADER_LEN, UROM_PLUGIN_DOCA_API_VERSION,
    };
}

use abi::*;

/// A DOCA status code (`doca_error_t`), success included: a notification carries one either
/// way. In `Result<_, Status>` the error side is never [`Status::SUCCESS`] by convention.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(pub doca_error_t);

macro_rules! status_consts {
    ($($name:ident = $raw:ident),* $(,)?) => {
        impl Status {
            $(
                #[allow(missing_docs)]
                pub const $name: Status = Status($raw);
            )*
        }
    };
}

status_consts!(
    SUCCESS = DOCA_SUCCESS,
    UNKNOWN = DOCA_ERROR_UNKNOWN,
    NOT_PERMITTED = DOCA_ERROR_NOT_PERMITTED,
    IN_USE = DOCA_ERROR_IN_USE,
    NOT_SUPPORTED = DOCA_ERROR_NOT_SUPPORTED,
    AGAIN = DOCA_ERROR_AGAIN,
    INVALID_VALUE = DOCA_ERROR_INVALID_VALUE,
    NO_MEMORY = DOCA_ERROR_NO_MEMORY,
    INITIALIZATION = DOCA_ERROR_INITIALIZATION,
    TIME_OUT = DOCA_ERROR_TIME_OUT,
    SHUTDOWN = DOCA_ERROR_SHUTDOWN,
    CONNECTION_RESET = DOCA_ERROR_CONNECTION_RESET,
    CONNECTION_ABORTED = DOCA_ERROR_CONNECTION_ABORTED,
    CONNECTION_INPROGRESS = DOCA_ERROR_CONNECTION_INPROGRESS,
    NOT_CONNECTED = DOCA_ERROR_NOT_CONNECTED,
    NO_LOCK = DOCA_ERROR_NO_LOCK,
    NOT_FOUND = DOCA_ERROR_NOT_FOUND,
    IO_FAILED = DOCA_ERROR_IO_FAILED,
    BAD_STATE = DOCA_ERROR_BAD_STATE,
    UNSUPPORTED_VERSION = DOCA_ERROR_UNSUPPORTED_VERSION,
    OPERATING_SYSTEM = DOCA_ERROR_OPERATING_SYSTEM,
    DRIVER = DOCA_ERROR_DRIVER,
    UNEXPECTED = DOCA_ERROR_UNEXPECTED,
    ALREADY_EXIST = DOCA_ERROR_ALREADY_EXIST,
    FULL = DOCA_ERROR_FULL,
    EMPTY = DOCA_ERROR_EMPTY,
    IN_PROGRESS = DOCA_ERROR_IN_PROGRESS,
    TOO_BIG = DOCA_ERROR_TOO_BIG,
    AUTHENTICATION = DOCA_ERROR_AUTHENTICATION,
    BAD_CONFIG = DOCA_ERROR_BAD_CONFIG,
    SKIPPED = DOCA_ERROR_SKIPPED,
);

impl Status {
    /// The raw C value.
    pub const fn raw(self) -> doca_error_t {
        self.0
    }

    /// The numeric code.
    pub const fn code(self) -> i32 {
        self.0 .0
    }

    /// `true` for `DOCA_SUCCESS`.
    pub const fn is_success(self) -> bool {
        self.0 .0 == 0
    }

    /// `Ok(())` for success, `Err(self)` otherwise.
    pub fn result(self) -> Result<(), Status> {
        if self.is_success() {
            Ok(())
        } else {
            Err(self)
        }
    }

    /// The symbolic name (`DOCA_ERROR_NOT_FOUND`), or `"DOCA_ERROR_<unknown>"` for a code
    /// newer than this crate.
    pub fn name(self) -> &'static str {
        usize::try_from(self.code())
            .ok()
            .and_then(|i| DOCA_ERROR_NAMES.get(i).copied())
            .unwrap_or("DOCA_ERROR_<unknown>")
    }

    /// The DOCA code that best describes an I/O error, for plugins that do I/O.
    pub fn from_io(e: &std::io::Error) -> Status {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::WouldBlock => Status::AGAIN,
            K::NotFound | K::ConnectionRefused | K::NotConnected => Status::NOT_CONNECTED,
            K::ConnectionReset => Status::CONNECTION_RESET,
            K::ConnectionAborted | K::BrokenPipe => Status::CONNECTION_ABORTED,
            K::PermissionDenied => Status::NOT_PERMITTED,
            K::OutOfMemory => Status::NO_MEMORY,
            K::InvalidInput => Status::INVALID_VALUE,
            K::TimedOut => Status::TIME_OUT,
            _ if e.raw_os_error() == Some(libc::EMSGSIZE) => Status::TOO_BIG,
            _ if e.raw_os_error() == Some(libc::ENOBUFS) => Status::AGAIN,
            _ => Status::IO_FAILED,
        }
    }
}

impl From<doca_error_t> for Status {
    fn from(e: doca_error_t) -> Self {
        Status(e)
    }
}

impl From<Status> for doca_error_t {
    fn from(s: Status) -> Self {
        s.0
    }
}

impl fmt::Debug for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.code())
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for Status {}

/// A UROM worker plugin.
///
/// The worker creates one value per plugin per worker process with [`Plugin::open`] and drops
/// it at close. All methods run on the worker's single thread.
pub trait Plugin: Sized + 'static {
    /// What `urom_plugin_get_version` reports (the host sees it in the service's plugin list).
    const VERSION: u64;

    /// Creates the plugin's state. An error makes the worker skip (or fail on) this plugin.
    fn open(ctx: &WorkerCtx) -> Result<Self, Status>;

    /// The plugin's address on this worker, exchanged among the members of a domain; other
    /// members' instances find it with [`WorkerCtx::addr`]. Default: empty.
    fn address(&self) -> &[u8] {
        &[]
    }

    /// Handles one command from a host. Answer it now or later by pushing a [`Notification`]
    /// made from [`Command::reply_to`]; `Err(status)` answers it with `status` instead (and
    /// discards anything this call pushed).
    fn command(&mut self, ctx: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status>;

    /// Called repeatedly while commands are outstanding: advance pending work and push the
    /// answers that are ready. Must not block. Default: nothing to do.
    fn progress(&mut self, ctx: &WorkerCtx, out: &mut Notifications) {
        let _ = (ctx, out);
    }

    /// **Soft-only extension** (`urom_plugin_soft_arm`, see `doca_urom_plugin.h`; NVIDIA's
    /// worker never calls it): the worker would like to sleep (commands are outstanding on
    /// this plugin and the last [`progress`](Plugin::progress) advanced nothing, or the worker
    /// is idle). Return [`Arm::Sleep`] with an fd that becomes readable once `progress` has
    /// work again (and end the armed state in the next `progress`), [`Arm::Busy`] when
    /// `progress` has work now, [`Arm::Idle`] when it has none of its own (everything it does
    /// comes with a command). Default: [`Arm::Unsupported`], and the worker keeps polling
    /// `progress`, also while idle (every millisecond).
    fn arm(&mut self, ctx: &WorkerCtx) -> Arm {
        let _ = ctx;
        Arm::Unsupported
    }

    /// Packs a notification body into the host's response bytes (what follows the header the
    /// SDK writes), returning the length used.
    /// `notif_pack` has no plugin context, hence no `self`. Default: the body itself;
    /// `DOCA_ERROR_TOO_BIG` when `out` is too small.
    fn pack(body: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        let dst = out.get_mut(..body.len()).ok_or(Status::TOO_BIG)?;
        dst.copy_from_slice(body);
        Ok(body.len())
    }
}

/// A plugin's answer to [`Plugin::arm`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// Sleep until this fd is readable (`POLLIN`): then `progress` has work.
    Sleep(std::os::fd::RawFd),
    /// `progress` has work now: do not sleep.
    Busy,
    /// This plugin cannot tell: poll `progress`.
    Unsupported,
    /// Nothing to do but what commands bring: sleep on the worker's own sockets.
    Idle,
}

/// One command as the worker handed it over. The payload is borrowed from the worker's
/// descriptor, which is freed when [`Plugin::command`] returns: copy what must outlive it.
#[derive(Debug, Clone, Copy)]
pub struct Command<'a> {
    /// The plugin id (one bit) the host addressed.
    pub plugin: u64,
    /// The host's key for its task, echoed in the answer.
    pub urom_context: u64,
    /// Who sent it (the worker's connection id), echoed in the answer.
    pub dest_id: u64,
    /// The host's packed command.
    pub payload: &'a [u8],
}

impl Command<'_> {
    /// Where the answer goes; keep it to answer later.
    pub fn reply_to(&self) -> ReplyTo {
        ReplyTo { plugin: self.plugin, urom_context: self.urom_context, dest_id: self.dest_id }
    }
}

/// The addressing of a command's answer, detached from the command so a plugin can answer
/// after the command descriptor is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplyTo {
    /// The plugin id the command was for.
    pub plugin: u64,
    /// The host's task key.
    pub urom_context: u64,
    /// The sender's connection id.
    pub dest_id: u64,
}

impl ReplyTo {
    /// A successful answer carrying `body`.
    pub fn ok(self, body: Vec<u8>) -> Notification {
        self.with(Status::SUCCESS, body)
    }

    /// A failed answer with an empty body.
    pub fn error(self, status: Status) -> Notification {
        self.with(status, Vec::new())
    }

    /// An answer with any status and body.
    pub fn with(self, status: Status, body: Vec<u8>) -> Notification {
        Notification { plugin: self.plugin, urom_context: self.urom_context, dest_id: self.dest_id, status, body }
    }
}

/// A notification: the answer to one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The plugin id (copied from the command).
    pub plugin: u64,
    /// The command's `urom_context`.
    pub urom_context: u64,
    /// The command's `dest_id`.
    pub dest_id: u64,
    /// The outcome; the host task completes with it.
    pub status: Status,
    /// The body, packed by [`Plugin::pack`] into the host's response buffer.
    pub body: Vec<u8>,
}

/// Answers waiting to be handed to the worker at the next `progress`, in push order.
#[derive(Debug, Default)]
pub struct Notifications {
    queue: VecDeque<Notification>,
    /// Set by [`Notifications::made_progress`] during one `progress` call.
    progressed: bool,
}

impl Notifications {
    /// An empty queue (for unit-testing a plugin's methods directly).
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues an answer.
    pub fn push(&mut self, n: Notification) {
        self.queue.push_back(n);
    }

    /// Number of queued answers.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// `true` when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The queued answers, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Notification> {
        self.queue.iter()
    }

    /// Tells the worker that this `progress` call advanced work (moved data, met a peer)
    /// although it answered nothing yet. The progress callback then reports success instead
    /// of "empty", and a worker that backs off after a quiet period (the soft provider's
    /// does, after 500 µs) keeps polling a plugin that is busy with a long operation.
    pub fn made_progress(&mut self) {
        self.progressed = true;
    }

    /// Whether [`made_progress`](Notifications::made_progress) was called since the last
    /// [`take_progress`](Notifications::take_progress); clears the mark.
    pub fn take_progress(&mut self) -> bool {
        std::mem::take(&mut self.progressed)
    }

    /// Removes and returns everything queued.
    pub fn take_all(&mut self) -> Vec<Notification> {
        self.queue.drain(..).collect()
    }

    fn truncate(&mut self, len: usize) {
        self.queue.truncate(len);
    }

    fn front(&self) -> Option<&Notification> {
        self.queue.front()
    }

    fn pop_front(&mut self) -> Option<Notification> {
        self.queue.pop_front()
    }
}

/// The worker's side of a plugin call: the domain lookups.
///
/// Only handed out by reference for the duration of one entry-point call, so the slices it
/// returns (the worker's domain table, which changes only between calls) cannot be kept past
/// it; copy what must last. Lookups fail with the worker's status, typically
/// `DOCA_ERROR_NOT_FOUND` for a member or segment the domain does not have, or
/// `DOCA_ERROR_NOT_SUPPORTED` when the worker provides no lookup.
pub struct WorkerCtx {
    raw: *mut urom_worker_ctx,
    // One thread, one call: neither Send nor Sync.
    _not_send: PhantomData<*mut ()>,
}

impl WorkerCtx {
    /// # Safety
    /// `raw` must point to the worker's live `urom_worker_ctx` for as long as the returned
    /// value is used, and its `domain_iface` functions must honour the lookup ABI.
    pub(crate) unsafe fn from_raw(raw: *mut urom_worker_ctx) -> Self {
        WorkerCtx { raw, _not_send: PhantomData }
    }

    /// The raw context, for plugins that need an ABI feature this type does not cover.
    pub fn as_raw(&self) -> *mut urom_worker_ctx {
        self.raw
    }

    fn lookups(&self) -> urom_domain_lookups_iface {
        // SAFETY: `raw` is live for the call (constructor contract); the lookup table is
        // plain function pointers, copied out without keeping a reference.
        unsafe { (*self.raw).domain_iface }
    }

    /// The address this plugin reported on domain member `member` (a worker id of the domain).
    pub fn addr(&self, member: u64) -> Result<&[u8], Status> {
        let f = self.lookups().addr_lookup.ok_or(Status::NOT_SUPPORTED)?;
        let mut p: *mut core::ffi::c_void = core::ptr::null_mut();
        // SAFETY: the ctx is live and `p` is a valid out-pointer; the function is the
        // worker's addr_lookup.
        Status(unsafe { f(self.raw, member, &mut p) }).result()?;
        if p.is_null() {
            return Err(Status::UNEXPECTED);
        }
        // SAFETY: the worker returned the bytes this plugin's `addr` entry point wrote on that
        // member, which the SDK framed (u32 length + bytes); they stay in the worker's domain
        // table, unchanged during this call.
        unsafe { ffi::read_framed_addr(p.cast::<u8>()) }
    }

    /// The index of member `member`'s registered buffer (segment) that contains `va`.
    pub fn segment_of(&self, member: u64, va: u64) -> Result<i32, Status> {
        let f = self.lookups().seg_lookup.ok_or(Status::NOT_SUPPORTED)?;
        let mut seg: core::ffi::c_int = -1;
        // SAFETY: live ctx, valid out-pointer, the worker's seg_lookup.
        Status(unsafe { f(self.raw, member, va, &mut seg) }).result()?;
        Ok(seg)
    }

    /// The memory handle of member `member`'s segment `seg`.
    pub fn memh(&self, member: u64, seg: i32) -> Result<&[u8], Status> {
        let f = self.lookups().memh_lookup.ok_or(Status::NOT_SUPPORTED)?;
        let (mut len, mut p) = (0usize, core::ptr::null_mut());
        // SAFETY: live ctx, valid out-pointers, the worker's memh_lookup.
        Status(unsafe { f(self.raw, member, seg, &mut len, &mut p) }).result()?;
        // SAFETY: on success the worker points at `len` bytes of its domain table, unchanged
        // during this call.
        unsafe { ffi::lookup_slice(p.cast::<u8>(), len) }
    }

    /// The remote key of member `member`'s segment `seg`.
    pub fn mkey(&self, member: u64, seg: i32) -> Result<&[u8], Status> {
        let f = self.lookups().mkey_lookup.ok_or(Status::NOT_SUPPORTED)?;
        let (mut len, mut p) = (0usize, core::ptr::null_mut());
        // SAFETY: live ctx, valid out-pointers, the worker's mkey_lookup.
        Status(unsafe { f(self.raw, member, seg, &mut len, &mut p) }).result()?;
        // SAFETY: as in `memh`.
        unsafe { ffi::lookup_slice(p.cast::<u8>(), len) }
    }
}

/// The entry points of `P` as the worker sees them (what `urom_plugin_get_iface` copies out).
pub fn iface_of<P: Plugin>() -> urom_plugin_iface {
    ffi::iface::<P>()
}

/// The soft-only `urom_plugin_soft_arm` entry point of `P` (what [`export_plugin!`] exports),
/// for programs that compile a plugin in rather than load it.
pub fn soft_arm_of<P: Plugin>() -> urom_plugin_soft_arm_fn {
    ffi::soft_arm::<P>
}

#[doc(hidden)]
pub mod __private {
    pub use crate::ffi::{get_iface, get_version, soft_arm};
}

/// Exports a [`Plugin`] type as a UROM plugin: emits `urom_plugin_get_iface` and
/// `urom_plugin_get_version` (one plugin per shared object, so call it once per cdylib crate).
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        /// UROM plugin entry point: fills the caller's `urom_plugin_iface`.
        ///
        /// # Safety
        /// `iface` is NULL or points to writable memory for one `urom_plugin_iface`.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn urom_plugin_get_iface(
            iface: *mut $crate::abi::urom_plugin_iface,
        ) -> $crate::abi::doca_error_t {
            // SAFETY: forwarded caller contract.
            unsafe { $crate::__private::get_iface::<$plugin>(iface) }
        }

        /// UROM plugin entry point: reports the plugin's version.
        ///
        /// # Safety
        /// `version` is NULL or points to a writable `u64`.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn urom_plugin_get_version(version: *mut u64) -> $crate::abi::doca_error_t {
            // SAFETY: forwarded caller contract.
            unsafe { $crate::__private::get_version::<$plugin>(version) }
        }

        /// Soft-only UROM extension (not part of DOCA): lets the soft worker sleep on the
        /// plugin's fd instead of polling `progress` (see `doca_urom_plugin.h`).
        ///
        /// # Safety
        /// `ctx` is NULL or the worker's ctx of this plugin; `fd` is NULL or writable.
        #[allow(unsafe_code)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn urom_plugin_soft_arm(
            ctx: *mut $crate::abi::urom_worker_ctx,
            fd: *mut ::core::ffi::c_int,
        ) -> $crate::abi::doca_error_t {
            // SAFETY: forwarded caller contract.
            unsafe { $crate::__private::soft_arm::<$plugin>(ctx, fd) }
        }
    };
}
