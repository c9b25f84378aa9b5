//! Unit tests of `ctx.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;
use crate::pe::{doca_pe_connect_ctx, doca_pe_destroy, doca_pe_get_num_inflight_tasks};
use crate::task::{doca_task_free, doca_task_submit};
use crate::testkit::*;

fn state(ctx: *mut doca_ctx) -> doca_ctx_states {
    let mut s = 99;
    // SAFETY: live ctx, valid out-pointer.
    assert_eq!(unsafe { doca_ctx_get_state(ctx, &mut s) }, DOCA_SUCCESS);
    s
}

fn inflight(ctx: *mut doca_ctx) -> usize {
    let mut n = 99;
    // SAFETY: live ctx, valid out-pointer.
    let r = unsafe { doca_ctx_get_num_inflight_tasks(ctx, &mut n) };
    assert_eq!(r, DOCA_SUCCESS);
    n
}

#[test]
fn sync_start_stop_restart() {
    reset();
    let pe = new_pe();
    let d = Dummy::create(false);
    let c = Dummy::ctx(d);
    // SAFETY: live objects throughout.
    unsafe {
        assert_eq!(doca_ctx_set_state_changed_cb(c, Some(rec_state)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(c), DOCA_ERROR_NOT_CONNECTED);
        assert_eq!(doca_ctx_stop(c), DOCA_SUCCESS, "stopping an IDLE ctx is a no-op");
        assert_eq!(doca_pe_connect_ctx(pe, c), DOCA_SUCCESS);
        assert_eq!(doca_pe_connect_ctx(pe, c), DOCA_ERROR_NOT_PERMITTED);
        let pe2 = new_pe();
        assert_eq!(doca_pe_connect_ctx(pe2, c), DOCA_ERROR_NOT_PERMITTED);
        destroy_pe(pe2);
        for round in 0..2 {
            assert_eq!(doca_ctx_start(c), DOCA_SUCCESS, "round {round}");
            assert_eq!(state(c), DOCA_CTX_STATE_RUNNING);
            assert_eq!(take_states(), vec![(DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_RUNNING)]);
            assert_eq!(doca_ctx_start(c), DOCA_ERROR_BAD_STATE);
            assert_eq!(Dummy::destroy(d), Err(DOCA_ERROR_BAD_STATE));
            assert_eq!(doca_pe_destroy(pe), DOCA_ERROR_IN_USE);
            assert_eq!(doca_ctx_stop(c), DOCA_SUCCESS);
            assert_eq!(state(c), DOCA_CTX_STATE_IDLE);
            assert_eq!(take_states(), vec![(DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_IDLE)]);
            assert_eq!(drain(pe), 0);
        }
    }
    // PE destroy waits for its ctxs to be destroyed.
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_destroy(pe) }, DOCA_ERROR_IN_USE);
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn async_start_reports_from_progress() {
    reset();
    let pe = new_pe();
    let d = Dummy::create(true);
    let c = Dummy::ctx(d);
    // SAFETY: live objects throughout.
    unsafe {
        doca_ctx_set_state_changed_cb(c, Some(rec_state));
        assert_eq!(doca_pe_connect_ctx(pe, c), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(c), DOCA_ERROR_IN_PROGRESS);
    }
    assert_eq!(state(c), DOCA_CTX_STATE_STARTING);
    assert_eq!(take_states(), vec![(DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_STARTING)]);
    assert_eq!(Dummy::alloc(d, 0), Err(DOCA_ERROR_BAD_STATE));
    assert_eq!(drain(pe), 0, "not ready: nothing to do");
    Dummy::get(d).ready.set(true);
    assert!(drain(pe) >= 1);
    assert_eq!(state(c), DOCA_CTX_STATE_RUNNING);
    assert_eq!(take_states(), vec![(DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_RUNNING)]);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(c) }, DOCA_SUCCESS);
    assert_eq!(take_states(), vec![(DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_IDLE)]);

    // A failed async start goes back to IDLE through progress.
    Dummy::get(d).fail_start.set(true);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(c) }, DOCA_ERROR_IN_PROGRESS);
    Dummy::get(d).ready.set(true);
    drain(pe);
    assert_eq!(state(c), DOCA_CTX_STATE_IDLE);
    assert_eq!(
        take_states(),
        vec![(DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_STARTING), (DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_IDLE)]
    );
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn stop_flushes_in_flight_tasks_and_waits_for_frees() {
    reset();
    let pe = new_pe();
    let d = Dummy::create(false);
    let c = Dummy::ctx(d);
    Dummy::set_conf(d, 4).unwrap();
    // SAFETY: live objects.
    unsafe {
        doca_ctx_set_state_changed_cb(c, Some(rec_state));
        doca_pe_connect_ctx(pe, c);
        assert_eq!(doca_ctx_start(c), DOCA_SUCCESS);
    }
    take_states();
    Dummy::get(d).hold.set(true);
    let a = Dummy::alloc(d, 1).unwrap();
    let b = Dummy::alloc(d, 2).unwrap();
    let idle = Dummy::alloc(d, 3).unwrap(); // allocated, never submitted
                                            // SAFETY: live tasks.
    unsafe {
        assert_eq!(doca_task_submit(a), DOCA_SUCCESS);
        assert_eq!(doca_task_submit(b), DOCA_SUCCESS);
    }
    assert_eq!(inflight(c), 2);
    let mut n = 0;
    // SAFETY: live PE.
    let r = unsafe { doca_pe_get_num_inflight_tasks(pe, &mut n) };
    assert_eq!(r, DOCA_SUCCESS);
    assert_eq!(n, 2);

    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(c) }, DOCA_ERROR_IN_PROGRESS);
    assert_eq!(state(c), DOCA_CTX_STATE_STOPPING);
    assert_eq!(take_states(), vec![(DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING)]);
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(c) }, DOCA_ERROR_IN_PROGRESS);
    assert_eq!(Dummy::alloc(d, 0), Err(DOCA_ERROR_BAD_STATE));
    assert!(take_done().is_empty(), "flush callbacks run from progress");

    THEN.with(|t| t.set(Then::Free));
    assert_eq!(drain(pe), 2);
    let done = take_done();
    assert_eq!(done.len(), 2);
    for (x, ud) in done.iter().zip([1, 2]) {
        assert_eq!((x.ud, x.ok, x.status), (ud, false, FLUSH_STATUS));
    }
    assert_eq!(inflight(c), 0);
    // One task is still allocated: the ctx cannot reach IDLE.
    assert_eq!(state(c), DOCA_CTX_STATE_STOPPING);
    assert_eq!(Dummy::destroy(d), Err(DOCA_ERROR_BAD_STATE));
    // SAFETY: owned task.
    unsafe { doca_task_free(idle) };
    assert_eq!(state(c), DOCA_CTX_STATE_STOPPING, "IDLE is reported by progress");
    assert_eq!(drain(pe), 1);
    assert_eq!(state(c), DOCA_CTX_STATE_IDLE);
    assert_eq!(take_states(), vec![(DOCA_CTX_STATE_STOPPING, DOCA_CTX_STATE_IDLE)]);
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn user_data_round_trip() {
    let d = Dummy::create(false);
    let c = Dummy::ctx(d);
    let mut ud = doca_data::from_u64(0);
    // SAFETY: live ctx, valid out-pointers.
    unsafe {
        assert_eq!(doca_ctx_set_user_data(c, doca_data::from_u64(42)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_get_user_data(c, &mut ud), DOCA_SUCCESS);
    }
    assert_eq!(ud.as_u64(), 42);
    Dummy::destroy(d).unwrap();
}
