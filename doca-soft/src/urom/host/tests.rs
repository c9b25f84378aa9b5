//! Host-side tests through the C ABI against the in-process fake daemon ([`crate::testkit::fake_daemon`]).

use core::cell::RefCell;
use core::ffi::{c_char, c_void, CStr};
use core::ptr;
use std::time::{Duration, Instant};

use super::cmd_task::*;
use super::domain::*;
use super::gid_task::*;
use super::service::*;
use super::worker::*;
use crate::buf::{doca_buf_get_data, doca_buf_get_data_len, doca_buf_get_len, doca_buf_set_data};
use crate::ctx::{doca_ctx, doca_ctx_get_state, doca_ctx_start, doca_ctx_stop};
use crate::dev::doca_dev;
use crate::pe::{doca_pe, doca_pe_connect_ctx, doca_pe_progress, doca_pe_request_notification};
use crate::task::{doca_task_get_status, doca_task_submit};
use crate::testkit::fake_daemon::{unique_path, FakeDaemon, Opts};
use crate::testkit::{destroy_pe, new_pe, pe_fd, readable};
use crate::types::*;

/// End-to-end tests against the real daemon in a child process (this module: against the
/// in-process fake daemon).
mod e2e;

pub(super) fn ok(e: doca_error_t) {
    assert_eq!(e, DOCA_SUCCESS, "{}", crate::testkit::rdma::name(e));
}

pub(super) fn state(ctx: *mut doca_ctx) -> doca_ctx_states {
    let mut s = DOCA_CTX_STATE_IDLE;
    // SAFETY: live ctx, valid out-pointer.
    ok(unsafe { doca_ctx_get_state(ctx, &mut s) });
    s
}

