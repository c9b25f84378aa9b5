//! `CollPlugin` instances driven in one process through the SDK's fake worker, with the host
//! side written on raw doca-sys: per member a host RDMA ctx connected to its plugin, and host
//! buffers from `doca_soft_alloc_shared` registered and exported as the domain's mkeys.

// Ranks index several parallel arrays (hosts, answers, expected values) at once.
#![allow(clippy::needless_range_loop)]

use std::path::PathBuf;
use std::ptr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use coll_algorithms::{DataType, Kind, ReduceOp, Tuning};
use doca_sys as sys;
use doca_urom_coll::proto::{Cmd, CollSpec, InitTuning, Notif};
use doca_urom_coll::CollPlugin;
use doca_urom_plugin::testing::{self, Domain, LoadedPlugin, Member, Packed, Segment, Worker};
use doca_urom_plugin::Status;

doca_urom_plugin::export_plugin!(CollPlugin);

const PLUGIN: u64 = 1 << 3;
/// Bytes of each host buffer (src and dst) per member.
const BUF: usize = 4 << 20;
/// Upper bound on how long a test waits for answers before failing (never reached when the
/// plugin works; it only keeps a broken plugin from hanging the suite).
const PATIENCE: Duration = Duration::from_secs(60);

fn ok(e: sys::doca_error_t, what: &str) {
    assert_eq!(e, sys::DOCA_SUCCESS, "{what}");
}

/// Shared memory a peer (here: the plugins) can reach with one-sided RDMA.
struct Shared(*mut u8);

impl Shared {
    fn new(len: usize) -> Shared {
        let mut p = ptr::null_mut();
        // SAFETY: valid out-pointer; freed once in Drop.
        ok(unsafe { sys::doca_soft_alloc_shared(len, &mut p) }, "alloc_shared");
        Shared(p.cast())
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; the mmaps over it are destroyed first (field order of Host).
        unsafe { sys::doca_soft_free_shared(self.0.cast()) };
    }
}

/// One member's host side: PE, RDMA ctx with one connection to its plugin, src/dst buffers.
struct Host {
    dev: *mut sys::doca_dev,
    pe: *mut sys::doca_pe,
    rdma: *mut sys::doca_rdma,
    conn: *mut sys::doca_rdma_connection,
    blob: Vec<u8>,
    mmaps: [*mut sys::doca_mmap; 2],
    mkeys: [Vec<u8>; 2],
    mem: [Shared; 2],
}

const SRC: usize = 0;
const DST: usize = 1;

impl Host {
    fn new() -> Host {
        let mem = [Shared::new(BUF), Shared::new(BUF)];
        let mut h = Host {
            dev: ptr::null_mut(),
            pe: ptr::null_mut(),
            rdma: ptr::null_mut(),
            conn: ptr::null_mut(),
            blob: Vec::new(),
            mmaps: [ptr::null_mut(); 2],
            mkeys: [Vec::new(), Vec::new()],
            mem,
        };
        let rw =
            sys::DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | sys::DOCA_ACCESS_FLAG_RDMA_READ | sys::DOCA_ACCESS_FLAG_RDMA_WRITE;
        // SAFETY: plain DOCA setup with fresh objects and out-pointers; Drop tears it down.
        unsafe {
            let (mut list, mut n) = (ptr::null_mut(), 0u32);
            ok(sys::doca_devinfo_create_list(&mut list, &mut n), "devinfo list");
            assert!(n > 0);
            ok(sys::doca_dev_open(*list, &mut h.dev), "dev_open");
            sys::doca_devinfo_destroy_list(list);
            ok(sys::doca_pe_create(&mut h.pe), "pe_create");
            ok(sys::doca_rdma_create(h.dev, &mut h.rdma), "rdma_create");
            ok(sys::doca_rdma_set_permissions(h.rdma, rw), "permissions");
            let ctx = sys::doca_rdma_as_ctx(h.rdma);
            ok(sys::doca_pe_connect_ctx(h.pe, ctx), "connect_ctx");
            ok(sys::doca_ctx_start(ctx), "ctx_start");
            let (mut d, mut len) = (ptr::null(), 0usize);
            ok(sys::doca_rdma_export(h.rdma, &mut d, &mut len, &mut h.conn), "rdma_export");
            h.blob = std::slice::from_raw_parts(d.cast::<u8>(), len).to_vec();
            for k in [SRC, DST] {
                let mut m = ptr::null_mut();
                ok(sys::doca_mmap_create(&mut m), "mmap_create");
                ok(sys::doca_mmap_set_memrange(m, h.mem[k].0.cast(), BUF), "memrange");
                ok(sys::doca_mmap_set_permissions(m, rw), "mmap permissions");
                ok(sys::doca_mmap_add_dev(m, h.dev), "add_dev");
                ok(sys::doca_mmap_start(m), "mmap_start");
                let (mut d, mut len) = (ptr::null(), 0usize);
                ok(sys::doca_mmap_export_rdma(m, h.dev, &mut d, &mut len), "export_rdma");
                h.mkeys[k] = std::slice::from_raw_parts(d.cast::<u8>(), len).to_vec();
                h.mmaps[k] = m;
            }
        }
        h
    }

