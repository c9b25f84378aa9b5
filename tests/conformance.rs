//! The DOCA conformance suite: every behaviour of the DOCA 3.x C API that async-doca relies
//! on, exercised directly through doca-sys, so it runs against whichever provider is linked.
//!
//! * On the soft provider (the default) it runs in CI with the rest of `cargo test`.
//! * On a BlueField host: `cargo test --no-default-features --features system --test
//!   conformance` (see docs/HARDWARE.md). The UROM tests then use the service named by
//!   `DOCA_UROM_SERVICE_FILE`, which must offer the `worker_graph` sample plugin; without that
//!   variable they print why they are skipped.
//!
//! What is asserted is what the API documentation states (and the runtime depends on): the
//! ctx state machine and its callback, stop flushing in-flight tasks through their error
//! callbacks, fixed task pools answering `DOCA_ERROR_NO_MEMORY`, the notification handle and
//! its arm/clear protocol, the result of every RDMA operation and the failure of each
//! documented misuse, sync event tasks, and UROM service/worker/command flows. Where the
//! documentation does not fix an error code, only "fails" is asserted and the code is printed,
//! so a run on hardware shows what NVIDIA's libraries answer.

#[path = "conformance/kit.rs"]
mod kit;
// Where `async-doca urom-service` is (the soft provider's UROM daemon, in the `cli/` crate).
#[cfg(feature = "soft")]
#[path = "common/cli.rs"]
mod cli;

#[path = "conformance/cm.rs"]
mod cm;
#[path = "conformance/common_api.rs"]
mod common_api;
#[path = "conformance/devrdma.rs"]
mod devrdma;

use std::cell::RefCell;
use std::ptr;
use std::time::{Duration, Instant};

use kit::*;

// =============================================================================================
// Version
// =============================================================================================

/// `doca_version_runtime()` names the loaded library's version; these declarations describe
/// DOCA 3.0.0058 (`doca_version()`), so a 3.x library is expected.
#[test]
fn runtime_version_is_a_doca_3_release() {
    // SAFETY: both return static NUL-terminated strings.
    let (compiled, runtime) =
        unsafe { (std::ffi::CStr::from_ptr(doca_version()), std::ffi::CStr::from_ptr(doca_version_runtime())) };
    println!("compiled against {compiled:?}, running on {runtime:?}");
    assert_eq!(compiled.to_str().unwrap(), "3.0.0058");
    assert!(runtime.to_str().unwrap().starts_with("3."), "{runtime:?}");
    assert_eq!(DOCA_VERSION_EXACT, 0x0300_003A);
}

// =============================================================================================
// Progress engine and contexts
// =============================================================================================

#[test]
fn pe_notification_handle_is_a_stable_fd_and_an_idle_pe_does_nothing() {
    let mut pe = ptr::null_mut();
    // SAFETY: valid out-pointer; destroyed below.
    ok(unsafe { doca_pe_create(&mut pe) });
    let fd = pe_fd(pe);
    assert!(fd >= 0, "the notification handle is a file descriptor, got {fd}");
    assert_ne!(fd, DOCA_NOTIFICATION_HANDLE_INVALID);
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_progress(pe) }, 0, "a PE without contexts has no work");
    let mut n = 99;
    // SAFETY: live PE, valid out-pointer.
    ok(unsafe { doca_pe_get_num_inflight_tasks(pe, &mut n) });
    assert_eq!(n, 0);
    // SAFETY: live PE; arm then clear, the handle argument is unused on Linux.
    unsafe {
        ok(doca_pe_request_notification(pe));
        ok(doca_pe_clear_notification(pe, fd));
    }
    assert_eq!(pe_fd(pe), fd, "the handle never changes during the PE's life");
    // SAFETY: live PE, no contexts.
    ok(unsafe { doca_pe_destroy(pe) });
}

thread_local! {
    static STATES: RefCell<Vec<(u64, doca_ctx_states, doca_ctx_states)>> = const { RefCell::new(Vec::new()) };
    static SE: RefCell<Vec<(&'static str, u64, u64, doca_error_t)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_state(ud: doca_data, _ctx: *mut doca_ctx, prev: doca_ctx_states, next: doca_ctx_states) {
    STATES.with(|s| s.borrow_mut().push((ud.as_u64(), prev, next)));
}

/// Sync event task recorders: (kind, task user data, ctx user data, status); free the task.
macro_rules! se_recorder {
    ($cb:ident, $ty:ty, $as_task:ident, $kind:literal) => {
        unsafe extern "C" fn $cb(t: *mut $ty, ud: doca_data, cud: doca_data) {
            // SAFETY: a live task of this kind, ours inside its callback.
            unsafe {
                let task = $as_task(t);
                let status = doca_task_get_status(task);
                SE.with(|s| s.borrow_mut().push(($kind, ud.as_u64(), cud.as_u64(), status)));
                doca_task_free(task);
            }
        }
    };
}
se_recorder!(se_get, doca_sync_event_task_get, doca_sync_event_task_get_as_doca_task, "get");
se_recorder!(se_set, doca_sync_event_task_notify_set, doca_sync_event_task_notify_set_as_doca_task, "set");
se_recorder!(se_add, doca_sync_event_task_notify_add, doca_sync_event_task_notify_add_as_doca_task, "add");
se_recorder!(se_eq, doca_sync_event_task_wait_eq, doca_sync_event_task_wait_eq_as_doca_task, "wait_eq");
se_recorder!(se_neq, doca_sync_event_task_wait_neq, doca_sync_event_task_wait_neq_as_doca_task, "wait_neq");
// Separate success and error callbacks, to see which one DOCA calls.
se_recorder!(set_ok, doca_sync_event_task_notify_set, doca_sync_event_task_notify_set_as_doca_task, "set_ok");
se_recorder!(set_err, doca_sync_event_task_notify_set, doca_sync_event_task_notify_set_as_doca_task, "set_err");
se_recorder!(eq_ok, doca_sync_event_task_wait_eq, doca_sync_event_task_wait_eq_as_doca_task, "wait_eq_ok");
se_recorder!(eq_err, doca_sync_event_task_wait_eq, doca_sync_event_task_wait_eq_as_doca_task, "wait_eq_err");

fn take_se() -> Vec<(&'static str, u64, u64, doca_error_t)> {
    SE.with(|s| std::mem::take(&mut *s.borrow_mut()))
}

/// A sync event in asynchronous mode on its own PE, ctx user data `id`, pools of `n` tasks.
struct Event {
    dev: *mut doca_dev,
    pe: *mut doca_pe,
    ev: *mut doca_sync_event,
}

impl Event {
    fn configured(id: u64, n: u32) -> Event {
        let dev = open_dev();
        let (mut pe, mut ev) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: valid out-pointers, live objects; the ctx is IDLE while configured.
        unsafe {
            ok(doca_pe_create(&mut pe));
            ok(doca_sync_event_create(&mut ev));
            ok(doca_sync_event_add_publisher_location_cpu(ev, dev));
            ok(doca_sync_event_add_subscriber_location_cpu(ev, dev));
            ok(doca_sync_event_task_get_set_conf(ev, Some(se_get), Some(se_get), n));
            ok(doca_sync_event_task_notify_set_set_conf(ev, Some(se_set), Some(se_set), n));
            ok(doca_sync_event_task_notify_add_set_conf(ev, Some(se_add), Some(se_add), n));
            ok(doca_sync_event_task_wait_eq_set_conf(ev, Some(se_eq), Some(se_eq), n));
            ok(doca_sync_event_task_wait_neq_set_conf(ev, Some(se_neq), Some(se_neq), n));
            let ctx = doca_sync_event_as_ctx(ev);
            ok(doca_ctx_set_user_data(ctx, doca_data::from_u64(id)));
            ok(doca_ctx_set_state_changed_cb(ctx, Some(on_state)));
        }
        Event { dev, pe, ev }
    }

    fn started(id: u64, n: u32) -> Event {
        let e = Event::configured(id, n);
        // SAFETY: live, configured, IDLE ctx.
        unsafe {
            ok(doca_pe_connect_ctx(e.pe, e.ctx()));
            ok_or_in_progress(doca_ctx_start(e.ctx()));
        }
        progress_to(e.pe, e.ctx(), DOCA_CTX_STATE_RUNNING);
        e
    }

    fn ctx(&self) -> *mut doca_ctx {
        // SAFETY: live event.
        unsafe { doca_sync_event_as_ctx(self.ev) }
    }

    fn submit_wait_eq(&self, v: u64, mask: u64, ud: u64) -> Result<(), doca_error_t> {
        let mut t = ptr::null_mut();
        // SAFETY: live, RUNNING event; a failed submit leaves the task with us.
        unsafe {
            res(doca_sync_event_task_wait_eq_alloc_init(self.ev, v, mask, doca_data::from_u64(ud), &mut t))?;
            let task = doca_sync_event_task_wait_eq_as_doca_task(t);
            let r = doca_task_submit(task);
            if r != DOCA_SUCCESS {
                doca_task_free(task);
            }
            res(r)
        }
    }

    fn submit_set(&self, v: u64, ud: u64) {
        let mut t = ptr::null_mut();
        // SAFETY: as above.
        unsafe {
            ok(doca_sync_event_task_notify_set_alloc_init(self.ev, v, doca_data::from_u64(ud), &mut t));
            ok(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(t)));
        }
    }

    fn stop(&self) {
        // SAFETY: live ctx.
        ok_or_in_progress(unsafe { doca_ctx_stop(self.ctx()) });
        progress_to(self.pe, self.ctx(), DOCA_CTX_STATE_IDLE);
    }

    fn destroy(self) {
        if state(self.ctx()) != DOCA_CTX_STATE_IDLE {
            self.stop();
        }
        // SAFETY: IDLE ctx without tasks; the PE goes after its ctx, the device last.
        unsafe {
            ok(doca_sync_event_destroy(self.ev));
            ok(doca_pe_destroy(self.pe));
            ok(doca_dev_close(self.dev));
        }
    }
}

