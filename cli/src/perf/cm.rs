//! Connection management and remote-net sync events:
//!
//! * `cm_connect`: connection setup time by address over many connections to one listening
//!   server. Raw: from `connect_to_addr` until both sides are established (the client's
//!   disconnect call is in the sample, not the server noticing it). Async: one whole
//!   connection life — `Rdma::connect` and the server's `request().accept()`, then the
//!   client's `disconnect` until the server's `closed()` — so it is an upper bound of the
//!   setup time, not the same measure as raw.
//! * `remote_event_add_lat`: completion latency of one remote-net `notify_add` on the peer's
//!   sync event, through a connection (a full round trip, like the other atomics).
//!
//! Both sides run in one thread (raw: two PEs progressed in turn) or on one executor
//! (async), so the numbers include both ends' processing.

use std::cell::{Cell, RefCell};
use std::ffi::CString;
use std::time::{Duration, Instant};

use async_doca::rdma::{Rdma, RemoteEvent};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::{sys, Access, Device, Error, ErrorKind, Result};

use super::raw::ok;
use super::stats::{timed, timed_async, Report, Run};
use super::{Mode, Params, PEER_TIMEOUT};

pub const CONNECT: &str = "cm_connect";
pub const REMOTE_ADD: &str = "remote_event_add_lat";

fn runtime() -> Result<async_doca::Runtime> {
    let (cpu, _) = super::cpu::two_cpus()?;
    async_doca::Runtime::builder().cpus(async_doca::CpuSet::from_cpus([cpu])?).build()
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| Error::os(e, "find a free port"))?
        .port())
}

pub fn run_connect(p: &Params) -> Result<Report> {
    match p.mode {
        Mode::Raw => raw_connect(p),
        Mode::Async => async_connect(p),
        other => Err(other.unsupported(CONNECT)),
    }
}

pub fn run_remote_add(p: &Params) -> Result<Report> {
    match p.mode {
        Mode::Raw => raw_remote_add(p),
        Mode::Async => async_remote_add(p),
        other => Err(other.unsupported(REMOTE_ADD)),
    }
}

// ---- async ----

fn async_connect(p: &Params) -> Result<Report> {
    let (warmup, iters) = (p.warmup, p.iters);
    let rt = runtime()?;
    let (samples, elapsed) = rt.block_on(async move {
        let dev = Device::open_default()?;
        let total = u16::try_from(warmup + iters).unwrap_or(u16::MAX);
        let server = Rdma::builder(&dev).max_connections(total).max_tasks(4).recv_tasks(4).build().await?;
        let client = Rdma::builder(&dev).max_connections(total).max_tasks(4).recv_tasks(4).build().await?;
        let mut listener = None;
        for _ in 0..20 {
            if let Ok(l) = server.listen(free_port()?) {
                listener = Some(l);
                break;
            }
        }
        let listener = listener.ok_or_else(|| Error::new(ErrorKind::Other, "no free port"))?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], listener.port()));
        let (listener, client) = (&listener, &client);
        timed_async(warmup, iters, 1.0, |_| async move {
            let accept = async move {
                let c = listener.request().await?.accept(&[]).await?;
                c.closed().await;
                Ok::<_, Error>(())
            };
            let connect = async move {
                let conn = client.connect(addr).await?;
                conn.disconnect()
            };
            let (a, c) = async_doca::time::timeout(PEER_TIMEOUT, futures_lite::future::zip(accept, connect))
                .await
                .map_err(Error::from)?;
            a?;
            c?;
            Ok(())
        })
        .await
    })?;
    // Each sample is a whole connection life (see the module docs).
    let mut r = Run { test: CONNECT, mode: "async", size: 0, procs: 1 }.report(samples, iters, elapsed);
    r.iters = iters;
    Ok(r)
}

fn async_remote_add(p: &Params) -> Result<Report> {
    let (warmup, iters) = (p.warmup, p.iters);
    let rt = runtime()?;
    let (samples, elapsed) = rt.block_on(async move {
        let dev = Device::open_default()?;
        let (a, b) = (Rdma::builder(&dev).build().await?, Rdma::builder(&dev).build().await?);
        let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
        let (to_b, _to_a) = (pa.connect(&blob_b).await?, pb.connect(&blob_a).await?);
        let ev = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
        let remote = RemoteEvent::open(&dev, &ev.export()?)?;
        let scratch = RefCell::new(Some(dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf()));
        let ops = to_b.remote_event(&remote);
        let (ops, scratch) = (&ops, &scratch);
        let r = timed_async(warmup, iters, 1.0, |_| async move {
            let s = scratch.borrow_mut().take().expect("one operation at a time");
            let (r, s) = ops.add(1, s).await;
            *scratch.borrow_mut() = Some(s);
            r.map(drop)
        })
        .await?;
        let v = ev.get().await?;
        if v != warmup + iters {
            return Err(Error::new(ErrorKind::Other, format!("remote adds: {v}, expected {}", warmup + iters)));
        }
        Ok::<_, Error>(r)
    })?;
    Ok(Run { test: REMOTE_ADD, mode: "async", size: 8, procs: 1 }.report(samples, iters, elapsed))
}

