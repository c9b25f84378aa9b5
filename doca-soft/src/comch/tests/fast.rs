//! The fast path in one process: a consumer on the server's connection, a producer on the
//! client's, each on a PE of its own. Announcement and the peer's events, AGAIN with nothing
//! posted, data and immediate bytes delivered in posting order, a source list, the errors
//! that fail both sides, and a stop that flushes and withdraws.

use core::cell::RefCell;

use super::*;
use crate::buf::*;
use crate::comch::consumer::*;
use crate::comch::producer::*;
use crate::mmap::*;
use crate::task::doca_task_submit;

mod threads;

thread_local! {
    /// (user data, status) of fast-path completions: post-receives, then sends.
    static FAST: RefCell<Vec<(&'static str, doca_error_t)>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn on_post_recv(t: *mut doca_comch_consumer_task_post_recv, _ud: doca_data, _cud: doca_data) {
    // SAFETY: our task, back inside its callback (kept: the test reads its results).
    let st = unsafe { doca_task_get_status(doca_comch_consumer_task_post_recv_as_task(t)) };
    FAST.with(|f| f.borrow_mut().push(("recv", st)));
    RECVS.with(|r| r.borrow_mut().push(t));
}
unsafe extern "C" fn on_send(t: *mut doca_comch_producer_task_send, _ud: doca_data, _cud: doca_data) {
    // SAFETY: our task, back inside its callback; freed once.
    unsafe {
        let st = doca_task_get_status(doca_comch_producer_task_send_as_task(t));
        FAST.with(|f| f.borrow_mut().push(("send", st)));
        doca_task_free(doca_comch_producer_task_send_as_task(t));
    }
}

thread_local! {
    static RECVS: RefCell<Vec<*mut doca_comch_consumer_task_post_recv>> = const { RefCell::new(Vec::new()) };
}

fn fast() -> Vec<(&'static str, doca_error_t)> {
    FAST.with(|f| core::mem::take(&mut *f.borrow_mut()))
}

fn ok(e: doca_error_t) {
    assert_eq!(e, DOCA_SUCCESS);
}

/// A started mmap over `mem` with the device added, for the fast path (PCI read-write, as
/// NVIDIA's sample makes it).
fn mmap_over(dev: *mut doca_dev, mem: &mut [u8]) -> *mut doca_mmap {
    let mut m = ptr::null_mut();
    // SAFETY: valid out-pointer; `mem` outlives the mmap.
    unsafe {
        ok(doca_mmap_create(&mut m));
        ok(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), mem.len()));
        ok(doca_mmap_set_permissions(m, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_PCI_READ_WRITE));
        ok(doca_mmap_add_dev(m, dev));
        ok(doca_mmap_start(m));
    }
    m
}

fn buf(inv: *mut doca_buf_inventory, m: *mut doca_mmap, at: *mut u8, len: usize, data_len: usize) -> *mut doca_buf {
    let mut b = ptr::null_mut();
    // SAFETY: live inventory and mmap; the range lies inside the mmap.
    ok(unsafe { doca_buf_inventory_buf_get_by_args(inv, m, at.cast(), len, at.cast(), data_len, &mut b) });
    b
}

/// Allocates and submits a send; the submit's result (the task is freed on failure).
fn send(p: *mut doca_comch_producer, b: *mut doca_buf, imm: &[u8], consumer: u32) -> doca_error_t {
    let mut t = ptr::null_mut();
    let mut imm = imm.to_vec();
    // SAFETY: live producer and buffer; the task is freed on failure or in its callback.
    unsafe {
        ok(doca_comch_producer_task_send_alloc_init(p, b, imm.as_mut_ptr(), imm.len() as u32, consumer, &mut t));
        let rc = doca_task_submit(doca_comch_producer_task_send_as_task(t));
        if rc != DOCA_SUCCESS {
            doca_task_free(doca_comch_producer_task_send_as_task(t));
        }
        rc
    }
}

fn post(c: *mut doca_comch_consumer, b: *mut doca_buf) {
    let mut t = ptr::null_mut();
    // SAFETY: live consumer and buffer.
    unsafe {
        ok(doca_comch_consumer_task_post_recv_alloc_init(c, b, &mut t));
        ok(doca_task_submit(doca_comch_consumer_task_post_recv_as_task(t)));
    }
}