/// Progresses `pe` until `cond` holds (panics after 10 s: a bound, not a timing assertion).
pub(super) fn wait(pe: *mut doca_pe, what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !cond() {
        // SAFETY: live PE.
        while unsafe { doca_pe_progress(pe) } == 1 {}
        if cond() {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

thread_local! {
    pub(super) static CMDS: RefCell<Vec<(usize, doca_error_t, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
    pub(super) static GIDS: RefCell<Vec<(usize, doca_error_t, Vec<u64>)>> = const { RefCell::new(Vec::new()) };
}

pub(super) fn buf_bytes(b: *mut crate::buf::doca_buf) -> Vec<u8> {
    let (mut p, mut n): (*mut c_void, usize) = (ptr::null_mut(), 0);
    // SAFETY: live buffer, valid out-pointers; the data range is readable memory of the task.
    unsafe {
        ok(doca_buf_get_data(b, &mut p));
        ok(doca_buf_get_data_len(b, &mut n));
        core::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
    }
}

pub(super) unsafe extern "C" fn cmd_cb(task: *mut doca_urom_worker_cmd_task, _ud: doca_data, _cud: doca_data) {
    // SAFETY: called by the PE with a live task that we own during the callback.
    let (st, resp) = unsafe {
        (
            doca_task_get_status(doca_urom_worker_cmd_task_as_task(task)),
            buf_bytes(doca_urom_worker_cmd_task_get_response(task)),
        )
    };
    CMDS.with(|c| c.borrow_mut().push((task as usize, st, resp)));
}

pub(super) unsafe extern "C" fn gid_cb(
    task: *mut doca_urom_service_get_workers_by_gid_task,
    _ud: doca_data,
    _cud: doca_data,
) {
    // SAFETY: as in cmd_cb.
    unsafe {
        let st = doca_task_get_status(doca_urom_service_get_workers_by_gid_task_as_task(task));
        let n = doca_urom_service_get_workers_by_gid_task_get_workers_count(task);
        let p = doca_urom_service_get_workers_by_gid_task_get_worker_ids(task);
        let ids = if n == 0 { vec![] } else { core::slice::from_raw_parts(p, n).to_vec() };
        GIDS.with(|g| g.borrow_mut().push((task as usize, st, ids)));
    }
}

pub(super) fn take_cmds() -> Vec<(usize, doca_error_t, Vec<u8>)> {
    CMDS.with(|c| core::mem::take(&mut *c.borrow_mut()))
}

pub(super) fn take_gids() -> Vec<(usize, doca_error_t, Vec<u64>)> {
    GIDS.with(|c| core::mem::take(&mut *c.borrow_mut()))
}

/// A PE, a device and a service pointed at `path` (connected, not started).
pub(super) struct Host {
    pub pe: *mut doca_pe,
    dev: *mut doca_dev,
    pub svc: *mut doca_urom_service,
}

impl Host {
    pub(super) fn new(path: &std::path::Path) -> Host {
        let pe = new_pe();
        let dev = crate::testkit::dev::test_open_default();
        let mut svc = ptr::null_mut();
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid out-pointer; live objects.
        unsafe {
            ok(doca_urom_service_create(&mut svc));
            ok(doca_urom_service_set_dev(svc, dev));
            ok(doca_soft_urom_service_set_socket_path(svc, c.as_ptr()));
            ok(doca_pe_connect_ctx(pe, doca_urom_service_as_ctx(svc)));
        }
        Host { pe, dev, svc }
    }

    pub(super) fn sctx(&self) -> *mut doca_ctx {
        // SAFETY: live service.
        unsafe { doca_urom_service_as_ctx(self.svc) }
    }

    pub(super) fn start(&self) {
        // SAFETY: live ctx.
        ok(unsafe { doca_ctx_start(self.sctx()) });
    }

    pub(super) fn worker(&self, plugins: u64) -> *mut doca_urom_worker {
        let mut w = ptr::null_mut();
        // SAFETY: valid out-pointer; live objects.
        unsafe {
            ok(doca_urom_worker_create(&mut w));
            ok(doca_urom_worker_set_service(w, self.svc));
            ok(doca_urom_worker_set_plugins(w, plugins));
            ok(doca_pe_connect_ctx(self.pe, doca_urom_worker_as_ctx(w)));
        }
        w
    }

    /// Starts `w` and waits for RUNNING.
    pub(super) fn run_worker(&self, w: *mut doca_urom_worker) {
        // SAFETY: live worker.
        let c = unsafe { doca_urom_worker_as_ctx(w) };
        // SAFETY: live ctx.
        assert_eq!(unsafe { doca_ctx_start(c) }, DOCA_ERROR_IN_PROGRESS);
        assert_eq!(state(c), DOCA_CTX_STATE_STARTING);
        wait(self.pe, "worker RUNNING", || state(c) != DOCA_CTX_STATE_STARTING);
        assert_eq!(state(c), DOCA_CTX_STATE_RUNNING);
    }

    /// Stops `w` (freeing nothing: the caller has released its tasks), waits for IDLE and
    /// destroys it.
    pub(super) fn drop_worker(&self, w: *mut doca_urom_worker) {
        // SAFETY: live worker.
        let c = unsafe { doca_urom_worker_as_ctx(w) };
        if state(c) != DOCA_CTX_STATE_IDLE {
            // SAFETY: live ctx.
            let r = unsafe { doca_ctx_stop(c) };
            assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{r:?}");
            wait(self.pe, "worker IDLE", || state(c) == DOCA_CTX_STATE_IDLE);
        }
        // SAFETY: live, IDLE worker.
        ok(unsafe { doca_urom_worker_destroy(w) });
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let c = self.sctx();
        if state(c) != DOCA_CTX_STATE_IDLE {
            // SAFETY: live ctx.
            unsafe { doca_ctx_stop(c) };
            wait(self.pe, "service IDLE", || state(c) == DOCA_CTX_STATE_IDLE);
        }
        // SAFETY: live objects, destroyed once, in dependency order.
        unsafe {
            ok(doca_urom_service_destroy(self.svc));
            ok(crate::dev::doca_dev_close(self.dev));
        }
        destroy_pe(self.pe);
    }
}

/// Allocates a command task with our callback and `payload` packed in.
pub(super) fn cmd(w: *mut doca_urom_worker, plugin: u64, payload: &[u8]) -> *mut doca_urom_worker_cmd_task {
    let mut t = ptr::null_mut();
    // SAFETY: live worker; the payload buffer has room (checked below).
    unsafe {
        ok(doca_urom_worker_cmd_task_allocate_init(w, plugin, &mut t));
        doca_urom_worker_cmd_task_set_cb(t, Some(cmd_cb));
        let b = doca_urom_worker_cmd_task_get_payload(t);
        let mut head: *mut c_void = ptr::null_mut();
        let mut cap = 0;
        ok(doca_buf_get_data(b, &mut head));
        ok(doca_buf_get_len(b, &mut cap));
        assert!(payload.len() <= cap);
        ptr::copy_nonoverlapping(payload.as_ptr(), head.cast::<u8>(), payload.len());
        ok(doca_buf_set_data(b, head, payload.len()));
    }
    t
}

pub(super) fn submit(t: *mut doca_urom_worker_cmd_task) -> doca_error_t {
    // SAFETY: live task.
    unsafe { doca_task_submit(doca_urom_worker_cmd_task_as_task(t)) }
}

pub(super) fn release(t: *mut doca_urom_worker_cmd_task) {
    // SAFETY: live task owned by the test.
    ok(unsafe { doca_urom_worker_cmd_task_release(t) });
}

#[test]
fn service_configuration_and_start_errors_without_a_daemon() {
    let h = Host::new(&unique_path("nobody"));
    let mut list: *const doca_urom_service_plugin_info = ptr::null();
    let mut n = 0usize;
    let mut cpus = doca_cpu_set_t::empty();
    // SAFETY: live objects; NULL arguments are part of what is tested.
    unsafe {
        assert_eq!(doca_urom_service_set_max_comm_msg_size(h.svc, 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_urom_service_set_max_workers(h.svc, 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_urom_service_set_max_workers(ptr::null_mut(), 4), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_urom_service_set_dev(h.svc, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_soft_urom_service_set_socket_path(h.svc, ptr::null()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_soft_urom_service_set_socket_path(h.svc, c"".as_ptr()), DOCA_ERROR_INVALID_VALUE);
        ok(doca_urom_service_set_max_comm_msg_size(h.svc, 8192));
        ok(doca_urom_service_set_max_workers(h.svc, 8));
        assert_eq!(doca_urom_service_get_plugins_list(h.svc, &mut list, &mut n), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_urom_service_get_cpuset(h.svc, &mut cpus), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_ctx_start(h.sctx()), DOCA_ERROR_NOT_CONNECTED, "nobody listens");
        assert_eq!(state(h.sctx()), DOCA_CTX_STATE_IDLE);
        assert!(doca_urom_service_as_ctx(ptr::null_mut()).is_null());
    }
    // No device: BAD_STATE at start.
    let mut s2 = ptr::null_mut();
    // SAFETY: valid out-pointer; live objects.
    unsafe {
        ok(doca_urom_service_create(&mut s2));
        ok(doca_pe_connect_ctx(h.pe, doca_urom_service_as_ctx(s2)));
        assert_eq!(doca_ctx_start(doca_urom_service_as_ctx(s2)), DOCA_ERROR_BAD_STATE);
        ok(doca_urom_service_destroy(s2));
    }
}

/// A service without plugins answers DOCA's NOT_FOUND for the list (NVIDIA's samples then end
/// with that error instead of succeeding without running anything).
#[test]
fn an_empty_plugin_list_is_not_found() {
    let d = FakeDaemon::start(Opts { no_plugins: true, ..Opts::default() });
    let h = Host::new(&d.path);
    h.start();
    let mut list: *const doca_urom_service_plugin_info = ptr::dangling();
    let mut n = 9usize;
    // SAFETY: a live, RUNNING service and valid out-pointers.
    assert_eq!(unsafe { doca_urom_service_get_plugins_list(h.svc, &mut list, &mut n) }, DOCA_ERROR_NOT_FOUND);
    assert!(list.is_null() && n == 0);
}

#[test]
fn service_start_lists_plugins_and_answers_gid_queries() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    assert_eq!(state(h.sctx()), DOCA_CTX_STATE_RUNNING);
    let mut list: *const doca_urom_service_plugin_info = ptr::null();
    let mut list2: *const doca_urom_service_plugin_info = ptr::null();
    let mut n = 0usize;
    let mut cpus = doca_cpu_set_t::empty();
    // SAFETY: live objects, valid out-pointers; the list is valid while RUNNING.
    unsafe {
        ok(doca_urom_service_get_plugins_list(h.svc, &mut list, &mut n));
        ok(doca_urom_service_get_plugins_list(h.svc, &mut list2, &mut n));
        assert_eq!(list, list2, "a stable array owned by the service");
        assert_eq!(n, 2);
        let p = core::slice::from_raw_parts(list, n);
        assert_eq!((p[0].id, p[0].version), (1, 7));
        assert_eq!(CStr::from_ptr(p[0].plugin_name.as_ptr()).to_str().unwrap(), "alpha");
        assert_eq!(CStr::from_ptr(p[1].plugin_name.as_ptr()).to_str().unwrap(), "beta");
        ok(doca_urom_service_get_cpuset(h.svc, &mut cpus));
        assert!((0..4).all(|c| cpus.is_set(c)) && !cpus.is_set(4));
        assert_eq!(doca_urom_service_set_max_workers(h.svc, 4), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_soft_urom_service_set_socket_path(h.svc, c"/x".as_ptr()), DOCA_ERROR_BAD_STATE);
    }
    // Gid tasks: a NULL callback is refused; the pool is bounded.
    let mut t = ptr::null_mut();
    // SAFETY: live service, valid out-pointer.
    unsafe {
        assert_eq!(
            doca_urom_service_get_workers_by_gid_task_allocate_init(h.svc, 1, None, &mut t),
            DOCA_ERROR_INVALID_VALUE
        );
    }
    let mut all = Vec::new();
    loop {
        let mut t = ptr::null_mut();
        // SAFETY: as above.
        let r = unsafe { doca_urom_service_get_workers_by_gid_task_allocate_init(h.svc, 9, Some(gid_cb), &mut t) };
        if r != DOCA_SUCCESS {
            assert_eq!(r, DOCA_ERROR_NO_MEMORY);
            break;
        }
        all.push(t);
    }
    assert_eq!(all.len(), super::GID_TASKS as usize);
    for &t in &all[1..] {
        // SAFETY: allocated tasks of ours.
        ok(unsafe { doca_urom_service_get_workers_by_gid_task_release(t) });
    }
    let t = all[0];
    // SAFETY: live task.
    ok(unsafe { doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(t)) });
    // SAFETY: live task (in flight: the release is refused).
    assert_eq!(unsafe { doca_urom_service_get_workers_by_gid_task_release(t) }, DOCA_ERROR_IN_PROGRESS);
    wait(h.pe, "gid answer", || GIDS.with(|g| !g.borrow().is_empty()));
    assert_eq!(take_gids(), vec![(t as usize, DOCA_SUCCESS, vec![])]);
    // SAFETY: ours again.
    ok(unsafe { doca_urom_service_get_workers_by_gid_task_release(t) });
    assert_eq!(d.seen.lock().unwrap().hellos, 1);
}

#[test]
fn refused_peer_is_authentication() {
    let d = FakeDaemon::start(Opts { refuse: true, ..Opts::default() });
    let h = Host::new(&d.path);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(h.sctx()) }, DOCA_ERROR_AUTHENTICATION);
    assert_eq!(state(h.sctx()), DOCA_CTX_STATE_IDLE);
}

#[test]
fn worker_spawns_runs_commands_and_stops() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    let w = h.worker(1 | 2);
    let env = [c"A=1".as_ptr() as *mut c_char, c"B=two=2".as_ptr() as *mut c_char];
    let bad = [c"NOEQUALS".as_ptr() as *mut c_char];
    let mut id = 0u64;
    let mut gid = 0u32;
    // SAFETY: live worker; arrays of the given lengths.
    unsafe {
        ok(doca_urom_worker_set_gid(w, 5));
        assert_eq!(doca_urom_worker_set_max_inflight_tasks(w, 3), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_urom_worker_set_max_inflight_tasks(w, 0), DOCA_ERROR_INVALID_VALUE);
        ok(doca_urom_worker_set_max_inflight_tasks(w, 4));
        assert_eq!(doca_urom_worker_set_env(w, bad.as_ptr(), 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_urom_worker_set_env(w, ptr::null(), 1), DOCA_ERROR_INVALID_VALUE);
        ok(doca_urom_worker_set_env(w, env.as_ptr(), 2));
        ok(doca_urom_worker_get_id(w, &mut id));
        assert_eq!(id, DOCA_UROM_WORKER_ID_ANY, "the requested id before RUNNING");
        ok(doca_urom_worker_get_gid(w, &mut gid));
        assert_eq!(gid, 5);
        // Tasks only while RUNNING.
        let mut t = ptr::null_mut();
        assert_eq!(doca_urom_worker_cmd_task_allocate_init(w, 1, &mut t), DOCA_ERROR_BAD_STATE);
    }
    // An armed PE wakes up for the daemon's answer (the control socket is registered).
    // SAFETY: live worker and PE.
    unsafe {
        assert_eq!(doca_ctx_start(doca_urom_worker_as_ctx(w)), DOCA_ERROR_IN_PROGRESS);
        ok(doca_pe_request_notification(h.pe));
    }
    assert!(readable(pe_fd(h.pe), 10_000), "the Spawned reply makes the handle readable");
    // SAFETY: live worker (destroyed only at the end of the test).
    wait(h.pe, "worker RUNNING", || state(unsafe { doca_urom_worker_as_ctx(w) }) == DOCA_CTX_STATE_RUNNING);
    // SAFETY: live worker.
    unsafe {
        ok(doca_urom_worker_get_id(w, &mut id));
        assert_eq!(id, crate::urom::proto::WORKER_ID_FIRST);
        assert_eq!(doca_urom_worker_set_gid(w, 6), DOCA_ERROR_BAD_STATE);
    }
    {
        let seen = d.seen.lock().unwrap();
        assert_eq!(seen.spawns, vec![(DOCA_UROM_WORKER_ID_ANY, 5, 3, vec!["A=1".to_string(), "B=two=2".to_string()])]);
        assert_eq!(seen.hellos, 2, "the worker has its own control connection");
    }

    // The pool has max_inflight tasks; buffers have the effective message size.
    let ts: Vec<_> = (0..4).map(|i| cmd(w, 1, format!("hello {i}").as_bytes())).collect();
    let mut extra = ptr::null_mut();
    // SAFETY: live worker.
    assert_eq!(unsafe { doca_urom_worker_cmd_task_allocate_init(w, 1, &mut extra) }, DOCA_ERROR_NO_MEMORY);
    let mut cap = 0;
    // SAFETY: live task buffers; 32 bytes of user data.
    unsafe {
        ok(doca_buf_get_len(doca_urom_worker_cmd_task_get_response(ts[0]), &mut cap));
        assert_eq!(cap, DOCA_UROM_DEFAULT_MAX_COMM_MSG_SIZE, "min(host 4096, daemon 64 KiB)");
        let ud = doca_urom_worker_cmd_task_get_user_data(ts[0]).cast::<u8>();
        assert!(core::slice::from_raw_parts(ud, 32).iter().all(|b| *b == 0));
        ptr::write_bytes(ud, 0xAB, 32);
    }
    for &t in &ts {
        ok(submit(t));
    }
    wait(h.pe, "4 answers", || CMDS.with(|c| c.borrow().len() == 4));
    let mut done = take_cmds();
    done.sort_by_key(|x| x.0);
    let mut want: Vec<_> = (0..4)
        .map(|i| (ts[i] as usize, DOCA_SUCCESS, format!("hello {i}").bytes().rev().collect::<Vec<u8>>()))
        .collect();
    want.sort_by_key(|x| x.0);
    assert_eq!(done, want);
    // SAFETY: the user data survived the round trip (it is the task's, not the wire's).
    assert!(unsafe { core::slice::from_raw_parts(doca_urom_worker_cmd_task_get_user_data(ts[0]).cast::<u8>(), 32) }
        .iter()
        .all(|b| *b == 0xAB));

    // A plugin's failure status reaches the callback with its notification.
    let f = ts[1];
    // SAFETY: live task, ours again.
    unsafe {
        let b = doca_urom_worker_cmd_task_get_payload(f);
        let mut head: *mut c_void = ptr::null_mut();
        ok(doca_buf_get_data(b, &mut head));
        ptr::copy_nonoverlapping(b"fail!".as_ptr(), head.cast::<u8>(), 5);
        ok(doca_buf_set_data(b, head, 5));
    }
    ok(submit(f));
    wait(h.pe, "failure", || CMDS.with(|c| c.borrow().len() == 1));
    assert_eq!(take_cmds(), vec![(f as usize, DOCA_ERROR_IO_FAILED, b"!liaf".to_vec())]);

    // Plugins must be exactly one of the worker's.
    // SAFETY: live tasks.
    unsafe {
        doca_urom_worker_cmd_task_set_plugin(ts[2], 4);
        assert_eq!(submit(ts[2]), DOCA_ERROR_INVALID_VALUE);
        doca_urom_worker_cmd_task_set_plugin(ts[2], 3);
        assert_eq!(submit(ts[2]), DOCA_ERROR_INVALID_VALUE);
        doca_urom_worker_cmd_task_set_plugin(ts[2], 2);
    }

    // The gid query sees the worker.
    let mut g = ptr::null_mut();
    // SAFETY: live service.
    unsafe {
        ok(doca_urom_service_get_workers_by_gid_task_allocate_init(h.svc, 5, Some(gid_cb), &mut g));
        ok(doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(g)));
    }
    wait(h.pe, "gid answer", || GIDS.with(|x| !x.borrow().is_empty()));
    assert_eq!(take_gids(), vec![(g as usize, DOCA_SUCCESS, vec![id])]);
    // SAFETY: ours.
    ok(unsafe { doca_urom_service_get_workers_by_gid_task_release(g) });

    // Stop with a command in flight: it is flushed; IDLE once every task is released.
    let held = cmd_payload(ts[3], b"hold");
    ok(submit(held));
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(doca_urom_worker_as_ctx(w)) }, DOCA_ERROR_IN_PROGRESS);
    wait(h.pe, "flush", || CMDS.with(|c| c.borrow().len() == 1));
    assert_eq!(take_cmds()[0].1, crate::ctx::FLUSH_STATUS);
    for &t in &ts {
        release(t);
    }
    // SAFETY: live worker (destroyed only at the end of the test).
    wait(h.pe, "worker IDLE", || state(unsafe { doca_urom_worker_as_ctx(w) }) == DOCA_CTX_STATE_IDLE);
    wait(h.pe, "Stop seen", || d.seen.lock().unwrap().stops == vec![id]);
    // SAFETY: live worker: after stop, the requested id again.
    unsafe {
        ok(doca_urom_worker_get_id(w, &mut id));
        assert_eq!(id, DOCA_UROM_WORKER_ID_ANY);
        // The service is in use while the worker exists.
        assert_eq!(doca_urom_service_destroy(h.svc), DOCA_ERROR_IN_USE);
    }
    h.drop_worker(w);
}

/// Rewrites the payload of an allocated task.
pub(super) fn cmd_payload(t: *mut doca_urom_worker_cmd_task, payload: &[u8]) -> *mut doca_urom_worker_cmd_task {
    // SAFETY: live task owned by the test; the payload fits (tests use short ones).
    unsafe {
        let b = doca_urom_worker_cmd_task_get_payload(t);
        let mut head: *mut c_void = ptr::null_mut();
        let mut cap = 0;
        ok(doca_buf_get_len(b, &mut cap));
        ok(doca_buf_get_data(b, &mut head));
        assert!(payload.len() <= cap);
        ptr::copy_nonoverlapping(payload.as_ptr(), head.cast::<u8>(), payload.len());
        ok(doca_buf_set_data(b, head, payload.len()));
    }
    t
}

/// What NVIDIA's UROM samples rely on (docs/urom-soft.md, "DOCA behaviours"): a fresh
/// payload offers its whole capacity as data; `cmd_task_allocate` leaves the plugin unset;
/// the split gid allocation; a worker stop is IN_PROGRESS and a progress call returns 1 for
/// STOPPING → IDLE (the sample sums progress results and fails on 0).
#[test]
fn doca_sample_behaviours_payload_split_allocations_and_stop_through_progress() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    let w = h.worker(2);
    h.run_worker(w);
    // SAFETY: live worker.
    let c = unsafe { doca_urom_worker_as_ctx(w) };
    let mut t = ptr::null_mut();
    // SAFETY: live worker; the task is ours until submitted.
    unsafe {
        ok(doca_urom_worker_cmd_task_allocate(w, &mut t));
        let b = doca_urom_worker_cmd_task_get_payload(t);
        let (mut head, mut data): (*mut c_void, *mut c_void) = (ptr::null_mut(), ptr::null_mut());
        let (mut cap, mut len) = (0usize, 0usize);
        ok(crate::buf::doca_buf_get_head(b, &mut head));
        ok(doca_buf_get_len(b, &mut cap));
        ok(doca_buf_get_data(b, &mut data));
        ok(doca_buf_get_data_len(b, &mut len));
        assert_eq!((data, len), (head, cap), "a fresh payload is all data");
        assert_eq!(cap, 4096, "the default max message size");
        assert_eq!(buf_bytes(doca_urom_worker_cmd_task_get_response(t)), Vec::<u8>::new());
        doca_urom_worker_cmd_task_set_cb(t, Some(cmd_cb));
        // Packed like NVIDIA's hosts: at the data pointer, then the packed length.
        ptr::copy_nonoverlapping(b"split".as_ptr(), data.cast::<u8>(), 5);
        ok(doca_buf_set_data(b, data, 5));
        assert_eq!(submit(t), DOCA_ERROR_INVALID_VALUE, "no plugin set");
        doca_urom_worker_cmd_task_set_plugin(t, 2);
        ok(submit(t));
    }
    wait(h.pe, "answer", || CMDS.with(|x| !x.borrow().is_empty()));
    assert_eq!(take_cmds()[0].1, DOCA_SUCCESS);
    // SAFETY: ours again after the callback.
    ok(unsafe { doca_urom_worker_cmd_task_release(t) });

    let mut g = ptr::null_mut();
    // SAFETY: live service; the task is ours until submitted.
    unsafe {
        ok(doca_urom_service_get_workers_by_gid_task_allocate(h.svc, &mut g));
        let gt = doca_urom_service_get_workers_by_gid_task_as_task(g);
        assert_eq!(doca_task_submit(gt), DOCA_ERROR_INVALID_VALUE, "no callback set");
        doca_urom_service_get_workers_by_gid_task_set_gid(g, 0);
        doca_urom_service_get_workers_by_gid_task_set_cb(g, Some(gid_cb));
        ok(doca_task_submit(gt));
    }
    wait(h.pe, "gid answer", || GIDS.with(|x| !x.borrow().is_empty()));
    let mut id = 0;
    // SAFETY: live worker.
    ok(unsafe { doca_urom_worker_get_id(w, &mut id) });
    assert_eq!(take_gids(), vec![(g as usize, DOCA_SUCCESS, vec![id])]);
    // SAFETY: ours.
    ok(unsafe { doca_urom_service_get_workers_by_gid_task_release(g) });

    // No task allocated, and still: IN_PROGRESS, STOPPING, IDLE from progress (returning 1),
    // and an armed PE's handle says so.
    // SAFETY: live ctx and PE.
    unsafe {
        ok(doca_pe_request_notification(h.pe));
        assert_eq!(doca_ctx_stop(c), DOCA_ERROR_IN_PROGRESS);
    }
    assert_eq!(state(c), DOCA_CTX_STATE_STOPPING);
    assert!(readable(pe_fd(h.pe), 10_000), "the due IDLE report wakes an armed PE");
    let mut reported = 0;
    while state(c) != DOCA_CTX_STATE_IDLE {
        // SAFETY: live PE.
        reported += unsafe { doca_pe_progress(h.pe) };
        assert!(reported <= 1, "one report");
    }
    assert_eq!(reported, 1, "a progress call reported STOPPING -> IDLE");
    h.drop_worker(w);
}

