//! UROM under chaos: a soft UROM daemon per round, and in every child a service connection,
//! a worker loading `worker_graph` and `worker_coll`, and a domain of all the children.
//!
//! While the RDMA traffic runs, each child sends loopback commands to its worker (some of
//! them dropped in flight) and runs a sequence of collectives with the others (allreduce,
//! allgather, broadcast, barrier; the sequence is drawn from a seed all children share, so
//! they issue the same collectives in the same order). The controller kills the daemon (and
//! starts it again on the same socket) or one worker at random moments.
//!
//! Invariants, checked by each child at once: a loopback answer carries the value sent; a
//! completed collective's result is exactly the reference; a failure is `ConnectionLost` (the
//! documented error of a dead worker or daemon) or another error a fault explains; nothing
//! takes longer than `OP_LIMIT`. After the traffic every survivor must get a command answered
//! again (a new worker, and a new service connection if the daemon was restarted): after a
//! fault, the next round of work works. The controller checks that the daemon stops cleanly
//! on SIGTERM at the end of the round and that no worker process outlives it.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::time::{Duration, Instant};

use async_doca::coll::{ReduceOp, TypedBuf};
use async_doca::oob::UnixOob;
use async_doca::spawn_local;
use async_doca::time::{sleep, timeout};
use async_doca::urom::plugin::samples::graph;
use async_doca::urom::{Domain, Service, Worker};
use async_doca::{Access, Device, Error, ErrorKind, Memory};

use super::{explained, violation, Log, Rng, OP_LIMIT};

/// Largest collective, in `i64` elements per member.
const MAX_COUNT: usize = 512;
/// Commands a worker takes at once (its task pool): small, so bursts exhaust it.
const MAX_INFLIGHT: u32 = 4;
/// How long the setup waits for the other members and the daemon.
const SETUP: Duration = Duration::from_secs(60);

/// A child's UROM state.
pub struct Urom {
    dev: Device,
    socket: PathBuf,
    /// The service connection and the worker commands go to; `None` after a failure, until
    /// a reconnection succeeds.
    svc: RefCell<Option<Service>>,
    worker: RefCell<Option<Worker>>,
    graph: u64,
    /// The domain of every child's first worker, and the memory its collectives use.
    domain: Domain,
    mem: Memory,
    rank: usize,
    size: usize,
}

/// Connects to the daemon at `socket`, starts a worker and joins the domain of all `n`
/// children (rendezvous at `oob`). Called during setup, before any fault.
pub async fn setup(dev: &Device, socket: &Path, oob: &Path, me: usize, n: usize) -> Result<Urom, Error> {
    let svc = timeout(SETUP, Service::builder(dev).socket_path(socket).connect()).await??;
    let graph = svc.plugin(graph::PLUGIN_NAME)?.id;
    let worker = timeout(
        SETUP,
        Worker::builder(&svc).plugin(graph::PLUGIN_NAME).plugin("worker_coll").max_inflight(MAX_INFLIGHT).start(),
    )
    .await??;
    let mem = dev.alloc(2 * n * MAX_COUNT * 8, Access::LOCAL_READ_WRITE | Access::RDMA_READ | Access::RDMA_WRITE)?;
    // The rendezvous blocks this thread until every member arrived: nothing else runs yet.
    let oob = UnixOob::connect(oob, me as u32, n as u32, SETUP)?;
    let domain = timeout(SETUP, Domain::builder(oob).worker(&worker).buffer(&mem).timeout(SETUP).start()).await??;
    Ok(Urom {
        dev: dev.clone(),
        socket: socket.to_path_buf(),
        svc: RefCell::new(Some(svc)),
        worker: RefCell::new(Some(worker)),
        graph,
        domain,
        mem,
        rank: me,
        size: n,
    })
}

/// The value member `rank` contributes at element `i` of collective `salt`.
fn value(rank: usize, i: usize, salt: u64) -> i64 {
    ((salt % 100_000) as i64) * 7 + (rank as i64 + 1) * 1_000_003 + i as i64
}

