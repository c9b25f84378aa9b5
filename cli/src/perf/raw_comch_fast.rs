//! `comch_fast_lat` in raw mode: the same ping-pong as the async mode, written as a C program
//! over the DOCA entry points would be (doca-sys only): one thread per side, each with one
//! progress engine for its server or client, consumer and producer, busy-progressing until
//! its callbacks have seen what it waits for. Each side allocates its tasks once (two
//! post-receives, one send) and submits them again, as DOCA's task reuse allows; it keeps
//! two buffers posted and posts one again only after its next send went out, in the order
//! of the async mode (`comch_fast.rs`).

use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::CString;
use std::ptr;
use std::sync::mpsc;

use async_doca::{sys, Device, Result};

use super::raw::{ok, Shared};
use super::raw_comch_kit::{self as kit, on_connect, on_disconnect, progress_until, start, stop};
use super::stats::{timed, Report, Samples};
use super::Params;

/// Buffers each side keeps posted (as the async mode).
const POSTED: usize = 2;

thread_local! {
    /// Post-receive tasks completed successfully on this thread.
    static RECVD: Cell<u64> = const { Cell::new(0) };
    /// Send tasks completed successfully on this thread.
    static SENT: Cell<u64> = const { Cell::new(0) };
    /// Set once this side stops its fast-path contexts: completions then free their task
    /// (flushed receives), and their status is not a failure.
    static CLOSING: Cell<bool> = const { Cell::new(false) };
    /// The peer's consumer id (set by the new-consumer callback).
    static PEER: Cell<u32> = const { Cell::new(0) };
}

/// Clears this thread's state (see `kit::reset`).
fn reset() {
    kit::reset();
    RECVD.with(|c| c.set(0));
    SENT.with(|c| c.set(0));
    CLOSING.with(|c| c.set(false));
    PEER.with(|c| c.set(0));
}

/// Counts a completion in `count`, or records its failure; while closing, frees the task.
fn completed(task: *mut sys::doca_task, count: &'static std::thread::LocalKey<Cell<u64>>) {
    // SAFETY: the task is ours inside its callback.
    let status = unsafe { sys::doca_task_get_status(task) };
    if CLOSING.with(Cell::get) {
        // SAFETY: as above; not submitted again once closing, so freed once.
        unsafe { sys::doca_task_free(task) };
    } else if status == sys::DOCA_SUCCESS {
        count.with(|c| c.set(c.get() + 1));
    } else {
        kit::failed(status);
    }
}

unsafe extern "C" fn on_recv(
    task: *mut sys::doca_comch_consumer_task_post_recv,
    _ud: sys::doca_data,
    _cud: sys::doca_data,
) {
    // SAFETY: a live post-receive task inside its callback.
    completed(unsafe { sys::doca_comch_consumer_task_post_recv_as_task(task) }, &RECVD);
}

unsafe extern "C" fn on_sent(task: *mut sys::doca_comch_producer_task_send, _ud: sys::doca_data, _cud: sys::doca_data) {
    // SAFETY: a live send task inside its callback.
    completed(unsafe { sys::doca_comch_producer_task_send_as_task(task) }, &SENT);
}

unsafe extern "C" fn on_new_consumer(
    _ev: *mut sys::doca_comch_event_consumer,
    _conn: *mut sys::doca_comch_connection,
    id: u32,
) {
    PEER.with(|p| p.set(id));
}

unsafe extern "C" fn on_expired_consumer(
    _ev: *mut sys::doca_comch_event_consumer,
    _conn: *mut sys::doca_comch_connection,
    _id: u32,
) {
}

/// The message send tasks' callback (the server and client need their send tasks configured
/// to start; this test sends no message).
unsafe extern "C" fn on_msg_sent(task: *mut sys::doca_comch_task_send, _ud: sys::doca_data, _cud: sys::doca_data) {
    // SAFETY: the task is ours inside its callback; freed once, here.
    unsafe { sys::doca_task_free(sys::doca_comch_task_send_as_task(task)) };
}

unsafe extern "C" fn on_msg(
    _ev: *mut sys::doca_comch_event_msg_recv,
    _buf: *mut u8,
    _len: u32,
    _conn: *mut sys::doca_comch_connection,
) {
}

