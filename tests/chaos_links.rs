//! Chaos on the links between programs: RDMA connection setup by address, remote-event
//! operations, DMA on memory another process exported, and Comch conversations — with the
//! processes at either end killed, frozen and pestered at random moments.
//!
//! `tests/chaos.rs` runs the RDMA data path and local sync events under faults; this file
//! covers what came with connection management, remote-net sync events, DMA and Comch. The
//! shape is the same: the controller (the test) starts copies of this test binary running
//! one ignored test each (`links_child`), draws a fault schedule from a seed, injects it,
//! and checks invariants from the children's logs (one `write(2)` per line: a SIGKILL tears
//! at most the last one) and dumps.
//!
//! # Scenarios (one per round, in turn)
//!
//! | scenario | processes | faults |
//! | --- | --- | --- |
//! | `cm` | a server listening by address (`Rdma::listen`), 3 clients connecting (`Rdma::connect`) at random moments, sending numbered messages, sometimes disconnecting mid-traffic | the server rejects 15 % of requests; SIGKILL of a client; SIGSTOP of the server or a client (mid-handshake or mid-traffic); garbage TCP connections on the port (nothing, random bytes, or a connect-and-hold); the server killed late in some rounds |
//! | `rev` | an owner exporting two sync events for remote-net and listening; 2 peers connecting and driving `get`/`set`/`add` on them | SIGKILL / SIGSTOP of the owner or a peer |
//! | `dma` | a host process exporting memory (`export_pci`, `DOCA_SOFT_ROLE=host`), a "DPU" process (`DOCA_SOFT_ROLE=dpu`) copying in and out with random sizes, depths and dropped futures | SIGKILL of the exporter mid-copy; SIGKILL of the DPU side; SIGSTOP of either |
//! | `comch` | a Comch server (`DOCA_SOFT_ROLE=dpu`) echoing, 2 clients connecting by name and sending numbered messages, reconnecting | SIGKILL / SIGSTOP of the server or a client, mid-message |
//!
//! # Invariants
//! * `cm`: a message whose send completed was received by the server exactly once (when the
//!   server survived), even when its client was killed or disconnected right after; no
//!   message arrives that was never sent; the private data of every accepted connection is
//!   the server's; a rejected or refused connect fails with `ConnectionLost`.
//! * `rev`: the add event's value lies between the completed and the started adds, and the
//!   old values completed adds returned are distinct (each counted once); every value read
//!   from the set event is 0 or a value some peer set; its final value too.
//! * `dma`: a completed copy in returned the host's bytes; a completed copy out is in the
//!   host's memory byte for byte; an unfinished one left each byte old or new; nothing
//!   outside the targets changed.
//! * `comch`: per connection, the server receives messages in order, none twice, none never
//!   sent, and every send that completed (the server survived); echoes arrive at the client
//!   in order, none twice.
//! * Everywhere: errors are the ones a fault explains (`ConnectionLost`, `NotFound` for a
//!   peer gone before we opened its export, `Cancelled`); every operation resolves within
//!   30 s and every process reports in time (no hang); after the round no child process,
//!   abstract socket, `/dev/shm` file, TCP listener or Comch name is left, and the
//!   controller's fd count is flat across rounds.
//!
//! Default mode: up to 8 rounds or about 75 s. `ASYNC_DOCA_LINKS_MINUTES=M` with the ignored
//! test `chaos_links_soak` (`scripts/soak.sh`) runs for M minutes. `ASYNC_DOCA_LINKS_SEED=S`
//! repeats a run's schedules. A failure prints the seed, the round's scenario and its fault
//! schedule, and keeps the logs.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_doca::comch::{Client, Server};
use async_doca::dma::Dma;
use async_doca::rdma::{Rdma, RemoteEvent};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::{sleep, timeout};
use async_doca::{spawn_local, Access, Device, Error, ErrorKind, Runtime};

mod common;
use common::chaoskit::{leaks, log_lines, Failures, Fault, Log, Rng, Round};
use common::{hex, unhex};

/// Environment of a child: "scenario role index seed dir op_ms".
const CHILD_ENV: &str = "ASYNC_DOCA_LINKS_CHILD";
/// Scenario parameters handed to a child (a port, blobs, a name).
const ARG_ENV: &str = "ASYNC_DOCA_LINKS_ARG";
/// Prefix of every line a child prints for the controller.
const TAG: &str = "LINKS ";
/// Bound on every operation (a hang shows as a violation, not as a stuck test).
const OP_LIMIT: Duration = Duration::from_secs(30);
const PRIVATE: &[u8] = b"chaos-links";

// ---- messages (cm and comch) ----

const HDR: usize = 24;
const MAGIC: u32 = 0x11C4_A05E;

fn checksum(b: &[u8]) -> u32 {
    b.iter().fold(0x811C_9DC5u32, |h, &x| (h ^ u32::from(x)).wrapping_mul(0x0100_0193))
}

/// `[magic][sender][seq u64][len][sum]` then a body derived from (sender, seq).
fn message(sender: u32, seq: u64, len: usize) -> Vec<u8> {
    let mut m = vec![0u8; len.max(HDR)];
    for (t, b) in m[HDR..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(7) ^ (t as u8).wrapping_mul(3) ^ (sender as u8);
    }
    let sum = checksum(&m[HDR..]);
    let n = m.len() as u32;
    m[0..4].copy_from_slice(&MAGIC.to_ne_bytes());
    m[4..8].copy_from_slice(&sender.to_ne_bytes());
    m[8..16].copy_from_slice(&seq.to_ne_bytes());
    m[16..20].copy_from_slice(&n.to_ne_bytes());
    m[20..24].copy_from_slice(&sum.to_ne_bytes());
    m
}

