//! Sync event tests: standalone and ctx modes, notification exactness, flush on stop,
//! export/import (including hostile blobs), a cross-process wait/notify, and the NULL table
//! for every entry point of pe, ctx, task and sync event.

use core::ptr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::tasks::*;
use super::*;
use crate::ctx::*;
use crate::dev::doca_dev_close;
use crate::pe::*;
use crate::task::*;
use crate::testkit::dev::test_open_default;
use crate::testkit::{self, drain, new_pe, pe_fd, readable, take_done, Then, THEN};

// ---- helpers ----

macro_rules! recorders {
    ($($ok:ident, $err:ident: $ty:ty;)*) => {$(
        unsafe extern "C" fn $ok(t: *mut $ty, ud: doca_data, cud: doca_data) {
            // SAFETY: called by the PE with a live task.
            unsafe { testkit::record(t.cast(), true, ud, cud) }
        }
        unsafe extern "C" fn $err(t: *mut $ty, ud: doca_data, cud: doca_data) {
            // SAFETY: called by the PE with a live task.
            unsafe { testkit::record(t.cast(), false, ud, cud) }
        }
    )*};
}

recorders! {
    get_ok, get_err: doca_sync_event_task_get;
    set_ok, set_err: doca_sync_event_task_notify_set;
    add_ok, add_err: doca_sync_event_task_notify_add;
    eq_ok, eq_err: doca_sync_event_task_wait_eq;
    neq_ok, neq_err: doca_sync_event_task_wait_neq;
}

fn ok(e: doca_error_t) {
    assert_eq!(e, DOCA_SUCCESS, "{:?}", crate::types::DOCA_ERROR_NAMES.get(e.0 as usize));
}

fn create() -> *mut doca_sync_event {
    let mut e = ptr::null_mut();
    // SAFETY: valid out-pointer.
    ok(unsafe { doca_sync_event_create(&mut e) });
    e
}

fn standalone() -> *mut doca_sync_event {
    let e = create();
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_start(e) });
    e
}

fn destroy(e: *mut doca_sync_event) {
    // SAFETY: live event.
    let r = unsafe { doca_sync_event_stop(e) };
    assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_BAD_STATE);
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_destroy(e) });
}

fn get(e: *mut doca_sync_event) -> u64 {
    let mut v = 0;
    // SAFETY: live event, valid out-pointer.
    ok(unsafe { doca_sync_event_get(e, &mut v) });
    v
}

fn set(e: *mut doca_sync_event, v: u64) {
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_update_set(e, v) });
}

fn export_pci(e: *mut doca_sync_event, dev: *mut doca_dev) -> Vec<u8> {
    let (mut d, mut n) = (ptr::null(), 0usize);
    // SAFETY: live objects, valid out-pointers.
    ok(unsafe { doca_sync_event_export_to_remote_pci(e, dev, &mut d, &mut n) });
    // SAFETY: the blob is owned by the event and valid while it lives.
    unsafe { core::slice::from_raw_parts(d, n) }.to_vec()
}

fn import(dev: *mut doca_dev, blob: &[u8]) -> Result<*mut doca_sync_event, doca_error_t> {
    let mut e = ptr::null_mut();
    // SAFETY: valid pointers and lengths.
    let r = unsafe { doca_sync_event_create_from_export(dev, blob.as_ptr(), blob.len(), &mut e) };
    if r == DOCA_SUCCESS {
        Ok(e)
    } else {
        assert!(e.is_null());
        Err(r)
    }
}

fn shared_of<'a>(e: *mut doca_sync_event) -> &'a SyncShared {
    // SAFETY: live, started event.
    unsafe { &*e }.backing.get().unwrap().shared()
}

/// A ctx-mode event connected to `pe`, started, with every task kind configured (`n` each).
fn ctx_event(pe: *mut doca_pe, e: *mut doca_sync_event, n: u32) {
    // SAFETY: live objects; callbacks are valid functions.
    unsafe {
        ok(doca_sync_event_task_get_set_conf(e, Some(get_ok), Some(get_err), n));
        ok(doca_sync_event_task_notify_set_set_conf(e, Some(set_ok), Some(set_err), n));
        ok(doca_sync_event_task_notify_add_set_conf(e, Some(add_ok), Some(add_err), n));
        ok(doca_sync_event_task_wait_eq_set_conf(e, Some(eq_ok), Some(eq_err), n));
        ok(doca_sync_event_task_wait_neq_set_conf(e, Some(neq_ok), Some(neq_err), n));
        let c = doca_sync_event_as_ctx(e);
        assert!(!c.is_null());
        ok(doca_pe_connect_ctx(pe, c));
        ok(doca_ctx_start(c));
    }
}

fn wait_eq_task(e: *mut doca_sync_event, v: u64, mask: u64, ud: u64) -> *mut doca_task {
    let mut t = ptr::null_mut();
    // SAFETY: live event, valid out-pointer.
    ok(unsafe { doca_sync_event_task_wait_eq_alloc_init(e, v, mask, doca_data::from_u64(ud), &mut t) });
    // SAFETY: live task.
    unsafe { doca_sync_event_task_wait_eq_as_doca_task(t) }
}

fn stop_ctx_and_destroy(pe: *mut doca_pe, e: *mut doca_sync_event) {
    THEN.with(|t| t.set(Then::Free));
    // SAFETY: live event.
    let c = unsafe { doca_sync_event_as_ctx(e) };
    // SAFETY: live ctx.
    let r = unsafe { doca_ctx_stop(c) };
    assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS || r == DOCA_ERROR_BAD_STATE);
    drain(pe);
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_destroy(e) });
}

fn arm(pe: *mut doca_pe) {
    // SAFETY: live PE.
    ok(unsafe { doca_pe_request_notification(pe) });
}

fn clear(pe: *mut doca_pe) {
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(pe, 0) });
}

/// The DOCA event loop until `done()` or `timeout`: arm, drain, poll the handle, clear, drain.
fn event_loop_until(pe: *mut doca_pe, timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let fd = pe_fd(pe);
    let end = Instant::now() + timeout;
    loop {
        drain(pe);
        if done() {
            return true;
        }
        arm(pe);
        drain(pe);
        if done() {
            clear(pe);
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            clear(pe);
            return false;
        }
        readable(fd, left.as_millis().min(i32::MAX as u128) as i32);
        clear(pe);
    }
}

// ---- standalone ----