#[test]
fn ctx_state_machine_reports_every_transition_through_its_callback() {
    let e = Event::configured(0xC0FFEE, 4);
    assert_eq!(state(e.ctx()), DOCA_CTX_STATE_IDLE);
    let mut back = doca_data::from_u64(0);
    // SAFETY: live ctx, valid out-pointer.
    ok(unsafe { doca_ctx_get_user_data(e.ctx(), &mut back) });
    assert_eq!(back.as_u64(), 0xC0FFEE);
    // SAFETY: live, connected ctx.
    unsafe {
        ok(doca_pe_connect_ctx(e.pe, e.ctx()));
        ok_or_in_progress(doca_ctx_start(e.ctx()));
    }
    progress_to(e.pe, e.ctx(), DOCA_CTX_STATE_RUNNING);
    let mut other = ptr::null_mut();
    // SAFETY: a second PE; connecting a RUNNING ctx to it must fail.
    unsafe {
        ok(doca_pe_create(&mut other));
        let r = doca_pe_connect_ctx(other, e.ctx());
        assert_ne!(r, DOCA_SUCCESS, "a started ctx was connected to a second PE");
        ok(doca_pe_destroy(other));
        assert_ne!(doca_ctx_start(e.ctx()), DOCA_SUCCESS, "a RUNNING ctx started again");
    }
    e.stop();
    let seen: Vec<_> = STATES.with(|s| std::mem::take(&mut *s.borrow_mut()));
    assert!(seen.iter().all(|(ud, prev, next)| *ud == 0xC0FFEE && prev != next), "{seen:?}");
    let nexts: Vec<_> = seen.iter().map(|s| s.2).collect();
    // IDLE → [STARTING →] RUNNING → [STOPPING →] IDLE, each step reported once.
    let ok_seq = [
        vec![DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_IDLE],
        vec![DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_IDLE],
        vec![DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE],
        vec![DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE],
    ];
    assert!(ok_seq.contains(&nexts), "transitions {seen:?}");
    for w in seen.windows(2) {
        assert_eq!(w[0].2, w[1].1, "each transition starts where the previous ended: {seen:?}");
    }
    e.destroy();
}

#[test]
fn a_pe_is_destroyed_only_after_its_contexts() {
    let e = Event::started(1, 2);
    e.stop();
    // SAFETY: live PE with a connected (IDLE) ctx: refused.
    assert_eq!(unsafe { doca_pe_destroy(e.pe) }, DOCA_ERROR_IN_USE);
    e.destroy();
}

#[test]
fn task_pools_are_fixed_and_answer_no_memory() {
    let e = Event::started(2, 3);
    let mut tasks = Vec::new();
    let mut v = 0u64;
    // SAFETY: live, RUNNING event; allocated tasks are freed below (never submitted).
    unsafe {
        for i in 0..3 {
            let mut t = ptr::null_mut();
            ok(doca_sync_event_task_get_alloc_init(e.ev, &mut v, doca_data::from_u64(i), &mut t));
            tasks.push(t);
        }
        let mut t = ptr::null_mut();
        assert_eq!(
            doca_sync_event_task_get_alloc_init(e.ev, &mut v, doca_data::from_u64(9), &mut t),
            DOCA_ERROR_NO_MEMORY,
            "the fourth task of a pool of three"
        );
        // Each task kind has its own pool.
        let mut s = ptr::null_mut();
        ok(doca_sync_event_task_notify_set_alloc_init(e.ev, 1, doca_data::from_u64(10), &mut s));
        doca_task_free(doca_sync_event_task_notify_set_as_doca_task(s));
        // A freed task returns to its pool.
        doca_task_free(doca_sync_event_task_get_as_doca_task(tasks.pop().unwrap()));
        ok(doca_sync_event_task_get_alloc_init(e.ev, &mut v, doca_data::from_u64(11), &mut t));
        tasks.push(t);
        // Task user data is set at allocation and can be replaced.
        let first = doca_sync_event_task_get_as_doca_task(tasks[0]);
        assert_eq!(doca_task_get_user_data(first).as_u64(), 0);
        doca_task_set_user_data(first, doca_data::from_u64(77));
        assert_eq!(doca_task_get_user_data(first).as_u64(), 77);
        assert_eq!(doca_task_get_ctx(first), e.ctx());
        for t in tasks {
            doca_task_free(doca_sync_event_task_get_as_doca_task(t));
        }
    }
    e.destroy();
}

#[test]
fn stop_flushes_in_flight_tasks_through_their_error_callbacks() {
    let e = Event::started(3, 8);
    for i in 0..5 {
        e.submit_wait_eq(1000 + i, u64::MAX, i).unwrap();
    }
    drain(&[e.pe]);
    let mut n = 0;
    // SAFETY: live ctx and PE, valid out-pointers.
    unsafe {
        ok(doca_ctx_get_num_inflight_tasks(e.ctx(), &mut n));
        assert_eq!(n, 5);
        ok(doca_pe_get_num_inflight_tasks(e.pe, &mut n));
        assert_eq!(n, 5);
        assert_eq!(doca_ctx_stop(e.ctx()), DOCA_ERROR_IN_PROGRESS, "stop with tasks in flight");
    }
    assert_eq!(state(e.ctx()), DOCA_CTX_STATE_STOPPING);
    progress_to(e.pe, e.ctx(), DOCA_CTX_STATE_IDLE);
    let recs = take_se();
    assert_eq!(recs.len(), 5, "every in-flight task came back: {recs:?}");
    let mut uds: Vec<u64> = recs.iter().map(|r| r.1).collect();
    uds.sort();
    assert_eq!(uds, [0, 1, 2, 3, 4]);
    for r in &recs {
        assert_eq!((r.0, r.2), ("wait_eq", 3), "{r:?}");
        assert_ne!(r.3, DOCA_SUCCESS, "a flushed task reports an error ({})", name(r.3));
    }
    println!("flushed task status: {}", name(recs[0].3));
    // SAFETY: live ctx, valid out-pointer.
    ok(unsafe { doca_ctx_get_num_inflight_tasks(e.ctx(), &mut n) });
    assert_eq!(n, 0);
    e.destroy();
}

/// The runtime installs a success callback that does not ask for the status (`success_cb`):
/// that holds only if DOCA calls a task type's success callback for successful tasks alone,
/// and its error callback for every other.
#[test]
fn the_success_callback_sees_only_successes_and_the_error_callback_the_rest() {
    let e = Event::configured(4, 8);
    // SAFETY: live, IDLE ctx (configuring again replaces the callbacks).
    unsafe {
        ok(doca_sync_event_task_notify_set_set_conf(e.ev, Some(set_ok), Some(set_err), 8));
        ok(doca_sync_event_task_wait_eq_set_conf(e.ev, Some(eq_ok), Some(eq_err), 8));
        ok(doca_pe_connect_ctx(e.pe, e.ctx()));
        ok_or_in_progress(doca_ctx_start(e.ctx()));
    }
    progress_to(e.pe, e.ctx(), DOCA_CTX_STATE_RUNNING);
    e.submit_set(7, 1);
    e.submit_wait_eq(7, u64::MAX, 2).unwrap();
    // Never reached: flushed by the stop.
    e.submit_wait_eq(1000, u64::MAX, 3).unwrap();
    drain(&[e.pe]);
    e.stop();
    let mut recs = take_se();
    recs.sort_by_key(|r| r.1);
    let seen: Vec<(&str, u64, bool)> = recs.iter().map(|r| (r.0, r.1, r.3 == DOCA_SUCCESS)).collect();
    assert_eq!(
        seen,
        [("set_ok", 1, true), ("wait_eq_ok", 2, true), ("wait_eq_err", 3, false)],
        "each task through the callback of its outcome: {recs:?}"
    );
    e.destroy();
}

#[test]
fn notification_fd_wakes_an_armed_pe_when_work_arrives() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    let rx = b.buf(0, 64, 0);
    b.recv(rx, 7).unwrap();
    // Arm b following the protocol: drain, arm, drain again (closes the race).
    drain(&[b.pe]);
    // SAFETY: live PE.
    ok(unsafe { doca_pe_request_notification(b.pe) });
    drain(&[b.pe]);
    assert_eq!(rec_count(), 0);
    // a sends (and progresses only itself); b's fd must become readable.
    a.mem()[..4].copy_from_slice(b"ping");
    a.send(ca, a.buf(0, 4, 4), 1).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1), "the send did not complete");
    assert!(readable(pe_fd(b.pe), 10_000), "the armed PE's fd did not wake");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(b.pe, pe_fd(b.pe)) });
    assert!(run_until(&[b.pe], T, || rec_count() >= 2));
    let recs = take_recs();
    assert_eq!(recs_of(&recs, 2)[0].ud, 7);
    assert_eq!(recs_of(&recs, 2)[0].len, 4);
    // Spurious wake-ups are allowed: a progress that finds nothing after a wake is fine.
    // SAFETY: live PE.
    unsafe {
        ok(doca_pe_request_notification(b.pe));
        ok(doca_pe_clear_notification(b.pe, pe_fd(b.pe)));
        assert_eq!(doca_pe_progress(b.pe), 0);
    }
    a.destroy();
    b.destroy();
}

// =============================================================================================
// RDMA
// =============================================================================================