/// Verifies a received message: `Ok((sender, seq))` or what is wrong with it.
fn parse(m: &[u8]) -> Result<(u32, u64), String> {
    if m.len() < HDR {
        return Err(format!("message of {} bytes is shorter than its header", m.len()));
    }
    let u32_at = |i: usize| u32::from_ne_bytes(m[i..i + 4].try_into().unwrap());
    if u32_at(0) != MAGIC || u32_at(16) as usize != m.len() || checksum(&m[HDR..]) != u32_at(20) {
        return Err(format!("a corrupted message of {} bytes", m.len()));
    }
    Ok((u32_at(4), u64::from_ne_bytes(m[8..16].try_into().unwrap())))
}

// ---- the child side ----

struct Args {
    role: String,
    index: usize,
    seed: u64,
    dir: PathBuf,
    op_ms: u64,
    arg: String,
}

/// Becomes true when the controller says so on stdin (or closes it): a thread reads it, so
/// the executor never blocks on the pipe.
fn stdin_flag() -> Arc<AtomicBool> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = std::io::stdin().read_line(&mut l);
        f.store(true, Ordering::SeqCst);
    });
    flag
}

async fn until_flag(flag: &AtomicBool) {
    while !flag.load(Ordering::SeqCst) {
        sleep(Duration::from_millis(5)).await;
    }
}

/// Errors a fault explains.
fn explained(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::ConnectionLost | ErrorKind::Cancelled | ErrorKind::NotFound)
}

/// Awaits `f` within `OP_LIMIT`: a hang is a violation.
async fn bounded<T>(log: &Log, what: &str, f: impl std::future::Future<Output = T>) -> T {
    match timeout(OP_LIMIT, f).await {
        Ok(v) => v,
        Err(_) => log.violation(format!("{what} did not resolve within {OP_LIMIT:?}")),
    }
}

/// `Ok(v)`, `None` for an explained error (logged), a violation otherwise.
fn judged<T>(log: &Log, what: &str, r: Result<T, Error>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) if explained(&e) => {
            log.line(format!("ERR {what} {:?}", e.kind()));
            None
        }
        Err(e) => log.violation(format!("{what} failed unexpectedly: {e}")),
    }
}

fn say(s: impl AsRef<str>) {
    println!("{TAG}{}", s.as_ref());
}

fn runtime(i: usize) -> Runtime {
    Runtime::builder().cpus(format!("{}", i % 2).parse().unwrap()).build().unwrap()
}

/// The child entry: dispatches on the scenario and role.
#[test]
#[ignore = "a process of the chaos_links controller"]
fn links_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let f: Vec<&str> = spec.split(' ').collect();
    let a = Args {
        role: format!("{} {}", f[0], f[1]),
        index: f[2].parse().unwrap(),
        seed: f[3].parse().unwrap(),
        dir: PathBuf::from(f[4]),
        op_ms: f[5].parse().unwrap(),
        arg: std::env::var(ARG_ENV).unwrap_or_default(),
    };
    let log = Rc::new(Log::create(&a.dir.join(format!("log-{}", a.index))));
    let r = runtime(a.index).block_on({
        let log = log.clone();
        async move {
            match a.role.as_str() {
                "cm server" => cm_server(&a, &log).await,
                "cm client" => cm_client(&a, &log).await,
                "rev owner" => rev_owner(&a, &log).await,
                "rev peer" => rev_peer(&a, &log).await,
                "dma host" => dma_host(&a, &log).await,
                "dma dpu" => dma_dpu(&a, &log).await,
                "comch server" => comch_server(&a, &log).await,
                "comch client" => comch_client(&a, &log).await,
                other => panic!("unknown role {other}"),
            }
        }
    });
    if let Err(e) = r {
        log.violation(format!("setup failed: {e}"));
    }
    log.line("EXIT");
}

// ---- cm ----

/// Listens on a random free port, accepts (or rejects) every request, receives every
/// message on the context and logs it (`R sender seq`), until told to stop; then drains.
async fn cm_server(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let mut rng = Rng(a.seed);
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).max_connections(64).max_tasks(64).build().await?;
    let mut tries = 0;
    let listener = loop {
        let port = rng.range(20_000, 60_000) as u16;
        match rdma.listen(port) {
            Ok(l) => break l,
            Err(_) if tries < 50 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let stop = stdin_flag();
    say(format!("PORT {}", listener.port()));
    let seen: Rc<RefCell<HashSet<(u32, u64)>>> = Rc::default();
    let last = Rc::new(Cell::new(Instant::now()));
    let mut tasks = Vec::new();
    for _ in 0..rng.range(2, 6) {
        let (rdma, log, seen, last, dev) = (rdma.clone(), log.clone(), seen.clone(), last.clone(), dev.clone());
        tasks.push(spawn_local(async move {
            let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE).unwrap();
            let mut buf = mem.buf();
            loop {
                let (r, b) = rdma.recv(buf).await;
                buf = b;
                match r {
                    Ok(m) => {
                        let bytes = buf.to_vec();
                        let (s, q) = parse(&bytes[..m.len]).unwrap_or_else(|e| log.violation(e));
                        if !seen.borrow_mut().insert((s, q)) {
                            log.violation(format!("message {s}/{q} arrived twice"));
                        }
                        log.line(format!("R {s} {q}"));
                        last.set(Instant::now());
                    }
                    // A client that vanished may fail a receive: the next one goes on.
                    Err(e) if explained(&e) => log.line(format!("ERR recv {:?}", e.kind())),
                    Err(e) => log.violation(format!("receive failed unexpectedly: {e}")),
                }
            }
        }));
    }
    let conns = Rc::new(RefCell::new(Vec::new()));
    let acceptor = {
        let (log, conns) = (log.clone(), conns.clone());
        spawn_local(async move {
            loop {
                let req = listener.request().await.unwrap_or_else(|e| log.violation(format!("request: {e}")));
                if rng.chance(150) {
                    log.line("REJ");
                    req.reject().unwrap_or_else(|e| log.violation(format!("reject: {e}")));
                    continue;
                }
                let (log, conns) = (log.clone(), conns.clone());
                spawn_local(async move {
                    match bounded(&log, "accept", req.accept(PRIVATE)).await {
                        Ok(c) => {
                            log.line("ACC");
                            conns.borrow_mut().push(c);
                        }
                        Err(e) if e.kind() == ErrorKind::ConnectionLost => log.line(format!("ACCFAIL {e}")),
                        Err(e) => log.violation(format!("accept failed unexpectedly: {e}")),
                    }
                });
            }
        })
    };
    until_flag(&stop).await;
    // Every send that completed had its message land in a posted receive: drain them.
    while last.get().elapsed() < Duration::from_millis(500) {
        sleep(Duration::from_millis(20)).await;
    }
    drop(acceptor);
    drop(tasks);
    log.line(format!("END {}", conns.borrow().len()));
    say("DONE");
    Ok(())
}

