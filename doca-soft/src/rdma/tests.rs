//! RDMA tests: every operation in-process (two ctxs on two PEs in one thread) with data
//! checks, flow control, ordering, error state and reconnection, access violations, bad
//! blobs, queue limits, event-mode wake-ups, the NULL table, and cross-process runs (the test
//! binary re-executes itself) including a peer killed mid-stream.

use core::ptr;
use std::time::{Duration, Instant};

use super::accessors::*;
use super::conn::ConnState;
use super::props::*;
use super::ring::ring_bytes_for;
use super::tasks::*;
use super::*;
use crate::buf::*;
use crate::ctx::*;
use crate::mmap::*;
use crate::pe::*;
use crate::task::*;
use crate::testkit::rdma::*;

/// A ctx of this many connections has receive rings of [`SMALL_RING`] bytes: the tests that
/// fill a ring or stream messages larger than it configure it, to keep their messages small.
pub(super) const SMALL_RING_CONNS: u16 = 4;
/// The receive ring of a ctx of [`SMALL_RING_CONNS`] connections.
pub(super) const SMALL_RING: usize = ring_bytes_for(SMALL_RING_CONNS);

const T: Duration = Duration::from_secs(20);

/// Two started sides, connected; b's memory imported on a: (a, b, ca, cb, b's mmap on a,
/// b's base address).
fn fresh(cfg_a: Cfg, cfg_b: Cfg) -> (Side, Side, *mut doca_rdma_connection, *mut doca_rdma_connection) {
    take_recs();
    let a = Side::new(1, cfg_a);
    let b = Side::new(2, cfg_b);
    let (ca, cb) = connect_pair(&a, &b);
    (a, b, ca, cb)
}

fn u64_at(s: &Side, off: usize) -> u64 {
    u64::from_ne_bytes(s.mem()[off..off + 8].try_into().unwrap())
}

/// The every-opcode test itself (send, send with immediate, write with immediate: results,
/// immediates, connection, payloads, appending to a partly filled buffer) is in the
/// conformance suite: tests/conformance.rs, rdma_send_receive_with_every_opcode. What it
/// leaves to the soft provider: an empty send without a buffer is matched, in order behind a
/// write with immediate, with a receive without one; the write with immediate leaves its
/// receive's buffer empty and grows the remote destination's payload.
#[test]
fn empty_sends_need_no_buffer_and_a_write_grows_its_destination() {
    let (a, b, ca, cb) = fresh(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    let r3 = b.buf(128, 64, 0);
    b.recv(r3, 12).unwrap();
    b.recv(ptr::null_mut(), 13).unwrap();
    a.mem()[16..20].copy_from_slice(b"WXYZ");
    let imm2 = 0xAABB_CCDDu32.to_be();
    let wdst = a.rbuf(bm, base + 4096, 16, 0);
    a.write_imm(ca, a.buf(16, 4, 4), wdst, imm2, 3).unwrap();
    a.send(ca, ptr::null_mut(), 4).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 4));
    let recs = take_recs();
    let sa = recs_of(&recs, 1);
    assert_eq!(
        sa.iter().map(|r| (r.kind, r.ud, r.status)).collect::<Vec<_>>(),
        vec![("write_imm", 3, DOCA_SUCCESS), ("send", 4, DOCA_SUCCESS)]
    );
    let sb = recs_of(&recs, 2);
    let got: Vec<_> = sb.iter().map(|r| (r.ud, r.status, r.opcode, r.len, r.imm, r.conn)).collect();
    let c = cb as usize;
    assert_eq!(
        got,
        vec![
            (12, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM, 4, imm2, c),
            (13, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_SEND, 0, 0, c),
        ]
    );
    assert_eq!(&b.mem()[4096..4100], b"WXYZ");
    assert_eq!(data_len(r3), 0);
    assert_eq!(data_len(wdst), 4, "the remote destination's payload grew");
    a.destroy();
    b.destroy();
}

// The one-sided operations' results (write, read, fetch-add, compare-and-swap with and
// without a swap, no target progress needed) are checked for every provider by the
// conformance suite: tests/conformance.rs, rdma_one_sided_write_read_and_atomics_need_no_target_progress.

#[test]
fn large_messages_stream_through_the_ring() {
    let big = Cfg { mem_len: 8 << 20, ..Cfg::default() };
    let (a, b, ca, _cb) = fresh(big, big);
    for (i, x) in a.mem().iter_mut().enumerate() {
        *x = (i * 7 + i / 4096) as u8;
    }
    let one_mib = 1 << 20;
    let three = 3 << 20;
    let r1 = b.buf(0, one_mib, 0);
    let r2 = b.buf(one_mib, three, 0);
    b.recv(r1, 10).unwrap();
    b.recv(r2, 11).unwrap();
    a.send(ca, a.buf(0, one_mib, one_mib), 1).unwrap();
    a.send_imm(ca, a.buf(12345, three, three), 77, 2).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 4));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    let rb = recs_of(&recs, 2);
    assert_eq!((rb[0].len, rb[1].len, rb[1].imm), (one_mib as u32, three as u32, 77));
    assert!(b.mem()[..one_mib] == a.mem()[..one_mib]);
    assert!(b.mem()[one_mib..one_mib + three] == a.mem()[12345..12345 + three]);
    // Above MAX_MESSAGE_BYTES: refused at submit (the memory is never touched: calloc'd).
    let huge = vec![0u8; MAX_MESSAGE_BYTES + 1];
    let mut m = ptr::null_mut();
    let mut hb = ptr::null_mut();
    // SAFETY: live objects; `huge` outlives the mmap and buffer.
    unsafe {
        ok(doca_mmap_create(&mut m));
        ok(doca_mmap_set_memrange(m, huge.as_ptr() as *mut _, huge.len()));
        ok(doca_mmap_add_dev(m, a.dev));
        ok(doca_mmap_start(m));
        ok(doca_buf_inventory_buf_get_by_args(
            a.inv,
            m,
            huge.as_ptr() as *mut _,
            huge.len(),
            huge.as_ptr() as *mut _,
            huge.len(),
            &mut hb,
        ));
    }
    assert_eq!(a.send(ca, hb, 3), Err(DOCA_ERROR_TOO_BIG));
    // SAFETY: our buffer and mmap.
    unsafe {
        ok(doca_buf_dec_refcount(hb, ptr::null_mut()));
        ok(doca_mmap_destroy(m));
    }
    // The refusal did not break anything.
    let r3 = b.buf(5 << 20, 16, 0);
    b.recv(r3, 12).unwrap();
    a.send(ca, a.buf(0, 16, 16), 4).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    a.destroy();
    b.destroy();
}

#[test]
fn flow_control_keeps_messages_until_receives_are_posted() {
    let cfg = Cfg { mem_len: 4 << 20, sq: 64, rq: 64, num_tasks: 64, max_conns: SMALL_RING_CONNS, ..Cfg::default() };
    let (a, b, ca, _cb) = fresh(cfg, cfg);
    let n = 40usize;
    let sz = 16 * 1024;
    for i in 0..n {
        a.mem()[i * sz..(i + 1) * sz].fill(i as u8 + 1);
        a.send(ca, a.buf(i * sz, sz, sz), i as u64).unwrap();
    }
    drain(&[a.pe, b.pe]);
    let done = take_recs();
    assert!(done.iter().all(|r| r.side == 1 && r.status == DOCA_SUCCESS));
    let first = done.len();
    assert!(
        first < n && first >= (SMALL_RING / (sz + 16)) - 1,
        "the ring holds about {} messages; {first} sends completed",
        SMALL_RING / sz
    );
    // Post receives: everything arrives, in order, nothing lost.
    for i in 0..n {
        b.recv(b.buf((2 << 20) + i * sz, sz, 0), 100 + i as u64).unwrap();
    }
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2 * n - first));
    let recs = take_recs();
    let rb = recs_of(&recs, 2);
    assert_eq!(rb.len(), n);
    for (i, r) in rb.iter().enumerate() {
        assert_eq!((r.ud, r.status, r.len), (100 + i as u64, DOCA_SUCCESS, sz as u32));
        let off = (2 << 20) + i * sz;
        assert!(b.mem()[off..off + sz].iter().all(|&x| x == i as u8 + 1), "message {i}");
    }
    let sa = recs_of(&recs, 1);
    assert_eq!(sa.iter().map(|r| r.ud).collect::<Vec<_>>(), (first as u64..n as u64).collect::<Vec<_>>());
    a.destroy();
    b.destroy();
}

#[test]
fn write_imm_consumes_one_receive_in_order() {
    let (a, b, ca, _cb) = fresh(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    a.mem()[0..8].copy_from_slice(b"12345678");
    let rbuf = b.buf(0, 64, 0);
    b.recv(rbuf, 10).unwrap();
    a.write_imm(ca, a.buf(0, 8, 8), a.rbuf(bm, base + 256, 8, 0), 9, 1).unwrap();
    a.send(ca, a.buf(0, 3, 3), 2).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 3));
    let recs = take_recs();
    let rb = recs_of(&recs, 2);
    assert_eq!(rb.len(), 1, "the send waits for a second receive");
    assert_eq!((rb[0].opcode, rb[0].len, rb[0].imm), (DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM, 8, 9));
    assert_eq!(data_len(rbuf), 0, "write-with-immediate puts nothing in the receive buffer");
    assert_eq!(&b.mem()[256..264], b"12345678", "the data is visible when the receive completes");
    b.recv(rbuf, 11).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 1));
    let r = take_recs();
    assert_eq!((r[0].ud, r[0].opcode, r[0].len), (11, DOCA_RDMA_OPCODE_RECV_SEND, 3));
    assert_eq!(&b.mem()[0..3], b"123");
    a.destroy();
    b.destroy();
}

