//! The fast path across threads, as DOCA allows it: a consumer or producer created, started,
//! progressed and destroyed on a thread other than the one that progresses its connection's
//! server or client, each on its own PE. Messages arrive in order with their producer id and
//! immediate bytes; a withdrawal under a sending producer fails its sends (never a write into
//! memory given back); the objects go in either order with their connection's endpoint, and
//! the device closes at the end (a connection left allocated would hold it).
//!
//! Pointers cross threads as addresses: the provider objects they name are used by one thread
//! at a time, as DOCA requires; the connection's shared parts are what the change made
//! thread-safe. Every wait is bounded by [`WAIT`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use super::*;
use crate::pe::doca_pe_progress;

/// The bound of every wait of these tests.
const WAIT: Duration = Duration::from_secs(30);

/// Progresses `pes` until `f` holds; panics after [`WAIT`].
fn pump_for(pes: &[*mut doca_pe], mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !f() {
        assert!(Instant::now() < deadline, "condition never held");
        for &pe in pes {
            // SAFETY: live PEs of the calling thread.
            unsafe { doca_pe_progress(pe) };
        }
    }
}

/// The next value from `rx`, progressing `pes` meanwhile (the other thread may need them).
fn recv_pumping<T>(rx: &Receiver<T>, pes: &[*mut doca_pe]) -> T {
    let mut got = None;
    pump_for(pes, || {
        got = got.take().or_else(|| rx.try_recv().ok());
        got.is_some()
    });
    got.expect("received")
}

/// The post-receive tasks completed on this thread so far, in completion order.
fn recvs() -> Vec<*mut doca_comch_consumer_task_post_recv> {
    RECVS.with(|r| core::mem::take(&mut *r.borrow_mut()))
}

fn sends_done() -> usize {
    FAST.with(|f| f.borrow().iter().filter(|(k, _)| *k == "send").count())
}

/// A consumer on `conn` made by the calling thread on a PE of its own, started and RUNNING,
/// with `n` post-receive tasks and 8 immediate bytes: (consumer, its PE, its id).
fn start_consumer(
    conn: *mut doca_comch_connection,
    m: *mut doca_mmap,
    n: u32,
) -> (*mut doca_comch_consumer, *mut doca_pe, u32) {
    let kpe = new_pe();
    let (mut consumer, mut id) = (ptr::null_mut(), 0);
    // SAFETY: a live connection and mmap, valid out-pointers.
    unsafe {
        ok(doca_comch_consumer_create(conn, m, &mut consumer));
        ok(doca_comch_consumer_get_id(consumer, &mut id));
        ok(doca_comch_consumer_set_imm_data_len(consumer, 8));
        ok(doca_comch_consumer_task_post_recv_set_conf(consumer, Some(on_post_recv), Some(on_post_recv), n));
        ok(doca_pe_connect_ctx(kpe, doca_comch_consumer_as_ctx(consumer)));
        assert_eq!(doca_ctx_start(doca_comch_consumer_as_ctx(consumer)), DOCA_ERROR_IN_PROGRESS);
    }
    // SAFETY: the live consumer.
    let ctx = unsafe { doca_comch_consumer_as_ctx(consumer) };
    pump_for(&[kpe], || state(ctx) == DOCA_CTX_STATE_RUNNING);
    (consumer, kpe, id)
}

/// A producer on `conn` made by the calling thread on a PE of its own, started, with `n` send
/// tasks: (producer, its PE, its id).
fn start_producer(conn: *mut doca_comch_connection, n: u32) -> (*mut doca_comch_producer, *mut doca_pe, u32) {
    let ppe = new_pe();
    let (mut producer, mut id) = (ptr::null_mut(), 0);
    // SAFETY: a live connection, valid out-pointers.
    unsafe {
        ok(doca_comch_producer_create(conn, &mut producer));
        ok(doca_comch_producer_get_id(producer, &mut id));
        ok(doca_comch_producer_task_send_set_conf(producer, Some(on_send), Some(on_send), n));
        ok(doca_pe_connect_ctx(ppe, doca_comch_producer_as_ctx(producer)));
        ok(doca_ctx_start(doca_comch_producer_as_ctx(producer)));
    }
    (producer, ppe, id)
}