/// One side's fast path on a connection: its memory (two receive buffers, then the message;
/// shared memory on the soft provider, as the runtime's `Device::alloc` gives, so that a
/// producer copies into it directly), mmap and inventory, its consumer with a post-receive
/// task per buffer, its producer with one send task, and the order of the posted buffers.
struct Fast {
    pe: *mut sys::doca_pe,
    /// Kept alive under the mmap (and dropped after it: fields drop after `Drop::drop`).
    mem: std::mem::ManuallyDrop<Shared>,
    mmap: *mut sys::doca_mmap,
    inv: *mut sys::doca_buf_inventory,
    bufs: [*mut sys::doca_buf; POSTED + 1],
    consumer: *mut sys::doca_comch_consumer,
    producer: *mut sys::doca_comch_producer,
    recvs: [*mut sys::doca_comch_consumer_task_post_recv; POSTED],
    send: *mut sys::doca_comch_producer_task_send,
    /// Posted buffers, oldest first.
    posted: VecDeque<usize>,
    /// The buffer of the last message received, not posted again yet.
    free: Option<usize>,
    /// Sends submitted.
    sends: u64,
}

impl Fast {
    /// Creates and starts the fast path of `conn` on `pe` (this thread's), posts every
    /// buffer, and waits for the peer's consumer. Whatever was made is destroyed by `Drop`.
    fn open(pe: *mut sys::doca_pe, dev: &Device, conn: *mut sys::doca_comch_connection, size: usize) -> Result<Fast> {
        let mut f = Fast {
            pe,
            mem: std::mem::ManuallyDrop::new(Shared::new((POSTED + 1) * size)?),
            mmap: ptr::null_mut(),
            inv: ptr::null_mut(),
            bufs: [ptr::null_mut(); POSTED + 1],
            consumer: ptr::null_mut(),
            producer: ptr::null_mut(),
            recvs: [ptr::null_mut(); POSTED],
            send: ptr::null_mut(),
            posted: VecDeque::with_capacity(POSTED),
            free: None,
            sends: 0,
        };
        let (base, len) = (f.mem.ptr, (POSTED + 1) * size);
        // SAFETY: NVIDIA's fast-path sequence on this thread: every object is created here
        // and checked, over memory `f` keeps until its `Drop` destroyed them.
        unsafe {
            ok(sys::doca_mmap_create(&mut f.mmap), "mmap create")?;
            ok(sys::doca_mmap_set_memrange(f.mmap, base.cast(), len), "mmap range")?;
            let access = sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | sys::DOCA_ACCESS_FLAG_PCI_READ_WRITE;
            ok(sys::doca_mmap_set_permissions(f.mmap, access), "mmap permissions")?;
            ok(sys::doca_mmap_add_dev(f.mmap, dev.as_ptr()), "mmap add dev")?;
            ok(sys::doca_mmap_start(f.mmap), "mmap start")?;
            ok(sys::doca_buf_inventory_create(POSTED + 1, &mut f.inv), "inventory create")?;
            ok(sys::doca_buf_inventory_start(f.inv), "inventory start")?;
            for (k, b) in f.bufs.iter_mut().enumerate() {
                // The receive buffers start empty; the message (the last) carries its bytes.
                let at = base.add(k * size).cast();
                let data = if k == POSTED { size } else { 0 };
                ok(sys::doca_buf_inventory_buf_get_by_args(f.inv, f.mmap, at, size, at, data, b), "buf")?;
            }
            ok(sys::doca_comch_consumer_create(conn, f.mmap, &mut f.consumer), "consumer create")?;
            ok(
                sys::doca_comch_consumer_task_post_recv_set_conf(
                    f.consumer,
                    Some(on_recv),
                    Some(on_recv),
                    POSTED as u32,
                ),
                "consumer conf",
            )?;
            start(pe, sys::doca_comch_consumer_as_ctx(f.consumer), "consumer start")?;
            ok(sys::doca_comch_producer_create(conn, &mut f.producer), "producer create")?;
            ok(
                sys::doca_comch_producer_task_send_set_conf(f.producer, Some(on_sent), Some(on_sent), 1),
                "producer conf",
            )?;
            start(pe, sys::doca_comch_producer_as_ctx(f.producer), "producer start")?;
            for k in 0..POSTED {
                ok(
                    sys::doca_comch_consumer_task_post_recv_alloc_init(f.consumer, f.bufs[k], &mut f.recvs[k]),
                    "post-receive alloc",
                )?;
                f.free = Some(k);
                f.post_again()?;
            }
            progress_until(pe, "the peer's consumer", || PEER.with(Cell::get) != 0)?;
            let peer = PEER.with(Cell::get);
            ok(
                sys::doca_comch_producer_task_send_alloc_init(
                    f.producer,
                    f.bufs[POSTED],
                    ptr::null_mut(),
                    0,
                    peer,
                    &mut f.send,
                ),
                "send alloc",
            )?;
        }
        Ok(f)
    }

