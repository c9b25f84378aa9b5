//! The RDMA tests in `raw` mode: the C-style loop straight on doca-sys that the async mode is
//! measured against. Each side creates its PE and RDMA context, configures only the task
//! kinds its test uses, starts, exports and connects (blobs over the [`Link`]), registers
//! its memory (mmaps, an inventory, `doca_buf`s made once per slot and reset before reuse),
//! then submits a task and calls `doca_pe_progress` until its callback ran. Each slot's task
//! is allocated once and submitted again after its completion, re-initialised with DOCA's
//! setters (task reuse), as the async modes do.
//!
//! Completion flags are [`Done`] cells, written by the callback through the task's user data
//! while the loop reads them (see `raw.rs` for why they must not be behind a `&mut`).

use std::ffi::c_void;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use async_doca::sys;
use async_doca::{Access, CpuSet, Device, Error, ErrorKind, Result};

use super::clock::Stamp;
use super::peer::{timed_out, Link};
use super::raw::{done_cb, ok, Done, Shared};
use super::rdma::{check, slot, window, Measured, Test};
use super::stats::{timed, Recorder};
use super::{Params, RawDoorbell, PEER_TIMEOUT};

done_cb!(write_done, sys::doca_rdma_task_write, sys::doca_rdma_task_write_as_task);
done_cb!(write_imm_done, sys::doca_rdma_task_write_imm, sys::doca_rdma_task_write_imm_as_task);
done_cb!(read_done, sys::doca_rdma_task_read, sys::doca_rdma_task_read_as_task);
done_cb!(send_done, sys::doca_rdma_task_send, sys::doca_rdma_task_send_as_task);
done_cb!(recv_done, sys::doca_rdma_task_receive, sys::doca_rdma_task_receive_as_task);
done_cb!(fadd_done, sys::doca_rdma_task_atomic_fetch_add, sys::doca_rdma_task_atomic_fetch_add_as_task);
done_cb!(cswap_done, sys::doca_rdma_task_atomic_cmp_swp, sys::doca_rdma_task_atomic_cmp_swp_as_task);

/// One side: PE, RDMA ctx and connection, memory, and per slot its buffers and `Done`.
struct Side {
    test: Test,
    window: usize,
    pe: *mut sys::doca_pe,
    rdma: *mut sys::doca_rdma,
    conn: *mut sys::doca_rdma_connection,
    local: Shared,
    target: Shared,
    local_mmap: *mut sys::doca_mmap,
    target_mmap: *mut sys::doca_mmap,
    remote_mmap: *mut sys::doca_mmap,
    inv: *mut sys::doca_buf_inventory,
    /// Per slot: local source (payload `size`), local destination (empty), remote
    /// destination (empty), remote source (payload `size`).
    bufs: Vec<[*mut sys::doca_buf; 4]>,
    done: Box<[Done]>,
    /// Tasks were submitted again without their doorbell since the last flush.
    unflushed: bool,
    /// Ring the doorbell once per batch (see [`RawDoorbell::Batch`]); bandwidth tests only.
    batch_doorbells: bool,
    _dev: Device,
}

const SRC: usize = 0;
const DST: usize = 1;
const RDST: usize = 2;
const RSRC: usize = 3;

