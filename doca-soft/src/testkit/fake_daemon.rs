//! Test-only: a small in-process stand-in for the daemon, speaking the real protocol on a real
//! socket from its own thread, so the host ctxs are tested without forking anything. It offers
//! two plugins (`alpha` = 1, `beta` = 2) and cpus 0-3, spawns "workers" that are just the far
//! end of a socketpair, and answers commands according to their payload:
//!
//! | payload starts with | answer |
//! | --- | --- |
//! | `hold` | nothing (the command stays in flight) |
//! | `fail` | `Notify` with `DOCA_ERROR_IO_FAILED` and the payload reversed |
//! | `crash` | closes the data connection (the worker "died") |
//! | `exit` | `WorkerExited` for this worker on its control connection |
//! | anything else | `Notify` with success and the payload reversed |
//!
//! `Spawn` with gid 666 is refused with `DOCA_ERROR_FULL` ("no room"). `DomainCreate` with a
//! member whose id is 13 is refused with `DOCA_ERROR_NOT_PERMITTED`; others are installed under
//! their key (the create's `ctx`) and their member counts recorded. As in the real worker,
//! `DomainDestroy` must name an installed key (else `NOT_FOUND`); only successful ones count.

use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::types::*;
use crate::urom::proto::{self, HostToWorker, PluginAddr, PluginInfo, Reply, Request, WorkerToHost};

/// What the fake daemon saw (shared with the test).
#[derive(Default, Debug)]
pub(crate) struct Seen {
    pub hellos: usize,
    pub spawns: Vec<(u64, u32, u64, Vec<String>)>,
    pub stops: Vec<u64>,
    pub commands: usize,
    pub domain_creates: Vec<usize>,
    pub domain_destroys: usize,
}

/// Options.
#[derive(Clone, Copy)]
pub(crate) struct Opts {
    /// Answer `Hello` with `Error{AUTHENTICATION}`.
    pub refuse: bool,
    /// The daemon's max_msg_size.
    pub max_msg: u64,
    /// Answer `WorkersByGid` (false: leave the requests pending).
    pub answer_gid: bool,
    /// Offer no plugins at all.
    pub no_plugins: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts { refuse: false, max_msg: 1 << 16, answer_gid: true, no_plugins: false }
    }
}

pub(crate) struct FakeDaemon {
    pub path: PathBuf,
    pub seen: Arc<Mutex<Seen>>,
    /// While set, data connections are not read (the host's sends back up). Set it with
    /// [`FakeDaemon::stall`], which waits until the daemon's loop obeys it.
    stall: Arc<AtomicBool>,
    /// Loop iterations that built their poll set (after reading `stall`).
    rounds: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// A socket path unique to this process and call.
pub(crate) fn unique_path(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!("urom-{tag}-{}-{}.sock", std::process::id(), N.fetch_add(1, Ordering::Relaxed)))
}

fn listen(path: &PathBuf) -> OwnedFd {
    let _ = std::fs::remove_file(path);
    let fd = proto::seqpacket_socket(true).unwrap();
    let (addr, len) = proto::unix_addr(path).unwrap();
    // SAFETY: valid sockaddr_un of `len` bytes; live socket.
    assert_eq!(unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) }, 0);
    // SAFETY: live bound socket.
    assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), 64) }, 0);
    fd
}

struct Client {
    fd: OwnedFd,
    /// Workers spawned through this connection.
    workers: Vec<u64>,
}

struct Worker {
    gid: u32,
    /// Keys of the installed domains.
    domains: Vec<u64>,
    data: Option<OwnedFd>,
    /// The control client that spawned it.
    client: usize,
}

impl FakeDaemon {
    pub(crate) fn start(opts: Opts) -> FakeDaemon {
        let path = unique_path("fake");
        let lfd = listen(&path);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let stall = Arc::new(AtomicBool::new(false));
        let rounds = Arc::new(AtomicU64::new(0));
        let (s2, st2, sl2, r2) = (seen.clone(), stop.clone(), stall.clone(), rounds.clone());
        let thread = std::thread::spawn(move || run(lfd, opts, s2, st2, (sl2, r2)));
        FakeDaemon { path, seen, stall, rounds, stop, thread: Some(thread) }
    }

