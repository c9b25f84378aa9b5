//! Test-only helpers for the RDMA tests: a "side" (PE, RDMA ctx, registered shared memory,
//! a buffer inventory), connected pairs, task helpers that call the C entry points,
//! recording callbacks, bounded event loops, and a child-process harness. The
//! connection-management harness is [`cm`].

use core::cell::{Cell, RefCell};
use core::ffi::c_void;
use core::ptr;
use std::time::{Duration, Instant};

use crate::buf::*;
use crate::ctx::*;
use crate::dev::{doca_dev, doca_dev_close, test_open_default};
use crate::errors::doca_error_get_name;
use crate::mmap::*;
use crate::pe::*;
use crate::rdma::accessors::*;
use crate::rdma::cm::doca_rdma_start_listen_to_port;
use crate::rdma::remote::*;
use crate::rdma::tasks::*;
use crate::rdma::*;
use crate::task::*;
use crate::testkit::{pe_fd, readable};
use crate::types::*;

pub(crate) mod cm;

// ---- sides ----

/// Configuration of a side.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cfg {
    /// `doca_rdma_set_permissions`.
    pub perms: u32,
    /// Permissions of the side's registered memory.
    pub mem_perms: u32,
    pub sq: u32,
    pub rq: u32,
    pub max_conns: u16,
    pub num_tasks: u32,
    pub mem_len: usize,
    /// Register the recording connection-management callbacks (see [`cm`]).
    pub cm: bool,
    /// `doca_rdma_set_connection_request_timeout` (0: the default).
    pub cm_timeout_ms: u16,
    /// `max_send_buf_list_len` and the receive's `dst_buf_list_len` (0: the defaults).
    pub buf_list_len: u32,
}

pub(crate) const ALL_RDMA: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
    | DOCA_ACCESS_FLAG_RDMA_READ
    | DOCA_ACCESS_FLAG_RDMA_WRITE
    | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            perms: ALL_RDMA,
            mem_perms: ALL_RDMA,
            sq: 64,
            rq: 64,
            max_conns: 4,
            num_tasks: 64,
            mem_len: 1 << 20,
            cm: false,
            cm_timeout_ms: 0,
            buf_list_len: 0,
        }
    }
}

/// One RDMA endpoint with its resources (single thread).
pub(crate) struct Side {
    pub _id: u64,
    pub dev: *mut doca_dev,
    pub pe: *mut doca_pe,
    pub rdma: *mut doca_rdma,
    pub mem: *mut u8,
    pub mem_len: usize,
    pub mmap: *mut doca_mmap,
    pub inv: *mut doca_buf_inventory,
    bufs: RefCell<Vec<*mut doca_buf>>,
    imported: RefCell<Vec<*mut doca_mmap>>,
    extra: RefCell<Vec<*mut doca_mmap>>,
    destroyed: Cell<bool>,
}