/// Connects to the server at random moments (a fresh context each time), sends numbered
/// messages (`SS`/`SD seq`), sometimes disconnects mid-traffic, until its time is up.
async fn cm_client(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let mut rng = Rng(a.seed);
    let dev = Device::open_default()?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, a.arg.parse::<u16>().unwrap()));
    let deadline = Instant::now() + Duration::from_millis(a.op_ms);
    let me = a.index as u32;
    let mut seq = 0u64;
    let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;
    while Instant::now() < deadline {
        sleep(Duration::from_millis(rng.below(80))).await;
        let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).max_tasks(16).build().await?;
        log.line("CS");
        let Some(conn) = judged(log, "connect", bounded(log, "connect", rdma.connect(addr)).await) else {
            continue;
        };
        if conn.private_data() != PRIVATE {
            log.violation(format!("private data {:?}", conn.private_data()));
        }
        log.line("CD");
        let n = rng.range(1, 30);
        let cut = rng.chance(200).then(|| rng.below(n));
        for k in 0..n {
            if cut == Some(k) {
                conn.disconnect().unwrap_or_else(|e| log.violation(format!("disconnect: {e}")));
                log.line("DISC");
                // Operations after a disconnect fail, at once.
                let (r, _) = bounded(log, "send after disconnect", conn.send(mem.slice(0..HDR))).await;
                if r.is_ok() {
                    log.violation("a send after disconnect succeeded");
                }
                break;
            }
            let len = rng.range(HDR as u64, 2048) as usize;
            let mut b = mem.slice(0..len);
            b.write(0, &message(me, seq, len));
            log.line(format!("SS {seq}"));
            let (r, _) = bounded(log, "send", conn.send(b)).await;
            let done = judged(log, "send", r).is_some();
            if done {
                log.line(format!("SD {seq}"));
            }
            seq += 1;
            if !done {
                break;
            }
        }
    }
    say("DONE");
    Ok(())
}

// ---- rev ----

/// Exports two events for remote-net (one only added to, one only set) and accepts every
/// connection; at the end logs their values (`VAL add set`).
async fn rev_owner(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let mut rng = Rng(a.seed);
    let dev = Device::open_default()?;
    let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).max_connections(64).build().await?;
    let add = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
    let set = SyncEvent::builder(&dev).publisher(Location::RemoteNet).build().await?;
    let mut tries = 0;
    let listener = loop {
        match rdma.listen(rng.range(20_000, 60_000) as u16) {
            Ok(l) => break l,
            Err(_) if tries < 50 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let stop = stdin_flag();
    say(format!("PORT {} {} {}", listener.port(), hex(&add.export()?), hex(&set.export()?)));
    let conns = Rc::new(RefCell::new(Vec::new()));
    let acceptor = {
        let (log, conns) = (log.clone(), conns.clone());
        spawn_local(async move {
            loop {
                let req = listener.request().await.unwrap_or_else(|e| log.violation(format!("request: {e}")));
                if let Some(c) = judged(&log, "accept", bounded(&log, "accept", req.accept(&[])).await) {
                    conns.borrow_mut().push(c);
                }
            }
        })
    };
    until_flag(&stop).await;
    drop(acceptor);
    let (va, vs) = (add.get().await?, set.get().await?);
    log.line(format!("VAL {va} {vs}"));
    say("DONE");
    Ok(())
}

/// Connects to the owner and drives random get/set/add on its events until its time is up,
/// reconnecting after a failure.
async fn rev_peer(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let mut rng = Rng(a.seed);
    let dev = Device::open_default()?;
    let w: Vec<&str> = a.arg.split(' ').collect();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, w[0].parse::<u16>().unwrap()));
    let (blob_add, blob_set) = (unhex(w[1]), unhex(w[2]));
    let deadline = Instant::now() + Duration::from_millis(a.op_ms);
    let me = a.index as u64 + 1;
    let mut n = 0u64;
    'outer: while Instant::now() < deadline {
        sleep(Duration::from_millis(rng.below(50))).await;
        let rdma = Rdma::builder(&dev).permissions(Access::RDMA_ALL).max_tasks(8).build().await?;
        let Some(conn) = judged(log, "connect", bounded(log, "connect", rdma.connect(addr)).await) else {
            continue;
        };
        let evs = RemoteEvent::open(&dev, &blob_add).and_then(|x| Ok((x, RemoteEvent::open(&dev, &blob_set)?)));
        let Some((ev_add, ev_set)) = judged(log, "open", evs) else { continue };
        let (add, set) = (conn.remote_event(&ev_add), conn.remote_event(&ev_set));
        let mut scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
        while Instant::now() < deadline {
            // A future dropped mid-flight now and then (its outcome unknown, fresh scratch).
            let drop_after = rng.chance(40).then(|| Duration::from_micros(rng.below(2000)));
            let s = if drop_after.is_some() { dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf() } else { scratch };
            match rng.below(10) {
                0..=4 => {
                    log.line("AS");
                    let f = add.add(1, s);
                    let out = match drop_after {
                        Some(d) => match timeout(d, f).await {
                            Ok(v) => v,
                            Err(_) => {
                                scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
                                continue;
                            }
                        },
                        None => bounded(log, "add", f).await,
                    };
                    scratch = out.1;
                    match judged(log, "add", out.0) {
                        Some(old) => log.line(format!("AD {old}")),
                        None => continue 'outer,
                    }
                }
                5..=6 => {
                    n += 1;
                    let v = (me << 32) | n;
                    log.line(format!("TS {v}"));
                    let f = set.set(v, s);
                    let out = match drop_after {
                        Some(d) => match timeout(d, f).await {
                            Ok(v) => v,
                            Err(_) => {
                                scratch = dev.alloc(8, Access::LOCAL_READ_WRITE)?.buf();
                                continue;
                            }
                        },
                        None => bounded(log, "set", f).await,
                    };
                    scratch = out.1;
                    if judged(log, "set", out.0).is_none() {
                        continue 'outer;
                    }
                    log.line(format!("TD {v}"));
                }
                k => {
                    let (r, b) = bounded(log, "get", if k == 7 { add.get(s) } else { set.get(s) }).await;
                    scratch = b;
                    match judged(log, "get", r) {
                        Some(v) => log.line(format!("{} {v}", if k == 7 { "AG" } else { "TG" })),
                        None => continue 'outer,
                    }
                }
            }
        }
    }
    say("DONE");
    Ok(())
}