/// 100 000 mixed operations on one connection: every completion in submission order, every
/// message in order with the right bytes, reads see earlier writes, fetch-adds count. Sends
/// are submitted faster than the receiver drains, so one-sided operations regularly queue
/// behind sends blocked on the full ring.
#[test]
fn ordering_over_100k_mixed_ops() {
    let cfg = Cfg { mem_len: 8 << 20, sq: 256, rq: 256, num_tasks: 256, max_conns: SMALL_RING_CONNS, ..Cfg::default() };
    let (a, b, ca, _cb) = fresh(cfg, cfg);
    let (bm, base) = a.import(&b.export_mem());
    const N: usize = 100_000;
    const BATCH: usize = 200;
    const SLOT: usize = 16 * 1024;
    const SMALL: usize = 64;
    // a: [0, 4 MiB) send payloads and write sources (a slot per op of the batch),
    //    [4 MiB, +SMALL per slot) read destinations, 5 MiB: fetch-add results.
    // b: [0, 4 MiB) receive buffers, [4 MiB, +SMALL per slot) write targets, 6 MiB: counter.
    let (rd, wt, res, counter) = (4 << 20, 4 << 20, 5 << 20, 6 << 20);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut next_ud = 0u64;
    let mut adds = 0u64;
    let mut blocked_seen = false;
    // What b's write targets hold (as a model), to check reads.
    let mut target = [0u8; BATCH];
    while next_ud < N as u64 {
        let kinds: Vec<u64> = (0..BATCH).map(|_| rand() % 4).collect();
        let sends = kinds.iter().filter(|&&k| k == 0).count();
        let mut rbufs = Vec::new();
        for k in 0..sends {
            let r = b.buf(k * SLOT, SLOT, 0);
            b.recv(r, 1_000_000 + k as u64).unwrap();
            rbufs.push(r);
        }
        let mut bufs = Vec::new();
        let mut msgs = Vec::new();
        let mut reads = Vec::new();
        let mut results = Vec::new();
        let first = next_ud;
        for (i, &kind) in kinds.iter().enumerate() {
            let ud = next_ud;
            next_ud += 1;
            let tag = (ud % 251) as u8 + 1;
            match kind {
                0 => {
                    let len = (rand() % SLOT as u64) as usize;
                    a.mem()[i * SLOT..i * SLOT + len].fill(tag);
                    let s = a.buf(i * SLOT, SLOT, len);
                    a.send(ca, s, ud).unwrap();
                    bufs.push(s);
                    msgs.push((len as u32, tag));
                }
                1 => {
                    a.mem()[i * SLOT..i * SLOT + SMALL].fill(tag);
                    let s = a.buf(i * SLOT, SMALL, SMALL);
                    let d = a.rbuf(bm, base + wt + i * SMALL, SMALL, 0);
                    a.write(ca, s, d, ud).unwrap();
                    bufs.extend([s, d]);
                    target[i] = tag;
                }
                2 => {
                    // Read the previous slot's write target: if op i-1 was a write, the read
                    // must see it (same connection, submitted before).
                    let j = i.saturating_sub(1);
                    let src = a.rbuf(bm, base + wt + j * SMALL, SMALL, SMALL);
                    let dst = a.buf(rd + i * SMALL, SMALL, 0);
                    a.read(ca, src, dst, ud).unwrap();
                    bufs.extend([src, dst]);
                    reads.push((i, target[j]));
                }
                _ => {
                    let d = a.rbuf(bm, base + counter, 8, 0);
                    let r = a.buf(res + 8 * i, 8, 0);
                    a.fetch_add(ca, d, r, 1, ud).unwrap();
                    bufs.extend([d, r]);
                    results.push((i, adds));
                    adds += 1;
                }
            }
            // SAFETY: live rdma; test-only peek at the engine's queue.
            if unsafe { &*ca }.ops.borrow().len() > 1 {
                blocked_seen = true;
            }
        }
        assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= BATCH + sends));
        let recs = take_recs();
        let sa = recs_of(&recs, 1);
        assert_eq!(
            sa.iter().map(|r| r.ud).collect::<Vec<_>>(),
            (first..next_ud).collect::<Vec<_>>(),
            "completions in submission order"
        );
        assert!(sa.iter().all(|r| r.status == DOCA_SUCCESS));
        let rb = recs_of(&recs, 2);
        assert_eq!(rb.len(), sends);
        for (k, (r, &(len, tag))) in rb.iter().zip(&msgs).enumerate() {
            assert_eq!((r.ud, r.len, r.status), (1_000_000 + k as u64, len, DOCA_SUCCESS));
            let off = k * SLOT;
            assert!(b.mem()[off..off + len as usize].iter().all(|&x| x == tag), "message {k}");
        }
        for (i, want) in reads {
            let off = rd + i * SMALL;
            assert!(a.mem()[off..off + SMALL].iter().all(|&x| x == want), "read {i} sees the write before it");
        }
        for (i, old) in results {
            assert_eq!(u64_at(&a, res + 8 * i), old, "fetch-adds in order");
        }
        for x in bufs {
            a.release(x);
        }
        for x in rbufs {
            b.release(x);
        }
    }
    assert_eq!(u64_at(&b, counter), adds);
    assert!(blocked_seen, "operations queued behind blocked sends at least once");
    a.destroy();
    b.destroy();
}

#[test]
fn receive_too_small_fails_and_reconnect_works() {
    let (a, b, ca, cb) = fresh(Cfg::default(), Cfg::default());
    b.recv(b.buf(0, 4, 0), 10).unwrap();
    b.recv(b.buf(64, 64, 0), 11).unwrap();
    b.recv(ptr::null_mut(), 12).unwrap();
    a.mem()[0..8].copy_from_slice(b"too long");
    a.send(ca, a.buf(0, 8, 8), 1).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 4));
    let recs = take_recs();
    let rb = recs_of(&recs, 2);
    // The first receive fails; the ctx is in the error state and the others are flushed.
    assert_eq!(
        rb.iter().map(|r| (r.ud, r.status)).collect::<Vec<_>>(),
        vec![(10, DOCA_ERROR_TOO_BIG), (11, DOCA_ERROR_BAD_STATE), (12, DOCA_ERROR_BAD_STATE)]
    );
    assert!(b.mem()[0..4].iter().all(|&x| x == 0), "nothing was written");
    assert_eq!(recs_of(&recs, 1)[0].status, DOCA_SUCCESS, "the send itself was delivered");
    // Error state: allocation and submission fail on b.
    assert_eq!(b.recv(ptr::null_mut(), 13), Err(DOCA_ERROR_BAD_STATE));
    assert_eq!(b.send(cb, ptr::null_mut(), 14), Err(DOCA_ERROR_BAD_STATE));
    assert_eq!(b.export().unwrap_err(), DOCA_ERROR_BAD_STATE);
    // a learns that b closed the connection: RESET.
    assert!(run_until(&[a.pe, b.pe], T, || { a.send(ca, ptr::null_mut(), 2) == Err(DOCA_ERROR_CONNECTION_RESET) }));
    assert_eq!(a.recv(ptr::null_mut(), 3), Err(DOCA_ERROR_CONNECTION_RESET));
    take_recs();
    // Stop, restart, new export/connect on both sides: works again.
    a.stop();
    b.stop();
    assert_eq!(a.state(), DOCA_CTX_STATE_IDLE);
    a.start();
    b.start();
    // The old connection is dead for good.
    assert_eq!(a.send(ca, ptr::null_mut(), 4), Err(DOCA_ERROR_NOT_CONNECTED));
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

/// Runs one failing one-sided operation on a fresh pair and checks the error, that b's
/// memory is untouched, and that a is in the error state while b sees RESET.
fn violation(
    name: &str,
    cfg_b: Cfg,
    want: doca_error_t,
    op: impl FnOnce(&Side, &Side, *mut doca_rdma_connection) -> Result<(), doca_error_t>,
) {
    let (a, b, ca, cb) = fresh(Cfg::default(), cfg_b);
    b.mem().fill(0xEE);
    a.mem()[0..64].fill(0x11);
    op(&a, &b, ca).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1), "{name}");
    let r = take_recs();
    assert_eq!(r.len(), 1, "{name}");
    assert_eq!(r[0].status, want, "{name}: {}", crate::testkit::rdma::name(r[0].status));
    assert!(b.mem().iter().all(|&x| x == 0xEE), "{name}: memory untouched");
    assert_eq!(a.send(ca, ptr::null_mut(), 9), Err(DOCA_ERROR_BAD_STATE), "{name}");
    assert!(
        run_until(&[a.pe, b.pe], T, || { b.send(cb, ptr::null_mut(), 9) == Err(DOCA_ERROR_CONNECTION_RESET) }),
        "{name}: the peer sees the connection reset"
    );
    take_recs();
    a.destroy();
    b.destroy();
}

/// A read whose destination has less room than its source's data is refused at submit here
/// (nothing read, the ctx unaffected); DOCA's read rule itself is proved against both
/// providers by the conformance suite (`rdma_read_moves_its_sources_data`).
#[test]
fn a_read_into_too_little_room_is_refused_at_submit() {
    let (a, b, ca, _cb) = fresh(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    b.mem()[100..108].copy_from_slice(b"01234567");
    assert_eq!(a.read(ca, a.rbuf(bm, base + 100, 8, 8), a.buf(600, 4, 0), 3), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.mem()[600..604], [0; 4]);
    a.read(ca, a.rbuf(bm, base + 100, 8, 8), a.buf(600, 8, 0), 4).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    assert_eq!((take_recs()[0].status, &a.mem()[600..608]), (DOCA_SUCCESS, &b"01234567"[..]));
    a.destroy();
    b.destroy();
}

#[test]
fn access_violations_fail_without_touching_memory() {
    let d = Cfg::default();
    // A 64-byte export at offset 4096 of b's memory.
    let sub = |b: &Side, perms: u32| {
        // SAFETY: inside b's memory.
        let m = b.extra_mmap(unsafe { b.mem.add(4096) }, 64, perms);
        (b.export_mmap(m), m)
    };
    violation("write past the export", d, DOCA_ERROR_INVALID_VALUE, |a, b, ca| {
        let (bm, base) = a.import(&sub(b, ALL_RDMA).0);
        a.write(ca, a.buf(0, 8, 8), a.rbuf(bm, base + 60, 4, 0), 1)
    });
    violation("atomic past the export", d, DOCA_ERROR_INVALID_VALUE, |a, b, ca| {
        let (bm, base) = a.import(&sub(b, ALL_RDMA).0);
        a.fetch_add(ca, a.rbuf(bm, base + 60, 4, 0), a.buf(512, 8, 0), 1, 1)
    });
    violation("misaligned atomic", d, DOCA_ERROR_INVALID_VALUE, |a, b, ca| {
        let (bm, base) = a.import(&sub(b, ALL_RDMA).0);
        a.cmp_swp(ca, a.rbuf(bm, base + 4, 8, 0), a.buf(512, 8, 0), 0, 1, 1)
    });
    let ro = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ;
    violation("write to a read-only export", d, DOCA_ERROR_NOT_PERMITTED, |a, b, ca| {
        let (bm, base) = a.import(&sub(b, ro).0);
        a.write(ca, a.buf(0, 8, 8), a.rbuf(bm, base, 64, 0), 1)
    });
    violation("atomic without RDMA_ATOMIC", d, DOCA_ERROR_NOT_PERMITTED, |a, b, ca| {
        let (bm, base) = a.import(&sub(b, ro).0);
        a.fetch_add(ca, a.rbuf(bm, base, 8, 0), a.buf(512, 8, 0), 1, 1)
    });
    let b_no_write = Cfg { perms: DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ, ..d };
    violation("the peer ctx forbids writes", b_no_write, DOCA_ERROR_NOT_PERMITTED, |a, b, ca| {
        let (bm, base) = a.import(&b.export_mem());
        a.write(ca, a.buf(0, 8, 8), a.rbuf(bm, base, 64, 0), 1)
    });
    let b_default = Cfg { perms: DEFAULT_PERMISSIONS, ..d };
    violation("default permissions forbid reads", b_default, DOCA_ERROR_NOT_PERMITTED, |a, b, ca| {
        let (bm, base) = a.import(&b.export_mem());
        a.read(ca, a.rbuf(bm, base, 8, 8), a.buf(512, 8, 0), 1)
    });
    violation("revoked key", d, DOCA_ERROR_NOT_PERMITTED, |a, b, ca| {
        let (blob, m) = sub(b, ALL_RDMA);
        let (bm, base) = a.import(&blob);
        // SAFETY: b's live mmap without buffers: stopping revokes the export's key.
        ok(unsafe { doca_mmap_stop(m) });
        a.write(ca, a.buf(0, 8, 8), a.rbuf(bm, base, 64, 0), 1)
    });
    // Atomics need shared memory: heap memory is reached with process_vm_* only.
    let heap: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
    let hp = heap.as_mut_ptr() as usize;
    violation("atomic on process_vm memory", d, DOCA_ERROR_NOT_SUPPORTED, move |a, b, ca| {
        let m = b.extra_mmap(hp as *mut u8, 4096, ALL_RDMA);
        let (bm, base) = a.import(&b.export_mmap(m));
        a.fetch_add(ca, a.rbuf(bm, base, 8, 0), a.buf(512, 8, 0), 1, 1)
    });
    assert!(heap.iter().all(|&x| x == 0));
    // ... while writes and reads work there.
    let (a, b, ca, _cb) = fresh(d, d);
    let m = b.extra_mmap(hp as *mut u8, 4096, ALL_RDMA);
    let (bm, base) = a.import(&b.export_mmap(m));
    a.mem()[0..4].copy_from_slice(b"heap");
    a.write(ca, a.buf(0, 4, 4), a.rbuf(bm, base + 8, 4, 0), 1).unwrap();
    a.read(ca, a.rbuf(bm, base + 8, 4, 4), a.buf(64, 4, 0), 2).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&heap[8..12], b"heap");
    assert_eq!(&a.mem()[64..68], b"heap");
    a.destroy();
    b.destroy();
}