fn data_of(b: *mut doca_buf) -> Vec<u8> {
    let (mut p, mut n) = (ptr::null_mut(), 0);
    // SAFETY: a live local buffer; its payload is readable memory of the test.
    unsafe {
        ok(doca_buf_get_data(b, &mut p));
        ok(doca_buf_get_data_len(b, &mut n));
        core::slice::from_raw_parts(p as *const u8, n).to_vec()
    }
}

/// A server and a client (`tag` names them) connected, each on its PE: the pair, the
/// server's connection and the client's.
/// Destroys a fast-path test's stopped producer and consumer, its buffers, inventories and
/// mmaps, its two fast-path PEs and its pair.
fn tear_down(
    p: Pair,
    pes: [*mut doca_pe; 2],
    (producer, consumer): (*mut doca_comch_producer, *mut doca_comch_consumer),
    bufs: &[*mut doca_buf],
    invs: [*mut doca_buf_inventory; 2],
    mmaps: [*mut doca_mmap; 2],
) {
    // SAFETY: live objects of the test, stopped, destroyed once each, in order.
    unsafe {
        ok(doca_comch_producer_destroy(producer));
        ok(doca_comch_consumer_destroy(consumer));
        for &b in bufs {
            ok(doca_buf_dec_refcount(b, ptr::null_mut()));
        }
        for inv in invs {
            ok(doca_buf_inventory_destroy(inv));
        }
        for m in mmaps {
            ok(doca_mmap_destroy(m));
        }
    }
    take();
    for pe in pes {
        destroy_pe(pe);
    }
    p.finish();
}

fn connected(tag: &str) -> (Pair, *mut doca_comch_connection, *mut doca_comch_connection) {
    let p = Pair::new(tag, true);
    // SAFETY: live client ctx.
    assert_eq!(unsafe { doca_ctx_start(p.cctx()) }, DOCA_ERROR_IN_PROGRESS);
    pump_until(&[p.spe, p.cpe], || state(p.cctx()) == DOCA_CTX_STATE_RUNNING);
    pump(&[p.spe, p.cpe]);
    let Some(Seen::Connect(sconn, 1)) = take().first().cloned() else { panic!() };
    let cconn = p.client_conn();
    (p, sconn as *mut doca_comch_connection, cconn)
}