#[test]
fn standalone_synchronous_path() {
    let e = create();
    let mut v = 0;
    // SAFETY: live event; every call below uses it and valid out-pointers.
    unsafe {
        assert_eq!(doca_sync_event_get(e, &mut v), DOCA_ERROR_BAD_STATE, "not started");
        assert_eq!(doca_sync_event_update_set(e, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_sync_event_stop(e), DOCA_ERROR_BAD_STATE);
        ok(doca_sync_event_start(e));
        assert_eq!(doca_sync_event_start(e), DOCA_ERROR_BAD_STATE);
        assert_eq!(get(e), 0);
        set(e, 5);
        let mut old = 0;
        ok(doca_sync_event_update_add(e, 3, &mut old));
        assert_eq!((old, get(e)), (5, 8));
        // Already satisfied: return at once.
        ok(doca_sync_event_wait_eq(e, 8, u64::MAX));
        ok(doca_sync_event_wait_neq(e, 7, u64::MAX));
        ok(doca_sync_event_wait_gt(e, 7, u64::MAX));
        ok(doca_sync_event_wait_gt_yield(e, 7, u64::MAX));
        // Masks apply to the event's value.
        set(e, 0x1234_5678);
        ok(doca_sync_event_wait_eq(e, 0x78, 0xFF));
        ok(doca_sync_event_wait_gt(e, 0x1233, 0xFFFF));
        assert_eq!(doca_sync_event_destroy(e), DOCA_ERROR_BAD_STATE, "stop first");
        ok(doca_sync_event_stop(e));
        ok(doca_sync_event_destroy(e));
    }
}

#[test]
fn modes_are_exclusive() {
    let pe = new_pe();
    // Standalone first: its ctx can no longer be connected or started.
    let a = standalone();
    // SAFETY: live objects.
    unsafe {
        let c = doca_sync_event_as_ctx(a);
        assert!(!c.is_null());
        assert_eq!(doca_pe_connect_ctx(pe, c), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_ctx_start(c), DOCA_ERROR_NOT_CONNECTED);
    }
    destroy(a);
    // Even after a standalone stop.
    let b = standalone();
    // SAFETY: live objects.
    unsafe {
        ok(doca_sync_event_stop(b));
        assert_eq!(doca_pe_connect_ctx(pe, doca_sync_event_as_ctx(b)), DOCA_ERROR_BAD_STATE);
    }
    destroy(b);
    // Ctx first: no standalone start.
    let c = create();
    // SAFETY: live objects.
    unsafe {
        let ctx = doca_sync_event_as_ctx(c);
        assert_eq!(doca_sync_event_start(c), DOCA_ERROR_BAD_STATE);
        ok(doca_pe_connect_ctx(pe, ctx));
        ok(doca_ctx_start(ctx));
        assert_eq!(doca_sync_event_start(c), DOCA_ERROR_BAD_STATE);
        // The synchronous calls work on a running ctx-mode event.
        set(c, 4);
        assert_eq!(get(c), 4);
        assert_eq!(doca_sync_event_destroy(c), DOCA_ERROR_BAD_STATE, "running ctx");
        ok(doca_ctx_stop(ctx));
        assert_eq!(doca_sync_event_get(c, &mut 0), DOCA_ERROR_BAD_STATE, "stopped");
        ok(doca_sync_event_destroy(c));
    }
    testkit::destroy_pe(pe);
}

#[test]
fn configuration_rules() {
    // A device of its own: the IN_USE check below needs the last open.
    let dev = crate::testkit::dev::test_open_private("se-config");
    let e = create();
    let mut x = 0u64;
    // SAFETY: live objects and valid pointers throughout.
    unsafe {
        ok(doca_sync_event_add_publisher_location_cpu(e, dev));
        ok(doca_sync_event_add_subscriber_location_remote_pci(e));
        ok(doca_sync_event_add_subscriber_location_cpu(e, dev));
        ok(doca_sync_event_add_publisher_location_remote_pci(e));
        assert_eq!(doca_dev_close(dev), DOCA_ERROR_IN_USE, "the event references the device");
        let (mut d, mut n) = (ptr::null(), 0);
        assert_eq!(doca_sync_event_export_to_remote_pci(e, dev, &mut d, &mut n), DOCA_ERROR_BAD_STATE, "not started");
        let mis = (ptr::addr_of_mut!(x) as *mut u8).add(1).cast::<u64>();
        assert_eq!(doca_sync_event_set_addr(e, mis), DOCA_ERROR_INVALID_VALUE);
        ok(doca_sync_event_start(e));
        assert_eq!(doca_sync_event_add_publisher_location_remote_net(e), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_sync_event_set_addr(e, &mut x), DOCA_ERROR_BAD_STATE);
        // A network export needs a remote-net publisher.
        assert_eq!(doca_sync_event_export_to_remote_net(e, &mut d, &mut n), DOCA_ERROR_NOT_PERMITTED);
        let blob = export_pci(e, dev);
        // The same blob (owned by the event) on every call.
        let mut d2 = ptr::null();
        ok(doca_sync_event_export_to_remote_pci(e, dev, &mut d2, &mut n));
        assert_eq!(d2, export_pci_ptr(e, dev));
        // Imported handles cannot be configured.
        let i = import(dev, &blob).unwrap();
        assert_eq!(doca_sync_event_add_publisher_location_remote_pci(i), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(doca_sync_event_set_addr(i, &mut x), DOCA_ERROR_NOT_PERMITTED);
        destroy(i);
        destroy(e);
        ok(doca_dev_close(dev));
    }
    // A network export with a remote-net publisher.
    let n = create();
    // SAFETY: live event.
    unsafe {
        ok(doca_sync_event_add_publisher_location_remote_net(n));
        ok(doca_sync_event_start(n));
        let (mut d, mut len) = (ptr::null(), 0);
        ok(doca_sync_event_export_to_remote_net(n, &mut d, &mut len));
        assert!(len > 0);
        // The PCI import path refuses a network export (DOCA's paths do not mix).
        let dev = test_open_default();
        let mut i = ptr::null_mut();
        assert_eq!(doca_sync_event_create_from_export(dev, d, len, &mut i), DOCA_ERROR_NOT_SUPPORTED);
        assert!(i.is_null());
        ok(doca_dev_close(dev));
    }
    destroy(n);
}

fn export_pci_ptr(e: *mut doca_sync_event, dev: *mut doca_dev) -> *const u8 {
    let (mut d, mut n) = (ptr::null(), 0usize);
    // SAFETY: live objects, valid out-pointers.
    ok(unsafe { doca_sync_event_export_to_remote_pci(e, dev, &mut d, &mut n) });
    d
}

#[test]
fn user_address_counter() {
    let dev = test_open_default();
    let mut mem = Box::new(41u64);
    let addr: *mut u64 = &mut *mem;
    let a = create();
    let b = create();
    // SAFETY: `mem` outlives both events; live objects.
    unsafe {
        ok(doca_sync_event_set_addr(a, addr));
        ok(doca_sync_event_set_addr(b, addr));
        ok(doca_sync_event_start(a));
        ok(doca_sync_event_start(b));
    }
    assert_eq!(get(a), 41);
    set(a, 42);
    // SAFETY: the counter is our memory; read through a volatile load.
    assert_eq!(unsafe { addr.read_volatile() }, 42);
    assert_eq!(get(b), 42);
    let (mut d, mut n) = (ptr::null(), 0);
    // SAFETY: live objects.
    let r = unsafe { doca_sync_event_export_to_remote_pci(a, dev, &mut d, &mut n) };
    assert_eq!(r, DOCA_ERROR_NOT_SUPPORTED);
    // Handles on the same memory wake each other: a blocked waiter on `b`, update on `a`.
    let (tx, rx) = std::sync::mpsc::channel();
    let bp = b as usize;
    std::thread::spawn(move || {
        // SAFETY: the data path of a started handle may be used from another thread.
        let r = unsafe { doca_sync_event_wait_eq(bp as *mut doca_sync_event, 50, u64::MAX) };
        tx.send(r).unwrap();
    });
    std::thread::sleep(Duration::from_millis(20));
    set(a, 50);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(DOCA_SUCCESS));
    destroy(a);
    destroy(b);
    drop(mem);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

#[test]
fn blocking_waits_are_woken_by_another_thread() {
    let dev = test_open_default();
    let a = standalone();
    let b = import(dev, &export_pci(a, dev)).unwrap();
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_start(b) });
    type WaitFn = unsafe extern "C" fn(*mut doca_sync_event, u64, u64) -> doca_error_t;
    let waits: [(WaitFn, u64, u64); 6] = [
        (doca_sync_event_wait_eq, 10, 10),
        (doca_sync_event_wait_neq, 10, 11),
        (doca_sync_event_wait_gt, 11, 12),
        (doca_sync_event_wait_gt_yield, 12, 13),
        (doca_sync_event_wait_eq_yield, 14, 14),
        (doca_sync_event_wait_neq_yield, 14, 15),
    ];
    for (f, arg, publish) in waits {
        let (tx, rx) = std::sync::mpsc::channel();
        let bp = b as usize;
        std::thread::spawn(move || {
            // SAFETY: the data path of a started handle may be used from another thread.
            tx.send(unsafe { f(bp as *mut doca_sync_event, arg, u64::MAX) }).unwrap();
        });
        std::thread::sleep(Duration::from_millis(20));
        assert!(rx.try_recv().is_err(), "returned before the update");
        set(a, publish);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(DOCA_SUCCESS));
    }
    destroy(b);
    destroy(a);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

