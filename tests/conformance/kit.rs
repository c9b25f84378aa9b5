//! The conformance suite's toolkit, written only against doca-sys (so against whichever
//! provider is linked): checked calls, recording completion callbacks, bounded event loops
//! that follow DOCA's notification protocol, and an RDMA "side" (PE, RDMA ctx, registered
//! memory, buffer inventory). Adapted from doca-soft's own RDMA test helpers, with every
//! provider internal replaced by the public C API.

use std::cell::{Cell, RefCell};
use std::ffi::c_void;
use std::ptr;
use std::time::{Duration, Instant};

pub use doca_sys::*;

/// The bound of every wait in the suite.
pub const T: Duration = Duration::from_secs(10);
/// The bound of every wait for a peer process (see `kit_common.rs`).
pub const PEER_WAIT: Duration = T;

// The core shared with doca-soft's unit-test kit: checked calls, event loops, peer processes.
#[allow(dead_code)] // each of the two harnesses uses a subset
#[path = "kit_common.rs"]
mod kit_common;
pub use kit_common::*;

/// Asserts a start or stop answer: done at once, or under way (finished through progress).
#[track_caller]
pub fn ok_or_in_progress(e: doca_error_t) {
    assert!(e == DOCA_SUCCESS || e == DOCA_ERROR_IN_PROGRESS, "{}", name(e));
}

/// Opens the first device.
pub fn open_dev() -> *mut doca_dev {
    let (mut list, mut n) = (ptr::null_mut(), 0u32);
    let mut dev = ptr::null_mut();
    // SAFETY: valid out-pointers; the list is destroyed after the device is opened from it.
    unsafe {
        ok(doca_devinfo_create_list(&mut list, &mut n));
        assert!(n >= 1, "no DOCA device");
        ok(doca_dev_open(*list, &mut dev));
        ok(doca_devinfo_destroy_list(list));
    }
    dev
}

/// The state of a ctx.
pub fn state(ctx: *mut doca_ctx) -> doca_ctx_states {
    let mut s = 99;
    // SAFETY: live ctx, valid out-pointer.
    ok(unsafe { doca_ctx_get_state(ctx, &mut s) });
    s
}

/// Progresses `pe` until `ctx` reaches `want` (bounded).
#[track_caller]
pub fn progress_to(pe: *mut doca_pe, ctx: *mut doca_ctx, want: doca_ctx_states) {
    let deadline = Instant::now() + T;
    while state(ctx) != want {
        // SAFETY: live PE of this thread.
        unsafe { doca_pe_progress(pe) };
        assert!(Instant::now() < deadline, "ctx stuck in state {} (want {want})", state(ctx));
    }
}

/// The PE's notification handle.
pub fn pe_fd(pe: *mut doca_pe) -> i32 {
    let mut fd = -1;
    // SAFETY: live PE, valid out-pointer.
    ok(unsafe { doca_pe_get_notification_handle(pe, &mut fd) });
    fd
}

/// Whether `fd` becomes readable within `ms`.
pub fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd for the call.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

// ---- memory a peer can reach ----

/// Zeroed, page-aligned memory for registration: shared memory on the soft provider (its
/// cross-process and atomic path), ordinary memory on NVIDIA's (the NIC reaches any
/// registered memory).
pub struct Mem {
    pub ptr: *mut u8,
    pub len: usize,
}

impl Mem {
    pub fn new(len: usize) -> Mem {
        #[cfg(feature = "soft")]
        {
            let mut p = ptr::null_mut();
            // SAFETY: valid out-pointer; freed once in Drop.
            ok(unsafe { doca_sys::doca_soft_alloc_shared(len, &mut p) });
            Mem { ptr: p.cast(), len }
        }
        #[cfg(not(feature = "soft"))]
        {
            let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: non-zero size; freed once in Drop with the same layout.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!ptr.is_null());
            Mem { ptr, len }
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        #[cfg(feature = "soft")]
        // SAFETY: allocated in `new`, freed once, after the mmaps over it are destroyed (the
        // owner drops them first).
        unsafe {
            doca_sys::doca_soft_free_shared(self.ptr.cast());
        }
        #[cfg(not(feature = "soft"))]
        // SAFETY: as above, with the layout of `new`.
        unsafe {
            std::alloc::dealloc(self.ptr, std::alloc::Layout::from_size_align(self.len, 4096).unwrap())
        }
    }
}

// ---- RDMA sides ----

pub const ALL_RDMA: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
    | DOCA_ACCESS_FLAG_RDMA_READ
    | DOCA_ACCESS_FLAG_RDMA_WRITE
    | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