    /// Stops reading data connections, and returns only once the daemon's thread has
    /// stopped: the loop iteration that was running when the flag was set may have put the
    /// data connections in its poll set already (and would read a command that arrives while
    /// it waits there), so this waits until a whole iteration began after the flag was set.
    /// Iteration `r + 1` may have read the flag before it was set; iteration `r + 2` starts
    /// after `r + 1` counted itself, which is after the load of `r` below, which is after the
    /// store: it sees the flag, and so does every later one.
    pub(crate) fn stall(&self) {
        self.stall.store(true, Ordering::SeqCst);
        let r = self.rounds.load(Ordering::SeqCst);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.rounds.load(Ordering::SeqCst) < r + 2 {
            assert!(std::time::Instant::now() < deadline, "the fake daemon's loop stopped turning");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Reads data connections again (from the daemon's next iteration on).
    pub(crate) fn unstall(&self) {
        self.stall.store(false, Ordering::SeqCst);
    }

    /// Stops the daemon: every connection is closed (the host sees hang-ups).
    pub(crate) fn kill(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for FakeDaemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The record, also after a test panicked while holding it.
fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

fn send(fd: &OwnedFd, b: &[u8], pass: Option<&OwnedFd>) {
    // Like the real daemon and worker, never drop an answer because the host has not read the
    // previous ones yet: wait for room (the host progresses on its own thread), bounded so a
    // host that stopped reading cannot wedge the test. A closed socket loses the message.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match proto::send_msg(fd.as_fd(), b, pass.map(|p| p.as_fd())) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && std::time::Instant::now() < deadline => {
                let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd for the duration of the call.
                unsafe { libc::poll(&mut p, 1, 10) };
            }
            _ => return,
        }
    }
}

fn run(
    lfd: OwnedFd,
    opts: Opts,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    (stall, rounds): (Arc<AtomicBool>, Arc<AtomicU64>),
) {
    let mut clients: HashMap<usize, Client> = HashMap::new();
    let mut workers: HashMap<u64, Worker> = HashMap::new();
    let mut next_client = 0usize;
    let mut next_id = proto::WORKER_ID_FIRST;
    let mut buf = vec![0u8; proto::max_packet(opts.max_msg as usize) + (1 << 16)];
    while !stop.load(Ordering::Relaxed) {
        let mut pfds = vec![libc::pollfd { fd: lfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let ckeys: Vec<usize> = clients.keys().copied().collect();
        for k in &ckeys {
            pfds.push(libc::pollfd { fd: clients[k].fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        let wkeys: Vec<u64> = if stall.load(Ordering::SeqCst) {
            Vec::new()
        } else {
            workers.iter().filter(|(_, w)| w.data.is_some()).map(|(k, _)| *k).collect()
        };
        // Counted after the flag was read (see `FakeDaemon::stall`).
        rounds.fetch_add(1, Ordering::SeqCst);
        for k in &wkeys {
            pfds.push(libc::pollfd {
                fd: workers[k].data.as_ref().unwrap().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // SAFETY: `pfds` is a valid array of pollfds for the call.
        let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 10) };
        if n <= 0 {
            continue;
        }
        if pfds[0].revents != 0 {
            // SAFETY: accept on our listening socket; NULL address arguments are allowed.
            let c = unsafe {
                libc::accept4(lfd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC)
            };
            if c >= 0 {
                // SAFETY: fresh descriptor from accept4.
                let fd = unsafe { OwnedFd::from_raw_fd(c) };
                clients.insert(next_client, Client { fd, workers: Vec::new() });
                next_client += 1;
            }
        }
        for (i, k) in ckeys.iter().enumerate() {
            if pfds[1 + i].revents == 0 {
                continue;
            }
            let Ok((len, _)) = proto::recv_msg(clients[k].fd.as_fd(), &mut buf) else {
                clients.remove(k);
                continue;
            };
            if len == 0 {
                // Hang-up: detach its workers (their data connections close).
                let c = clients.remove(k).unwrap();
                for w in c.workers {
                    workers.remove(&w);
                }
                continue;
            }
            let Ok(req) = Request::decode(&buf[..len]) else {
                clients.remove(k);
                continue;
            };
            let fd = &clients[k].fd;
            match req {
                Request::Hello { req, .. } => {
                    lock(&seen).hellos += 1;
                    if opts.refuse {
                        let r = Reply::Error { req, status: DOCA_ERROR_AUTHENTICATION, reason: "not you".into() };
                        send(fd, &r.encode(), None);
                        clients.remove(k);
                        continue;
                    }
                    let mut cpus = [0u64; 16];
                    cpus[0] = 0xF;
                    let r = Reply::Welcome {
                        req,
                        proto: proto::PROTO_VERSION,
                        max_msg_size: opts.max_msg,
                        max_workers: 16,
                        cpuset: cpus,
                        plugins: if opts.no_plugins {
                            Vec::new()
                        } else {
                            vec![
                                PluginInfo { id: 1, version: 7, name: "alpha".into() },
                                PluginInfo { id: 2, version: 8, name: "beta".into() },
                            ]
                        },
                    };
                    send(fd, &r.encode(), None);
                }
                Request::Spawn { req, worker_id, gid, plugins, env, .. } => {
                    lock(&seen).spawns.push((worker_id, gid, plugins, env));
                    if gid == 666 {
                        let r = Reply::Error { req, status: DOCA_ERROR_FULL, reason: "no room".into() };
                        send(fd, &r.encode(), None);
                        continue;
                    }
                    let id = if worker_id == proto::WORKER_ID_ANY {
                        next_id += 1;
                        next_id - 1
                    } else {
                        worker_id
                    };
                    let (ours, theirs) = proto::seqpacket_pair(true).unwrap();
                    let r = Reply::Spawned {
                        req,
                        worker_id: id,
                        pid: 4242,
                        addrs: vec![PluginAddr { plugin: 1, addr: format!("addr-{id}").into_bytes() }],
                    };
                    send(fd, &r.encode(), Some(&theirs));
                    workers.insert(id, Worker { gid, domains: Vec::new(), data: Some(ours), client: *k });
                    clients.get_mut(k).unwrap().workers.push(id);
                }
                Request::Stop { req, worker_id } => {
                    lock(&seen).stops.push(worker_id);
                    workers.remove(&worker_id);
                    send(fd, &Reply::Stopped { req, worker_id }.encode(), None);
                }
                Request::WorkersByGid { req, gid } => {
                    if !opts.answer_gid {
                        continue;
                    }
                    let mut ids: Vec<u64> = workers.iter().filter(|(_, w)| w.gid == gid).map(|(k, _)| *k).collect();
                    ids.sort_unstable();
                    send(fd, &Reply::Workers { req, ids }.encode(), None);
                }
            }
        }
        let base = 1 + ckeys.len();
        for (i, id) in wkeys.iter().enumerate() {
            if pfds[base + i].revents == 0 {
                continue;
            }
            let Some(w) = workers.get_mut(id) else { continue };
            let Some(data) = w.data.as_ref() else { continue };
            let len = match proto::recv_msg(data.as_fd(), &mut buf) {
                Ok((0, _)) | Err(_) => {
                    w.data = None;
                    continue;
                }
                Ok((n, _)) => n,
            };
            let Ok(m) = HostToWorker::decode(&buf[..len]) else {
                w.data = None;
                continue;
            };
            match m {
                HostToWorker::Command { ctx, plugin, payload } => {
                    lock(&seen).commands += 1;
                    let reversed: Vec<u8> = payload.iter().rev().copied().collect();
                    let notify =
                        |status| WorkerToHost::Notify { ctx, plugin, status, packed: reversed.clone() }.encode();
                    if payload.starts_with(b"hold") {
                    } else if payload.starts_with(b"crash") {
                        w.data = None;
                    } else if payload.starts_with(b"exit") {
                        let r = Reply::WorkerExited {
                            worker_id: *id,
                            status: DOCA_ERROR_CONNECTION_ABORTED,
                            how: "killed by signal 9".into(),
                        };
                        if let Some(c) = clients.get(&w.client) {
                            send(&c.fd, &r.encode(), None);
                        }
                    } else if payload.starts_with(b"fail") {
                        send(data, &notify(DOCA_ERROR_IO_FAILED), None);
                    } else {
                        send(data, &notify(DOCA_SUCCESS), None);
                    }
                }
                HostToWorker::DomainCreate { ctx, domain } => {
                    lock(&seen).domain_creates.push(domain.members.len());
                    let status = if domain.members.iter().any(|m| m.worker_id == 13) {
                        DOCA_ERROR_NOT_PERMITTED
                    } else {
                        w.domains.push(ctx);
                        DOCA_SUCCESS
                    };
                    let r = WorkerToHost::Notify { ctx, plugin: proto::PLUGIN_NONE, status, packed: vec![] };
                    send(data, &r.encode(), None);
                }
                // A socket-only worker: the host's channel is never attached, so the host
                // keeps to the socket (what an older worker would do).
                HostToWorker::Channel { .. } => {}
                HostToWorker::DomainDestroy { ctx } => {
                    lock(&seen).domain_destroys += 1;
                    let r =
                        WorkerToHost::Notify { ctx, plugin: proto::PLUGIN_NONE, status: DOCA_SUCCESS, packed: vec![] };
                    send(data, &r.encode(), None);
                }
            }
        }
    }
}