impl Side {
    /// A started side (ctx RUNNING) with `cfg`; `id` is its ctx user data.
    pub(crate) fn new(id: u64, cfg: Cfg) -> Side {
        let dev = test_open_default();
        let mut pe = ptr::null_mut();
        let mut rdma = ptr::null_mut();
        let mem = alloc_shared(cfg.mem_len).unwrap();
        let mut mmap = ptr::null_mut();
        let mut inv = ptr::null_mut();
        // SAFETY: valid out-pointers and live objects throughout.
        unsafe {
            ok(doca_pe_create(&mut pe));
            ok(doca_rdma_create(dev, &mut rdma));
            ok(doca_rdma_set_permissions(rdma, cfg.perms));
            ok(doca_rdma_set_send_queue_size(rdma, cfg.sq));
            ok(doca_rdma_set_recv_queue_size(rdma, cfg.rq));
            ok(doca_rdma_set_max_num_connections(rdma, cfg.max_conns));
            let n = cfg.num_tasks;
            ok(doca_rdma_task_receive_set_conf(rdma, Some(cb_receive), Some(cb_receive), n));
            ok(doca_rdma_task_send_set_conf(rdma, Some(cb_send), Some(cb_send), n));
            ok(doca_rdma_task_send_imm_set_conf(rdma, Some(cb_send_imm), Some(cb_send_imm), n));
            ok(doca_rdma_task_read_set_conf(rdma, Some(cb_read), Some(cb_read), n));
            ok(doca_rdma_task_write_set_conf(rdma, Some(cb_write), Some(cb_write), n));
            ok(doca_rdma_task_write_imm_set_conf(rdma, Some(cb_write_imm), Some(cb_write_imm), n));
            ok(doca_rdma_task_atomic_cmp_swp_set_conf(rdma, Some(cb_cmp_swp), Some(cb_cmp_swp), n));
            ok(doca_rdma_task_atomic_fetch_add_set_conf(rdma, Some(cb_fetch_add), Some(cb_fetch_add), n));
            ok(remote::doca_rdma_task_remote_net_sync_event_get_set_conf(rdma, Some(cb_rn_get), Some(cb_rn_get), n));
            ok(remote::doca_rdma_task_remote_net_sync_event_notify_set_set_conf(
                rdma,
                Some(cb_rn_set),
                Some(cb_rn_set),
                n,
            ));
            ok(remote::doca_rdma_task_remote_net_sync_event_notify_add_set_conf(
                rdma,
                Some(cb_rn_add),
                Some(cb_rn_add),
                n,
            ));
            if cfg.cm {
                ok(crate::rdma::cm::doca_rdma_set_connection_state_callbacks(
                    rdma,
                    Some(cm::cb_request),
                    Some(cm::cb_established),
                    Some(cm::cb_failure),
                    Some(cm::cb_disconnect),
                ));
            }
            if cfg.cm_timeout_ms != 0 {
                ok(crate::rdma::props::doca_rdma_set_connection_request_timeout(rdma, cfg.cm_timeout_ms));
            }
            if cfg.buf_list_len != 0 {
                ok(crate::rdma::props::doca_rdma_set_max_send_buf_list_len(rdma, cfg.buf_list_len));
                ok(crate::rdma::props::doca_rdma_task_receive_set_dst_buf_list_len(rdma, cfg.buf_list_len));
            }
            let ctx = doca_rdma_as_ctx(rdma);
            ok(doca_ctx_set_user_data(ctx, doca_data::from_u64(id)));
            ok(doca_pe_connect_ctx(pe, ctx));
            ok(doca_ctx_start(ctx));
            ok(doca_mmap_create(&mut mmap));
            ok(doca_mmap_set_memrange(mmap, mem.cast(), cfg.mem_len));
            ok(doca_mmap_set_permissions(mmap, cfg.mem_perms));
            ok(doca_mmap_add_dev(mmap, dev));
            ok(doca_mmap_start(mmap));
            ok(doca_buf_inventory_create(4096, &mut inv));
            ok(doca_buf_inventory_start(inv));
        }
        Side {
            _id: id,
            dev,
            pe,
            rdma,
            mem,
            mem_len: cfg.mem_len,
            mmap,
            inv,
            bufs: RefCell::new(Vec::new()),
            imported: RefCell::new(Vec::new()),
            extra: RefCell::new(Vec::new()),
            destroyed: Cell::new(false),
        }
    }

    pub(crate) fn ctx(&self) -> *mut doca_ctx {
        // SAFETY: live rdma.
        unsafe { doca_rdma_as_ctx(self.rdma) }
    }

    pub(crate) fn state(&self) -> doca_ctx_states {
        let mut s = 99;
        // SAFETY: live ctx, valid out-pointer.
        ok(unsafe { doca_ctx_get_state(self.ctx(), &mut s) });
        s
    }

    /// The registered memory as a slice.
    #[allow(clippy::mut_from_ref)]
    pub(crate) fn mem(&self) -> &mut [u8] {
        // SAFETY: `mem_len` bytes of shared memory owned by this side for its life. Tests
        // only look at it while no task is writing the same bytes.
        unsafe { core::slice::from_raw_parts_mut(self.mem, self.mem_len) }
    }