/// Configuration of a side.
#[derive(Clone, Copy, Debug)]
pub struct Cfg {
    pub mem_perms: u32,
    pub num_tasks: u32,
    pub mem_len: usize,
    /// Connections the ctx may have (DOCA's default is 1).
    pub max_conns: u16,
    /// Register the connection-management callbacks of `conformance/cm.rs`.
    pub cm: bool,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg { mem_perms: ALL_RDMA, num_tasks: 64, mem_len: 1 << 16, max_conns: 1, cm: false }
    }
}

/// One RDMA endpoint with its resources (one thread).
pub struct Side {
    pub dev: *mut doca_dev,
    pub pe: *mut doca_pe,
    pub rdma: *mut doca_rdma,
    pub mem: Mem,
    pub mmap: *mut doca_mmap,
    pub inv: *mut doca_buf_inventory,
    bufs: RefCell<Vec<*mut doca_buf>>,
    imported: RefCell<Vec<*mut doca_mmap>>,
    extra: RefCell<Vec<*mut doca_mmap>>,
    destroyed: Cell<bool>,
}

impl Side {
    /// A started side (ctx RUNNING) with `cfg`; `id` is its ctx user data.
    pub fn new(id: u64, cfg: Cfg) -> Side {
        let dev = open_dev();
        let (mut pe, mut rdma, mut mmap, mut inv) =
            (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        let mem = Mem::new(cfg.mem_len);
        // SAFETY: valid out-pointers and live objects throughout.
        unsafe {
            ok(doca_pe_create(&mut pe));
            ok(doca_rdma_create(dev, &mut rdma));
            ok(doca_rdma_set_permissions(rdma, ALL_RDMA));
            if cfg.max_conns != 1 {
                ok(doca_rdma_set_max_num_connections(rdma, cfg.max_conns));
            }
            let n = cfg.num_tasks;
            ok(doca_rdma_task_receive_set_conf(rdma, Some(cb_receive), Some(cb_receive), n));
            ok(doca_rdma_task_send_set_conf(rdma, Some(cb_send), Some(cb_send), n));
            ok(doca_rdma_task_send_imm_set_conf(rdma, Some(cb_send_imm), Some(cb_send_imm), n));
            ok(doca_rdma_task_read_set_conf(rdma, Some(cb_read), Some(cb_read), n));
            ok(doca_rdma_task_write_set_conf(rdma, Some(cb_write), Some(cb_write), n));
            ok(doca_rdma_task_write_imm_set_conf(rdma, Some(cb_write_imm), Some(cb_write_imm), n));
            ok(doca_rdma_task_atomic_cmp_swp_set_conf(rdma, Some(cb_cmp_swp), Some(cb_cmp_swp), n));
            ok(doca_rdma_task_atomic_fetch_add_set_conf(rdma, Some(cb_fetch_add), Some(cb_fetch_add), n));
            if cfg.cm {
                crate::cm::configure(rdma, n);
            }
            let ctx = doca_rdma_as_ctx(rdma);
            ok(doca_ctx_set_user_data(ctx, doca_data::from_u64(id)));
            ok(doca_pe_connect_ctx(pe, ctx));
            ok_or_in_progress(doca_ctx_start(ctx));
            progress_to(pe, ctx, DOCA_CTX_STATE_RUNNING);
            ok(doca_mmap_create(&mut mmap));
            ok(doca_mmap_set_memrange(mmap, mem.ptr.cast(), cfg.mem_len));
            ok(doca_mmap_set_permissions(mmap, cfg.mem_perms));
            ok(doca_mmap_add_dev(mmap, dev));
            ok(doca_mmap_start(mmap));
            ok(doca_buf_inventory_create(1024, &mut inv));
            ok(doca_buf_inventory_start(inv));
        }
        Side {
            dev,
            pe,
            rdma,
            mem,
            mmap,
            inv,
            bufs: RefCell::new(Vec::new()),
            imported: RefCell::new(Vec::new()),
            extra: RefCell::new(Vec::new()),
            destroyed: Cell::new(false),
        }
    }

    pub fn ctx(&self) -> *mut doca_ctx {
        // SAFETY: live rdma.
        unsafe { doca_rdma_as_ctx(self.rdma) }
    }

    pub fn state(&self) -> doca_ctx_states {
        state(self.ctx())
    }

    /// The registered memory.
    #[allow(clippy::mut_from_ref)]
    pub fn mem(&self) -> &mut [u8] {
        // SAFETY: `len` bytes owned by this side for its life; the tests only look at them
        // while no task of theirs writes the same bytes.
        unsafe { std::slice::from_raw_parts_mut(self.mem.ptr, self.mem.len) }
    }

    pub fn u64_at(&self, off: usize) -> u64 {
        u64::from_ne_bytes(self.mem()[off..off + 8].try_into().unwrap())
    }

    /// A buffer over local `[off, off+len)` with a payload of its first `data_len` bytes.
    pub fn buf(&self, off: usize, len: usize, data_len: usize) -> *mut doca_buf {
        assert!(off + len <= self.mem.len);
        let mut b = ptr::null_mut();
        // SAFETY: live inventory and mmap; the range lies inside the mmap.
        unsafe {
            let p = self.mem.ptr.add(off).cast::<c_void>();
            ok(doca_buf_inventory_buf_get_by_args(self.inv, self.mmap, p, len, p, data_len, &mut b));
        }
        self.bufs.borrow_mut().push(b);
        b
    }

    pub fn export_mmap(&self, m: *mut doca_mmap) -> Vec<u8> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live mmap and device, valid out-pointers; the blob is copied at once.
        unsafe {
            ok(doca_mmap_export_rdma(m, self.dev, &mut p, &mut n));
            std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
        }
    }