    fn va(&self, k: usize) -> u64 {
        self.mem[k].0 as u64
    }

    fn segments(&self) -> Vec<Segment> {
        [SRC, DST]
            .map(|k| Segment { va: self.va(k), len: BUF as u64, memh: Vec::new(), mkey: self.mkeys[k].clone() })
            .to_vec()
    }

    fn connect(&mut self, worker_blob: &[u8]) {
        // SAFETY: our connection, the plugin's blob.
        ok(
            unsafe { sys::doca_rdma_connect(self.rdma, worker_blob.as_ptr().cast(), worker_blob.len(), self.conn) },
            "host connect",
        );
    }

    fn progress(&mut self) {
        // SAFETY: our PE on this thread.
        unsafe { sys::doca_pe_progress(self.pe) };
    }

    fn write(&mut self, k: usize, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= BUF);
        // SAFETY: inside the buffer; nothing else writes it while the test does.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), self.mem[k].0.add(off), bytes.len()) };
    }

    fn read(&self, k: usize, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= BUF);
        // SAFETY: inside the buffer; the plugins' writes completed (their answers came).
        unsafe { std::slice::from_raw_parts(self.mem[k].0.add(off), len).to_vec() }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // SAFETY: teardown in reverse order on this thread; no task was ever allocated.
        unsafe {
            let ctx = sys::doca_rdma_as_ctx(self.rdma);
            sys::doca_ctx_stop(ctx);
            for _ in 0..1000 {
                sys::doca_pe_progress(self.pe);
            }
            for m in self.mmaps {
                if !m.is_null() {
                    sys::doca_mmap_stop(m);
                    sys::doca_mmap_destroy(m);
                }
            }
            sys::doca_rdma_destroy(self.rdma);
            sys::doca_pe_destroy(self.pe);
            sys::doca_dev_close(self.dev);
        }
    }
}

/// `n` members: fake workers with the plugin, their hosts, one fake domain.
struct Cluster {
    workers: Vec<Option<Worker>>,
    hosts: Vec<Host>,
    ids: Vec<u64>,
    next_ctx: u64,
    _domain: Rc<Domain>,
}

impl Cluster {
    fn new(n: usize) -> Cluster {
        Cluster::with_plugin(n, urom_plugin_get_iface)
    }

    fn with_plugin(n: usize, get_iface: doca_urom_plugin::abi::urom_plugin_get_iface_fn) -> Cluster {
        let domain = Domain::new();
        let ids: Vec<u64> = (0..n as u64).map(|i| (1 << 63) + 7 * i + 1).collect();
        let mut workers = Vec::new();
        let mut hosts = Vec::new();
        for &id in &ids {
            let mut w = Worker::open(get_iface, domain.clone()).expect("plugin opens");
            let h = Host::new();
            domain.set_member(id, Member { addr: Some(w.address().unwrap()), segs: h.segments() });
            workers.push(Some(w));
            hosts.push(h);
        }
        Cluster { workers, hosts, ids, next_ctx: 1, _domain: domain }
    }