    /// A buffer over local memory `[off, off+len)` with a payload of its first `data_len`
    /// bytes.
    pub(crate) fn buf(&self, off: usize, len: usize, data_len: usize) -> *mut doca_buf {
        assert!(off + len <= self.mem_len);
        let mut b = ptr::null_mut();
        // SAFETY: live inventory and mmap; the range lies inside the mmap.
        unsafe {
            let p = self.mem.add(off).cast::<c_void>();
            ok(doca_buf_inventory_buf_get_by_args(self.inv, self.mmap, p, len, p, data_len, &mut b));
        }
        self.bufs.borrow_mut().push(b);
        b
    }

    /// Returns a buffer taken with [`Side::buf`] / [`Side::rbuf`] to the inventory.
    pub(crate) fn release(&self, b: *mut doca_buf) {
        let mut v = self.bufs.borrow_mut();
        let i = v.iter().position(|&x| x == b).expect("a buffer of this side");
        v.swap_remove(i);
        // SAFETY: our live buffer, released once.
        ok(unsafe { doca_buf_dec_refcount(b, ptr::null_mut()) });
    }

    /// Exports the side's memory for RDMA.
    pub(crate) fn export_mem(&self) -> Vec<u8> {
        self.export_mmap(self.mmap)
    }

    /// Exports any started local mmap of this side for RDMA.
    pub(crate) fn export_mmap(&self, m: *mut doca_mmap) -> Vec<u8> {
        let (mut p, mut n) = (ptr::null(), 0usize);
        // SAFETY: live mmap and device, valid out-pointers; the blob is copied at once.
        unsafe {
            ok(doca_mmap_export_rdma(m, self.dev, &mut p, &mut n));
            core::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
        }
    }

    /// A second, started local mmap over `[p, p+len)` with `perms` (destroyed with the side;
    /// the memory must outlive it).
    pub(crate) fn extra_mmap(&self, p: *mut u8, len: usize, perms: u32) -> *mut doca_mmap {
        let mut m = ptr::null_mut();
        // SAFETY: valid out-pointer; the caller keeps the memory alive.
        unsafe {
            ok(doca_mmap_create(&mut m));
            ok(doca_mmap_set_memrange(m, p.cast(), len));
            ok(doca_mmap_set_permissions(m, perms));
            ok(doca_mmap_add_dev(m, self.dev));
            ok(doca_mmap_start(m));
        }
        self.extra.borrow_mut().push(m);
        m
    }

    /// Imports a peer's memory export; returns the imported mmap and the remote base
    /// address.
    pub(crate) fn import(&self, blob: &[u8]) -> (*mut doca_mmap, usize) {
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

    /// A buffer over imported memory at `remote` (the peer's address), `len` bytes, with a
    /// payload of `data_len`.
    pub(crate) fn rbuf(&self, m: *mut doca_mmap, remote: usize, len: usize, data_len: usize) -> *mut doca_buf {
        let mut b = ptr::null_mut();
        // SAFETY: live inventory and imported mmap; the range lies inside it.
        unsafe {
            let p = remote as *mut c_void;
            ok(doca_buf_inventory_buf_get_by_args(self.inv, m, p, len, p, data_len, &mut b));
        }
        self.bufs.borrow_mut().push(b);
        b
    }

    /// Remote-net sync event get into `dst`.
    pub(crate) fn rn_get(
        &self,
        c: *mut doca_rdma_connection,
        ev: *mut crate::sync_event::doca_sync_event_remote_net,
        dst: *mut doca_buf,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(remote::doca_rdma_task_remote_net_sync_event_get_allocate_init(
                self.rdma,
                c,
                ev,
                dst,
                doca_data::from_u64(ud),
                &mut t,
            ))?;
            self.submit(remote::doca_rdma_task_remote_net_sync_event_get_as_task(t))
        }
    }