    pub fn export_mem(&self) -> Vec<u8> {
        self.export_mmap(self.mmap)
    }

    /// A second started mmap over `[off, off+len)` of this side's memory with `perms`.
    pub fn sub_mmap(&self, off: usize, len: usize, perms: u32) -> *mut doca_mmap {
        assert!(off + len <= self.mem.len);
        let mut m = ptr::null_mut();
        // SAFETY: valid out-pointer; the memory outlives the mmap (destroyed first).
        unsafe {
            ok(doca_mmap_create(&mut m));
            ok(doca_mmap_set_memrange(m, self.mem.ptr.add(off).cast(), len));
            ok(doca_mmap_set_permissions(m, perms));
            ok(doca_mmap_add_dev(m, self.dev));
            ok(doca_mmap_start(m));
        }
        self.extra.borrow_mut().push(m);
        m
    }

    /// Imports a peer's export: (imported mmap, the peer's base address).
    pub fn import(&self, blob: &[u8]) -> (*mut doca_mmap, usize) {
        let mut m = ptr::null_mut();
        let (mut a, mut l) = (ptr::null_mut(), 0usize);
        // SAFETY: `blob` readable; valid out-pointers.
        unsafe {
            ok(doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), blob.len(), self.dev, &mut m));
            ok(doca_mmap_get_memrange(m, &mut a, &mut l));
        }
        self.imported.borrow_mut().push(m);
        (m, a as usize)
    }

    /// A buffer over imported memory at the peer's address `remote`.
    pub fn rbuf(&self, m: *mut doca_mmap, remote: usize, len: usize, data_len: usize) -> *mut doca_buf {
        let mut b = ptr::null_mut();
        // SAFETY: live inventory and imported mmap; the range lies inside it.
        unsafe {
            let p = remote as *mut c_void;
            ok(doca_buf_inventory_buf_get_by_args(self.inv, m, p, len, p, data_len, &mut b));
        }
        self.bufs.borrow_mut().push(b);
        b
    }

    /// Stops the ctx and progresses until IDLE (the recorders free every flushed task).
    pub fn stop(&self) {
        // SAFETY: live ctx.
        ok_or_in_progress(unsafe { doca_ctx_stop(self.ctx()) });
        progress_to(self.pe, self.ctx(), DOCA_CTX_STATE_IDLE);
    }

    /// Restarts a stopped ctx.
    pub fn start(&self) {
        // SAFETY: live ctx.
        ok_or_in_progress(unsafe { doca_ctx_start(self.ctx()) });
        progress_to(self.pe, self.ctx(), DOCA_CTX_STATE_RUNNING);
    }

    /// Nothing to do: the memory is a [`Mem`], freed when the side drops (see `destroy` in
    /// `kit_common.rs`).
    fn release_memory(&self) {}
}

impl Drop for Side {
    fn drop(&mut self) {
        // A failed assertion must not leak a ctx that still has tasks; on success the test
        // destroyed the side itself (and checked every step).
        if !self.destroyed.get() && !std::thread::panicking() {
            self.destroy();
        }
    }
}

/// Two started, connected sides (ctx user data 1 and 2).
pub fn pair(cfg_a: Cfg, cfg_b: Cfg) -> (Side, Side, *mut doca_rdma_connection, *mut doca_rdma_connection) {
    let a = Side::new(1, cfg_a);
    let b = Side::new(2, cfg_b);
    let (ca, cb) = connect_pair(&a, &b);
    (a, b, ca, cb)
}

// ---- a peer process: this test binary again, running one ignored test in a role ----

/// The environment variable that tells the re-executed binary which role to play.
pub const ROLE_ENV: &str = "ASYNC_DOCA_CONFORMANCE_ROLE";
