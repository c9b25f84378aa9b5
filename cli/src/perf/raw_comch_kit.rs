//! What the raw Comch tests (`raw_comch.rs`: messages, `raw_comch_fast.rs`: the fast path)
//! share: a server thread and a client thread, each with its own progress engine and
//! busy-progressing it as a C program over doca-sys would, the thread-locals their callbacks
//! record into (each callback runs on the thread whose PE progresses it), and the harness
//! that runs the pair and merges their outcomes.

use std::cell::Cell;
use std::ffi::CString;
use std::ptr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::{sys, Device, Error, ErrorKind, Result};

use super::cpu::two_cpus;
use super::raw::ok;
use super::stats::{Report, Run, Samples};
use super::{Params, PEER_TIMEOUT};

/// A test's echoing side: (device, server name, message size, messages to serve, its
/// "started" sender, the client's "done" receiver).
pub(super) type Server = fn(Device, CString, usize, u64, mpsc::Sender<()>, mpsc::Receiver<()>) -> Result<()>;
/// A test's timing side: (device, server name, parameters) to its samples and elapsed time.
pub(super) type Client = fn(Device, CString, &Params) -> Result<(Samples, Duration)>;

thread_local! {
    /// The first failed task's status on this thread.
    static FAILED: Cell<sys::doca_error_t> = const { Cell::new(sys::DOCA_SUCCESS) };
    /// The server's connection to its client (set by the connect callback).
    static CONN: Cell<*mut sys::doca_comch_connection> = const { Cell::new(ptr::null_mut()) };
}

/// Clears this thread's shared state: each side starts from zero (`--rounds` reuses the
/// client's thread, and a state left from an earlier round ended the next one's waits).
pub(super) fn reset() {
    FAILED.with(|f| f.set(sys::DOCA_SUCCESS));
    CONN.with(|c| c.set(ptr::null_mut()));
}

/// Records a task's failure (the first one is reported by [`progress_until`]).
pub(super) fn failed(status: sys::doca_error_t) {
    if FAILED.with(Cell::get) == sys::DOCA_SUCCESS {
        FAILED.with(|f| f.set(status));
    }
}

/// The server's connection, once its connect callback ran (null before).
pub(super) fn server_connection() -> *mut sys::doca_comch_connection {
    CONN.with(Cell::get)
}

pub(super) unsafe extern "C" fn on_connect(
    _ev: *mut sys::doca_comch_event_connection_status_changed,
    conn: *mut sys::doca_comch_connection,
    ok: u8,
) {
    if ok == 1 {
        CONN.with(|c| c.set(conn));
    }
}

pub(super) unsafe extern "C" fn on_disconnect(
    _ev: *mut sys::doca_comch_event_connection_status_changed,
    _conn: *mut sys::doca_comch_connection,
    _ok: u8,
) {
}

/// Progresses `pe` until `done()` holds; TimedOut after [`PEER_TIMEOUT`] (the clock is read
/// every 4096 rounds only: not once per message), or the first failed task's status.
pub(super) fn progress_until(pe: *mut sys::doca_pe, what: &str, mut done: impl FnMut() -> bool) -> Result<()> {
    let mut deadline = None;
    let mut spins = 0u32;
    while !done() {
        // SAFETY: a live PE of this thread.
        unsafe { sys::doca_pe_progress(pe) };
        spins = spins.wrapping_add(1);
        if spins % 4096 == 0 && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT) {
            return Err(Error::new(ErrorKind::TimedOut, format!("comch raw: {what}")));
        }
    }
    ok(FAILED.with(Cell::get), "comch raw: a task")
}

pub(super) fn ctx_state(ctx: *mut sys::doca_ctx) -> sys::doca_ctx_states {
    let mut st = sys::DOCA_CTX_STATE_IDLE;
    // SAFETY: a live ctx and a valid out-pointer.
    unsafe { sys::doca_ctx_get_state(ctx, &mut st) };
    st
}

/// Connects `ctx` to `pe`, starts it and progresses until it is RUNNING.
pub(super) fn start(pe: *mut sys::doca_pe, ctx: *mut sys::doca_ctx, what: &'static str) -> Result<()> {
    // SAFETY: a live, configured ctx and a PE of this thread.
    unsafe {
        ok(sys::doca_pe_connect_ctx(pe, ctx), what)?;
        let rc = sys::doca_ctx_start(ctx);
        if rc != sys::DOCA_ERROR_IN_PROGRESS {
            ok(rc, what)?;
        }
    }
    progress_until(pe, what, || ctx_state(ctx) == sys::DOCA_CTX_STATE_RUNNING)
}

/// Stops `ctx` and progresses `pe` until it is IDLE.
pub(super) fn stop(pe: *mut sys::doca_pe, ctx: *mut sys::doca_ctx) -> Result<()> {
    // SAFETY: a live, started ctx of this thread.
    let rc = unsafe { sys::doca_ctx_stop(ctx) };
    if rc != sys::DOCA_ERROR_IN_PROGRESS {
        ok(rc, "doca_ctx_stop")?;
    }
    progress_until(pe, "stop", || ctx_state(ctx) == sys::DOCA_CTX_STATE_IDLE)
}

/// Runs one raw Comch ping-pong `test`: `server` on a thread pinned to the second CPU (it
/// says it started through its sender, and waits on its receiver until the client is done
/// before it tears down), `client` (timed) on this thread pinned to the first. Latency is
/// half the round trip. When both sides failed, both errors are told: each side's failure
/// makes the other wait for it and time out, and the cause is usually the one that is not a
/// timeout.
pub(super) fn run(test: &'static str, p: &Params, server: Server, client: Client) -> Result<Report> {
    let size = p.size.max(1);
    let total = p.warmup + p.iters;
    let (cpu_a, cpu_b) = two_cpus()?;
    let name = CString::new(format!("perf-{test}-raw-{}", std::process::id()))
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
        .map_err(|_| Error::new(ErrorKind::TimedOut, format!("{test} raw: the server did not start")))
        .and_then(|()| {
            let _pinned = super::cpu::pinned(cpu_a)?;
            client(dev, name, p)
        });
    let _ = done_tx.send(()); // the server may have failed and gone already
    let served =
        server_side.join().map_err(|_| Error::new(ErrorKind::Other, format!("{test} raw: the server panicked")))?;
    let (samples, elapsed) = match (served, result) {
        (Ok(()), Ok(r)) => r,
        (Err(e), Ok(_)) | (Ok(()), Err(e)) => return Err(e),
        (Err(s), Err(c)) => return Err(Error::new(c.kind(), format!("{test} raw: client: {c}; server: {s}"))),
    };
    Ok(Run { test, mode: "raw", size, procs: 1 }.report(samples, 2 * p.iters, elapsed))
}

/// Runs `body` with a progress engine of this thread, destroyed after it.
pub(super) fn with_pe<R>(body: impl FnOnce(*mut sys::doca_pe) -> Result<R>) -> Result<R> {
    let mut pe = ptr::null_mut();
    // SAFETY: a valid out-pointer.
    ok(unsafe { sys::doca_pe_create(&mut pe) }, "doca_pe_create")?;
    let r = body(pe);
    // SAFETY: created above; its contexts were destroyed by `body`.
    unsafe { sys::doca_pe_destroy(pe) };
    r
}

/// Waits (bounded) for the client's end, on the server's side of [`run_pair`].
pub(super) fn wait_client(client_done: &mpsc::Receiver<()>, test: &str) -> Result<()> {
    client_done
        .recv_timeout(PEER_TIMEOUT)
        .map_err(|_| Error::new(ErrorKind::TimedOut, format!("{test} raw: client end")))
}