    /// Remote-net sync event notify_set with the value in `src`.
    pub(crate) fn rn_set(
        &self,
        c: *mut doca_rdma_connection,
        ev: *mut crate::sync_event::doca_sync_event_remote_net,
        src: *mut doca_buf,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(remote::doca_rdma_task_remote_net_sync_event_notify_set_allocate_init(
                self.rdma,
                c,
                ev,
                src,
                doca_data::from_u64(ud),
                &mut t,
            ))?;
            self.submit(remote::doca_rdma_task_remote_net_sync_event_notify_set_as_task(t))
        }
    }

    /// Remote-net sync event notify_add of `add`, the old value into `result`.
    pub(crate) fn rn_add(
        &self,
        c: *mut doca_rdma_connection,
        ev: *mut crate::sync_event::doca_sync_event_remote_net,
        result: *mut doca_buf,
        add: u64,
        ud: u64,
    ) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        unsafe {
            res(remote::doca_rdma_task_remote_net_sync_event_notify_add_allocate_init(
                self.rdma,
                c,
                ev,
                result,
                add,
                doca_data::from_u64(ud),
                &mut t,
            ))?;
            self.submit(remote::doca_rdma_task_remote_net_sync_event_notify_add_as_task(t))
        }
    }

    /// Stops the ctx and progresses until it is IDLE (the recorders free every task).
    pub(crate) fn stop(&self) {
        // SAFETY: live ctx.
        let r = unsafe { doca_ctx_stop(self.ctx()) };
        assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{}", name(r));
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.state() != DOCA_CTX_STATE_IDLE {
            // SAFETY: live PE.
            unsafe { doca_pe_progress(self.pe) };
            assert!(Instant::now() < deadline, "ctx never reached IDLE");
        }
    }

    /// Restarts a stopped ctx.
    pub(crate) fn start(&self) {
        // SAFETY: live ctx.
        ok(unsafe { doca_ctx_start(self.ctx()) });
    }

    /// Frees the shared memory (the last step of `destroy`, in `kit_common.rs`).
    fn release_memory(&self) {
        free_shared(self.mem).unwrap();
    }
}

/// Whether the PE's fd is readable within `ms` (after the caller armed it).
pub(crate) fn fd_readable(pe: *mut doca_pe, ms: i32) -> bool {
    readable(pe_fd(pe), ms)
}

/// Arms a PE following the protocol: drain, arm, drain; returns false if the second drain
/// found work (then it is not asleep).
pub(crate) fn arm(pe: *mut doca_pe) -> bool {
    drain(&[pe]);
    // SAFETY: live PE.
    ok(unsafe { doca_pe_request_notification(pe) });
    drain(&[pe]) == 0
}

// ---- hex and child processes ----

/// The environment variable that selects a child role.
pub(crate) const ROLE_ENV: &str = "DOCA_SOFT_TEST_RDMA_ROLE";

/// The role this process plays (None in the parent).
pub(crate) fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// The bound of every wait for a child process (see `kit_common.rs`).
pub(crate) const PEER_WAIT: Duration = Duration::from_secs(20);

/// Spawns this test binary running only `test` of `rdma/tests.rs` in `role` (a child process
/// that plays the peer; see [`Peer`]).
pub(crate) fn spawn_test(test: &str, role: &str) -> Peer {
    Peer::spawn(&format!("rdma::tests::{test}"), role)
}

// The core shared with the conformance suite's kit (one source): checked calls (`ok`,
// `name`, `res`), the recording completion callbacks (`Rec`, `take_recs`, `cb_*`), the
// event loops (`drain`, `run_until`), hex, the peer-process protocol (`Peer`,
// `tell_parent`, `from_parent`) and `listen`.
#[allow(dead_code)] // each of the two harnesses uses a subset
#[path = "../../../tests/conformance/kit_common.rs"]
mod kit_common;
pub(crate) use kit_common::*;
