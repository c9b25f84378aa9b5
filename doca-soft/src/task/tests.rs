//! Unit tests of `task.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;
use crate::ctx::{doca_ctx_set_user_data, doca_ctx_start, doca_ctx_stop, doca_task_get_ctx, FLUSH_STATUS};
use crate::pe::{doca_pe_connect_ctx, doca_pe_progress};
use crate::testkit::*;

/// A started dummy ctx on a new PE with a pool of `n` tasks.
fn setup(n: u32) -> (*mut crate::pe::doca_pe, *mut Dummy) {
    reset();
    let pe = new_pe();
    let d = Dummy::create(false);
    Dummy::set_conf(d, n).unwrap();
    // SAFETY: live PE and ctx.
    unsafe {
        assert_eq!(doca_pe_connect_ctx(pe, Dummy::ctx(d)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(Dummy::ctx(d)), DOCA_SUCCESS);
    }
    (pe, d)
}

fn teardown(pe: *mut crate::pe::doca_pe, d: *mut Dummy) {
    // SAFETY: live ctx.
    let r = unsafe { doca_ctx_stop(Dummy::ctx(d)) };
    assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_BAD_STATE, "{r:?}");
    drain(pe);
    Dummy::destroy(d).unwrap();
    destroy_pe(pe);
}

#[test]
fn pool_exhaustion_and_reuse() {
    let (pe, d) = setup(2);
    let a = Dummy::alloc(d, 1).unwrap();
    let b = Dummy::alloc(d, 2).unwrap();
    assert_ne!(a, b);
    assert_eq!(Dummy::alloc(d, 3), Err(DOCA_ERROR_NO_MEMORY));
    // SAFETY: `a` is an allocated task we own.
    unsafe { doca_task_free(a) };
    let c = Dummy::alloc(d, 4).unwrap();
    assert_eq!(c, a, "the freed slot is reused (stable addresses)");
    assert_eq!(Dummy::alloc(d, 5), Err(DOCA_ERROR_NO_MEMORY));
    // SAFETY: owned tasks.
    unsafe {
        doca_task_free(b);
        doca_task_free(c);
    }
    teardown(pe, d);
}

#[test]
fn configuration_rules() {
    reset();
    let pe = new_pe();
    let d = Dummy::create(false);
    // SAFETY: `d` is live.
    let ctx = unsafe { &*Dummy::ctx(d) };
    assert_eq!(Dummy::set_conf(d, 0), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(set_conf::<crate::testkit::DummyTask>(ctx, None, Some(rec_err), 4), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(set_conf::<crate::testkit::DummyTask>(ctx, Some(rec_ok), None, 4), Err(DOCA_ERROR_INVALID_VALUE));
    // Not configured, not started: BAD_STATE comes first (ctx not running).
    assert_eq!(Dummy::alloc(d, 0), Err(DOCA_ERROR_BAD_STATE));
    // SAFETY: live PE and ctx.
    unsafe {
        assert_eq!(doca_pe_connect_ctx(pe, Dummy::ctx(d)), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(Dummy::ctx(d)), DOCA_SUCCESS);
    }
    // Running, kind never configured: NOT_SUPPORTED.
    assert_eq!(Dummy::alloc(d, 0), Err(DOCA_ERROR_NOT_SUPPORTED));
    // set_conf only while IDLE.
    assert_eq!(Dummy::set_conf(d, 4), Err(DOCA_ERROR_NOT_PERMITTED));
    teardown(pe, d);
}

#[test]
fn submit_rules_and_bad_frees() {
    let (pe, d) = setup(4);
    Dummy::get(d).hold.set(true);
    let t = Dummy::alloc(d, 7).unwrap();
    // SAFETY: `t` is a live task of this test; every call below is on it.
    unsafe {
        assert_eq!(doca_task_submit(t), DOCA_SUCCESS);
        assert_eq!(doca_task_submit(t), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_task_try_submit(t), DOCA_ERROR_BAD_STATE);
        // Freeing an in-flight task is ignored.
        doca_task_free(t);
        assert_eq!((*t).state(), TaskState::Submitted);
    }
    Dummy::release_all(d);
    // Completed but not delivered: still owned by the library.
    // SAFETY: live task.
    unsafe { doca_task_free(t) };
    assert_eq!(drain(pe), 1);
    let done = take_done();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].ud, 7);
    // SAFETY: live task, owned by us again.
    unsafe {
        assert_eq!((*t).state(), TaskState::Allocated);
        doca_task_free(t);
        // Double free ignored; submit of a free task refused.
        doca_task_free(t);
        assert_eq!(doca_task_submit(t), DOCA_ERROR_INVALID_VALUE);
    }
    teardown(pe, d);
}