impl Urom {
    /// A new worker for commands (and a new service connection if the old one is gone).
    /// `Ok(false)` while the daemon is not there (yet): a restart is under way.
    async fn reconnect(&self, log: &Log) -> bool {
        *self.worker.borrow_mut() = None;
        let svc = self.svc.borrow().clone();
        let svc = match svc {
            Some(s) => s,
            None => match timeout(OP_LIMIT, Service::builder(&self.dev).socket_path(&self.socket).connect()).await {
                Err(_) => violation(log, "connecting to the UROM daemon hung".into()),
                Ok(Ok(s)) => {
                    *self.svc.borrow_mut() = Some(s.clone());
                    s
                }
                Ok(Err(e)) if explained(&e) || e.kind() == ErrorKind::NotFound => return false,
                Ok(Err(e)) => violation(log, format!("connecting to the UROM daemon failed: {e}")),
            },
        };
        match timeout(OP_LIMIT, Worker::builder(&svc).plugin(graph::PLUGIN_NAME).max_inflight(MAX_INFLIGHT).start())
            .await
        {
            Err(_) => violation(log, "starting a UROM worker hung".into()),
            Ok(Ok(w)) => {
                log.line("UW");
                *self.worker.borrow_mut() = Some(w);
                true
            }
            // The service connection died with its daemon: connect again next time.
            Ok(Err(e)) if explained(&e) => {
                *self.svc.borrow_mut() = None;
                false
            }
            Ok(Err(e)) => violation(log, format!("starting a UROM worker failed: {e}")),
        }
    }

    /// One loopback command on the current worker; `drop_after`: dropped after this long.
    /// `Some(true)` answered, `Some(false)` failed (the worker is gone), `None` dropped.
    async fn command(&self, log: &Log, value: u64, drop_after: Option<Duration>) -> Option<bool> {
        let w = self.worker.borrow().clone()?;
        log.line("US");
        let payload = graph::Cmd::Loopback { value }.encode();
        let f = w.command(self.graph, &payload);
        let r = match drop_after {
            Some(d) => timeout(d, f).await.ok()?,
            None => timeout(OP_LIMIT, f)
                .await
                .unwrap_or_else(|_| violation(log, format!("a UROM command did not resolve within {OP_LIMIT:?}"))),
        };
        match r {
            Ok(reply) => match graph::Notif::decode(&reply) {
                Ok(graph::Notif::Loopback { value: v }) if v == value => {
                    log.line("UD");
                    Some(true)
                }
                other => violation(log, format!("loopback {value} answered {other:?}")),
            },
            Err(e) if e.kind() == ErrorKind::ConnectionLost => {
                log.line(format!("UERR {:?}", e.kind()));
                *self.worker.borrow_mut() = None;
                Some(false)
            }
            Err(e) => violation(log, format!("a UROM command failed unexpectedly: {e}")),
        }
    }

