//! DMA in one process: capabilities, the memcpy task on local memory and on memory imported
//! from a PCI export (which goes through the same remote path as another process's), and
//! the error rules. Cross-process copies (and a killed exporter) are tested in `tests/dma.rs`.

use core::cell::RefCell;
use core::ffi::c_void;
use core::ptr;

use super::*;
use crate::buf::*;
use crate::ctx::{
    doca_ctx_get_num_inflight_tasks, doca_ctx_get_state, doca_ctx_set_state_changed_cb, doca_ctx_start, doca_ctx_stop,
};
use crate::dev::{doca_dev_as_devinfo, doca_dev_close};
use crate::mmap::*;
use crate::pe::{doca_pe, doca_pe_connect_ctx};
use crate::task::doca_task_free;
use crate::testkit::dev::test_open_default;
use crate::testkit::{destroy_pe, drain, new_pe};

thread_local! {
    /// (user data, status) of every completion, in delivery order.
    static DONE: RefCell<Vec<(u64, doca_error_t)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_done(task: *mut doca_dma_task_memcpy, ud: doca_data, _cud: doca_data) {
    // SAFETY: a live task handed back by progress; ours to query and free.
    let status = unsafe { crate::task::doca_task_get_status(doca_dma_task_memcpy_as_task(task)) };
    DONE.with(|d| d.borrow_mut().push((ud.as_u64(), status)));
    // SAFETY: the task is ours again (inside its callback) and not used afterwards.
    unsafe { doca_task_free(doca_dma_task_memcpy_as_task(task)) };
}

fn take_done() -> Vec<(u64, doca_error_t)> {
    DONE.with(|d| core::mem::take(&mut *d.borrow_mut()))
}

/// A started dma with `n` tasks on a new PE.
struct Rig {
    dev: *mut doca_dev,
    pe: *mut doca_pe,
    dma: *mut doca_dma,
    inv: *mut doca_buf_inventory,
}

impl Rig {
    fn new(n: u32) -> Rig {
        take_done();
        let dev = test_open_default();
        let pe = new_pe();
        let mut dma = ptr::null_mut();
        let mut inv = ptr::null_mut();
        // SAFETY: valid out-pointers, live objects.
        unsafe {
            assert_eq!(doca_dma_create(dev, &mut dma), DOCA_SUCCESS);
            assert_eq!(doca_dma_task_memcpy_set_conf(dma, Some(on_done), Some(on_done), n), DOCA_SUCCESS);
            assert_eq!(doca_pe_connect_ctx(pe, doca_dma_as_ctx(dma)), DOCA_SUCCESS);
            assert_eq!(doca_ctx_start(doca_dma_as_ctx(dma)), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_create(64, &mut inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_start(inv), DOCA_SUCCESS);
        }
        Rig { dev, pe, dma, inv }
    }

    fn mmap(&self, mem: &mut [u8], perms: u32) -> *mut doca_mmap {
        let mut m = ptr::null_mut();
        // SAFETY: valid out-pointer; `mem` outlives the mmap in every test.
        unsafe {
            assert_eq!(doca_mmap_create(&mut m), DOCA_SUCCESS);
            assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), mem.len()), DOCA_SUCCESS);
            assert_eq!(doca_mmap_set_permissions(m, perms), DOCA_SUCCESS);
            assert_eq!(doca_mmap_add_dev(m, self.dev), DOCA_SUCCESS);
            assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
        }
        m
    }

    /// Exports `m` (PCI or RDMA) and imports the blob again: a remote mmap over it.
    fn import(&self, m: *mut doca_mmap, pci: bool) -> *mut doca_mmap {
        let mut p = ptr::null();
        let mut n = 0usize;
        let mut r = ptr::null_mut();
        // SAFETY: live mmap and device, valid out-pointers; the blob is read while `m` lives.
        unsafe {
            let rc = if pci {
                doca_mmap_export_pci(m, self.dev, &mut p, &mut n)
            } else {
                doca_mmap_export_rdma(m, self.dev, &mut p, &mut n)
            };
            assert_eq!(rc, DOCA_SUCCESS);
            assert_eq!(doca_mmap_create_from_export(ptr::null(), p, n, self.dev, &mut r), DOCA_SUCCESS);
        }
        r
    }

    /// A buffer over `[addr, addr+len)` of `m` with `data_len` bytes of payload at its start.
    fn buf(&self, m: *mut doca_mmap, addr: *mut u8, len: usize, data_len: usize) -> *mut doca_buf {
        let mut b = ptr::null_mut();
        let a: *mut c_void = addr.cast();
        // SAFETY: live inventory and mmap; the range lies inside the mmap.
        let rc = unsafe { doca_buf_inventory_buf_get_by_args(self.inv, m, a, len, a, data_len, &mut b) };
        assert_eq!(rc, DOCA_SUCCESS);
        b
    }

    /// Allocates and submits one memcpy; returns the submit result (the task is freed on
    /// a failed submit).
    fn memcpy(&self, src: *const doca_buf, dst: *mut doca_buf, ud: u64) -> doca_error_t {
        let mut t = ptr::null_mut();
        // SAFETY: live dma and buffers; the task is freed on failure or in its callback.
        unsafe {
            assert_eq!(
                doca_dma_task_memcpy_alloc_init(self.dma, src, dst, doca_data::from_u64(ud), &mut t),
                DOCA_SUCCESS
            );
            let rc = crate::task::doca_task_submit(doca_dma_task_memcpy_as_task(t));
            if rc != DOCA_SUCCESS {
                doca_task_free(doca_dma_task_memcpy_as_task(t));
            }
            rc
        }
    }

    /// The ctx's state.
    fn state(&self) -> doca_ctx_states {
        let mut st = DOCA_CTX_STATE_RUNNING;
        // SAFETY: live dma, valid out-pointer.
        assert_eq!(unsafe { doca_ctx_get_state(doca_dma_as_ctx(self.dma), &mut st) }, DOCA_SUCCESS);
        st
    }

    /// After a failed copy whose completion was drained (and freed): the ctx stopped by
    /// itself, as DOCA's DMA does; starts it again.
    fn restart_after_failure(&self) {
        assert_eq!(self.state(), DOCA_CTX_STATE_IDLE, "a failed copy stops the ctx");
        // SAFETY: live, IDLE ctx.
        assert_eq!(unsafe { doca_ctx_start(doca_dma_as_ctx(self.dma)) }, DOCA_SUCCESS);
    }

    fn finish(self) {
        // SAFETY: live objects, torn down in order.
        unsafe {
            let c = doca_dma_as_ctx(self.dma);
            let rc = doca_ctx_stop(c);
            assert!(rc == DOCA_SUCCESS || rc == DOCA_ERROR_IN_PROGRESS, "{rc:?}");
            drain(self.pe);
            assert_eq!(doca_dma_destroy(self.dma), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_stop(self.inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_destroy(self.inv), DOCA_SUCCESS);
        }
        destroy_pe(self.pe);
        // SAFETY: no object uses the device any more.
        assert_eq!(unsafe { doca_dev_close(self.dev) }, DOCA_SUCCESS);
    }
}