    /// Submits the send again once its last one completed; with no buffer posted by the
    /// peer yet (AGAIN) it progresses and tries again.
    fn send(&mut self) -> Result<()> {
        let sends = self.sends;
        progress_until(self.pe, "the last send", || SENT.with(Cell::get) == sends)?;
        loop {
            // SAFETY: our send task, not in flight (its last completion was seen above).
            match unsafe { sys::doca_task_submit(sys::doca_comch_producer_task_send_as_task(self.send)) } {
                sys::DOCA_ERROR_AGAIN => {
                    // SAFETY: a live PE of this thread.
                    unsafe { sys::doca_pe_progress(self.pe) };
                }
                rc => {
                    ok(rc, "send submit")?;
                    self.sends += 1;
                    return Ok(());
                }
            }
        }
    }

    /// Posts the free buffer again (its task, its data emptied).
    fn post_again(&mut self) -> Result<()> {
        if let Some(k) = self.free.take() {
            // SAFETY: buffer `k` and its task are ours: its last receive completed.
            unsafe {
                ok(sys::doca_buf_reset_data_len(self.bufs[k]), "buf reset")?;
                ok(sys::doca_task_submit(sys::doca_comch_consumer_task_post_recv_as_task(self.recvs[k])), "post")?;
            }
            self.posted.push_back(k);
        }
        Ok(())
    }

    /// Waits for message `n` (counting from 0): its buffer, the oldest posted, is free then.
    fn recv(&mut self, n: u64) -> Result<()> {
        progress_until(self.pe, "a message", || RECVD.with(Cell::get) > n)?;
        self.free = self.posted.pop_front();
        Ok(())
    }

    /// Stops the producer and the consumer (flushing its posted receives) once the last
    /// send completed.
    fn close(&mut self) -> Result<()> {
        let sends = self.sends;
        progress_until(self.pe, "the last send", || SENT.with(Cell::get) == sends)?;
        // SAFETY: tasks not in flight are ours: the send (completed above) and the
        // receives of buffers not posted; each is freed once and forgotten.
        unsafe {
            sys::doca_task_free(sys::doca_comch_producer_task_send_as_task(self.send));
            self.send = ptr::null_mut();
            for k in 0..POSTED {
                if !self.posted.contains(&k) {
                    sys::doca_task_free(sys::doca_comch_consumer_task_post_recv_as_task(self.recvs[k]));
                }
                self.recvs[k] = ptr::null_mut();
            }
        }
        // The posted receives come back flushed, and their callback frees them.
        CLOSING.with(|c| c.set(true));
        // SAFETY: live contexts of this thread.
        unsafe {
            stop(self.pe, sys::doca_comch_producer_as_ctx(self.producer))?;
            stop(self.pe, sys::doca_comch_consumer_as_ctx(self.consumer))
        }
    }
}

impl Drop for Fast {
    fn drop(&mut self) {
        // SAFETY: objects created by `open` on this thread, destroyed once, contexts first
        // (stopped by `close`), then the descriptors, the inventory and the mmap. A context
        // that will not be destroyed (a failed `open` or `close` left it running) may still
        // have receives posted into the memory, which a peer's producer writes: then the
        // memory is leaked rather than freed under it.
        unsafe {
            let mut gone = true;
            if !self.producer.is_null() {
                gone &= sys::doca_comch_producer_destroy(self.producer) == sys::DOCA_SUCCESS;
            }
            if !self.consumer.is_null() {
                gone &= sys::doca_comch_consumer_destroy(self.consumer) == sys::DOCA_SUCCESS;
            }
            if gone {
                // Taken once, here; freed last, after the descriptors and the mmap over it.
                let mem = std::mem::ManuallyDrop::take(&mut self.mem);
                for b in self.bufs.into_iter().filter(|b| !b.is_null()) {
                    sys::doca_buf_dec_refcount(b, ptr::null_mut());
                }
                if !self.inv.is_null() {
                    sys::doca_buf_inventory_destroy(self.inv);
                }
                if !self.mmap.is_null() {
                    sys::doca_mmap_destroy(self.mmap);
                }
                drop(mem);
            }
        }
    }
}