// ---- dma ----

/// The host's region: `[0, RD)` a pattern the DPU side reads, then `SLOTS` slots of `SLOT`
/// bytes the DPU side writes (one copy each), every other byte `FILL`.
const RD: usize = 1 << 16;
const SLOT: usize = 1024;
const SLOTS: usize = 8192;
const FILL: u8 = 0x5A;

fn rd_byte(t: usize) -> u8 {
    (t as u8).wrapping_mul(31) ^ ((t >> 8) as u8) ^ 0x77
}

fn slot_byte(k: usize, t: usize) -> u8 {
    (k as u8).wrapping_mul(101) ^ (t as u8).wrapping_mul(7) ^ ((t >> 8) as u8) ^ 0xC3
}

const HOST: Access = Access::from_bits(Access::LOCAL_READ_WRITE.bits() | Access::PCI_READ_WRITE.bits());

/// Exports its region over PCI and waits; at the end dumps it.
async fn dma_host(a: &Args, _log: &Rc<Log>) -> Result<(), Error> {
    let dev = Device::open_default()?;
    let mem = dev.alloc(RD + SLOTS * SLOT, HOST)?;
    let mut all = mem.buf();
    all.fill(FILL);
    all.write(0, &(0..RD).map(rd_byte).collect::<Vec<_>>());
    let stop = stdin_flag();
    say(format!("BLOB {}", hex(&mem.export_pci()?)));
    until_flag(&stop).await;
    std::fs::write(a.dir.join("dump"), mem.buf().to_vec()).unwrap();
    say("DONE");
    Ok(())
}

/// Copies from and to the host's memory with random sizes and depths until its time is up
/// or the host is gone.
async fn dma_dpu(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let mut rng = Rng(a.seed);
    let dev = Device::open_default()?;
    let host = Rc::new(dev.import(&unhex(&a.arg))?);
    let dma = Dma::builder(&dev).max_tasks([1, 2, 8, 32][rng.below(4) as usize]).build().await?;
    let deadline = Instant::now() + Duration::from_millis(a.op_ms);
    let next_slot = Rc::new(Cell::new(0usize));
    let gone = Rc::new(Cell::new(false));
    let mut workers = Vec::new();
    for w in 0..rng.range(1, 4) {
        let (dma, host, log, dev, next_slot, gone) =
            (dma.clone(), host.clone(), log.clone(), dev.clone(), next_slot.clone(), gone.clone());
        let mut rng = rng.fork(w);
        workers.push(spawn_local(async move {
            let mut ops = 0u64;
            while Instant::now() < deadline && !gone.get() {
                let drop_after = rng.chance(30).then(|| Duration::from_micros(rng.below(3000)));
                if rng.chance(500) {
                    let off = rng.below(RD as u64 - 1) as usize;
                    let len = rng.range(1, (RD - off).min(16_384) as u64) as usize;
                    let local = dev.alloc(len, Access::LOCAL_READ_WRITE).unwrap();
                    let f = dma.memcpy(host.slice(off..off + len), local.buf());
                    let r = match drop_after {
                        Some(d) => timeout(d, f).await.ok(),
                        None => Some(bounded(&log, "copy in", f).await),
                    };
                    if let Some((r, _, b)) = r {
                        if judged(&log, "copy in", r).is_none() {
                            gone.set(true);
                            break;
                        }
                        if b.to_vec() != (off..off + len).map(rd_byte).collect::<Vec<_>>() {
                            log.violation(format!("a copy in of {len} bytes at {off} returned other bytes"));
                        }
                        log.line("RD");
                    }
                } else {
                    let k = next_slot.get();
                    if k >= SLOTS {
                        break;
                    }
                    next_slot.set(k + 1);
                    let len = rng.range(1, SLOT as u64) as usize;
                    let local = dev.alloc(len, Access::LOCAL_READ_WRITE).unwrap();
                    let mut b = local.buf();
                    b.write(0, &(0..len).map(|t| slot_byte(k, t)).collect::<Vec<_>>());
                    let at = RD + k * SLOT;
                    log.line(format!("WS {k} {len}"));
                    let f = dma.memcpy(b, host.slice(at..at + len));
                    let r = match drop_after {
                        Some(d) => timeout(d, f).await.ok(),
                        None => Some(bounded(&log, "copy out", f).await),
                    };
                    if let Some((r, _, _)) = r {
                        if judged(&log, "copy out", r).is_none() {
                            gone.set(true);
                            break;
                        }
                        log.line(format!("WD {k}"));
                    }
                }
                ops += 1;
            }
            ops
        }));
    }
    let mut ops = 0;
    for w in workers {
        ops += w.await.unwrap_or_else(|e| log.violation(format!("a worker failed: {e}")));
    }
    // Once the exporter is gone, copies keep failing fast (and local ones keep working).
    if gone.get() {
        let local = dev.alloc(128, Access::LOCAL_READ_WRITE)?;
        let (r, _, _) = bounded(log, "copy after loss", dma.memcpy(host.slice(0..64), local.slice(0..64))).await;
        if r.is_ok() {
            log.violation("a copy from a dead exporter succeeded");
        }
        let (r, _, _) = bounded(log, "local copy", dma.memcpy(local.slice(0..64), local.slice(64..128))).await;
        r.unwrap_or_else(|e| log.violation(format!("a local copy after the loss failed: {e}")));
    }
    log.line(format!("OPS {ops}"));
    say("DONE");
    Ok(())
}