/// Stops `ctx` and progresses `pes` until it is IDLE.
fn stop_ctx(ctx: *mut crate::ctx::doca_ctx, pes: &[*mut doca_pe]) {
    // SAFETY: a live ctx.
    let r = unsafe { doca_ctx_stop(ctx) };
    assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{r:?}");
    pump_for(pes, || state(ctx) == DOCA_CTX_STATE_IDLE);
}

/// A started inventory of `n` buffers.
fn inventory(n: u32) -> *mut doca_buf_inventory {
    let mut inv = ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe {
        ok(doca_buf_inventory_create(n as usize, &mut inv));
        ok(doca_buf_inventory_start(inv));
    }
    inv
}

/// Gives back buffers and destroys their inventory.
fn drop_bufs(bufs: &[*mut doca_buf], inv: *mut doca_buf_inventory) {
    // SAFETY: live buffers of the caller, given back once; then their empty inventory.
    unsafe {
        for &b in bufs {
            ok(doca_buf_dec_refcount(b, ptr::null_mut()));
        }
        ok(doca_buf_inventory_destroy(inv));
    }
}

fn message(i: usize) -> Vec<u8> {
    format!("message {i:04}").into_bytes()
}

/// Checks the completed receives of `bufs` (posted in that order, one message each, `first`
/// the index of the first message): in posting order, each with the producer's id, its
/// immediate bytes and its data; then frees the tasks.
fn check_received(bufs: &[*mut doca_buf], first: usize, producer_id: u32) {
    let done = fast();
    assert!(done.iter().all(|&(k, st)| k == "recv" && st == DOCA_SUCCESS), "{done:?}");
    let tasks = recvs();
    assert_eq!(tasks.len(), bufs.len());
    for (i, (&t, &b)) in tasks.iter().zip(bufs).enumerate() {
        let k = first + i;
        // SAFETY: our completed tasks, read then freed once.
        unsafe {
            assert_eq!(doca_comch_consumer_task_post_recv_get_buf(t), b, "completed in posting order");
            assert_eq!(doca_comch_consumer_task_post_recv_get_producer_id(t), producer_id);
            let n = doca_comch_consumer_task_post_recv_get_imm_data_len(t) as usize;
            let imm = core::slice::from_raw_parts(doca_comch_consumer_task_post_recv_get_imm_data(t), n);
            assert_eq!(imm, [k as u8; 8]);
            doca_task_free(doca_comch_consumer_task_post_recv_as_task(t));
        }
        assert_eq!(data_of(b), message(k));
    }
}

/// Sends message `k`'s buffer `b` (with `[k; 8]` as immediate bytes) to consumer `cid`.
fn send_to(producer: *mut doca_comch_producer, b: *mut doca_buf, k: usize, cid: u32) -> doca_error_t {
    send(producer, b, &[k as u8; 8], cid)
}

/// Sends messages `0..n` to consumer `cid`, each from its 16 bytes of `mem` (in `m`); returns
/// the source buffers once every send completed (successfully).
fn send_all(
    producer: *mut doca_comch_producer,
    ppe: *mut doca_pe,
    m: *mut doca_mmap,
    mem: *mut u8,
    inv: *mut doca_buf_inventory,
    n: usize,
    cid: u32,
) -> Vec<*mut doca_buf> {
    let mut bufs = Vec::new();
    for k in 0..n {
        let at = mem.wrapping_add(k * 16);
        let msg = message(k);
        // SAFETY: 16 bytes of `mem` per message (the callers' layout).
        unsafe { core::ptr::copy_nonoverlapping(msg.as_ptr(), at, msg.len()) };
        let b = buf(inv, m, at, msg.len(), msg.len());
        ok(send_to(producer, b, k, cid));
        bufs.push(b);
    }
    pump_for(&[ppe], || sends_done() == n);
    let done = fast();
    assert!(done.iter().all(|&(k, st)| k == "send" && st == DOCA_SUCCESS), "{done:?}");
    bufs
}