#[test]
fn rdma_send_receive_with_every_opcode() {
    let (a, b, ca, cb) = pair(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    let r1 = b.buf(0, 64, 0);
    let r2 = b.buf(64, 64, 0);
    let r3 = b.buf(128, 64, 0);
    b.recv(r1, 10).unwrap();
    b.recv(r2, 11).unwrap();
    b.recv(r3, 12).unwrap();
    a.mem()[0..5].copy_from_slice(b"hello");
    a.mem()[8..13].copy_from_slice(b"world");
    a.mem()[16..20].copy_from_slice(b"WXYZ");
    let imm1 = 0x0102_0304u32.to_be();
    let imm2 = 0xAABB_CCDDu32.to_be();
    a.send(ca, a.buf(0, 5, 5), 1).unwrap();
    a.send_imm(ca, a.buf(8, 5, 5), imm1, 2).unwrap();
    let wdst = a.rbuf(bm, base + 4096, 16, 0);
    a.write_imm(ca, a.buf(16, 4, 4), wdst, imm2, 3).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 6));
    let recs = take_recs();
    let sa: Vec<_> = recs_of(&recs, 1).iter().map(|r| (r.kind, r.ud, r.status)).collect();
    assert_eq!(sa, [("send", 1, DOCA_SUCCESS), ("send_imm", 2, DOCA_SUCCESS), ("write_imm", 3, DOCA_SUCCESS)]);
    let c = cb as usize;
    let sb: Vec<_> = recs_of(&recs, 2).iter().map(|r| (r.ud, r.status, r.opcode, r.len, r.imm, r.conn)).collect();
    assert_eq!(
        sb,
        [
            (10, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_SEND, 5, 0, c),
            (11, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM, 5, imm1, c),
            (12, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM, 4, imm2, c),
        ]
    );
    assert_eq!(&b.mem()[0..5], b"hello");
    assert_eq!(&b.mem()[64..69], b"world");
    assert_eq!(&b.mem()[4096..4100], b"WXYZ");
    assert_eq!((data_len(r1), data_len(r2)), (5, 5), "a receive appends to its buffer's payload");
    // A destination is appended to: a second message into the partly filled buffer lands
    // after the first.
    b.recv(r1, 20).unwrap();
    a.send(ca, a.buf(8, 5, 5), 4).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&b.mem()[0..10], b"helloworld");
    assert_eq!(data_len(r1), 10);
    a.destroy();
    b.destroy();
}

#[test]
fn rdma_one_sided_write_read_and_atomics_need_no_target_progress() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    a.mem()[0..11].copy_from_slice(b"remote data");
    let wdst = a.rbuf(bm, base + 100, 64, 0);
    a.write(ca, a.buf(0, 11, 11), wdst, 1).unwrap();
    b.mem()[200..208].copy_from_slice(b"from-b!!");
    let rd = a.buf(1000, 8, 0);
    a.read(ca, a.rbuf(bm, base + 200, 8, 8), rd, 2).unwrap();
    b.mem()[512..520].copy_from_slice(&40u64.to_ne_bytes());
    let (res1, res2, res3) = (a.buf(2000, 8, 0), a.buf(2008, 8, 0), a.buf(2016, 8, 0));
    let ctr = a.rbuf(bm, base + 512, 8, 8);
    a.fetch_add(ca, ctr, res1, 2, 3).unwrap();
    a.cmp_swp(ca, ctr, res2, 42, 1000, 4).unwrap();
    a.cmp_swp(ca, ctr, res3, 42, 7, 5).unwrap();
    // Only a's PE progresses: one-sided operations complete without the target's CPU.
    assert!(run_until(&[a.pe], T, || rec_count() >= 5));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.side == 1 && r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(recs.iter().map(|r| r.ud).collect::<Vec<_>>(), [1, 2, 3, 4, 5], "completions in submission order");
    assert_eq!(&b.mem()[100..111], b"remote data");
    assert_eq!(data_len(wdst), 11, "a write appends to the destination's payload");
    assert_eq!(&a.mem()[1000..1008], b"from-b!!");
    assert_eq!(data_len(rd), 8, "a read appends the source's data");
    assert_eq!(a.u64_at(2000), 40, "fetch_add returns the old value");
    assert_eq!(a.u64_at(2008), 42, "compare-and-swap succeeded: old value 42");
    assert_eq!(a.u64_at(2016), 1000, "compare-and-swap failed: the current value comes back");
    assert_eq!(b.u64_at(512), 1000);
    assert_eq!((data_len(res1), data_len(res2), data_len(res3)), (8, 8, 8), "atomics fill their result buffers");
    a.destroy();
    b.destroy();
}

#[test]
fn rdma_completions_on_a_connection_arrive_in_submission_order() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg { num_tasks: 128, ..Cfg::default() });
    let (bm, base) = a.import(&b.export_mem());
    for i in 0..32u64 {
        b.recv(b.buf(8192 + 64 * i as usize, 64, 0), 100 + i).unwrap();
    }
    for i in 0..64u64 {
        let off = 8 * i as usize;
        a.mem()[off..off + 8].copy_from_slice(&i.to_ne_bytes());
        if i % 2 == 0 {
            a.write(ca, a.buf(off, 8, 8), a.rbuf(bm, base + off, 8, 0), i).unwrap();
        } else {
            a.send(ca, a.buf(off, 8, 8), i).unwrap();
        }
    }
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 96));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(recs_of(&recs, 1).iter().map(|r| r.ud).collect::<Vec<_>>(), (0..64).collect::<Vec<_>>());
    assert_eq!(recs_of(&recs, 2).iter().map(|r| r.ud).collect::<Vec<_>>(), (100..132).collect::<Vec<_>>());
    for i in 0..32u64 {
        // The k-th receive got the k-th send (odd i), in order.
        assert_eq!(b.u64_at(8192 + 64 * i as usize), 2 * i + 1);
        assert_eq!(b.u64_at(16 * i as usize), 2 * i, "write {i}");
    }
    a.destroy();
    b.destroy();
}

#[test]
fn rdma_task_pool_exhaustion_is_no_memory() {
    let a = Side::new(1, Cfg { num_tasks: 2, ..Cfg::default() });
    let b = Side::new(2, Cfg::default());
    let (_ca, _cb) = connect_pair(&a, &b);
    a.recv(a.buf(0, 64, 0), 1).unwrap();
    a.recv(a.buf(64, 64, 0), 2).unwrap();
    assert_eq!(a.recv(a.buf(128, 64, 0), 3), Err(DOCA_ERROR_NO_MEMORY));
    a.stop();
    assert_eq!(take_recs().len(), 2, "the posted receives were flushed by the stop");
    a.destroy();
    b.destroy();
}

#[test]
fn rdma_receive_too_small_fails_and_the_ctx_recovers_by_restart_and_reconnect() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    b.recv(b.buf(0, 4, 0), 10).unwrap();
    a.mem()[0..8].copy_from_slice(b"too long");
    a.send(ca, a.buf(0, 8, 8), 1).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || count_of(2) >= 1));
    let recs = take_recs();
    let rb = recs_of(&recs, 2);
    assert_eq!(rb[0].ud, 10);
    assert_ne!(rb[0].status, DOCA_SUCCESS, "a message longer than the posted buffer fails the receive");
    println!("receive too small: {}", name(rb[0].status));
    // The error state: further tasks on b fail (at allocation, submission or completion).
    let later = b.recv(b.buf(64, 64, 0), 11);
    if later.is_ok() {
        assert!(run_until(&[b.pe], T, || count_of(2) >= 1), "a task on a failed ctx neither failed nor completed");
        assert_ne!(take_recs()[0].status, DOCA_SUCCESS, "a task succeeded on a ctx in the error state");
    }
    // Stop, restart, new export/connect on both sides: works again.
    a.stop();
    b.stop();
    take_recs();
    a.start();
    b.start();
    let (ca2, cb2) = connect_pair(&a, &b);
    b.recv(b.buf(128, 64, 0), 20).unwrap();
    a.send(ca2, a.buf(0, 8, 8), 5).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(recs_of(&recs, 2)[0].conn, cb2 as usize);
    assert_eq!(&b.mem()[128..136], b"too long");
    a.destroy();
    b.destroy();
}

/// NULL buffers carry no data (DOCA's header: a write's or a read's source "may be NULL when
/// wishing to write [read] no data", and the destination may then be NULL too): such a write
/// and read complete with nothing moved, and a write with immediate and no data still
/// delivers its immediate (a receive of length 0, opcode `RECV_WRITE_WITH_IMM`).
#[test]
fn rdma_null_buffers_carry_no_data() {
    let (a, b, ca, cb) = pair(Cfg::default(), Cfg::default());
    let rx = b.buf(0, 16, 0);
    b.recv(rx, 10).unwrap();
    let imm = 0x0A0B_0C0Du32.to_be();
    a.write(ca, ptr::null_mut(), ptr::null_mut(), 1).unwrap();
    a.write_imm(ca, ptr::null_mut(), ptr::null_mut(), imm, 2).unwrap();
    a.read(ca, ptr::null_mut(), ptr::null_mut(), 3).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 4));
    let recs = take_recs();
    let sa: Vec<_> = recs_of(&recs, 1).iter().map(|r| (r.kind, r.ud, r.status, r.len)).collect();
    assert_eq!(sa, [("write", 1, DOCA_SUCCESS, 0), ("write_imm", 2, DOCA_SUCCESS, 0), ("read", 3, DOCA_SUCCESS, 0)]);
    let sb: Vec<_> = recs_of(&recs, 2).iter().map(|r| (r.ud, r.status, r.opcode, r.len, r.imm, r.conn)).collect();
    assert_eq!(sb, [(10, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM, 0, imm, cb as usize)]);
    assert_eq!(data_len(rx), 0, "no data arrived");
    a.destroy();
    b.destroy();
}