#[test]
fn worker_start_failures_are_reported() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    let w = h.worker(1);
    // SAFETY: live worker.
    let c = unsafe { doca_urom_worker_as_ctx(w) };
    // Service not started.
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(c) }, DOCA_ERROR_BAD_STATE);
    h.start();
    let mut cpus = doca_cpu_set_t::empty();
    cpus.set(5);
    // SAFETY: live objects.
    unsafe {
        ok(doca_urom_worker_set_plugins(w, 4));
        assert_eq!(doca_ctx_start(c), DOCA_ERROR_NOT_FOUND, "no such plugin");
        ok(doca_urom_worker_set_plugins(w, 1));
        ok(doca_urom_worker_set_cpuset(w, cpus));
        assert_eq!(doca_ctx_start(c), DOCA_ERROR_NOT_PERMITTED, "cpu 5 is not the service's");
        cpus = doca_cpu_set_t::empty();
        cpus.set(2);
        ok(doca_urom_worker_set_cpuset(w, cpus));
        ok(doca_urom_worker_set_gid(w, 666));
        assert_eq!(doca_ctx_start(c), DOCA_ERROR_IN_PROGRESS);
    }
    wait(h.pe, "failed start", || state(c) == DOCA_CTX_STATE_IDLE);
    let mut e = DOCA_SUCCESS;
    let mut why: *const c_char = ptr::null();
    // SAFETY: live worker, valid out-pointers; the reason string is owned by the worker.
    unsafe {
        ok(doca_soft_urom_worker_get_start_error(w, &mut e));
        ok(doca_soft_urom_worker_get_start_error_reason(w, &mut why));
        assert_eq!(e, DOCA_ERROR_FULL);
        assert_eq!(CStr::from_ptr(why).to_str().unwrap(), "no room");
        assert_eq!(doca_soft_urom_worker_get_start_error(w, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        // A later successful start clears it.
        ok(doca_urom_worker_set_gid(w, 1));
    }
    h.run_worker(w);
    // SAFETY: as above.
    unsafe {
        ok(doca_soft_urom_worker_get_start_error(w, &mut e));
        assert_eq!(e, DOCA_SUCCESS);
    }
    h.drop_worker(w);
}

#[test]
fn data_hang_up_and_worker_exit_fail_in_flight_commands() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    for how in [&b"crash"[..], b"exit"] {
        let w = h.worker(1);
        h.run_worker(w);
        let a = cmd(w, 1, b"hold 1");
        let b = cmd(w, 1, b"hold 2");
        let k = cmd(w, 1, how);
        ok(submit(a));
        ok(submit(b));
        ok(submit(k));
        wait(h.pe, "aborts", || CMDS.with(|c| c.borrow().len() == 3));
        assert!(take_cmds().iter().all(|x| x.1 == DOCA_ERROR_CONNECTION_ABORTED));
        // SAFETY: live worker.
        let c = unsafe { doca_urom_worker_as_ctx(w) };
        assert_eq!(state(c), DOCA_CTX_STATE_RUNNING, "error state, until stopped");
        assert_eq!(submit(a), DOCA_ERROR_NOT_CONNECTED);
        for t in [a, b, k] {
            release(t);
        }
        h.drop_worker(w);
    }
}

