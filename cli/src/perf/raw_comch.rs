//! `comch_lat` in raw mode: the same ping-pong as the async mode, written as a C program
//! over the DOCA entry points would be (doca-sys only): one thread per side, each with its
//! own progress engine, busy-progressing until its callback has seen the message it waits
//! for. The callbacks record into thread-locals because each runs on the thread whose PE
//! progresses it.

use std::cell::Cell;
use std::ffi::CString;
use std::ptr;
use std::sync::mpsc;

use async_doca::{sys, Device, Result};

use super::raw::ok;
use super::raw_comch_kit::{self as kit, on_connect, on_disconnect, progress_until, start, stop};
use super::stats::{timed, Report, Samples};
use super::Params;

thread_local! {
    /// Messages received by this thread's context.
    static RECVD: Cell<u64> = const { Cell::new(0) };
    /// Send tasks completed (successfully or not) on this thread.
    static SENT: Cell<u64> = const { Cell::new(0) };
}

/// Clears this thread's counters (see `kit::reset`).
fn reset_counters() {
    kit::reset();
    RECVD.with(|r| r.set(0));
    SENT.with(|s| s.set(0));
}

unsafe extern "C" fn on_sent(task: *mut sys::doca_comch_task_send, _ud: sys::doca_data, _cud: sys::doca_data) {
    // SAFETY: the task is ours inside its callback; it is freed once, here.
    unsafe {
        let t = sys::doca_comch_task_send_as_task(task);
        let status = sys::doca_task_get_status(t);
        if status != sys::DOCA_SUCCESS {
            kit::failed(status);
        }
        sys::doca_task_free(t);
    }
    SENT.with(|s| s.set(s.get() + 1));
}

unsafe extern "C" fn on_recv(
    _ev: *mut sys::doca_comch_event_msg_recv,
    _buf: *mut u8,
    _len: u32,
    _conn: *mut sys::doca_comch_connection,
) {
    RECVD.with(|r| r.set(r.get() + 1));
}

/// The echoing side: serves `total` messages of `size` bytes, then waits for `client_done`.
fn server(
    dev: Device,
    name: CString,
    size: usize,
    total: u64,
    ready: mpsc::Sender<()>,
    client_done: mpsc::Receiver<()>,
) -> Result<()> {
    reset_counters();
    let d = dev.as_ptr();
    let msg = vec![0xa5u8; size];
    kit::with_pe(|pe| {
        let mut s = ptr::null_mut();
        // SAFETY: the C sequence of NVIDIA's Comch server samples on this thread; every object is
        // created here, checked through its status, and destroyed below.
        unsafe {
            let r = (|| -> Result<()> {
                ok(sys::doca_comch_server_create(d, ptr::null_mut(), name.as_ptr(), &mut s), "server_create")?;
                ok(sys::doca_comch_server_set_max_msg_size(s, size as u32), "server max msg")?;
                ok(sys::doca_comch_server_task_send_set_conf(s, Some(on_sent), Some(on_sent), 16), "server send conf")?;
                ok(sys::doca_comch_server_event_msg_recv_register(s, Some(on_recv)), "server recv register")?;
                ok(
                    sys::doca_comch_server_event_connection_status_changed_register(
                        s,
                        Some(on_connect),
                        Some(on_disconnect),
                    ),
                    "server connection register",
                )?;
                let ctx = sys::doca_comch_server_as_ctx(s);
                ok(sys::doca_pe_connect_ctx(pe, ctx), "server connect pe")?;
                ok(sys::doca_ctx_start(ctx), "server start")?;
                let _ = ready.send(());
                progress_until(pe, "the client's connection", || !kit::server_connection().is_null())?;
                let conn = kit::server_connection();
                for i in 0..total {
                    progress_until(pe, "the client's message", || RECVD.with(Cell::get) > i)?;
                    let mut t = ptr::null_mut();
                    ok(
                        sys::doca_comch_server_task_send_alloc_init(s, conn, msg.as_ptr().cast(), size as u32, &mut t),
                        "server send alloc",
                    )?;
                    ok(sys::doca_task_submit(sys::doca_comch_task_send_as_task(t)), "server send submit")?;
                }
                progress_until(pe, "the last echo", || SENT.with(Cell::get) == total)?;
                kit::wait_client(&client_done, super::comch::TEST)?;
                stop(pe, ctx)
            })();
            if !s.is_null() {
                sys::doca_comch_server_destroy(s);
            }
            r
        }
    })
}

/// The timing side: sends, waits for the echo; returns the samples.
fn client(dev: Device, name: CString, p: &Params) -> Result<(Samples, std::time::Duration)> {
    reset_counters();
    let d = dev.as_ptr();
    let size = p.size.max(1);
    let msg = vec![0x5au8; size];
    kit::with_pe(|pe| {
        let mut c = ptr::null_mut();
        // SAFETY: as in `server`, for NVIDIA's client sequence.
        unsafe {
            let r = (|| -> Result<(Samples, std::time::Duration)> {
                ok(sys::doca_comch_client_create(d, name.as_ptr(), &mut c), "client_create")?;
                ok(sys::doca_comch_client_set_max_msg_size(c, size as u32), "client max msg")?;
                ok(sys::doca_comch_client_task_send_set_conf(c, Some(on_sent), Some(on_sent), 16), "client send conf")?;
                ok(sys::doca_comch_client_event_msg_recv_register(c, Some(on_recv)), "client recv register")?;
                let ctx = sys::doca_comch_client_as_ctx(c);
                start(pe, ctx, "client start")?;
                let mut conn = ptr::null_mut();
                ok(sys::doca_comch_client_get_connection(c, &mut conn), "client connection")?;
                let timed_run = timed(p.warmup, p.iters, 2.0, |i| {
                    let mut t = ptr::null_mut();
                    ok(
                        sys::doca_comch_client_task_send_alloc_init(c, conn, msg.as_ptr().cast(), size as u32, &mut t),
                        "client send alloc",
                    )?;
                    ok(sys::doca_task_submit(sys::doca_comch_task_send_as_task(t)), "client send submit")?;
                    progress_until(pe, "the echo", || RECVD.with(Cell::get) > i)
                })?;
                progress_until(pe, "the last send", || SENT.with(Cell::get) == p.warmup + p.iters)?;
                stop(pe, ctx)?;
                Ok(timed_run)
            })();
            if !c.is_null() {
                sys::doca_comch_client_destroy(c);
            }
            r
        }
    })
}

/// Runs the raw ping-pong: server on one CPU, client (timed) on the other.
pub fn run(p: &Params) -> Result<Report> {
    kit::run(super::comch::TEST, p, server, client)
}