#[test]
fn a_producer_fills_the_consumers_posted_buffers_in_order() {
    let (p, sconn, cconn) = connected("fast");
    let (kpe, ppe) = (new_pe(), new_pe());
    let pes = [p.spe, p.cpe, kpe, ppe];
    let mut smem = vec![0u8; 4096];
    let mut cmem = vec![0u8; 4096];
    let (sm, cm) = (mmap_over(p.dev, &mut smem), mmap_over(p.dev, &mut cmem));
    let (mut sinv, mut cinv) = (ptr::null_mut(), ptr::null_mut());
    let (mut consumer, mut producer) = (ptr::null_mut(), ptr::null_mut());
    let (mut cid, mut pid) = (0u32, 0u32);
    // SAFETY: live objects and valid out-pointers throughout.
    unsafe {
        for inv in [&mut sinv, &mut cinv] {
            ok(doca_buf_inventory_create(16, inv));
            ok(doca_buf_inventory_start(*inv));
        }
        // The consumer: created on the server's connection, IN_PROGRESS then RUNNING; the
        // client sees its id in the new-consumer event.
        ok(doca_comch_consumer_cap_is_supported(crate::dev::doca_dev_as_devinfo(p.dev)));
        ok(doca_comch_consumer_create(sconn, sm, &mut consumer));
        ok(doca_comch_consumer_get_id(consumer, &mut cid));
        assert!(cid != 0, "ids start at 1");
        ok(doca_comch_consumer_set_imm_data_len(consumer, 8));
        assert_eq!(doca_comch_consumer_set_imm_data_len(consumer, 33), DOCA_ERROR_INVALID_VALUE);
        ok(doca_comch_consumer_task_post_recv_set_conf(consumer, Some(on_post_recv), Some(on_post_recv), 4));
        ok(doca_pe_connect_ctx(kpe, doca_comch_consumer_as_ctx(consumer)));
        assert_eq!(doca_ctx_start(doca_comch_consumer_as_ctx(consumer)), DOCA_ERROR_IN_PROGRESS);
        pump_until(&pes, || state(doca_comch_consumer_as_ctx(consumer)) == DOCA_CTX_STATE_RUNNING);
        pump_until(&pes, || SEEN.with(|s| s.borrow().contains(&Seen::Consumer(cconn as usize, cid, true))));
        take();
        // The producer: created on the client's connection, started at once.
        ok(doca_comch_producer_create(cconn, &mut producer));
        ok(doca_comch_producer_get_id(producer, &mut pid));
        ok(doca_comch_producer_task_send_set_conf(producer, Some(on_send), Some(on_send), 8));
        ok(doca_pe_connect_ctx(ppe, doca_comch_producer_as_ctx(producer)));
        ok(doca_ctx_start(doca_comch_producer_as_ctx(producer)));
    }
    let sp = smem.as_mut_ptr();
    let cp = cmem.as_mut_ptr();
    cmem[..5].copy_from_slice(b"hello");
    let hello = buf(cinv, cm, cp, 5, 5);
    // Nothing posted yet: AGAIN, the task stays with the caller; an unknown consumer: not
    // connected.
    assert_eq!(send(producer, hello, &[1, 2, 3], cid), DOCA_ERROR_AGAIN);
    assert_eq!(send(producer, hello, &[], cid + 100), DOCA_ERROR_NOT_CONNECTED);
    // Two posts, two sends (the second a list): filled in posting order.
    let r1 = buf(sinv, sm, sp, 16, 0);
    let r2 = buf(sinv, sm, sp.wrapping_add(64), 64, 2);
    smem[64..66].copy_from_slice(b"::");
    post(consumer, r1);
    post(consumer, r2);
    ok(send(producer, hello, &[1, 2, 3], cid));
    cmem[100..102].copy_from_slice(b"ab");
    cmem[200..204].copy_from_slice(b"cdef");
    let list = buf(cinv, cm, cp.wrapping_add(100), 2, 2);
    // SAFETY: a first element with a count of 1, chained once.
    ok(unsafe { doca_buf_chain_list(list, buf(cinv, cm, cp.wrapping_add(200), 4, 4)) });
    ok(send(producer, list, &[], cid));
    pump_until(&pes, || FAST.with(|f| f.borrow().len() >= 4));
    let mut got = fast();
    got.sort_by_key(|(k, e)| (*k, e.0));
    assert_eq!(got, [("recv", DOCA_SUCCESS), ("recv", DOCA_SUCCESS), ("send", DOCA_SUCCESS), ("send", DOCA_SUCCESS)]);
    assert_eq!((data_of(r1), data_of(r2)), (b"hello".to_vec(), b"::abcdef".to_vec()));
    let recvs = RECVS.with(|r| core::mem::take(&mut *r.borrow_mut()));
    // SAFETY: our completed tasks, read then freed.
    unsafe {
        assert_eq!(doca_comch_consumer_task_post_recv_get_producer_id(recvs[0]), pid);
        let n = doca_comch_consumer_task_post_recv_get_imm_data_len(recvs[0]) as usize;
        let imm = core::slice::from_raw_parts(doca_comch_consumer_task_post_recv_get_imm_data(recvs[0]), n);
        assert_eq!(imm, [1, 2, 3]);
        assert!(doca_comch_consumer_task_post_recv_get_imm_data(recvs[1]).is_null(), "no immediate bytes");
        assert_eq!(doca_comch_consumer_task_post_recv_get_buf(recvs[1]), r2);
        for t in recvs {
            doca_task_free(doca_comch_consumer_task_post_recv_as_task(t));
        }
    }

    // Too much data for the posted room, or more immediate bytes than the consumer takes:
    // both sides fail.
    let small = buf(sinv, sm, sp.wrapping_add(1024), 4, 0);
    post(consumer, small);
    ok(send(producer, hello, &[], cid));
    let r3 = buf(sinv, sm, sp.wrapping_add(2048), 64, 0);
    post(consumer, r3);
    ok(send(producer, hello, &[7; 9], cid));
    pump_until(&pes, || FAST.with(|f| f.borrow().len() >= 4));
    let mut got = fast();
    got.sort_by_key(|(k, e)| (*k, e.0));
    let bad = DOCA_ERROR_INVALID_VALUE;
    assert_eq!(got, [("recv", bad), ("recv", bad), ("send", bad), ("send", bad)]);
    assert_eq!((data_of(small), data_of(r3)), (vec![], vec![]), "nothing counted as received");
    for t in RECVS.with(|r| core::mem::take(&mut *r.borrow_mut())) {
        // SAFETY: our completed tasks.
        unsafe { doca_task_free(doca_comch_consumer_task_post_recv_as_task(t)) };
    }

    // A producer process that dies between its claim and its finish: the receive fails
    // instead of holding up the ones posted after it.
    let dead = {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    };
    let r5 = buf(sinv, sm, sp.wrapping_add(3584), 64, 0);
    post(consumer, r5);
    // SAFETY: the client's live connection.
    let claimed = unsafe { &*cconn }.remote_consumer(cid).and_then(|rc| rc.queue.claim_as(dead));
    assert!(claimed.is_some(), "the post is claimable");
    pump_until(&pes, || FAST.with(|f| !f.borrow().is_empty()));
    assert_eq!(fast(), [("recv", DOCA_ERROR_CONNECTION_ABORTED)]);
    for t in RECVS.with(|r| core::mem::take(&mut *r.borrow_mut())) {
        // SAFETY: our completed task.
        unsafe { doca_task_free(doca_comch_consumer_task_post_recv_as_task(t)) };
    }

    // The consumer stops: its posted receive is flushed, the client sees it expire, and a
    // send to it is refused.
    let r4 = buf(sinv, sm, sp.wrapping_add(3072), 64, 0);
    post(consumer, r4);
    // SAFETY: live consumer ctx.
    let r = unsafe { doca_ctx_stop(doca_comch_consumer_as_ctx(consumer)) };
    assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{r:?}");
    pump_until(&pes, || FAST.with(|f| !f.borrow().is_empty()));
    assert!(fast()[0].1 != DOCA_SUCCESS, "flushed");
    for t in RECVS.with(|r| core::mem::take(&mut *r.borrow_mut())) {
        // SAFETY: our flushed task.
        unsafe { doca_task_free(doca_comch_consumer_task_post_recv_as_task(t)) };
    }
    pump_until(&pes, || SEEN.with(|s| s.borrow().contains(&Seen::Consumer(cconn as usize, cid, false))));
    assert_eq!(send(producer, hello, &[], cid), DOCA_ERROR_NOT_CONNECTED);

    // SAFETY: live objects, torn down in order.
    unsafe {
        ok(doca_ctx_stop(doca_comch_producer_as_ctx(producer)));
        pump(&pes);
    }
    tear_down(p, [kpe, ppe], (producer, consumer), &[hello, list, r1, r2, small, r3, r4, r5], [sinv, cinv], [sm, cm]);
}

