//! `comch_lat` in raw mode: the same ping-pong as the async mode, written as a C program
//! over the DOCA entry points would be (doca-sys only): one thread per side, each with its
//! own progress engine, busy-progressing until its callback has seen the message it waits
//! for. The callbacks record into thread-locals because each runs on the thread whose PE
//! progresses it.

use std::cell::Cell;
use std::ffi::CString;
use std::ptr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::{sys, Device, Error, ErrorKind, Result};

use super::cpu::two_cpus;
use super::raw::ok;
use super::stats::{timed, Report, Run};
use super::{Params, PEER_TIMEOUT};

thread_local! {
    /// Messages received by this thread's context.
    static RECVD: Cell<u64> = const { Cell::new(0) };
    /// Send tasks completed (successfully or not) on this thread.
    static SENT: Cell<u64> = const { Cell::new(0) };
    /// The first failed send's status.
    static FAILED: Cell<sys::doca_error_t> = const { Cell::new(sys::DOCA_SUCCESS) };
    /// The server's connection to its client (set by the connect callback).
    static CONN: Cell<*mut sys::doca_comch_connection> = const { Cell::new(ptr::null_mut()) };
}

/// Clears this thread's counters: each side starts from zero. The client runs on the
/// calling thread, which `--rounds` reuses, and a count left over from an earlier round
/// made the next one stop waiting for its echoes at once.
fn reset_counters() {
    RECVD.with(|r| r.set(0));
    SENT.with(|s| s.set(0));
    FAILED.with(|f| f.set(sys::DOCA_SUCCESS));
    CONN.with(|c| c.set(ptr::null_mut()));
}

unsafe extern "C" fn on_sent(task: *mut sys::doca_comch_task_send, _ud: sys::doca_data, _cud: sys::doca_data) {
    // SAFETY: the task is ours inside its callback; it is freed once, here.
    unsafe {
        let t = sys::doca_comch_task_send_as_task(task);
        let status = sys::doca_task_get_status(t);
        if status != sys::DOCA_SUCCESS {
            FAILED.with(|f| f.set(status));
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

unsafe extern "C" fn on_connect(
    _ev: *mut sys::doca_comch_event_connection_status_changed,
    conn: *mut sys::doca_comch_connection,
    ok: u8,
) {
    if ok == 1 {
        CONN.with(|c| c.set(conn));
    }
}

unsafe extern "C" fn on_disconnect(
    _ev: *mut sys::doca_comch_event_connection_status_changed,
    _conn: *mut sys::doca_comch_connection,
    _ok: u8,
) {
}

/// Progresses `pe` until `done()` holds; TimedOut after [`PEER_TIMEOUT`] (checked every
/// 4096 rounds, so the clock stays off the fast path).
fn progress_until(pe: *mut sys::doca_pe, what: &str, mut done: impl FnMut() -> bool) -> Result<()> {
    // The deadline is set at the first look at the clock: not a clock read per message.
    let mut deadline = None;
    let mut spins = 0u32;
    while !done() {
        // SAFETY: a live PE of this thread.
        unsafe { sys::doca_pe_progress(pe) };
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT) {
            return Err(Error::new(ErrorKind::TimedOut, format!("comch_lat raw: {what}")));
        }
    }
    let f = FAILED.with(Cell::get);
    ok(f, "comch_lat raw: send")
}

fn ctx_state(ctx: *mut sys::doca_ctx) -> sys::doca_ctx_states {
    let mut st = sys::DOCA_CTX_STATE_IDLE;
    // SAFETY: a live ctx and a valid out-pointer.
    unsafe { sys::doca_ctx_get_state(ctx, &mut st) };
    st
}

/// Stops `ctx` and progresses `pe` until it is IDLE.
fn stop(pe: *mut sys::doca_pe, ctx: *mut sys::doca_ctx) -> Result<()> {
    // SAFETY: a live, started ctx of this thread.
    let rc = unsafe { sys::doca_ctx_stop(ctx) };
    if rc != sys::DOCA_ERROR_IN_PROGRESS {
        ok(rc, "doca_ctx_stop")?;
    }
    progress_until(pe, "stop", || ctx_state(ctx) == sys::DOCA_CTX_STATE_IDLE)
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
    let (mut pe, mut s) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: the C sequence of NVIDIA's Comch server samples on this thread; every object is
    // created here, checked through its status, and destroyed below.
    unsafe {
        ok(sys::doca_pe_create(&mut pe), "doca_pe_create")?;
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
            progress_until(pe, "the client's connection", || !CONN.with(Cell::get).is_null())?;
            let conn = CONN.with(Cell::get);
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
            client_done
                .recv_timeout(PEER_TIMEOUT)
                .map_err(|_| Error::new(ErrorKind::TimedOut, "comch_lat raw: client end"))?;
            stop(pe, ctx)
        })();
        if !s.is_null() {
            sys::doca_comch_server_destroy(s);
        }
        sys::doca_pe_destroy(pe);
        r
    }
}

