//! Every collective, op and type over the in-memory transport, against straightforward
//! references; concurrency, mismatches and failures.
//!
//! Float inputs of the exact-comparison tests are multiples of 0.5 between -3 and 3: every sum
//! and product of up to 8 of them is exactly representable in f32, so any association order gives
//! the same bits and the results can be compared exactly. `random_floats_*` uses arbitrary values
//! and checks that all members agree bit for bit and are within a relative tolerance.

use coll_algorithms::testing::{LocalNet, Outcome, SplitMix64};
use coll_algorithms::{Algorithm, Collective, Comm, DataType, Error, Kind, ReduceOp, TransportErrorKind, Tuning};

const SIZES: [usize; 7] = [1, 2, 3, 4, 5, 7, 8];

fn rd() -> Tuning {
    Tuning { allreduce_ring_threshold_bytes: usize::MAX, allgather_rd_threshold_bytes: usize::MAX, ..Tuning::default() }
}

fn ring() -> Tuning {
    Tuning { allreduce_ring_threshold_bytes: 0, allgather_rd_threshold_bytes: 0, ..Tuning::default() }
}

fn gen(rng: &mut SplitMix64, dtype: DataType, count: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(count * dtype.size());
    for _ in 0..count {
        let bits = rng.next_u64();
        let half = (rng.below(13) as f64 - 6.0) * 0.5;
        match dtype {
            DataType::I32 => out.extend_from_slice(&(bits as i32).to_le_bytes()),
            DataType::I64 => out.extend_from_slice(&(bits as i64).to_le_bytes()),
            DataType::U64 => out.extend_from_slice(&bits.to_le_bytes()),
            DataType::F32 => out.extend_from_slice(&(half as f32).to_le_bytes()),
            DataType::F64 => out.extend_from_slice(&half.to_le_bytes()),
        }
    }
    out
}

/// Element `i` of every input combined left to right, one scalar at a time.
fn reference(dtype: DataType, op: ReduceOp, inputs: &[Vec<u8>]) -> Vec<u8> {
    let n = dtype.size();
    let count = inputs[0].len() / n;
    let mut out = Vec::with_capacity(inputs[0].len());
    macro_rules! fold {
        ($t:ty, $sum:expr, $prod:expr, $min:expr, $max:expr) => {
            for i in 0..count {
                let val = |b: &Vec<u8>| <$t>::from_le_bytes(b[i * n..(i + 1) * n].try_into().unwrap());
                let mut acc = val(&inputs[0]);
                for b in &inputs[1..] {
                    let x = val(b);
                    acc = match op {
                        ReduceOp::Sum => $sum(acc, x),
                        ReduceOp::Prod => $prod(acc, x),
                        ReduceOp::Min => $min(acc, x),
                        ReduceOp::Max => $max(acc, x),
                    };
                }
                out.extend_from_slice(&acc.to_le_bytes());
            }
        };
    }
    match dtype {
        DataType::I32 => fold!(i32, i32::wrapping_add, i32::wrapping_mul, i32::min, i32::max),
        DataType::I64 => fold!(i64, i64::wrapping_add, i64::wrapping_mul, i64::min, i64::max),
        DataType::U64 => fold!(u64, u64::wrapping_add, u64::wrapping_mul, u64::min, u64::max),
        DataType::F32 => fold!(
            f32,
            |a: f32, b: f32| a + b,
            |a: f32, b: f32| a * b,
            |a: f32, b: f32| if b < a { b } else { a },
            |a: f32, b: f32| if b > a { b } else { a }
        ),
        DataType::F64 => fold!(
            f64,
            |a: f64, b: f64| a + b,
            |a: f64, b: f64| a * b,
            |a: f64, b: f64| if b < a { b } else { a },
            |a: f64, b: f64| if b > a { b } else { a }
        ),
    }
    out
}

fn net(size: usize, seed: u64) -> LocalNet {
    // Odd seeds deliver at once, even ones in random order.
    if seed % 2 == 1 {
        LocalNet::new(size)
    } else {
        LocalNet::shuffled(size, seed)
    }
}

