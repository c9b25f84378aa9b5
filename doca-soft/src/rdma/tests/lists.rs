//! Buffer lists over RDMA, up to the configured lengths: a send gathers its source list and the
//! receive scatters into its destination list (also for a message larger than the ring, which
//! streams), a write gathers, a read scatters; longer lists and elements on the wrong side are
//! refused at submit.

use super::*;

/// Chains `bufs` into one list; returns its first element.
fn chain(bufs: &[*mut doca_buf]) -> *mut doca_buf {
    for &b in &bufs[1..] {
        // SAFETY: buffers of this test, first elements with a count of 1.
        ok(unsafe { doca_buf_chain_list(bufs[0], b) });
    }
    bufs[0]
}

/// Splits a list back into lists of one, so that the rig can return each buffer on its own.
fn unchain(bufs: &[*mut doca_buf]) {
    for &b in bufs[1..].iter().rev() {
        // SAFETY: `b` follows `bufs[0]` in its list.
        ok(unsafe { doca_buf_unchain_list(bufs[0], b) });
    }
}

fn data_of(b: *mut doca_buf) -> Vec<u8> {
    let (mut p, mut n) = (ptr::null_mut(), 0);
    // SAFETY: a live local buffer; its payload is readable memory of the side.
    unsafe {
        ok(doca_buf_get_data(b, &mut p));
        ok(doca_buf_get_data_len(b, &mut n));
        std::slice::from_raw_parts(p as *const u8, n).to_vec()
    }
}

fn lists_cfg() -> Cfg {
    Cfg { buf_list_len: 3, ..Cfg::default() }
}

#[test]
fn send_write_and_read_gather_and_scatter_through_lists() {
    let (a, b, ca, _cb) = fresh(lists_cfg(), lists_cfg());
    // The receive: rooms 4 (after "ab"), 3 and 10.
    b.mem()[0..2].copy_from_slice(b"ab");
    let rl = [b.buf(0, 6, 2), b.buf(16, 3, 0), b.buf(32, 10, 0)];
    b.recv(chain(&rl), 1).unwrap();
    // The send: "HELLO", an empty element, "WORLD!!".
    a.mem()[0..5].copy_from_slice(b"HELLO");
    a.mem()[16..23].copy_from_slice(b"WORLD!!");
    let sl = [a.buf(0, 5, 5), a.buf(8, 4, 0), a.buf(16, 7, 7)];
    a.send(ca, chain(&sl), 2).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    let recs = take_recs();
    let got: Vec<_> = recs.iter().map(|r| (r.kind, r.ud, r.status, r.len)).collect();
    assert!(got.contains(&("receive", 1, DOCA_SUCCESS, 12)), "{got:?}");
    assert!(got.contains(&("send", 2, DOCA_SUCCESS, 0)), "{got:?}");
    let parts: Vec<Vec<u8>> = rl.iter().map(|&x| data_of(x)).collect();
    assert_eq!(parts, [b"abHELL".to_vec(), b"OWO".to_vec(), b"RLD!!".to_vec()]);

    // A write gathers into one remote range; a read scatters one remote range.
    let (bm, base) = a.import(&b.export_mem());
    a.mem()[100..105].copy_from_slice(b"12345");
    a.mem()[200..203].copy_from_slice(b"678");
    let wl = [a.buf(100, 5, 5), a.buf(200, 3, 3)];
    let wdst = a.rbuf(bm, base + 4096, 64, 0);
    a.write(ca, chain(&wl), wdst, 3).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_SUCCESS);
    assert_eq!(&b.mem()[4096..4104], b"12345678");
    assert_eq!(data_len(wdst), 8);
    let dl = [a.buf(300, 3, 0), a.buf(400, 9, 4)];
    let rsrc = a.rbuf(bm, base + 4096, 8, 8);
    a.read(ca, rsrc, chain(&dl), 4).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 1));
    assert_eq!(take_recs()[0].status, DOCA_SUCCESS);
    assert_eq!(data_of(dl[0]), b"123");
    assert_eq!(&data_of(dl[1])[4..], b"45678");

    // Refused at submit: one element over the limit, an element on the wrong side, a receive
    // list over its limit, a read into a list with too little room.
    let four = [a.buf(500, 1, 1), a.buf(501, 1, 1), a.buf(502, 1, 1), a.buf(503, 1, 1)];
    assert_eq!(a.send(ca, chain(&four), 5), Err(DOCA_ERROR_INVALID_VALUE));
    let mixed = [a.buf(600, 1, 1), a.rbuf(bm, base, 1, 1)];
    assert_eq!(a.send(ca, chain(&mixed), 6), Err(DOCA_ERROR_INVALID_VALUE));
    let rfour = [b.buf(700, 1, 0), b.buf(701, 1, 0), b.buf(702, 1, 0), b.buf(703, 1, 0)];
    assert_eq!(b.recv(chain(&rfour), 7), Err(DOCA_ERROR_INVALID_VALUE));
    let small = [a.buf(800, 3, 0), a.buf(810, 4, 0)];
    let rsrc8 = a.rbuf(bm, base + 4096, 8, 8);
    assert_eq!(a.read(ca, rsrc8, chain(&small), 8), Err(DOCA_ERROR_INVALID_VALUE));
    assert!(take_recs().is_empty());

    for l in [&rl[..], &sl, &wl, &dl, &four, &mixed, &small] {
        unchain(l);
    }
    unchain(&rfour);
    a.destroy();
    b.destroy();
}

#[test]
fn a_gathered_message_larger_than_the_ring_streams_into_a_scattered_receive() {
    let part = SMALL_RING / 2 + 4321;
    let cfg = Cfg { mem_len: 4 << 20, max_conns: SMALL_RING_CONNS, ..lists_cfg() };
    let (a, b, ca, _cb) = fresh(cfg, cfg);
    for (i, x) in a.mem()[..3 * part].iter_mut().enumerate() {
        *x = (i % 253) as u8;
    }
    // Source: three parts; destination: two uneven halves with a different boundary.
    let sl = [a.buf(0, part, part), a.buf(part, part, part), a.buf(2 * part, part, part)];
    let first = part + 1000;
    let rl = [b.buf(0, first, 0), b.buf(1 << 21, 3 * part - first, 0)];
    b.recv(chain(&rl), 1).unwrap();
    a.send(ca, chain(&sl), 2).unwrap();
    assert!(run_until(&[a.pe, b.pe], T, || rec_count() >= 2));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{:?}", recs.iter().map(|r| r.status).collect::<Vec<_>>());
    let want = a.mem()[..3 * part].to_vec();
    assert_eq!(data_of(rl[0]), want[..first]);
    assert_eq!(data_of(rl[1]), want[first..]);
    unchain(&sl);
    unchain(&rl);
    a.destroy();
    b.destroy();
}