/// A read moves its remote source's data section (DOCA: the source holds "the data that
/// should be read"), whatever room its destination has, and appends it after the
/// destination's data; `get_result_len` is that length. A source without data reads nothing.
/// A destination without room for the data fails the read (refused at submission here).
#[test]
fn rdma_read_moves_its_sources_data() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    b.mem()[100..116].copy_from_slice(b"0123456789abcdef");
    let dst = a.buf(512, 16, 2);
    a.mem()[512..514].copy_from_slice(b"<<");
    let src = a.rbuf(bm, base + 100, 12, 0);
    a.read(ca, src, dst, 1).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    let empty = take_recs();
    assert_eq!((empty[0].status, empty[0].len), (DOCA_SUCCESS, 0), "an empty source reads nothing");
    // SAFETY: a live buffer of the test, inside its 12 bytes; the task is over.
    ok(unsafe { doca_buf_set_data(src, (base + 104) as *mut std::ffi::c_void, 4) });
    a.read(ca, src, dst, 2).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    let r = take_recs();
    assert_eq!((r[0].status, r[0].len), (DOCA_SUCCESS, 4), "the source's 4 bytes of data");
    assert_eq!(&a.mem()[512..518], b"<<4567", "appended after the destination's data");
    assert_eq!(a.mem()[518], 0, "nothing past the source's data");
    assert_eq!(data_len(dst), 6);
    match a.read(ca, a.rbuf(bm, base + 100, 8, 8), a.buf(600, 4, 0), 3) {
        Err(e) => println!("a read into too little room: refused at submission: {}", name(e)),
        Ok(()) => {
            assert!(run_until(&[a.pe], T, || rec_count() >= 1));
            let r = take_recs();
            assert_ne!(r[0].status, DOCA_SUCCESS, "a read into too little room succeeded");
            println!("a read into too little room: {}", name(r[0].status));
        }
    }
    assert_eq!(a.mem()[600..604], [0; 4], "nothing was read into too little room");
    a.destroy();
    b.destroy();
}

/// Runs one failing one-sided operation from a fresh `a` against `b`'s memory and checks that
/// it fails and leaves b's memory untouched.
fn violation(what: &str, op: impl FnOnce(&Side, &Side, *mut doca_rdma_connection) -> Result<(), doca_error_t>) {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    b.mem().fill(0xEE);
    a.mem()[0..64].fill(0x11);
    let submitted = op(&a, &b, ca);
    if let Err(e) = submitted {
        println!("{what}: refused at submission: {}", name(e));
    } else {
        assert!(run_until(&[a.pe], T, || rec_count() >= 1), "{what}: no completion");
        let r = take_recs();
        assert_ne!(r[0].status, DOCA_SUCCESS, "{what}: succeeded");
        println!("{what}: {}", name(r[0].status));
    }
    assert!(b.mem().iter().all(|&x| x == 0xEE), "{what}: the target's memory was touched");
    a.destroy();
    b.destroy();
}

#[test]
fn rdma_remote_access_is_checked_against_the_exported_range_and_rights() {
    // A 64-byte export at offset 4096 of b's memory.
    let sub = |b: &Side, perms: u32| b.export_mmap(b.sub_mmap(4096, 64, perms));
    // A write's length is its source's payload: 32 bytes into the last 16 of the export.
    violation("write past the exported range", |a, b, ca| {
        let (m, base) = a.import(&sub(b, ALL_RDMA));
        a.write(ca, a.buf(0, 32, 32), a.rbuf(m, base + 48, 16, 0), 1)
    });
    // (No read past the range: a read moves its source's data, which a buffer over the
    // imported range cannot place outside it; `rdma_read_moves_its_sources_data`.)
    violation("misaligned atomic", |a, b, ca| {
        let (m, base) = a.import(&sub(b, ALL_RDMA));
        a.cmp_swp(ca, a.rbuf(m, base + 4, 8, 8), a.buf(512, 8, 0), 0, 1, 1)
    });
    violation("write without RDMA_WRITE", |a, b, ca| {
        let (m, base) = a.import(&sub(b, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ));
        a.write(ca, a.buf(0, 8, 8), a.rbuf(m, base, 8, 0), 1)
    });
    violation("read without RDMA_READ", |a, b, ca| {
        let (m, base) = a.import(&sub(b, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE));
        a.read(ca, a.rbuf(m, base, 8, 8), a.buf(0, 8, 0), 1)
    });
    violation("atomic without RDMA_ATOMIC", |a, b, ca| {
        let (m, base) = a.import(&sub(b, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_WRITE));
        a.fetch_add(ca, a.rbuf(m, base, 8, 8), a.buf(0, 8, 0), 1, 1)
    });
}

#[test]
fn rdma_stop_flushes_posted_receives_and_a_restart_needs_new_connections() {
    let (a, b, _ca, _cb) = pair(Cfg::default(), Cfg::default());
    for i in 0..4 {
        b.recv(b.buf(64 * i, 64, 0), i as u64).unwrap();
    }
    drain(&[b.pe]);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(b.ctx()) }, DOCA_ERROR_IN_PROGRESS, "stop with receives posted");
    progress_to(b.pe, b.ctx(), DOCA_CTX_STATE_IDLE);
    let recs = take_recs();
    assert_eq!(recs.len(), 4);
    assert!(recs.iter().all(|r| r.kind == "receive" && r.status != DOCA_SUCCESS), "{recs:?}");
    b.start();
    a.stop();
    a.start();
    let (ca, _cb) = connect_pair(&a, &b);
    b.recv(b.buf(0, 64, 0), 9).unwrap();
    a.mem()[..3].copy_from_slice(b"new");
    a.send(ca, a.buf(0, 3, 3), 1).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    a.destroy();
    b.destroy();
}

#[test]
fn rdma_corrupted_or_truncated_blobs_are_rejected() {
    let a = Side::new(1, Cfg::default());
    let b = Side::new(2, Cfg::default());
    let (blob, _) = b.export().unwrap();
    let (_, ca) = a.export().unwrap();
    assert!(a.connect(&blob[..blob.len() / 2], ca).is_err(), "a truncated connection blob");
    let mem = b.export_mem();
    let mut m = ptr::null_mut();
    // SAFETY: readable bytes, valid out-pointer.
    let r = unsafe { doca_mmap_create_from_export(ptr::null(), mem.as_ptr().cast(), mem.len() / 2, a.dev, &mut m) };
    assert_ne!(r, DOCA_SUCCESS, "a truncated memory blob");
    let junk = [0x5Au8; 64];
    // SAFETY: as above.
    let r = unsafe { doca_mmap_create_from_export(ptr::null(), junk.as_ptr().cast(), junk.len(), a.dev, &mut m) };
    assert_ne!(r, DOCA_SUCCESS, "a junk memory blob");
    a.destroy();
    b.destroy();
}

// ---- across processes ----

/// The peer of the cross-process tests (runs only when re-executed with [`ROLE_ENV`]): a side
/// that sends its connection and memory blobs, connects to the parent's blob, posts one
/// receive, and then plays its role.
#[test]
#[ignore = "the peer process of the cross-process RDMA tests"]
fn rdma_peer_process() {
    let Ok(role) = std::env::var(ROLE_ENV) else { return };
    let b = Side::new(2, Cfg::default());
    b.mem()[2048..2056].copy_from_slice(&40u64.to_ne_bytes());
    let (blob, cb) = b.export().unwrap();
    tell_parent(&format!("conn {}", hex(&blob)));
    tell_parent(&format!("mem {}", hex(&b.export_mem())));
    let rx = b.buf(0, 64, 0);
    b.recv(rx, 1).unwrap();
    let line = from_parent().expect("the parent's connection blob");
    b.connect(&unhex(line.strip_prefix("conn ").unwrap()), cb).unwrap();
    assert!(run_until(&[b.pe], T, || rec_count() >= 1), "no message from the parent");
    let r = take_recs();
    assert_eq!((r[0].status, r[0].opcode, r[0].len), (DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_SEND, 4), "{r:?}");
    assert_eq!(r[0].conn, cb as usize);
    assert_eq!(&b.mem()[0..4], b"ping");
    if role == "target" {
        // The parent's write and fetch-add were submitted before its send: they landed.
        assert_eq!(&b.mem()[1024..1032], b"one-side");
        assert_eq!(b.u64_at(2048), 41);
    }
    tell_parent("done 0");
    // Stay alive (and keep the memory exported) until the parent is finished with it, or
    // until it kills us.
    while from_parent().is_some() {}
    b.destroy();
}

/// Connects to a fresh peer in `role`: (our side, connection, the peer's memory base, its mmap).
fn connect_to_peer(peer: &mut Peer) -> (Side, *mut doca_rdma_connection, *mut doca_mmap, usize) {
    let their_conn = unhex(&peer.expect("conn"));
    let their_mem = unhex(&peer.expect("mem"));
    let a = Side::new(1, Cfg::default());
    let (blob, ca) = a.export().unwrap();
    peer.send(&format!("conn {}", hex(&blob)));
    a.connect(&their_conn, ca).unwrap();
    let (m, base) = a.import(&their_mem);
    (a, ca, m, base)
}

#[test]
fn rdma_between_two_processes() {
    let mut peer = Peer::spawn("rdma_peer_process", "target");
    let (a, ca, m, base) = connect_to_peer(&mut peer);
    a.mem()[0..8].copy_from_slice(b"one-side");
    a.mem()[64..68].copy_from_slice(b"ping");
    a.write(ca, a.buf(0, 8, 8), a.rbuf(m, base + 1024, 8, 0), 1).unwrap();
    a.fetch_add(ca, a.rbuf(m, base + 2048, 8, 8), a.buf(128, 8, 0), 1, 2).unwrap();
    a.send(ca, a.buf(64, 4, 4), 3).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 3));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(recs.iter().map(|r| r.ud).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(a.u64_at(128), 40, "fetch_add across processes returns the old value");
    assert_eq!(peer.expect("done"), "0");
    peer.wait_success();
    a.destroy();
}