fn check_allreduce(size: usize, dtype: DataType, op: ReduceOp, count: usize, tuning: Tuning, seed: u64) {
    let mut rng = SplitMix64::new(seed);
    let inputs: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut rng, dtype, count)).collect();
    let expect = reference(dtype, op, &inputs);
    let mut colls: Vec<Collective> =
        inputs.iter().map(|i| Collective::allreduce(7, dtype, op, i.clone(), &tuning)).collect();
    let outcomes = net(size, seed).run(&mut colls);
    for (rank, o) in outcomes.into_iter().enumerate() {
        let got = o.unwrap();
        assert!(got == expect, "allreduce {dtype} {op} size {size} count {count} {tuning:?}: rank {rank} differs");
    }
    let algo = colls[0].signature().unwrap().algorithm;
    assert_eq!(algo, tuning.allreduce_algorithm(count * dtype.size()));
}

#[test]
fn allreduce_every_type_op_size_and_algorithm() {
    let mut seed = 1;
    for size in SIZES {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                for tuning in [rd(), ring()] {
                    let mut rng = SplitMix64::new(seed);
                    let counts = [0, 1, size.saturating_sub(1), size + 1, 2 + rng.below(300)];
                    for count in counts {
                        check_allreduce(size, dtype, op, count, tuning, seed);
                        seed += 1;
                    }
                }
            }
        }
    }
}

#[test]
fn allreduce_default_tuning_switches_at_64k() {
    for (count, algo) in [(8191, Algorithm::RecursiveDoubling), (8192, Algorithm::Ring)] {
        check_allreduce(5, DataType::F64, ReduceOp::Sum, count, Tuning::default(), 2);
        let net = LocalNet::new(2);
        let mut colls: Vec<Collective> = (0..2)
            .map(|_| Collective::allreduce(0, DataType::F64, ReduceOp::Sum, vec![0; count * 8], &Tuning::default()))
            .collect();
        net.run(&mut colls);
        assert_eq!(colls[0].signature().unwrap().algorithm, algo);
    }
}

#[test]
fn allreduce_large() {
    let mi = 1 << 20;
    check_allreduce(4, DataType::F64, ReduceOp::Sum, mi, ring(), 10);
    check_allreduce(3, DataType::I32, ReduceOp::Prod, mi, rd(), 12);
    check_allreduce(8, DataType::F32, ReduceOp::Max, mi, Tuning::default(), 13);
    let mut rng = SplitMix64::new(99);
    for (size, dtype, op) in [(7, DataType::U64, ReduceOp::Min), (5, DataType::I64, ReduceOp::Sum)] {
        let count = 1 + rng.below(mi);
        check_allreduce(size, dtype, op, count, Tuning::default(), 14 + size as u64);
    }
}

#[test]
fn allgather_every_size() {
    let mut seed = 100;
    for size in SIZES {
        let mut rng = SplitMix64::new(seed);
        for per in [0, 1, 3, 8, 1 + rng.below(200), 200_000 * usize::from(size == 5)] {
            let inputs: Vec<Vec<u8>> = (0..size)
                .map(|_| {
                    let mut v = gen(&mut rng, DataType::U64, per);
                    v.truncate(per);
                    v
                })
                .collect();
            let expect = inputs.concat();
            for tuning in [rd(), ring(), Tuning::default()] {
                let mut colls: Vec<Collective> =
                    inputs.iter().map(|i| Collective::allgather(3, i.clone(), &tuning)).collect();
                for o in net(size, seed).run(&mut colls) {
                    assert!(o.unwrap() == expect, "allgather size {size} per {per} {tuning:?}");
                }
                let algo = colls[0].signature().unwrap().algorithm;
                assert_eq!(algo, tuning.allgather_algorithm(per * size, size));
                seed += 1;
            }
        }
    }
}