    fn size(&self) -> usize {
        self.ids.len()
    }

    fn command(&mut self, rank: usize, cmd: &Cmd) -> u64 {
        let c = self.next_ctx;
        self.next_ctx += 1;
        self.workers[rank].as_mut().unwrap().command(PLUGIN, c, 5, &cmd.encode()).expect("worker_cmd");
        c
    }

    /// Progresses round-robin until every rank has `want[rank]` answers. Like a real worker,
    /// a member's plugin is only progressed while it has unanswered commands, so a plugin
    /// that answers before its messages are out strands its peers and fails here.
    fn answers(&mut self, want: &[usize]) -> Vec<Vec<Packed>> {
        let mut got: Vec<Vec<Packed>> = vec![Vec::new(); self.size()];
        let deadline = Instant::now() + PATIENCE;
        while (0..self.size()).any(|r| got[r].len() < want[r]) {
            assert!(
                Instant::now() < deadline,
                "no answer in time: got {:?} of {want:?}",
                got.iter().map(Vec::len).collect::<Vec<_>>()
            );
            for (r, w) in self.workers.iter_mut().enumerate() {
                if let Some(w) = w.as_mut().filter(|_| got[r].len() < want[r]) {
                    got[r].extend(w.progress().expect("progress"));
                }
            }
            for h in &mut self.hosts {
                h.progress();
            }
        }
        for g in &got {
            for p in g {
                assert_eq!((p.plugin, p.dest_id), (PLUGIN, 5));
            }
        }
        got
    }

    fn init(&mut self, tuning: Tuning) {
        let n = self.size();
        for r in 0..n {
            let cmd = Cmd::Init {
                rank: r as u32,
                members: self.ids.clone(),
                host_blob: self.hosts[r].blob.clone(),
                tuning: InitTuning::from(tuning),
            };
            self.command(r, &cmd);
        }
        let got = self.answers(&vec![1; n]);
        for (r, g) in got.iter().enumerate() {
            assert_eq!(g[0].status, Status::SUCCESS);
            let Notif::InitDone { worker_blob } = Notif::decode(g[0].packed.as_ref().unwrap()).unwrap() else {
                panic!("not InitDone")
            };
            self.hosts[r].connect(&worker_blob);
        }
    }

    fn fini(&mut self) {
        let n = self.size();
        for r in 0..n {
            self.command(r, &Cmd::Fini);
        }
        for g in self.answers(&vec![1; n]) {
            assert_eq!(g[0].status, Status::SUCCESS);
            assert_eq!(Notif::decode(g[0].packed.as_ref().unwrap()), Ok(Notif::FiniDone));
        }
    }
}

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

/// A collective's spec at buffer offsets `src_off`/`dst_off` of host `h`.
#[allow(clippy::too_many_arguments)]
fn spec(
    h: &Host,
    seq: u32,
    kind: Kind,
    dtype: DataType,
    op: ReduceOp,
    root: u32,
    count: u64,
    src_len: usize,
    dst_len: usize,
    off: usize,
) -> CollSpec {
    CollSpec {
        seq,
        kind,
        dtype,
        op,
        root,
        count,
        src_va: h.va(SRC) + off as u64,
        src_len: src_len as u64,
        dst_va: h.va(DST) + off as u64,
        dst_len: dst_len as u64,
    }
}

fn expect_done(g: &[Packed], seqs: &[u32]) {
    let got: Vec<_> = g.iter().map(|p| (p.status, Notif::decode(p.packed.as_ref().unwrap()).unwrap())).collect();
    let want: Vec<_> = seqs.iter().map(|&seq| (Status::SUCCESS, Notif::CollDone { seq })).collect();
    assert_eq!(got, want);
}

/// Allreduce sum of i64 (`count` elements; member r contributes `r * 1000 + i`), checked.
fn allreduce_i64(c: &mut Cluster, seq: u32, count: usize) {
    allreduce_i64_at(c, seq, count, 0);
}