#[test]
fn callbacks_run_only_inside_progress_with_user_data() {
    let (pe, d) = setup(4);
    // SAFETY: live ctx.
    unsafe { doca_ctx_set_user_data(Dummy::ctx(d), doca_data::from_u64(0xC7)) };
    let ok = Dummy::alloc(d, 1).unwrap();
    let bad = Dummy::alloc(d, 2).unwrap();
    set_fail(bad, true);
    // SAFETY: live tasks.
    unsafe {
        doca_task_set_user_data(ok, doca_data::from_u64(11));
        assert_eq!(doca_task_get_user_data(ok).as_u64(), 11);
        assert_eq!(doca_task_get_ctx(ok), Dummy::ctx(d));
        assert_eq!(doca_task_submit(ok), DOCA_SUCCESS);
        assert_eq!(doca_task_try_submit(bad), DOCA_SUCCESS);
    }
    assert!(take_done().is_empty(), "no callback inside submit");
    THEN.with(|t| t.set(Then::Free));
    assert_eq!(drain(pe), 2);
    let done = take_done();
    assert_eq!(done.len(), 2);
    assert_eq!((done[0].ud, done[0].ok, done[0].status, done[0].ctx_ud), (11, true, DOCA_SUCCESS, 0xC7));
    assert_eq!((done[1].ud, done[1].ok, done[1].status), (2, false, DOCA_ERROR_IO_FAILED));
    teardown(pe, d);
}

#[test]
fn callback_can_submit_a_new_task_but_not_progress() {
    let (pe, d) = setup(2);
    PE_FOR_NESTED.with(|p| p.set(pe));
    THEN.with(|t| t.set(Then::SubmitAnotherThenFree));
    let t = Dummy::alloc(d, 1).unwrap();
    // SAFETY: live task.
    assert_eq!(unsafe { doca_task_submit(t) }, DOCA_SUCCESS);
    assert_eq!(drain(pe), 2);
    let done = take_done();
    assert_eq!(done.iter().map(|x| x.ud).collect::<Vec<_>>(), vec![1, 1001]);
    assert_eq!(NESTED_PROGRESS.with(|n| n.get()), Some(0), "nested progress does nothing");
    // Both freed: the pool is full again.
    let a = Dummy::alloc(d, 0).unwrap();
    let b = Dummy::alloc(d, 0).unwrap();
    // SAFETY: owned tasks.
    unsafe {
        doca_task_free(a);
        doca_task_free(b);
    }
    teardown(pe, d);
}

#[test]
fn stale_pointer_after_reconfiguration_is_refused() {
    let (pe, d) = setup(2);
    let t = Dummy::alloc(d, 1).unwrap();
    // SAFETY: owned task; live ctx.
    unsafe {
        doca_task_free(t);
        assert_eq!(doca_ctx_stop(Dummy::ctx(d)), DOCA_SUCCESS);
    }
    Dummy::set_conf(d, 3).unwrap();
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_start(Dummy::ctx(d)) }, DOCA_SUCCESS);
    // The old slot memory is retired but still allocated: a stale submit is refused.
    // SAFETY: the retired pool is kept alive by the ctx.
    assert_eq!(unsafe { doca_task_submit(t) }, DOCA_ERROR_INVALID_VALUE);
    let n: Vec<_> = (0..3).map(|i| Dummy::alloc(d, i).unwrap()).collect();
    assert_eq!(Dummy::alloc(d, 9), Err(DOCA_ERROR_NO_MEMORY));
    for t in n {
        // SAFETY: owned tasks.
        unsafe { doca_task_free(t) };
    }
    teardown(pe, d);
}