#[test]
fn rdma_a_dead_peer_fails_tasks_instead_of_hanging() {
    let mut peer = Peer::spawn("rdma_peer_process", "die");
    let (a, ca, _m, _base) = connect_to_peer(&mut peer);
    a.mem()[64..68].copy_from_slice(b"ping");
    a.send(ca, a.buf(64, 4, 4), 1).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_SUCCESS, "the connection worked before the peer died");
    assert_eq!(peer.expect("done"), "0");
    peer.kill();
    // A receive posted after the death can only end by failing: nobody will ever send.
    let mut pending = usize::from(a.recv(a.buf(256, 64, 0), 10).is_ok());
    // Sends must end too, and the broken connection must show within the bound. A send may
    // still report success right after the death (the soft provider notices a dead peer only
    // at its next liveness poll, every few milliseconds; hardware reports it after its
    // retries), so keep sending until one fails.
    let deadline = Instant::now() + 3 * T;
    let mut failed = None;
    for i in 11.. {
        assert!(Instant::now() < deadline, "no task failed after the peer died");
        if let Err(e) = a.send(ca, a.buf(64, 4, 4), i) {
            failed = Some(format!("send {i} refused at submission: {}", name(e)));
            break;
        }
        pending += 1;
        let ended = run_until(&[a.pe], 3 * T, || rec_count() >= pending || failed_rec().is_some());
        assert!(ended, "tasks hang after the peer died");
        if let Some(r) = failed_rec() {
            failed = Some(format!("{} {}: {}", r.kind, r.ud, name(r.status)));
            break;
        }
    }
    println!("after the peer died: {}", failed.unwrap());
    // Whatever was still outstanding comes back (flushed by the stop in destroy, at the latest).
    assert!(run_until(&[a.pe], 3 * T, || rec_count() >= pending), "the posted receive hangs");
    let recv = take_recs().into_iter().find(|r| r.ud == 10);
    if let Some(r) = recv {
        assert_ne!(r.status, DOCA_SUCCESS, "a receive completed with no live sender");
    }
    a.destroy();
}

// =============================================================================================
// Sync events
// =============================================================================================

#[test]
fn sync_event_tasks_set_add_get_and_masked_waits() {
    let e = Event::started(5, 8);
    let mut fetched = 0u64;
    let mut got = 0u64;
    e.submit_wait_eq(0x0105, 0xFFFF, 1).unwrap();
    let mut t_neq = ptr::null_mut();
    // SAFETY: live, RUNNING event; the out-cells outlive the tasks (drained below).
    unsafe {
        ok(doca_sync_event_task_wait_neq_alloc_init(e.ev, 0, 0xFF, doca_data::from_u64(2), &mut t_neq));
        ok(doca_task_submit(doca_sync_event_task_wait_neq_as_doca_task(t_neq)));
    }
    drain(&[e.pe]);
    assert!(take_se().is_empty(), "the waits completed before the counter changed");
    e.submit_set(0xAB00_0100, 3);
    let mut t_add = ptr::null_mut();
    // SAFETY: as above.
    unsafe {
        ok(doca_sync_event_task_notify_add_alloc_init(e.ev, 5, &mut fetched, doca_data::from_u64(4), &mut t_add));
        ok(doca_task_submit(doca_sync_event_task_notify_add_as_doca_task(t_add)));
    }
    assert!(run_until(&[e.pe], T, || SE.with(|s| s.borrow().len()) >= 4));
    let mut t_get = ptr::null_mut();
    // SAFETY: as above.
    unsafe {
        ok(doca_sync_event_task_get_alloc_init(e.ev, &mut got, doca_data::from_u64(5), &mut t_get));
        ok(doca_task_submit(doca_sync_event_task_get_as_doca_task(t_get)));
    }
    assert!(run_until(&[e.pe], T, || SE.with(|s| s.borrow().len()) >= 5));
    let recs = take_se();
    assert!(recs.iter().all(|r| r.2 == 5 && r.3 == DOCA_SUCCESS), "{recs:?}");
    let mut kinds: Vec<_> = recs.iter().map(|r| (r.0, r.1)).collect();
    kinds.sort();
    assert_eq!(kinds, [("add", 4), ("get", 5), ("set", 3), ("wait_eq", 1), ("wait_neq", 2)]);
    assert_eq!(fetched, 0xAB00_0100, "notify_add fetched the value before the add");
    assert_eq!(got, 0xAB00_0105);
    e.destroy();
}

#[test]
fn sync_event_standalone_synchronous_path() {
    let dev = open_dev();
    let mut ev = ptr::null_mut();
    let (mut v, mut fetched) = (0u64, 0u64);
    // SAFETY: valid out-pointers; the event is started standalone, stopped and destroyed.
    unsafe {
        ok(doca_sync_event_create(&mut ev));
        ok(doca_sync_event_add_publisher_location_cpu(ev, dev));
        ok(doca_sync_event_add_subscriber_location_cpu(ev, dev));
        ok(doca_sync_event_start(ev));
        ok(doca_sync_event_update_set(ev, 10));
        ok(doca_sync_event_update_add(ev, 5, &mut fetched));
        assert_eq!(fetched, 10);
        ok(doca_sync_event_get(ev, &mut v));
        assert_eq!(v, 15);
        ok(doca_sync_event_wait_eq(ev, 15, u64::MAX));
        ok(doca_sync_event_wait_neq(ev, 3, u64::MAX));
        ok(doca_sync_event_wait_gt(ev, 14, u64::MAX));
        ok(doca_sync_event_stop(ev));
        ok(doca_sync_event_destroy(ev));
        ok(doca_dev_close(dev));
    }
}

/// The importing side of the cross-process sync event test (runs only when re-executed):
/// opens the parent's counter from its blob, as a ctx, and sets it.
#[test]
#[ignore = "the peer process of the cross-process sync event test"]
fn sync_event_peer_process() {
    let Ok(_role) = std::env::var(ROLE_ENV) else { return };
    let blob = unhex(&from_parent().expect("the export blob"));
    let dev = open_dev();
    let (mut pe, mut ev) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: valid out-pointers; the blob is readable; objects are torn down in order below.
    unsafe {
        ok(doca_pe_create(&mut pe));
        ok(doca_sync_event_create_from_export(dev, blob.as_ptr(), blob.len(), &mut ev));
        ok(doca_sync_event_task_notify_set_set_conf(ev, Some(se_set), Some(se_set), 2));
        let ctx = doca_sync_event_as_ctx(ev);
        ok(doca_pe_connect_ctx(pe, ctx));
        ok_or_in_progress(doca_ctx_start(ctx));
        progress_to(pe, ctx, DOCA_CTX_STATE_RUNNING);
        let mut t = ptr::null_mut();
        ok(doca_sync_event_task_notify_set_alloc_init(ev, 42, doca_data::from_u64(1), &mut t));
        ok(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(t)));
        assert!(run_until(&[pe], T, || SE.with(|s| !s.borrow().is_empty())));
        assert_eq!(take_se()[0].3, DOCA_SUCCESS);
        tell_parent("set 42");
        ok_or_in_progress(doca_ctx_stop(ctx));
        progress_to(pe, ctx, DOCA_CTX_STATE_IDLE);
        ok(doca_sync_event_destroy(ev));
        ok(doca_pe_destroy(pe));
        ok(doca_dev_close(dev));
    }
}