impl Side {
    fn connect(test: Test, p: &Params, link: &mut Link) -> Result<Side> {
        let dev = Device::open_default()?;
        let size = match test {
            Test::FaddLat | Test::CswapLat => 8,
            _ => p.size.max(8),
        };
        let (slot, window) = (slot(test, size), window(test, size));
        let mut me = Side {
            test,
            window,
            pe: ptr::null_mut(),
            rdma: ptr::null_mut(),
            conn: ptr::null_mut(),
            local: Shared::new(slot * window)?,
            target: Shared::new(slot * window)?,
            local_mmap: ptr::null_mut(),
            target_mmap: ptr::null_mut(),
            remote_mmap: ptr::null_mut(),
            inv: ptr::null_mut(),
            bufs: Vec::new(),
            // Every test keeps each slot's task and submits it again, re-initialised with
            // DOCA's setters where a value changes (DOCA's task reuse): the best a C program
            // does with DOCA, and what both async modes do (`rdma::Lanes` hold their tasks,
            // the futures take a kept task of their kind). Allocating and freeing a task per
            // operation cost the raw loop ~20 ns a latency round here, which the async modes
            // do not pay.
            done: (0..window).map(|_| Done::keeping()).collect(),
            unflushed: false,
            batch_doorbells: test.is_bw() && p.raw_doorbell == RawDoorbell::Batch,
            _dev: dev.clone(),
        };
        let n = window as u32;
        // SAFETY: plain DOCA setup on objects `me` owns (its Drop tears down whatever was
        // created); every pointer is fresh from DOCA or an out-pointer to a local.
        unsafe {
            ok(sys::doca_pe_create(&mut me.pe), "pe_create")?;
            ok(sys::doca_rdma_create(dev.as_ptr(), &mut me.rdma), "rdma_create")?;
            let r = me.rdma;
            ok(sys::doca_rdma_set_permissions(r, Access::RDMA_ALL.bits()), "rdma_set_permissions")?;
            match test {
                Test::WriteLat | Test::WriteBw => {
                    ok(sys::doca_rdma_task_write_set_conf(r, Some(write_done), Some(write_done), n), "write conf")?
                }
                Test::ReadLat | Test::ReadBw => {
                    ok(sys::doca_rdma_task_read_set_conf(r, Some(read_done), Some(read_done), n), "read conf")?
                }
                Test::SendLat | Test::SendBw => {
                    ok(sys::doca_rdma_task_send_set_conf(r, Some(send_done), Some(send_done), n), "send conf")?
                }
                Test::WriteImmLat => ok(
                    sys::doca_rdma_task_write_imm_set_conf(r, Some(write_imm_done), Some(write_imm_done), n),
                    "write_imm conf",
                )?,
                Test::FaddLat => ok(
                    sys::doca_rdma_task_atomic_fetch_add_set_conf(r, Some(fadd_done), Some(fadd_done), n),
                    "fetch_add conf",
                )?,
                Test::CswapLat => ok(
                    sys::doca_rdma_task_atomic_cmp_swp_set_conf(r, Some(cswap_done), Some(cswap_done), n),
                    "cmp_swp conf",
                )?,
            }
            if matches!(test, Test::SendLat | Test::SendBw | Test::WriteImmLat) {
                ok(sys::doca_rdma_task_receive_set_conf(r, Some(recv_done), Some(recv_done), n), "receive conf")?;
            }
            let ctx = sys::doca_rdma_as_ctx(r);
            ok(sys::doca_pe_connect_ctx(me.pe, ctx), "pe_connect_ctx")?;
            ok(sys::doca_ctx_start(ctx), "ctx_start")?;
            let mut state = sys::DOCA_CTX_STATE_IDLE;
            for _ in 0..1_000_000 {
                ok(sys::doca_ctx_get_state(ctx, &mut state), "ctx_get_state")?;
                if state == sys::DOCA_CTX_STATE_RUNNING {
                    break;
                }
                sys::doca_pe_progress(me.pe);
            }
            if state != sys::DOCA_CTX_STATE_RUNNING {
                return Err(Error::new(ErrorKind::TimedOut, "raw rdma: ctx did not reach RUNNING"));
            }

            me.local_mmap = mmap(&dev, me.local.ptr, slot * window, Access::LOCAL_READ_WRITE)?;
            me.target_mmap = mmap(&dev, me.target.ptr, slot * window, Access::RDMA_ALL)?;
            let (mut desc, mut desc_len) = (ptr::null(), 0usize);
            ok(sys::doca_mmap_export_rdma(me.target_mmap, dev.as_ptr(), &mut desc, &mut desc_len), "mmap export")?;
            let mem_blob = std::slice::from_raw_parts(desc.cast::<u8>(), desc_len).to_vec();
            let (mut details, mut details_len) = (ptr::null(), 0usize);
            ok(sys::doca_rdma_export(r, &mut details, &mut details_len, &mut me.conn), "rdma_export")?;
            let conn_blob = std::slice::from_raw_parts(details.cast::<u8>(), details_len).to_vec();

            link.send(&conn_blob)?;
            link.send(&mem_blob)?;
            let peer = link.recv_blocking()?;
            let peer_mem = link.recv_blocking()?;
            ok(sys::doca_rdma_connect(r, peer.as_ptr().cast(), peer.len(), me.conn), "rdma_connect")?;
            ok(
                sys::doca_mmap_create_from_export(
                    ptr::null(),
                    peer_mem.as_ptr().cast(),
                    peer_mem.len(),
                    dev.as_ptr(),
                    &mut me.remote_mmap,
                ),
                "mmap import",
            )?;
            let (mut raddr, mut rlen) = (ptr::null_mut(), 0usize);
            ok(sys::doca_mmap_get_memrange(me.remote_mmap, &mut raddr, &mut rlen), "mmap get_memrange")?;

            ok(sys::doca_buf_inventory_create(4 * window, &mut me.inv), "inventory_create")?;
            ok(sys::doca_buf_inventory_start(me.inv), "inventory_start")?;
            for k in 0..window {
                let l = me.local.ptr.add(k * slot).cast::<c_void>();
                let rm = raddr.cast::<u8>().add(k * slot).cast::<c_void>();
                let mut b = [ptr::null_mut(); 4];
                let inv = me.inv;
                ok(sys::doca_buf_inventory_buf_get_by_data(inv, me.local_mmap, l, size, &mut b[SRC]), "buf")?;
                ok(sys::doca_buf_inventory_buf_get_by_addr(inv, me.local_mmap, l, size, &mut b[DST]), "buf")?;
                ok(sys::doca_buf_inventory_buf_get_by_addr(inv, me.remote_mmap, rm, size, &mut b[RDST]), "buf")?;
                ok(sys::doca_buf_inventory_buf_get_by_data(inv, me.remote_mmap, rm, size, &mut b[RSRC]), "buf")?;
                me.bufs.push(b);
            }
        }
        Ok(me)
    }