#[test]
fn broadcast_every_size_root_and_radix() {
    let mut seed = 200;
    for size in SIZES {
        for radix in 2..=5 {
            for root in 0..size {
                let mut rng = SplitMix64::new(seed);
                let len = [0, 1, 1 + rng.below(500)][seed as usize % 3];
                let mut data = gen(&mut rng, DataType::U64, len);
                data.truncate(len);
                let tuning = Tuning { knomial_radix: radix, ..Tuning::default() };
                let mut colls: Vec<Collective> = (0..size)
                    .map(|r| {
                        Collective::broadcast(0, root, if r == root { data.clone() } else { vec![0xEE; len] }, &tuning)
                    })
                    .collect();
                for o in net(size, seed).run(&mut colls) {
                    assert!(o.unwrap() == data, "broadcast size {size} root {root} radix {radix} len {len}");
                }
                seed += 1;
            }
        }
    }
    // A large one.
    let data = gen(&mut SplitMix64::new(5), DataType::F64, 1 << 20);
    let tuning = Tuning { knomial_radix: 3, ..Tuning::default() };
    let mut colls: Vec<Collective> = (0..7).map(|_| Collective::broadcast(1, 2, data.clone(), &tuning)).collect();
    for o in LocalNet::shuffled(7, 3).run(&mut colls) {
        assert!(o.unwrap() == data);
    }
}

#[test]
fn reduce_scatter_every_type_op_size() {
    let mut seed = 300;
    for size in SIZES {
        for dtype in DataType::ALL {
            for op in ReduceOp::ALL {
                let mut rng = SplitMix64::new(seed);
                for per in [0, 1, 1 + rng.below(100)] {
                    let inputs: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut rng, dtype, per * size)).collect();
                    let all = reference(dtype, op, &inputs);
                    let mut colls: Vec<Collective> = inputs
                        .iter()
                        .map(|i| Collective::reduce_scatter(11, dtype, op, i.clone(), &Tuning::default()))
                        .collect();
                    for (rank, o) in net(size, seed).run(&mut colls).into_iter().enumerate() {
                        let bytes = per * dtype.size();
                        assert!(
                            o.unwrap() == all[rank * bytes..(rank + 1) * bytes],
                            "reduce_scatter {dtype} {op} size {size} per {per} rank {rank}"
                        );
                    }
                    seed += 1;
                }
            }
        }
    }
    // A large one: 1 Mi elements in all.
    let size = 8;
    let mut rng = SplitMix64::new(7);
    let inputs: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut rng, DataType::F32, 1 << 20)).collect();
    let all = reference(DataType::F32, ReduceOp::Sum, &inputs);
    let mut colls: Vec<Collective> = inputs
        .iter()
        .map(|i| Collective::reduce_scatter(0, DataType::F32, ReduceOp::Sum, i.clone(), &Tuning::default()))
        .collect();
    let bytes = all.len() / size;
    for (rank, o) in LocalNet::shuffled(size, 8).run(&mut colls).into_iter().enumerate() {
        assert!(o.unwrap() == all[rank * bytes..(rank + 1) * bytes]);
    }
}

#[test]
fn barrier_waits_for_everyone() {
    for size in SIZES {
        for late in 0..size {
            let net = LocalNet::shuffled(size, (size * 31 + late) as u64);
            let mut ts = net.transports();
            let mut colls: Vec<Collective> = (0..size).map(|_| Collective::barrier(5, &Tuning::default())).collect();
            // Everyone but `late` enters and spins; nobody may get through.
            for _ in 0..50 {
                for r in (0..size).filter(|&r| r != late) {
                    assert_eq!(colls[r].progress(&mut ts[r]), Ok(coll_algorithms::Poll::Pending), "size {size}");
                }
                net.deliver_all();
            }
            // Then `late` enters and everybody completes.
            let outcomes = net.run(&mut colls);
            assert!(outcomes.iter().all(|o| *o == Outcome::Done(Vec::new())), "size {size} late {late}: {outcomes:?}");
        }
    }
}

#[test]
fn busy_transport_still_completes() {
    for size in [3, 4, 7] {
        let net = LocalNet::shuffled(size, 77 + size as u64);
        net.set_busy_percent(40);
        let mut rng = SplitMix64::new(4);
        let inputs: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut rng, DataType::I64, 1000)).collect();
        let expect = reference(DataType::I64, ReduceOp::Sum, &inputs);
        for tuning in [rd(), ring()] {
            let mut colls: Vec<Collective> = inputs
                .iter()
                .map(|i| Collective::allreduce(1, DataType::I64, ReduceOp::Sum, i.clone(), &tuning))
                .collect();
            for o in net.run(&mut colls) {
                assert!(o.unwrap() == expect);
            }
        }
    }
}