/// A producer rings the consumer's PE only while it sleeps (armed, a receive posted): a
/// polling consumer finds its receives done by itself, with no system call per message. An
/// armed PE is rung by a send, and one armed after a send that did not ring it sees the
/// finished receive at its arm.
#[test]
fn a_producer_rings_only_a_sleeping_consumer() {
    use crate::pe::doca_pe_clear_notification;
    let (p, sconn, cconn) = connected("fast-sleep");
    let (kpe, ppe) = (new_pe(), new_pe());
    let pes = [p.spe, p.cpe, kpe, ppe];
    let mut smem = vec![0u8; 4096];
    let mut cmem = vec![0u8; 64];
    let (sm, cm) = (mmap_over(p.dev, &mut smem), mmap_over(p.dev, &mut cmem));
    let (mut sinv, mut cinv) = (ptr::null_mut(), ptr::null_mut());
    let (mut consumer, mut producer, mut cid) = (ptr::null_mut(), ptr::null_mut(), 0u32);
    // SAFETY: live objects and valid out-pointers throughout.
    unsafe {
        for inv in [&mut sinv, &mut cinv] {
            ok(doca_buf_inventory_create(16, inv));
            ok(doca_buf_inventory_start(*inv));
        }
        ok(doca_comch_consumer_create(sconn, sm, &mut consumer));
        ok(doca_comch_consumer_get_id(consumer, &mut cid));
        ok(doca_comch_consumer_task_post_recv_set_conf(consumer, Some(on_post_recv), Some(on_post_recv), 4));
        ok(doca_pe_connect_ctx(kpe, doca_comch_consumer_as_ctx(consumer)));
        assert_eq!(doca_ctx_start(doca_comch_consumer_as_ctx(consumer)), DOCA_ERROR_IN_PROGRESS);
        pump_until(&pes, || state(doca_comch_consumer_as_ctx(consumer)) == DOCA_CTX_STATE_RUNNING);
        pump_until(&pes, || SEEN.with(|s| s.borrow().contains(&Seen::Consumer(cconn as usize, cid, true))));
        take();
        ok(doca_comch_producer_create(cconn, &mut producer));
        ok(doca_comch_producer_task_send_set_conf(producer, Some(on_send), Some(on_send), 8));
        ok(doca_pe_connect_ctx(ppe, doca_comch_producer_as_ctx(producer)));
        ok(doca_ctx_start(doca_comch_producer_as_ctx(producer)));
    }
    let (sp, cp) = (smem.as_mut_ptr(), cmem.as_mut_ptr());
    let msg = buf(cinv, cm, cp, 8, 8);
    let kfd = pe_fd(kpe);
    let recv_into = |at: usize| {
        let b = buf(sinv, sm, sp.wrapping_add(at), 64, 0);
        post(consumer, b);
        b
    };
    let received = || {
        pump_until(&[kpe, ppe], || FAST.with(|f| f.borrow().iter().filter(|(k, _)| *k == "recv").count() == 1));
        pump(&[ppe]);
        let got = fast();
        assert!(got.iter().all(|&(_, st)| st == DOCA_SUCCESS), "{got:?}");
        for t in RECVS.with(|r| core::mem::take(&mut *r.borrow_mut())) {
            // SAFETY: our completed task.
            unsafe { doca_task_free(doca_comch_consumer_task_post_recv_as_task(t)) };
        }
    };

    // Polling (never armed): no ring, the handle stays quiet, progress finds the receive.
    let r1 = recv_into(0);
    ok(send(producer, msg, &[], cid));
    assert!(!readable(kfd, 50), "a polling consumer is not rung");
    received();

    // Armed with a receive posted: the send rings.
    let r2 = recv_into(64);
    // SAFETY: a live PE of this thread.
    ok(unsafe { doca_pe_request_notification(kpe) });
    assert!(!readable(kfd, 0), "nothing done yet");
    ok(send(producer, msg, &[], cid));
    assert!(readable(kfd, 5_000), "a sleeping consumer is rung");
    // SAFETY: as above.
    ok(unsafe { doca_pe_clear_notification(kpe, kfd as _) });
    received();

    // Disarmed again (the progress above lowered the line): a send does not ring; arming
    // afterwards finds the finished receive and makes the handle readable at once.
    let r3 = recv_into(128);
    ok(send(producer, msg, &[], cid));
    pump(&[ppe]);
    assert!(!readable(kfd, 50), "a consumer that was woken and disarmed is not rung");
    // SAFETY: as above.
    ok(unsafe { doca_pe_request_notification(kpe) });
    assert!(readable(kfd, 0), "the arm sees the receive a producer finished before it");
    // SAFETY: as above.
    ok(unsafe { doca_pe_clear_notification(kpe, kfd as _) });
    received();

    // SAFETY: live objects, torn down in order.
    unsafe {
        ok(doca_ctx_stop(doca_comch_producer_as_ctx(producer)));
        ok(doca_ctx_stop(doca_comch_consumer_as_ctx(consumer)));
        pump(&pes);
    }
    tear_down(p, [kpe, ppe], (producer, consumer), &[msg, r1, r2, r3], [sinv, cinv], [sm, cm]);
}