/// A consumer on thread B over the server's connection, which thread A progresses, receives
/// the client's producer's messages in order; it is destroyed before (`late` false) or after
/// (`late` true) the server and client are stopped and destroyed.
fn consumer_on_another_thread(tag: &str, late: bool) {
    const N: usize = 32;
    let (p, sconn, cconn) = connected(tag);
    let mut smem = vec![0u8; N * 64];
    let mut cmem = vec![0u8; N * 16];
    let (sm, cm) = (mmap_over(p.dev, &mut smem), mmap_over(p.dev, &mut cmem));
    let (to_b, from_a) = channel::<u32>();
    let (to_a, from_b) = channel::<u32>();
    let (sconn_at, sm_at, smem_at) = (sconn as usize, sm as usize, smem.as_mut_ptr() as usize);
    std::thread::scope(|s| {
        s.spawn(move || {
            let sm = sm_at as *mut doca_mmap;
            let (consumer, kpe, cid) = start_consumer(sconn_at as *mut _, sm, N as u32);
            let inv = inventory(N as u32);
            let bufs: Vec<_> = (0..N).map(|i| buf(inv, sm, (smem_at + i * 64) as *mut u8, 64, 0)).collect();
            for &b in &bufs {
                post(consumer, b);
            }
            to_a.send(cid).unwrap();
            let pid = from_a.recv_timeout(WAIT).expect("the producer's id");
            pump_for(&[kpe], || RECVS.with(|r| r.borrow().len()) == N);
            check_received(&bufs, 0, pid);
            // SAFETY: the live consumer.
            stop_ctx(unsafe { doca_comch_consumer_as_ctx(consumer) }, &[kpe]);
            to_a.send(0).unwrap();
            if late {
                from_a.recv_timeout(WAIT).expect("the endpoints are gone");
            }
            // SAFETY: the stopped consumer, destroyed once; it frees an orphaned connection.
            ok(unsafe { doca_comch_consumer_destroy(consumer) });
            drop_bufs(&bufs, inv);
            destroy_pe(kpe);
            to_a.send(0).unwrap();
        });
        // Thread A: the server and the client, and the client's producer.
        let pes = [p.spe, p.cpe];
        let cid = recv_pumping(&from_b, &pes);
        // The announcement went through the connection's outbox and the server's progress.
        pump_for(&pes, || SEEN.with(|s| s.borrow().contains(&Seen::Consumer(cconn as usize, cid, true))));
        let (producer, ppe, pid) = start_producer(cconn, N as u32);
        let cinv = inventory(N as u32 + 1);
        let sent = send_all(producer, ppe, cm, cmem.as_mut_ptr(), cinv, N, cid);
        to_b.send(pid).unwrap();
        recv_pumping(&from_b, &pes);
        // The stop's withdrawal went the same way: the client sees the consumer expire, and a
        // send to it is refused.
        pump_for(&pes, || SEEN.with(|s| s.borrow().contains(&Seen::Consumer(cconn as usize, cid, false))));
        let last = buf(cinv, cm, cmem.as_mut_ptr(), 4, 4);
        assert_eq!(send_to(producer, last, 0, cid), DOCA_ERROR_NOT_CONNECTED);
        // SAFETY: the live producer, stopped and destroyed once.
        unsafe {
            stop_ctx(doca_comch_producer_as_ctx(producer), &[ppe]);
            ok(doca_comch_producer_destroy(producer));
        }
        destroy_pe(ppe);
        drop_bufs(&[sent.as_slice(), &[last]].concat(), cinv);
        take();
        if late {
            // SAFETY: live endpoints, stopped and destroyed once; the server's connection is
            // left to the consumer (an orphan), which thread B frees.
            unsafe {
                stop_ctx(p.cctx(), &pes);
                stop_ctx(p.sctx(), &pes);
                ok(doca_comch_client_destroy(p.client));
                ok(doca_comch_server_destroy(p.server));
            }
            destroy_pe(p.spe);
            destroy_pe(p.cpe);
            to_b.send(0).unwrap();
            from_b.recv_timeout(WAIT).expect("the consumer is destroyed");
            // SAFETY: nothing uses them any more.
            unsafe {
                ok(doca_mmap_destroy(sm));
                ok(doca_mmap_destroy(cm));
                // The orphan held the device: it was freed.
                ok(doca_dev_close(p.dev));
            }
        } else {
            recv_pumping(&from_b, &pes);
            // SAFETY: nothing uses them any more.
            unsafe {
                ok(doca_mmap_destroy(sm));
                ok(doca_mmap_destroy(cm));
            }
            p.finish();
        }
    });
}

