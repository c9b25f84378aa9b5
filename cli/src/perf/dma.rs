//! The DMA tests: memcpy from memory exported with `export_pci` (and imported by this same
//! process, so every copy takes the import path a DPU program takes) into local memory.
//!
//! * `dma_lat`: one copy at a time; latency is submit to completion (not halved: one copy
//!   is one operation, not a round trip).
//! * `dma_bw`: [`WINDOW`] copies in flight; ops/s and MB/s, per-copy completion latency.
//!
//! `raw` drives doca-sys as a C program would (tasks allocated once, re-submitted from the
//! loop after each completion); `async` goes through `async_doca::dma::Dma`, `dma_bw` with
//! its copies through `dma::Lanes` (each lane keeps its task, as the raw loop's slots do).
//! Both keep the window's slots busy and start the clock when the last warm-up copy
//! completes. `memcpy_bw`
//! (in `rdma.rs`) is the reference row: what one CPU copies with `memcpy`.

use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr;
use std::time::Duration;

use async_doca::dma::{Dma, LaneOp};
use async_doca::sys;
use async_doca::{Access, Device, Result};

use super::clock::Stamp;
use super::cpu::runtime;
use super::cpu::two_cpus;
use super::raw::ok;
use super::stats::{timed, timed_async, Recorder, Report, Run, Samples};
use super::{Mode, Params};

/// Copies in flight in `dma_bw`.
pub const WINDOW: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Test {
    Lat,
    Bw,
}

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::Lat => "dma_lat",
            Test::Bw => "dma_bw",
        }
    }

    fn window(self) -> usize {
        match self {
            Test::Lat => 1,
            Test::Bw => WINDOW,
        }
    }
}

pub fn run(test: Test, p: &Params) -> Result<Report> {
    let (cpu, _) = two_cpus()?;
    let report = match p.mode {
        Mode::Raw => {
            let _pinned = super::cpu::pinned(cpu)?;
            raw(test, p)?
        }
        Mode::Async => {
            let rt = runtime(&[cpu], p.idle, p.park)?;
            let params = *p;
            let h = rt.spawn_on(cpu, move || async move { run_async(test, &params).await })?;
            rt.block_on(h)??
        }
        other => return Err(other.unsupported(test.name())),
    };
    Ok(report)
}

// ---- async ----

async fn run_async(test: Test, p: &Params) -> Result<Report> {
    let size = p.size.max(1);
    let window = test.window();
    let dev = Device::open_default()?;
    let host = dev.alloc(size * window, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
    // Touched before timing, as the raw mode's source is.
    host.buf().fill(0x5a);
    let remote = dev.import(&host.export_pci()?)?;
    let local = dev.alloc(size * window, Access::LOCAL_READ_WRITE)?;
    let dma = Dma::builder(&dev).max_tasks(window as u32).build().await?;
    let run = Run { test: test.name(), mode: "async", size, procs: 1 };
    if window == 1 {
        let (samples, elapsed) = timed_async(p.warmup, p.iters, 1.0, |_| {
            let (dma, s, d) = (&dma, remote.slice(0..size), local.slice(0..size));
            async move { dma.memcpy(s, d).await.0 }
        })
        .await?;
        return Ok(run.report(samples, p.iters, elapsed).with_bandwidth());
    }
    // `window` copies in flight in one task through `dma::Lanes` taken a batch at a time
    // (the path a user takes for message rate on fixed memory: each lane keeps its task and
    // submits it again, as the raw loop keeps its tasks), lane `w` over slot `w` of both
    // buffers, as the raw loop's task `w`. Each sample is one copy's submit-to-result time.
    let total = p.warmup + p.iters;
    let mut lanes = dma.lanes(LaneOp::CopyIn(remote.slice(0..window * size)), local.slice(0..window * size), window)?;
    let mut stamps = vec![Stamp::now(); window];
    let mut clock = Clock { warmup: p.warmup, ..Clock::default() };
    let mut begun = 0;
    while begun < total {
        let mut batch = lanes.batch().await;
        while let Some((prev, lane)) = batch.lane() {
            let w = lane.index();
            if let Some(r) = prev {
                clock.done(r, stamps[w])?;
            }
            stamps[w] = Stamp::now();
            lane.submit();
            begun += 1;
            if begun == total {
                break;
            }
        }
    }
    while let Some((r, lane)) = lanes.next().await {
        clock.done(r, stamps[lane.index()])?;
    }
    let elapsed = clock.start.map_or(Duration::ZERO, |t| t.elapsed());
    Ok(run.report(clock.samples.into_samples(), p.iters, elapsed).with_bandwidth())
}

/// The bookkeeping of the async `dma_bw` loop, as the raw loop keeps it: the interval starts
/// when the last warm-up copy completes (at once without warm-up), and every later copy
/// is a sample from its submission to its completion.
#[derive(Default)]
struct Clock {
    warmup: u64,
    finished: u64,
    start: Option<Stamp>,
    samples: Recorder,
}

impl Clock {
    /// A copy submitted at `t0` completed with `r`.
    fn done(&mut self, r: Result<()>, t0: Stamp) -> Result<()> {
        r?;
        self.finished += 1;
        if self.warmup == 0 && self.start.is_none() {
            self.start = Some(t0);
        }
        if self.finished == self.warmup {
            self.start = Some(Stamp::now());
        } else if self.finished > self.warmup {
            self.samples.push(t0.ticks_to_now());
        }
        Ok(())
    }
}

// ---- raw ----

thread_local! {
    /// Indices of the tasks whose callback ran since the loop last looked.
    static DONE: RefCell<Vec<(usize, sys::doca_error_t)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_memcpy(task: *mut sys::doca_dma_task_memcpy, ud: sys::doca_data, _cud: sys::doca_data) {
    // SAFETY: the task is ours inside its callback.
    let status = unsafe { sys::doca_task_get_status(sys::doca_dma_task_memcpy_as_task(task)) };
    DONE.with(|d| d.borrow_mut().push((ud.as_u64() as usize, status)));
}

/// A local mmap over `mem` with `perms` on `dev`.
fn raw_mmap(dev: *mut sys::doca_dev, mem: &mut [u8], perms: u32) -> Result<*mut sys::doca_mmap> {
    let mut m = ptr::null_mut();
    // SAFETY: valid out-pointer; `mem` outlives the mmap (destroyed at the end of `raw`).
    unsafe {
        ok(sys::doca_mmap_create(&mut m), "doca_mmap_create")?;
        ok(sys::doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), mem.len()), "doca_mmap_set_memrange")?;
        ok(sys::doca_mmap_set_permissions(m, perms), "doca_mmap_set_permissions")?;
        ok(sys::doca_mmap_add_dev(m, dev), "doca_mmap_add_dev")?;
        ok(sys::doca_mmap_start(m), "doca_mmap_start")?;
    }
    Ok(m)
}