#[test]
fn sync_event_export_opens_the_same_counter_in_another_process() {
    let dev = open_dev();
    let (mut pe, mut ev) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: plain setup as the runtime does it (CPU publisher, remote-PCI subscriber, async
    // mode); the export blob is copied at once; teardown in order at the end.
    let blob = unsafe {
        ok(doca_pe_create(&mut pe));
        ok(doca_sync_event_create(&mut ev));
        ok(doca_sync_event_add_publisher_location_cpu(ev, dev));
        ok(doca_sync_event_add_subscriber_location_remote_pci(ev));
        ok(doca_sync_event_task_wait_eq_set_conf(ev, Some(se_eq), Some(se_eq), 2));
        let ctx = doca_sync_event_as_ctx(ev);
        ok(doca_ctx_set_user_data(ctx, doca_data::from_u64(9)));
        ok(doca_pe_connect_ctx(pe, ctx));
        ok_or_in_progress(doca_ctx_start(ctx));
        progress_to(pe, ctx, DOCA_CTX_STATE_RUNNING);
        let (mut p, mut n) = (ptr::null(), 0usize);
        ok(doca_sync_event_export_to_remote_pci(ev, dev, &mut p, &mut n));
        assert!(!p.is_null() && n > 0);
        std::slice::from_raw_parts(p, n).to_vec()
    };
    let mut t = ptr::null_mut();
    // SAFETY: live, RUNNING event.
    unsafe {
        ok(doca_sync_event_task_wait_eq_alloc_init(ev, 42, u64::MAX, doca_data::from_u64(3), &mut t));
        ok(doca_task_submit(doca_sync_event_task_wait_eq_as_doca_task(t)));
    }
    let mut peer = Peer::spawn("sync_event_peer_process", "importer");
    peer.send(&hex(&blob));
    // The wait completes when the other process sets the counter: the PE's fd wakes us.
    assert!(run_until(&[pe], T, || SE.with(|s| !s.borrow().is_empty())), "the wait never completed");
    let r = take_se();
    assert_eq!((r[0].0, r[0].1, r[0].2, r[0].3), ("wait_eq", 3, 9, DOCA_SUCCESS));
    assert_eq!(peer.expect("set"), "42");
    peer.wait_success();
    // SAFETY: teardown in order; no task is in flight.
    unsafe {
        let ctx = doca_sync_event_as_ctx(ev);
        ok_or_in_progress(doca_ctx_stop(ctx));
        progress_to(pe, ctx, DOCA_CTX_STATE_IDLE);
        ok(doca_sync_event_destroy(ev));
        ok(doca_pe_destroy(pe));
        ok(doca_dev_close(dev));
    }
}

// =============================================================================================
// UROM
// =============================================================================================

mod urom {
    use super::*;

    /// Where the service is: a private soft daemon (soft provider) or the one named by
    /// `DOCA_UROM_SERVICE_FILE` (NVIDIA's provider).
    pub struct Service {
        #[cfg(feature = "soft")]
        daemon: Option<std::process::Child>,
        #[cfg(feature = "soft")]
        pub socket: std::path::PathBuf,
        #[cfg(feature = "soft")]
        dir: std::path::PathBuf,
    }

    impl Service {
        #[cfg(feature = "soft")]
        pub fn start() -> Option<Service> {
            use std::io::{BufRead, BufReader};
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let dir = std::env::temp_dir().join(format!(
                "async-doca-conformance-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let socket = dir.join("urom.sock");
            let mut child = std::process::Command::new(crate::cli::exe())
                .args(["urom-service", "--builtin-samples", "--log-level", "warn", "--socket"])
                .arg(&socket)
                .env_remove("UROM_PLUGIN_PATH")
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start async-doca urom-service");
            let out = child.stdout.take().unwrap();
            let me = Service { daemon: Some(child), socket, dir };
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                    if line.starts_with("listening on") {
                        let _ = tx.send(());
                    }
                }
            });
            rx.recv_timeout(T).expect("the UROM service did not start");
            Some(me)
        }

        #[cfg(not(feature = "soft"))]
        pub fn start() -> Option<Service> {
            if std::env::var_os("DOCA_UROM_SERVICE_FILE").is_none() {
                println!("SKIPPED: DOCA_UROM_SERVICE_FILE is not set; it names the UROM service to test");
                return None;
            }
            Some(Service {})
        }

        /// Points a service object at this service (before its start).
        pub fn aim(&self, _svc: *mut doca_urom_service) {
            #[cfg(feature = "soft")]
            {
                use std::os::unix::ffi::OsStrExt;
                let c = std::ffi::CString::new(self.socket.as_os_str().as_bytes()).unwrap();
                // SAFETY: live, IDLE service; the path is copied.
                ok(unsafe { doca_sys::doca_soft_urom_service_set_socket_path(_svc, c.as_ptr()) });
            }
        }
    }

    #[cfg(feature = "soft")]
    impl Drop for Service {
        fn drop(&mut self) {
            if let Some(mut c) = self.daemon.take() {
                // SAFETY: kill(2) on our own child.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let deadline = Instant::now() + Duration::from_secs(5);
                while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    thread_local! {
        static CMDS: RefCell<Vec<(u64, doca_error_t, Vec<u8>)>> = const { RefCell::new(Vec::new()) };
        static GIDS: RefCell<Vec<(doca_error_t, Vec<u64>)>> = const { RefCell::new(Vec::new()) };
    }

    // The callbacks record and never panic (a panic must not cross the C boundary): a
    // failing call inside them is recorded as the task's status and asserted by the test.
    unsafe extern "C" fn on_cmd(task: *mut doca_urom_worker_cmd_task, ud: doca_data, _cud: doca_data) {
        // SAFETY: the task is ours inside its callback; its response buffer lives until release.
        unsafe {
            let mut status = doca_task_get_status(doca_urom_worker_cmd_task_as_task(task));
            let mut reply = Vec::new();
            if status == DOCA_SUCCESS {
                let b = doca_urom_worker_cmd_task_get_response(task);
                let (mut p, mut n) = (ptr::null_mut(), 0usize);
                if b.is_null() {
                    status = DOCA_ERROR_UNEXPECTED;
                } else if let Err(e) = res(doca_buf_get_data(b, &mut p)).and(res(doca_buf_get_data_len(b, &mut n))) {
                    status = e;
                } else if n > 0 {
                    reply = std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec();
                }
            }
            let released = doca_urom_worker_cmd_task_release(task);
            if status == DOCA_SUCCESS && released != DOCA_SUCCESS {
                status = released;
            }
            CMDS.with(|c| c.borrow_mut().push((ud.as_u64(), status, reply)));
        }
    }

    unsafe extern "C" fn on_gid(task: *mut doca_urom_service_get_workers_by_gid_task, _ud: doca_data, _c: doca_data) {
        // SAFETY: the task is ours inside its callback; the id array lives until release.
        unsafe {
            let mut status = doca_task_get_status(doca_urom_service_get_workers_by_gid_task_as_task(task));
            let n = doca_urom_service_get_workers_by_gid_task_get_workers_count(task);
            let ids = doca_urom_service_get_workers_by_gid_task_get_worker_ids(task);
            let ids = if n == 0 || ids.is_null() { Vec::new() } else { std::slice::from_raw_parts(ids, n).to_vec() };
            let released = doca_urom_service_get_workers_by_gid_task_release(task);
            if status == DOCA_SUCCESS && released != DOCA_SUCCESS {
                status = released;
            }
            GIDS.with(|g| g.borrow_mut().push((status, ids)));
        }
    }

    fn command(w: *mut doca_urom_worker, plugin: u64, payload: &[u8], ud: u64) {
        let mut t = ptr::null_mut();
        // SAFETY: live, RUNNING worker; the payload buffer belongs to the task (capacity: the
        // max message size, far above these few bytes).
        unsafe {
            ok(doca_urom_worker_cmd_task_allocate_init(w, plugin, &mut t));
            let b = doca_urom_worker_cmd_task_get_payload(t);
            let mut head = ptr::null_mut();
            ok(doca_buf_get_head(b, &mut head));
            ptr::copy_nonoverlapping(payload.as_ptr(), head.cast::<u8>(), payload.len());
            ok(doca_buf_set_data(b, head, payload.len()));
            doca_urom_worker_cmd_task_set_cb(t, Some(on_cmd));
            doca_task_set_user_data(doca_urom_worker_cmd_task_as_task(t), doca_data::from_u64(ud));
            ok(doca_task_submit(doca_urom_worker_cmd_task_as_task(t)));
        }
    }

    #[test]
    fn urom_service_worker_commands_and_gid_query() {
        use doca_urom_plugin::samples::graph;
        let Some(service) = Service::start() else { return };
        let dev = open_dev();
        let (mut pe, mut svc, mut w) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: plain DOCA setup; every object is stopped and destroyed in order below.
        unsafe {
            ok(doca_pe_create(&mut pe));
            ok(doca_urom_service_create(&mut svc));
            ok(doca_urom_service_set_dev(svc, dev));
            service.aim(svc);
            let sctx = doca_urom_service_as_ctx(svc);
            ok(doca_pe_connect_ctx(pe, sctx));
            ok_or_in_progress(doca_ctx_start(sctx));
            progress_to(pe, sctx, DOCA_CTX_STATE_RUNNING);

            let (mut list, mut n) = (ptr::null(), 0usize);
            ok(doca_urom_service_get_plugins_list(svc, &mut list, &mut n));
            let plugins = std::slice::from_raw_parts(list, n);
            let mut seen_bits = 0u64;
            for p in plugins {
                assert_eq!(p.id.count_ones(), 1, "a plugin id is one bit: {p:?}");
                assert_eq!(seen_bits & p.id, 0, "plugin ids are distinct");
                seen_bits |= p.id;
            }
            let graph_id = plugins
                .iter()
                .find(|p| std::ffi::CStr::from_ptr(p.plugin_name.as_ptr()).to_bytes() == graph::PLUGIN_NAME.as_bytes())
                .map(|p| p.id)
                .expect("the service offers worker_graph");
            let mut cpus = doca_cpu_set_t::empty();
            ok(doca_urom_service_get_cpuset(svc, &mut cpus));
            assert!(!cpus.is_empty(), "the service has CPUs for its workers");

            ok(doca_urom_worker_create(&mut w));
            ok(doca_urom_worker_set_service(w, svc));
            ok(doca_urom_worker_set_id(w, DOCA_UROM_WORKER_ID_ANY));
            ok(doca_urom_worker_set_gid(w, 0x77));
            ok(doca_urom_worker_set_plugins(w, graph_id));
            ok(doca_urom_worker_set_cpuset(w, cpus));
            ok(doca_urom_worker_set_max_inflight_tasks(w, 8));
            let wctx = doca_urom_worker_as_ctx(w);
            ok(doca_pe_connect_ctx(pe, wctx));
            ok_or_in_progress(doca_ctx_start(wctx));
            assert!(run_until(&[pe], T, || state(wctx) == DOCA_CTX_STATE_RUNNING), "the worker did not start");
            let mut id = 0;
            ok(doca_urom_worker_get_id(w, &mut id));
            assert_ne!(id, DOCA_UROM_WORKER_ID_ANY, "the service chose an id");

            // Several commands in flight; each answer carries its own command's value.
            for i in 0..8u64 {
                command(w, graph_id, &graph::Cmd::Loopback { value: 1000 + i }.encode(), i);
            }
            assert!(run_until(&[pe], T, || CMDS.with(|c| c.borrow().len()) >= 8), "commands unanswered");
            let cmds = CMDS.with(|c| std::mem::take(&mut *c.borrow_mut()));
            for (ud, status, reply) in cmds {
                assert_eq!(status, DOCA_SUCCESS, "command {ud}: {}", name(status));
                assert_eq!(graph::Notif::decode(&reply).unwrap(), graph::Notif::Loopback { value: 1000 + ud });
            }
            // A command the plugin cannot decode comes back with an error status.
            command(w, graph_id, &[0xFF; 3], 50);
            assert!(run_until(&[pe], T, || CMDS.with(|c| !c.borrow().is_empty())));
            let bad = CMDS.with(|c| std::mem::take(&mut *c.borrow_mut()));
            assert_ne!(bad[0].1, DOCA_SUCCESS, "a malformed command succeeded");

            // The gid query lists the worker.
            let mut g = ptr::null_mut();
            ok(doca_urom_service_get_workers_by_gid_task_allocate_init(svc, 0x77, Some(on_gid), &mut g));
            ok(doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(g)));
            assert!(run_until(&[pe], T, || GIDS.with(|x| !x.borrow().is_empty())));
            let gids = GIDS.with(|x| std::mem::take(&mut *x.borrow_mut()));
            assert_eq!(gids[0], (DOCA_SUCCESS, vec![id]));

            ok_or_in_progress(doca_ctx_stop(wctx));
            assert!(run_until(&[pe], T, || state(wctx) == DOCA_CTX_STATE_IDLE), "the worker did not stop");
            ok(doca_urom_worker_destroy(w));
            ok_or_in_progress(doca_ctx_stop(sctx));
            progress_to(pe, sctx, DOCA_CTX_STATE_IDLE);
            ok(doca_urom_service_destroy(svc));
            ok(doca_pe_destroy(pe));
            ok(doca_dev_close(dev));
        }
    }

    #[test]
    fn urom_worker_with_an_unknown_plugin_fails_to_start() {
        let Some(service) = Service::start() else { return };
        let dev = open_dev();
        let (mut pe, mut svc, mut w) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
        // SAFETY: as in the test above.
        unsafe {
            ok(doca_pe_create(&mut pe));
            ok(doca_urom_service_create(&mut svc));
            ok(doca_urom_service_set_dev(svc, dev));
            service.aim(svc);
            let sctx = doca_urom_service_as_ctx(svc);
            ok(doca_pe_connect_ctx(pe, sctx));
            ok_or_in_progress(doca_ctx_start(sctx));
            progress_to(pe, sctx, DOCA_CTX_STATE_RUNNING);
            let (mut list, mut n) = (ptr::null(), 0usize);
            ok(doca_urom_service_get_plugins_list(svc, &mut list, &mut n));
            let all = std::slice::from_raw_parts(list, n).iter().fold(0u64, |a, p| a | p.id);
            let unknown = (0..64).map(|b| 1u64 << b).find(|b| all & b == 0).unwrap();
            ok(doca_urom_worker_create(&mut w));
            ok(doca_urom_worker_set_service(w, svc));
            ok(doca_urom_worker_set_id(w, DOCA_UROM_WORKER_ID_ANY));
            ok(doca_urom_worker_set_plugins(w, unknown));
            let wctx = doca_urom_worker_as_ctx(w);
            ok(doca_pe_connect_ctx(pe, wctx));
            let r = doca_ctx_start(wctx);
            if r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS {
                // The refusal arrives asynchronously: STARTING falls back to IDLE.
                let deadline = Instant::now() + T;
                while state(wctx) != DOCA_CTX_STATE_IDLE {
                    drain(&[pe]);
                    assert_ne!(state(wctx), DOCA_CTX_STATE_RUNNING, "a worker with an unknown plugin started");
                    assert!(Instant::now() < deadline, "the refused worker never returned to IDLE");
                    std::thread::sleep(Duration::from_millis(1));
                }
            } else {
                println!("worker with an unknown plugin refused at start: {}", name(r));
            }
            ok(doca_urom_worker_destroy(w));
            ok_or_in_progress(doca_ctx_stop(sctx));
            progress_to(pe, sctx, DOCA_CTX_STATE_IDLE);
            ok(doca_urom_service_destroy(svc));
            ok(doca_pe_destroy(pe));
            ok(doca_dev_close(dev));
        }
    }

    // ---- behaviours NVIDIA's UROM samples rely on (docs/urom-soft.md, "DOCA behaviours") ----

    /// A PE, a device, a RUNNING service and a RUNNING worker with `worker_graph`, torn down
    /// in order on drop (the worker only if the test left it RUNNING or IDLE).
    struct Graph {
        _service: Service,
        dev: *mut doca_dev,
        pe: *mut doca_pe,
        svc: *mut doca_urom_service,
        w: *mut doca_urom_worker,
        graph_id: u64,
    }

    impl Graph {
        fn start() -> Option<Graph> {
            use doca_urom_plugin::samples::graph;
            let service = Service::start()?;
            let dev = open_dev();
            let (mut pe, mut svc, mut w) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
            // SAFETY: plain DOCA setup; Drop tears it down in order.
            let graph_id = unsafe {
                ok(doca_pe_create(&mut pe));
                ok(doca_urom_service_create(&mut svc));
                ok(doca_urom_service_set_dev(svc, dev));
                service.aim(svc);
                let sctx = doca_urom_service_as_ctx(svc);
                ok(doca_pe_connect_ctx(pe, sctx));
                ok_or_in_progress(doca_ctx_start(sctx));
                progress_to(pe, sctx, DOCA_CTX_STATE_RUNNING);
                let (mut list, mut n) = (ptr::null(), 0usize);
                ok(doca_urom_service_get_plugins_list(svc, &mut list, &mut n));
                let graph_id = std::slice::from_raw_parts(list, n)
                    .iter()
                    .find(|p| {
                        std::ffi::CStr::from_ptr(p.plugin_name.as_ptr()).to_bytes() == graph::PLUGIN_NAME.as_bytes()
                    })
                    .map(|p| p.id)
                    .expect("the service offers worker_graph");
                ok(doca_urom_worker_create(&mut w));
                ok(doca_urom_worker_set_service(w, svc));
                ok(doca_urom_worker_set_id(w, DOCA_UROM_WORKER_ID_ANY));
                ok(doca_urom_worker_set_gid(w, 0x5A));
                ok(doca_urom_worker_set_plugins(w, graph_id));
                ok(doca_urom_worker_set_max_inflight_tasks(w, 4));
                let wctx = doca_urom_worker_as_ctx(w);
                ok(doca_pe_connect_ctx(pe, wctx));
                // The samples require IN_PROGRESS + STARTING here, then RUNNING from progress.
                assert_eq!(doca_ctx_start(wctx), DOCA_ERROR_IN_PROGRESS, "worker start is asynchronous");
                assert_eq!(state(wctx), DOCA_CTX_STATE_STARTING);
                assert!(run_until(&[pe], T, || state(wctx) == DOCA_CTX_STATE_RUNNING), "the worker did not start");
                graph_id
            };
            Some(Graph { _service: service, dev, pe, svc, w, graph_id })
        }

        fn wctx(&self) -> *mut doca_ctx {
            // SAFETY: live worker.
            unsafe { doca_urom_worker_as_ctx(self.w) }
        }
    }

    impl Drop for Graph {
        fn drop(&mut self) {
            if std::thread::panicking() {
                return;
            }
            // SAFETY: live objects, stopped and destroyed in dependency order.
            unsafe {
                let wctx = self.wctx();
                if state(wctx) != DOCA_CTX_STATE_IDLE {
                    ok_or_in_progress(doca_ctx_stop(wctx));
                    assert!(run_until(&[self.pe], T, || state(wctx) == DOCA_CTX_STATE_IDLE));
                }
                ok(doca_urom_worker_destroy(self.w));
                let sctx = doca_urom_service_as_ctx(self.svc);
                ok_or_in_progress(doca_ctx_stop(sctx));
                progress_to(self.pe, sctx, DOCA_CTX_STATE_IDLE);
                ok(doca_urom_service_destroy(self.svc));
                ok(doca_pe_destroy(self.pe));
                ok(doca_dev_close(self.dev));
            }
        }
    }

    /// A fresh command task's payload offers its whole capacity as data (NVIDIA's hosts pack
    /// into `data_len` bytes at the data pointer, then set the packed length), and the
    /// notification the host receives is exactly the plugin's body: 16 bytes for
    /// worker_graph's loopback, with the task's status from the notification.
    #[test]
    fn urom_fresh_payload_is_all_data_and_the_response_is_the_plugin_body() {
        use doca_urom_plugin::samples::graph;
        let Some(g) = Graph::start() else { return };
        let mut t = ptr::null_mut();
        // SAFETY: live, RUNNING worker; the task is ours until submitted.
        unsafe {
            ok(doca_urom_worker_cmd_task_allocate_init(g.w, g.graph_id, &mut t));
            let b = doca_urom_worker_cmd_task_get_payload(t);
            let (mut head, mut data) = (ptr::null_mut(), ptr::null_mut());
            let (mut cap, mut len) = (0usize, 0usize);
            ok(doca_buf_get_head(b, &mut head));
            ok(doca_buf_get_len(b, &mut cap));
            ok(doca_buf_get_data(b, &mut data));
            ok(doca_buf_get_data_len(b, &mut len));
            assert_eq!(data, head, "a fresh payload's data starts at its head");
            assert_eq!(len, cap, "a fresh payload's data is its whole capacity");
            assert_eq!(len, 4096, "the default max comm message size");
            let cmd = graph::Cmd::Loopback { value: 0xC0FFEE }.encode();
            assert!(cmd.len() <= len);
            ptr::copy_nonoverlapping(cmd.as_ptr(), data.cast::<u8>(), cmd.len());
            ok(doca_buf_set_data(b, data, cmd.len()));
            doca_urom_worker_cmd_task_set_cb(t, Some(on_cmd));
            doca_task_set_user_data(doca_urom_worker_cmd_task_as_task(t), doca_data::from_u64(7));
            ok(doca_task_submit(doca_urom_worker_cmd_task_as_task(t)));
        }
        assert!(run_until(&[g.pe], T, || CMDS.with(|c| !c.borrow().is_empty())), "no answer");
        let (ud, status, reply) = CMDS.with(|c| c.borrow_mut().remove(0));
        assert_eq!((ud, status), (7, DOCA_SUCCESS), "{}", name(status));
        assert_eq!(reply.len(), 16, "only the plugin's notification body reaches the host");
        assert_eq!(graph::Notif::decode(&reply).unwrap(), graph::Notif::Loopback { value: 0xC0FFEE });
    }

    /// `doca_urom_worker_cmd_task_allocate` leaves the plugin unset (a submit without one
    /// fails); `get_workers_by_gid_task_allocate` + `set_gid` + `set_cb` is the split form of
    /// `allocate_init`.
    #[test]
    fn urom_split_task_allocations() {
        use doca_urom_plugin::samples::graph;
        let Some(g) = Graph::start() else { return };
        let mut t = ptr::null_mut();
        // SAFETY: live, RUNNING worker; the task is ours until submitted or released.
        unsafe {
            ok(doca_urom_worker_cmd_task_allocate(g.w, &mut t));
            let b = doca_urom_worker_cmd_task_get_payload(t);
            let mut data = ptr::null_mut();
            ok(doca_buf_get_data(b, &mut data));
            let cmd = graph::Cmd::Loopback { value: 42 }.encode();
            ptr::copy_nonoverlapping(cmd.as_ptr(), data.cast::<u8>(), cmd.len());
            ok(doca_buf_set_data(b, data, cmd.len()));
            doca_urom_worker_cmd_task_set_cb(t, Some(on_cmd));
            doca_task_set_user_data(doca_urom_worker_cmd_task_as_task(t), doca_data::from_u64(42));
            let r = doca_task_submit(doca_urom_worker_cmd_task_as_task(t));
            if r == DOCA_SUCCESS {
                // Not what the soft provider does; record it for the hardware run.
                println!("a command without a plugin was accepted by submit");
                assert!(run_until(&[g.pe], T, || CMDS.with(|c| !c.borrow().is_empty())));
                let (_, st, _) = CMDS.with(|c| c.borrow_mut().remove(0));
                println!("... and completed with {}", name(st));
                ok(doca_urom_worker_cmd_task_allocate(g.w, &mut t));
                let b = doca_urom_worker_cmd_task_get_payload(t);
                ok(doca_buf_get_data(b, &mut data));
                ptr::copy_nonoverlapping(cmd.as_ptr(), data.cast::<u8>(), cmd.len());
                ok(doca_buf_set_data(b, data, cmd.len()));
                doca_urom_worker_cmd_task_set_cb(t, Some(on_cmd));
                doca_task_set_user_data(doca_urom_worker_cmd_task_as_task(t), doca_data::from_u64(42));
            } else {
                println!("submit without a plugin: {}", name(r));
            }
            doca_urom_worker_cmd_task_set_plugin(t, g.graph_id);
            ok(doca_task_submit(doca_urom_worker_cmd_task_as_task(t)));
        }
        assert!(run_until(&[g.pe], T, || CMDS.with(|c| !c.borrow().is_empty())), "no answer");
        let (ud, status, reply) = CMDS.with(|c| c.borrow_mut().remove(0));
        assert_eq!((ud, status), (42, DOCA_SUCCESS), "{}", name(status));
        assert_eq!(graph::Notif::decode(&reply).unwrap(), graph::Notif::Loopback { value: 42 });

        let mut q = ptr::null_mut();
        let mut id = 0;
        // SAFETY: live service and worker; the task is ours until submitted.
        unsafe {
            ok(doca_urom_worker_get_id(g.w, &mut id));
            ok(doca_urom_service_get_workers_by_gid_task_allocate(g.svc, &mut q));
            doca_urom_service_get_workers_by_gid_task_set_gid(q, 0x5A);
            doca_urom_service_get_workers_by_gid_task_set_cb(q, Some(on_gid));
            ok(doca_task_submit(doca_urom_service_get_workers_by_gid_task_as_task(q)));
        }
        assert!(run_until(&[g.pe], T, || GIDS.with(|x| !x.borrow().is_empty())));
        let gids = GIDS.with(|x| std::mem::take(&mut *x.borrow_mut()));
        assert_eq!(gids[0], (DOCA_SUCCESS, vec![id]));
    }

    /// Stopping a worker: `doca_ctx_stop` answers SUCCESS or IN_PROGRESS and some
    /// `doca_pe_progress` call returns 1 for the STOPPING -> IDLE transition, exactly the
    /// loop of NVIDIA's multi-workers sample (`ret += doca_pe_progress(pe)` until IDLE, fail
    /// when `ret == 0`).
    #[test]
    fn urom_worker_stop_is_reported_through_progress() {
        let Some(g) = Graph::start() else { return };
        let wctx = g.wctx();
        // SAFETY: live, RUNNING worker ctx with no task allocated.
        let r = unsafe { doca_ctx_stop(wctx) };
        println!("doca_ctx_stop(worker) = {}", name(r));
        assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{}", name(r));
        let deadline = Instant::now() + T;
        let mut ret = 0u32;
        while state(wctx) != DOCA_CTX_STATE_IDLE {
            // SAFETY: live PE.
            ret += u32::from(unsafe { doca_pe_progress(g.pe) });
            assert!(Instant::now() < deadline, "the worker never reached IDLE");
        }
        assert!(ret > 0, "no progress call reported the worker's stop (the sample fails here)");
    }
}

// =============================================================================================
// Behaviours NVIDIA's public samples rely on (issue "DOCA fidelity"): where the soft provider
// once differed. A BlueField run tells whether NVIDIA's libraries agree.
// =============================================================================================

/// samples/common.c stops a ctx that its state callback already saw reach IDLE and treats
/// anything but SUCCESS / IN_PROGRESS as failure: stopping an IDLE ctx is a successful no-op
/// (BAD_STATE is not among `doca_ctx_stop`'s documented errors), with no state callback.
#[test]
fn stopping_an_idle_ctx_succeeds_without_a_transition() {
    let (a, b, _ca, _cb) = pair(Cfg::default(), Cfg::default());
    a.stop();
    assert_eq!(a.state(), DOCA_CTX_STATE_IDLE);
    // SAFETY: live, IDLE ctx.
    assert_eq!(unsafe { doca_ctx_stop(a.ctx()) }, DOCA_SUCCESS, "stop of an IDLE ctx");
    assert_eq!(a.state(), DOCA_CTX_STATE_IDLE);
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_progress(a.pe) }, 0, "no transition to report");
    a.destroy();
    b.destroy();
}

