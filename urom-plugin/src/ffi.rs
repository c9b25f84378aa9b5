//! The `extern "C"` trampolines between the worker and a [`Plugin`]: every `unsafe` of the
//! plugin side lives here.
//!
//! Conventions: NULL arguments are `DOCA_ERROR_INVALID_VALUE`; a call before `open` (NULL
//! `plugin_ctx`) is `DOCA_ERROR_BAD_STATE`; no panic leaves a trampoline (see the crate docs
//! for what each one turns a panic into).

use core::ffi::c_void;
use core::mem::{offset_of, size_of};
use core::ptr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::*;
use crate::{list, Command, Notification, Notifications, Plugin, Status, WorkerCtx};

/// Bytes in front of an SDK plugin's address: its length as a little-endian `u32`.
pub const FRAME_HEADER_LEN: usize = 4;

/// Sanity bound on a framed address read back from the worker: a larger length means the
/// bytes were not written by an SDK plugin.
const MAX_FRAMED_ADDR: usize = 1 << 20;

/// What `plugin_ctx` points to.
struct State<P> {
    plugin: P,
    out: Notifications,
}

/// One line on stderr (the worker's log). Never panics, unlike `eprintln!` on a failed write:
/// it runs outside `catch_unwind`. Plugins are shared objects loaded into a worker process,
/// where no `tracing` subscriber of the host program can reach them, so stderr is their log.
pub(crate) fn log(args: core::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "doca-urom-plugin: {args}");
}

/// Runs `body`, turning a panic into `on_panic` after reporting it on stderr (the worker's log).
fn guard<T>(on_panic: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            log(format_args!("panic caught at the plugin boundary: {msg}"));
            on_panic
        }
    }
}

pub(crate) fn iface<P: Plugin>() -> urom_plugin_iface {
    urom_plugin_iface {
        __doca_api_version: UROM_PLUGIN_DOCA_API_VERSION,
        open: Some(open::<P>),
        close: Some(close::<P>),
        addr: Some(addr::<P>),
        worker_cmd: Some(worker_cmd::<P>),
        progress: Some(progress::<P>),
        notif_pack: Some(notif_pack::<P>),
    }
}

/// Body of the exported `urom_plugin_get_iface`.
///
/// # Safety
/// `out` is NULL or points to writable memory for one `urom_plugin_iface`.
pub unsafe fn get_iface<P: Plugin>(out: *mut urom_plugin_iface) -> doca_error_t {
    if out.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    // SAFETY: caller contract; `write` because the memory may be uninitialised.
    unsafe { out.write(iface::<P>()) };
    DOCA_SUCCESS
}

/// Body of the exported `urom_plugin_get_version`.
///
/// # Safety
/// `out` is NULL or points to a writable `u64`.
pub unsafe fn get_version<P: Plugin>(out: *mut u64) -> doca_error_t {
    if out.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    // SAFETY: caller contract.
    unsafe { out.write(P::VERSION) };
    DOCA_SUCCESS
}

/// The plugin state behind a worker ctx, or the status to return.
///
/// # Safety
/// `ctx` is NULL or the worker's live ctx whose `plugin_ctx` is NULL or was set by
/// `open::<P>` (the worker never mixes plugins' ctxs), and no other reference to the state
/// exists for the returned lifetime (calls are single-threaded and not re-entrant).
unsafe fn state<'a, P: Plugin>(ctx: *mut urom_worker_ctx) -> Result<&'a mut State<P>, doca_error_t> {
    if ctx.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: caller contract: `ctx` is live; reading one field through the raw pointer.
    let p = unsafe { (*ctx).plugin_ctx }.cast::<State<P>>();
    if p.is_null() {
        return Err(DOCA_ERROR_BAD_STATE);
    }
    // SAFETY: `p` came from `Box::into_raw` in `open::<P>` and is not yet freed (close
    // resets it to NULL); exclusivity is the caller's contract.
    Ok(unsafe { &mut *p })
}