// ---- comch ----

/// Serves clients: every message is checked, logged (`R sender seq`) and echoed back, in
/// order per connection. At the end waits until every conversation ended.
async fn comch_server(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let dev = Device::open_default()?;
    let server = Server::builder(&dev, &a.arg).max_msg_size(4096).recv_queue_size(16).send_tasks(16).build().await?;
    let stop = stdin_flag();
    say("READY");
    let open = Rc::new(Cell::new(0u32));
    let acceptor = {
        let (log, open, server) = (log.clone(), open.clone(), server.clone());
        spawn_local(async move {
            loop {
                let Some(c) = judged(&log, "accept", server.accept().await) else { continue };
                open.set(open.get() + 1);
                let (log, open) = (log.clone(), open.clone());
                spawn_local(async move {
                    let mut last: HashMap<u32, u64> = HashMap::new();
                    while let Some(m) = c.recv().await {
                        let (s, q) = parse(&m).unwrap_or_else(|e| log.violation(e));
                        if last.get(&s).is_some_and(|&l| q <= l) {
                            log.violation(format!("message {s}/{q} after {s}/{}", last[&s]));
                        }
                        last.insert(s, q);
                        log.line(format!("R {s} {q}"));
                        // The echo: fails once the client is gone, which is fine.
                        if judged(&log, "echo", bounded(&log, "echo", c.send(m)).await).is_none() {
                            break;
                        }
                    }
                    // Drain what arrived before the end (the client's completed sends).
                    while let Some(m) = bounded(&log, "drain", c.recv()).await {
                        let (s, q) = parse(&m).unwrap_or_else(|e| log.violation(e));
                        log.line(format!("R {s} {q}"));
                    }
                    open.set(open.get() - 1);
                });
            }
        })
    };
    until_flag(&stop).await;
    // The clients are gone: every conversation ends (bounded).
    let until = Instant::now() + OP_LIMIT;
    while open.get() > 0 {
        if Instant::now() > until {
            log.violation(format!("{} conversations did not end", open.get()));
        }
        sleep(Duration::from_millis(10)).await;
    }
    drop(acceptor);
    say("DONE");
    Ok(())
}

/// Connects by name (retrying while the server is not there), sends numbered messages and
/// checks their echoes, reconnects now and then, until its time is up.
async fn comch_client(a: &Args, log: &Rc<Log>) -> Result<(), Error> {
    let mut rng = Rng(a.seed);
    let dev = Device::open_default()?;
    let deadline = Instant::now() + Duration::from_millis(a.op_ms);
    let mut conv = 0u32;
    while Instant::now() < deadline {
        let c = match bounded(log, "connect", Client::builder(&dev, &a.arg).max_msg_size(4096).connect()).await {
            Ok(c) => c,
            // A server not there (killed, not yet started) makes the connect time out.
            Err(e) => {
                log.line(format!("ERR connect {:?}", e.kind()));
                sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // Each conversation has its own sender id: (client, conversation).
        let me = (a.index as u32) << 16 | conv;
        conv += 1;
        log.line(format!("CONV {me}"));
        let echoes = {
            let (c, log) = (c.clone(), log.clone());
            spawn_local(async move {
                let mut last = None;
                while let Some(m) = c.recv().await {
                    let (s, q) = parse(&m).unwrap_or_else(|e| log.violation(e));
                    if s != me || last.is_some_and(|l| q <= l) {
                        log.violation(format!("echo {s}/{q} after {last:?} on conversation {me}"));
                    }
                    last = Some(q);
                    log.line(format!("E {s} {q}"));
                }
            })
        };
        let n = rng.range(1, 200);
        for seq in 0..n {
            if Instant::now() >= deadline {
                break;
            }
            let len = rng.range(HDR as u64, 4096) as usize;
            log.line(format!("SS {me} {seq}"));
            match judged(log, "send", bounded(log, "send", c.send(message(me, seq, len))).await) {
                Some(()) => log.line(format!("SD {me} {seq}")),
                None => break,
            }
        }
        // Hang up: the echo stream ends with the client.
        drop(c);
        drop(echoes);
    }
    say("DONE");
    Ok(())
}

// ---- the controller ----

#[derive(Default, Debug)]
struct Totals {
    rounds: u64,
    /// Lines the children logged: each operation started and each one completed, events.
    logged: u64,
    kills: u64,
    freezes: u64,
    garbage: u64,
    checks: u64,
}

const SCENARIOS: [&str; 4] = ["cm", "rev", "dma", "comch"];

fn child_env(scenario: &str, role: &str, i: usize, seed: u64, dir: &Path, op_ms: u64) -> (&'static str, String) {
    (CHILD_ENV, format!("{scenario} {role} {i} {seed} {} {op_ms}", dir.display()))
}

/// Lines of child `i`'s log split in words.
fn words(dir: &Path, i: usize) -> Vec<Vec<String>> {
    log_lines(&dir.join(format!("log-{i}"))).iter().map(|l| l.split(' ').map(str::to_string).collect()).collect()
}

fn violations(dir: &Path, n: usize) -> Vec<String> {
    (0..n)
        .flat_map(|i| log_lines(&dir.join(format!("log-{i}"))).into_iter().filter(|l| l.starts_with("VIOLATION")))
        .collect()
}

/// The end of every round: each surviving child `1..n` finishes its operations (a client
/// whose server died retries its connect for up to 10 s) and exits, then the surviving owner
/// (child 0) is told to exit; any `VIOLATION` a child logged fails the round.
fn wind_down(r: &mut Round, dir: &Path, n: usize, op_ms: u64) -> Result<(), String> {
    for i in 1..n {
        if !r.killed(i) {
            r.expect(i, "DONE", Duration::from_millis(op_ms) + Duration::from_secs(90))?;
        }
        r.wait_exit(i, Duration::from_secs(30))?;
    }
    if !r.killed(0) {
        r.tell(0, "EXIT");
        r.expect(0, "DONE", Duration::from_secs(60))?;
        r.wait_exit(0, Duration::from_secs(30))?;
    }
    let v = violations(dir, n);
    if v.is_empty() {
        Ok(())
    } else {
        Err(format!("{v:?}"))
    }
}

/// Pesters a TCP port: connects and writes `bytes` random bytes (0: nothing), or holds the
/// connection a while, then closes. Errors are fine (the port may be gone).
fn garbage(port: u16, bytes: u64, rng: &mut Rng) {
    let Ok(mut s) = TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), Duration::from_secs(1))
    else {
        return;
    };
    use std::io::Write;
    let junk: Vec<u8> = (0..bytes).map(|_| rng.next() as u8).collect();
    let _ = s.write_all(&junk);
    if rng.chance(300) {
        std::thread::sleep(Duration::from_millis(rng.range(10, 300)));
    }
}