/// The timing side: sends, waits for the echo; returns the samples.
fn client(dev: Device, name: CString, p: &Params) -> Result<(super::stats::Samples, Duration)> {
    reset_counters();
    let d = dev.as_ptr();
    let size = p.size.max(1);
    let msg = vec![0x5au8; size];
    let (mut pe, mut c) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: as in `server`, for NVIDIA's client sequence.
    unsafe {
        ok(sys::doca_pe_create(&mut pe), "doca_pe_create")?;
        let r = (|| -> Result<(super::stats::Samples, Duration)> {
            ok(sys::doca_comch_client_create(d, name.as_ptr(), &mut c), "client_create")?;
            ok(sys::doca_comch_client_set_max_msg_size(c, size as u32), "client max msg")?;
            ok(sys::doca_comch_client_task_send_set_conf(c, Some(on_sent), Some(on_sent), 16), "client send conf")?;
            ok(sys::doca_comch_client_event_msg_recv_register(c, Some(on_recv)), "client recv register")?;
            let ctx = sys::doca_comch_client_as_ctx(c);
            ok(sys::doca_pe_connect_ctx(pe, ctx), "client connect pe")?;
            let rc = sys::doca_ctx_start(ctx);
            if rc != sys::DOCA_ERROR_IN_PROGRESS {
                ok(rc, "client start")?;
            }
            progress_until(pe, "client start", || ctx_state(ctx) == sys::DOCA_CTX_STATE_RUNNING)?;
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
        sys::doca_pe_destroy(pe);
        r
    }
}

/// Runs the raw ping-pong: server on one CPU, client (timed) on the other.
pub fn run(p: &Params) -> Result<Report> {
    let (cpu_a, cpu_b) = two_cpus()?;
    let size = p.size.max(1);
    let total = p.warmup + p.iters;
    let name = CString::new(format!("perf-comch-raw-{}", std::process::id()))
        .map_err(|_| Error::new(ErrorKind::InvalidArgument, "name"))?;
    let dev = Device::open_default()?;
    let (ready_tx, ready_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let server_side = {
        let (dev, name) = (dev.clone(), name.clone());
        std::thread::spawn(move || {
            super::cpu::pin(cpu_b)?;
            server(dev, name, size, total, ready_tx, done_rx)
        })
    };
    let result = ready_rx
        .recv_timeout(PEER_TIMEOUT)
        .map_err(|_| Error::new(ErrorKind::TimedOut, "comch_lat raw: the server did not start"))
        .and_then(|()| {
            let _pinned = super::cpu::pinned(cpu_a)?;
            client(dev, name, p)
        });
    let _ = done_tx.send(()); // the server may have failed and gone already
    let served = server_side.join().map_err(|_| Error::new(ErrorKind::Other, "comch_lat raw: the server panicked"))?;
    // Either side's failure makes the other wait for it and time out: when both failed,
    // both errors are told (the cause is usually the one that is not a timeout).
    let (samples, elapsed) = match (served, result) {
        (Ok(()), Ok(r)) => r,
        (Err(e), Ok(_)) | (Ok(()), Err(e)) => return Err(e),
        (Err(s), Err(c)) => {
            return Err(Error::new(c.kind(), format!("comch_lat raw: client: {c}; server: {s}")));
        }
    };
    Ok(Run { test: super::comch::TEST, mode: "raw", size, procs: 1 }.report(samples, 2 * p.iters, elapsed))
}