/// samples/doca_rdma/rdma_common.c stops the mmap it made with `doca_mmap_create_from_export`
/// before destroying it and expects SUCCESS.
#[test]
fn an_imported_mmap_stops_then_destroys() {
    let (a, b, _ca, _cb) = pair(Cfg::default(), Cfg::default());
    let blob = b.export_mem();
    let mut m = ptr::null_mut();
    // SAFETY: live device; the blob is readable; the mmap is stopped and destroyed below.
    unsafe {
        ok(doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), blob.len(), a.dev, &mut m));
        assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS, "stop of an imported mmap without buffers");
        ok(doca_mmap_destroy(m));
    }
    a.destroy();
    b.destroy();
}

/// The requester of a multi-connection sample sends one message on each connection and stops
/// its ctx as soon as every send completed; on RC a completed send was received. The receiver
/// re-posts one receive at a time from its completions (so it is still consuming when the
/// sender stops) and must get every message before any connection error. Repeated.
#[test]
fn completed_sends_are_delivered_when_the_sender_stops_at_once() {
    const CONNS: usize = 3;
    let cfg = Cfg { max_conns: CONNS as u16, ..Cfg::default() };
    for round in 0..20u64 {
        let a = Side::new(1, cfg);
        let b = Side::new(2, cfg);
        let conns: Vec<_> = (0..CONNS).map(|_| connect_pair(&a, &b)).collect();
        take_recs();
        b.recv(b.buf(0, 64, 0), 100).unwrap();
        let mut posted = 1;
        for (i, &(ca, _)) in conns.iter().enumerate() {
            a.mem()[64 * i..64 * i + 8].copy_from_slice(&(round * 10 + i as u64).to_ne_bytes());
            a.send(ca, a.buf(64 * i, 8, 8), i as u64).unwrap();
        }
        let (mut sent, mut got) = (0, Vec::new());
        let mut stopped = false;
        let deadline = Instant::now() + T;
        while got.len() < CONNS {
            assert!(Instant::now() < deadline, "round {round}: stuck, {got:?} received");
            // SAFETY: live PEs.
            unsafe {
                if !stopped {
                    doca_pe_progress(a.pe);
                }
                doca_pe_progress(b.pe);
            }
            for r in take_recs() {
                if r.side == 1 {
                    assert_eq!(r.status, DOCA_SUCCESS, "round {round}: {r:?}");
                    sent += 1;
                    continue;
                }
                assert_eq!(r.status, DOCA_SUCCESS, "round {round}: {r:?} after {got:?}");
                got.push(b.u64_at(64 * (r.ud as usize - 100)));
                if posted < CONNS {
                    b.recv(b.buf(64 * posted, 64, 0), 100 + posted as u64).unwrap();
                    posted += 1;
                }
            }
            if sent == CONNS && !stopped {
                // SAFETY: live ctx; stopped right after the last completion.
                ok_or_in_progress(unsafe { doca_ctx_stop(a.ctx()) });
                stopped = true;
            }
        }
        got.sort();
        assert_eq!(got, (0..CONNS as u64).map(|i| round * 10 + i).collect::<Vec<_>>(), "round {round}");
        assert!(run_until(&[a.pe], T, || sent + count_of(1) >= CONNS), "round {round}: sends never completed");
        take_recs();
        a.destroy();
        b.destroy();
    }
}