/// [`allreduce_i64`] at offset `off` of the source and destination buffers, with a
/// contribution that also depends on `seq` (so a result left by an earlier collective at the
/// same place does not pass).
fn allreduce_i64_at(c: &mut Cluster, seq: u32, count: usize, off: usize) {
    let n = c.size();
    let val = |r: i64, i: i64| r * 1000 + i + seq as i64 * 1_000_000;
    for r in 0..n {
        let v: Vec<i64> = (0..count as i64).map(|i| val(r as i64, i)).collect();
        c.hosts[r].write(SRC, off, &le(&v, i64::to_le_bytes));
        let s = spec(
            &c.hosts[r],
            seq,
            Kind::Allreduce,
            DataType::I64,
            ReduceOp::Sum,
            0,
            count as u64,
            count * 8,
            count * 8,
            off,
        );
        c.command(r, &Cmd::Coll(s));
    }
    let got = c.answers(&vec![1; n]);
    let want: Vec<i64> = (0..count as i64).map(|i| (0..n as i64).map(|r| val(r, i)).sum()).collect();
    for r in 0..n {
        expect_done(&got[r], &[seq]);
        let at = format!("rank {r}, {count} elements at offset {off}");
        assert_eq!(c.hosts[r].read(DST, off, count * 8), le(&want, i64::to_le_bytes), "{at}");
    }
}

fn run_all_kinds(n: usize) {
    let mut c = Cluster::new(n);
    c.init(Tuning::default());
    // Recursive doubling (small), ring with multi-chunk messages (large), one element, zero.
    allreduce_i64(&mut c, 1, 10);
    allreduce_i64(&mut c, 2, 100_000);
    allreduce_i64(&mut c, 3, 1);
    allreduce_i64(&mut c, 4, 0);

    // Allreduce f64 sum, then allgather, broadcast, barrier, reduce-scatter all in flight at
    // once at disjoint buffer offsets; answered in command order.
    let count = 3000usize;
    let offs = [0usize, 1 << 20, 2 << 20, 3 << 20, 3 << 20];
    for r in 0..n {
        let h = &mut c.hosts[r];
        let f: Vec<f64> = (0..count).map(|i| 0.5 * (r + 1) as f64 + i as f64).collect();
        h.write(SRC, offs[0], &le(&f, f64::to_le_bytes));
        let ag: Vec<u64> = (0..count as u64).map(|i| ((r as u64) << 32) | i).collect();
        h.write(SRC, offs[1], &le(&ag, u64::to_le_bytes));
        let bc: Vec<i32> = (0..count as i32).map(|i| if r == 1 % n { i * 3 } else { -1 }).collect();
        h.write(SRC, offs[2], &le(&bc, i32::to_le_bytes));
        let rs: Vec<i32> = (0..(count * n) as i32).map(|i| i + r as i32).collect();
        h.write(SRC, offs[3], &le(&rs, i32::to_le_bytes));
        let h = &c.hosts[r];
        let cmds = [
            spec(h, 10, Kind::Allreduce, DataType::F64, ReduceOp::Sum, 0, count as u64, count * 8, count * 8, offs[0]),
            spec(
                h,
                11,
                Kind::Allgather,
                DataType::U64,
                ReduceOp::Sum,
                0,
                count as u64,
                count * 8,
                n * count * 8,
                offs[1],
            ),
            spec(
                h,
                12,
                Kind::Broadcast,
                DataType::I32,
                ReduceOp::Sum,
                (1 % n) as u32,
                count as u64,
                count * 4,
                count * 4,
                offs[2],
            ),
            spec(h, 13, Kind::Barrier, DataType::I32, ReduceOp::Sum, 0, 0, 0, 0, 0),
            spec(
                h,
                14,
                Kind::ReduceScatter,
                DataType::I32,
                ReduceOp::Max,
                0,
                count as u64,
                n * count * 4,
                count * 4,
                offs[3],
            ),
        ];
        for s in cmds {
            c.command(r, &Cmd::Coll(s));
        }
    }
    let got = c.answers(&vec![5; n]);
    let f_want: Vec<f64> = (0..count).map(|i| (0..n).map(|r| 0.5 * (r + 1) as f64 + i as f64).sum()).collect();
    let ag_want: Vec<u64> = (0..n as u64).flat_map(|r| (0..count as u64).map(move |i| (r << 32) | i)).collect();
    let bc_want: Vec<i32> = (0..count as i32).map(|i| i * 3).collect();
    for r in 0..n {
        expect_done(&got[r], &[10, 11, 12, 13, 14]);
        let h = &c.hosts[r];
        let f: Vec<f64> =
            h.read(DST, offs[0], count * 8).chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        // Sums of small halves are exact in any order.
        assert_eq!(f, f_want, "allreduce f64, rank {r}");
        assert_eq!(h.read(DST, offs[1], n * count * 8), le(&ag_want, u64::to_le_bytes), "allgather, rank {r}");
        assert_eq!(h.read(DST, offs[2], count * 4), le(&bc_want, i32::to_le_bytes), "broadcast, rank {r}");
        let rs_want: Vec<i32> = (0..count as i32).map(|i| (r * count) as i32 + i + (n - 1) as i32).collect();
        assert_eq!(h.read(DST, offs[3], count * 4), le(&rs_want, i32::to_le_bytes), "reduce-scatter, rank {r}");
    }
    c.fini();
}