unsafe extern "C" fn open<P: Plugin>(ctx: *mut urom_worker_ctx) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        if ctx.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the worker's ctx is live for the call.
        let wctx = unsafe { WorkerCtx::from_raw(ctx) };
        match P::open(&wctx) {
            Ok(plugin) => {
                let state = Box::new(State { plugin, out: Notifications::new() });
                // SAFETY: `ctx` is live; the box is reclaimed by `close::<P>`.
                unsafe { (*ctx).plugin_ctx = Box::into_raw(state).cast::<c_void>() };
                DOCA_SUCCESS
            }
            Err(s) => s.raw(),
        }
    })
}

unsafe extern "C" fn close<P: Plugin>(ctx: *mut urom_worker_ctx) {
    guard((), || {
        if ctx.is_null() {
            return;
        }
        // SAFETY: `ctx` is live; taking the pointer out first means a second close finds
        // NULL instead of freeing twice.
        let p = unsafe { ptr::replace(ptr::addr_of_mut!((*ctx).plugin_ctx), ptr::null_mut()) }.cast::<State<P>>();
        if !p.is_null() {
            // SAFETY: `p` came from `Box::into_raw` in `open::<P>` and is dropped once.
            drop(unsafe { Box::from_raw(p) });
        }
    })
}

unsafe extern "C" fn addr<P: Plugin>(ctx: *mut urom_worker_ctx, out: *mut c_void, out_len: *mut usize) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        // SAFETY: the worker's ctx, set by `open::<P>`; single-threaded call.
        let state = match unsafe { state::<P>(ctx) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        if out_len.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        let bytes = state.plugin.address();
        let Ok(len32) = u32::try_from(bytes.len()) else { return DOCA_ERROR_TOO_BIG };
        let needed = FRAME_HEADER_LEN + bytes.len();
        // SAFETY: `out_len` is non-NULL and the worker's in/out length.
        let room = unsafe { *out_len };
        if room < needed || out.is_null() {
            // SAFETY: as above.
            unsafe { *out_len = needed };
            return DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the worker provides `room >= needed` writable bytes at `out`, which cannot
        // overlap the plugin's own address bytes.
        unsafe {
            let dst = out.cast::<u8>();
            ptr::copy_nonoverlapping(len32.to_le_bytes().as_ptr(), dst, FRAME_HEADER_LEN);
            ptr::copy_nonoverlapping(bytes.as_ptr(), dst.add(FRAME_HEADER_LEN), bytes.len());
            *out_len = needed;
        }
        DOCA_SUCCESS
    })
}

unsafe extern "C" fn worker_cmd<P: Plugin>(ctx: *mut urom_worker_ctx, cmd_list: *mut ucs_list_link) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        // SAFETY: the worker's ctx, set by `open::<P>`; single-threaded call.
        let state = match unsafe { state::<P>(ctx) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        if cmd_list.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the worker's ctx is live for the call.
        let wctx = unsafe { WorkerCtx::from_raw(ctx) };
        // SAFETY: `cmd_list` is the worker's list of live, malloc'd `urom_worker_cmd_desc`s.
        while let Some(link) = unsafe { list::pop_front(cmd_list) } {
            let desc =
                link.as_ptr().wrapping_byte_sub(offset_of!(urom_worker_cmd_desc, entry)).cast::<urom_worker_cmd_desc>();
            // SAFETY: `desc` is a live descriptor the worker malloc'd with `len` payload bytes
            // after its header; the borrow ends before the `free` below.
            let cmd = unsafe {
                let wc = ptr::addr_of!((*desc).worker_cmd);
                let payload = ptr::addr_of!((*wc).plugin_cmd).cast::<u8>();
                Command {
                    plugin: (*wc).type_,
                    urom_context: (*wc).urom_context,
                    dest_id: (*desc).dest_id,
                    payload: core::slice::from_raw_parts(payload, (*wc).len as usize),
                }
            };
            let reply = cmd.reply_to();
            let before = state.out.len();
            let outcome = catch_unwind(AssertUnwindSafe(|| state.plugin.command(&wctx, cmd, &mut state.out)));
            let failed = match outcome {
                Ok(Ok(())) => None,
                Ok(Err(s)) => Some(s),
                Err(_) => {
                    log(format_args!("panic in a command handler; answering DOCA_ERROR_UNEXPECTED"));
                    Some(Status::UNEXPECTED)
                }
            };
            if let Some(s) = failed {
                state.out.truncate(before);
                state.out.push(reply.error(s));
            }
            // SAFETY: the ABI makes the plugin free each descriptor it takes off the list;
            // the worker allocated it with C malloc and nothing refers to it any more.
            unsafe { libc::free(desc.cast::<c_void>()) };
        }
        DOCA_SUCCESS
    })
}