fn data_len(b: *mut doca_buf) -> usize {
    let mut n = 0;
    // SAFETY: live buffer, valid out-pointer.
    assert_eq!(unsafe { doca_buf_get_data_len(b, &mut n) }, DOCA_SUCCESS);
    n
}

fn dec(b: *mut doca_buf) {
    // SAFETY: a buffer of this test, returned once.
    unsafe { doca_buf_dec_refcount(b, ptr::null_mut()) };
}

fn destroy_mmap(m: *mut doca_mmap) {
    // SAFETY: an mmap of this test without buffers.
    assert_eq!(unsafe { doca_mmap_destroy(m) }, DOCA_SUCCESS);
}

/// The DPU-side layout of the remote copies: "host" memory (filled by `fill`) exported over
/// PCI with `pci` and imported again, beside local memory, `len` bytes each.
struct HostAndLocal {
    host: Vec<u8>,
    local: Vec<u8>,
    mh: *mut doca_mmap,
    ml: *mut doca_mmap,
    remote: *mut doca_mmap,
}

impl Rig {
    fn host_and_local(&self, len: usize, pci: u32, fill: impl Fn(usize) -> u8) -> HostAndLocal {
        let mut host: Vec<u8> = (0..len).map(fill).collect();
        let mut local = vec![0u8; len];
        let mh = self.mmap(&mut host, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | pci);
        let ml = self.mmap(&mut local, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
        let remote = self.import(mh, true);
        HostAndLocal { host, local, mh, ml, remote }
    }
}

impl HostAndLocal {
    /// Destroys the three mmaps (their buffers given back), then frees the memory.
    fn destroy(self) {
        for m in [self.remote, self.mh, self.ml] {
            destroy_mmap(m);
        }
    }
}

#[test]
fn capabilities() {
    let dev = test_open_default();
    // SAFETY: live device, valid out-pointers.
    unsafe {
        let info = doca_dev_as_devinfo(dev);
        assert_eq!(doca_dma_cap_task_memcpy_is_supported(info), DOCA_SUCCESS);
        assert_eq!(doca_dma_cap_task_memcpy_is_supported(ptr::null()), DOCA_ERROR_INVALID_VALUE);
        let (mut list, mut size, mut tasks) = (0u32, 0u64, 0u32);
        assert_eq!(doca_dma_cap_task_memcpy_get_max_buf_list_len(info, &mut list), DOCA_SUCCESS);
        assert_eq!(doca_dma_cap_task_memcpy_get_max_buf_size(info, &mut size), DOCA_SUCCESS);
        assert_eq!((list, size), (MAX_BUF_LIST_LEN, MAX_BUF_SIZE));
        assert_eq!(doca_dma_cap_task_memcpy_get_max_buf_size(info, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        let mut dma = ptr::null_mut();
        assert_eq!(doca_dma_create(dev, &mut dma), DOCA_SUCCESS);
        assert_eq!(doca_dma_cap_get_max_num_tasks(dma, &mut tasks), DOCA_SUCCESS);
        assert_eq!(tasks, MAX_NUM_TASKS);
        let mut gpu = ptr::null_mut();
        assert_eq!(doca_dma_get_gpu_handle(dma, &mut gpu), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(doca_dma_task_memcpy_set_conf(dma, Some(on_done), None, 4), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(
            doca_dma_task_memcpy_set_conf(dma, Some(on_done), Some(on_done), MAX_NUM_TASKS + 1),
            DOCA_ERROR_INVALID_VALUE
        );
        assert_eq!(doca_dma_destroy(dma), DOCA_SUCCESS);
        assert_eq!(doca_dma_create(ptr::null_mut(), &mut dma), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

#[test]
fn local_copy_appends_after_the_destination_payload() {
    let rig = Rig::new(4);
    let mut src = vec![0u8; 64];
    let mut dst = vec![0u8; 64];
    for (i, b) in src.iter_mut().enumerate() {
        *b = i as u8;
    }
    let ms = rig.mmap(&mut src, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let md = rig.mmap(&mut dst, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let s = rig.buf(ms, src.as_mut_ptr(), 64, 16); // payload: bytes 0..16
    let d = rig.buf(md, dst.as_mut_ptr(), 40, 0); // room: 40
                                                  // The getters see what alloc_init stored; the setters replace it.
    let mut t = ptr::null_mut();
    // SAFETY: live objects.
    unsafe {
        assert_eq!(doca_dma_task_memcpy_alloc_init(rig.dma, s, d, doca_data::from_u64(1), &mut t), DOCA_SUCCESS);
        assert_eq!((doca_dma_task_memcpy_get_src(t), doca_dma_task_memcpy_get_dst(t)), (s as *const _, d));
        doca_dma_task_memcpy_set_dst(t, ptr::null_mut());
        assert_eq!(crate::task::doca_task_submit(doca_dma_task_memcpy_as_task(t)), DOCA_ERROR_INVALID_VALUE);
        doca_dma_task_memcpy_set_dst(t, d);
        doca_dma_task_memcpy_set_src(t, s);
        assert_eq!(crate::task::doca_task_submit(doca_dma_task_memcpy_as_task(t)), DOCA_SUCCESS);
    }
    assert!(take_done().is_empty(), "callbacks run from progress only");
    assert_eq!(drain(rig.pe), 1);
    assert_eq!(take_done(), vec![(1, DOCA_SUCCESS)]);
    assert_eq!(data_len(d), 16);
    // A second copy lands after the first.
    assert_eq!(rig.memcpy(s, d, 2), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(2, DOCA_SUCCESS)]);
    assert_eq!(data_len(d), 32);
    assert_eq!(&dst[..16], &src[..16]);
    assert_eq!(&dst[16..32], &src[..16]);
    // No room for a third (8 bytes left): the error callback, data_len unchanged.
    assert_eq!(rig.memcpy(s, d, 3), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(3, DOCA_ERROR_INVALID_VALUE)]);
    assert_eq!(data_len(d), 32);
    assert_eq!(dst[32], 0, "nothing written past the payload");
    // The failure stopped the ctx; started again, it copies.
    rig.restart_after_failure();
    let d2 = rig.buf(md, dst[48..].as_mut_ptr(), 16, 0);
    assert_eq!(rig.memcpy(s, d2, 4), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(4, DOCA_SUCCESS)]);
    for b in [s, d, d2] {
        dec(b);
    }
    destroy_mmap(ms);
    destroy_mmap(md);
    rig.finish();
}

#[test]
fn read_only_destination_and_pool_rules() {
    let rig = Rig::new(2);
    let mut src = vec![7u8; 32];
    let mut dst = vec![0u8; 32];
    let ms = rig.mmap(&mut src, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let md = rig.mmap(&mut dst, DOCA_ACCESS_FLAG_LOCAL_READ_ONLY);
    let s = rig.buf(ms, src.as_mut_ptr(), 32, 32);
    let d = rig.buf(md, dst.as_mut_ptr(), 32, 0);
    assert_eq!(rig.memcpy(s, d, 1), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(1, DOCA_ERROR_NOT_PERMITTED)]);
    assert_eq!(dst, vec![0u8; 32]);
    rig.restart_after_failure();

    // Pool of 2: a third allocation is NO_MEMORY; configuration only while IDLE; destroy
    // refused while running.
    let (mut a, mut b, mut c) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    let ud = doca_data::from_u64(0);
    // SAFETY: live objects; the tasks are freed below.
    unsafe {
        assert_eq!(doca_dma_task_memcpy_alloc_init(rig.dma, s, d, ud, &mut a), DOCA_SUCCESS);
        assert_eq!(doca_dma_task_memcpy_alloc_init(rig.dma, s, d, ud, &mut b), DOCA_SUCCESS);
        assert_eq!(doca_dma_task_memcpy_alloc_init(rig.dma, s, d, ud, &mut c), DOCA_ERROR_NO_MEMORY);
        assert_eq!(doca_dma_task_memcpy_set_conf(rig.dma, Some(on_done), Some(on_done), 8), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(doca_dma_destroy(rig.dma), DOCA_ERROR_IN_USE);
        // The leak check's counter is process-wide (other tests allocate in parallel): it
        // counts at least our two while they are allocated.
        let mut n = 0usize;
        assert_eq!(crate::task::doca_soft_get_num_allocated_tasks(&mut n), DOCA_SUCCESS);
        assert!(n >= 2, "{n} tasks allocated, ours are two");
        assert_eq!(crate::task::doca_soft_get_num_allocated_tasks(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        doca_task_free(doca_dma_task_memcpy_as_task(a));
        doca_task_free(doca_dma_task_memcpy_as_task(b));
    }
    dec(s);
    dec(d);
    destroy_mmap(ms);
    destroy_mmap(md);
    rig.finish();
}

#[test]
fn allocation_needs_a_running_ctx() {
    let dev = test_open_default();
    let mut dma = ptr::null_mut();
    let mut t = ptr::null_mut();
    // SAFETY: live objects, valid out-pointers.
    unsafe {
        assert_eq!(doca_dma_create(dev, &mut dma), DOCA_SUCCESS);
        assert_eq!(doca_dma_task_memcpy_set_conf(dma, Some(on_done), Some(on_done), 2), DOCA_SUCCESS);
        let rc = doca_dma_task_memcpy_alloc_init(dma, ptr::null(), ptr::null_mut(), doca_data::from_u64(0), &mut t);
        assert_eq!(rc, DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_dma_destroy(dma), DOCA_SUCCESS);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

#[test]
fn imported_pci_memory_both_ways_and_rdma_exports_refused() {
    let rig = Rig::new(8);
    let mut m = rig.host_and_local(4096, DOCA_ACCESS_FLAG_PCI_READ_WRITE, |i| (i * 7) as u8);
    let (hp, lp, ml, remote) = (m.host.as_mut_ptr(), m.local.as_mut_ptr(), m.ml, m.remote);

    // Remote -> local: the first KiB of "host" memory in.
    let rs = rig.buf(remote, hp, 1024, 1024);
    let ld = rig.buf(ml, lp, 4096, 0);
    assert_eq!(rig.memcpy(rs, ld, 1), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(1, DOCA_SUCCESS)]);
    assert_eq!(&m.local[..1024], &m.host[..1024]);

    // Local -> remote: a result back, at host offset 2048.
    m.local[..16].copy_from_slice(b"result from dpu!");
    let ls = rig.buf(ml, lp, 16, 16);
    // SAFETY: the offset stays inside `host`.
    let rd = rig.buf(remote, unsafe { hp.add(2048) }, 1024, 0);
    assert_eq!(rig.memcpy(ls, rd, 2), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(2, DOCA_SUCCESS)]);
    assert_eq!(data_len(rd), 16);
    assert_eq!(&m.host[2048..2064], b"result from dpu!");

    // Remote -> remote (through the bounce buffer).
    // SAFETY: inside `host`.
    let rd2 = rig.buf(remote, unsafe { hp.add(3072) }, 1024, 0);
    assert_eq!(rig.memcpy(rs, rd2, 3), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(3, DOCA_SUCCESS)]);
    assert_eq!(m.host[3072..4096], m.host[..1024].to_vec()[..]);

    // An import of an RDMA export is not DMA-reachable memory.
    let rdma_import = rig.import(m.mh, false);
    let rr = rig.buf(rdma_import, hp, 64, 64);
    assert_eq!(rig.memcpy(rr, ld, 4), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(4, DOCA_ERROR_NOT_PERMITTED)]);

    for b in [rs, ld, ls, rd, rd2, rr] {
        dec(b);
    }
    destroy_mmap(rdma_import);
    m.destroy();
    rig.finish();
}

#[test]
fn read_only_pci_export_refuses_writes() {
    let rig = Rig::new(4);
    let mut m = rig.host_and_local(256, DOCA_ACCESS_FLAG_PCI_READ_ONLY, |_| 5);
    m.local.fill(9);
    let (ml, remote) = (m.ml, m.remote);
    let ls = rig.buf(ml, m.local.as_mut_ptr(), 128, 128);
    let rd = rig.buf(remote, m.host.as_mut_ptr(), 256, 0);
    assert_eq!(rig.memcpy(ls, rd, 1), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(1, DOCA_ERROR_NOT_PERMITTED)]);
    assert_eq!(m.host, vec![5u8; 256]);
    assert_eq!(data_len(rd), 0);
    rig.restart_after_failure();
    // Reading it is allowed.
    // SAFETY: inside `local`.
    let ld = rig.buf(ml, unsafe { m.local.as_mut_ptr().add(128) }, 128, 0);
    let rs = rig.buf(remote, m.host.as_mut_ptr(), 128, 128);
    assert_eq!(rig.memcpy(rs, ld, 2), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(2, DOCA_SUCCESS)]);
    assert_eq!(&m.local[128..], &[5u8; 128][..]);
    for b in [ls, rd, ld, rs] {
        dec(b);
    }
    m.destroy();
    rig.finish();
}

thread_local! {
    /// The state transitions reported to [`on_state`], in order.
    static STATES: RefCell<Vec<(doca_ctx_states, doca_ctx_states)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_state(_ud: doca_data, _ctx: *mut doca_ctx, prev: doca_ctx_states, next: doca_ctx_states) {
    STATES.with(|s| s.borrow_mut().push((prev, next)));
}

/// A failed copy stops the ctx, the way NVIDIA's `pe_task_error` sample relies on: a batch
/// with a copy of an empty source in the middle submits whole; the copies before it succeed,
/// it fails, the ones after it are flushed without touching memory; progress then reports
/// RUNNING → STOPPING and, once the callbacks freed every task, STOPPING → IDLE; nothing is
/// in flight; the ctx starts again and copies. A ctx stopped by the user while a failure is
/// pending stops once, as a plain stop.
#[test]
fn a_failed_copy_stops_the_ctx_and_flushes_the_copies_after_it() {
    const N: usize = 8;
    const BAD: usize = 2;
    let rig = Rig::new(N as u32);
    STATES.with(|s| s.borrow_mut().clear());
    // SAFETY: live ctx; the callback only records.
    assert_eq!(unsafe { doca_ctx_set_state_changed_cb(doca_dma_as_ctx(rig.dma), Some(on_state)) }, DOCA_SUCCESS);
    let mut src = vec![0u8; N * 64];
    let mut dst = vec![0u8; N * 64];
    for (k, chunk) in src.chunks_mut(64).enumerate() {
        chunk.fill(k as u8 + 1);
    }
    let ms = rig.mmap(&mut src, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let md = rig.mmap(&mut dst, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let (sp, dp) = (src.as_mut_ptr(), dst.as_mut_ptr());
    // Copy k's source and destination: 64 bytes at k * 64 (wrapping_add: plain address
    // arithmetic, inside the two vectors).
    let srcs: Vec<_> =
        (0..N).map(|k| rig.buf(ms, sp.wrapping_add(k * 64), 64, if k == BAD { 0 } else { 64 })).collect();
    let dsts: Vec<_> = (0..N).map(|k| rig.buf(md, dp.wrapping_add(k * 64), 64, 0)).collect();
    for k in 0..N {
        assert_eq!(rig.memcpy(srcs[k], dsts[k], k as u64), DOCA_SUCCESS, "every submit of the batch succeeds");
    }
    assert_eq!(rig.state(), DOCA_CTX_STATE_RUNNING, "the failure is reported by progress, not by submit");
    drain(rig.pe);
    let expect: Vec<_> = (0..N)
        .map(|k| {
            let status = match k {
                k if k < BAD => DOCA_SUCCESS,
                BAD => DOCA_ERROR_INVALID_VALUE,
                _ => crate::ctx::FLUSH_STATUS,
            };
            (k as u64, status)
        })
        .collect();
    assert_eq!(take_done(), expect);
    for k in 0..N {
        let copied = k < BAD;
        assert_eq!(data_len(dsts[k]), if copied { 64 } else { 0 }, "copy {k}");
        assert!(dst[k * 64..(k + 1) * 64].iter().all(|&b| b == if copied { k as u8 + 1 } else { 0 }), "copy {k}");
    }
    let mut inflight = 1usize;
    // SAFETY: live ctx, valid out-pointer.
    assert_eq!(unsafe { doca_ctx_get_num_inflight_tasks(doca_dma_as_ctx(rig.dma), &mut inflight) }, DOCA_SUCCESS);
    assert_eq!(inflight, 0);
    assert_eq!(rig.state(), DOCA_CTX_STATE_IDLE);
    assert_eq!(
        STATES.with(|s| s.borrow().clone()),
        vec![(DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING), (DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE)]
    );

    // Started again, it copies; a stop while a failure is pending is one plain stop.
    STATES.with(|s| s.borrow_mut().clear());
    rig.restart_after_failure();
    assert_eq!(rig.memcpy(srcs[0], dsts[3], 10), DOCA_SUCCESS);
    assert_eq!(rig.memcpy(srcs[BAD], dsts[4], 11), DOCA_SUCCESS);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(doca_dma_as_ctx(rig.dma)) }, DOCA_ERROR_IN_PROGRESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(10, DOCA_SUCCESS), (11, DOCA_ERROR_INVALID_VALUE)]);
    assert_eq!(rig.state(), DOCA_CTX_STATE_IDLE);
    assert_eq!(
        STATES.with(|s| s.borrow().clone()),
        vec![
            (DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_RUNNING),
            (DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING),
            (DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE)
        ]
    );
    for b in srcs.into_iter().chain(dsts) {
        dec(b);
    }
    destroy_mmap(ms);
    destroy_mmap(md);
    rig.finish();
}

mod lists;