#[test]
fn hardware_mask_rule() {
    for m in [0, 0xFF, 0xFF00, 0xFFFF, 0xFFFF_0000, 0xFFFF_FFFF, 0xFFFF_FFFF_0000_0000, u64::MAX] {
        assert!(hw_wait_mask_supported(m), "{m:#x}");
    }
    for m in [1, 0x0F, 0xFFF, 0xFF_FFFF, 0x00FF_00FF, 0x00FF_FFFF_FFFF, 0x8000_0000_0000_0000] {
        assert!(!hw_wait_mask_supported(m), "{m:#x}");
    }
    const { assert!(SOFT_ACCEPTS_ANY_WAIT_MASK) };
}

// ---- ctx mode ----

#[test]
fn ctx_mode_tasks() {
    testkit::reset();
    let pe = new_pe();
    let e = create();
    ctx_event(pe, e, 4);
    THEN.with(|t| t.set(Then::Free));
    let (mut got, mut fetched) = (0u64, 0u64);
    let mut t = ptr::null_mut();
    // SAFETY: live objects; `got` and `fetched` outlive the tasks.
    unsafe {
        ok(doca_sync_event_task_notify_set_alloc_init(e, 10, doca_data::from_u64(1), &mut t));
        ok(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(t)));
        let mut t = ptr::null_mut();
        ok(doca_sync_event_task_notify_add_alloc_init(e, 5, &mut fetched, doca_data::from_u64(2), &mut t));
        ok(doca_task_submit(doca_sync_event_task_notify_add_as_doca_task(t)));
        let mut t = ptr::null_mut();
        ok(doca_sync_event_task_get_alloc_init(e, &mut got, doca_data::from_u64(3), &mut t));
        ok(doca_task_try_submit(doca_sync_event_task_get_as_doca_task(t)));
        // Satisfied at once (masked), and one that must wait.
        ok(doca_task_submit(wait_eq_task(e, 0x0F, 0x0F, 4)));
        let mut w = ptr::null_mut();
        ok(doca_sync_event_task_wait_neq_alloc_init(e, 15, u64::MAX, doca_data::from_u64(5), &mut w));
        ok(doca_task_submit(doca_sync_event_task_wait_neq_as_doca_task(w)));
    }
    assert!(take_done().is_empty(), "no callback inside submit");
    assert_eq!(drain(pe), 4);
    let done = take_done();
    assert_eq!(done.iter().map(|d| (d.ud, d.ok)).collect::<Vec<_>>(), vec![(1, true), (2, true), (3, true), (4, true)]);
    assert_eq!((fetched, got), (10, 15));
    assert_eq!(shared_of(e).active_waiters(), 0, "a polling PE needs no doorbell");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_request_notification(pe) });
    assert_eq!(shared_of(e).active_waiters(), 1, "arming registered the PE doorbell for the pending neq");
    set(e, 16);
    assert_eq!(drain(pe), 1);
    assert_eq!(take_done().iter().map(|d| d.ud).collect::<Vec<_>>(), vec![5]);
    assert_eq!(shared_of(e).active_waiters(), 0, "unregistered when no wait is pending");
    // Unconfigured pools in a fresh ctx event: NOT_SUPPORTED.
    let f = create();
    // SAFETY: live objects.
    unsafe {
        let c = doca_sync_event_as_ctx(f);
        ok(doca_pe_connect_ctx(pe, c));
        ok(doca_ctx_start(c));
        let mut t = ptr::null_mut();
        assert_eq!(
            doca_sync_event_task_wait_eq_alloc_init(f, 1, 1, doca_data::from_u64(0), &mut t),
            DOCA_ERROR_NOT_SUPPORTED
        );
    }
    stop_ctx_and_destroy(pe, f);
    stop_ctx_and_destroy(pe, e);
    testkit::destroy_pe(pe);
}