#[test]
fn submit_ex_holds_unflushed_tasks_until_a_flush_in_submission_order() {
    let (pe, d) = setup(8);
    Dummy::get(d).hold.set(true);
    let t: Vec<_> = (1..=8).map(|i| Dummy::alloc(d, i).unwrap()).collect();
    let ctx = Dummy::ctx(d);
    // SAFETY: live tasks and ctx of this test.
    unsafe {
        // Unknown flag bits: refused, the task stays with the caller.
        assert_eq!(doca_task_submit_ex(t[0], 1 << 5), DOCA_ERROR_INVALID_VALUE);
        assert_eq!((*t[0]).state(), TaskState::Allocated);
        assert_eq!(doca_task_submit_ex(t[0], DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(doca_task_submit_ex(t[1], DOCA_TASK_SUBMIT_FLAG_OPTIMIZE_REPORTS), DOCA_SUCCESS);
        // Accepted (owned by the library, in flight) but not handed to the kind yet.
        assert_eq!((*t[0]).state(), TaskState::Submitted);
        assert!(Dummy::pending_uds(d).is_empty());
        assert_eq!((*ctx).inflight_tasks(), 2);
        crate::ctx::doca_ctx_flush_tasks(ctx);
        assert_eq!(Dummy::pending_uds(d), [1, 2]);
        // A task the library owns cannot be submitted again.
        assert_eq!(doca_task_submit_ex(t[0], DOCA_TASK_SUBMIT_FLAG_FLUSH), DOCA_ERROR_BAD_STATE);
        // A flushed submit pushes the held ones first.
        assert_eq!(doca_task_submit_ex(t[2], DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(doca_task_submit_ex(t[3], DOCA_TASK_SUBMIT_FLAG_FLUSH), DOCA_SUCCESS);
        assert_eq!(Dummy::pending_uds(d), [1, 2, 3, 4]);
        // Progress pushes them too: unflushed tasks always complete.
        assert_eq!(doca_task_submit_ex(t[4], DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(doca_pe_progress(pe), 1);
        assert_eq!(Dummy::pending_uds(d), [1, 2, 3, 4, 5]);
        // doca_task_submit is a flushed submit: a held task goes first.
        assert_eq!(doca_task_submit_ex(t[6], DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(doca_task_submit(t[7]), DOCA_SUCCESS);
        assert_eq!(Dummy::pending_uds(d), [1, 2, 3, 4, 5, 7, 8]);
    }
    Dummy::release_all(d);
    THEN.with(|x| x.set(Then::Free));
    assert_eq!(drain(pe), 7);
    assert_eq!(take_done().iter().map(|x| (x.ud, x.ok)).collect::<Vec<_>>(), [1, 2, 3, 4, 5, 7, 8].map(|u| (u, true)));
    // An armed PE wakes up for a held task.
    Dummy::get(d).hold.set(false);
    // SAFETY: live PE and task.
    unsafe {
        assert_eq!(crate::pe::doca_pe_request_notification(pe), DOCA_SUCCESS);
        assert!(!readable(pe_fd(pe), 0));
        assert_eq!(doca_task_submit_ex(t[5], DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert!(readable(pe_fd(pe), 1000), "a held task makes an armed PE's handle readable");
        assert_eq!(crate::pe::doca_pe_clear_notification(pe, pe_fd(pe)), DOCA_SUCCESS);
    }
    assert_eq!(drain(pe), 1);
    assert_eq!(take_done().iter().map(|x| x.ud).collect::<Vec<_>>(), [6]);
    teardown(pe, d);
}

/// What Comch and RDMA CM use to queue their event tasks (`flush_events`): an internal event
/// is not a user submit, so it must not ring the user's deferred doorbell (push the ctx's
/// held tasks). Through `task::submit` (a flushed submit) the held task went first.
#[test]
fn an_internal_event_submit_leaves_the_users_held_tasks_held() {
    let (pe, d) = setup(4);
    Dummy::get(d).hold.set(true);
    let user = Dummy::alloc(d, 1).unwrap();
    let event = Dummy::alloc(d, 2).unwrap();
    // SAFETY: live tasks and ctx of this test.
    unsafe {
        assert_eq!(doca_task_submit_ex(user, DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(submit_internal(&*event.cast_const()), Ok(()));
        assert_eq!(Dummy::pending_uds(d), [2], "the event reached its kind, the held user task did not");
        assert_eq!((*user).state(), TaskState::Submitted);
        crate::ctx::doca_ctx_flush_tasks(Dummy::ctx(d));
        assert_eq!(Dummy::pending_uds(d), [2, 1]);
    }
    Dummy::release_all(d);
    THEN.with(|x| x.set(Then::Free));
    assert_eq!(drain(pe), 2);
    teardown(pe, d);
}

#[test]
fn a_held_task_refused_at_flush_fails_through_its_callback_and_stop_flushes_held_tasks() {
    let (pe, d) = setup(4);
    let bad = Dummy::alloc(d, 1).unwrap();
    let held = Dummy::alloc(d, 2).unwrap();
    set_fail(bad, true);
    THEN.with(|x| x.set(Then::Free));
    // SAFETY: live tasks and ctx.
    unsafe {
        assert_eq!(doca_task_submit_ex(bad, DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(drain(pe), 1);
        assert_eq!(take_done().iter().map(|x| (x.ud, x.status)).collect::<Vec<_>>(), [(1, DOCA_ERROR_IO_FAILED)]);
        // Held, then the ctx stops: the task comes back through its error callback.
        assert_eq!(doca_task_submit_ex(held, DOCA_TASK_SUBMIT_FLAG_NONE), DOCA_SUCCESS);
        assert_eq!(doca_ctx_stop(Dummy::ctx(d)), DOCA_ERROR_IN_PROGRESS);
    }
    drain(pe);
    assert_eq!(take_done().iter().map(|x| (x.ud, x.status)).collect::<Vec<_>>(), [(2, FLUSH_STATUS)]);
    assert!(Dummy::pending_uds(d).is_empty(), "a stopped ctx never hands a held task to its kind");
    teardown(pe, d);
}

#[test]
fn completion_vectors_and_datapaths() {
    reset();
    let pe = new_pe();
    let d = Dummy::create(false);
    let ctx = Dummy::ctx(d);
    let dev = crate::testkit::dev::test_open_default();
    let mut n = 0u32;
    // SAFETY: live objects; foreign GPU/DPA pointers are never dereferenced.
    unsafe {
        let info = crate::dev::doca_dev_as_devinfo(dev);
        assert_eq!(crate::ctx::doca_ctx_cap_get_num_completion_vectors(info, &mut n), DOCA_SUCCESS);
        assert_eq!(n, 1);
        assert_eq!(crate::ctx::doca_ctx_cap_get_num_completion_vectors(ptr::null(), &mut n), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(crate::ctx::doca_ctx_set_completion_vector(ctx, 0), DOCA_SUCCESS);
        assert_eq!(crate::ctx::doca_ctx_set_completion_vector(ctx, 1), DOCA_ERROR_INVALID_VALUE);
        let gpu = 0x1000 as *mut crate::ctx::doca_gpu;
        let dpa = 0x1000 as *mut crate::ctx::doca_dpa;
        assert_eq!(crate::ctx::doca_ctx_set_datapath_on_gpu(ctx, gpu), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(crate::ctx::doca_ctx_set_datapath_on_dpa(ctx, dpa), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(crate::ctx::doca_ctx_set_datapath_on_gpu(ctx, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_pe_connect_ctx(pe, ctx), DOCA_SUCCESS);
        assert_eq!(doca_ctx_start(ctx), DOCA_SUCCESS);
        assert_eq!(crate::ctx::doca_ctx_set_completion_vector(ctx, 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(crate::ctx::doca_ctx_set_datapath_on_dpa(ctx, dpa), DOCA_ERROR_BAD_STATE);
        assert_eq!(crate::dev::doca_dev_close(dev), DOCA_SUCCESS);
    }
    teardown(pe, d);
}