// ---- raw ----

thread_local! {
    static EST: Cell<u64> = const { Cell::new(0) };
    static FAIL: Cell<u64> = const { Cell::new(0) };
    static LAST_CLIENT: Cell<usize> = const { Cell::new(0) };
    static DONE: Cell<u64> = const { Cell::new(0) };
}

unsafe extern "C" fn on_request(c: *mut sys::doca_rdma_connection, _: sys::doca_data) {
    // SAFETY: a live connection handed to the callback.
    unsafe { sys::doca_rdma_connection_accept(c, std::ptr::null_mut(), 0) };
}
unsafe extern "C" fn on_established(c: *mut sys::doca_rdma_connection, _: sys::doca_data, side: sys::doca_data) {
    if side.as_u64() == 2 {
        LAST_CLIENT.with(|l| l.set(c as usize));
    }
    EST.with(|e| e.set(e.get() + 1));
}
unsafe extern "C" fn on_failure(_: *mut sys::doca_rdma_connection, _: sys::doca_data, _: sys::doca_data) {
    FAIL.with(|e| e.set(e.get() + 1));
}
unsafe extern "C" fn on_disconnect(c: *mut sys::doca_rdma_connection, _: sys::doca_data, _: sys::doca_data) {
    // SAFETY: a live connection; the samples answer a disconnection by disconnecting.
    unsafe { sys::doca_rdma_connection_disconnect(c) };
}
unsafe extern "C" fn add_done(
    t: *mut sys::doca_rdma_task_remote_net_sync_event_notify_add,
    _: sys::doca_data,
    _: sys::doca_data,
) {
    // SAFETY: the live completed task, ours in its callback.
    unsafe {
        let task = sys::doca_rdma_task_remote_net_sync_event_notify_add_as_task(t);
        if sys::doca_task_get_status(task) == sys::DOCA_SUCCESS {
            DONE.with(|d| d.set(d.get() + 1));
        } else {
            FAIL.with(|f| f.set(f.get() + 1));
        }
        sys::doca_task_free(task);
    }
}

/// A raw RDMA context on its own PE (connection management callbacks, `max` connections).
struct RawSide {
    pe: *mut sys::doca_pe,
    rdma: *mut sys::doca_rdma,
}

impl RawSide {
    fn new(dev: &Device, id: u64, max: u16, remote_add: bool) -> Result<RawSide> {
        let (mut pe, mut rdma) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: valid out-pointers; live objects; IDLE configuration, then start.
        unsafe {
            ok(sys::doca_pe_create(&mut pe), "pe create")?;
            ok(sys::doca_rdma_create(dev.as_ptr(), &mut rdma), "rdma create")?;
            ok(sys::doca_rdma_set_max_num_connections(rdma, max), "max connections")?;
            ok(
                sys::doca_rdma_set_connection_state_callbacks(
                    rdma,
                    Some(on_request),
                    Some(on_established),
                    Some(on_failure),
                    Some(on_disconnect),
                ),
                "cm callbacks",
            )?;
            if remote_add {
                ok(
                    sys::doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
                        rdma,
                        Some(add_done),
                        Some(add_done),
                        4,
                    ),
                    "notify_add conf",
                )?;
            }
            let ctx = sys::doca_rdma_as_ctx(rdma);
            ok(sys::doca_ctx_set_user_data(ctx, sys::doca_data::from_u64(id)), "user data")?;
            ok(sys::doca_pe_connect_ctx(pe, ctx), "connect ctx")?;
            let rc = sys::doca_ctx_start(ctx);
            if rc != sys::DOCA_ERROR_IN_PROGRESS {
                ok(rc, "start")?;
            }
        }
        let s = RawSide { pe, rdma };
        s.until(&[], || s.running())?;
        Ok(s)
    }

    fn running(&self) -> bool {
        let mut st = 0;
        // SAFETY: live ctx; valid out-pointer.
        unsafe { sys::doca_ctx_get_state(sys::doca_rdma_as_ctx(self.rdma), &mut st) };
        st == sys::DOCA_CTX_STATE_RUNNING
    }

    /// Progresses this PE and `others` until `cond` (bounded by PEER_TIMEOUT). The clock is
    /// read once every 4096 rounds, as the other raw loops read it: two clock reads per
    /// operation were a quarter of `remote_event_add_lat`'s raw time, which made the async
    /// side look faster than raw.
    fn until(&self, others: &[&RawSide], mut cond: impl FnMut() -> bool) -> Result<()> {
        let mut deadline = None;
        let mut spins = 0u32;
        while !cond() {
            // SAFETY: live PEs of this thread.
            unsafe {
                sys::doca_pe_progress(self.pe);
                for o in others {
                    sys::doca_pe_progress(o.pe);
                }
            }
            if FAIL.with(|f| f.get()) > 0 {
                return Err(Error::new(ErrorKind::ConnectionLost, "perf: a connection or task failed"));
            }
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT) {
                return Err(Error::new(ErrorKind::TimedOut, "perf: no progress"));
            }
        }
        Ok(())
    }
}