    /// Allocates and submits operation `i`'s task in slot `k` (`v`: its value).
    fn submit(&mut self, recv: bool, k: usize, i: u64) -> Result<()> {
        let done = &self.done[k];
        done.finished.set(false);
        let ud = sys::doca_data { ptr: (done as *const Done).cast_mut().cast::<c_void>() };
        let (r, c, b) = (self.rdma, self.conn, self.bufs[k]);
        let v = i + 1;
        // SAFETY: the buffers, the `Done` and the memory outlive the task (see `done_cb`);
        // destinations are reset so the operation has room; one thread uses all of it. A kept
        // task is this slot's completed one, not in flight, and `kept_typed` is that task as
        // the type of this test's operation (slot 1 keeps the receive), which its setters take.
        unsafe {
            if !recv && self.test == Test::WriteLat {
                word(self.local.ptr).store(v, Ordering::Release);
            }
            if let Some(t) = done.kept.take() {
                // This slot's completed task, kept by its callback with every parameter: the
                // destination is emptied (results are appended after its data) and the
                // values that change per operation are set again.
                let typed = done.kept_typed.get();
                match (recv, self.test) {
                    (true, _) | (false, Test::ReadLat | Test::ReadBw | Test::FaddLat) => {
                        sys::doca_buf_reset_data_len(b[DST]);
                    }
                    (false, Test::WriteLat | Test::WriteBw) => {
                        sys::doca_buf_reset_data_len(b[RDST]);
                    }
                    (false, Test::WriteImmLat) => {
                        sys::doca_buf_reset_data_len(b[RDST]);
                        sys::doca_rdma_task_write_imm_set_immediate_data(typed.cast(), v as u32);
                    }
                    (false, Test::CswapLat) => {
                        sys::doca_buf_reset_data_len(b[DST]);
                        let task = typed.cast();
                        sys::doca_rdma_task_atomic_cmp_swp_set_cmp_data(task, i);
                        sys::doca_rdma_task_atomic_cmp_swp_set_swap_data(task, v);
                    }
                    (false, Test::SendLat | Test::SendBw) => {}
                }
                if !self.test.is_bw() {
                    // One operation in flight, awaited next: submitted with its doorbell, as
                    // the async modes submit an operation alone.
                    return ok(sys::doca_task_submit(t.as_ptr()), "resubmit");
                }
                self.unflushed = true;
                return ok(sys::doca_task_submit_ex(t.as_ptr(), sys::DOCA_TASK_SUBMIT_FLAG_NONE), "resubmit");
            }
            if recv {
                sys::doca_buf_reset_data_len(b[DST]);
                let mut t = ptr::null_mut();
                ok(sys::doca_rdma_task_receive_allocate_init(r, b[DST], ud, &mut t), "receive alloc")?;
                return ok(sys::doca_task_submit(sys::doca_rdma_task_receive_as_task(t)), "receive submit");
            }
            match self.test {
                Test::WriteLat | Test::WriteBw => {
                    sys::doca_buf_reset_data_len(b[RDST]);
                    let mut t = ptr::null_mut();
                    ok(sys::doca_rdma_task_write_allocate_init(r, c, b[SRC], b[RDST], ud, &mut t), "write alloc")?;
                    ok(sys::doca_task_submit(sys::doca_rdma_task_write_as_task(t)), "write submit")
                }
                Test::WriteImmLat => {
                    sys::doca_buf_reset_data_len(b[RDST]);
                    let mut t = ptr::null_mut();
                    ok(
                        sys::doca_rdma_task_write_imm_allocate_init(r, c, b[SRC], b[RDST], v as u32, ud, &mut t),
                        "write_imm alloc",
                    )?;
                    ok(sys::doca_task_submit(sys::doca_rdma_task_write_imm_as_task(t)), "write_imm submit")
                }
                Test::ReadLat | Test::ReadBw => {
                    sys::doca_buf_reset_data_len(b[DST]);
                    let mut t = ptr::null_mut();
                    ok(sys::doca_rdma_task_read_allocate_init(r, c, b[RSRC], b[DST], ud, &mut t), "read alloc")?;
                    ok(sys::doca_task_submit(sys::doca_rdma_task_read_as_task(t)), "read submit")
                }
                Test::SendLat | Test::SendBw => {
                    let mut t = ptr::null_mut();
                    ok(sys::doca_rdma_task_send_allocate_init(r, c, b[SRC], ud, &mut t), "send alloc")?;
                    ok(sys::doca_task_submit(sys::doca_rdma_task_send_as_task(t)), "send submit")
                }
                // An atomic's target is the remote buffer with its 8 bytes as data (DOCA acts on
                // "the first 8 bytes of data"), as a read's source is.
                Test::FaddLat => {
                    sys::doca_buf_reset_data_len(b[DST]);
                    let mut t = ptr::null_mut();
                    ok(
                        sys::doca_rdma_task_atomic_fetch_add_allocate_init(r, c, b[RSRC], b[DST], 1, ud, &mut t),
                        "fetch_add alloc",
                    )?;
                    ok(sys::doca_task_submit(sys::doca_rdma_task_atomic_fetch_add_as_task(t)), "fetch_add submit")
                }
                Test::CswapLat => {
                    sys::doca_buf_reset_data_len(b[DST]);
                    let mut t = ptr::null_mut();
                    ok(
                        sys::doca_rdma_task_atomic_cmp_swp_allocate_init(r, c, b[RSRC], b[DST], i, v, ud, &mut t),
                        "cmp_swp alloc",
                    )?;
                    ok(sys::doca_task_submit(sys::doca_rdma_task_atomic_cmp_swp_as_task(t)), "cmp_swp submit")
                }
            }
        }
    }