/// What a worker's plugin costs per collective, for callgrind (see `docs/cost.md`, "What an
/// offloaded collective costs the worker"): two members run `WORKER_COST_ITERS` (default 100)
/// checked 8 B allreduces one after the other, in one thread, so that the instruction count
/// has no waiting in it. Per collective = the difference of two runs' inclusive cost of
/// `ffi::worker_cmd` + `ffi::progress`, divided by the difference of their iterations.
#[test]
#[ignore = "a measurement harness for callgrind; run by name with --ignored"]
fn worker_cost_probe() {
    let iters: u32 = std::env::var("WORKER_COST_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let mut c = Cluster::new(2);
    c.init(Tuning::default());
    for seq in 0..iters {
        allreduce_i64(&mut c, seq, 1);
    }
    c.fini();
}

#[test]
fn two_members_run_every_kind() {
    run_all_kinds(2);
}

#[test]
fn three_members_run_every_kind() {
    run_all_kinds(3);
}

#[test]
fn four_members_run_every_kind() {
    run_all_kinds(4);
}

#[test]
fn eight_members_run_every_kind() {
    run_all_kinds(8);
}

#[test]
fn commands_out_of_place_are_errors() {
    let mut c = Cluster::new(2);
    let early = spec(&c.hosts[0], 1, Kind::Barrier, DataType::I32, ReduceOp::Sum, 0, 0, 0, 0, 0);
    c.command(0, &Cmd::Coll(early));
    c.command(1, &Cmd::Fini);
    let got = c.answers(&[1, 1]);
    assert_eq!(got[0][0].status, Status::BAD_STATE, "Coll before Init");
    assert_eq!(got[1][0].status, Status::BAD_STATE, "Fini before Init");
    // Garbage is INVALID_VALUE and the plugin carries on.
    c.workers[0].as_mut().unwrap().command(PLUGIN, 99, 5, b"\x02\0\0").unwrap();
    assert_eq!(c.answers(&[1, 0])[0][0].status, Status::INVALID_VALUE);

    c.init(Tuning::default());
    let h = &c.hosts[0];
    // dst too short for an allgather of 2 members; then a range outside every segment.
    let bad_len = spec(h, 2, Kind::Allgather, DataType::I64, ReduceOp::Sum, 0, 4, 32, 32, 0);
    let outside = CollSpec { src_va: 8, ..spec(h, 3, Kind::Allreduce, DataType::I64, ReduceOp::Sum, 0, 4, 32, 32, 0) };
    let straddle = spec(h, 4, Kind::Allreduce, DataType::I64, ReduceOp::Sum, 0, 4, 32, 32, BUF - 16);
    let bad_root = spec(h, 5, Kind::Broadcast, DataType::I64, ReduceOp::Sum, 2, 4, 32, 32, 0);
    for s in [bad_len, outside, straddle, bad_root] {
        c.command(0, &Cmd::Coll(s));
    }
    let got = c.answers(&[4, 0]);
    let st: Vec<Status> = got[0].iter().map(|p| p.status).collect();
    assert_eq!(st, [Status::INVALID_VALUE, Status::NOT_FOUND, Status::INVALID_VALUE, Status::INVALID_VALUE]);
    // A second Init is refused; the group still works after the rejected commands.
    let again = Cmd::Init {
        rank: 0,
        members: c.ids.clone(),
        host_blob: c.hosts[0].blob.clone(),
        tuning: InitTuning::default(),
    };
    c.command(0, &again);
    assert_eq!(c.answers(&[1, 0])[0][0].status, Status::BAD_STATE);
    allreduce_i64(&mut c, 6, 5);
    c.fini();
    // After Fini the group is gone.
    let late = spec(&c.hosts[1], 7, Kind::Barrier, DataType::I32, ReduceOp::Sum, 0, 0, 0, 0, 0);
    c.command(1, &Cmd::Coll(late));
    assert_eq!(c.answers(&[0, 1])[1][0].status, Status::BAD_STATE);
}

/// The worker remembers the host buffers it looked up (a few, per group): collectives on more
/// distinct buffers than it keeps, then on the first ones again (forgotten meanwhile), and on
/// remembered ones, all land where they were asked to; a range that leaves its segment is
/// still refused once a range inside it is remembered.
#[test]
fn collectives_on_many_host_buffers_land_in_each() {
    let mut c = Cluster::new(2);
    c.init(Tuning::default());
    let offs: Vec<usize> = (0..40).map(|k| k * 4096 + 8 * (k % 3)).collect();
    let mut seq = 1;
    for &off in offs.iter().chain(&offs[..4]).chain(&offs[36..]) {
        allreduce_i64_at(&mut c, seq, 5, off);
        seq += 1;
    }
    // Remembered: 32 bytes at the buffers' end (just above); 48 from there leave the segment.
    allreduce_i64_at(&mut c, seq, 4, BUF - 32);
    let h = &c.hosts[0];
    let straddle = spec(h, seq + 1, Kind::Allreduce, DataType::I64, ReduceOp::Sum, 0, 6, 48, 48, BUF - 32);
    c.command(0, &Cmd::Coll(straddle));
    assert_eq!(c.answers(&[1, 0])[0][0].status, Status::INVALID_VALUE);
    c.fini();
}

#[test]
fn mismatched_counts_fail_on_every_member() {
    let mut c = Cluster::new(2);
    c.init(Tuning::default());
    for (r, count) in [(0usize, 4usize), (1, 6)] {
        let s = spec(
            &c.hosts[r],
            1,
            Kind::Allreduce,
            DataType::I64,
            ReduceOp::Sum,
            0,
            count as u64,
            count * 8,
            count * 8,
            0,
        );
        c.command(r, &Cmd::Coll(s));
    }
    let got = c.answers(&[1, 1]);
    for g in &got {
        assert!(!g[0].status.is_success());
        let Ok(Notif::Failed { seq: 1, reason }) = Notif::decode(g[0].packed.as_ref().unwrap()) else {
            panic!("not Failed: {:?}", g[0])
        };
        assert!(!reason.is_empty());
    }
    c.fini();
}

#[test]
fn a_stand_in_for_rejected_arguments_fails_every_member_and_the_group_stays_in_step() {
    let mut c = Cluster::new(3);
    c.init(Tuning::default());
    // Member 0's host rejected its arguments and sends the stand-in; the others run.
    c.command(0, &Cmd::Invalid { seq: 1, kind: Kind::Allreduce });
    for r in 1..3 {
        let s = spec(&c.hosts[r], 1, Kind::Allreduce, DataType::I64, ReduceOp::Sum, 0, 4, 32, 32, 0);
        c.command(r, &Cmd::Coll(s));
    }
    let got = c.answers(&[1, 1, 1]);
    for g in &got {
        assert_eq!(g[0].status, Status::INVALID_VALUE);
        let Ok(Notif::Failed { seq: 1, reason }) = Notif::decode(g[0].packed.as_ref().unwrap()) else {
            panic!("not Failed: {:?}", g[0])
        };
        assert!(!reason.is_empty());
    }
    // The next collective matches on every member.
    allreduce_i64(&mut c, 2, 5);
    c.fini();
}

#[test]
fn a_member_closing_mid_collective_fails_the_others() {
    let mut c = Cluster::new(3);
    c.init(Tuning::default());
    allreduce_i64(&mut c, 1, 3);
    // Members 0 and 1 start an allreduce that member 2 never joins; then its worker closes.
    for r in 0..2 {
        let s = spec(&c.hosts[r], 2, Kind::Allreduce, DataType::I64, ReduceOp::Sum, 0, 8, 64, 64, 0);
        c.command(r, &Cmd::Coll(s));
    }
    for _ in 0..50 {
        for w in c.workers.iter_mut().flatten() {
            assert!(w.progress().unwrap().is_empty(), "nothing can finish without member 2");
        }
    }
    c.workers[2] = None;
    let got = c.answers(&[1, 1, 0]);
    for g in &got[..2] {
        assert_eq!(g[0].status, Status::CONNECTION_ABORTED, "{:?}", Notif::decode(g[0].packed.as_ref().unwrap()));
    }
    // Later collectives fail at once too.
    let s = spec(&c.hosts[0], 3, Kind::Barrier, DataType::I32, ReduceOp::Sum, 0, 0, 0, 0, 0);
    c.command(0, &Cmd::Coll(s));
    assert!(!c.answers(&[1, 0, 0])[0][0].status.is_success());
}

/// Builds `libworker_coll.so` with the cargo running this test, for this test's profile, into
/// a target directory of its own beside this test's (bounded: a build that takes over five
/// minutes is killed). Not into this test's own: a `-p worker_coll` build resolves features for
/// that package alone, and doca-soft (a cdylib, so its rlib's file name carries no hash) would
/// be rebuilt over the workspace's copy while `cargo test --workspace` still needs it (its doc
/// tests then failed with "can't find crate for `doca_sys`").
fn build_shared_object() -> Result<PathBuf, String> {
    let dir = testing::cargo_build(&["-p", "worker_coll"], Some("nested-worker-coll"), Duration::from_secs(300))?;
    Ok(dir.join(doca_urom_coll::proto::FILE_NAME))
}

/// The cdylib as a worker loads it: it carries its own copy of the soft provider (the host
/// side here uses the test binary's), which must interoperate through the shared-memory
/// rings, memfds and pidfds alone.
#[test]
fn the_shared_object_runs_collectives() {
    let path = build_shared_object().expect("building worker_coll");
    let so = LoadedPlugin::load(&path).expect("loading libworker_coll.so");
    assert_eq!(so.version(), Ok(doca_urom_coll::proto::VERSION));
    let mut c = Cluster::with_plugin(3, so.get_iface);
    c.init(Tuning::default());
    allreduce_i64(&mut c, 1, 10);
    allreduce_i64(&mut c, 2, 70_000);
    c.fini();
}

/// A small deterministic generator (tests must be reproducible).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One element of `dtype` holding the small integer `v` (small so that float sums and
/// products are exact in any order).
fn elem(dtype: DataType, v: i64) -> Vec<u8> {
    match dtype {
        DataType::I32 => (v as i32).to_le_bytes().to_vec(),
        DataType::I64 => v.to_le_bytes().to_vec(),
        DataType::U64 => (v as u64).to_le_bytes().to_vec(),
        DataType::F32 => (v as f32).to_le_bytes().to_vec(),
        DataType::F64 => (v as f64).to_le_bytes().to_vec(),
    }
}

/// Random collectives of every kind, type and operator, three in flight at a time, on groups
/// of 2, 3 and 5 members, with the tuning forcing each algorithm in turn; every result is
/// checked against a reference computed here.
#[test]
fn random_collectives_match_a_reference() {
    let mut rng = Lcg(0x5eed);
    for (n, tuning) in [
        (2, Tuning::default()),
        (3, Tuning { allreduce_ring_threshold_bytes: 0, allgather_rd_threshold_bytes: 0, knomial_radix: 2 }),
        (5, Tuning::default()),
        (
            4,
            Tuning {
                allreduce_ring_threshold_bytes: usize::MAX,
                allgather_rd_threshold_bytes: usize::MAX,
                knomial_radix: 3,
            },
        ),
    ] {
        let mut c = Cluster::new(n);
        c.init(tuning);
        let mut seq = 0u32;
        for _batch in 0..6 {
            // Three collectives at disjoint thirds of the buffers.
            let third = BUF / 3 / 8 * 8;
            let mut expected: Vec<Vec<Vec<u8>>> = Vec::new(); // [op][rank] -> dst bytes
            let mut seqs = Vec::new();
            let mut cmds: Vec<Vec<CollSpec>> = vec![Vec::new(); n];
            for k in 0..3 {
                seq += 1;
                let kind = doca_urom_coll::proto::KINDS[rng.below(5) as usize];
                let dtype = DataType::ALL[rng.below(5) as usize];
                let op = ReduceOp::ALL[rng.below(4) as usize];
                let es = dtype.size();
                // Up to the third of a buffer the largest side needs; often small, sometimes 0.
                let max_count = (third / es / n) as u64;
                let count = match (kind, rng.below(4)) {
                    (Kind::Barrier, _) => 0,
                    (_, 0) => rng.below(4),
                    (_, 1) => rng.below(300),
                    _ => rng.below(max_count + 1),
                } as usize;
                let root = rng.below(n as u64) as usize;
                let in_elems = match kind {
                    Kind::ReduceScatter => n * count,
                    _ => count,
                };
                let inputs: Vec<Vec<u8>> = (0..n)
                    .map(|_| (0..in_elems).flat_map(|_| elem(dtype, rng.below(17) as i64 - 8)).collect())
                    .collect();
                let reduced = || {
                    let mut acc = inputs[0].clone();
                    for x in &inputs[1..] {
                        coll_algorithms::reduce_into(&mut acc, x, dtype, op);
                    }
                    acc
                };
                let outs: Vec<Vec<u8>> = match kind {
                    Kind::Allreduce => vec![reduced(); n],
                    Kind::Allgather => vec![inputs.concat(); n],
                    Kind::Broadcast => vec![inputs[root].clone(); n],
                    Kind::Barrier => vec![Vec::new(); n],
                    Kind::ReduceScatter => {
                        let all = reduced();
                        (0..n).map(|r| all[r * count * es..(r + 1) * count * es].to_vec()).collect()
                    }
                };
                let off = k * third;
                for r in 0..n {
                    c.hosts[r].write(SRC, off, &inputs[r]);
                    let src_len =
                        if kind == Kind::Broadcast && r != root && rng.below(2) == 0 { 0 } else { inputs[r].len() };
                    let s =
                        spec(&c.hosts[r], seq, kind, dtype, op, root as u32, count as u64, src_len, outs[r].len(), off);
                    cmds[r].push(s);
                }
                expected.push(outs);
                seqs.push(seq);
            }
            for r in 0..n {
                for s in &cmds[r] {
                    c.command(r, &Cmd::Coll(*s));
                }
            }
            let got = c.answers(&vec![3; n]);
            for r in 0..n {
                expect_done(&got[r], &seqs);
                for (k, outs) in expected.iter().enumerate() {
                    let s = &cmds[r][k];
                    assert_eq!(
                        c.hosts[r].read(DST, k * third, outs[r].len()),
                        outs[r],
                        "{n} members, rank {r}: {:?} {} {} count {}",
                        s.kind,
                        s.dtype,
                        s.op,
                        s.count
                    );
                }
            }
        }
        c.fini();
    }
}