/// Copies `n` into a C-malloc'd notification descriptor, or NULL when out of memory.
fn alloc_notif(n: &Notification) -> *mut urom_worker_notif_desc {
    let body_off = offset_of!(urom_worker_notif_desc, worker_notif) + offset_of!(urom_worker_notify, plugin_notif);
    let Some(size) = body_off.checked_add(n.body.len()) else { return ptr::null_mut() };
    // SAFETY: plain allocation; malloc's alignment suits the 8-byte-aligned descriptor.
    let desc = unsafe { libc::malloc(size.max(size_of::<urom_worker_notif_desc>())) }.cast::<urom_worker_notif_desc>();
    if desc.is_null() {
        return desc;
    }
    // SAFETY: `desc` has room for the header and `n.body.len()` bytes after it; `write`
    // because the memory is uninitialised.
    unsafe {
        desc.write(urom_worker_notif_desc {
            entry: ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() },
            dest_id: n.dest_id,
            worker_notif: urom_worker_notify {
                type_: n.plugin,
                urom_context: n.urom_context,
                len: n.body.len() as u64,
                status: n.status.raw(),
                reserved: 0,
                plugin_notif: [],
            },
        });
        ptr::copy_nonoverlapping(n.body.as_ptr(), desc.cast::<u8>().add(body_off), n.body.len());
    }
    desc
}

unsafe extern "C" fn progress<P: Plugin>(ctx: *mut urom_worker_ctx, notif_list: *mut ucs_list_link) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        // SAFETY: the worker's ctx, set by `open::<P>`; single-threaded call.
        let state = match unsafe { state::<P>(ctx) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        if notif_list.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the worker's ctx is live for the call.
        let wctx = unsafe { WorkerCtx::from_raw(ctx) };
        let before = state.out.len();
        state.out.take_progress();
        if catch_unwind(AssertUnwindSafe(|| state.plugin.progress(&wctx, &mut state.out))).is_err() {
            log(format_args!("panic in progress; the notifications it pushed are dropped"));
            state.out.truncate(before);
            return DOCA_ERROR_UNEXPECTED;
        }
        let mut appended = 0usize;
        while let Some(n) = state.out.front() {
            let desc = alloc_notif(n);
            if desc.is_null() {
                // The rest stays queued for the next call.
                return if appended == 0 { DOCA_ERROR_NO_MEMORY } else { DOCA_SUCCESS };
            }
            // SAFETY: `notif_list` is the worker's list head; `desc` is a fresh descriptor
            // whose ownership passes to the worker with the list.
            unsafe { list::push_back(notif_list, ptr::addr_of_mut!((*desc).entry)) };
            state.out.pop_front();
            appended += 1;
        }
        // Nothing to report, but work advanced: SUCCESS with an empty list.
        if appended == 0 && !state.out.take_progress() {
            DOCA_ERROR_EMPTY
        } else {
            DOCA_SUCCESS
        }
    })
}

/// Body of the exported `urom_plugin_soft_arm` (soft-only; see [`Plugin::arm`]).
///
/// # Safety
/// `ctx` is NULL or the worker's live ctx of a `P` (as for every entry point); `fd` is NULL or
/// points to a writable `c_int`.
pub unsafe extern "C" fn soft_arm<P: Plugin>(ctx: *mut urom_worker_ctx, fd: *mut core::ffi::c_int) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        // SAFETY: the worker's ctx, set by `open::<P>`; single-threaded call.
        let state = match unsafe { state::<P>(ctx) } {
            Ok(s) => s,
            Err(e) => return e,
        };
        if fd.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        // Answers queued in the SDK go out at the next progress: that is work now.
        if !state.out.is_empty() {
            return DOCA_ERROR_AGAIN;
        }
        // SAFETY: the worker's ctx is live for the call.
        let wctx = unsafe { WorkerCtx::from_raw(ctx) };
        match state.plugin.arm(&wctx) {
            crate::Arm::Sleep(f) if f >= 0 => {
                // SAFETY: checked non-NULL; writable by the caller's contract.
                unsafe { fd.write(f) };
                DOCA_SUCCESS
            }
            crate::Arm::Busy => DOCA_ERROR_AGAIN,
            crate::Arm::Idle => {
                // SAFETY: checked non-NULL; writable by the caller's contract.
                unsafe { fd.write(-1) };
                DOCA_SUCCESS
            }
            crate::Arm::Sleep(_) | crate::Arm::Unsupported => DOCA_ERROR_NOT_SUPPORTED,
        }
    })
}

