//! Host-only collectives (`async_doca::coll::HostComm`) over the soft provider's RDMA: every
//! collective, op and type for 2, 3 and 4 in-process members against a reference; several in
//! flight; argument errors and disagreements between members; a member that leaves; and the
//! same across 3 and 8 processes (re-executions of this test binary meeting at a socket),
//! including a process killed mid-sequence.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_doca::coll::{Element, HostComm, ReduceOp, TypedBuf};
use async_doca::oob::{InProcessOob, UnixOob};
use async_doca::time::timeout;
use async_doca::{Access, Device, Error, ErrorKind, IdleMode, Result, Runtime};

mod common;

/// Every wait is bounded: a bug shows up as a failure, never as a hang.
const LIMIT: Duration = Duration::from_secs(30);

async fn bounded<T>(f: impl Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

fn runtime() -> Runtime {
    // Several members share two cores: spin only briefly before sleeping.
    Runtime::builder().cpus("0".parse().unwrap()).idle(IdleMode::Adaptive(Duration::from_micros(50))).build().unwrap()
}

/// Runs `f` on `n` in-process members, each a thread with its own executor (`block_on`) and
/// its own RDMA context; returns each member's result, by rank.
fn in_process<R, F, Fut>(n: usize, f: F) -> Vec<Result<R>>
where
    F: Fn(HostComm, Device) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R>> + 'static,
    R: Send + 'static,
{
    let rt = runtime();
    let f = Arc::new(f);
    let threads: Vec<_> = InProcessOob::group(n as u32)
        .into_iter()
        .map(|oob| {
            let (h, f) = (rt.handle(), f.clone());
            std::thread::spawn(move || {
                h.block_on(async move {
                    let dev = Device::open_default()?;
                    let comm = bounded(HostComm::builder(&dev, oob).build()).await??;
                    f(comm, dev).await
                })
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("member thread panicked")).collect()
}

// ---------------------------------------------------------------------------------------
// Data and reference

/// A deterministic small integer in -7..=7 for collective `k`, member `r`, element `i`:
/// every member can compute every other member's input, hence the reference. Small integers
/// keep float sums and products exact in any order.
fn val(k: u64, r: usize, i: usize) -> i64 {
    let mut x = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (r as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ i as u64;
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x % 15) as i64 - 7
}

trait TestElem: Element {
    fn of(v: i64) -> Self;
    fn apply(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! test_int {
    ($($t:ty),*) => {$(
        impl TestElem for $t {
            fn of(v: i64) -> Self { v as $t }
            fn apply(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Prod => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    )*};
}
test_int!(i32, i64, u64);

macro_rules! test_float {
    ($($t:ty),*) => {$(
        impl TestElem for $t {
            fn of(v: i64) -> Self { v as $t }
            fn apply(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Prod => a * b,
                    ReduceOp::Min => if b < a { b } else { a },
                    ReduceOp::Max => if b > a { b } else { a },
                }
            }
        }
    )*};
}
test_float!(f32, f64);

const RW: Access = Access::LOCAL_READ_WRITE;

fn filled<T: TestElem>(dev: &Device, len: usize, f: impl Fn(usize) -> i64) -> Result<TypedBuf<T>> {
    let mut b = TypedBuf::<T>::alloc(dev, len, RW)?;
    b.write_from(&(0..len).map(|i| T::of(f(i))).collect::<Vec<_>>())?;
    Ok(b)
}

/// Compares without printing a million elements on failure.
fn check<T: TestElem>(what: &str, got: &[T], want: &[T]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: element {i} is {:?}, expected {:?} ({} elements)", got[i], want[i], got.len());
    }
}

fn reduced<T: TestElem>(k: u64, n: usize, op: ReduceOp, range: std::ops::Range<usize>) -> Vec<T> {
    range.map(|i| (1..n).fold(T::of(val(k, 0, i)), |a, q| T::apply(op, a, T::of(val(k, q, i))))).collect()
}

/// A tiny seeded generator for the sizes (the same on every member: they must agree).
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

/// Every collective with every op on `T`, for each length in `lens`; `k` numbers the data.
async fn exercise<T: TestElem>(comm: &HostComm, dev: &Device, k: &mut u64, lens: &[usize]) -> Result<()> {
    let (r, n) = (comm.rank(), comm.size());
    let t = T::DATA_TYPE;
    for op in ReduceOp::ALL {
        for &len in lens {
            *k += 1;
            let kk = *k;
            let src = filled::<T>(dev, len, |i| val(kk, r, i))?;
            let mut dst = TypedBuf::<T>::alloc(dev, len, RW)?;
            bounded(comm.allreduce(&src, &mut dst, op)).await??;
            check(&format!("allreduce {t} {op} of {len} on {n}"), &dst.read_vec(), &reduced::<T>(kk, n, op, 0..len));

            *k += 1;
            let kk = *k;
            let src = filled::<T>(dev, n * len, |i| val(kk, r, i))?;
            let mut dst = TypedBuf::<T>::alloc(dev, len, RW)?;
            bounded(comm.reduce_scatter(&src, &mut dst, op)).await??;
            let want = reduced::<T>(kk, n, op, r * len..(r + 1) * len);
            check(&format!("reduce_scatter {t} {op} of {len} per member on {n}"), &dst.read_vec(), &want);
        }
    }
    for &len in lens {
        *k += 1;
        let kk = *k;
        let src = filled::<T>(dev, len, |i| val(kk, r, i))?;
        let mut dst = TypedBuf::<T>::alloc(dev, n * len, RW)?;
        bounded(comm.allgather(&src, &mut dst)).await??;
        let want: Vec<T> = (0..n).flat_map(|q| (0..len).map(move |i| T::of(val(kk, q, i)))).collect();
        check(&format!("allgather {t} of {len} on {n}"), &dst.read_vec(), &want);

        *k += 1;
        let kk = *k;
        let root = kk as usize % n;
        let mut buf = filled::<T>(dev, len, |i| val(kk, r, i))?;
        bounded(comm.broadcast(root, &mut buf)).await??;
        let want: Vec<T> = (0..len).map(|i| T::of(val(kk, root, i))).collect();
        check(&format!("broadcast {t} of {len} from {root} on {n}"), &buf.read_vec(), &want);
    }
    bounded(comm.barrier()).await?
}

/// Lengths: 0 and 1 element, then seeded random ones.
fn lengths(seed: u64, count: usize, max: usize) -> Vec<usize> {
    let mut rng = Rng(seed);
    let mut v = vec![0, 1];
    v.extend((0..count).map(|_| 2 + rng.below(max)));
    v
}

async fn every_type(comm: &HostComm, dev: &Device, lens: &[usize]) -> Result<()> {
    let mut k = 0;
    exercise::<i32>(comm, dev, &mut k, lens).await?;
    exercise::<i64>(comm, dev, &mut k, lens).await?;
    exercise::<u64>(comm, dev, &mut k, lens).await?;
    exercise::<f32>(comm, dev, &mut k, lens).await?;
    exercise::<f64>(comm, dev, &mut k, lens).await
}

/// The large ones: 1 Mi elements through every collective (chunked, ring algorithms).
async fn large(comm: &HostComm, dev: &Device) -> Result<()> {
    const M: usize = 1 << 20;
    let (r, n) = (comm.rank(), comm.size());
    let src = filled::<f64>(dev, M, |i| val(1001, r, i))?;
    let mut dst = TypedBuf::<f64>::alloc(dev, M, RW)?;
    bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await??;
    check("allreduce f64 sum of 1 Mi", &dst.read_vec(), &reduced::<f64>(1001, n, ReduceOp::Sum, 0..M));

    let per = M / n;
    let src = filled::<i32>(dev, per, |i| val(1002, r, i))?;
    let mut dst = TypedBuf::<i32>::alloc(dev, n * per, RW)?;
    bounded(comm.allgather(&src, &mut dst)).await??;
    let want: Vec<i32> = (0..n).flat_map(|q| (0..per).map(move |i| val(1002, q, i) as i32)).collect();
    check("allgather i32 to ~1 Mi", &dst.read_vec(), &want);

    let src = filled::<i64>(dev, n * per, |i| val(1003, r, i))?;
    let mut dst = TypedBuf::<i64>::alloc(dev, per, RW)?;
    bounded(comm.reduce_scatter(&src, &mut dst, ReduceOp::Max)).await??;
    check(
        "reduce_scatter i64 max of ~1 Mi",
        &dst.read_vec(),
        &reduced::<i64>(1003, n, ReduceOp::Max, r * per..(r + 1) * per),
    );

    let mut buf = filled::<u64>(dev, M, |i| val(1004, r, i))?;
    bounded(comm.broadcast(n - 1, &mut buf)).await??;
    check("broadcast u64 of 1 Mi", &buf.read_vec(), &(0..M).map(|i| val(1004, n - 1, i) as u64).collect::<Vec<_>>());
    Ok(())
}

// ---------------------------------------------------------------------------------------
// In process

#[test]
fn every_collective_op_and_type_for_1_2_3_4_members() {
    for n in [1usize, 2, 3, 4] {
        let results = in_process(n, move |comm, dev| async move {
            every_type(&comm, &dev, &lengths(n as u64, 2, 3000)).await?;
            bounded(comm.close()).await?
        });
        for (rank, r) in results.into_iter().enumerate() {
            r.unwrap_or_else(|e| panic!("{n} members, rank {rank}: {e}"));
        }
    }
}

#[test]
fn one_mi_elements_for_2_3_4_members() {
    for n in [2usize, 3, 4] {
        for (rank, r) in in_process(n, |comm, dev| async move {
            large(&comm, &dev).await?;
            bounded(comm.close()).await?
        })
        .into_iter()
        .enumerate()
        {
            r.unwrap_or_else(|e| panic!("{n} members, rank {rank}: {e}"));
        }
    }
}

/// Records how many collectives were still in flight when `f` (the `pos`-th submitted)
/// completed: in-order completion means at most those submitted after it.
async fn tagged(
    comm: &HostComm,
    seen: &std::cell::RefCell<Vec<(usize, usize)>>,
    pos: usize,
    f: impl Future<Output = Result<()>>,
) -> Result<()> {
    let res = f.await;
    seen.borrow_mut().push((pos, comm.in_flight()));
    res
}

/// Collectives submitted together (joined, and from several tasks) all complete, with the
/// right data, in submission order.
#[test]
fn several_collectives_in_flight() {
    for r in in_process(4, |comm, dev| async move {
        let (r, n) = (comm.rank(), comm.size());
        let big = 300_000;
        let a_src = filled::<f32>(&dev, big, |i| val(1, r, i))?;
        let mut a_dst = TypedBuf::<f32>::alloc(&dev, big, RW)?;
        let b_src = filled::<i32>(&dev, 3, |i| val(2, r, i))?;
        let mut b_dst = TypedBuf::<i32>::alloc(&dev, 3 * n, RW)?;
        let mut c_buf = filled::<u64>(&dev, 100, |i| val(3, r, i))?;
        let order = std::cell::RefCell::new(Vec::new());
        let a = tagged(&comm, &order, 0, comm.allreduce(&a_src, &mut a_dst, ReduceOp::Sum));
        let b = tagged(&comm, &order, 1, comm.barrier());
        let c = tagged(&comm, &order, 2, comm.allgather(&b_src, &mut b_dst));
        let d = tagged(&comm, &order, 3, comm.broadcast(1, &mut c_buf));
        assert_eq!(comm.in_flight(), 4);
        // Polled in reverse submission order on purpose.
        let (((rd, rc), rb), ra) =
            bounded(futures_lite::future::zip(futures_lite::future::zip(futures_lite::future::zip(d, c), b), a))
                .await?;
        ra?;
        rb?;
        rc?;
        rd?;
        assert_eq!(order.borrow().len(), 4);
        for &(pos, left) in order.borrow().iter() {
            assert!(left < 4 - pos, "collective {pos} completed with {left} in flight: out of order");
        }
        check("allreduce in flight", &a_dst.read_vec(), &reduced::<f32>(1, n, ReduceOp::Sum, 0..big));
        let want: Vec<i32> = (0..n).flat_map(|q| (0..3).map(move |i| val(2, q, i) as i32)).collect();
        check("allgather in flight", &b_dst.read_vec(), &want);
        check("broadcast in flight", &c_buf.read_vec(), &(0..100).map(|i| val(3, 1, i) as u64).collect::<Vec<_>>());

        // From several tasks sharing the communicator.
        let comm = std::rc::Rc::new(comm);
        let tasks: Vec<_> = (0..5u64)
            .map(|t| {
                let (comm, dev) = (comm.clone(), dev.clone());
                async_doca::spawn_local(async move {
                    let src = filled::<i64>(&dev, 50, |i| val(10 + t, r, i))?;
                    let mut dst = TypedBuf::<i64>::alloc(&dev, 50, RW)?;
                    // Submitted now, on the task's first poll: tasks start in spawn order.
                    bounded(comm.allreduce(&src, &mut dst, ReduceOp::Max)).await??;
                    check("allreduce from a task", &dst.read_vec(), &reduced::<i64>(10 + t, n, ReduceOp::Max, 0..50));
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for t in tasks {
            bounded(t).await???;
        }
        let comm = std::rc::Rc::try_unwrap(comm).expect("tasks done");
        bounded(comm.close()).await?
    }) {
        r.unwrap();
    }
}

/// `close` waits for the collectives still in flight, those whose futures were dropped
/// included (woken by the driver once it settles, not by polling), and the members then
/// agree and leave cleanly.
#[test]
fn close_waits_for_dropped_collectives() {
    for n in [2usize, 3] {
        for r in in_process(n, |comm, dev| async move {
            let r = comm.rank();
            let big = 200_000;
            let src = filled::<f64>(&dev, big, |i| val(20, r, i))?;
            let mut dst = TypedBuf::<f64>::alloc(&dev, big, RW)?;
            // Submitted at the call, their futures dropped unpolled.
            drop(comm.allreduce(&src, &mut dst, ReduceOp::Sum));
            drop(comm.barrier());
            assert_eq!(comm.in_flight(), 2);
            // Every member's close waits for both (a member leaving early would fail the
            // others' allreduce with ConnectionLost, and their close with it).
            bounded(comm.close()).await??;
            Ok(())
        }) {
            r.unwrap();
        }
    }
}

/// Local argument problems and disagreements between members are InvalidArgument errors on
/// every member that is affected, and the communicator keeps working afterwards.
#[test]
fn argument_errors_and_mismatches() {
    for r in in_process(3, |comm, dev| async move {
        let (r, n) = (comm.rank(), comm.size());
        let kind = |res: Result<()>| res.expect_err("must fail").kind();

        // A destination of the wrong length: only this member fails (the collective ran).
        let src = filled::<i64>(&dev, 4, |i| i as i64)?;
        let mut dst = TypedBuf::<i64>::alloc(&dev, if r == 1 { 5 } else { 4 }, RW)?;
        let res = bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?;
        if r == 1 {
            let e = res.expect_err("wrong dst length");
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        } else {
            res?;
            assert_eq!(dst.read_vec(), [0, 3, 6, 9]);
        }

        // Counts that differ between members.
        let src = filled::<i32>(&dev, 10 + r, |i| i as i64)?;
        let mut dst = TypedBuf::<i32>::alloc(&dev, 10 + r, RW)?;
        let e = bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?.expect_err("count mismatch");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");

        // Types that differ (same byte count): i32 on rank 0, f32 elsewhere.
        let res = if r == 0 {
            let src = filled::<i32>(&dev, 8, |i| i as i64)?;
            let mut dst = TypedBuf::<i32>::alloc(&dev, 8, RW)?;
            bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?
        } else {
            let src = filled::<f32>(&dev, 8, |i| i as i64)?;
            let mut dst = TypedBuf::<f32>::alloc(&dev, 8, RW)?;
            bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?
        };
        assert_eq!(kind(res), ErrorKind::InvalidArgument);

        // Ops that differ.
        let src = filled::<u64>(&dev, 8, |i| i as i64)?;
        let mut dst = TypedBuf::<u64>::alloc(&dev, 8, RW)?;
        let op = if r == 2 { ReduceOp::Max } else { ReduceOp::Min };
        assert_eq!(kind(bounded(comm.allreduce(&src, &mut dst, op)).await?), ErrorKind::InvalidArgument);

        // A reduce-scatter source that does not split into `size` blocks (everywhere).
        let src = filled::<f64>(&dev, 3 * n + 1, |i| i as i64)?;
        let mut dst = TypedBuf::<f64>::alloc(&dev, 3, RW)?;
        assert_eq!(
            kind(bounded(comm.reduce_scatter(&src, &mut dst, ReduceOp::Sum)).await?),
            ErrorKind::InvalidArgument
        );

        // A root out of range.
        let mut buf = filled::<i32>(&dev, 4, |i| i as i64)?;
        assert_eq!(kind(bounded(comm.broadcast(n, &mut buf)).await?), ErrorKind::InvalidArgument);

        // Allgather of different lengths.
        let src = filled::<i64>(&dev, 2 + r, |i| i as i64)?;
        let mut dst = TypedBuf::<i64>::alloc(&dev, n * (2 + r), RW)?;
        assert_eq!(kind(bounded(comm.allgather(&src, &mut dst)).await?), ErrorKind::InvalidArgument);

        // Still usable.
        let src = filled::<i64>(&dev, 4, |i| val(7, r, i))?;
        let mut dst = TypedBuf::<i64>::alloc(&dev, 4, RW)?;
        bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await??;
        check("allreduce after errors", &dst.read_vec(), &reduced::<i64>(7, n, ReduceOp::Sum, 0..4));
        bounded(comm.close()).await?
    }) {
        r.unwrap();
    }
}

/// A member that goes away (drops its communicator without closing) fails the others'
/// pending and later collectives with ConnectionLost; nothing hangs.
#[test]
fn a_member_leaving_fails_the_others() {
    let finished_first = Arc::new(AtomicU32::new(0));
    let results = in_process(3, move |comm, dev| {
        let finished_first = finished_first.clone();
        async move {
            let r = comm.rank();
            let src = filled::<i64>(&dev, 16, |i| val(1, r, i))?;
            let mut dst = TypedBuf::<i64>::alloc(&dev, 16, RW)?;
            bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await??;
            finished_first.fetch_add(1, Ordering::SeqCst);
            if r == 2 {
                // Leave only once nobody needs its messages for the first one (else that one
                // fails too, which is right but not what this test is about).
                bounded(async {
                    while finished_first.load(Ordering::SeqCst) < 3 {
                        async_doca::time::sleep(Duration::from_millis(1)).await;
                    }
                })
                .await?;
                drop(comm);
                return Ok(());
            }
            // Pending when member 2 leaves (it never submits this one) ...
            let e = bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?.expect_err("member 2 is gone");
            assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
            // ... and later ones fail too, at once.
            let e = bounded(comm.barrier()).await?.expect_err("member 2 is gone");
            assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
            Ok(())
        }
    });
    for r in results {
        r.unwrap();
    }
}

/// The median time of an 8-byte allreduce on this member (after a warm-up).
async fn small_allreduce_median(comm: &HostComm, dev: &Device) -> Result<Duration> {
    let src = filled::<f64>(dev, 1, |_| 1)?;
    let mut dst = TypedBuf::<f64>::alloc(dev, 1, RW)?;
    let mut times = Vec::new();
    for i in 0..300 {
        let t0 = Instant::now();
        bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await??;
        if i >= 50 {
            times.push(t0.elapsed());
        }
    }
    assert_eq!(dst.read_vec(), [comm.size() as f64]);
    times.sort();
    Ok(times[times.len() / 2])
}

/// Rough latency of an 8-byte allreduce (printed, never asserted).
#[test]
fn small_allreduce_latency_report() {
    for n in [2usize, 4] {
        let res = in_process(n, |comm, dev| async move {
            let median = small_allreduce_median(&comm, &dev).await?;
            bounded(comm.close()).await??;
            Ok(median)
        });
        let medians: Vec<Duration> = res.into_iter().map(Result::unwrap).collect();
        eprintln!("8-byte allreduce, {n} in-process members: median per member {medians:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Across processes

const MODE_ENV: &str = "ASYNC_DOCA_TEST_COLL_MODE";
const VICTIM: usize = 1;

/// A socket path no other test (or run) uses.
fn unique_socket() -> std::path::PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!("coll-host-{}-{}.sock", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// The child processes of one test: killed and reaped on drop, socket removed.
struct Procs {
    children: Vec<common::Reap>,
    socket: std::path::PathBuf,
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.children.clear();
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn spawn_members(n: usize, mode: &str) -> Procs {
    use std::process::{Command, Stdio};
    let socket = unique_socket();
    let mut procs = Procs { children: Vec::new(), socket: socket.clone() };
    for rank in 0..n {
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_member", "--ignored", "--nocapture", "--test-threads=1"])
            .env(async_doca::oob::OOB_PATH_ENV, &socket)
            .env(async_doca::oob::OOB_RANK_ENV, rank.to_string())
            .env(async_doca::oob::OOB_SIZE_ENV, n.to_string())
            .env(MODE_ENV, mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        procs.children.push(common::Reap(Some(child)));
    }
    procs
}

/// Waits (bounded) for child `i` to exit; returns its success and its output.
fn wait_child(procs: &mut Procs, i: usize, deadline: Instant) -> (bool, String) {
    let child = procs.children[i].0.as_mut().unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "member {i} did not finish in time");
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = procs.children[i].0.take().unwrap().wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[test]
fn three_and_eight_processes() {
    for n in [3usize, 8] {
        let mut procs = spawn_members(n, "sequence");
        let deadline = Instant::now() + Duration::from_secs(120);
        for i in 0..n {
            let (ok, out) = wait_child(&mut procs, i, deadline);
            assert!(ok, "{n} processes: member {i} failed:\n{out}");
            assert!(out.contains("COLL-MEMBER-OK"), "{n} processes: member {i} did not run:\n{out}");
        }
    }
}

/// Rough latency of an 8-byte allreduce across 2 and 4 processes (printed, never asserted).
#[test]
fn cross_process_latency_report() {
    for n in [2usize, 4] {
        let mut procs = spawn_members(n, "latency");
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut medians = Vec::new();
        for i in 0..n {
            let (ok, out) = wait_child(&mut procs, i, deadline);
            assert!(ok, "member {i}:\n{out}");
            let ns: u64 = out
                .lines()
                .find_map(|l| l.split("COLL-LATENCY ").nth(1))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or_else(|| panic!("member {i} printed no latency:\n{out}"));
            medians.push(Duration::from_nanos(ns));
        }
        eprintln!("8-byte allreduce, {n} processes: median per member {medians:?}");
    }
}

#[test]
fn a_killed_process_fails_every_other_member() {
    use std::io::BufRead;
    let n = 3;
    let mut procs = spawn_members(n, "victim");
    // The victim says when it finished its first collectives; then it is killed while the
    // others wait in the next one.
    let victim = procs.children[VICTIM].0.as_mut().unwrap();
    let mut lines = std::io::BufReader::new(victim.stdout.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("the victim exited before its first collectives").unwrap();
        if line.contains("COLL-VICTIM-READY") {
            break;
        }
    }
    victim.kill().unwrap();
    victim.wait().unwrap();
    procs.children[VICTIM].0 = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in (0..n).filter(|&i| i != VICTIM) {
        let (ok, out) = wait_child(&mut procs, i, deadline);
        assert!(ok && out.contains("COLL-MEMBER-OK"), "member {i}:\n{out}");
    }
}

/// One process of the cross-process tests; run only by them.
#[test]
#[ignore = "started by the cross-process tests as one of their members"]
fn child_member() {
    let mode = std::env::var(MODE_ENV).expect("started by a cross-process test");
    let oob = UnixOob::from_env(LIMIT).unwrap();
    runtime()
        .block_on(async {
            let dev = Device::open_default()?;
            let comm = bounded(HostComm::builder(&dev, oob).build()).await??;
            let (r, n) = (comm.rank(), comm.size());
            match mode.as_str() {
                "sequence" => {
                    let lens = lengths(n as u64 + 100, 1, 20_000);
                    let mut k = 0;
                    exercise::<f64>(&comm, &dev, &mut k, &lens).await?;
                    exercise::<i32>(&comm, &dev, &mut k, &lens[..2]).await?;
                    // Mismatched sizes across processes are errors, not hangs.
                    let src = filled::<i64>(&dev, 3 + r % 2, |i| i as i64)?;
                    let mut dst = TypedBuf::<i64>::alloc(&dev, 3 + r % 2, RW)?;
                    let e = bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await?.expect_err("mismatch");
                    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
                    bounded(comm.close()).await??;
                }
                "victim" => {
                    let src = filled::<i64>(&dev, 1000, |i| val(5, r, i))?;
                    let mut dst = TypedBuf::<i64>::alloc(&dev, 1000, RW)?;
                    bounded(comm.allreduce(&src, &mut dst, ReduceOp::Sum)).await??;
                    let barrier = bounded(comm.barrier()).await?;
                    if r == VICTIM {
                        barrier?;
                        println!("COLL-VICTIM-READY");
                        // Killed here by the parent (bounded in case it is not).
                        async_doca::time::sleep(LIMIT).await;
                        return Err(Error::new(ErrorKind::Other, "the victim was not killed"));
                    }
                    // The victim may be killed before its last barrier messages left it.
                    if let Err(e) = barrier {
                        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
                    }
                    // Several collectives pending when the victim dies: all fail, none hangs.
                    let mut dst2 = TypedBuf::<i64>::alloc(&dev, n * 1000, RW)?;
                    let a = comm.allreduce(&src, &mut dst, ReduceOp::Sum);
                    let b = comm.barrier();
                    let c = comm.allgather(&src, &mut dst2);
                    let (ra, (rb, rc)) = bounded(futures_lite::future::zip(a, futures_lite::future::zip(b, c))).await?;
                    for e in [ra, rb, rc] {
                        let e = e.expect_err("the victim is gone");
                        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
                    }
                    let e = bounded(comm.barrier()).await?.expect_err("later ones fail too");
                    assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
                }
                "latency" => {
                    println!("COLL-LATENCY {}", small_allreduce_median(&comm, &dev).await?.as_nanos());
                    bounded(comm.close()).await??;
                }
                other => panic!("unknown mode {other}"),
            }
            Ok::<_, Error>(())
        })
        .unwrap();
    println!("COLL-MEMBER-OK");
}