#[test]
fn a_consumer_on_another_thread_receives_in_order_and_goes_before_its_server() {
    consumer_on_another_thread("thr-cons-early", false);
}

#[test]
fn a_consumer_on_another_thread_outlives_its_server_and_frees_the_orphan() {
    consumer_on_another_thread("thr-cons-late", true);
}

/// A producer on thread B over the client's connection, which thread A progresses, sends to a
/// consumer of thread A: in order. Then A's consumer is withdrawn while B keeps sending: B's
/// sends fail with NOT_CONNECTED from then on (never another error, never a write into the
/// buffers A gave back: A overwrites them after the stop and checks they stay so).
#[test]
fn a_producer_on_another_thread_sends_in_order_and_sees_its_consumer_withdrawn() {
    const N: usize = 32;
    let (p, sconn, cconn) = connected("thr-prod");
    let mut smem = vec![0u8; N * 64];
    let mut cmem = vec![0u8; N * 16];
    let (sm, cm) = (mmap_over(p.dev, &mut smem), mmap_over(p.dev, &mut cmem));
    let (consumer, kpe, cid) = start_consumer(sconn, sm, N as u32);
    let pes = [p.spe, p.cpe, kpe];
    pump_for(&pes, || SEEN.with(|s| s.borrow().contains(&Seen::Consumer(cconn as usize, cid, true))));
    take();
    let sinv = inventory(N as u32);
    let sp = smem.as_mut_ptr();
    let bufs: Vec<_> = (0..N).map(|i| buf(sinv, sm, sp.wrapping_add(i * 64), 64, 0)).collect();
    for &b in &bufs {
        post(consumer, b);
    }
    let (to_b, from_a) = channel::<u32>();
    let (to_a, from_b) = channel::<u32>();
    let (cconn_at, cm_at, cmem_at) = (cconn as usize, cm as usize, cmem.as_mut_ptr() as usize);
    std::thread::scope(|s| {
        s.spawn(move || {
            let cm = cm_at as *mut doca_mmap;
            let (producer, ppe, pid) = start_producer(cconn_at as *mut _, N as u32);
            let inv = inventory(N as u32 + 1);
            let mut sent = send_all(producer, ppe, cm, cmem_at as *mut u8, inv, N, cid);
            to_a.send(pid).unwrap();
            // Sends until the withdrawal shows: while A reposts, some succeed, some find
            // nothing posted; once A stopped the consumer, NOT_CONNECTED.
            let b = buf(inv, cm, cmem_at as *mut u8, 12, 12);
            sent.push(b);
            let (mut oks, mut refused) = (0usize, false);
            let deadline = Instant::now() + WAIT;
            while !refused {
                assert!(Instant::now() < deadline, "the withdrawal never showed");
                match send_to(producer, b, 0, cid) {
                    DOCA_SUCCESS => oks += 1,
                    DOCA_ERROR_AGAIN => {}
                    DOCA_ERROR_NOT_CONNECTED => refused = true,
                    e => panic!("a send to a consumer being withdrawn failed with {e:?}"),
                }
                // Completions free their tasks: the pool never runs out.
                // SAFETY: the live PE of this thread.
                while unsafe { doca_pe_progress(ppe) } != 0 {}
            }
            pump_for(&[ppe], || sends_done() == oks);
            let done = fast();
            assert!(done.iter().all(|&(_, st)| st == DOCA_SUCCESS), "{done:?}");
            to_a.send(oks as u32).unwrap();
            // A gave its buffers back and overwrote them: sends still fail, and write nothing.
            from_a.recv_timeout(WAIT).expect("A's buffers are given back");
            for _ in 0..100 {
                assert_eq!(send_to(producer, b, 0, cid), DOCA_ERROR_NOT_CONNECTED);
            }
            // SAFETY: the live producer, stopped and destroyed once.
            unsafe {
                stop_ctx(doca_comch_producer_as_ctx(producer), &[ppe]);
                ok(doca_comch_producer_destroy(producer));
            }
            destroy_pe(ppe);
            drop_bufs(&sent, inv);
            to_a.send(0).unwrap();
        });
        let pid = recv_pumping(&from_b, &pes);
        pump_for(&pes, || RECVS.with(|r| r.borrow().len()) == N);
        check_received(&bufs, 0, pid);
        // Reposts while B sends, then withdraws the consumer in the middle of B's sends.
        let mut received = 0;
        for &b in &bufs {
            // SAFETY: a live buffer whose receive completed.
            ok(unsafe { doca_buf_reset_data_len(b) });
            post(consumer, b);
        }
        pump_for(&pes, || {
            for t in recvs() {
                received += 1;
                // SAFETY: our completed task; its buffer posted again on a new task.
                let b = unsafe { doca_comch_consumer_task_post_recv_get_buf(t) };
                // SAFETY: as above.
                unsafe {
                    doca_task_free(doca_comch_consumer_task_post_recv_as_task(t));
                    ok(doca_buf_reset_data_len(b));
                }
                post(consumer, b);
            }
            received >= 200
        });
        // SAFETY: the live consumer.
        let kctx = unsafe { doca_comch_consumer_as_ctx(consumer) };
        // SAFETY: as above.
        let r = unsafe { doca_ctx_stop(kctx) };
        assert!(r == DOCA_SUCCESS || r == DOCA_ERROR_IN_PROGRESS, "{r:?}");
        // The stop ends once its flushed receives are freed.
        pump_for(&pes, || {
            for t in recvs() {
                // SAFETY: our completed or flushed tasks.
                unsafe { doca_task_free(doca_comch_consumer_task_post_recv_as_task(t)) };
            }
            state(kctx) == DOCA_CTX_STATE_IDLE
        });
        let oks = recv_pumping(&from_b, &pes) as usize;
        // Every receive completed with success was a send B saw accepted (a receive finished
        // but not completed before the stop is flushed instead).
        let ok_recvs = fast().iter().filter(|&&(_, st)| st == DOCA_SUCCESS).count();
        assert!(received <= ok_recvs && ok_recvs <= oks && oks >= 200, "{received} {ok_recvs} {oks}");
        // The buffers are given back: a stray write would land in them now.
        smem.fill(0xEE);
        to_b.send(0).unwrap();
        recv_pumping(&from_b, &pes);
        assert!(smem.iter().all(|&x| x == 0xEE), "nothing was written after the withdrawal");
    });
    // SAFETY: the stopped consumer, destroyed once; then what the test made.
    unsafe { ok(doca_comch_consumer_destroy(consumer)) };
    destroy_pe(kpe);
    drop_bufs(&bufs, sinv);
    // SAFETY: nothing uses them any more.
    unsafe {
        ok(doca_mmap_destroy(sm));
        ok(doca_mmap_destroy(cm));
    }
    take();
    p.finish();
}