#[test]
fn random_floats_agree_bitwise_and_match_within_tolerance() {
    for size in [3, 5, 7, 8] {
        for tuning in [rd(), ring()] {
            let mut rng = SplitMix64::new(size as u64);
            let count = 1000;
            let vals: Vec<Vec<f64>> = (0..size)
                .map(|_| (0..count).map(|_| 1.0 + (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64).collect())
                .collect();
            for op in ReduceOp::ALL {
                let inputs: Vec<Vec<u8>> =
                    vals.iter().map(|v| v.iter().flat_map(|x| x.to_le_bytes()).collect()).collect();
                let expect = reference(DataType::F64, op, &inputs);
                let mut colls: Vec<Collective> =
                    inputs.iter().map(|i| Collective::allreduce(0, DataType::F64, op, i.clone(), &tuning)).collect();
                let outs: Vec<Vec<u8>> =
                    LocalNet::shuffled(size, 1).run(&mut colls).into_iter().map(Outcome::unwrap).collect();
                assert!(outs.iter().all(|o| *o == outs[0]), "members disagree: size {size} {op}");
                for (g, e) in outs[0].chunks_exact(8).zip(expect.chunks_exact(8)) {
                    let (g, e) = (f64::from_le_bytes(g.try_into().unwrap()), f64::from_le_bytes(e.try_into().unwrap()));
                    assert!((g - e).abs() <= 1e-12 * e.abs(), "{op}: {g} vs {e}");
                }
            }
        }
    }
}

#[test]
fn nan_propagates_through_min_max() {
    for tuning in [rd(), ring()] {
        let size = 5;
        let inputs: Vec<Vec<u8>> = (0..size)
            .map(|r| {
                let v = [r as f32, if r == 3 { f32::NAN } else { 1.0 }, -(r as f32)];
                v.iter().flat_map(|x| x.to_le_bytes()).collect()
            })
            .collect();
        for op in [ReduceOp::Min, ReduceOp::Max] {
            let mut colls: Vec<Collective> =
                inputs.iter().map(|i| Collective::allreduce(0, DataType::F32, op, i.clone(), &tuning)).collect();
            for o in LocalNet::shuffled(size, 2).run(&mut colls) {
                let v: Vec<f32> =
                    o.unwrap().chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                assert_eq!(v[1].to_bits(), f32::NAN.to_bits());
                assert_eq!(v[0], if op == ReduceOp::Min { 0.0 } else { 4.0 });
                assert_eq!(v[2], if op == ReduceOp::Min { -4.0 } else { 0.0 });
            }
        }
    }
}

/// (kind, inputs per member, expected output per member)
type Planned = (u8, Vec<Vec<u8>>, Vec<Vec<u8>>);

/// Each member's queue gets the same collectives; member r submits them at its own pace, and the
/// members progress in random order with random delivery. Completions must come in order, right.
#[test]
fn several_in_flight_complete_in_order() {
    for size in [2, 3, 5, 8] {
        let tuning =
            Tuning { allreduce_ring_threshold_bytes: 4096, knomial_radix: 3, allgather_rd_threshold_bytes: 64 };
        let mut rng = SplitMix64::new(size as u64 * 1000);
        let mut plan: Vec<Planned> = Vec::new();
        for i in 0..12 {
            let kind = (i % 5) as u8;
            match kind {
                0 => {
                    let count = [3, 20_000, 700][i % 3];
                    let inputs: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut rng, DataType::I32, count)).collect();
                    let e = reference(DataType::I32, ReduceOp::Sum, &inputs);
                    plan.push((0, inputs, vec![e; size]));
                }
                1 => {
                    let inputs: Vec<Vec<u8>> = (0..size).map(|r| vec![r as u8; 1 + i]).collect();
                    let e = inputs.concat();
                    plan.push((1, inputs, vec![e; size]));
                }
                2 => {
                    let data = gen(&mut rng, DataType::U64, 50 + i);
                    plan.push((2, vec![data.clone(); size], vec![data; size]));
                }
                3 => plan.push((3, vec![Vec::new(); size], vec![Vec::new(); size])),
                _ => {
                    let inputs: Vec<Vec<u8>> = (0..size).map(|_| gen(&mut rng, DataType::F64, 4 * size)).collect();
                    let all = reference(DataType::F64, ReduceOp::Max, &inputs);
                    let b = all.len() / size;
                    plan.push((4, inputs, (0..size).map(|r| all[r * b..(r + 1) * b].to_vec()).collect()));
                }
            }
        }
        let net = LocalNet::shuffled(size, 5 + size as u64);
        let mut ts = net.transports();
        let mut comms: Vec<Comm> = (0..size).map(|_| Comm::new(tuning)).collect();
        let mut submitted = vec![0usize; size];
        let mut done: Vec<Vec<(u32, Vec<u8>)>> = vec![Vec::new(); size];
        for _sweep in 0..100_000 {
            for r in 0..size {
                // Member r submits the next collective with probability 1/(r+1) per sweep.
                if submitted[r] < plan.len() && rng.below(r + 1) == 0 {
                    let (kind, inputs, _) = &plan[submitted[r]];
                    let input = inputs[r].clone();
                    let seq = match kind {
                        0 => comms[r].allreduce(DataType::I32, ReduceOp::Sum, input),
                        1 => comms[r].allgather(input),
                        2 => comms[r].broadcast(submitted[r] % size, input),
                        3 => comms[r].barrier(),
                        _ => comms[r].reduce_scatter(DataType::F64, ReduceOp::Max, input),
                    };
                    assert_eq!(seq as usize, submitted[r]);
                    submitted[r] += 1;
                }
            }
            for r in 0..size {
                let r = (r + rng.below(size)) % size;
                for c in comms[r].progress(&mut ts[r]) {
                    done[r].push((c.seq, c.result.expect("collective failed")));
                }
            }
            net.deliver();
            if done.iter().all(|d| d.len() == plan.len()) {
                break;
            }
        }
        for (r, d) in done.iter().enumerate() {
            assert_eq!(d.len(), plan.len(), "member {r} finished {} of {}", d.len(), plan.len());
            for (i, (seq, out)) in d.iter().enumerate() {
                assert_eq!(*seq as usize, i, "out of order on member {r}");
                assert!(*out == plan[i].2[r], "collective {i} (kind {}) wrong on member {r}", plan[i].0);
            }
            assert_eq!(comms[r].in_flight(), 0);
        }
        assert_eq!(net.unreceived(), 0, "messages left over");
    }
}