/// DOCA opens a remote-net export only as a `doca_sync_event_remote_net` (a target of RDMA
/// remote-net tasks): `doca_sync_event_create_from_export` refuses it.
#[test]
fn a_remote_net_sync_event_export_is_not_opened_as_an_event() {
    let dev = open_dev();
    let mut ev = ptr::null_mut();
    // SAFETY: a standalone event with a remote-net publisher; blob copied at once; destroyed.
    unsafe {
        ok(doca_sync_event_create(&mut ev));
        ok(doca_sync_event_add_publisher_location_remote_net(ev));
        ok(doca_sync_event_add_subscriber_location_cpu(ev, dev));
        ok(doca_sync_event_start(ev));
        let (mut p, mut n) = (ptr::null(), 0usize);
        let r = doca_sync_event_export_to_remote_net(ev, &mut p, &mut n);
        if r == DOCA_SUCCESS {
            let mut other = ptr::null_mut();
            let r = doca_sync_event_create_from_export(dev, p, n, &mut other);
            assert_ne!(r, DOCA_SUCCESS, "a remote-net export was opened as an event");
            println!("create_from_export(remote-net blob): {}", name(r));
        } else {
            println!("export_to_remote_net is not supported here: {}", name(r));
        }
        ok(doca_sync_event_stop(ev));
        ok(doca_sync_event_destroy(ev));
        ok(doca_dev_close(dev));
    }
}

// DOCA DMA and DOCA Comch (in their own file).
#[path = "conformance/dma_comch.rs"]
mod dma_comch;
