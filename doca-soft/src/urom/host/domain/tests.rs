//! Unit tests of `domain.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;
use crate::urom::proto::PluginAddr;
use std::collections::HashMap;

// A fake in-process OOB fabric shared by the "ranks" of one test (thread-local: tests run in
// parallel on their own threads). A request completes once every rank has contributed to
// its round, and only when tested (like a non-blocking MPI collective).
struct Fabric {
    n: usize,
    /// round → (rank → contribution)
    rounds: HashMap<usize, HashMap<usize, Vec<u8>>>,
    reqs: Vec<FakeReq>,
    tests: usize,
    fail_round: Option<usize>,
}
struct FakeReq {
    rank: usize,
    round: usize,
    rbuf: *mut u8,
    msglen: usize,
    freed: bool,
}

thread_local! {
    static FABRIC: RefCell<Option<Fabric>> = const { RefCell::new(None) };
}

unsafe extern "C" fn fake_allgather(
    sbuf: *mut c_void,
    rbuf: *mut c_void,
    msglen: usize,
    info: *mut c_void,
    req: *mut *mut c_void,
) -> doca_error_t {
    let rank = info as usize;
    FABRIC.with(|f| {
        let mut f = f.borrow_mut();
        let f = f.as_mut().unwrap();
        let round = f.reqs.iter().filter(|r| r.rank == rank).count();
        if f.fail_round == Some(round) {
            return DOCA_ERROR_IO_FAILED;
        }
        // SAFETY: the exchange passes `msglen` readable bytes.
        let data = unsafe { core::slice::from_raw_parts(sbuf.cast::<u8>(), msglen) }.to_vec();
        f.rounds.entry(round).or_default().insert(rank, data);
        f.reqs.push(FakeReq { rank, round, rbuf: rbuf.cast(), msglen, freed: false });
        // SAFETY: valid out-pointer from the exchange.
        unsafe { *req = f.reqs.len() as *mut c_void };
        DOCA_SUCCESS
    })
}

unsafe extern "C" fn fake_test(req: *mut c_void) -> doca_error_t {
    FABRIC.with(|f| {
        let mut f = f.borrow_mut();
        let f = f.as_mut().unwrap();
        f.tests += 1;
        let r = &f.reqs[req as usize - 1];
        assert!(!r.freed, "test after free");
        let got = &f.rounds[&r.round];
        if got.len() < f.n {
            return DOCA_ERROR_IN_PROGRESS;
        }
        for (rank, data) in got {
            assert_eq!(data.len(), r.msglen, "every rank gathers the same length");
            // SAFETY: rbuf has msglen × n bytes, kept alive by the exchange until freed.
            unsafe { ptr::copy_nonoverlapping(data.as_ptr(), r.rbuf.add(rank * r.msglen), r.msglen) };
        }
        DOCA_SUCCESS
    })
}

unsafe extern "C" fn fake_free(req: *mut c_void) -> doca_error_t {
    FABRIC.with(|f| {
        let mut f = f.borrow_mut();
        let r = &mut f.as_mut().unwrap().reqs[req as usize - 1];
        assert!(!r.freed, "double free");
        r.freed = true;
        DOCA_SUCCESS
    })
}

fn oob(rank: usize, n: u32) -> doca_urom_domain_oob_coll {
    doca_urom_domain_oob_coll {
        allgather: Some(fake_allgather),
        req_test: Some(fake_test),
        req_free: Some(fake_free),
        coll_info: rank as *mut c_void,
        n_oob_indexes: n,
        oob_index: rank as u32,
    }
}

fn fabric(n: usize, fail_round: Option<usize>) {
    FABRIC
        .with(|f| *f.borrow_mut() = Some(Fabric { n, rounds: HashMap::new(), reqs: Vec::new(), tests: 0, fail_round }));
}

fn members(id: u64, addr: &[u8], nsegs: usize) -> Vec<Member> {
    vec![Member {
        worker_id: id,
        addrs: vec![PluginAddr { plugin: 1, addr: addr.to_vec() }, PluginAddr { plugin: 2, addr: vec![9; 3] }],
        segs: (0..nsegs)
            .map(|i| Seg { va: 0x1000 * (i as u64 + 1), len: 64, memh: vec![i as u8; 5], mkey: vec![0xEE; 2] })
            .collect(),
    }]
}