impl Drop for RawSide {
    fn drop(&mut self) {
        // SAFETY: live objects of this thread; stop, progress to IDLE, destroy.
        unsafe {
            let ctx = sys::doca_rdma_as_ctx(self.rdma);
            sys::doca_ctx_stop(ctx);
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut st = 1;
            while st != sys::DOCA_CTX_STATE_IDLE && Instant::now() < deadline {
                sys::doca_pe_progress(self.pe);
                sys::doca_ctx_get_state(ctx, &mut st);
            }
            sys::doca_rdma_destroy(self.rdma);
            sys::doca_pe_destroy(self.pe);
        }
    }
}

fn raw_connect(p: &Params) -> Result<Report> {
    let (warmup, iters) = (p.warmup, p.iters);
    let dev = Device::open_default()?;
    let total = u16::try_from(warmup + iters).unwrap_or(u16::MAX);
    EST.with(|e| e.set(0));
    FAIL.with(|e| e.set(0));
    let (server, client) = (RawSide::new(&dev, 1, total, false)?, RawSide::new(&dev, 2, total, false)?);
    let mut port = 0;
    for _ in 0..20 {
        port = free_port()?;
        // SAFETY: live, running rdma.
        if unsafe { sys::doca_rdma_start_listen_to_port(server.rdma, port) } == sys::DOCA_SUCCESS {
            break;
        }
    }
    let text = CString::new("127.0.0.1").expect("no NUL");
    let mut addr = std::ptr::null_mut();
    // SAFETY: NUL-terminated string; valid out-pointer.
    ok(unsafe { sys::doca_rdma_addr_create(sys::DOCA_RDMA_ADDR_TYPE_IPv4, text.as_ptr(), port, &mut addr) }, "addr")?;
    let (samples, elapsed) = timed(warmup, iters, 1.0, |_| {
        let before = EST.with(|e| e.get());
        // SAFETY: live objects; the address outlives the connection (destroyed below).
        ok(unsafe { sys::doca_rdma_connect_to_addr(client.rdma, addr, sys::doca_data::from_u64(0)) }, "connect")?;
        client.until(&[&server], || EST.with(|e| e.get()) >= before + 2)?;
        let c = LAST_CLIENT.with(|l| l.get()) as *mut sys::doca_rdma_connection;
        // SAFETY: the client's live connection, just established.
        ok(unsafe { sys::doca_rdma_connection_disconnect(c) }, "disconnect")
    })?;
    // Let the server see the last disconnection before the contexts stop.
    let _ = client.until(&[&server], || true);
    drop(client);
    drop(server);
    // SAFETY: our address; its connections ended with the contexts.
    unsafe { sys::doca_rdma_addr_destroy(addr) };
    Ok(Run { test: CONNECT, mode: "raw", size: 0, procs: 1 }.report(samples, iters, elapsed))
}