#[test]
fn stop_flushes_in_flight_tasks_and_restart_needs_new_connections() {
    let (a, b, ca, _cb) = fresh(
        Cfg { max_conns: SMALL_RING_CONNS, ..Cfg::default() },
        Cfg { max_conns: SMALL_RING_CONNS, ..Cfg::default() },
    );
    // Posted receives on a, and sends blocked on b's full ring (b posts no receive).
    a.recv(a.buf(0, 64, 0), 100).unwrap();
    a.recv(ptr::null_mut(), 101).unwrap();
    let sz = 32 * 1024;
    for i in 0..12 {
        a.send(ca, a.buf(4096, sz, sz), i).unwrap();
    }
    drain(&[a.pe, b.pe]);
    let done = take_recs();
    let completed = done.len() as u64;
    assert!((6..12).contains(&completed), "{completed}");
    assert!(done.iter().all(|r| r.status == DOCA_SUCCESS));
    // SAFETY: live ctx.
    assert_eq!(unsafe { doca_ctx_stop(a.ctx()) }, DOCA_ERROR_IN_PROGRESS);
    assert_eq!(a.state(), DOCA_CTX_STATE_STOPPING);
    assert_eq!(a.send(ca, ptr::null_mut(), 50), Err(DOCA_ERROR_BAD_STATE));
    drain(&[a.pe]);
    assert_eq!(a.state(), DOCA_CTX_STATE_IDLE, "IDLE once the flushed tasks were freed");
    let flushed = take_recs();
    let mut got: Vec<_> = flushed.iter().map(|r| (r.kind, r.ud, r.status)).collect();
    got.sort_by_key(|x| x.1);
    let mut want: Vec<_> = (completed..12).map(|i| ("send", i, FLUSH_STATUS)).collect();
    want.extend([("receive", 100, FLUSH_STATUS), ("receive", 101, FLUSH_STATUS)]);
    assert_eq!(got, want);
    // b sees a's side closed, but a's completed sends are still delivered to b's receives,
    // in order, before the loss is reported; then its ctx enters the error state with RESET.
    drain(&[b.pe]);
    assert_eq!(b.state(), DOCA_CTX_STATE_RUNNING, "completed messages wait for receives");
    for i in 0..completed {
        b.recv(b.buf(0, sz, 0), 200 + i).unwrap();
        assert!(run_until(&[b.pe], T, || rec_count() >= 1));
        let r = take_recs();
        assert_eq!((r[0].ud, r[0].status, r[0].len), (200 + i, DOCA_SUCCESS, sz as u32));
    }
    assert!(run_until(&[b.pe], T, || b.recv(ptr::null_mut(), 1) == Err(DOCA_ERROR_CONNECTION_RESET)));
    b.stop();
    a.start();
    b.start();
    assert_eq!(a.send(ca, ptr::null_mut(), 1), Err(DOCA_ERROR_NOT_CONNECTED));
    let (ca2, _) = connect_pair(&a, &b);
    b.recv(b.buf(0, 64, 0), 7).unwrap();
    a.send(ca2, a.buf(4096, 8, 8), 8).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    a.destroy();
    b.destroy();
}

#[test]
fn corrupted_or_truncated_blobs_are_rejected() {
    take_recs();
    let a = Side::new(1, Cfg::default());
    let b = Side::new(2, Cfg::default());
    let (blob_a, ca) = a.export().unwrap();
    let (blob_b, cb) = b.export().unwrap();
    for n in 0..blob_b.len() {
        let e = a.connect(&blob_b[..n], ca).unwrap_err();
        assert_eq!(e, DOCA_ERROR_INVALID_VALUE, "truncated to {n}");
    }
    for i in 0..blob_b.len() {
        for mask in [0x01u8, 0x80, 0xff] {
            let mut c = blob_b.clone();
            c[i] ^= mask;
            let e = a.connect(&c, ca).unwrap_err();
            let version_byte = i == 4 || i == 5;
            assert!(
                e == DOCA_ERROR_INVALID_VALUE || (version_byte && e == DOCA_ERROR_UNSUPPORTED_VERSION),
                "byte {i} mask {mask:#x}: {}",
                name(e)
            );
        }
    }
    let mut longer = blob_b.clone();
    longer.push(0);
    assert_eq!(a.connect(&longer, ca), Err(DOCA_ERROR_INVALID_VALUE));
    // Garbage never crashes.
    let mut x = 0x1234_5678u64;
    for len in 1..300usize {
        let v: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(a.connect(&v, ca).is_err());
    }
    // A memory blob is not a connection blob.
    assert_eq!(a.connect(&b.export_mem(), ca), Err(DOCA_ERROR_INVALID_VALUE));
    // A well-formed blob naming a wrong key: the connection is not found.
    let mut d = conn::ConnBlob::decode(&blob_b).unwrap();
    d.ring_key ^= 1;
    assert_eq!(a.connect(&d.encode(), ca), Err(DOCA_ERROR_NOT_FOUND));
    // ... or a descriptor that is not a ring.
    let mut d = conn::ConnBlob::decode(&blob_b).unwrap();
    d.ring_fd = 0;
    assert!(a.connect(&d.encode(), ca).is_err());
    // After all that, the real blobs still connect, and the pair works.
    a.connect(&blob_b, ca).unwrap();
    b.connect(&blob_a, cb).unwrap();
    // A second connect of the same connection, or of the claimed ring elsewhere, is refused.
    assert_eq!(a.connect(&blob_b, ca), Err(DOCA_ERROR_BAD_STATE));
    let (_, ca2) = a.export().unwrap();
    assert_eq!(a.connect(&blob_b, ca2), Err(DOCA_ERROR_IN_USE));
    b.recv(ptr::null_mut(), 1).unwrap();
    a.send(ca, ptr::null_mut(), 2).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    a.destroy();
    b.destroy();
}

#[test]
fn configuration_state_rules_and_queue_limits() {
    take_recs();
    let dev = crate::dev::test_open_default();
    let mut r = ptr::null_mut();
    let mut pe = ptr::null_mut();
    let (mut p, mut n, mut c) = (ptr::null(), 0usize, ptr::null_mut());
    // SAFETY: valid pointers or deliberate NULLs; live objects.
    unsafe {
        ok(doca_pe_create(&mut pe));
        ok(doca_rdma_create(dev, &mut r));
        assert_eq!(doca_rdma_set_permissions(r, DOCA_ACCESS_FLAG_PCI_READ_WRITE), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_permissions(r, 1 << 9), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_send_queue_size(r, 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_recv_queue_size(r, MAX_QUEUE_SIZE + 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_max_num_connections(r, 0), DOCA_ERROR_NOT_SUPPORTED);
        ok(doca_rdma_set_max_num_connections(r, 2));
        // Export before start.
        assert_eq!(doca_rdma_export(r, &mut p, &mut n, &mut c), DOCA_ERROR_BAD_STATE);
        // Start without a PE.
        assert_eq!(doca_ctx_start(doca_rdma_as_ctx(r)), DOCA_ERROR_NOT_CONNECTED);
        ok(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)));
        ok(doca_ctx_start(doca_rdma_as_ctx(r)));
        // Configuration while running.
        assert_eq!(doca_rdma_set_permissions(r, 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_send_queue_size(r, 8), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_recv_queue_size(r, 8), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_max_num_connections(r, 8), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_task_send_set_conf(r, Some(cb_send), Some(cb_send), 4), DOCA_ERROR_NOT_PERMITTED);
        // No task kind configured: NOT_SUPPORTED.
        let mut t = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_receive_allocate_init(r, ptr::null_mut(), doca_data::from_u64(0), &mut t),
            DOCA_ERROR_NOT_SUPPORTED
        );
        // Max connections.
        ok(doca_rdma_export(r, &mut p, &mut n, &mut c));
        ok(doca_rdma_export(r, &mut p, &mut n, &mut c));
        assert_eq!(doca_rdma_export(r, &mut p, &mut n, &mut c), DOCA_ERROR_FULL);
        assert_eq!(doca_rdma_export(r, ptr::null_mut(), &mut n, &mut c), DOCA_ERROR_INVALID_VALUE);
        // Destroy while running.
        assert_eq!(doca_rdma_destroy(r), DOCA_ERROR_BAD_STATE);
        // An RDMA stop always goes through STOPPING; progress reports IDLE.
        assert_eq!(doca_ctx_stop(doca_rdma_as_ctx(r)), DOCA_ERROR_IN_PROGRESS);
        assert_eq!(doca_rdma_destroy(r), DOCA_ERROR_BAD_STATE, "STOPPING");
        crate::testkit::drain(pe);
        // A connection of another rdma.
        ok(doca_ctx_start(doca_rdma_as_ctx(r)));
    }
    let other = Side::new(3, Cfg::default());
    let (ob, oc) = other.export().unwrap();
    // SAFETY: live objects; `oc` belongs to `other`.
    unsafe {
        assert_eq!(doca_rdma_connect(r, ob.as_ptr().cast(), ob.len(), oc), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_ctx_stop(doca_rdma_as_ctx(r)), DOCA_ERROR_IN_PROGRESS);
        crate::testkit::drain(pe);
        ok(doca_rdma_destroy(r));
        ok(doca_pe_destroy(pe));
        ok(crate::dev::doca_dev_close(dev));
    }
    other.destroy();

    // Queue limits: 4 in-flight send-side tasks, 2 posted receives.
    let small = Cfg { sq: 4, rq: 2, ..Cfg::default() };
    let (a, b, ca, _cb) = fresh(small, small);
    // Not connected yet: a fresh export.
    let (_, lone) = a.export().unwrap();
    assert_eq!(a.send(lone, ptr::null_mut(), 0), Err(DOCA_ERROR_NOT_CONNECTED));
    let sz = 64 * 1024;
    let mut k = 0;
    let err = loop {
        match a.send(ca, a.buf(0, sz, sz), k) {
            Ok(()) => k += 1,
            Err(e) => break e,
        }
        assert!(k < 100);
    };
    assert_eq!(err, DOCA_ERROR_NO_MEMORY, "send queue full");
    b.recv(ptr::null_mut(), 1).unwrap();
    b.recv(ptr::null_mut(), 2).unwrap();
    assert_eq!(b.recv(ptr::null_mut(), 3), Err(DOCA_ERROR_NO_MEMORY), "receive queue full");
    take_recs();
    a.destroy();
    b.destroy();
}