#[test]
fn daemon_death_fails_pending_work_and_stop_still_reaches_idle() {
    let mut d = FakeDaemon::start(Opts { answer_gid: false, ..Opts::default() });
    let h = Host::new(&d.path);
    h.start();
    let w = h.worker(1);
    h.run_worker(w);
    let t = cmd(w, 1, b"hold");
    ok(submit(t));
    let mut g = ptr::null_mut();
    // SAFETY: live service.
    unsafe {
        ok(doca_urom_service_get_workers_by_gid_task_allocate_init(h.svc, 1, Some(gid_cb), &mut g));
        ok(doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(g)));
    }
    d.kill();
    wait(h.pe, "aborts", || CMDS.with(|c| c.borrow().len() == 1) && GIDS.with(|x| x.borrow().len() == 1));
    assert_eq!(take_cmds()[0].1, DOCA_ERROR_CONNECTION_ABORTED);
    assert_eq!(take_gids()[0].1, DOCA_ERROR_CONNECTION_ABORTED);
    // SAFETY: live task, ours again.
    unsafe {
        assert_eq!(doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(g)), DOCA_ERROR_NOT_CONNECTED);
        ok(doca_urom_service_get_workers_by_gid_task_release(g));
    }
    assert_eq!(submit(t), DOCA_ERROR_NOT_CONNECTED);
    release(t);
    h.drop_worker(w);
    // A new worker cannot start: nobody listens.
    let w2 = h.worker(1);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(doca_urom_worker_as_ctx(w2)) }, DOCA_ERROR_NOT_CONNECTED);
    h.drop_worker(w2);
}