unsafe extern "C" fn notif_pack<P: Plugin>(
    notif: *mut urom_worker_notify,
    packed_len: *mut usize,
    packed: *mut c_void,
) -> doca_error_t {
    guard(DOCA_ERROR_UNEXPECTED, || {
        if notif.is_null() || packed_len.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: `notif` is a notification this SDK allocated (see `alloc_notif`), with
        // `len` body bytes after its header; `packed_len` is the worker's in/out length.
        let (hdr, body, room) = unsafe {
            let body =
                core::slice::from_raw_parts(ptr::addr_of!((*notif).plugin_notif).cast::<u8>(), (*notif).len as usize);
            (&*notif, body, *packed_len)
        };
        // The packed form is DOCA's: the notification header, then the plugin's packed body
        // (`Plugin::pack`). The worker strips the header before the host sees it.
        if room < UROM_NOTIFY_HEADER_LEN {
            return DOCA_ERROR_TOO_BIG;
        }
        if packed.is_null() {
            return DOCA_ERROR_INVALID_VALUE;
        }
        // SAFETY: the worker provides `room` writable bytes at `packed`, distinct from the
        // notification.
        let out = unsafe { core::slice::from_raw_parts_mut(packed.cast::<u8>(), room) };
        let (head, rest) = out.split_at_mut(UROM_NOTIFY_HEADER_LEN);
        match P::pack(body, rest) {
            Ok(n) if n <= rest.len() => {
                // The header, with `len` the packed body's length.
                let mut tmp = [0u8; UROM_NOTIFY_HEADER_LEN];
                if urom_notify_pack(hdr, &[], &mut tmp).is_none() {
                    return DOCA_ERROR_UNEXPECTED;
                }
                tmp[16..24].copy_from_slice(&(n as u64).to_ne_bytes());
                head.copy_from_slice(&tmp);
                // SAFETY: as above.
                unsafe { *packed_len = UROM_NOTIFY_HEADER_LEN + n };
                DOCA_SUCCESS
            }
            Ok(_) => DOCA_ERROR_UNEXPECTED,
            Err(s) => s.raw(),
        }
    })
}

/// Reads an address framed by the `addr` trampoline.
///
/// # Safety
/// `p` points to a framed address (`u32` LE length + that many bytes) that stays unchanged
/// for the returned lifetime.
pub(crate) unsafe fn read_framed_addr<'a>(p: *const u8) -> Result<&'a [u8], Status> {
    let mut len = [0u8; FRAME_HEADER_LEN];
    // SAFETY: caller contract: the frame header is readable (no alignment assumed).
    unsafe { ptr::copy_nonoverlapping(p, len.as_mut_ptr(), FRAME_HEADER_LEN) };
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAMED_ADDR {
        return Err(Status::UNEXPECTED);
    }
    // SAFETY: caller contract: `len` bytes follow the header.
    Ok(unsafe { core::slice::from_raw_parts(p.add(FRAME_HEADER_LEN), len) })
}

/// A slice over bytes a lookup returned.
///
/// # Safety
/// Unless `len` is 0, `p` points to `len` readable bytes that stay unchanged for the returned
/// lifetime.
pub(crate) unsafe fn lookup_slice<'a>(p: *const u8, len: usize) -> Result<&'a [u8], Status> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Status::UNEXPECTED);
    }
    // SAFETY: caller contract.
    Ok(unsafe { core::slice::from_raw_parts(p, len) })
}

#[cfg(test)]
mod tests;