#[test]
fn event_mode_receiver_and_blocked_sender_wake_up() {
    let (a, b, ca, _cb) = fresh(
        Cfg { max_conns: SMALL_RING_CONNS, ..Cfg::default() },
        Cfg { max_conns: SMALL_RING_CONNS, ..Cfg::default() },
    );
    b.recv(b.buf(0, 64, 0), 10).unwrap();
    assert!(arm(b.pe), "nothing to do yet");
    assert!(!fd_readable(b.pe, 0));
    a.mem()[0..4].copy_from_slice(b"wake");
    a.send(ca, a.buf(0, 4, 4), 1).unwrap();
    assert!(fd_readable(b.pe, 5000), "the send rang the receiver's doorbell");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(b.pe, 0) });
    drain(&[b.pe, a.pe]);
    let r = take_recs();
    assert_eq!(r.len(), 2);
    assert_eq!(&b.mem()[0..4], b"wake");
    // A sender blocked on a full ring wakes when the receiver frees space.
    let sz = 64 * 1024;
    for i in 0..6 {
        a.send(ca, a.buf(4096, sz, sz), 100 + i).unwrap();
    }
    drain(&[a.pe]);
    let done = take_recs().len();
    let _ = &_cb;
    assert!(done < 6, "some sends are blocked ({done} done)");
    assert!(arm(a.pe), "the blocked sender has nothing to do");
    assert!(!fd_readable(a.pe, 0));
    for i in 0..6 {
        b.recv(b.buf((1 << 19) + i * sz, sz, 0), 200 + i as u64).unwrap();
    }
    drain(&[b.pe]);
    assert!(fd_readable(a.pe, 5000), "freed space rang the sender's doorbell");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(a.pe, 0) });
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 12 - done));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    a.destroy();
    b.destroy();
}