#[test]
fn notification_fd_follows_publisher_updates() {
    testkit::reset();
    let dev = test_open_default();
    let pe = new_pe();
    let fd = pe_fd(pe);
    let e = create();
    ctx_event(pe, e, 2);
    // A second handle on the same counter (imported in this process) is the publisher.
    let p = import(dev, &export_pci(e, dev)).unwrap();
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_start(p) });
    THEN.with(|t| t.set(Then::Free));

    // SAFETY: live task.
    ok(unsafe { doca_task_submit(wait_eq_task(e, 1, u64::MAX, 9)) });
    drain(pe);
    arm(pe);
    assert_eq!(drain(pe), 0);
    assert!(!readable(fd, 0), "idle + armed: not readable");
    set(p, 1);
    assert!(readable(fd, 0), "publisher rang our doorbell");
    clear(pe);
    assert_eq!(drain(pe), 1);
    assert_eq!(take_done().iter().map(|d| (d.ud, d.ok)).collect::<Vec<_>>(), vec![(9, true)]);
    assert!(!readable(fd, 0), "cleared and drained: quiet");
    arm(pe);
    assert!(!readable(fd, 0));
    // Publishing with nobody waiting rings nobody.
    set(p, 2);
    assert!(!readable(fd, 0));
    // Arming while a pending wait is already satisfied: readable at once.
    // SAFETY: live task.
    ok(unsafe { doca_task_submit(wait_eq_task(e, 3, u64::MAX, 10)) });
    clear(pe);
    drain(pe);
    // This update rings our doorbell; arming drains the doorbell first, so the handle is
    // readable below only because the arm-time check finds the satisfied wait.
    set(p, 3);
    arm(pe);
    assert!(readable(fd, 0), "arm with satisfied work");
    clear(pe);
    assert_eq!(drain(pe), 1);
    destroy(p);
    stop_ctx_and_destroy(pe, e);
    testkit::destroy_pe(pe);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

#[test]
fn stop_flushes_pending_waits_and_idles_after_frees() {
    testkit::reset();
    let pe = new_pe();
    let e = create();
    ctx_event(pe, e, 4);
    // SAFETY: live event.
    let c = unsafe { doca_sync_event_as_ctx(e) };
    let a = wait_eq_task(e, 100, u64::MAX, 1);
    let b = wait_eq_task(e, 200, u64::MAX, 2);
    // SAFETY: live tasks.
    unsafe {
        ok(doca_task_submit(a));
        ok(doca_task_submit(b));
    }
    assert_eq!(drain(pe), 0);
    // SAFETY: live PE.
    ok(unsafe { doca_pe_request_notification(pe) });
    assert_eq!(shared_of(e).active_waiters(), 1);
    THEN.with(|t| t.set(Then::Keep));
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(c) }, DOCA_ERROR_IN_PROGRESS);
    assert_eq!(shared_of(e).active_waiters(), 0);
    assert_eq!(drain(pe), 2);
    let done = take_done();
    assert_eq!(
        done.iter().map(|d| (d.ud, d.ok, d.status)).collect::<Vec<_>>(),
        vec![(1, false, FLUSH_STATUS), (2, false, FLUSH_STATUS)]
    );
    let mut s = 0;
    // SAFETY: live ctx.
    ok(unsafe { doca_ctx_get_state(c, &mut s) });
    assert_eq!(s, DOCA_CTX_STATE_STOPPING, "tasks not freed yet");
    // SAFETY: live event.
    assert_eq!(unsafe { doca_sync_event_destroy(e) }, DOCA_ERROR_BAD_STATE);
    // SAFETY: owned tasks.
    unsafe {
        doca_task_free(a);
        doca_task_free(b);
    }
    assert_eq!(drain(pe), 1);
    // SAFETY: live ctx.
    ok(unsafe { doca_ctx_get_state(c, &mut s) });
    assert_eq!(s, DOCA_CTX_STATE_IDLE);
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_destroy(e) });
    testkit::destroy_pe(pe);
}