    /// Progresses until slot `k`'s task completed. Bounded: after [`PEER_TIMEOUT`] the ctx
    /// is stopped, which flushes every task through its callback.
    fn wait(&mut self, k: usize) -> Result<()> {
        // Batched, the doorbell waits until an operation awaited is not done yet.
        let ring = !self.batch_doorbells || !self.done[k].finished.get();
        if ring && std::mem::take(&mut self.unflushed) {
            // SAFETY: our running ctx, on this thread.
            unsafe { sys::doca_ctx_flush_tasks(sys::doca_rdma_as_ctx(self.rdma)) };
        }
        if ring && self.batch_doorbells {
            // Every completion the PE has, as the lanes' batch collects them: the next slots
            // are then found done and submitted again without a doorbell, until one is not.
            // SAFETY: the PE is ours and used on this thread only.
            while unsafe { sys::doca_pe_progress(self.pe) } != 0 {}
        }
        let mut spins = 0u32;
        let mut deadline = None;
        while !self.done[k].finished.get() {
            // SAFETY: the PE is ours and used on this thread only.
            unsafe { sys::doca_pe_progress(self.pe) };
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 {
                let d = *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT);
                if Instant::now() > d {
                    return Err(timed_out());
                }
            }
        }
        ok(sys::doca_error_t(self.done[k].status.get()), "raw rdma task")
    }

    /// Spins on the first word of our target memory until the peer wrote `v` there.
    fn wait_word(&self, v: u64) -> Result<()> {
        // The deadline is set at the first look at the clock: a clock read per wait was
        // ~20 ns of every half round trip, on both sides of the comparison.
        let mut deadline = None;
        let mut spins = 0u32;
        // SAFETY: slot 0 of our target memory, 64-byte aligned, alive as long as `self`.
        while unsafe { word(self.target.ptr) }.load(Ordering::Acquire) != v {
            spins = spins.wrapping_add(1);
            if spins % 4096 == 0 && Instant::now() > *deadline.get_or_insert_with(|| Instant::now() + PEER_TIMEOUT) {
                return Err(timed_out());
            }
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// The first word of local slot 0 (an atomic's old value).
    fn result(&self) -> u64 {
        // SAFETY: as in `wait_word`, on our local memory.
        unsafe { word(self.local.ptr) }.load(Ordering::Acquire)
    }

    /// Side A's latency iteration `i`.
    fn ping(&mut self, i: u64) -> Result<()> {
        match self.test {
            Test::WriteLat => {
                self.submit(false, 0, i)?;
                self.wait(0)?;
                self.wait_word(i + 1)
            }
            Test::SendLat | Test::WriteImmLat => {
                self.submit(false, 0, i)?;
                self.wait(0)?;
                self.submit(true, 1, i)?;
                self.wait(1)
            }
            Test::ReadLat => {
                self.submit(false, 0, i)?;
                self.wait(0)
            }
            Test::FaddLat | Test::CswapLat => {
                self.submit(false, 0, i)?;
                self.wait(0)?;
                check(self.result(), i)
            }
            Test::WriteBw | Test::ReadBw | Test::SendBw => unreachable!("bandwidth tests stream"),
        }
    }

    /// Side B's answer to iteration `i` of a ping-pong.
    fn pong(&mut self, i: u64) -> Result<()> {
        if self.test == Test::WriteLat {
            self.wait_word(i + 1)?;
        } else {
            self.submit(true, 1, i)?;
            self.wait(1)?;
        }
        self.submit(false, 0, i)?;
        self.wait(0)
    }

    /// Side A of a bandwidth test: `window` operations in flight, completions in order.
    fn stream(&mut self, p: &Params) -> Result<Measured> {
        let mut samples = Recorder::new(1.0, p.iters);
        let mut submitted = vec![Stamp::now(); self.window];
        let total = p.warmup + p.iters;
        let mut start = Stamp::now();
        for i in 0..total + self.window as u64 {
            let k = i as usize % self.window;
            if i >= self.window as u64 {
                let j = i - self.window as u64;
                self.wait(k)?;
                if j >= p.warmup {
                    samples.push(submitted[k].ticks_to_now());
                }
            }
            if i == p.warmup {
                start = Stamp::now();
            }
            if i < total {
                submitted[k] = Stamp::now();
                self.submit(false, k, i)?;
            }
        }
        Ok(Measured { samples: samples.into_samples(), elapsed: start.elapsed() })
    }

    /// Side B of `send_bw`: `window` receives kept posted until `total` arrived.
    fn sink(&mut self, total: u64) -> Result<()> {
        for i in 0..total + self.window as u64 {
            let k = i as usize % self.window;
            if i >= self.window as u64 {
                self.wait(k)?;
            }
            if i < total {
                self.submit(true, k, i)?;
            }
        }
        Ok(())
    }
}

/// The 8-byte word at `p`.
///
/// # Safety
/// `p` is 8-byte aligned and valid for as long as the reference is used.
unsafe fn word<'a>(p: *mut u8) -> &'a AtomicU64 {
    // SAFETY: per the contract.
    unsafe { AtomicU64::from_ptr(p.cast()) }
}

/// Registers `[ptr, ptr+len)` with `dev`.
///
/// # Safety
/// The memory outlives the mmap.
unsafe fn mmap(dev: &Device, ptr: *mut u8, len: usize, access: Access) -> Result<*mut sys::doca_mmap> {
    let mut m = ptr::null_mut();
    // SAFETY: per the contract; valid out-pointer.
    unsafe {
        ok(sys::doca_mmap_create(&mut m), "mmap_create")?;
        let r = ok(sys::doca_mmap_set_memrange(m, ptr.cast(), len), "mmap_set_memrange")
            .and_then(|()| ok(sys::doca_mmap_set_permissions(m, access.bits()), "mmap_set_permissions"))
            .and_then(|()| ok(sys::doca_mmap_add_dev(m, dev.as_ptr()), "mmap_add_dev"))
            .and_then(|()| ok(sys::doca_mmap_start(m), "mmap_start"));
        if let Err(e) = r {
            sys::doca_mmap_destroy(m);
            return Err(e);
        }
    }
    Ok(m)
}

impl Drop for Side {
    fn drop(&mut self) {
        // SAFETY: teardown in reverse order on this thread: stop the ctx (flushing any task
        // still in flight through its callback, while the `Done`s and buffers still exist),
        // then the buffers, the inventory, the mmaps (before their memory), the ctx, the PE.
        unsafe {
            // Kept tasks are allocated: a stop cannot reach IDLE before they are freed, nor
            // while completions are kept.
            for d in self.done.iter() {
                d.free_kept();
            }
            if !self.rdma.is_null() {
                let ctx = sys::doca_rdma_as_ctx(self.rdma);
                if !self.pe.is_null() {
                    if std::mem::take(&mut self.unflushed) {
                        sys::doca_ctx_flush_tasks(ctx);
                    }
                    sys::doca_ctx_stop(ctx);
                    let mut state = sys::DOCA_CTX_STATE_RUNNING;
                    for _ in 0..100_000 {
                        sys::doca_pe_progress(self.pe);
                        if sys::doca_ctx_get_state(ctx, &mut state) != sys::DOCA_SUCCESS
                            || state == sys::DOCA_CTX_STATE_IDLE
                        {
                            break;
                        }
                    }
                }
            }
            for b in self.bufs.drain(..).flatten() {
                sys::doca_buf_dec_refcount(b, ptr::null_mut());
            }
            if !self.inv.is_null() {
                sys::doca_buf_inventory_stop(self.inv);
                sys::doca_buf_inventory_destroy(self.inv);
            }
            for m in [self.remote_mmap, self.target_mmap, self.local_mmap] {
                if !m.is_null() {
                    sys::doca_mmap_stop(m);
                    sys::doca_mmap_destroy(m);
                }
            }
            if !self.rdma.is_null() {
                sys::doca_rdma_destroy(self.rdma);
            }
            if !self.pe.is_null() {
                sys::doca_pe_destroy(self.pe);
            }
        }
    }
}

/// Side A, raw: connect, run the iterations, exchange `done`.
pub fn side_a(test: Test, p: &Params, cpu: usize, mut link: Link) -> Result<Measured> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()?;
    let mut side = Side::connect(test, p, &mut link)?;
    let measured = if test.is_bw() {
        side.stream(p)?
    } else {
        // Half a ping-pong's round trip; a read's or an atomic's whole completion latency.
        let divisor = if test.is_pingpong() { 2.0 } else { 1.0 };
        let (samples, elapsed) = timed(p.warmup, p.iters, divisor, |i| side.ping(i))?;
        Measured { samples, elapsed }
    };
    link.send(b"done")?;
    link.recv_blocking()?;
    Ok(measured)
}

/// Side B, raw: answer the ping-pong (or take the sends), then exchange `done`.
pub fn side_b(test: Test, p: &Params, cpu: usize, mut link: Link) -> Result<()> {
    CpuSet::from_cpus([cpu])?.pin_current_thread()?;
    let mut side = Side::connect(test, p, &mut link)?;
    let total = p.warmup + p.iters;
    if test.is_pingpong() {
        for i in 0..total {
            side.pong(i)?;
        }
    } else if test == Test::SendBw {
        side.sink(total)?;
    }
    link.recv_blocking()?;
    link.send(b"done")
}