#[test]
fn two_ranks_exchange_descriptions_of_different_lengths() {
    fabric(2, None);
    let m0 = members(10, b"rank-zero-address", 0);
    let m1 = members(11, b"r1", 3);
    let (l0, l1) = (wire::encode_members(&m0), wire::encode_members(&m1));
    assert_ne!(l0.len(), l1.len());
    let mut x0 = OobExchange::start(oob(0, 2), l0.clone()).unwrap();
    // Rank 1 has not joined: rank 0's first round cannot finish.
    assert_eq!(x0.poll(), Poll::Pending);
    let mut x1 = OobExchange::start(oob(1, 2), l1.clone()).unwrap();
    let (mut d0, mut d1) = (None, None);
    for _ in 0..100 {
        if d0.is_none() {
            match x0.poll() {
                Poll::Pending => {}
                Poll::Done(v) => d0 = Some(v),
                Poll::Failed(e) => panic!("{e:?}"),
            }
        }
        if d1.is_none() {
            match x1.poll() {
                Poll::Pending => {}
                Poll::Done(v) => d1 = Some(v),
                Poll::Failed(e) => panic!("{e:?}"),
            }
        }
    }
    let (d0, d1) = (d0.expect("rank 0 done"), d1.expect("rank 1 done"));
    assert_eq!(d0, vec![l0.clone(), l1.clone()]);
    assert_eq!(d0, d1);
    assert_eq!(wire::decode_members(&d0[1]).unwrap(), m1);
    FABRIC.with(|f| {
        let f = f.borrow();
        let f = f.as_ref().unwrap();
        assert_eq!(f.reqs.len(), 4, "two rounds per rank");
        assert!(f.reqs.iter().all(|r| r.freed), "every request freed");
        assert_eq!(f.reqs.iter().filter(|r| r.round == 0).map(|r| r.msglen).collect::<Vec<_>>(), vec![8, 8]);
        let max = l0.len().max(l1.len());
        assert!(f.reqs.iter().filter(|r| r.round == 1).all(|r| r.msglen == max), "padded to the longest");
    });
    // Finished: polling again is a state error, not a new round.
    assert_eq!(x0.poll(), Poll::Failed(DOCA_ERROR_BAD_STATE));
}

#[test]
fn callback_failures_fail_the_exchange() {
    fabric(1, Some(0));
    assert_eq!(OobExchange::start(oob(0, 1), vec![1, 2, 3]).err(), Some(DOCA_ERROR_IO_FAILED));
    fabric(1, Some(1));
    let mut x = OobExchange::start(oob(0, 1), vec![1, 2, 3]).unwrap();
    assert_eq!(x.poll(), Poll::Failed(DOCA_ERROR_IO_FAILED));
}

#[test]
fn a_rank_announcing_a_wrong_length_fails() {
    // Our own slot in round 1 must be our length; a fabric that mixes ranks up is caught.
    fabric(2, None);
    let mut x = OobExchange::start(oob(0, 2), vec![0; 10]).unwrap();
    let mut y = OobExchange::start(oob(1, 2), vec![0; 20]).unwrap();
    // Swap the contributions of round 0 (a broken collective).
    FABRIC.with(|f| {
        let mut f = f.borrow_mut();
        let r = f.as_mut().unwrap().rounds.get_mut(&0).unwrap();
        let a = r.remove(&0).unwrap();
        let b = r.remove(&1).unwrap();
        r.insert(0, b);
        r.insert(1, a);
    });
    assert_eq!(x.poll(), Poll::Failed(DOCA_ERROR_INVALID_VALUE));
    assert_eq!(y.poll(), Poll::Failed(DOCA_ERROR_INVALID_VALUE));
}

#[test]
fn abandoning_a_running_request_does_not_free_it() {
    fabric(2, None);
    let x = OobExchange::start(oob(0, 2), vec![1; 4]).unwrap();
    x.abandon();
    FABRIC.with(|f| assert!(!f.borrow().as_ref().unwrap().reqs[0].freed));
    // Finished by then: freed.
    let y = OobExchange::start(oob(1, 2), vec![1; 4]).unwrap();
    y.abandon();
    FABRIC.with(|f| assert!(f.borrow().as_ref().unwrap().reqs[1].freed));
}