/// Runs `make(rank)` on every member and expects every member to fail, at least one with a
/// mismatch (or `expect_invalid`), and nobody to hang.
fn expect_all_fail(what: &str, size: usize, seed: u64, make: impl Fn(usize) -> Collective) -> Vec<Error> {
    let mut colls: Vec<Collective> = (0..size).map(make).collect();
    let outcomes = LocalNet::shuffled(size, seed).run(&mut colls);
    outcomes
        .into_iter()
        .enumerate()
        .map(|(r, o)| match o {
            Outcome::Failed(e) => e,
            other => panic!("{what}: member {r} of {size}: {other:?}"),
        })
        .collect()
}

fn assert_mismatch(errors: &[Error], what: &str) {
    assert!(errors.iter().any(|e| matches!(e, Error::Mismatch { .. })), "{what}: no mismatch reported: {errors:?}");
    for e in errors {
        assert!(matches!(e, Error::Mismatch { .. } | Error::Aborted { .. }), "{what}: {e:?}");
    }
}

#[test]
fn mismatches_are_reported_everywhere() {
    let t = Tuning::default();
    for size in [2, 3, 4, 5, 8] {
        for odd in [0, size - 1] {
            let seed = size as u64 * 10 + odd as u64;
            let sum = ReduceOp::Sum;
            let f64_ = DataType::F64;
            let n = |r: usize, a: usize, b: usize| if r == odd { b } else { a };
            let errs = expect_all_fail("count", size, seed, |r| {
                Collective::allreduce(0, f64_, sum, vec![0; n(r, 80, 88)], &t)
            });
            assert_mismatch(&errs, "count");
            // One member over the ring threshold, the rest under it.
            let errs = expect_all_fail("count across algorithms", size, seed, |r| {
                Collective::allreduce(0, f64_, sum, vec![0; n(r, 800, 80 * 1024)], &t)
            });
            assert_mismatch(&errs, "count across algorithms");
            let errs = expect_all_fail("dtype", size, seed, |r| {
                let d = if r == odd { DataType::I64 } else { f64_ };
                Collective::allreduce(0, d, sum, vec![0; 80], &t)
            });
            assert_mismatch(&errs, "dtype");
            let errs = expect_all_fail("op", size, seed, |r| {
                let op = if r == odd { ReduceOp::Max } else { sum };
                Collective::allreduce(0, f64_, op, vec![0; 80], &t)
            });
            assert_mismatch(&errs, "op");
            for tuning in [rd(), ring()] {
                let errs = expect_all_fail("kind allgather/allreduce", size, seed, |r| {
                    if r == odd {
                        Collective::allgather(0, vec![0; 80], &tuning)
                    } else {
                        Collective::allreduce(0, f64_, sum, vec![0; 80], &tuning)
                    }
                });
                assert_mismatch(&errs, "kind allgather/allreduce");
                let errs = expect_all_fail("kind barrier/allreduce", size, seed, |r| {
                    if r == odd {
                        Collective::barrier(0, &tuning)
                    } else {
                        Collective::allreduce(0, f64_, sum, vec![0; 80], &tuning)
                    }
                });
                assert_mismatch(&errs, "kind barrier/allreduce");
            }
            let errs = expect_all_fail("tuning", size, seed, |r| {
                let tuning = if r == odd { ring() } else { rd() };
                Collective::allreduce(0, f64_, sum, vec![0; 80], &tuning)
            });
            assert_mismatch(&errs, "tuning");
            let errs =
                expect_all_fail("allgather length", size, seed, |r| Collective::allgather(0, vec![0; n(r, 5, 6)], &t));
            assert_mismatch(&errs, "allgather length");
            if size.is_power_of_two() {
                let errs = expect_all_fail("allgather algorithm", size, seed, |r| {
                    Collective::allgather(0, vec![0; 5], &if r == odd { ring() } else { rd() })
                });
                assert_mismatch(&errs, "allgather algorithm");
            }
            let errs = expect_all_fail("reduce_scatter count", size, seed, |r| {
                Collective::reduce_scatter(0, DataType::I32, sum, vec![0; 4 * size * n(r, 2, 3)], &t)
            });
            assert_mismatch(&errs, "reduce_scatter count");
            if let Some(Error::Mismatch { local, remote, .. }) =
                errs.iter().find(|e| matches!(e, Error::Mismatch { .. }))
            {
                assert_eq!(local.kind, Kind::ReduceScatter);
                assert_ne!(local.count, remote.count);
            }
        }
    }
}