    /// Commands until `deadline`, reconnecting after failures. Returns the number issued.
    /// Now and then a burst far beyond the worker's in-flight limit exhausts its task pool:
    /// the commands wait for a free task, none fails for it.
    pub async fn commands<L: AsRef<Log> + 'static>(self: Rc<Self>, log: Rc<L>, mut rng: Rng, deadline: Instant) -> u64 {
        let mut ops = 0;
        while Instant::now() < deadline {
            if self.worker.borrow().is_none() && !self.reconnect((*log).as_ref()).await {
                sleep(Duration::from_millis(20)).await;
                continue;
            }
            if rng.chance(20) {
                let n = rng.range(4 * MAX_INFLIGHT as u64, 16 * MAX_INFLIGHT as u64);
                (*log).as_ref().line(format!("FAULT urom-burst {n}"));
                let burst: Vec<_> = (0..n)
                    .map(|_| {
                        let (u, log, v) = (self.clone(), log.clone(), rng.next());
                        spawn_local(async move { u.command((*log).as_ref(), v, None).await })
                    })
                    .collect();
                for b in burst {
                    b.await.unwrap_or_else(|e| violation((*log).as_ref(), format!("a UROM burst task failed: {e}")));
                }
                ops += n;
                continue;
            }
            let log = (*log).as_ref();
            let drop_after = match rng.below(100) {
                0..=2 => Some(Duration::from_micros(rng.below(2000))),
                _ => None,
            };
            self.command(log, rng.next(), drop_after).await;
            ops += 1;
        }
        ops
    }

    /// After the traffic: a command must be answered again, with a new worker (and service)
    /// if the old ones died. Bounded; failing to recover is a violation.
    pub async fn works_again(&self, log: &Log, mut rng: Rng) {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            if self.worker.borrow().is_some() || self.reconnect(log).await {
                if self.command(log, rng.next(), None).await == Some(true) {
                    log.line("UOK");
                    return;
                }
                continue;
            }
            if Instant::now() > until {
                violation(log, "no UROM worker answered again within 30 s of the traffic's end".into());
            }
            sleep(Duration::from_millis(20)).await;
        }
    }

    /// The shared sequence of collectives, spread over `op_ms`; stops at the first failure
    /// (the domain is broken for good then). Results are checked against the reference.
    pub async fn collectives(&self, log: &Log, mut shared: Rng, mut own: Rng, op_ms: u64) -> u64 {
        let (rank, size) = (self.rank, self.size);
        let k = shared.range(4, 24);
        let mut done = 0;
        for i in 0..k {
            sleep(Duration::from_millis(own.below(op_ms / k))).await;
            let kind = shared.below(4);
            let count = shared.range(1, MAX_COUNT as u64) as usize;
            let salt = shared.next();
            log.line(format!("KS {i} {kind}"));
            let r = timeout(OP_LIMIT, self.collective(kind, count, salt)).await.unwrap_or_else(|_| {
                violation(log, format!("collective {i} (kind {kind}) did not resolve within {OP_LIMIT:?}"))
            });
            match r {
                Ok(Ok(())) => {
                    log.line(format!("KD {i}"));
                    done += 1;
                }
                Ok(Err(wrong)) => violation(log, format!("collective {i} of {size} members, rank {rank}: {wrong}")),
                Err(e) if explained(&e) => {
                    log.line(format!("KERR {i} {:?}", e.kind()));
                    break;
                }
                Err(e) => violation(log, format!("collective {i} failed unexpectedly: {e}")),
            }
        }
        done
    }

    /// One collective: `Ok(Err(what))` if it completed with a wrong result.
    async fn collective(&self, kind: u64, count: usize, salt: u64) -> Result<Result<(), String>, Error> {
        let (d, mem, rank, size) = (&self.domain, &self.mem, self.rank, self.size);
        let mine: Vec<i64> = (0..count).map(|i| value(rank, i, salt)).collect();
        let region = size * MAX_COUNT;
        Ok(match kind {
            0 => {
                let mut src = TypedBuf::<i64>::new(mem, 0..count)?;
                src.write_from(&mine)?;
                let mut dst = TypedBuf::<i64>::new(mem, region..region + count)?;
                d.allreduce(&src, &mut dst, ReduceOp::Sum).await?;
                let want: Vec<i64> = (0..count).map(|i| (0..size).map(|r| value(r, i, salt)).sum()).collect();
                check("allreduce", dst.read_vec(), want)
            }
            1 => {
                let mut src = TypedBuf::<i64>::new(mem, 0..count)?;
                src.write_from(&mine)?;
                let mut dst = TypedBuf::<i64>::new(mem, region..region + size * count)?;
                d.allgather(&src, &mut dst).await?;
                let want: Vec<i64> = (0..size).flat_map(|r| (0..count).map(move |i| value(r, i, salt))).collect();
                check("allgather", dst.read_vec(), want)
            }
            2 => {
                let root = (salt % size as u64) as usize;
                let mut buf = TypedBuf::<i64>::new(mem, 0..count)?;
                // Everyone else starts from other values: the root's must replace them.
                let start: Vec<i64> = (0..count).map(|i| value(rank + size, i, salt)).collect();
                buf.write_from(if rank == root { &mine } else { &start })?;
                d.broadcast(root, &mut buf).await?;
                check("broadcast", buf.read_vec(), (0..count).map(|i| value(root, i, salt)).collect())
            }
            _ => {
                d.barrier().await?;
                Ok(())
            }
        })
    }

    /// The end of the child's UROM work: the domain stopped (a lost member explains a
    /// failure), then every handle dropped.
    pub async fn finish(self, log: &Log) {
        match timeout(OP_LIMIT, self.domain.stop()).await {
            Err(_) => violation(log, "stopping the UROM domain hung".into()),
            Ok(Err(e)) if !explained(&e) => violation(log, format!("stopping the UROM domain failed: {e}")),
            Ok(_) => {}
        }
    }
}

fn check(what: &str, got: Vec<i64>, want: Vec<i64>) -> Result<(), String> {
    match got.iter().zip(&want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!("{what}: {} elements, {} expected", got.len(), want.len())),
        Some(i) => Err(format!("{what}: element {i} of {} is {}, {} expected", want.len(), got[i], want[i])),
    }
}