/// The echoing side: serves `total` messages, then waits for `client_done`.
fn server(
    dev: Device,
    name: CString,
    size: usize,
    total: u64,
    ready: mpsc::Sender<()>,
    client_done: mpsc::Receiver<()>,
) -> Result<()> {
    reset();
    kit::with_pe(|pe| {
        let mut s = ptr::null_mut();
        // SAFETY: the C sequence of NVIDIA's Comch server samples on this thread; every object is
        // created here, checked through its status, and destroyed below.
        unsafe {
            let r = (|| -> Result<()> {
                ok(
                    sys::doca_comch_server_create(dev.as_ptr(), ptr::null_mut(), name.as_ptr(), &mut s),
                    "server_create",
                )?;
                ok(
                    sys::doca_comch_server_task_send_set_conf(s, Some(on_msg_sent), Some(on_msg_sent), 1),
                    "server send conf",
                )?;
                ok(sys::doca_comch_server_event_msg_recv_register(s, Some(on_msg)), "server recv register")?;
                ok(
                    sys::doca_comch_server_event_connection_status_changed_register(
                        s,
                        Some(on_connect),
                        Some(on_disconnect),
                    ),
                    "server connection register",
                )?;
                ok(
                    sys::doca_comch_server_event_consumer_register(s, Some(on_new_consumer), Some(on_expired_consumer)),
                    "server consumer register",
                )?;
                let ctx = sys::doca_comch_server_as_ctx(s);
                ok(sys::doca_pe_connect_ctx(pe, ctx), "server connect pe")?;
                ok(sys::doca_ctx_start(ctx), "server start")?;
                let _ = ready.send(());
                progress_until(pe, "the client's connection", || !kit::server_connection().is_null())?;
                let mut fast = Fast::open(pe, &dev, kit::server_connection(), size)?;
                for i in 0..total {
                    fast.recv(i)?;
                    fast.send()?;
                    if i + 1 < total {
                        fast.post_again()?;
                    }
                }
                fast.close()?;
                kit::wait_client(&client_done, super::comch_fast::TEST)?;
                drop(fast);
                stop(pe, ctx)
            })();
            if !s.is_null() {
                sys::doca_comch_server_destroy(s);
            }
            r
        }
    })
}

/// The timing side: sends, posts the buffer of the previous echo, waits for this one.
fn client(dev: Device, name: CString, p: &Params) -> Result<(Samples, std::time::Duration)> {
    reset();
    let size = p.size.max(1);
    let total = p.warmup + p.iters;
    kit::with_pe(|pe| {
        let mut c = ptr::null_mut();
        // SAFETY: as in `server`, for NVIDIA's client sequence.
        unsafe {
            let r = (|| -> Result<(Samples, std::time::Duration)> {
                ok(sys::doca_comch_client_create(dev.as_ptr(), name.as_ptr(), &mut c), "client_create")?;
                ok(
                    sys::doca_comch_client_task_send_set_conf(c, Some(on_msg_sent), Some(on_msg_sent), 1),
                    "client send conf",
                )?;
                ok(sys::doca_comch_client_event_msg_recv_register(c, Some(on_msg)), "client recv register")?;
                ok(
                    sys::doca_comch_client_event_consumer_register(c, Some(on_new_consumer), Some(on_expired_consumer)),
                    "client consumer register",
                )?;
                let ctx = sys::doca_comch_client_as_ctx(c);
                start(pe, ctx, "client start")?;
                let mut conn = ptr::null_mut();
                ok(sys::doca_comch_client_get_connection(c, &mut conn), "client connection")?;
                let mut fast = Fast::open(pe, &dev, conn, size)?;
                let timed_run = timed(p.warmup, p.iters, 2.0, |i| {
                    fast.send()?;
                    if i + 1 < total {
                        fast.post_again()?;
                    }
                    fast.recv(i)
                })?;
                fast.close()?;
                drop(fast);
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
    kit::run(super::comch_fast::TEST, p, server, client)
}