// ---- domains (one OOB process: the allgather is a copy) ----

pub(super) unsafe extern "C" fn solo_allgather(
    sbuf: *mut c_void,
    rbuf: *mut c_void,
    msglen: usize,
    _info: *mut c_void,
    req: *mut *mut c_void,
) -> doca_error_t {
    // SAFETY: the domain passes msglen readable bytes and msglen × 1 writable ones.
    unsafe {
        ptr::copy_nonoverlapping(sbuf.cast::<u8>(), rbuf.cast::<u8>(), msglen);
        *req = ptr::dangling_mut::<c_void>();
    }
    DOCA_SUCCESS
}

pub(super) unsafe extern "C" fn solo_test(_req: *mut c_void) -> doca_error_t {
    DOCA_SUCCESS
}

pub(super) unsafe extern "C" fn solo_free(_req: *mut c_void) -> doca_error_t {
    DOCA_SUCCESS
}

#[test]
fn domain_start_creates_on_every_local_worker_and_stop_destroys() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    let ws = [h.worker(1), h.worker(1)];
    let mut oob = doca_urom_domain_oob_coll {
        allgather: Some(solo_allgather),
        req_test: Some(solo_test),
        req_free: Some(solo_free),
        coll_info: ptr::null_mut(),
        n_oob_indexes: 1,
        oob_index: 0,
    };
    let mut dom = ptr::null_mut();
    let mut mem = [0u8; 64];
    // SAFETY: live objects; arrays of the given lengths.
    unsafe {
        ok(doca_urom_domain_create(&mut dom));
        let dc = doca_urom_domain_as_ctx(dom);
        ok(doca_pe_connect_ctx(h.pe, dc));
        // Configuration errors.
        assert_eq!(doca_ctx_start(dc), DOCA_ERROR_BAD_STATE, "nothing configured");
        let mut bad = oob;
        bad.oob_index = 1;
        assert_eq!(doca_urom_domain_set_oob(dom, &mut bad), DOCA_ERROR_INVALID_VALUE);
        bad = oob;
        bad.req_free = None;
        assert_eq!(doca_urom_domain_set_oob(dom, &mut bad), DOCA_ERROR_INVALID_VALUE);
        ok(doca_urom_domain_set_oob(dom, &mut oob));
        let mut ids = [21u64, 22];
        let mut wp = ws;
        ok(doca_urom_domain_set_workers(dom, ids.as_mut_ptr(), wp.as_mut_ptr(), 2));
        ok(doca_urom_domain_set_buffers_count(dom, 1));
        assert_eq!(doca_ctx_start(dc), DOCA_ERROR_BAD_STATE, "a buffer is missing");
        let (mut memh, mut mkey) = ([1u8; 8], [2u8; 4]);
        let mut add = |dom| {
            doca_urom_domain_add_buffer(
                dom,
                mem.as_mut_ptr().cast(),
                64,
                memh.as_mut_ptr().cast(),
                8,
                mkey.as_mut_ptr().cast(),
                4,
            )
        };
        ok(add(dom));
        assert_eq!(add(dom), DOCA_ERROR_INVALID_VALUE, "more buffers than announced");
        assert_eq!(doca_ctx_start(dc), DOCA_ERROR_BAD_STATE, "workers are not running");
    }
    for &w in &ws {
        h.run_worker(w);
    }
    // SAFETY: live domain.
    let dc = unsafe { doca_urom_domain_as_ctx(dom) };
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(dc) }, DOCA_ERROR_IN_PROGRESS);
    wait(h.pe, "domain RUNNING", || state(dc) != DOCA_CTX_STATE_STARTING);
    assert_eq!(state(dc), DOCA_CTX_STATE_RUNNING);
    assert_eq!(d.seen.lock().unwrap().domain_creates, vec![2, 2], "both members sent to each worker");
    // SAFETY: live objects.
    unsafe {
        assert_eq!(doca_urom_domain_set_buffers_count(dom, 0), DOCA_ERROR_BAD_STATE);
        ok(doca_ctx_stop(dc));
    }
    assert_eq!(state(dc), DOCA_CTX_STATE_IDLE);
    wait(h.pe, "DomainDestroy", || d.seen.lock().unwrap().domain_destroys == 2);

    // A worker refusing the domain fails the start; the one that accepted gets DomainDestroy.
    let mut ids = [1u64, 13];
    let mut wp = ws;
    // SAFETY: live objects.
    unsafe {
        ok(doca_urom_domain_set_workers(dom, ids.as_mut_ptr(), wp.as_mut_ptr(), 2));
        assert_eq!(doca_ctx_start(dc), DOCA_ERROR_IN_PROGRESS);
    }
    wait(h.pe, "domain start failure", || state(dc) == DOCA_CTX_STATE_IDLE);
    // Member 13 is in the domain each worker receives, so both refuse (the second one maybe
    // after the start already failed on the first answer).
    wait(h.pe, "both refusals", || d.seen.lock().unwrap().domain_creates.len() == 4);
    // SAFETY: IDLE domain.
    ok(unsafe { doca_urom_domain_destroy(dom) });
    for w in ws {
        h.drop_worker(w);
    }
}