/// Two threads, each with its own consumer (server side) and producer (client side) over one
/// connection, which the main thread progresses: each sends to its own consumer, in rounds
/// that make and destroy both objects again. Bounded: 3 rounds of 100 messages per thread.
#[test]
fn two_threads_with_their_own_consumer_and_producer_over_one_connection() {
    const ROUNDS: usize = 3;
    const MSGS: usize = 100;
    let (p, sconn, cconn) = connected("thr-stress");
    let (sconn_at, cconn_at, dev_at) = (sconn as usize, cconn as usize, p.dev as usize);
    let finished = AtomicUsize::new(0);
    let pes = [p.spe, p.cpe];
    std::thread::scope(|s| {
        for _ in 0..2 {
            let finished = &finished;
            s.spawn(move || {
                let dev = dev_at as *mut doca_dev;
                let mut smem = vec![0u8; 64];
                let mut cmem = vec![0u8; 16];
                let (sm, cm) = (mmap_over(dev, &mut smem), mmap_over(dev, &mut cmem));
                let (sinv, cinv) = (inventory(4), inventory(4));
                for round in 0..ROUNDS {
                    let (consumer, kpe, cid) = start_consumer(sconn_at as *mut _, sm, 4);
                    let (producer, ppe, pid) = start_producer(cconn_at as *mut _, 4);
                    let r = buf(sinv, sm, smem.as_mut_ptr(), 64, 0);
                    let cp = cmem.as_mut_ptr();
                    for k in 0..MSGS {
                        let msg = message(round * MSGS + k);
                        // SAFETY: 16 bytes of `cmem`, not in flight (the last send completed).
                        unsafe { core::ptr::copy_nonoverlapping(msg.as_ptr(), cp, msg.len()) };
                        let b = buf(cinv, cm, cp, msg.len(), msg.len());
                        // SAFETY: a live buffer whose receive completed (or a fresh one).
                        ok(unsafe { doca_buf_reset_data_len(r) });
                        post(consumer, r);
                        // Until the client side saw the announcement: NOT_CONNECTED.
                        let deadline = Instant::now() + WAIT;
                        loop {
                            match send_to(producer, b, k, cid) {
                                DOCA_SUCCESS => break,
                                DOCA_ERROR_NOT_CONNECTED if k == 0 => {}
                                e => panic!("send {k}: {e:?}"),
                            }
                            assert!(Instant::now() < deadline, "the consumer was never announced");
                            std::thread::yield_now();
                        }
                        pump_for(&[kpe, ppe], || sends_done() == 1 && RECVS.with(|t| t.borrow().len()) == 1);
                        let done = fast();
                        assert!(done.iter().all(|&(_, st)| st == DOCA_SUCCESS), "{done:?}");
                        let t = recvs()[0];
                        // SAFETY: our completed task, read then freed.
                        unsafe {
                            assert_eq!(doca_comch_consumer_task_post_recv_get_producer_id(t), pid);
                            doca_task_free(doca_comch_consumer_task_post_recv_as_task(t));
                        }
                        assert_eq!(data_of(r), msg);
                        // SAFETY: the source buffer, its send completed.
                        ok(unsafe { doca_buf_dec_refcount(b, ptr::null_mut()) });
                    }
                    // SAFETY: live objects of this thread, stopped and destroyed once.
                    unsafe {
                        stop_ctx(doca_comch_producer_as_ctx(producer), &[ppe]);
                        stop_ctx(doca_comch_consumer_as_ctx(consumer), &[kpe]);
                        ok(doca_comch_producer_destroy(producer));
                        ok(doca_comch_consumer_destroy(consumer));
                        ok(doca_buf_dec_refcount(r, ptr::null_mut()));
                    }
                    destroy_pe(ppe);
                    destroy_pe(kpe);
                }
                drop_bufs(&[], sinv);
                drop_bufs(&[], cinv);
                // SAFETY: nothing uses them any more.
                unsafe {
                    ok(doca_mmap_destroy(sm));
                    ok(doca_mmap_destroy(cm));
                }
                finished.fetch_add(1, Ordering::Release);
            });
        }
        pump_for(&pes, || finished.load(Ordering::Acquire) == 2);
    });
    // Every consumer was announced and withdrawn, through the outbox, in that order.
    let mut seen = Vec::new();
    pump_for(&pes, || {
        seen.extend(take().into_iter().filter(|e| matches!(e, Seen::Consumer(..))));
        seen.len() >= 2 * 2 * ROUNDS
    });
    assert_eq!(seen.len(), 2 * 2 * ROUNDS, "{seen:?}");
    for e in &seen {
        if let Seen::Consumer(c, id, true) = e {
            let gone = seen.iter().position(|x| *x == Seen::Consumer(*c, *id, false));
            let new = seen.iter().position(|x| x == e);
            assert!(gone > new, "consumer {id} withdrawn after its announcement");
        }
    }
    p.finish();
}