#[test]
fn waiter_table_full() {
    testkit::reset();
    let dev = test_open_default();
    let base = standalone();
    let blob = export_pci(base, dev);
    let mut pes = vec![];
    let mut evs = vec![];
    let mut results = vec![];
    for i in 0..=WAITER_SLOTS {
        let pe = new_pe();
        let e = import(dev, &blob).unwrap();
        ctx_event(pe, e, 1);
        // Armed: the PE is about to sleep, so its waits need a doorbell slot.
        // SAFETY: live PE.
        ok(unsafe { doca_pe_request_notification(pe) });
        let t = wait_eq_task(e, 1, u64::MAX, i as u64);
        // SAFETY: live task.
        let r = unsafe { doca_task_submit(t) };
        if r != DOCA_SUCCESS {
            // SAFETY: the failed submit left the task with us.
            unsafe { doca_task_free(t) };
        }
        results.push(r);
        pes.push(pe);
        evs.push(e);
    }
    assert!(results[..WAITER_SLOTS].iter().all(|&r| r == DOCA_SUCCESS));
    assert_eq!(results[WAITER_SLOTS], DOCA_ERROR_FULL);
    // Publishing completes every pending wait; stopping unregisters every doorbell.
    set(base, 1);
    for (pe, e) in pes.into_iter().zip(evs) {
        stop_ctx_and_destroy(pe, e);
        testkit::destroy_pe(pe);
    }
    assert_eq!(shared_of(base).active_waiters(), 0);
    destroy(base);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

#[test]
fn stale_waiters_are_reclaimed() {
    testkit::reset();
    let pe = new_pe();
    let e = create();
    ctx_event(pe, e, 1);
    // Fill the table with doorbells whose receivers are gone (as after a crash).
    let dead = crate::doorbell::Doorbell::new().unwrap().address();
    for _ in 0..WAITER_SLOTS {
        shared_of(e).register(dead).unwrap();
    }
    assert_eq!(shared_of(e).active_waiters(), WAITER_SLOTS);
    // A real (armed) waiter still gets a slot: registering reclaims dead ones first.
    // SAFETY: live PE.
    ok(unsafe { doca_pe_request_notification(pe) });
    let t = wait_eq_task(e, 5, u64::MAX, 1);
    // SAFETY: live task.
    ok(unsafe { doca_task_submit(t) });
    assert_eq!(shared_of(e).active_waiters(), 1);
    // A publisher also clears dead slots it rings.
    shared_of(e).register(dead).unwrap();
    assert_eq!(shared_of(e).active_waiters(), 2);
    set(e, 4);
    assert_eq!(shared_of(e).active_waiters(), 1, "only the live waiter is left");
    stop_ctx_and_destroy(pe, e);
    testkit::destroy_pe(pe);
}

// ---- export / import ----

#[test]
fn bad_blobs_are_rejected() {
    let dev = test_open_default();
    let e = standalone();
    set(e, 77);
    let blob = export_pci(e, dev);
    let good = import(dev, &blob).unwrap();
    // SAFETY: live event.
    ok(unsafe { doca_sync_event_start(good) });
    assert_eq!(get(good), 77);
    destroy(good);

    for n in 0..blob.len() {
        let r = import(dev, &blob[..n]);
        assert!(r.is_err(), "truncated at {n}");
        if n > 0 {
            assert_eq!(r, Err(DOCA_ERROR_INVALID_VALUE), "truncated at {n}");
        }
    }
    for i in 0..blob.len() {
        for m in [0x01u8, 0x80, 0xFF] {
            let mut b = blob.clone();
            b[i] ^= m;
            let r = import(dev, &b);
            assert!(
                r == Err(DOCA_ERROR_INVALID_VALUE) || r == Err(DOCA_ERROR_UNSUPPORTED_VERSION),
                "byte {i} ^ {m:#x}: {r:?}"
            );
        }
    }
    let mut longer = blob.clone();
    longer.push(0);
    assert_eq!(import(dev, &longer), Err(DOCA_ERROR_INVALID_VALUE));

    // Well-framed blobs with wrong contents.
    let (pid, fd, len, key, via) = parse_blob(&blob).unwrap();
    let craft = |pid: u32, fd: u32, len: u64, key: u64, via: u8| {
        let mut w = BlobWriter::new(BlobKind::SyncEvent);
        w.u32(pid).u32(fd).u64(len).u64(key).u8(via);
        w.finish()
    };
    let fd = fd as u32;
    assert_eq!(import(dev, &craft(pid, fd, len as u64, key ^ 1, via)), Err(DOCA_ERROR_NOT_PERMITTED));
    assert_eq!(import(dev, &craft(pid, fd, len as u64 + 8, key, via)), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(import(dev, &craft(pid, fd, len as u64, key, 9)), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(import(dev, &craft(0, fd, len as u64, key, via)), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(import(dev, &craft(i32::MAX as u32, fd, len as u64, key, via)), Err(DOCA_ERROR_NOT_FOUND));
    assert_eq!(import(dev, &craft(pid, 999_999, len as u64, key, via)), Err(DOCA_ERROR_NOT_FOUND));
    // Another blob kind.
    let mut w = BlobWriter::new(BlobKind::Mmap);
    w.u32(pid).u32(fd).u64(len as u64).u64(key).u8(via);
    assert_eq!(import(dev, &w.finish()), Err(DOCA_ERROR_INVALID_VALUE));
    // An invalid device.
    let mut out_ev = ptr::null_mut();
    // SAFETY: valid blob pointer; a bogus (non-NULL) device pointer is rejected unread.
    let r = unsafe {
        doca_sync_event_create_from_export(ptr::dangling_mut::<doca_dev>(), blob.as_ptr(), blob.len(), &mut out_ev)
    };
    assert_eq!(r, DOCA_ERROR_INVALID_VALUE);
    destroy(e);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

const CHILD_ENV: &str = "DOCA_SOFT_TEST_SE_CHILD";
const BLOB_ENV: &str = "DOCA_SOFT_TEST_SE_BLOB";
const CROSS_TEST: &str = "sync_event::tests::cross_process_wait_and_notify";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

/// The child side: import, wait (ctx-mode task + poll) for 1, then publish 2.
fn cross_process_child(blob_hex: &str) {
    testkit::reset();
    let dev = test_open_default();
    let pe = new_pe();
    let e = import(dev, &unhex(blob_hex)).expect("import in child");
    ctx_event(pe, e, 2);
    THEN.with(|t| t.set(Then::Free));
    // SAFETY: live task.
    ok(unsafe { doca_task_submit(wait_eq_task(e, 1, u64::MAX, 1)) });
    let woke = event_loop_until(pe, Duration::from_secs(20), || !testkit::DONE.with(|d| d.borrow().is_empty()));
    assert!(woke, "child: value 1 never arrived");
    assert!(take_done()[0].ok);
    let mut t = ptr::null_mut();
    // SAFETY: live event and task.
    unsafe {
        ok(doca_sync_event_task_notify_set_alloc_init(e, 2, doca_data::from_u64(2), &mut t));
        ok(doca_task_submit(doca_sync_event_task_notify_set_as_doca_task(t)));
    }
    drain(pe);
    stop_ctx_and_destroy(pe, e);
    testkit::destroy_pe(pe);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

#[test]
fn cross_process_wait_and_notify() {
    if std::env::var_os(CHILD_ENV).is_some() {
        let blob = std::env::var(BLOB_ENV).expect("blob in the environment");
        cross_process_child(&blob);
        return;
    }
    testkit::reset();
    let dev = test_open_default();
    let pe = new_pe();
    let e = create();
    ctx_event(pe, e, 2);
    let blob = export_pci(e, dev);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([CROSS_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env(BLOB_ENV, hex(&blob))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let deadline = Instant::now() + Duration::from_secs(30);
    fn fail(child: &mut std::process::Child, why: &str) -> ! {
        let _ = child.kill();
        let out = child.wait_with_output_ref();
        panic!("{why}\nchild output:\n{out}");
    }
    // Wait until the child's PE doorbell is registered (its wait task is pending), so the
    // update below must travel through the doorbell.
    while shared_of(e).active_waiters() == 0 {
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            fail(&mut child, "the child never registered a waiter");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    set(e, 1);
    THEN.with(|t| t.set(Then::Free));
    // SAFETY: live task.
    ok(unsafe { doca_task_submit(wait_eq_task(e, 2, u64::MAX, 2)) });
    let left = deadline.saturating_duration_since(Instant::now());
    let woke = event_loop_until(pe, left, || !testkit::DONE.with(|d| d.borrow().is_empty()));
    if !woke {
        fail(&mut child, "the parent never saw value 2");
    }
    assert_eq!(take_done().iter().map(|d| (d.ud, d.ok)).collect::<Vec<_>>(), vec![(2, true)]);
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            if !st.success() {
                fail(&mut child, &format!("child failed: {st}"));
            }
            break;
        }
        if Instant::now() > deadline {
            fail(&mut child, "the child did not exit");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    stop_ctx_and_destroy(pe, e);
    testkit::destroy_pe(pe);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

trait ChildOutput {
    fn wait_with_output_ref(&mut self) -> String;
}

impl ChildOutput for std::process::Child {
    fn wait_with_output_ref(&mut self) -> String {
        use std::io::Read;
        let _ = self.wait();
        let mut s = String::new();
        if let Some(o) = self.stdout.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        if let Some(e) = self.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

// ---- NULL arguments on every entry point ----

#[test]
fn null_arguments_are_invalid_value() {
    testkit::reset();
    let dev = test_open_default();
    let pe = new_pe();
    let ev = standalone();
    let blob = export_pci(ev, dev);
    let ctx_ev = create();
    ctx_event(pe, ctx_ev, 1);
    // SAFETY: live event.
    let ctx = unsafe { doca_sync_event_as_ctx(ctx_ev) };
    macro_rules! n {
        () => {
            ptr::null_mut()
        };
    }
    let (mut u, mut h, mut s, mut d, mut sz, mut v) = (0usize, 0, 0u32, ptr::null::<u8>(), 0usize, 0u64);
    let mut ud = doca_data::from_u64(0);
    let mut evp = ptr::null_mut();
    let (mut tg, mut ts, mut ta, mut te, mut tn) = (n!(), n!(), n!(), n!(), n!());
    let (b, bl) = (blob.as_ptr(), blob.len());
    let zero = doca_data::from_u64(0);

    // SAFETY: (whole table) every call passes NULL for exactly the argument under test and
    // valid live objects / out-pointers for the others.
    let table: Vec<(&str, doca_error_t)> = unsafe {
        vec![
            ("pe_create", doca_pe_create(n!())),
            ("pe_destroy", doca_pe_destroy(n!())),
            ("pe_get_notification_handle(pe)", doca_pe_get_notification_handle(ptr::null(), &mut h)),
            ("pe_get_notification_handle(out)", doca_pe_get_notification_handle(pe, n!())),
            ("pe_request_notification", doca_pe_request_notification(n!())),
            ("pe_clear_notification", doca_pe_clear_notification(n!(), h)),
            ("pe_get_num_inflight_tasks(pe)", doca_pe_get_num_inflight_tasks(ptr::null(), &mut u)),
            ("pe_get_num_inflight_tasks(out)", doca_pe_get_num_inflight_tasks(pe, n!())),
            ("pe_connect_ctx(pe)", doca_pe_connect_ctx(n!(), ctx)),
            ("pe_connect_ctx(ctx)", doca_pe_connect_ctx(pe, n!())),
            ("pe_set_event_mode", doca_pe_set_event_mode(n!(), 0)),
            ("task_submit", doca_task_submit(n!())),
            ("task_try_submit", doca_task_try_submit(n!())),
            ("task_get_status", doca_task_get_status(ptr::null())),
            ("ctx_start", doca_ctx_start(n!())),
            ("ctx_stop", doca_ctx_stop(n!())),
            ("ctx_get_state(ctx)", doca_ctx_get_state(ptr::null(), &mut s)),
            ("ctx_get_state(out)", doca_ctx_get_state(ctx, n!())),
            ("ctx_set_state_changed_cb(ctx)", doca_ctx_set_state_changed_cb(n!(), Some(testkit::rec_state))),
            ("ctx_set_state_changed_cb(cb)", doca_ctx_set_state_changed_cb(ctx, None)),
            ("ctx_set_user_data", doca_ctx_set_user_data(n!(), zero)),
            ("ctx_get_user_data(ctx)", doca_ctx_get_user_data(ptr::null(), &mut ud)),
            ("ctx_get_user_data(out)", doca_ctx_get_user_data(ctx, n!())),
            ("ctx_get_num_inflight_tasks(ctx)", doca_ctx_get_num_inflight_tasks(ptr::null(), &mut u)),
            ("ctx_get_num_inflight_tasks(out)", doca_ctx_get_num_inflight_tasks(ctx, n!())),
            ("se_create", doca_sync_event_create(n!())),
            ("se_destroy", doca_sync_event_destroy(n!())),
            ("se_add_publisher_location_cpu(ev)", doca_sync_event_add_publisher_location_cpu(n!(), dev)),
            ("se_add_publisher_location_cpu(dev)", doca_sync_event_add_publisher_location_cpu(ctx_ev, n!())),
            ("se_add_subscriber_location_cpu(ev)", doca_sync_event_add_subscriber_location_cpu(n!(), dev)),
            ("se_add_subscriber_location_cpu(dev)", doca_sync_event_add_subscriber_location_cpu(ctx_ev, n!())),
            ("se_add_publisher_location_remote_pci", doca_sync_event_add_publisher_location_remote_pci(n!())),
            ("se_add_subscriber_location_remote_pci", doca_sync_event_add_subscriber_location_remote_pci(n!())),
            ("se_add_publisher_location_remote_net", doca_sync_event_add_publisher_location_remote_net(n!())),
            ("se_set_addr(ev)", doca_sync_event_set_addr(n!(), &mut v)),
            ("se_set_addr(addr)", doca_sync_event_set_addr(ev, n!())),
            ("se_start", doca_sync_event_start(n!())),
            ("se_stop", doca_sync_event_stop(n!())),
            ("se_export_to_remote_pci(ev)", doca_sync_event_export_to_remote_pci(n!(), dev, &mut d, &mut sz)),
            ("se_export_to_remote_pci(dev)", doca_sync_event_export_to_remote_pci(ev, n!(), &mut d, &mut sz)),
            ("se_export_to_remote_pci(data)", doca_sync_event_export_to_remote_pci(ev, dev, n!(), &mut sz)),
            ("se_export_to_remote_pci(sz)", doca_sync_event_export_to_remote_pci(ev, dev, &mut d, n!())),
            ("se_export_to_remote_net(ev)", doca_sync_event_export_to_remote_net(n!(), &mut d, &mut sz)),
            ("se_export_to_remote_net(data)", doca_sync_event_export_to_remote_net(ev, n!(), &mut sz)),
            ("se_export_to_remote_net(sz)", doca_sync_event_export_to_remote_net(ev, &mut d, n!())),
            ("se_create_from_export(dev)", doca_sync_event_create_from_export(n!(), b, bl, &mut evp)),
            ("se_create_from_export(data)", doca_sync_event_create_from_export(dev, ptr::null(), bl, &mut evp)),
            ("se_create_from_export(out)", doca_sync_event_create_from_export(dev, b, bl, n!())),
            ("se_get(ev)", doca_sync_event_get(n!(), &mut v)),
            ("se_get(out)", doca_sync_event_get(ev, n!())),
            ("se_update_add(ev)", doca_sync_event_update_add(n!(), 1, &mut v)),
            ("se_update_add(fetched)", doca_sync_event_update_add(ev, 1, n!())),
            ("se_update_set", doca_sync_event_update_set(n!(), 1)),
            ("se_wait_gt", doca_sync_event_wait_gt(n!(), 0, 0)),
            ("se_wait_gt_yield", doca_sync_event_wait_gt_yield(n!(), 0, 0)),
            ("se_wait_eq", doca_sync_event_wait_eq(n!(), 0, 0)),
            ("se_wait_neq", doca_sync_event_wait_neq(n!(), 0, 0)),
            ("se_wait_eq_yield", doca_sync_event_wait_eq_yield(n!(), 0, 0)),
            ("se_wait_neq_yield", doca_sync_event_wait_neq_yield(n!(), 0, 0)),
            ("get_set_conf(ev)", doca_sync_event_task_get_set_conf(n!(), Some(get_ok), Some(get_err), 1)),
            ("get_set_conf(ok)", doca_sync_event_task_get_set_conf(ev, None, Some(get_err), 1)),
            ("get_set_conf(err)", doca_sync_event_task_get_set_conf(ev, Some(get_ok), None, 1)),
            ("notify_set_set_conf(ev)", doca_sync_event_task_notify_set_set_conf(n!(), Some(set_ok), Some(set_err), 1)),
            ("notify_set_set_conf(ok)", doca_sync_event_task_notify_set_set_conf(ev, None, Some(set_err), 1)),
            ("notify_set_set_conf(err)", doca_sync_event_task_notify_set_set_conf(ev, Some(set_ok), None, 1)),
            ("notify_add_set_conf(ev)", doca_sync_event_task_notify_add_set_conf(n!(), Some(add_ok), Some(add_err), 1)),
            ("notify_add_set_conf(ok)", doca_sync_event_task_notify_add_set_conf(ev, None, Some(add_err), 1)),
            ("notify_add_set_conf(err)", doca_sync_event_task_notify_add_set_conf(ev, Some(add_ok), None, 1)),
            ("wait_eq_set_conf(ev)", doca_sync_event_task_wait_eq_set_conf(n!(), Some(eq_ok), Some(eq_err), 1)),
            ("wait_eq_set_conf(ok)", doca_sync_event_task_wait_eq_set_conf(ev, None, Some(eq_err), 1)),
            ("wait_eq_set_conf(err)", doca_sync_event_task_wait_eq_set_conf(ev, Some(eq_ok), None, 1)),
            ("wait_neq_set_conf(ev)", doca_sync_event_task_wait_neq_set_conf(n!(), Some(neq_ok), Some(neq_err), 1)),
            ("wait_neq_set_conf(ok)", doca_sync_event_task_wait_neq_set_conf(ev, None, Some(neq_err), 1)),
            ("wait_neq_set_conf(err)", doca_sync_event_task_wait_neq_set_conf(ev, Some(neq_ok), None, 1)),
            ("get_alloc_init(ev)", doca_sync_event_task_get_alloc_init(n!(), &mut v, zero, &mut tg)),
            ("get_alloc_init(ret)", doca_sync_event_task_get_alloc_init(ctx_ev, n!(), zero, &mut tg)),
            ("get_alloc_init(task)", doca_sync_event_task_get_alloc_init(ctx_ev, &mut v, zero, n!())),
            ("notify_set_alloc_init(ev)", doca_sync_event_task_notify_set_alloc_init(n!(), 1, zero, &mut ts)),
            ("notify_set_alloc_init(task)", doca_sync_event_task_notify_set_alloc_init(ctx_ev, 1, zero, n!())),
            ("notify_add_alloc_init(ev)", doca_sync_event_task_notify_add_alloc_init(n!(), 1, &mut v, zero, &mut ta)),
            (
                "notify_add_alloc_init(fetched)",
                doca_sync_event_task_notify_add_alloc_init(ctx_ev, 1, n!(), zero, &mut ta),
            ),
            ("notify_add_alloc_init(task)", doca_sync_event_task_notify_add_alloc_init(ctx_ev, 1, &mut v, zero, n!())),
            ("wait_eq_alloc_init(ev)", doca_sync_event_task_wait_eq_alloc_init(n!(), 1, 1, zero, &mut te)),
            ("wait_eq_alloc_init(task)", doca_sync_event_task_wait_eq_alloc_init(ctx_ev, 1, 1, zero, n!())),
            ("wait_neq_alloc_init(ev)", doca_sync_event_task_wait_neq_alloc_init(n!(), 1, 1, zero, &mut tn)),
            ("wait_neq_alloc_init(task)", doca_sync_event_task_wait_neq_alloc_init(ctx_ev, 1, 1, zero, n!())),
        ]
    };
    for (name, r) in &table {
        assert_eq!(*r, DOCA_ERROR_INVALID_VALUE, "{name}");
    }
    // Functions without a status: NULL in, harmless default out.
    // SAFETY: NULL arguments are checked by the callee.
    unsafe {
        assert_eq!(doca_pe_progress(n!()), 0);
        doca_task_free(n!());
        doca_task_set_user_data(n!(), zero);
        assert_eq!(doca_task_get_user_data(ptr::null()).as_u64(), 0);
        assert!(doca_task_get_ctx(ptr::null()).is_null());
        assert!(doca_sync_event_as_ctx(n!()).is_null());
        assert!(doca_sync_event_task_get_as_doca_task(n!()).is_null());
        assert!(doca_sync_event_task_notify_set_as_doca_task(n!()).is_null());
        assert!(doca_sync_event_task_notify_add_as_doca_task(n!()).is_null());
        assert!(doca_sync_event_task_wait_eq_as_doca_task(n!()).is_null());
        assert!(doca_sync_event_task_wait_neq_as_doca_task(n!()).is_null());
    }
    // Nothing was allocated by the failed calls.
    assert!(evp.is_null() && tg.is_null() && ts.is_null() && ta.is_null() && te.is_null() && tn.is_null());
    destroy(ev);
    stop_ctx_and_destroy(pe, ctx_ev);
    testkit::destroy_pe(pe);
    // SAFETY: no event references the device any more.
    ok(unsafe { doca_dev_close(dev) });
}

#[test]
fn tasks_are_reused_through_their_setters() {
    use super::accessors::*;
    testkit::reset();
    THEN.with(|t| t.set(Then::Keep));
    let pe = new_pe();
    let e = create();
    ctx_event(pe, e, 2);
    let (mut got, mut fetched, mut other) = (0u64, 0u64, 0u64);
    let (mut g, mut s, mut a, mut w) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: live event and tasks; each task is ours between its callback and the next submit.
    unsafe {
        ok(doca_sync_event_task_notify_set_alloc_init(e, 5, doca_data::from_u64(1), &mut s));
        ok(doca_sync_event_task_notify_add_alloc_init(e, 2, &mut fetched, doca_data::from_u64(2), &mut a));
        ok(doca_sync_event_task_get_alloc_init(e, &mut got, doca_data::from_u64(3), &mut g));
        ok(doca_sync_event_task_wait_eq_alloc_init(e, 1, u64::MAX, doca_data::from_u64(4), &mut w));
        assert_eq!(doca_sync_event_task_notify_set_get_set_val(s), 5);
        assert_eq!(doca_sync_event_task_notify_add_get_inc_val(a), 2);
        assert_eq!(doca_sync_event_task_notify_add_get_fetched_val_ptr(a), &mut fetched as *mut u64);
        assert_eq!(doca_sync_event_task_get_get_ret_val_ptr(g), &mut got as *mut u64);
        assert_eq!(
            (doca_sync_event_task_wait_eq_get_wait_val(w), doca_sync_event_task_wait_eq_get_mask(w)),
            (1, u64::MAX)
        );
        let (st, at, gt, wt) = (
            doca_sync_event_task_notify_set_as_doca_task(s),
            doca_sync_event_task_notify_add_as_doca_task(a),
            doca_sync_event_task_get_as_doca_task(g),
            doca_sync_event_task_wait_eq_as_doca_task(w),
        );
        for t in [st, at, gt] {
            ok(doca_task_submit(t));
            drain(pe);
        }
        assert_eq!((fetched, got), (5, 7));
        // Re-use each with new values.
        doca_sync_event_task_notify_set_set_set_val(s, 100);
        doca_sync_event_task_notify_add_set_inc_val(a, 10);
        doca_sync_event_task_notify_add_set_fetched_val_ptr(a, &mut other);
        doca_sync_event_task_wait_eq_set_wait_val(w, 110);
        doca_sync_event_task_wait_eq_set_mask(w, 0xff);
        for t in [st, at, gt, wt] {
            ok(doca_task_submit(t));
            drain(pe);
        }
        assert_eq!((other, got), (100, 110));
        // A setter on a submitted task changes nothing.
        ok(doca_task_submit(wt));
        doca_sync_event_task_wait_eq_set_wait_val(w, 1);
        assert_eq!(doca_sync_event_task_wait_eq_get_wait_val(w), 110);
        drain(pe);
        // A NULL result pointer is refused by the next submit; the task stays ours.
        doca_sync_event_task_get_set_ret_val_ptr(g, ptr::null_mut());
        assert_eq!(doca_task_submit(gt), DOCA_ERROR_INVALID_VALUE);
        let done = take_done();
        assert_eq!(done.iter().map(|d| (d.ud, d.ok)).collect::<Vec<_>>().len(), 8);
        assert!(done.iter().all(|d| d.ok));
        for t in [st, at, gt, wt] {
            doca_task_free(t);
        }
    }
    stop_ctx_and_destroy(pe, e);
    testkit::destroy_pe(pe);
}

/// The capability queries NVIDIA's sync-event samples filter devices with: every soft device
/// can export to and import from another process of its host and runs every task kind; none
/// has a DPA or a GPU; a NULL devinfo is INVALID_VALUE.
#[test]
fn capability_queries() {
    let dev = test_open_default();
    // SAFETY: a live device.
    let info = unsafe { crate::dev::doca_dev_as_devinfo(dev) };
    type Cap = unsafe extern "C" fn(*const crate::dev::doca_devinfo) -> doca_error_t;
    let yes: [Cap; 9] = [
        caps::doca_sync_event_cap_is_create_from_export_supported,
        caps::doca_sync_event_cap_is_export_to_remote_pci_supported,
        caps::doca_sync_event_cap_task_get_is_supported,
        caps::doca_sync_event_cap_task_notify_set_is_supported,
        caps::doca_sync_event_cap_task_notify_add_is_supported,
        caps::doca_sync_event_cap_task_wait_eq_is_supported,
        caps::doca_sync_event_cap_task_wait_neq_is_supported,
        remote_net::doca_sync_event_cap_is_export_to_remote_net_supported,
        remote_net::doca_sync_event_cap_remote_net_is_create_from_export_supported,
    ];
    let no: [Cap; 4] = [
        caps::doca_sync_event_cap_is_export_to_dpa_supported,
        caps::doca_sync_event_cap_is_export_to_gpu_supported,
        caps::doca_sync_event_cap_remote_net_is_export_to_dpa_supported,
        caps::doca_sync_event_cap_remote_net_is_export_to_gpu_supported,
    ];
    for (k, f) in yes.iter().enumerate() {
        // SAFETY: a live devinfo, and NULL (rejected).
        unsafe {
            assert_eq!(f(info), DOCA_SUCCESS, "supported {k}");
            assert_eq!(f(ptr::null()), DOCA_ERROR_INVALID_VALUE, "supported {k} with NULL");
        }
    }
    for (k, f) in no.iter().enumerate() {
        // SAFETY: as above.
        unsafe {
            assert_eq!(f(info), DOCA_ERROR_NOT_SUPPORTED, "unsupported {k}");
            assert_eq!(f(ptr::null()), DOCA_ERROR_INVALID_VALUE, "unsupported {k} with NULL");
        }
    }
    // SAFETY: nothing uses the device any more.
    ok(unsafe { doca_dev_close(dev) });
}