// ---- two OOB "processes" in one test: two domains, one worker each ----

/// Per round, the (rank, bytes) contributions.
type Rounds = Vec<Vec<(usize, Vec<u8>)>>;
/// Requests: (round, rbuf address, msglen, is rank 1).
type Reqs = Vec<(usize, usize, usize, bool)>;

thread_local! {
    static FABRIC: RefCell<(Rounds, Reqs)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

unsafe extern "C" fn pair_allgather(
    sbuf: *mut c_void,
    rbuf: *mut c_void,
    msglen: usize,
    info: *mut c_void,
    req: *mut *mut c_void,
) -> doca_error_t {
    let rank = info as usize;
    FABRIC.with(|f| {
        let (rounds, reqs) = &mut *f.borrow_mut();
        let round = reqs.iter().filter(|r| r.3 == (rank == 1)).count();
        if rounds.len() <= round {
            rounds.resize(round + 1, Vec::new());
        }
        // SAFETY: the domain passes msglen readable bytes.
        rounds[round].push((rank, unsafe { core::slice::from_raw_parts(sbuf.cast::<u8>(), msglen) }.to_vec()));
        reqs.push((round, rbuf as usize, msglen, rank == 1));
        // SAFETY: valid out-pointer.
        unsafe { *req = reqs.len() as *mut c_void };
    });
    DOCA_SUCCESS
}

unsafe extern "C" fn pair_test(req: *mut c_void) -> doca_error_t {
    FABRIC.with(|f| {
        let (rounds, reqs) = &*f.borrow();
        let (round, rbuf, msglen, _) = reqs[req as usize - 1];
        if rounds[round].len() < 2 {
            return DOCA_ERROR_IN_PROGRESS;
        }
        for (rank, data) in &rounds[round] {
            assert_eq!(data.len(), msglen);
            // SAFETY: rbuf holds msglen × 2 bytes while the request runs.
            unsafe { ptr::copy_nonoverlapping(data.as_ptr(), (rbuf as *mut u8).add(rank * msglen), msglen) };
        }
        DOCA_SUCCESS
    })
}

#[test]
fn two_oob_processes_build_one_domain() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    let ws = [h.worker(1), h.worker(1)];
    for &w in &ws {
        h.run_worker(w);
    }
    let mut doms = [ptr::null_mut(); 2];
    let mut bufs = [[0u8; 32]; 2];
    for rank in 0..2 {
        let mut oob = doca_urom_domain_oob_coll {
            allgather: Some(pair_allgather),
            req_test: Some(pair_test),
            req_free: Some(solo_free),
            coll_info: rank as *mut c_void,
            n_oob_indexes: 2,
            oob_index: rank as u32,
        };
        let mut id = [100 + rank as u64];
        let mut wp = [ws[rank]];
        // Different buffer counts: the descriptions differ in length (padding is exercised).
        let nbufs = rank * 2;
        // SAFETY: live objects; arrays of the given lengths.
        unsafe {
            ok(doca_urom_domain_create(&mut doms[rank]));
            ok(doca_pe_connect_ctx(h.pe, doca_urom_domain_as_ctx(doms[rank])));
            ok(doca_urom_domain_set_oob(doms[rank], &mut oob));
            ok(doca_urom_domain_set_workers(doms[rank], id.as_mut_ptr(), wp.as_mut_ptr(), 1));
            ok(doca_urom_domain_set_buffers_count(doms[rank], nbufs));
            for _ in 0..nbufs {
                let mut key = [7u8; 3];
                ok(doca_urom_domain_add_buffer(
                    doms[rank],
                    bufs[rank].as_mut_ptr().cast(),
                    32,
                    key.as_mut_ptr().cast(),
                    3,
                    ptr::null_mut(),
                    0,
                ));
            }
        }
    }
    // Rank 0 starts alone: its exchange cannot finish until rank 1 joins.
    // SAFETY: live domains.
    let dc: Vec<_> = doms.iter().map(|&x| unsafe { doca_urom_domain_as_ctx(x) }).collect();
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(dc[0]) }, DOCA_ERROR_IN_PROGRESS);
    for _ in 0..100 {
        // SAFETY: live PE.
        unsafe { doca_pe_progress(h.pe) };
    }
    assert_eq!(state(dc[0]), DOCA_CTX_STATE_STARTING);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(dc[1]) }, DOCA_ERROR_IN_PROGRESS);
    wait(h.pe, "both domains RUNNING", || dc.iter().all(|&c| state(c) == DOCA_CTX_STATE_RUNNING));
    assert_eq!(d.seen.lock().unwrap().domain_creates, vec![2, 2], "each worker sees both processes' members");
    FABRIC.with(|f| assert_eq!(f.borrow().1.len(), 4, "two rounds per process"));
    for (&c, &x) in dc.iter().zip(&doms) {
        // SAFETY: live objects.
        unsafe {
            ok(doca_ctx_stop(c));
            ok(doca_urom_domain_destroy(x));
        }
    }
    for w in ws {
        h.drop_worker(w);
    }
}