/// The exported ("host") memory of the raw mode: the same kind of memory `Device::alloc`
/// registers (with the soft provider, shared memory, which importers map instead of reaching
/// it with `process_vm_*`), so raw and async copy through the same path.
struct HostMem {
    ptr: *mut u8,
    len: usize,
    #[cfg(not(feature = "soft"))]
    _vec: Vec<u8>,
}

impl HostMem {
    #[cfg(feature = "soft")]
    fn new(len: usize) -> Result<HostMem> {
        let mut p = ptr::null_mut();
        // SAFETY: valid out-pointer; freed once in Drop.
        ok(unsafe { sys::doca_soft_alloc_shared(len, &mut p) }, "doca_soft_alloc_shared")?;
        Ok(HostMem { ptr: p.cast(), len })
    }

    #[cfg(not(feature = "soft"))]
    fn new(len: usize) -> Result<HostMem> {
        let mut v = vec![0u8; len];
        Ok(HostMem { ptr: v.as_mut_ptr(), len, _vec: v })
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `len` bytes allocated above and owned by self; the borrow ties to self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(feature = "soft")]
impl Drop for HostMem {
    fn drop(&mut self) {
        // SAFETY: from doca_soft_alloc_shared, freed once; the mmap over it is gone by now.
        unsafe { sys::doca_soft_free_shared(self.ptr.cast()) };
    }
}

fn raw(test: Test, p: &Params) -> Result<Report> {
    let size = p.size.max(1);
    let window = test.window();
    let dev = Device::open_default()?;
    let d = dev.as_ptr();
    let mut host_mem = HostMem::new(size * window)?;
    let host = host_mem.as_mut();
    host.fill(0x5a);
    let mut local = vec![0u8; size * window];
    let mh = raw_mmap(d, host, sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | sys::DOCA_ACCESS_FLAG_PCI_READ_WRITE)?;
    let ml = raw_mmap(d, &mut local, sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE)?;
    let (mut pe, mut dma, mut inv, mut remote) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    let mut tasks = vec![ptr::null_mut(); window];
    let mut dsts = vec![ptr::null_mut(); window];
    // SAFETY: the C sequence of the PE samples, on this thread; every pointer is checked
    // through its status before use, and everything is torn down below.
    let result = unsafe {
        (|| -> Result<(Samples, Duration)> {
            let (mut blob, mut n) = (ptr::null(), 0usize);
            ok(sys::doca_mmap_export_pci(mh, d, &mut blob, &mut n), "doca_mmap_export_pci")?;
            ok(sys::doca_mmap_create_from_export(ptr::null(), blob, n, d, &mut remote), "create_from_export")?;
            ok(sys::doca_pe_create(&mut pe), "doca_pe_create")?;
            ok(sys::doca_dma_create(d, &mut dma), "doca_dma_create")?;
            ok(
                sys::doca_dma_task_memcpy_set_conf(dma, Some(on_memcpy), Some(on_memcpy), window as u32),
                "doca_dma_task_memcpy_set_conf",
            )?;
            ok(sys::doca_pe_connect_ctx(pe, sys::doca_dma_as_ctx(dma)), "doca_pe_connect_ctx")?;
            ok(sys::doca_ctx_start(sys::doca_dma_as_ctx(dma)), "doca_ctx_start")?;
            ok(sys::doca_buf_inventory_create(2 * window, &mut inv), "doca_buf_inventory_create")?;
            ok(sys::doca_buf_inventory_start(inv), "doca_buf_inventory_start")?;
            for w in 0..window {
                let sa: *mut c_void = host.as_mut_ptr().add(w * size).cast();
                let da: *mut c_void = local.as_mut_ptr().add(w * size).cast();
                let (mut s, mut t) = (ptr::null_mut(), ptr::null_mut());
                ok(sys::doca_buf_inventory_buf_get_by_args(inv, remote, sa, size, sa, size, &mut s), "buf src")?;
                ok(sys::doca_buf_inventory_buf_get_by_args(inv, ml, da, size, da, 0, &mut dsts[w]), "buf dst")?;
                ok(
                    sys::doca_dma_task_memcpy_alloc_init(dma, s, dsts[w], sys::doca_data::from_u64(w as u64), &mut t),
                    "doca_dma_task_memcpy_alloc_init",
                )?;
                tasks[w] = t;
            }
            let submit = |w: usize| -> Result<()> {
                ok(sys::doca_buf_reset_data_len(dsts[w]), "doca_buf_reset_data_len")?;
                ok(sys::doca_task_submit(sys::doca_dma_task_memcpy_as_task(tasks[w])), "doca_task_submit")
            };
            let wait_one = || -> Result<usize> {
                loop {
                    if let Some((w, status)) = DONE.with(|d| d.borrow_mut().pop()) {
                        ok(status, "dma.memcpy")?;
                        return Ok(w);
                    }
                    sys::doca_pe_progress(pe);
                }
            };
            if window == 1 {
                return timed(p.warmup, p.iters, 1.0, |_| {
                    submit(0)?;
                    wait_one().map(drop)
                });
            }
            // Keep `window` copies in flight: re-submit each one as it completes.
            let mut started = vec![Stamp::now(); window];
            let total = p.warmup + p.iters;
            let mut samples = Recorder::new(1.0, p.iters);
            let mut begun = 0u64;
            let mut finished = 0u64;
            let mut start = Stamp::now();
            for (w, s) in started.iter_mut().enumerate().take(total.min(window as u64) as usize) {
                *s = Stamp::now();
                submit(w)?;
                begun += 1;
            }
            while finished < total {
                let w = wait_one()?;
                finished += 1;
                if finished == p.warmup {
                    start = Stamp::now();
                }
                if finished > p.warmup {
                    samples.push(started[w].ticks_to_now());
                }
                if begun < total {
                    started[w] = Stamp::now();
                    submit(w)?;
                    begun += 1;
                }
            }
            Ok((samples.into_samples(), start.elapsed()))
        })()
    };
    // SAFETY: teardown of what was created above, in reverse order; NULLs are skipped.
    unsafe {
        for t in tasks.into_iter().filter(|t| !t.is_null()) {
            let s = sys::doca_dma_task_memcpy_get_src(t) as *mut sys::doca_buf;
            sys::doca_task_free(sys::doca_dma_task_memcpy_as_task(t));
            sys::doca_buf_dec_refcount(s, ptr::null_mut());
        }
        for b in dsts.into_iter().filter(|b| !b.is_null()) {
            sys::doca_buf_dec_refcount(b, ptr::null_mut());
        }
        if !dma.is_null() {
            sys::doca_ctx_stop(sys::doca_dma_as_ctx(dma));
            while sys::doca_pe_progress(pe) != 0 {}
            sys::doca_dma_destroy(dma);
        }
        if !inv.is_null() {
            sys::doca_buf_inventory_stop(inv);
            sys::doca_buf_inventory_destroy(inv);
        }
        if !pe.is_null() {
            sys::doca_pe_destroy(pe);
        }
        for m in [remote, ml, mh].into_iter().filter(|m| !m.is_null()) {
            sys::doca_mmap_destroy(m);
        }
    }
    let (samples, elapsed) = result?;
    Ok(Run { test: test.name(), mode: "raw", size, procs: 1 }.report(samples, p.iters, elapsed).with_bandwidth())
}