fn raw_remote_add(p: &Params) -> Result<Report> {
    let (warmup, iters) = (p.warmup, p.iters);
    let dev = Device::open_default()?;
    FAIL.with(|e| e.set(0));
    DONE.with(|e| e.set(0));
    let (a, b) = (RawSide::new(&dev, 1, 1, true)?, RawSide::new(&dev, 3, 1, false)?);
    // Blob-connected pair (the connection method does not change the operation).
    let (mut pa, mut na, mut ca) = (std::ptr::null(), 0usize, std::ptr::null_mut());
    let (mut pb, mut nb, mut cb) = (std::ptr::null(), 0usize, std::ptr::null_mut());
    // The result word, registered for local writes.
    let mut word = Box::new(0u64);
    let at = (&mut *word as *mut u64).cast::<std::ffi::c_void>();
    let mut mmap = std::ptr::null_mut();
    // SAFETY: `word` outlives the mmap (destroyed below); valid out-pointer.
    unsafe {
        ok(sys::doca_mmap_create(&mut mmap), "mmap")?;
        ok(sys::doca_mmap_set_memrange(mmap, at, 8), "mmap range")?;
        ok(sys::doca_mmap_set_permissions(mmap, Access::LOCAL_READ_WRITE.bits()), "mmap perms")?;
        ok(sys::doca_mmap_add_dev(mmap, dev.as_ptr()), "mmap dev")?;
        ok(sys::doca_mmap_start(mmap), "mmap start")?;
    }
    // SAFETY: live objects; the blobs are used before anything else touches the contexts.
    unsafe {
        ok(sys::doca_rdma_export(a.rdma, &mut pa, &mut na, &mut ca), "export a")?;
        ok(sys::doca_rdma_export(b.rdma, &mut pb, &mut nb, &mut cb), "export b")?;
        ok(sys::doca_rdma_connect(a.rdma, pb, nb, ca), "connect a")?;
        ok(sys::doca_rdma_connect(b.rdma, pa, na, cb), "connect b")?;
    }
    // b's event, exported for the network; a opens it.
    let (mut ev, mut data, mut len, mut h) = (std::ptr::null_mut(), std::ptr::null(), 0usize, std::ptr::null_mut());
    let mut inv = std::ptr::null_mut();
    // SAFETY: valid out-pointers; live objects.
    unsafe {
        ok(sys::doca_sync_event_create(&mut ev), "event")?;
        ok(sys::doca_sync_event_add_publisher_location_remote_net(ev), "publisher")?;
        ok(sys::doca_sync_event_add_subscriber_location_cpu(ev, dev.as_ptr()), "subscriber")?;
        ok(sys::doca_sync_event_start(ev), "event start")?;
        ok(sys::doca_sync_event_export_to_remote_net(ev, &mut data, &mut len), "export event")?;
        ok(sys::doca_sync_event_remote_net_create_from_export(dev.as_ptr(), data, len, &mut h), "open event")?;
        ok(sys::doca_buf_inventory_create(4, &mut inv), "inventory")?;
        ok(sys::doca_buf_inventory_start(inv), "inventory start")?;
    }
    let (samples, elapsed) = timed(warmup, iters, 1.0, |i| {
        let mut buf = std::ptr::null_mut();
        let mut t = std::ptr::null_mut();
        // SAFETY: live objects; the scratch memory is registered and idle between rounds.
        unsafe {
            ok(sys::doca_buf_inventory_buf_get_by_args(inv, mmap, at, 8, at, 0, &mut buf), "buf")?;
            ok(
                sys::doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
                    a.rdma,
                    ca,
                    h,
                    buf,
                    1,
                    sys::doca_data::from_u64(i),
                    &mut t,
                ),
                "notify_add alloc",
            )?;
            ok(sys::doca_task_submit(sys::doca_rdma_task_remote_net_sync_event_notify_add_as_task(t)), "submit")?;
        }
        let want = i + 1;
        let r = a.until(&[&b], || DONE.with(|d| d.get()) >= want);
        // SAFETY: the task completed; the buffer is ours again.
        unsafe { sys::doca_buf_dec_refcount(buf, std::ptr::null_mut()) };
        r
    })?;
    let mut v = 0;
    // SAFETY: live objects; torn down in order (handle, event, inventory, then the sides).
    unsafe {
        sys::doca_sync_event_get(ev, &mut v);
        sys::doca_sync_event_remote_net_destroy(h);
        sys::doca_sync_event_stop(ev);
        sys::doca_sync_event_destroy(ev);
        sys::doca_buf_inventory_destroy(inv);
        sys::doca_mmap_destroy(mmap);
    }
    drop(word);
    if v != warmup + iters {
        return Err(Error::new(ErrorKind::Other, format!("remote adds: {v}, expected {}", warmup + iters)));
    }
    Ok(Run { test: REMOTE_ADD, mode: "raw", size: 8, procs: 1 }.report(samples, iters, elapsed))
}