#[test]
fn restart_with_other_sizes_rebuilds_the_pool_and_buffers() {
    let d = FakeDaemon::start(Opts { max_msg: 1024, ..Opts::default() });
    let h = Host::new(&d.path);
    // SAFETY: live IDLE service.
    ok(unsafe { doca_urom_service_set_max_comm_msg_size(h.svc, 8192) });
    h.start();
    let w = h.worker(1);
    for n in [4usize, 8] {
        // SAFETY: live IDLE worker.
        ok(unsafe { doca_urom_worker_set_max_inflight_tasks(w, n as u32) });
        h.run_worker(w);
        let ts: Vec<_> = (0..n).map(|_| cmd(w, 1, b"x")).collect();
        let mut extra = ptr::null_mut();
        let mut cap = 0;
        // SAFETY: live worker and task buffers.
        unsafe {
            assert_eq!(doca_urom_worker_cmd_task_allocate_init(w, 1, &mut extra), DOCA_ERROR_NO_MEMORY);
            ok(doca_buf_get_len(doca_urom_worker_cmd_task_get_payload(ts[n - 1]), &mut cap));
        }
        assert_eq!(cap, 1024, "the daemon's smaller maximum wins");
        // Every task has its own buffers.
        let mut heads: Vec<usize> = ts
            .iter()
            .flat_map(|&t| {
                // SAFETY: live task buffers.
                unsafe { [doca_urom_worker_cmd_task_get_payload(t), doca_urom_worker_cmd_task_get_response(t)] }
            })
            .map(|b| {
                let mut p: *mut c_void = ptr::null_mut();
                // SAFETY: live buffer, valid out-pointer.
                ok(unsafe { doca_buf_get_data(b, &mut p) });
                p as usize
            })
            .collect();
        heads.sort_unstable();
        heads.dedup();
        assert_eq!(heads.len(), 2 * n);
        for t in ts {
            release(t);
        }
        // SAFETY: live ctx. Even with no task allocated the worker stops through STOPPING:
        // IDLE is reported by progress.
        let c = unsafe { doca_urom_worker_as_ctx(w) };
        // SAFETY: live ctx.
        assert_eq!(unsafe { doca_ctx_stop(c) }, DOCA_ERROR_IN_PROGRESS);
        wait(h.pe, "worker IDLE", || state(c) == DOCA_CTX_STATE_IDLE);
    }
    h.drop_worker(w);
}