#[test]
fn a_stand_in_for_rejected_arguments_fails_everyone_with_the_same_kind() {
    let t = Tuning::default();
    for size in [2, 3, 5] {
        // Member 0's caller rejected its arguments; the others run a real allreduce.
        let errs = expect_all_fail("stand-in", size, 7, |r| {
            if r == 0 {
                Collective::invalid(0, Kind::Allreduce, "dst outside registered memory".into(), &t)
            } else {
                Collective::allreduce(0, DataType::I64, ReduceOp::Sum, vec![0; 16], &t)
            }
        });
        assert!(matches!(&errs[0], Error::Invalid(m) if m == "dst outside registered memory"), "{errs:?}");
        assert!(errs[1..].iter().all(|e| matches!(e, Error::Aborted { peer: 0, peer_lost: false })), "{errs:?}");
    }
}

#[test]
fn invalid_arguments_fail_everyone() {
    let t = Tuning::default();
    for size in [2, 3, 5] {
        let errs = expect_all_fail("invalid", size, 1, |r| {
            Collective::allreduce(0, DataType::I64, ReduceOp::Sum, vec![0; if r == 1 { 12 } else { 16 }], &t)
        });
        assert!(matches!(errs[1], Error::Invalid(_)), "{errs:?}");
        assert!(
            errs.iter().enumerate().all(|(r, e)| r == 1 || matches!(e, Error::Aborted { peer: 1, .. })),
            "{errs:?}"
        );
        // Input that does not split into `size` blocks, on every member.
        let errs = expect_all_fail("invalid", size, 2, |_| {
            Collective::reduce_scatter(0, DataType::I32, ReduceOp::Sum, vec![0; 4 * (size + 1)], &t)
        });
        assert!(errs.iter().all(|e| matches!(e, Error::Invalid(_) | Error::Aborted { .. })), "{errs:?}");
        let errs = expect_all_fail("invalid", size, 3, |_| Collective::broadcast(0, size, vec![1], &t));
        assert!(errs.iter().any(|e| matches!(e, Error::Invalid(_))));
        let bad = Tuning { knomial_radix: 1, ..t };
        let errs = expect_all_fail("invalid", size, 4, |_| Collective::broadcast(0, 0, vec![1], &bad));
        assert!(errs.iter().any(|e| matches!(e, Error::Invalid(_))));
    }
}