#[test]
fn null_and_foreign_arguments() {
    let ud = doca_data::from_u64(0);
    // SAFETY: every call passes NULL (or a deliberately bad pointer) where the provider
    // must refuse it without dereferencing.
    unsafe {
        let mut r = ptr::null_mut();
        assert_eq!(doca_rdma_create(ptr::null_mut(), &mut r), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert!(doca_rdma_as_ctx(ptr::null_mut()).is_null());
        assert_eq!(doca_rdma_set_permissions(ptr::null_mut(), 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_send_queue_size(ptr::null_mut(), 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_recv_queue_size(ptr::null_mut(), 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_max_num_connections(ptr::null_mut(), 1), DOCA_ERROR_INVALID_VALUE);
        let (mut p, mut l, mut c) = (ptr::null(), 0usize, ptr::null_mut());
        assert_eq!(doca_rdma_export(ptr::null_mut(), &mut p, &mut l, &mut c), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(
            doca_rdma_connect(ptr::null_mut(), b"x".as_ptr().cast(), 1, ptr::null_mut()),
            DOCA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            doca_rdma_task_send_set_conf(ptr::null_mut(), Some(cb_send), Some(cb_send), 1),
            DOCA_ERROR_INVALID_VALUE
        );
        let mut t = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_receive_allocate_init(ptr::null_mut(), ptr::null_mut(), ud, &mut t),
            DOCA_ERROR_INVALID_VALUE
        );
        let mut t = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_send_allocate_init(ptr::null_mut(), ptr::null_mut(), ptr::null(), ud, &mut t),
            DOCA_ERROR_INVALID_VALUE
        );
        assert!(doca_rdma_task_send_as_task(ptr::null_mut()).is_null());
        assert_eq!(doca_rdma_task_receive_get_result_len(ptr::null()), 0);
        assert_eq!(doca_rdma_task_receive_get_result_immediate_data(ptr::null()), 0);
        assert_eq!(doca_rdma_task_receive_get_result_opcode(ptr::null()), DOCA_RDMA_OPCODE_RECV_SEND);
        assert!(doca_rdma_task_receive_get_result_rdma_connection(ptr::null()).is_null());
    }
    take_recs();
    let a = Side::new(1, Cfg::default());
    let (blob, c) = a.export().unwrap();
    let buf = a.buf(0, 8, 8);
    // SAFETY: live objects; NULL arguments where they must be refused.
    unsafe {
        assert_eq!(doca_rdma_create(a.dev, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        let (mut p, mut l) = (ptr::null(), 0usize);
        assert_eq!(doca_rdma_export(a.rdma, &mut p, &mut l, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_connect(a.rdma, ptr::null(), 10, c), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_connect(a.rdma, blob.as_ptr().cast(), 0, c), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(
            doca_rdma_connect(a.rdma, blob.as_ptr().cast(), blob.len(), ptr::null_mut()),
            DOCA_ERROR_INVALID_VALUE
        );
        assert_eq!(doca_rdma_task_send_allocate_init(a.rdma, c, buf, ud, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        let mut st = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_send_allocate_init(a.rdma, ptr::null_mut(), buf, ud, &mut st),
            DOCA_ERROR_INVALID_VALUE
        );
        let mut it = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_send_imm_allocate_init(a.rdma, ptr::null_mut(), buf, 1, ud, &mut it),
            DOCA_ERROR_INVALID_VALUE
        );
        let mut wt = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_write_allocate_init(a.rdma, c, buf, ptr::null_mut(), ud, &mut wt),
            DOCA_ERROR_INVALID_VALUE
        );
        let mut rt = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_read_allocate_init(a.rdma, c, buf, ptr::null_mut(), ud, &mut rt),
            DOCA_ERROR_INVALID_VALUE,
            "a source needs a destination"
        );
        // A NULL source is no data (DOCA), with or without a destination.
        let mut wit = ptr::null_mut();
        ok(doca_rdma_task_write_imm_allocate_init(a.rdma, c, ptr::null(), buf, 1, ud, &mut wit));
        doca_task_free(doca_rdma_task_write_imm_as_task(wit));
        ok(doca_rdma_task_read_allocate_init(a.rdma, c, ptr::null(), ptr::null_mut(), ud, &mut rt));
        doca_task_free(doca_rdma_task_read_as_task(rt));
        let mut at = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_atomic_fetch_add_allocate_init(a.rdma, c, buf, ptr::null_mut(), 1, ud, &mut at),
            DOCA_ERROR_INVALID_VALUE
        );
        let mut ct = ptr::null_mut();
        assert_eq!(
            doca_rdma_task_atomic_cmp_swp_allocate_init(a.rdma, c, ptr::null_mut(), buf, 1, 2, ud, &mut ct),
            DOCA_ERROR_INVALID_VALUE
        );
        // A pointer that is not a connection.
        let fake = buf.cast::<doca_rdma_connection>();
        assert_eq!(doca_rdma_task_send_allocate_init(a.rdma, fake, buf, ud, &mut st), DOCA_ERROR_INVALID_VALUE);
        // Getters on a task of another kind.
        ok(doca_rdma_task_send_allocate_init(a.rdma, c, buf, ud, &mut st));
        let as_recv = st.cast::<doca_rdma_task_receive>();
        assert_eq!(doca_rdma_task_receive_get_result_len(as_recv), 0);
        assert!(doca_rdma_task_receive_get_result_rdma_connection(as_recv).is_null());
        doca_task_free(doca_rdma_task_send_as_task(st));
    }
    a.destroy();
}

#[test]
fn buffers_of_the_wrong_side_fail_the_submit() {
    let (a, b, ca, _cb) = fresh(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    let local = a.buf(0, 8, 8);
    let remote = a.rbuf(bm, base, 8, 8);
    assert_eq!(a.write(ca, local, local, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.write(ca, remote, remote, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.read(ca, local, local, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.send(ca, remote, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.fetch_add(ca, local, a.buf(64, 8, 0), 1, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.fetch_add(ca, remote, a.buf(72, 4, 0), 1, 1), Err(DOCA_ERROR_INVALID_VALUE), "result < 8 bytes");
    assert_eq!(b.recv(b.rbuf(b.import(&a.export_mem()).0, a.mem as usize, 8, 0), 1), Err(DOCA_ERROR_INVALID_VALUE));
    // A read-only local destination.
    let ro = a.extra_mmap(a.mem, 4096, DOCA_ACCESS_FLAG_LOCAL_READ_ONLY);
    let mut rob = ptr::null_mut();
    // SAFETY: live inventory and mmap, valid out-pointer.
    ok(unsafe { doca_buf_inventory_buf_get_by_args(a.inv, ro, a.mem.cast(), 64, a.mem.cast(), 0, &mut rob) });
    assert_eq!(a.read(ca, remote, rob, 1), Err(DOCA_ERROR_NOT_PERMITTED));
    assert_eq!(a.recv(rob, 1), Err(DOCA_ERROR_NOT_PERMITTED));
    // SAFETY: our buffer.
    ok(unsafe { doca_buf_dec_refcount(rob, ptr::null_mut()) });
    // A list where DOCA takes one (send and write sources, read and receive destinations) is
    // longer than this provider's limit of one element: refused, not cut to its first element.
    let lists = [(a.buf(128, 8, 8), a.buf(136, 8, 8)), (a.buf(256, 8, 0), a.buf(264, 8, 0))];
    let (src_list, dst_list) = (lists[0].0, lists[1].0);
    for (first, second) in lists {
        // SAFETY: buffers of this test, first elements with a count of 1.
        ok(unsafe { doca_buf_chain_list(first, second) });
    }
    assert_eq!(a.send(ca, src_list, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.write(ca, src_list, remote, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.read(ca, remote, dst_list, 1), Err(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(a.recv(dst_list, 1), Err(DOCA_ERROR_INVALID_VALUE));
    for (first, second) in lists {
        // SAFETY: as above; split again so that the rig returns each buffer on its own.
        ok(unsafe { doca_buf_unchain_list(first, second) });
    }
    // None of this put the ctx in the error state.
    a.write(ca, local, a.rbuf(bm, base, 8, 0), 2).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_SUCCESS);
    a.destroy();
    b.destroy();
}

// ---- cross-process (the test binary re-executes itself as the child) ----

/// Exchanges connection and memory blobs with the child: returns (a's connection, b's
/// imported memory, b's base address).
fn parent_handshake(a: &Side, child: &mut Peer) -> (*mut doca_rdma_connection, *mut doca_mmap, usize) {
    let (blob, ca) = a.export().unwrap();
    let line = child.recv();
    let (conn_hex, mem_hex) = line.split_once(' ').expect("two blobs");
    child.send(&format!("{} {}", hex(&blob), hex(&a.export_mem())));
    a.connect(&unhex(conn_hex), ca).unwrap();
    let (m, base) = a.import(&unhex(mem_hex));
    (ca, m, base)
}

/// The child's half of [`parent_handshake`].
fn child_handshake(b: &Side) -> (*mut doca_rdma_connection, *mut doca_mmap, usize) {
    let (blob, cb) = b.export().unwrap();
    tell_parent(&format!("{} {}", hex(&blob), hex(&b.export_mem())));
    let line = from_parent().expect("parent blobs");
    let (conn_hex, mem_hex) = line.split_once(' ').expect("two blobs");
    b.connect(&unhex(conn_hex), cb).unwrap();
    let (m, base) = b.import(&unhex(mem_hex));
    (cb, m, base)
}

fn ops_child() {
    take_recs();
    let b = Side::new(2, Cfg::default());
    b.mem()[256..264].copy_from_slice(b"child-xx");
    b.mem()[512..520].copy_from_slice(&7u64.to_ne_bytes());
    let (cb, am, abase) = child_handshake(&b);
    b.recv(b.buf(1024, 64, 0), 20).unwrap();
    assert_eq!(from_parent().as_deref(), Some("go"));
    b.mem()[1100..1104].copy_from_slice(b"pong");
    b.send_imm(cb, b.buf(1100, 4, 4), 0xABCD, 1).unwrap();
    // The parent writes, reads, adds, then sends "parent!!": when it arrives, the one-sided
    // operations before it on the connection are visible.
    assert!(run_until(&[b.pe], T, || rec_count() >= 2));
    let r = take_recs();
    assert!(r.iter().all(|r| r.status == DOCA_SUCCESS), "{r:?}");
    assert_eq!(r.iter().filter(|r| r.kind == "receive").count(), 1);
    assert_eq!(&b.mem()[1024..1032], b"parent!!");
    assert_eq!(&b.mem()[0..8], b"parent!!");
    assert_eq!(u64_at(&b, 512), 12);
    b.fetch_add(cb, b.rbuf(am, abase + 512, 8, 0), b.buf(2000, 8, 0), 10, 2).unwrap();
    b.mem()[1200..1208].copy_from_slice(b"from-kid");
    b.write(cb, b.buf(1200, 8, 8), b.rbuf(am, abase + 600, 8, 0), 3).unwrap();
    b.send(cb, b.buf(1200, 8, 8), 4).unwrap();
    assert!(run_until(&[b.pe], T, || rec_count() >= 3));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(u64_at(&b, 2000), 100);
    assert_eq!(from_parent().as_deref(), Some("bye"));
    b.destroy();
}

#[test]
fn cross_process_send_recv_write_read_fetch_add() {
    match role().as_deref() {
        Some("ops-child") => return ops_child(),
        Some(_) => return,
        None => {}
    }
    take_recs();
    let a = Side::new(1, Cfg::default());
    a.mem()[512..520].copy_from_slice(&100u64.to_ne_bytes());
    let mut child = spawn_test("cross_process_send_recv_write_read_fetch_add", "ops-child");
    let (ca, bm, base) = parent_handshake(&a, &mut child);
    a.recv(a.buf(0, 64, 0), 10).unwrap();
    a.recv(a.buf(64, 64, 0), 11).unwrap();
    // Event mode across processes: the armed parent wakes on the child's send.
    assert!(arm(a.pe), "nothing to do before the child sends");
    child.send("go");
    assert!(fd_readable(a.pe, 20_000), "the child's send woke the armed parent");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(a.pe, 0) });
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    let r = take_recs();
    assert_eq!(
        (r[0].ud, r[0].status, r[0].opcode, r[0].len, r[0].imm),
        (10, DOCA_SUCCESS, DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM, 4, 0xABCD)
    );
    assert_eq!(&a.mem()[0..4], b"pong");
    // One-sided operations on the child's memory, then a message behind them.
    a.mem()[100..108].copy_from_slice(b"parent!!");
    a.write(ca, a.buf(100, 8, 8), a.rbuf(bm, base, 8, 0), 1).unwrap();
    a.read(ca, a.rbuf(bm, base + 256, 8, 8), a.buf(200, 8, 0), 2).unwrap();
    a.fetch_add(ca, a.rbuf(bm, base + 512, 8, 0), a.buf(300, 8, 0), 5, 3).unwrap();
    a.send(ca, a.buf(100, 8, 8), 4).unwrap();
    // The child's fetch-add, write and "done" message.
    assert!(run_until(&[a.pe], T, || rec_count() >= 5));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(&a.mem()[200..208], b"child-xx");
    assert_eq!(u64_at(&a, 300), 7);
    assert_eq!(&a.mem()[64..72], b"from-kid", "the child's message");
    assert_eq!(&a.mem()[600..608], b"from-kid", "the child's write, visible before its message");
    assert_eq!(u64_at(&a, 512), 110, "the child's fetch-add");
    child.send("bye");
    child.wait_success();
    a.destroy();
}

fn stream_child() {
    take_recs();
    // The ring the parent's sends fill is this side's: the parent counts on it being small.
    let b = Side::new(2, Cfg { max_conns: SMALL_RING_CONNS, ..Cfg::default() });
    let (cb, _am, _abase) = child_handshake(&b);
    b.mem()[0..1024].fill(0x5A);
    for i in 0..8 {
        b.send(cb, b.buf(0, 1024, 1024), i).unwrap();
    }
    assert!(run_until(&[b.pe], T, || rec_count() >= 8));
    tell_parent("sent");
    // Wait to be killed (EOF on stdin if the parent goes away first).
    let _ = from_parent();
    b.destroy();
}

/// The peer is SIGKILLed while our sends to it are in flight and receives are posted:
/// everything fails with CONNECTION_ABORTED within a bounded time, later tasks too, and
/// nothing hangs. Detection is by the pidfd waking the (armed) PE.
#[test]
fn cross_process_peer_killed_mid_stream() {
    match role().as_deref() {
        Some("stream-child") => return stream_child(),
        Some(_) => return,
        None => {}
    }
    take_recs();
    let a = Side::new(1, Cfg::default());
    let mut child = spawn_test("cross_process_peer_killed_mid_stream", "stream-child");
    let (ca, bm, base) = parent_handshake(&a, &mut child);
    for i in 0..16 {
        a.recv(a.buf(i * 1024, 1024, 0), 100 + i as u64).unwrap();
    }
    assert_eq!(child.recv(), "sent");
    assert!(run_until(&[a.pe], T, || rec_count() >= 8));
    let got = take_recs();
    assert!(got.iter().all(|r| r.status == DOCA_SUCCESS && r.len == 1024));
    assert!(a.mem()[..8 * 1024].iter().all(|&x| x == 0x5A));
    // Our sends pile up in the child's ring (it posts no receive) and then block.
    let sz = 32 * 1024;
    for i in 0..20 {
        a.send(ca, a.buf(64 * 1024, sz, sz), i).unwrap();
    }
    drain(&[a.pe]);
    let sent_ok = take_recs();
    assert!(sent_ok.iter().all(|r| r.status == DOCA_SUCCESS));
    let blocked = 20 - sent_ok.len();
    assert!(blocked > 0, "some sends are still in flight");
    let pid = child.pid();
    // Armed with nothing to do: the death alone must wake the PE (the pidfd is registered).
    assert!(arm(a.pe), "nothing to do while the peer is alive");
    assert!(!fd_readable(a.pe, 0));
    child.kill();
    let t0 = Instant::now();
    assert!(fd_readable(a.pe, 5000), "the peer's death woke the armed PE");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(a.pe, 0) });
    // 8 posted receives and the blocked sends: all complete, with errors.
    assert!(run_until(&[a.pe], Duration::from_secs(10), || rec_count() >= 8 + blocked));
    let elapsed = t0.elapsed();
    let recs = take_recs();
    for r in &recs {
        assert_eq!(r.status, DOCA_ERROR_CONNECTION_ABORTED, "{r:?}");
    }
    // (The bound of the waits above; a loaded machine may take seconds, a missed death forever.)
    assert!(elapsed < Duration::from_secs(15), "detected after {elapsed:?}");
    eprintln!("peer {pid} killed: {} tasks failed after {elapsed:?}", recs.len());
    // Later tasks fail too; nothing is written into the dead peer's memory as a success.
    assert_eq!(a.send(ca, ptr::null_mut(), 1), Err(DOCA_ERROR_CONNECTION_ABORTED));
    assert_eq!(a.write(ca, a.buf(0, 8, 8), a.rbuf(bm, base, 8, 0), 2), Err(DOCA_ERROR_CONNECTION_ABORTED));
    assert_eq!(a.recv(ptr::null_mut(), 3), Err(DOCA_ERROR_CONNECTION_ABORTED));
    assert_eq!(rec_count(), 0);
    a.destroy();
}

#[test]
fn loopback_connection_to_its_own_blob() {
    take_recs();
    let a = Side::new(1, Cfg::default());
    let (blob, c) = a.export().unwrap();
    a.connect(&blob, c).unwrap();
    a.recv(a.buf(0, 16, 0), 1).unwrap();
    a.mem()[100..104].copy_from_slice(b"self");
    a.send(c, a.buf(100, 4, 4), 2).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    assert_eq!(&a.mem()[0..4], b"self");
    a.destroy();
}

/// Size of message `i` of a stream seeded with `seed` (0 .. 200 KiB, some above the ring
/// size on purpose).
fn stream_size(seed: u64, i: usize) -> usize {
    let mut x = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 29;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 32;
    if i % 17 == 5 {
        SMALL_RING + (x % 65536) as usize
    } else {
        (x % (200 * 1024)) as usize
    }
}

/// One endpoint of the two-thread test: sends `n` messages of stream `my_seed` and receives
/// `n` of stream `peer_seed`, keeping `K` of each in flight, waiting on the PE fd when idle.
fn stream_endpoint(
    id: u64,
    my_seed: u64,
    peer_seed: u64,
    out: std::sync::mpsc::Sender<Vec<u8>>,
    inp: std::sync::mpsc::Receiver<Vec<u8>>,
    done: std::sync::Arc<std::sync::Barrier>,
) {
    const N: usize = 150;
    const K: usize = 6;
    const SLOT: usize = SMALL_RING + 65536;
    take_recs();
    let cfg = Cfg { mem_len: 2 * K * SLOT, max_conns: SMALL_RING_CONNS, ..Cfg::default() };
    let s = Side::new(id, cfg);
    let (blob, c) = s.export().unwrap();
    out.send(blob).unwrap();
    let peer = inp.recv_timeout(T).unwrap();
    s.connect(&peer, c).unwrap();
    let (mut sent, mut send_done, mut posted, mut recv_done) = (0usize, 0usize, 0usize, 0usize);
    let mut send_bufs = std::collections::VecDeque::new();
    let mut recv_bufs = std::collections::VecDeque::new();
    while send_done < N || recv_done < N {
        while sent < N && sent - send_done < K {
            let off = (sent % K) * SLOT;
            let len = stream_size(my_seed, sent);
            s.mem()[off..off + len].fill(sent as u8);
            let b = s.buf(off, len, len);
            s.send(c, b, sent as u64).unwrap();
            send_bufs.push_back(b);
            sent += 1;
        }
        while posted < N && posted - recv_done < K {
            let b = s.buf((K + posted % K) * SLOT, SLOT, 0);
            s.recv(b, posted as u64).unwrap();
            recv_bufs.push_back(b);
            posted += 1;
        }
        assert!(run_until(&[s.pe], T, || rec_count() > 0), "side {id} stalled");
        for r in take_recs() {
            assert_eq!(r.status, DOCA_SUCCESS, "side {id}: {r:?}");
            if r.kind == "receive" {
                assert_eq!(r.ud, recv_done as u64);
                let len = stream_size(peer_seed, recv_done);
                assert_eq!(r.len as usize, len);
                let off = (K + recv_done % K) * SLOT;
                assert!(s.mem()[off..off + len].iter().all(|&x| x == recv_done as u8), "message {recv_done}");
                s.release(recv_bufs.pop_front().unwrap());
                recv_done += 1;
            } else {
                assert_eq!(r.ud, send_done as u64, "send completions in order");
                s.release(send_bufs.pop_front().unwrap());
                send_done += 1;
            }
        }
    }
    done.wait();
    s.destroy();
}

#[test]
fn two_threads_stream_both_ways_in_event_mode() {
    let (to_b, from_a) = std::sync::mpsc::channel();
    let (to_a, from_b) = std::sync::mpsc::channel();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let b2 = barrier.clone();
    let tb = std::thread::spawn(move || stream_endpoint(2, 22, 11, to_a, from_a, b2));
    stream_endpoint(1, 11, 22, to_b, from_b, barrier);
    tb.join().unwrap();
}

/// Measurement (not a check): in-process latencies with a raw progress loop.
#[test]
#[ignore = "measurement: cargo test --release -p doca-soft rdma::tests::measure -- --ignored --nocapture"]
fn measure_in_process_latency() {
    let cfg = Cfg { num_tasks: 16, ..Cfg::default() };
    let (a, b, ca, cb) = fresh(cfg, cfg);
    let (bm, base) = a.import(&b.export_mem());
    let src = a.buf(0, 8, 8);
    let dst = a.rbuf(bm, base + 64, 8, 0);
    let iters: u64 = 200_000;
    let spin = |pes: &[*mut doca_pe]| {
        while rec_count() == 0 {
            for &pe in pes {
                // SAFETY: live PE.
                unsafe { doca_pe_progress(pe) };
            }
        }
        take_recs();
    };
    for round in 0..2 {
        let t0 = Instant::now();
        for i in 0..iters {
            // SAFETY: our live buffer.
            ok(unsafe { doca_buf_reset_data_len(dst) });
            a.write(ca, src, dst, i).unwrap();
            spin(&[a.pe]);
        }
        let w = t0.elapsed() / iters as u32;
        // Ping-pong of 8-byte sends: half the round trip.
        let ra = a.buf(4096, 8, 0);
        let rb = b.buf(4096, 8, 0);
        let sb = b.buf(0, 8, 8);
        let t0 = Instant::now();
        for i in 0..iters {
            // SAFETY: our live buffers.
            unsafe {
                ok(doca_buf_reset_data_len(ra));
                ok(doca_buf_reset_data_len(rb));
            }
            b.recv(rb, i).unwrap();
            a.recv(ra, i).unwrap();
            a.send(ca, src, i).unwrap();
            while rec_count() < 2 {
                // SAFETY: live PEs.
                unsafe {
                    doca_pe_progress(b.pe);
                    doca_pe_progress(a.pe);
                }
            }
            take_recs();
            b.send(cb, sb, i).unwrap();
            while rec_count() < 2 {
                // SAFETY: live PEs.
                unsafe {
                    doca_pe_progress(a.pe);
                    doca_pe_progress(b.pe);
                }
            }
            take_recs();
        }
        let s = t0.elapsed() / (2 * iters as u32);
        a.release(ra);
        b.release(rb);
        b.release(sb);
        eprintln!("round {round}: 8-byte write (submit..callback) {w:?}; 8-byte send half round trip {s:?}");
    }
    a.destroy();
    b.destroy();
}

fn echo_child() {
    take_recs();
    let b = Side::new(2, Cfg::default());
    let (cb, _, _) = child_handshake(&b);
    let iters: u64 = from_parent().unwrap().parse().unwrap();
    let rb = b.buf(4096, 8, 0);
    let sb = b.buf(0, 8, 8);
    for i in 0..iters {
        // SAFETY: our live buffer.
        ok(unsafe { doca_buf_reset_data_len(rb) });
        b.recv(rb, i).unwrap();
        // Wait for this receive (the previous send's completion may come first).
        let mut got = false;
        while !got {
            // SAFETY: live PE.
            unsafe { doca_pe_progress(b.pe) };
            got = take_recs().iter().any(|r| r.kind == "receive");
        }
        b.send(cb, sb, i).unwrap();
    }
    drain(&[b.pe]);
    let _ = from_parent();
    b.destroy();
}

/// Measurement (not a check): cross-process 8-byte send ping-pong, busy polling.
#[test]
#[ignore = "measurement: cargo test --release -p doca-soft rdma::tests::measure -- --ignored --nocapture"]
fn measure_cross_process_latency() {
    match role().as_deref() {
        Some("echo-child") => return echo_child(),
        Some(_) => return,
        None => {}
    }
    take_recs();
    let a = Side::new(1, Cfg::default());
    let mut child = spawn_test("measure_cross_process_latency", "echo-child");
    let (ca, _, _) = parent_handshake(&a, &mut child);
    let iters = 100_000u64;
    child.send(&iters.to_string());
    let src = a.buf(0, 8, 8);
    let ra = a.buf(4096, 8, 0);
    let mut samples = Vec::with_capacity(iters as usize);
    let t0 = Instant::now();
    for i in 0..iters {
        let t = Instant::now();
        // SAFETY: our live buffer.
        ok(unsafe { doca_buf_reset_data_len(ra) });
        a.recv(ra, i).unwrap();
        a.send(ca, src, i).unwrap();
        while rec_count() < 2 {
            // SAFETY: live PE.
            unsafe { doca_pe_progress(a.pe) };
            assert!(t0.elapsed() < Duration::from_secs(60), "echo stalled");
        }
        take_recs();
        samples.push(t.elapsed());
    }
    samples.sort();
    let half = |d: Duration| d / 2;
    eprintln!(
        "cross-process 8-byte send, half round trip: p50 {:?} p99 {:?}",
        half(samples[samples.len() / 2]),
        half(samples[samples.len() * 99 / 100])
    );
    child.send("bye");
    child.wait_success();
    a.destroy();
}

/// (ring memfds, ring mappings, pidfds) of this process.
fn rdma_resources() -> (usize, usize, usize) {
    let mut fds = 0;
    let mut pidfds = 0;
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        if let Ok(t) = std::fs::read_link(e.path()) {
            let t = t.to_string_lossy();
            fds += usize::from(t.contains("doca-soft-rdma-ring"));
            pidfds += usize::from(t.contains("[pidfd]"));
        }
    }
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    (fds, maps.lines().filter(|l| l.contains("doca-soft-rdma-ring")).count(), pidfds)
}

fn leak_child() {
    take_recs();
    let before = rdma_resources();
    assert_eq!(before, (0, 0, 0));
    let b = Side::new(2, Cfg::default());
    let (cb, _, _) = child_handshake(&b);
    let (fds, maps, pidfds) = rdma_resources();
    // Two rings mapped; pidfds of the connection and of the imported mmap.
    assert!(fds >= 2 && maps == 2 && pidfds == 2, "{:?}", (fds, maps, pidfds));
    b.recv(b.buf(0, 8, 0), 1).unwrap();
    b.send(cb, b.buf(64, 8, 8), 2).unwrap();
    assert!(run_until(&[b.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    // A second cycle with an in-process pair, left connected at destroy.
    let c = Side::new(3, Cfg::default());
    let (_x, _y) = connect_pair(b_restarted(&b), &c);
    b.destroy();
    c.destroy();
    assert_eq!(rdma_resources(), before, "segments unmapped, descriptors closed");
    tell_parent("clean");
    let _ = from_parent();
}

fn b_restarted(b: &Side) -> &Side {
    b.stop();
    b.start();
    b
}

/// Destroy leaves nothing behind: ring segments unmapped and closed, pidfds closed (checked
/// in a single-threaded child process, so other tests cannot disturb the counts).
#[test]
fn destroy_releases_segments_and_pidfds() {
    match role().as_deref() {
        Some("leak-child") => return leak_child(),
        Some(_) => return,
        None => {}
    }
    take_recs();
    let a = Side::new(1, Cfg::default());
    let mut child = spawn_test("destroy_releases_segments_and_pidfds", "leak-child");
    let (ca, _, _) = parent_handshake(&a, &mut child);
    a.recv(a.buf(0, 8, 0), 1).unwrap();
    a.send(ca, a.buf(64, 8, 8), 2).unwrap();
    assert!(run_until(&[a.pe], T, || rec_count() >= 2));
    assert_eq!(child.recv(), "clean");
    child.send("bye");
    child.wait_success();
    take_recs();
    a.destroy();
}

#[test]
fn properties_are_validated_stored_idle_only_and_read_back() {
    let dev = crate::dev::test_open_default();
    // SAFETY: a live device.
    let info = unsafe { crate::dev::doca_dev_as_devinfo(dev) };
    let (mut r, mut pe) = (ptr::null_mut(), ptr::null_mut());
    let (mut u32v, mut u16v, mut u8v) = (0u32, 0u16, 0u8);
    // SAFETY: live objects and valid out-pointers throughout; deliberate NULLs are refused.
    unsafe {
        ok(doca_pe_create(&mut pe));
        ok(doca_rdma_create(dev, &mut r));
        // Defaults.
        ok(doca_rdma_get_transport_type(r, &mut u32v));
        assert_eq!(u32v, DOCA_RDMA_TRANSPORT_TYPE_RC);
        ok(doca_rdma_get_mtu(r, &mut u32v));
        assert_eq!(u32v, DEFAULT_MTU);
        ok(doca_rdma_get_grh_enabled(r, &mut u8v));
        assert_eq!(u8v, 1);
        ok(doca_rdma_get_permissions(r, &mut u32v));
        assert_eq!(u32v, DEFAULT_PERMISSIONS);
        ok(doca_rdma_get_max_num_connections(r, &mut u16v));
        assert_eq!(u16v, DEFAULT_MAX_CONNECTIONS);
        ok(doca_rdma_get_send_queue_size(r, &mut u32v));
        assert_eq!(u32v, DEFAULT_SEND_QUEUE_SIZE);
        // Validation.
        assert_eq!(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_DC), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(doca_rdma_set_transport_type(r, 7), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_mtu(r, DOCA_MTU_SIZE_RAW_ETHERNET), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_grh_enabled(r, 0), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(doca_rdma_set_gid_index(r, 4), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_sl(r, MAX_SL + 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_rnr_retry_count(r, MAX_RNR_RETRY + 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_connection_request_timeout(r, 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_max_send_buf_list_len(r, 17), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_set_max_send_buf_list_len(r, 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_task_receive_set_dst_buf_list_len(r, 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_get_mtu(r, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_get_sl(ptr::null(), &mut u32v), DOCA_ERROR_INVALID_VALUE);
        // Stored and read back; queue sizes rounded up to a power of two.
        ok(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_RC));
        ok(doca_rdma_set_mtu(r, DOCA_MTU_SIZE_1K_BYTES));
        ok(doca_rdma_set_grh_enabled(r, 1));
        ok(doca_rdma_set_gid_index(r, 3));
        ok(doca_rdma_set_sl(r, 3));
        ok(doca_rdma_set_rnr_retry_count(r, 5));
        ok(doca_rdma_set_connection_request_timeout(r, 1234));
        ok(doca_rdma_set_max_send_buf_list_len(r, 16));
        ok(doca_rdma_task_receive_set_dst_buf_list_len(r, 3));
        ok(doca_rdma_set_send_queue_size(r, 100));
        ok(doca_rdma_set_recv_queue_size(r, 3));
        ok(doca_rdma_set_max_num_connections(r, 5));
        ok(doca_rdma_set_permissions(r, ALL_RDMA));
        ok(doca_rdma_get_mtu(r, &mut u32v));
        assert_eq!(u32v, DOCA_MTU_SIZE_1K_BYTES);
        ok(doca_rdma_get_sl(r, &mut u32v));
        assert_eq!(u32v, 3);
        ok(doca_rdma_get_rnr_retry_count(r, &mut u8v));
        assert_eq!(u8v, 5);
        ok(doca_rdma_get_connection_request_timeout(r, &mut u16v));
        assert_eq!(u16v, 1234);
        ok(doca_rdma_get_send_queue_size(r, &mut u32v));
        assert_eq!(u32v, 128);
        ok(doca_rdma_get_recv_queue_size(r, &mut u32v));
        assert_eq!(u32v, 4);
        ok(doca_rdma_get_max_num_connections(r, &mut u16v));
        assert_eq!(u16v, 5);
        ok(doca_rdma_get_permissions(r, &mut u32v));
        assert_eq!(u32v, ALL_RDMA);
        ok(doca_rdma_get_max_send_buf_list_len(r, &mut u32v));
        assert_eq!(u32v, 16);
        ok(doca_rdma_task_receive_get_dst_buf_list_len(r, &mut u32v));
        assert_eq!(u32v, 3);
        // GPU / DPA: not supported.
        let mut h = 0u64;
        let mut g = ptr::null_mut();
        assert_eq!(doca_rdma_get_dpa_handle(r, &mut h), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(doca_rdma_get_gpu_handle(r, &mut g), DOCA_ERROR_NOT_SUPPORTED);
        // IDLE only: BAD_STATE once started, getters still answer.
        ok(doca_pe_connect_ctx(pe, doca_rdma_as_ctx(r)));
        ok(doca_ctx_start(doca_rdma_as_ctx(r)));
        assert_eq!(doca_rdma_set_mtu(r, DOCA_MTU_SIZE_2K_BYTES), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_RC), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_gid_index(r, 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_sl(r, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_grh_enabled(r, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_rnr_retry_count(r, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_connection_request_timeout(r, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_max_send_buf_list_len(r, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_task_receive_set_dst_buf_list_len(r, 1), DOCA_ERROR_BAD_STATE);
        ok(doca_rdma_get_mtu(r, &mut u32v));
        assert_eq!(u32v, DOCA_MTU_SIZE_1K_BYTES);
        assert_eq!(doca_ctx_stop(doca_rdma_as_ctx(r)), DOCA_ERROR_IN_PROGRESS);
        crate::testkit::drain(pe);
        ok(doca_rdma_destroy(r));
        ok(doca_pe_destroy(pe));

        // Capabilities: the limits enforced.
        ok(doca_rdma_cap_get_max_send_queue_size(info, &mut u32v));
        assert_eq!(u32v, MAX_QUEUE_SIZE);
        ok(doca_rdma_cap_get_max_recv_queue_size(info, &mut u32v));
        assert_eq!(u32v, MAX_QUEUE_SIZE);
        ok(doca_rdma_cap_get_max_message_size(info, &mut u32v));
        assert_eq!(u32v as usize, MAX_MESSAGE_BYTES);
        ok(doca_rdma_cap_get_max_send_buf_list_len(info, &mut u32v));
        assert_eq!(u32v, 16);
        ok(doca_rdma_cap_task_receive_get_max_dst_buf_list_len(info, DOCA_RDMA_TRANSPORT_TYPE_RC, &mut u32v));
        assert_eq!(u32v, 16);
        assert_eq!(
            doca_rdma_cap_task_receive_get_max_dst_buf_list_len(info, DOCA_RDMA_TRANSPORT_TYPE_DC, &mut u32v),
            DOCA_ERROR_NOT_SUPPORTED
        );
        ok(doca_rdma_cap_transport_type_is_supported(info, DOCA_RDMA_TRANSPORT_TYPE_RC));
        assert_eq!(
            doca_rdma_cap_transport_type_is_supported(info, DOCA_RDMA_TRANSPORT_TYPE_DC),
            DOCA_ERROR_NOT_SUPPORTED
        );
        // A RoCE port with one IPv4 address: link-local and IPv4-mapped, each for RoCE v1 and v2.
        ok(doca_rdma_cap_get_gid_table_size(info, &mut u32v));
        assert_eq!(u32v, 4);
        let mut gids = [doca_rdma_gid::default(); 5];
        ok(doca_rdma_cap_get_gid(info, 0, 4, gids.as_mut_ptr()));
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
        let link_local = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(gids.map(|g| g.raw)[..4], [link_local, link_local, v4, v4]);
        ok(doca_rdma_cap_get_gid(info, 3, 1, gids.as_mut_ptr()));
        assert_eq!(gids[0].raw, v4);
        assert_eq!(doca_rdma_cap_get_gid(info, 0, 5, gids.as_mut_ptr()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_cap_get_gid(info, 4, 1, gids.as_mut_ptr()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_rdma_cap_get_gid(info, u32::MAX, 2, gids.as_mut_ptr()), DOCA_ERROR_INVALID_VALUE);
        ok(doca_rdma_cap_task_atomic_fetch_add_is_supported(info));
        ok(doca_rdma_cap_task_receive_is_supported(info));
        assert_eq!(doca_rdma_cap_task_send_is_supported(ptr::null()), DOCA_ERROR_INVALID_VALUE);
        ok(crate::dev::doca_dev_close(dev));
    }
}

#[test]
fn task_accessors_read_back_and_refuse_changes_while_submitted() {
    let (a, b, ca, _cb) = fresh(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    let src = a.buf(0, 8, 8);
    let dst = a.rbuf(bm, base, 8, 0);
    let res = a.buf(64, 8, 0);
    let mut t = ptr::null_mut();
    // SAFETY: live objects; the task is ours until submitted and again after its callback.
    unsafe {
        ok(doca_rdma_task_atomic_fetch_add_allocate_init(a.rdma, ca, dst, res, 5, doca_data::from_u64(1), &mut t));
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_add_data(t), 5);
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_dst_buf(t), dst);
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_result_buf(t), res);
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_rdma_connection(t), ca as *const _);
        doca_rdma_task_atomic_fetch_add_set_add_data(t, 9);
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_add_data(t), 9);
        // A NULL connection is stored and refused by submit; the task stays ours.
        doca_rdma_task_atomic_fetch_add_set_rdma_connection(t, ptr::null_mut());
        assert_eq!(doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(t)), DOCA_ERROR_INVALID_VALUE);
        doca_rdma_task_atomic_fetch_add_set_rdma_connection(t, ca);
        // Getters of another type answer NULL / 0 for this task.
        assert_eq!(doca_rdma_task_send_get_src_buf(t.cast()), ptr::null());
        assert_eq!(doca_rdma_task_read_get_result_len(t.cast()), 0);
        // Hold the target ... the op completes at once; check that setters are refused while
        // the library owns it.
        ok(doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(t)));
        doca_rdma_task_atomic_fetch_add_set_add_data(t, 1000);
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_add_data(t), 9, "setter ignored while submitted");
        doca_task_free(doca_rdma_task_atomic_fetch_add_as_task(t)); // ignored: in flight
    }
    assert!(run_until(&[a.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_SUCCESS);
    let _ = src;
    a.destroy();
    b.destroy();
}

// ---- completed means delivered (a sender that stops or exits right after its completions) ----

/// Connections per round of [`completed_sends_survive_a_sender_that_stops_at_once`].
const LOSS_CONNS: usize = 3;
/// Rounds per run; each round uses fresh ctxs on both sides.
const LOSS_ROUNDS: usize = 24;

/// The sender: per round, one ctx with LOSS_CONNS connections, one message on each; as soon
/// as all their completions report success it stops its ctx (even rounds), destroys
/// everything (odd rounds), or exits the process (the last round), without waiting for the
/// receiver.
fn loss_sender() {
    for round in 0..LOSS_ROUNDS {
        take_recs();
        let b = Side::new(2, Cfg::default());
        let mut conns = Vec::new();
        let mut blobs = Vec::new();
        for _ in 0..LOSS_CONNS {
            let (blob, c) = b.export().unwrap();
            blobs.push(hex(&blob));
            conns.push(c);
        }
        tell_parent(&blobs.join(" "));
        let line = from_parent().expect("the receiver's blobs");
        for (blob, &c) in line.split(' ').zip(&conns) {
            b.connect(&unhex(blob), c).unwrap();
        }
        assert_eq!(from_parent().as_deref(), Some("go"));
        for (i, &c) in conns.iter().enumerate() {
            let off = 64 * i;
            b.mem()[off..off + 8].copy_from_slice(format!("msg{round:02}-{i:02}").as_bytes());
            b.send(c, b.buf(off, 8, 8), i as u64).unwrap();
        }
        assert!(run_until(&[b.pe], T, || rec_count() >= LOSS_CONNS), "the sends never completed");
        let recs = take_recs();
        assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "round {round}: {recs:?}");
        if round + 1 == LOSS_ROUNDS {
            tell_parent("exiting");
            std::process::exit(0);
        }
        if round % 2 == 0 {
            b.stop();
        }
        b.destroy();
        tell_parent("stopped");
    }
}

/// The receiver posts one receive at a time (re-posting from the completion loop, as simple
/// DOCA programs do) and so is still consuming when the sender stops or exits. Every message
/// whose send was reported complete must arrive, on every connection, before the peer's loss
/// is reported; the ctx then enters the error state with a connection error.
#[test]
fn completed_sends_survive_a_sender_that_stops_at_once() {
    match role().as_deref() {
        Some("loss-sender") => return loss_sender(),
        Some(_) => return,
        None => {}
    }
    let mut child = spawn_test("completed_sends_survive_a_sender_that_stops_at_once", "loss-sender");
    for round in 0..LOSS_ROUNDS {
        take_recs();
        let a = Side::new(1, Cfg::default());
        let theirs = child.recv();
        let mut ours = Vec::new();
        for blob in theirs.split(' ') {
            let (mine, c) = a.export().unwrap();
            a.connect(&unhex(blob), c).unwrap();
            ours.push(hex(&mine));
        }
        assert_eq!(ours.len(), LOSS_CONNS);
        child.send(&ours.join(" "));
        let mut posted = 0;
        a.recv(a.buf(0, 64, 0), 0).unwrap();
        posted += 1;
        child.send("go");
        let mut got = Vec::new();
        let mut failed = None;
        let deadline = Instant::now() + T;
        while got.len() < LOSS_CONNS && failed.is_none() {
            assert!(Instant::now() < deadline, "round {round}: stuck with {got:?}");
            drain(&[a.pe]);
            for r in take_recs() {
                if r.status != DOCA_SUCCESS {
                    failed = Some(r.status);
                    continue;
                }
                got.push(r.conn);
                if posted < LOSS_CONNS {
                    if let Err(e) = a.recv(a.buf(64 * posted, 64, 0), posted as u64) {
                        failed = Some(e);
                    }
                    posted += 1;
                }
            }
        }
        assert_eq!(
            got.len(),
            LOSS_CONNS,
            "round {round}: {} of {LOSS_CONNS} completed sends arrived, then {}",
            got.len(),
            failed.map_or_else(|| "-".into(), name)
        );
        let mut texts: Vec<String> =
            (0..LOSS_CONNS).map(|i| String::from_utf8_lossy(&a.mem()[64 * i..64 * i + 8]).into_owned()).collect();
        texts.sort();
        let want: Vec<String> = (0..LOSS_CONNS).map(|i| format!("msg{round:02}-{i:02}")).collect();
        assert_eq!(texts, want, "round {round}");
        let bye = child.recv();
        // The sender is gone: the next receive fails with a connection error (at submit when
        // the loss is known already, else at completion), never a hang.
        let status = match a.recv(a.buf(512, 64, 0), 99) {
            Err(e) => e,
            Ok(()) => {
                assert!(run_until(&[a.pe], T, || rec_count() >= 1), "round {round}: the loss was never reported");
                take_recs()[0].status
            }
        };
        assert!(
            status == DOCA_ERROR_CONNECTION_RESET || status == DOCA_ERROR_CONNECTION_ABORTED,
            "round {round}: {}",
            name(status)
        );
        a.destroy();
        if bye == "exiting" {
            break;
        }
    }
    child.wait_success();
}

/// A peer that stops in the middle of a message larger than the ring leaves a record it only
/// partly published, which never completes: the receive that was filling it is given back
/// and takes the complete message of the other connection, then the loss is reported. Before
/// the fix the receive waited forever, and so did the other connection's message (found by
/// tests/chaos.rs: a peer killed mid-message, one receive posted, two connections).
#[test]
fn a_record_a_stopped_peer_only_partly_published_gives_its_receive_back() {
    take_recs();
    let big = 3 * SMALL_RING;
    let cfg = Cfg { mem_len: 2 * big, max_conns: SMALL_RING_CONNS, ..Cfg::default() };
    let (a, b) = (Side::new(1, cfg), Side::new(2, cfg));
    let (a0, b0) = connect_pair(&a, &b);
    let (_a1, b1) = connect_pair(&a, &b);
    // b streams a message three rings long on connection 1: one ring's worth is published.
    b.send(b1, b.buf(0, big, big), 1).unwrap();
    drain(&[b.pe]);
    // a's only receive starts taking it (and frees the ring: b publishes a second ring's worth).
    a.recv(a.buf(0, big, 0), 10).unwrap();
    drain(&[a.pe]);
    b.mem()[big..big + 8].copy_from_slice(b"complete");
    b.send(b0, b.buf(big, 8, 8), 2).unwrap();
    drain(&[b.pe]);
    assert_eq!(rec_count(), 1, "only the small send completed");
    assert_eq!(take_recs()[0].ud, 2);
    // b stops mid-message: its record on connection 1 is partial for good.
    b.stop();
    take_recs();
    assert!(run_until(&[a.pe], T, || rec_count() >= 1), "the receive never completed");
    let r = take_recs()[0];
    assert_eq!((r.ud, r.status, r.len, r.conn), (10, DOCA_SUCCESS, 8, a0 as usize), "{r:?}");
    assert_eq!(&a.mem()[..8], b"complete");
    // Nothing deliverable is left: the next receive fails with the loss, never hangs.
    let failed = match a.recv(a.buf(big, 64, 0), 11) {
        Err(e) => e,
        Ok(()) => {
            assert!(run_until(&[a.pe], T, || rec_count() >= 1), "the loss was never reported");
            take_recs()[0].status
        }
    };
    assert_eq!(failed, DOCA_ERROR_CONNECTION_RESET, "{}", name(failed));
    b.destroy();
    a.destroy();
}

/// `doca_task_submit_ex` without FLUSH posts the work request and defers only the doorbell:
/// a full send or receive queue refuses the submit itself (`NO_MEMORY`, the caller's
/// back-pressure), exactly as a flushed submit does, and every task it accepted completes
/// successfully once flushed (none is failed at the flush for lack of room).
#[test]
fn deferred_submits_take_their_queue_place_at_submit() {
    let small = Cfg { sq: 4, rq: 2, ..Cfg::default() };
    let (a, b, ca, _cb) = fresh(small, small);
    let alloc_send = |ud: u64| {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        ok(unsafe { doca_rdma_task_send_allocate_init(a.rdma, ca, a.buf(0, 8, 8), doca_data::from_u64(ud), &mut t) });
        // SAFETY: a send task just allocated.
        unsafe { doca_rdma_task_send_as_task(t) }
    };
    let mut accepted = Vec::new();
    let refused = loop {
        let t = alloc_send(accepted.len() as u64);
        // SAFETY: a task of ours, allocated and not submitted.
        let rc = unsafe { doca_task_submit_ex(t, DOCA_TASK_SUBMIT_FLAG_NONE) };
        if rc != DOCA_SUCCESS {
            // SAFETY: a refused submit leaves the task with us.
            unsafe { doca_task_free(t) };
            break rc;
        }
        accepted.push(t);
        assert!(accepted.len() < 100);
    };
    assert_eq!(refused, DOCA_ERROR_NO_MEMORY, "a full send queue refuses the deferred submit");
    assert_eq!(accepted.len(), 4, "the queue holds sq_size tasks, held ones included");
    // Receives on the peer, deferred the same way: two fit, the third is refused.
    for ud in 0..3u64 {
        let mut t = ptr::null_mut();
        // SAFETY: live objects, valid out-pointer.
        ok(unsafe { doca_rdma_task_receive_allocate_init(b.rdma, ptr::null_mut(), doca_data::from_u64(ud), &mut t) });
        // SAFETY: a receive task just allocated.
        let t = unsafe { doca_rdma_task_receive_as_task(t) };
        // SAFETY: as above.
        let rc = unsafe { doca_task_submit_ex(t, DOCA_TASK_SUBMIT_FLAG_NONE) };
        if ud < 2 {
            ok(rc);
        } else {
            assert_eq!(rc, DOCA_ERROR_NO_MEMORY, "a full receive queue refuses the deferred submit");
            // SAFETY: refused: still ours.
            unsafe { doca_task_free(t) };
        }
    }
    take_recs();
    // SAFETY: live, RUNNING ctxs.
    unsafe {
        doca_ctx_flush_tasks(a.ctx());
        doca_ctx_flush_tasks(b.ctx());
    }
    let mut recs = Vec::new();
    assert!(run_until(&[a.pe, b.pe], Duration::from_secs(10), || {
        recs.extend(take_recs());
        recs.iter().filter(|r| r.side == a._id && r.kind == "send").count() == 4
    }));
    for r in recs.iter().filter(|r| r.side == a._id) {
        assert_eq!(r.status, DOCA_SUCCESS, "{} {} failed at the flush: {}", r.kind, r.ud, name(r.status));
    }
    a.destroy();
    b.destroy();
}

/// Whether the shared `consumer_sleeping` flag of `c`'s receive ring is set.
fn sleep_flag(c: *mut doca_rdma_connection) -> bool {
    // SAFETY: a connection of a live rdma of this test.
    unsafe { &*c }.rx.borrow().as_ref().is_some_and(|rx| rx.sleeping_in_header())
}

fn progress_n(pe: *mut doca_pe, n: usize) {
    for _ in 0..n {
        // SAFETY: live PE.
        unsafe { doca_pe_progress(pe) };
    }
}

/// A progress of a PE that is not armed skips the walk over the sleeping flags once they are
/// all clear (issue 14). The flag must still follow "armed, and a receive posted or filling":
/// set by an arm after a receive posted while polling, by a receive posted while armed with
/// nothing to do, and by the first progress after a connection made while armed; cleared by
/// the first progress after the disarm. A flag left clear is a receiver that sleeps through a
/// send (a hang), which each wake-up below would catch.
#[test]
fn sleep_flags_follow_arm_and_disarm_after_idle_progress() {
    let (a, b, ca, cb) = fresh(Cfg::default(), Cfg::default());
    // Polling with no receive, past a liveness poll: nothing is announced.
    progress_n(b.pe, 200);
    assert!(!sleep_flag(cb));
    // A receive posted while polling: still nothing (a polling PE is never rung) until the arm.
    b.recv(b.buf(0, 64, 0), 1).unwrap();
    progress_n(b.pe, 10);
    assert!(!sleep_flag(cb), "a polling receiver is never rung");
    assert!(arm(b.pe), "nothing to do yet");
    assert!(sleep_flag(cb), "the arm announces sleep: a receive is posted");
    a.send(ca, a.buf(0, 4, 4), 2).unwrap();
    assert!(fd_readable(b.pe, 5000), "the send rang the armed receiver");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(b.pe, 0) });
    progress_n(b.pe, 1);
    assert!(!sleep_flag(cb), "the first progress after the disarm clears the flag");
    drain(&[b.pe, a.pe]);
    assert_eq!(take_recs().len(), 2);
    // Armed with nothing posted (every flag clear), then a receive posted while armed, as from
    // a callback in the drain after the arm.
    progress_n(b.pe, 200);
    assert!(arm(b.pe), "nothing to do");
    assert!(!sleep_flag(cb), "no receive: records just wait in the ring");
    b.recv(b.buf(0, 64, 0), 3).unwrap();
    assert!(sleep_flag(cb), "a receive posted while armed announces sleep");
    progress_n(b.pe, 3);
    assert!(sleep_flag(cb), "progress while armed keeps it");
    a.send(ca, a.buf(0, 4, 4), 4).unwrap();
    assert!(fd_readable(b.pe, 5000), "the send rang the armed receiver");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(b.pe, 0) });
    drain(&[b.pe, a.pe]);
    assert_eq!(take_recs().len(), 2);
    // A connection made while armed, with a receive posted and no flag set anywhere: the next
    // progress (the drain after the arm) announces sleep on its ring.
    let c = Side::new(3, Cfg::default());
    c.recv(c.buf(0, 64, 0), 5).unwrap();
    assert!(arm(c.pe), "no connection: nothing to do");
    let (ac, cc) = connect_pair(&a, &c);
    assert_eq!(drain(&[c.pe]), 0);
    assert!(sleep_flag(cc), "the progress after the connect announces sleep");
    a.send(ac, a.buf(0, 4, 4), 6).unwrap();
    assert!(fd_readable(c.pe, 5000), "the send rang the armed receiver");
    // SAFETY: live PE.
    ok(unsafe { doca_pe_clear_notification(c.pe, 0) });
    assert!(run_until(&[a.pe, c.pe], T, || rec_count() >= 2));
    assert!(take_recs().iter().all(|r| r.status == DOCA_SUCCESS));
    a.destroy();
    b.destroy();
    c.destroy();
}

/// Progress skips a receive ring with nothing to take (issue 14), but a corrupt producer
/// cursor is still a broken connection, also when no receive is posted.
#[test]
fn a_corrupt_ring_breaks_its_connection_with_no_receive_posted() {
    let (a, b, _ca, cb) = fresh(Cfg::default(), Cfg::default());
    progress_n(b.pe, 10);
    assert_eq!(b.state(), DOCA_CTX_STATE_RUNNING);
    {
        // SAFETY: a connection of b, alive until b is destroyed.
        let rx = unsafe { &*cb }.rx.borrow();
        let rx = rx.as_ref().unwrap();
        rx.store_tail(rx.capacity() as u64 + 1);
    }
    progress_n(b.pe, 1);
    // SAFETY: as above.
    assert_ne!(unsafe { &*cb }.state(), ConnState::Connected, "the corrupt ring broke the connection");
    assert_eq!(b.recv(b.buf(0, 64, 0), 1), Err(DOCA_ERROR_CONNECTION_RESET));
    a.destroy();
    b.destroy();
}

/// The idle walk skips a connection whose ring holds a record while no receive is posted,
/// but a receive that an earlier connection's turn gives back in the same walk (a record its
/// stopped peer only partly published) makes the next connection's waiting record
/// takeable at once: one progress call delivers it. Pins the re-read of the receive
/// threshold after each connection's turn (`rx_quiet_min` in `data_progress_from`).
#[test]
fn a_receive_given_back_in_a_walk_takes_a_later_connections_record_in_that_walk() {
    take_recs();
    let big = 3 * SMALL_RING;
    let cfg = Cfg { mem_len: 2 * big, max_conns: SMALL_RING_CONNS, ..Cfg::default() };
    let (a, b, c) = (Side::new(1, cfg), Side::new(2, cfg), Side::new(3, cfg));
    // a's connection 0 goes to b, connection 1 to c: the walk visits b's first.
    let (_a0, b0) = connect_pair(&a, &b);
    let (a1, c1) = connect_pair(&a, &c);
    // b streams a message three rings long: one ring's worth is published, and a's only
    // receive starts taking it.
    b.send(b0, b.buf(0, big, big), 1).unwrap();
    drain(&[b.pe]);
    a.recv(a.buf(0, big, 0), 10).unwrap();
    drain(&[a.pe]);
    // c's small message waits in a's other ring: the receive is busy with b's record.
    c.mem()[..8].copy_from_slice(b"complete");
    c.send(c1, c.buf(0, 8, 8), 2).unwrap();
    drain(&[c.pe]);
    drain(&[a.pe]);
    assert_eq!(rec_count(), 1, "only c's send completed");
    take_recs();
    // b stops mid-message: one progress of a gives the receive back (connection 0's turn)
    // and takes c's record with it (connection 1, in the same walk).
    b.stop();
    // b's flushed send.
    take_recs();
    // SAFETY: live PE.
    assert_eq!(unsafe { doca_pe_progress(a.pe) }, 1);
    let recs = take_recs();
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = recs[0];
    assert_eq!((r.ud, r.status, r.len, r.conn), (10, DOCA_SUCCESS, 8, a1 as usize), "{r:?}");
    assert_eq!(&a.mem()[..8], b"complete");
    b.destroy();
    c.destroy();
    a.destroy();
}

mod lists;