/// Runs the schedule from `start`, passing garbage faults to `port`.
fn run_schedule(r: &mut Round, schedule: &[(u64, Fault)], port: Option<u16>, rng: &mut Rng, t: &mut Totals) {
    let start = Instant::now();
    for &(at, f) in schedule {
        std::thread::sleep((start + Duration::from_millis(at)).saturating_duration_since(Instant::now()));
        match f {
            Fault::Garbage(b) => {
                if let Some(p) = port {
                    garbage(p, b, rng);
                    r.schedule.push(format!("garbage {b}B@{at}ms"));
                    t.garbage += 1;
                }
            }
            Fault::Kill(v) if !r.killed(v) => {
                r.inject(f, at);
                t.kills += 1;
            }
            Fault::Freeze(v, _) if !r.killed(v) => {
                r.inject(f, at);
                t.freezes += 1;
            }
            _ => {}
        }
    }
}

/// Draws kills and freezes over processes `0..n` in `op_ms`: `kill_odds` per mille per
/// process that may die (`killable`).
fn draw(rng: &mut Rng, n: usize, op_ms: u64, killable: &[usize], kill_odds: u64) -> Vec<(u64, Fault)> {
    let mut s = Vec::new();
    for &v in killable {
        if rng.chance(kill_odds) {
            s.push((rng.range(op_ms / 10, op_ms * 8 / 10), Fault::Kill(v)));
        }
    }
    for _ in 0..rng.range(1, 4) {
        s.push((rng.range(0, op_ms * 8 / 10), Fault::Freeze(rng.below(n as u64) as usize, rng.range(5, 300))));
    }
    s
}