/// A raw pointer moved to another thread (the test hands each object to one thread at a time).
struct SendPtr<T>(*mut T);
// SAFETY: see the type's doc: the pointee is used by one thread at a time.
unsafe impl<T> Send for SendPtr<T> {}

#[test]
fn workers_on_other_threads_use_their_own_pe_and_connection() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    h.start();
    let svc = SendPtr(h.svc);
    let threads: Vec<_> = (0..3)
        .map(|i| {
            let svc = SendPtr(svc.0);
            std::thread::spawn(move || {
                let svc = svc;
                let pe = new_pe();
                let mut w = ptr::null_mut();
                // SAFETY: the service is RUNNING and outlives this thread (joined below); the
                // worker and PE are this thread's own.
                unsafe {
                    ok(doca_urom_worker_create(&mut w));
                    ok(doca_urom_worker_set_service(w, svc.0));
                    ok(doca_urom_worker_set_plugins(w, 2));
                    ok(doca_pe_connect_ctx(pe, doca_urom_worker_as_ctx(w)));
                    assert_eq!(doca_ctx_start(doca_urom_worker_as_ctx(w)), DOCA_ERROR_IN_PROGRESS);
                }
                // SAFETY: live worker.
                let c = unsafe { doca_urom_worker_as_ctx(w) };
                wait(pe, "worker RUNNING", || state(c) == DOCA_CTX_STATE_RUNNING);
                for k in 0..20 {
                    let msg = format!("thread {i} message {k}");
                    let t = cmd(w, 2, msg.as_bytes());
                    ok(submit(t));
                    wait(pe, "answer", || CMDS.with(|x| !x.borrow().is_empty()));
                    let (_, st, resp) = take_cmds().pop().unwrap();
                    assert_eq!((st, resp), (DOCA_SUCCESS, msg.bytes().rev().collect::<Vec<u8>>()));
                    release(t);
                }
                // SAFETY: live ctx without tasks: STOPPING, IDLE reported by progress.
                assert_eq!(unsafe { doca_ctx_stop(c) }, DOCA_ERROR_IN_PROGRESS);
                wait(pe, "worker IDLE", || state(c) == DOCA_CTX_STATE_IDLE);
                // SAFETY: live, IDLE worker.
                unsafe { ok(doca_urom_worker_destroy(w)) };
                destroy_pe(pe);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(d.seen.lock().unwrap().commands, 60);
}

#[test]
fn commands_wait_in_order_while_the_socket_is_full() {
    let d = FakeDaemon::start(Opts::default());
    let h = Host::new(&d.path);
    // SAFETY: live IDLE service.
    ok(unsafe { doca_urom_service_set_max_comm_msg_size(h.svc, 1 << 16) });
    h.start();
    let w = h.worker(1);
    // SAFETY: live IDLE worker.
    ok(unsafe { doca_urom_worker_set_max_inflight_tasks(w, 64) });
    h.run_worker(w);
    // 64 commands of 60 KiB while the worker does not read: far beyond the socket's buffer.
    d.stall();
    let payload = |i: usize| -> Vec<u8> { (0..60 << 10).map(|k| (k * 7 + i) as u8).collect() };
    let ts: Vec<_> = (0..64).map(|i| cmd(w, 1, &payload(i))).collect();
    for &t in &ts {
        ok(submit(t));
    }
    for _ in 0..50 {
        // SAFETY: live PE.
        unsafe { doca_pe_progress(h.pe) };
    }
    assert!(CMDS.with(|c| c.borrow().is_empty()));
    // SAFETY: live worker.
    assert!(unsafe { &*w }.data_backlog(), "the socket filled up and the rest waits in the queue");
    d.unstall();
    wait(h.pe, "64 answers", || CMDS.with(|c| c.borrow().len() == 64));
    let done = take_cmds();
    for (i, &t) in ts.iter().enumerate() {
        let x = done.iter().find(|x| x.0 == t as usize).expect("answered");
        assert_eq!(x.1, DOCA_SUCCESS);
        assert_eq!(x.2, payload(i).into_iter().rev().collect::<Vec<u8>>(), "command {i} intact");
        release(t);
    }
    assert_eq!(d.seen.lock().unwrap().commands, 64, "nothing dropped");
    h.drop_worker(w);
}