// ---- the controller's side: the daemon of a round ----

/// The soft UROM daemon of one round, on a socket that survives its restarts.
pub struct Daemon {
    child: Option<Child>,
    pub socket: PathBuf,
    out: PathBuf,
    starts: u32,
    /// Every worker pid seen (they must all be gone at the end).
    pub seen: Vec<u32>,
}

impl Daemon {
    /// Starts the daemon on `dir/urom.sock` and waits for it to listen.
    pub fn start(dir: &Path) -> Result<Daemon, String> {
        let mut d =
            Daemon { child: None, socket: dir.join("urom.sock"), out: dir.join("daemon"), starts: 0, seen: vec![] };
        d.spawn()?;
        Ok(d)
    }

    fn spawn(&mut self) -> Result<(), String> {
        // Its output goes to a file (a pipe would stay open in workers that outlive it).
        let out = self.out.with_extension(self.starts.to_string());
        self.starts += 1;
        let file = std::fs::File::create(&out).map_err(|e| e.to_string())?;
        let child = Command::new(super::common::cli::exe())
            .arg("urom-service")
            .arg("--socket")
            .arg(&self.socket)
            .args(["--builtin-samples", "--log-level", "warn"])
            .env_remove("UROM_PLUGIN_PATH")
            .stdin(Stdio::null())
            .stdout(file.try_clone().map_err(|e| e.to_string())?)
            .stderr(file)
            .spawn()
            .map_err(|e| format!("starting the UROM daemon: {e}"))?;
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(30);
        while !std::fs::read_to_string(&out).unwrap_or_default().contains("listening on") {
            if Instant::now() > until {
                return Err(format!("the UROM daemon did not listen within 30 s: {}", out.display()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The daemon's live workers (its child processes), remembered in `seen`.
    pub fn workers(&mut self) -> Vec<u32> {
        let Some(pid) = self.pid() else { return vec![] };
        let mut pids = Vec::new();
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
                pids.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
        pids.retain(|&p| alive(p));
        self.seen.extend(&pids);
        pids
    }

    /// A crash: SIGKILL, reaped; then a new daemon on the same socket after `down` (its
    /// workers die with their control connection).
    pub fn crash_and_restart(&mut self, down: Duration) -> Result<(), String> {
        self.workers();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        std::thread::sleep(down);
        self.spawn()
    }

    /// SIGKILL to one live worker, if there is one: its pid.
    pub fn kill_worker(&mut self, pick: u64) -> Option<u32> {
        let w = self.workers();
        let &pid = w.get(pick as usize % w.len().max(1))?;
        // SAFETY: kill(2) on a worker process of our own daemon, alive a moment ago.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        Some(pid)
    }

    /// The orderly end: SIGTERM, exit status 0 within 20 s, socket removed, every worker
    /// ever seen gone. What is wrong, if anything.
    pub fn stop(mut self) -> Vec<String> {
        let mut errs = Vec::new();
        self.workers();
        let Some(mut child) = self.child.take() else { return errs };
        // SAFETY: kill(2) on our own child, not reaped yet.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let until = Instant::now() + Duration::from_secs(20);
        loop {
            match child.try_wait() {
                Ok(Some(s)) if s.success() => break,
                Ok(Some(s)) => {
                    errs.push(format!("the UROM daemon exited with {s} on SIGTERM"));
                    break;
                }
                _ if Instant::now() > until => {
                    let _ = child.kill();
                    let _ = child.wait();
                    errs.push("the UROM daemon did not exit within 20 s of SIGTERM".into());
                    break;
                }
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        if self.socket.exists() {
            errs.push("the UROM daemon left its socket behind".into());
        }
        // Workers orphaned by a crashed daemon end on their own, promptly.
        let until = Instant::now() + Duration::from_secs(10);
        while self.seen.iter().any(|&p| alive(p)) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        for &p in self.seen.iter().filter(|&&p| alive(p)) {
            errs.push(format!("UROM worker {p} outlived its daemon"));
        }
        errs
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A failing round leaves nothing behind.
        self.workers();
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for &p in &self.seen {
            if alive(p) {
                // SAFETY: kill(2) on a pid that was our daemon's worker.
                unsafe { libc::kill(p as i32, libc::SIGKILL) };
            }
        }
    }
}

/// Alive and not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| !r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}