/// One round of `scenario`; `Err` describes what failed.
fn round(scenario: &str, seed: u64, index: u64, t: &mut Totals) -> Result<(), String> {
    let mut rng = Rng(seed);
    let op_ms = rng.range(1200, 3000);
    let dir = std::env::temp_dir().join(format!("async-doca-links-{}-{index}", std::process::id()));
    let mut r = Round::new(dir.clone(), TAG);
    let mut port = None;
    let mut names = Vec::new();
    let res = (|| -> Result<(), String> {
        match scenario {
            "cm" => {
                let s = r.spawn("links_child", &[child_env("cm", "server", 0, rng.next(), &dir, op_ms)]);
                let p: u16 = r.expect(s, "PORT ", Duration::from_secs(60))?.parse().unwrap();
                port = Some(p);
                for i in 1..=3 {
                    r.spawn(
                        "links_child",
                        &[child_env("cm", "client", i, rng.next(), &dir, op_ms), (ARG_ENV, p.to_string())],
                    );
                }
                let mut sched = draw(&mut rng, 4, op_ms, &[1, 2, 3, 0], 250);
                for _ in 0..rng.range(1, 6) {
                    sched.push((
                        rng.range(0, op_ms * 8 / 10),
                        Fault::Garbage([0, 1, 7, 64, 4096][rng.below(5) as usize]),
                    ));
                }
                // The server dies late only (it is what the invariants are checked against).
                sched.retain(|(at, f)| !matches!(f, Fault::Kill(0)) || *at > op_ms / 2);
                sched.sort_by_key(|f| f.0);
                run_schedule(&mut r, &sched, port, &mut rng, t);
                wind_down(&mut r, &dir, 4, op_ms)?;
                check_cm(&dir, r.killed(0), t)
            }
            "rev" => {
                let o = r.spawn("links_child", &[child_env("rev", "owner", 0, rng.next(), &dir, op_ms)]);
                let arg = r.expect(o, "PORT ", Duration::from_secs(60))?;
                for i in 1..=2 {
                    r.spawn(
                        "links_child",
                        &[child_env("rev", "peer", i, rng.next(), &dir, op_ms), (ARG_ENV, arg.clone())],
                    );
                }
                let mut sched = draw(&mut rng, 3, op_ms, &[0, 1, 2], 200);
                sched.sort_by_key(|f| f.0);
                run_schedule(&mut r, &sched, None, &mut rng, t);
                wind_down(&mut r, &dir, 3, op_ms)?;
                check_rev(&dir, r.killed(0), t)
            }
            "dma" => {
                let h = r.spawn(
                    "links_child",
                    &[child_env("dma", "host", 0, rng.next(), &dir, op_ms), ("DOCA_SOFT_ROLE", "host".into())],
                );
                let blob = r.expect(h, "BLOB ", Duration::from_secs(60))?;
                r.spawn(
                    "links_child",
                    &[
                        child_env("dma", "dpu", 1, rng.next(), &dir, op_ms),
                        (ARG_ENV, blob),
                        ("DOCA_SOFT_ROLE", "dpu".into()),
                    ],
                );
                let mut sched = draw(&mut rng, 2, op_ms, &[0, 1], 300);
                // Both dead teaches nothing: keep the host if the DPU side dies.
                if sched.iter().any(|f| matches!(f.1, Fault::Kill(1))) {
                    sched.retain(|f| !matches!(f.1, Fault::Kill(0)));
                }
                sched.sort_by_key(|f| f.0);
                run_schedule(&mut r, &sched, None, &mut rng, t);
                wind_down(&mut r, &dir, 2, op_ms)?;
                check_dma(&dir, r.killed(0), t)
            }
            _ => {
                let name = format!("links-{}-{index}", std::process::id());
                names.push(name.clone());
                let s = r.spawn(
                    "links_child",
                    &[
                        child_env("comch", "server", 0, rng.next(), &dir, op_ms),
                        (ARG_ENV, name.clone()),
                        ("DOCA_SOFT_ROLE", "dpu".into()),
                    ],
                );
                r.expect(s, "READY", Duration::from_secs(60))?;
                for i in 1..=2 {
                    // A client whose server was killed retries its connect for the window
                    // (60 s by default, past the samples' 30 s); 10 s keeps the round within
                    // OP_LIMIT.
                    r.spawn(
                        "links_child",
                        &[
                            child_env("comch", "client", i, rng.next(), &dir, op_ms),
                            (ARG_ENV, name.clone()),
                            ("DOCA_SOFT_COMCH_CONNECT_TIMEOUT_MS", "10000".into()),
                        ],
                    );
                }
                let mut sched = draw(&mut rng, 3, op_ms, &[1, 2, 0], 250);
                sched.retain(|(at, f)| !matches!(f, Fault::Kill(0)) || *at > op_ms / 2);
                sched.sort_by_key(|f| f.0);
                run_schedule(&mut r, &sched, None, &mut rng, t);
                wind_down(&mut r, &dir, 3, op_ms)?;
                check_comch(&dir, r.killed(0), t)
            }
        }
    })();
    let pids = r.pids();
    let schedule = r.schedule.join(", ");
    let logged: u64 = (0..pids.len()).map(|i| log_lines(&dir.join(format!("log-{i}"))).len() as u64).sum();
    r.finish();
    drop(r);
    let mut errs = Vec::new();
    if let Err(e) = res {
        errs.push(e);
    }
    errs.extend(leaks(&pids, &names, port));
    if !errs.is_empty() {
        return Err(format!(
            "round {index} ({scenario}, seed {seed}, {op_ms} ms), faults: [{schedule}]:\n  {}\nlogs kept in {}",
            errs.join("\n  "),
            dir.display()
        ));
    }
    t.logged += logged;
    t.rounds += 1;
    if std::env::var_os("ASYNC_DOCA_LINKS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// `cm`: every completed send was received once (the server survived), nothing received
/// that was never sent.
fn check_cm(dir: &Path, server_killed: bool, t: &mut Totals) -> Result<(), String> {
    let mut received: HashSet<(u32, u64)> = HashSet::new();
    for w in words(dir, 0) {
        if w[0] == "R" {
            received.insert((w[1].parse().unwrap(), w[2].parse().unwrap()));
        }
    }
    let mut errs = Vec::new();
    let mut started: HashSet<(u32, u64)> = HashSet::new();
    // Connections: every one a client saw established was accepted by the server, and the
    // server accepted none that no client attempted.
    let accepted = words(dir, 0).iter().filter(|w| w[0] == "ACC").count();
    let (mut attempted, mut established) = (0, 0);
    for c in 1..=3u32 {
        for w in words(dir, c as usize) {
            match w[0].as_str() {
                "CS" => attempted += 1,
                "CD" => established += 1,
                "SS" => {
                    started.insert((c, w[1].parse().unwrap()));
                }
                "SD" if !server_killed => {
                    let k = (c, w[1].parse().unwrap());
                    t.checks += 1;
                    if !received.contains(&k) {
                        errs.push(format!("client {c}'s completed send {} never arrived", k.1));
                    }
                }
                _ => {}
            }
        }
    }
    for k in &received {
        t.checks += 1;
        if !started.contains(k) {
            errs.push(format!("message {}/{} arrived but was never sent", k.0, k.1));
        }
    }
    if !server_killed && (established > accepted || accepted > attempted) {
        errs.push(format!("{attempted} connects, {established} established, {accepted} accepted"));
    }
    t.checks += 1;
    errs.truncate(10);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// `rev`: adds counted once, set values only ever ones that were set.
fn check_rev(dir: &Path, owner_killed: bool, t: &mut Totals) -> Result<(), String> {
    let (mut started, mut olds, mut set_started, mut reads) = (0u64, Vec::new(), HashSet::from([0u64]), Vec::new());
    let mut last_done_set = false;
    for p in 1..=2 {
        for w in words(dir, p) {
            match w[0].as_str() {
                "AS" => started += 1,
                "AD" => olds.push(w[1].parse::<u64>().unwrap()),
                "TS" => {
                    set_started.insert(w[1].parse::<u64>().unwrap());
                }
                "TD" => last_done_set = true,
                "TG" => reads.push(w[1].parse::<u64>().unwrap()),
                _ => {}
            }
        }
    }
    let mut errs = Vec::new();
    let distinct: HashSet<u64> = olds.iter().copied().collect();
    if distinct.len() != olds.len() {
        errs.push(format!("{} completed adds returned only {} distinct old values", olds.len(), distinct.len()));
    }
    for v in &reads {
        if !set_started.contains(v) {
            errs.push(format!("the set event read {v:#x}, a value nobody set"));
        }
    }
    t.checks += 1 + olds.len() as u64 + reads.len() as u64;
    if !owner_killed {
        let val = words(dir, 0).into_iter().find(|w| w[0] == "VAL").ok_or("the owner logged no values")?;
        let (va, vs): (u64, u64) = (val[1].parse().unwrap(), val[2].parse().unwrap());
        if va < olds.len() as u64 || va > started {
            errs.push(format!("the add event is {va}: {} adds completed, {started} started", olds.len()));
        }
        if olds.iter().any(|&o| o >= va) {
            errs.push(format!("an add returned an old value at or above the final {va}"));
        }
        if !set_started.contains(&vs) || (last_done_set && vs == 0) {
            errs.push(format!("the set event ended at {vs:#x}"));
        }
        t.checks += 3;
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// `dma`: the host's memory holds what the completed copies wrote, nothing else changed.
fn check_dma(dir: &Path, host_killed: bool, t: &mut Totals) -> Result<(), String> {
    if host_killed {
        // The DPU side checked its reads at once and that copies fail after the loss.
        return Ok(());
    }
    let dump = std::fs::read(dir.join("dump")).map_err(|e| format!("no host dump: {e}"))?;
    let (mut len, mut done) = (HashMap::new(), HashSet::new());
    for w in words(dir, 1) {
        match w[0].as_str() {
            "WS" => {
                len.insert(w[1].parse::<usize>().unwrap(), w[2].parse::<usize>().unwrap());
            }
            "WD" => {
                done.insert(w[1].parse::<usize>().unwrap());
            }
            _ => {}
        }
    }
    let mut errs = Vec::new();
    if (0..RD).any(|t| dump[t] != rd_byte(t)) {
        errs.push("the read-only area changed".to_string());
    }
    for k in 0..SLOTS {
        let s = &dump[RD + k * SLOT..RD + (k + 1) * SLOT];
        let n = len.get(&k).copied().unwrap_or(0);
        let ok = if done.contains(&k) {
            (0..n).all(|t| s[t] == slot_byte(k, t))
        } else {
            (0..n).all(|t| s[t] == slot_byte(k, t) || s[t] == FILL)
        } && s[n..].iter().all(|&b| b == FILL);
        if !ok {
            errs.push(format!("slot {k} (copy of {n} bytes, completed: {})", done.contains(&k)));
        }
    }
    t.checks += 1 + SLOTS as u64;
    errs.truncate(10);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// `comch`: completed sends received once each and in order (server alive); echoes only of
/// what was sent.
fn check_comch(dir: &Path, server_killed: bool, t: &mut Totals) -> Result<(), String> {
    let mut received: HashSet<(u32, u64)> = HashSet::new();
    for w in words(dir, 0) {
        if w[0] == "R" {
            let k = (w[1].parse().unwrap(), w[2].parse().unwrap());
            if !received.insert(k) {
                return Err(format!("message {}/{} received twice", k.0, k.1));
            }
        }
    }
    let mut errs = Vec::new();
    let mut started = HashSet::new();
    for c in 1..=2 {
        for w in words(dir, c) {
            let k = || (w[1].parse::<u32>().unwrap(), w[2].parse::<u64>().unwrap());
            match w[0].as_str() {
                "SS" => {
                    started.insert(k());
                }
                "SD" if !server_killed => {
                    t.checks += 1;
                    if !received.contains(&k()) {
                        errs.push(format!("completed send {:?} never arrived", k()));
                    }
                }
                "E" => {
                    t.checks += 1;
                    if !started.contains(&k()) {
                        errs.push(format!("echo {:?} of a message never sent", k()));
                    }
                }
                _ => {}
            }
        }
    }
    for k in &received {
        t.checks += 1;
        if !started.contains(k) {
            errs.push(format!("message {k:?} arrived but was never sent"));
        }
    }
    errs.truncate(10);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs.join("; "))
    }
}

/// Rounds through the scenarios until `budget` is spent (at least one of each). Failures
/// panic at once, or (`keep_going`, the soak) are printed, counted and fail the run at its
/// end.
fn run(budget: Duration, max_rounds: u64, keep_going: bool) -> Totals {
    let seed = std::env::var("ASYNC_DOCA_LINKS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    eprintln!("chaos_links: seed {seed} (ASYNC_DOCA_LINKS_SEED={seed} repeats it)");
    let mut rng = Rng(seed);
    let mut t = Totals::default();
    let mut failures = Failures::new(keep_going);
    let started = Instant::now();
    let mut index = 0u64;
    while index < SCENARIOS.len() as u64 || (started.elapsed() < budget && index < max_rounds) {
        let scenario = SCENARIOS[(index % SCENARIOS.len() as u64) as usize];
        let round_seed = rng.next();
        if let Err(e) = round(scenario, round_seed, index, &mut t) {
            failures.fail(format!("chaos_links failed (run seed {seed}, round seed {round_seed}): {e}"));
        }
        failures.check_fds(index, seed);
        index += 1;
        eprintln!(
            "chaos_links: after round {index} ({scenario}, {:?}): {t:?}, {} failed",
            started.elapsed(),
            failures.list.len()
        );
    }
    let failures = failures.list;
    assert!(failures.is_empty(), "{} of {index} rounds failed:\n{}", failures.len(), failures.join("\n"));
    t
}

/// The default mode: each scenario at least once, up to 8 rounds or about 75 s (CI).
#[test]
fn chaos_links() {
    let t = run(Duration::from_secs(75), 8, false);
    assert!(t.rounds >= SCENARIOS.len() as u64 && t.checks > 0);
}

/// The long mode: `ASYNC_DOCA_LINKS_MINUTES=M cargo test --release --test chaos_links --
/// --ignored chaos_links_soak` (or `scripts/soak.sh M`).
#[test]
#[ignore = "the soak: run with ASYNC_DOCA_LINKS_MINUTES (scripts/soak.sh)"]
fn chaos_links_soak() {
    let minutes: u64 = std::env::var("ASYNC_DOCA_LINKS_MINUTES").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let t = run(Duration::from_secs(minutes * 60), u64::MAX, true);
    println!("chaos_links soak: {minutes} minutes: {t:?}");
}