#[test]
fn killed_member_fails_everyone_else() {
    let big = 100_000;
    for size in [2, 3, 4, 5, 8] {
        for kind in 0..5 {
            for victim in [0, size / 2, size - 1] {
                for kill_at in [0, 2, 5] {
                    let t = Tuning::default();
                    let make = |_r: usize| match kind {
                        0 => Collective::allreduce(0, DataType::F64, ReduceOp::Sum, vec![0; big * 8], &t),
                        1 => Collective::allreduce(0, DataType::I32, ReduceOp::Min, vec![0; 64], &t),
                        2 => Collective::allgather(0, vec![1; 1000], &t),
                        3 => Collective::broadcast(0, 0, vec![1; 1000], &t),
                        _ => Collective::barrier(0, &t),
                    };
                    let mut colls: Vec<Collective> = (0..size).map(make).collect();
                    let net = LocalNet::shuffled(size, (size * 100 + kind * 10 + victim) as u64 + kill_at);
                    let outcomes = net.run_with(&mut colls, |sweep, net| {
                        if sweep == kill_at as usize {
                            net.kill(victim);
                        }
                    });
                    if outcomes[victim] != Outcome::Dead {
                        // It finished before it was killed; the others may have too.
                        assert!(kill_at > 0 && !outcomes.contains(&Outcome::Stalled), "{outcomes:?}");
                        continue;
                    }
                    let what = format!("size {size} kind {kind} victim {victim} at {kill_at}");
                    let mut failed = 0;
                    for (r, o) in outcomes.iter().enumerate() {
                        if r == victim {
                            continue;
                        }
                        failed += usize::from(matches!(o, Outcome::Failed(_)));
                        match o {
                            Outcome::Failed(Error::Transport(e)) => {
                                assert_eq!((e.kind, e.peer), (TransportErrorKind::PeerGone, Some(victim)))
                            }
                            Outcome::Failed(Error::Aborted { .. }) => {}
                            // A member can have had all it needed from the victim before it died; with
                            // a broadcast, also when the victim died at once but was not its parent.
                            Outcome::Done(_) if kill_at > 0 || kind == 3 => {}
                            other => panic!("{what}: member {r}: {other:?}"),
                        }
                    }
                    if kill_at == 0 && (kind != 3 || victim == 0) {
                        assert_eq!(failed, size - 1, "{what}: {outcomes:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn zero_length_everything() {
    for size in SIZES {
        let t = Tuning::default();
        let mut colls: Vec<Collective> =
            (0..size).map(|_| Collective::allreduce(0, DataType::F32, ReduceOp::Prod, Vec::new(), &t)).collect();
        assert!(LocalNet::new(size).run(&mut colls).iter().all(|o| *o == Outcome::Done(Vec::new())));
        for make in [
            |t: &Tuning| Collective::allgather(0, Vec::new(), t),
            |t: &Tuning| Collective::broadcast(0, 0, Vec::new(), t),
            |t: &Tuning| Collective::reduce_scatter(0, DataType::I32, ReduceOp::Max, Vec::new(), t),
            |t: &Tuning| Collective::allreduce(0, DataType::U64, ReduceOp::Min, Vec::new(), t),
        ] {
            for tuning in [rd(), ring()] {
                let mut colls: Vec<Collective> = (0..size).map(|_| make(&tuning)).collect();
                let outcomes = LocalNet::shuffled(size, 9).run(&mut colls);
                assert!(outcomes.iter().all(|o| *o == Outcome::Done(Vec::new())), "{outcomes:?}");
            }
        }
    }
}

/// A member dies with several collectives queued: every other member reports all of them, in
/// order, the unfinished ones as errors, and nothing hangs.
#[test]
fn killed_member_fails_every_queued_collective() {
    for size in [3, 4, 8] {
        let net = LocalNet::shuffled(size, 40 + size as u64);
        let mut ts = net.transports();
        let mut comms: Vec<Comm> = (0..size).map(|_| Comm::new(Tuning::default())).collect();
        for c in comms.iter_mut() {
            c.allreduce(DataType::F64, ReduceOp::Sum, vec![0; 200_000 * 8]);
            c.barrier();
            c.allgather(vec![1; 100]);
            c.broadcast(1, vec![2; 100]);
        }
        let victim = size - 1;
        let mut done: Vec<Vec<(u32, bool)>> = vec![Vec::new(); size];
        for sweep in 0..10_000 {
            if sweep == 3 {
                net.kill(victim);
            }
            for r in (0..size).filter(|&r| !net.is_dead(r)) {
                for c in comms[r].progress(&mut ts[r]) {
                    done[r].push((c.seq, c.result.is_ok()));
                }
            }
            net.deliver();
            if (0..size).filter(|&r| r != victim).all(|r| done[r].len() == 4) {
                break;
            }
        }
        for r in (0..size).filter(|&r| r != victim) {
            let seqs: Vec<u32> = done[r].iter().map(|d| d.0).collect();
            assert_eq!(seqs, [0, 1, 2, 3], "member {r} of {size}");
            // A ring round takes at least a sweep (a message sent in one is received in the next),
            // and the ring needs more rounds than the victim lived sweeps.
            assert!(!done[r][0].1, "the big allreduce cannot have finished on member {r}");
        }
    }
}

/// Members on their own threads, sharing the in-memory net, each driving its own queue.
#[test]
fn members_on_threads() {
    let size = 4;
    let net = LocalNet::new(size);
    let handles: Vec<_> = net
        .transports()
        .into_iter()
        .enumerate()
        .map(|(r, mut t)| {
            std::thread::spawn(move || {
                let mut comm = Comm::new(Tuning::default());
                let mine: Vec<u8> = (0..100_000i64).flat_map(|i| (i * (r as i64 + 1)).to_le_bytes()).collect();
                comm.allreduce(DataType::I64, ReduceOp::Sum, mine);
                comm.allgather(vec![r as u8; 3]);
                comm.barrier();
                let mut done = Vec::new();
                for _ in 0..10_000_000 {
                    done.extend(comm.progress(&mut t));
                    if done.len() == 3 {
                        break;
                    }
                    std::thread::yield_now();
                }
                done
            })
        })
        .collect();
    for h in handles {
        let done = h.join().expect("member thread panicked");
        assert_eq!(done.len(), 3);
        let sum = done[0].result.as_ref().unwrap();
        // Sum over r of i * (r + 1) = 10 * i.
        assert!(sum
            .chunks_exact(8)
            .enumerate()
            .all(|(i, c)| i64::from_le_bytes(c.try_into().unwrap()) == 10 * i as i64));
        assert_eq!(done[1].result.as_deref(), Ok(&[0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3][..]));
        assert_eq!(done[2].result.as_deref(), Ok(&[][..]));
    }
}
