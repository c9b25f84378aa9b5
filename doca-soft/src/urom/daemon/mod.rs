//! The soft UROM service daemon (`async-doca urom-service`), docs/urom-soft.md "The daemon".
//!
//! Model. One thread runs a `poll` loop over: a self-pipe its signal handlers write to
//! (SIGTERM/SIGINT stop the daemon, SIGCHLD means a worker may have died), the listening
//! socket, every client (host control) connection and every worker's control socket. Nothing
//! blocks except `poll`: every socket is non-blocking, a client that does not read its replies
//! is dropped, a worker that does not read its control socket is killed.
//!
//! Ownership. The daemon owns its clients, its workers (pid + control socket + attachments)
//! and the loaded plugins. A worker is attached to one or more client connections (the spawn
//! and every reconnect); it lives while at least one attachment remains. The last detach
//! (`Stop`, or the client connection closing) sends `Exit` and gives the worker one second
//! before `SIGKILL`; every worker is reaped with `waitpid`. A worker that dies on its own is
//! reported to every attached client as `WorkerExited` once reaped.
//!
//! Shutdown (signal, or dropping a [`Daemon`]): `Exit` to every worker, close every client,
//! wait up to a second, `SIGKILL` the rest, reap, unlink the socket if it is still ours.
//!
//! The worker table ([`Workers`], `worker_table.rs`) is kept apart from the client protocol so
//! another front end (a future `drom` module) can register and look up workers the same way.
//! The signal self-pipe is `signals.rs`; the rest of the files: `auth.rs` (who may connect),
//! `plugins.rs` (the plugin directory), `spawn.rs` (forking a worker), `worker.rs` (the worker
//! process itself), `log.rs` (the daemon's log).

mod auth;
mod cpus;
mod log;
mod plugins;
mod signals;
mod spawn;
#[cfg(test)]
mod tests;
mod worker;
mod worker_table;

use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use self::cpus::{format_cpu_list, parse_cpu_list, MAX_ARM_CPUS};
pub use self::log::{LogLevel, LogSink};
pub use self::plugins::{parse_plugin_path, plugin_name, Builtin, Plugin, Plugins, MAX_PLUGINS, PLUGIN_NAME_MAX};
pub use self::spawn::current_affinity;
pub use crate::urom::proto::default_socket_path;

use self::auth::Access;
use self::cpus::ServiceCpus;
use self::log::{log_at, Log};
use self::plugins::err_name;
use self::signals::Signals;
use self::spawn::{fork_worker, SpawnArgs};
use self::worker_table::{Attachment, WState};
pub use self::worker_table::{WorkerEntry, Workers};
use crate::types::*;
use crate::urom::proto::{
    self, cpuset_is_empty, cpuset_is_subset, max_packet, CpuSet, DaemonToWorker, PeerCred, Reply, Request,
    WorkerToDaemon, PROTO_VERSION, WORKER_ID_ANY,
};

/// How long a worker told to exit (or whose control socket hung up) has before `SIGKILL`.
pub const EXIT_GRACE: Duration = Duration::from_secs(1);
/// How long accepting pauses after `accept` fails for lack of descriptors or memory.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Client connections beyond this are refused with `DOCA_ERROR_FULL`.
pub const MAX_CLIENTS: usize = 1024;

/// The daemon's settings (the `urom-service` command line).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen.
    pub socket: PathBuf,
    /// Directories scanned for plugins, first wins.
    pub plugin_path: Vec<PathBuf>,
    /// The CPUs workers may use; `None` is the daemon's affinity. Must be inside it.
    pub cpus: Option<CpuSet>,
    /// Offer this many logical CPUs, `0..N`, as a DPU's Arm cores, backed by [`cpus`]
    /// (see `cpus.rs`); `None`: offer the real CPUs themselves.
    ///
    /// [`cpus`]: Config::cpus
    pub arm_cpus: Option<u32>,
    /// Workers alive at once.
    pub max_workers: u32,
    /// The largest command payload / notification; hosts may ask for less.
    pub max_msg_size: usize,
    /// When not empty, exactly the uids allowed to connect; else only the daemon's own.
    pub allow_uids: Vec<u32>,
    pub log_level: LogLevel,
    /// Where log lines go instead of stderr (see [`LogSink`]); `None`: stderr.
    pub log_sink: Option<LogSink>,
    /// Plugins compiled into this program, offered besides those of `plugin_path`.
    pub builtins: Vec<Builtin>,
    /// Told when workers start and exit, and asked to apply CPU changes (the `async-doca`
    /// command line registers workers in its DROM registry with it). `None`: no one.
    pub worker_cpus: Option<std::sync::Arc<dyn WorkerCpus>>,
}

/// Follows the CPUs of the daemon's workers from outside the daemon: the `async-doca`
/// command line implements it with its DROM registry, so that `async-doca taskset` lists the
/// workers and moves them. Every method runs on the daemon's only thread, between two turns
/// of its loop: it must not block, and must not start threads (the daemon forks).
pub trait WorkerCpus: Send + Sync + std::fmt::Debug {
    /// A worker process started, pinned to `cpus` (inside the service's CPUs).
    fn started(&self, worker_pid: libc::pid_t, cpus: &CpuSet);
    /// A worker process exited and was reaped.
    fn exited(&self, worker_pid: libc::pid_t);
    /// Applies the CPU changes asked for since the last call; `service` is the set of CPUs
    /// workers may use (a worker must never be moved outside it).
    fn poll(&self, service: &CpuSet);
    /// The longest the daemon may go without calling [`poll`](WorkerCpus::poll) while it
    /// has workers.
    fn interval(&self) -> Duration;
}

impl Config {
    /// Defaults of docs/urom-soft.md: 64 workers, 4096-byte messages, plugins from
    /// `UROM_PLUGIN_PATH`, the daemon's own affinity and uid, level info.
    pub fn new(socket: PathBuf) -> Self {
        Config {
            socket,
            plugin_path: std::env::var("UROM_PLUGIN_PATH").map(|p| parse_plugin_path(&p)).unwrap_or_default(),
            cpus: None,
            arm_cpus: None,
            max_workers: 64,
            max_msg_size: DOCA_UROM_DEFAULT_MAX_MSG_SIZE,
            allow_uids: Vec::new(),
            log_level: LogLevel::Info,
            log_sink: None,
            builtins: Vec::new(),
            worker_cpus: None,
        }
    }
}

/// `doca_urom_service_set_max_comm_msg_size`'s default.
pub const DOCA_UROM_DEFAULT_MAX_MSG_SIZE: usize = 4096;

/// Runs the daemon in the foreground: binds, prints `listening on PATH` on stdout (flushed, so
/// scripts can wait for it), serves until SIGTERM/SIGINT, cleans up. Blocking.
pub fn run(config: Config) -> Result<(), String> {
    let daemon = Daemon::bind(config)?;
    // The handlers are in place before the line is printed: a script that sends SIGTERM as
    // soon as it reads it must stop the daemon cleanly, not kill it with the default action.
    let signals = Signals::install()?;
    {
        let mut out = io::stdout().lock();
        writeln!(out, "listening on {}", daemon.socket().display()).map_err(|e| format!("stdout: {e}"))?;
        out.flush().map_err(|e| format!("stdout: {e}"))?;
    }
    daemon.serve_with(signals)
}

// ----------------------------------------------------------------------------------------------
// The daemon

struct Client {
    id: u64,
    fd: OwnedFd,
    cred: PeerCred,
    /// After `Hello`: the host's pid, max_workers and the effective max_msg_size.
    hello: Option<(u32, u32, usize)>,
    dead: bool,
}

/// A bound daemon, ready to [`serve`](Daemon::serve).
pub struct Daemon {
    cfg: Config,
    log: Log,
    access: Access,
    cpus: ServiceCpus,
    plugins: Plugins,
    listener: Option<OwnedFd>,
    /// dev/ino of the socket file we created, so we never unlink someone else's.
    socket_id: (u64, u64),
    clients: Vec<Client>,
    next_client: u64,
    workers: Workers,
    /// Set after accept failed for lack of resources: the listener is not polled until then.
    accept_paused: Option<Instant>,
    pid: libc::pid_t,
    recv_buf: Vec<u8>,
}

fn bind_listener(path: &Path, world: bool, log: &Log) -> Result<(OwnedFd, (u64, u64)), String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            return Err(format!("{} exists and is not a socket", path.display()));
        }
        Ok(_) => match proto::connect(path, false) {
            Ok(_) => return Err(format!("another UROM service is listening on {}", path.display())),
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
                log_at!(log, Info, "replacing stale socket {}", path.display());
                std::fs::remove_file(path).map_err(|e| format!("removing stale {}: {e}", path.display()))?;
            }
            Err(e) => return Err(format!("probing {}: {e}", path.display())),
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("{}: {e}", path.display())),
    }
    let fd = proto::seqpacket_socket(true).map_err(|e| format!("socket: {e}"))?;
    let (addr, len) = proto::unix_addr(path).map_err(|e| e.to_string())?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    if unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) } != 0 {
        return Err(format!("bind {}: {}", path.display(), io::Error::last_os_error()));
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let id = (meta.dev(), meta.ino());
    // Access is decided by SO_PEERCRED; the mode only has to let the allowed uids connect.
    let mode = if world { 0o666 } else { 0o600 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    // SAFETY: listen on a bound socket we own.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        let e = io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(format!("listen {}: {e}", path.display()));
    }
    Ok((fd, id))
}

impl Daemon {
    /// Checks the configuration, loads the plugins and binds the socket (replacing a stale
    /// one). The daemon does not accept connections until [`serve`](Daemon::serve).
    pub fn bind(cfg: Config) -> Result<Daemon, String> {
        let log = Log { level: cfg.log_level, worker: None, sink: cfg.log_sink };
        if cfg.max_msg_size == 0 || cfg.max_msg_size > (64 << 20) {
            return Err(format!("max message size {} out of range (1 byte to 64 MiB)", cfg.max_msg_size));
        }
        let own = current_affinity().map_err(|e| format!("sched_getaffinity: {e}"))?;
        let cpuset = match cfg.cpus {
            Some(c) if cpuset_is_empty(&c) => return Err("empty CPU set".into()),
            Some(c) if !cpuset_is_subset(&c, &own) => {
                return Err(format!(
                    "CPUs {} are not all inside this process's affinity {}",
                    format_cpu_list(&c),
                    format_cpu_list(&own)
                ))
            }
            Some(c) => c,
            None => own,
        };
        let cpus = ServiceCpus::new(cpuset, cfg.arm_cpus)?;
        let plugins = plugins::discover(&cfg.plugin_path, &cfg.builtins, &log);
        if plugins.list().is_empty() {
            log_at!(log, Warn, "no plugins found (plugin path: {:?})", cfg.plugin_path);
        }
        let (listener, socket_id) = bind_listener(&cfg.socket, !cfg.allow_uids.is_empty(), &log)?;
        // SAFETY: geteuid/getpid cannot fail.
        let (own_uid, pid) = unsafe { (libc::geteuid(), libc::getpid()) };
        log_at!(
            log,
            Info,
            "listening on {} (cpus {}{}, {} plugins, max {} workers, max message {} bytes)",
            cfg.socket.display(),
            format_cpu_list(cpus.offered()),
            if cfg.arm_cpus.is_some() { format!(" on {}", format_cpu_list(cpus.real())) } else { String::new() },
            plugins.list().len(),
            cfg.max_workers,
            cfg.max_msg_size
        );
        Ok(Daemon {
            access: Access { own_uid, allow: cfg.allow_uids.clone() },
            recv_buf: vec![0; max_packet(cfg.max_msg_size)],
            cfg,
            log,
            cpus,
            plugins,
            listener: Some(listener),
            socket_id,
            clients: Vec::new(),
            next_client: 1,
            workers: Workers::new(),
            accept_paused: None,
            pid,
        })
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.cfg.socket
    }

    /// The loaded plugins.
    pub fn plugins(&self) -> &Plugins {
        &self.plugins
    }

    /// The CPUs the service offers workers (logical with [`Config::arm_cpus`]).
    pub fn cpuset(&self) -> &CpuSet {
        self.cpus.offered()
    }

    /// The worker table.
    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    /// Serves until SIGTERM or SIGINT, then shuts down (workers told to exit, reaped; socket
    /// unlinked). Installs process-wide handlers for SIGTERM, SIGINT and SIGCHLD while it
    /// runs (restored on return), so only one daemon may serve per process.
    pub fn serve(self) -> Result<(), String> {
        let signals = Signals::install()?;
        self.serve_with(signals)
    }

    /// [`Daemon::serve`] with the handlers already installed.
    fn serve_with(mut self, signals: Signals) -> Result<(), String> {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut stopping = false;
        loop {
            if stopping && self.workers.map.is_empty() {
                break;
            }
            fds.clear();
            fds.push(libc::pollfd { fd: signals.read.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            if self.accept_paused.is_some_and(|t| Instant::now() >= t) {
                self.accept_paused = None;
            }
            let listen_fd = match (&self.listener, self.accept_paused) {
                (Some(l), None) => l.as_raw_fd(),
                _ => -1,
            };
            fds.push(libc::pollfd { fd: listen_fd, events: libc::POLLIN, revents: 0 });
            let client_ids: Vec<u64> = self.clients.iter().map(|c| c.id).collect();
            for c in &self.clients {
                fds.push(libc::pollfd { fd: c.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
            }
            let worker_ids: Vec<u64> = self.workers.map.values().filter(|w| w.ctl.is_some()).map(|w| w.id).collect();
            for id in &worker_ids {
                let fd = self.workers.map[id].ctl.as_ref().map_or(-1, |f| f.as_raw_fd());
                fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
            }
            let timeout = self.poll_timeout();
            // SAFETY: `fds` is a valid array of `fds.len()` pollfds (fd -1 entries are ignored).
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(format!("poll: {e}"));
                }
            }
            if n > 0 {
                if fds[0].revents != 0 && signals.drain() && !stopping {
                    log_at!(self.log, Info, "shutting down");
                    stopping = true;
                    self.begin_shutdown();
                    continue;
                }
                if fds[1].revents != 0 && !stopping {
                    self.accept();
                }
                for (i, id) in client_ids.iter().enumerate() {
                    if fds[2 + i].revents != 0 {
                        self.on_client(*id);
                    }
                }
                let base = 2 + client_ids.len();
                for (i, id) in worker_ids.iter().enumerate() {
                    if fds[base + i].revents != 0 {
                        self.on_worker(*id);
                    }
                }
            }
            // Reaping does not wait for SIGCHLD: a worker may also be found dead through its
            // control socket, and waitpid(WNOHANG) is cheap.
            self.reap();
            if let Some(h) = &self.cfg.worker_cpus {
                h.poll(self.cpus.real());
            }
            self.enforce_deadlines();
            self.drop_dead_clients();
        }
        drop(signals);
        log_at!(self.log, Info, "stopped");
        Ok(())
    }

    fn poll_timeout(&self) -> libc::c_int {
        let now = Instant::now();
        let pause = self.accept_paused.map(|t| t.saturating_duration_since(now));
        self.workers
            .map
            .values()
            .filter_map(|w| match w.state {
                WState::Exiting { deadline, killed: false } => Some(deadline.saturating_duration_since(now)),
                // Killed: poll for the reap even if SIGCHLD was missed.
                WState::Exiting { killed: true, .. } => Some(Duration::from_millis(10)),
                _ => None,
            })
            .chain(pause)
            .chain(self.cfg.worker_cpus.as_ref().filter(|_| !self.workers.map.is_empty()).map(|h| h.interval()))
            .min()
            .map_or(-1, |d| d.as_millis().clamp(1, 1000) as libc::c_int)
    }

    fn begin_shutdown(&mut self) {
        self.listener = None;
        for c in &mut self.clients {
            c.dead = true;
        }
        self.drop_dead_clients();
        let ids: Vec<u64> = self.workers.map.keys().copied().collect();
        for id in ids {
            self.request_exit(id);
        }
    }

    // ---- clients

    fn accept(&mut self) {
        let Some(listener) = &self.listener else { return };
        loop {
            // SAFETY: accept4 on our listening socket, no address wanted.
            let fd = unsafe {
                libc::accept4(
                    listener.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return,
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        // Out of descriptors (or memory): the pending connection stays readable,
                        // so polling the listener again at once would spin. Pause accepting.
                        log_at!(self.log, Warn, "accept: {e}; pausing new connections briefly");
                        self.accept_paused = Some(Instant::now() + ACCEPT_PAUSE);
                        return;
                    }
                }
            }
            // SAFETY: accept4 returned a new fd we own.
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            let cred = match proto::peer_cred(fd.as_fd()) {
                Ok(c) => c,
                Err(e) => {
                    log_at!(self.log, Warn, "SO_PEERCRED: {e}; connection dropped");
                    continue;
                }
            };
            let refuse = |status, reason: String| {
                let m = Reply::Error { req: 0, status, reason }.encode();
                let _ = proto::send_msg(fd.as_fd(), &m, None);
            };
            if let Err(why) = self.access.check(&cred) {
                log_at!(self.log, Warn, "refused: {why}");
                refuse(DOCA_ERROR_AUTHENTICATION, why);
                continue;
            }
            if self.clients.len() >= MAX_CLIENTS {
                log_at!(self.log, Warn, "refused pid {}: {MAX_CLIENTS} connections open", cred.pid);
                refuse(DOCA_ERROR_FULL, "too many connections".into());
                continue;
            }
            let _ = proto::fit_packet(fd.as_fd(), max_packet(self.cfg.max_msg_size));
            let id = self.next_client;
            self.next_client += 1;
            log_at!(self.log, Debug, "client {id}: pid {} uid {} connected", cred.pid, cred.uid);
            self.clients.push(Client { id, fd, cred, hello: None, dead: false });
        }
    }

    fn client(&mut self, id: u64) -> Option<&mut Client> {
        self.clients.iter_mut().find(|c| c.id == id && !c.dead)
    }

    /// Sends to a client; a client that cannot take it (gone, or not reading) is dropped.
    fn reply(&mut self, id: u64, msg: &Reply, pass: Option<&OwnedFd>) {
        let log = self.log;
        let Some(c) = self.client(id) else { return };
        if let Err(e) = proto::send_msg(c.fd.as_fd(), &msg.encode(), pass.map(|f| f.as_fd())) {
            log_at!(log, Info, "client {id}: send failed ({e}); dropping it");
            c.dead = true;
        }
    }

    fn on_client(&mut self, id: u64) {
        let log = self.log;
        for _ in 0..16 {
            let Some(i) = self.clients.iter().position(|c| c.id == id && !c.dead) else { return };
            let r = proto::recv_msg(self.clients[i].fd.as_fd(), &mut self.recv_buf);
            let n = match r {
                Ok((0, _)) => {
                    log_at!(log, Debug, "client {id}: hung up");
                    self.clients[i].dead = true;
                    return;
                }
                Ok((n, None)) => n,
                Ok((_, Some(_))) => {
                    log_at!(log, Warn, "client {id}: sent a descriptor; dropping it");
                    self.clients[i].dead = true;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                // A host that closes with replies still unread (a stopped worker's `Stopped`,
                // say) resets the connection: an ordinary hang-up, not a fault.
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                    log_at!(log, Debug, "client {id}: hung up (reset)");
                    self.clients[i].dead = true;
                    return;
                }
                Err(e) => {
                    log_at!(log, Warn, "client {id}: {e}; dropping it");
                    self.clients[i].dead = true;
                    return;
                }
            };
            let req = match Request::decode(&self.recv_buf[..n]) {
                Ok(r) => r,
                Err(_) => {
                    log_at!(log, Warn, "client {id}: protocol error; dropping it");
                    self.clients[i].dead = true;
                    return;
                }
            };
            self.request(id, req);
        }
    }

    fn request(&mut self, cid: u64, req: Request) {
        let log = self.log;
        let daemon_max = self.cfg.max_msg_size;
        let Some(c) = self.client(cid) else { return };
        let hello = c.hello;
        match (req, hello) {
            (Request::Hello { req, proto, pid, max_workers, max_msg_size }, None) => {
                if proto != PROTO_VERSION {
                    log_at!(log, Warn, "client {cid}: protocol {proto}, this service speaks {PROTO_VERSION}");
                    let reason = format!("protocol version {proto} not supported (want {PROTO_VERSION})");
                    self.reply(cid, &Reply::Error { req, status: DOCA_ERROR_UNSUPPORTED_VERSION, reason }, None);
                    if let Some(c) = self.client(cid) {
                        c.dead = true;
                    }
                    return;
                }
                let host = usize::try_from(max_msg_size).unwrap_or(usize::MAX);
                let eff = if host == 0 { daemon_max } else { host.min(daemon_max) };
                // The host's worker limit is counted per host process, named by the kernel's
                // record of the peer rather than the pid the host claims.
                c.hello = Some((c.cred.pid, max_workers, eff));
                log_at!(log, Debug, "client {cid}: hello from pid {pid} (peer pid {}, uid {})", c.cred.pid, c.cred.uid);
                let welcome = Reply::Welcome {
                    req,
                    proto: PROTO_VERSION,
                    max_msg_size: eff as u64,
                    max_workers: self.cfg.max_workers,
                    cpuset: *self.cpus.offered(),
                    plugins: self.plugins.infos(),
                };
                self.reply(cid, &welcome, None);
            }
            (Request::Hello { req, .. }, Some(_)) => {
                let reason = "Hello already received on this connection".to_string();
                self.reply(cid, &Reply::Error { req, status: DOCA_ERROR_BAD_STATE, reason }, None);
            }
            (_, None) => {
                log_at!(log, Warn, "client {cid}: request before Hello; dropping it");
                c.dead = true;
            }
            (Request::Spawn { req, worker_id, gid, plugins, cpuset, max_inflight, env }, Some(h)) => {
                if let Err((status, reason)) =
                    self.spawn(cid, h, req, worker_id, gid, plugins, cpuset, max_inflight, env)
                {
                    log_at!(log, Info, "client {cid}: spawn refused: {reason} ({})", err_name(status));
                    self.reply(cid, &Reply::Error { req, status, reason }, None);
                }
            }
            (Request::Stop { req, worker_id }, Some(_)) => self.stop(cid, req, worker_id),
            (Request::WorkersByGid { req, gid }, Some(_)) => {
                let ids = self.workers.by_gid(gid);
                self.reply(cid, &Reply::Workers { req, ids }, None);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn spawn(
        &mut self,
        cid: u64,
        (host_pid, host_max_workers, msg_size): (u32, u32, usize),
        req: u64,
        worker_id: u64,
        gid: u32,
        plugins: u64,
        cpuset: CpuSet,
        max_inflight: u32,
        env: Vec<String>,
    ) -> Result<(), (doca_error_t, String)> {
        if worker_id != WORKER_ID_ANY {
            if let Some(w) = self.workers.map.get(&worker_id) {
                return self.reconnect(cid, req, worker_id, plugins, w.plugins);
            }
        }
        if !max_inflight.is_power_of_two() {
            return Err((DOCA_ERROR_INVALID_VALUE, format!("max in-flight {max_inflight} is not a power of two")));
        }
        let unknown = plugins & !self.plugins.mask();
        if unknown != 0 {
            return Err((DOCA_ERROR_NOT_FOUND, format!("unknown plugin ids {unknown:#x}")));
        }
        let offered = self.cpus.offered();
        let cpuset = if cpuset_is_empty(&cpuset) { *offered } else { cpuset };
        if !cpuset_is_subset(&cpuset, offered) {
            return Err((
                DOCA_ERROR_NOT_PERMITTED,
                format!("CPUs {} are not inside the service's {}", format_cpu_list(&cpuset), format_cpu_list(offered)),
            ));
        }
        let real_cpus = self.cpus.to_real(&cpuset);
        if let Some(bad) =
            env.iter().find(|kv| kv.split_once('=').is_none_or(|(k, _)| k.is_empty() || k.contains('\0')))
        {
            return Err((DOCA_ERROR_INVALID_VALUE, format!("environment entry {bad:?} is not KEY=VALUE")));
        }
        if self.workers.live_count() >= self.cfg.max_workers as usize {
            return Err((DOCA_ERROR_FULL, format!("the service runs its maximum of {} workers", self.cfg.max_workers)));
        }
        let mine = self.workers.map.values().filter(|w| w.live() && w.owner == host_pid).count();
        if host_max_workers != 0 && mine >= host_max_workers as usize {
            return Err((DOCA_ERROR_FULL, format!("this host already has its maximum of {host_max_workers} workers")));
        }
        let id = if worker_id == WORKER_ID_ANY { self.workers.allocate() } else { worker_id };
        let os = |e: io::Error| (DOCA_ERROR_OPERATING_SYSTEM, e.to_string());
        let (ctl, ctl_child) = proto::seqpacket_pair(true).map_err(os)?;
        let (host, data_child) = proto::seqpacket_pair(false).map_err(os)?;
        let _ = proto::fit_packet(data_child.as_fd(), max_packet(msg_size));
        let _ = proto::fit_packet(host.as_fd(), max_packet(self.cfg.max_msg_size));
        let args = SpawnArgs {
            id,
            plugins: self.plugins.list().iter().filter(|p| plugins & p.id != 0).collect(),
            cpuset: real_cpus,
            env,
            ctl: ctl_child,
            data: data_child,
            max_msg_size: msg_size,
            recv_packet: max_packet(self.cfg.max_msg_size),
            max_inflight,
            log: self.log,
        };
        let pid = fork_worker(args, self.pid).map_err(os)?;
        if let Some(h) = &self.cfg.worker_cpus {
            h.started(pid, &real_cpus);
        }
        log_at!(
            self.log,
            Info,
            "worker {id:#x} (pid {pid}, gid {gid}, plugins {plugins:#x}, cpus {}{}) spawned for pid {host_pid}",
            format_cpu_list(&cpuset),
            if real_cpus != cpuset { format!(" on {}", format_cpu_list(&real_cpus)) } else { String::new() }
        );
        self.workers.map.insert(
            id,
            WorkerEntry {
                id,
                gid,
                pid,
                plugins,
                owner: host_pid,
                ctl: Some(ctl),
                state: WState::Starting,
                attached: vec![Attachment { client: cid, conn: 1, pending: Some((req, host)) }],
                next_conn: 2,
            },
        );
        Ok(())
    }

    /// A `Spawn` naming a worker that exists: a new data connection to it.
    fn reconnect(&mut self, cid: u64, req: u64, id: u64, want: u64, has: u64) -> Result<(), (doca_error_t, String)> {
        let w = self.workers.map.get_mut(&id).expect("caller checked");
        if !w.live() {
            return Err((DOCA_ERROR_AGAIN, format!("worker {id:#x} is exiting")));
        }
        if want & !has != 0 {
            return Err((
                DOCA_ERROR_INVALID_VALUE,
                format!("worker {id:#x} runs plugins {has:#x}, not all of {want:#x}"),
            ));
        }
        let (host, wend) = proto::seqpacket_pair(false).map_err(|e| (DOCA_ERROR_OPERATING_SYSTEM, e.to_string()))?;
        let conn = w.next_conn;
        w.next_conn += 1;
        let ctl = w.ctl.as_ref().ok_or((DOCA_ERROR_CONNECTION_ABORTED, format!("worker {id:#x} is gone")))?;
        if let Err(e) = proto::send_msg(ctl.as_fd(), &DaemonToWorker::Attach { conn }.encode(), Some(wend.as_fd())) {
            return Err((DOCA_ERROR_CONNECTION_ABORTED, format!("worker {id:#x} unreachable: {e}")));
        }
        drop(wend);
        log_at!(self.log, Info, "client {cid}: reconnected to worker {id:#x} (connection {conn})");
        match &w.state {
            WState::Ready(addrs) => {
                let m = Reply::Spawned { req, worker_id: id, pid: w.pid as u32, addrs: addrs.clone() };
                w.attached.push(Attachment { client: cid, conn, pending: None });
                self.reply(cid, &m, Some(&host));
            }
            _ => w.attached.push(Attachment { client: cid, conn, pending: Some((req, host)) }),
        }
        Ok(())
    }

    fn stop(&mut self, cid: u64, req: u64, id: u64) {
        let Some(w) = self.workers.map.get_mut(&id) else {
            let reason = format!("no worker {id:#x}");
            return self.reply(cid, &Reply::Error { req, status: DOCA_ERROR_NOT_FOUND, reason }, None);
        };
        let Some(i) = w.attached.iter().rposition(|a| a.client == cid) else {
            let reason = format!("this connection is not attached to worker {id:#x}");
            return self.reply(cid, &Reply::Error { req, status: DOCA_ERROR_NOT_FOUND, reason }, None);
        };
        let a = w.attached.remove(i);
        if let Some((spawn_req, _)) = a.pending {
            let reason = format!("worker {id:#x} stopped before it was ready");
            self.reply(cid, &Reply::Error { req: spawn_req, status: DOCA_ERROR_SHUTDOWN, reason }, None);
        }
        self.reply(cid, &Reply::Stopped { req, worker_id: id }, None);
        log_at!(self.log, Debug, "client {cid}: detached from worker {id:#x} (connection {})", a.conn);
        self.maybe_exit(id);
    }

    fn drop_dead_clients(&mut self) {
        let dead: Vec<u64> = self.clients.iter().filter(|c| c.dead).map(|c| c.id).collect();
        if dead.is_empty() {
            return;
        }
        self.clients.retain(|c| !c.dead);
        let ids: Vec<u64> = self.workers.map.keys().copied().collect();
        for id in ids {
            let w = self.workers.map.get_mut(&id).expect("listed");
            let before = w.attached.len();
            w.attached.retain(|a| !dead.contains(&a.client));
            if w.attached.len() != before {
                self.maybe_exit(id);
            }
        }
    }

    // ---- workers

    /// The last detach: tell the worker to exit.
    fn maybe_exit(&mut self, id: u64) {
        if self.workers.map.get(&id).is_some_and(|w| w.attached.is_empty() && w.live()) {
            self.request_exit(id);
        }
    }

    fn request_exit(&mut self, id: u64) {
        let log = self.log;
        let Some(w) = self.workers.map.get_mut(&id) else { return };
        if !w.live() {
            return;
        }
        log_at!(log, Info, "worker {id:#x}: exit");
        let sent = w.ctl.as_ref().map(|c| proto::send_msg(c.as_fd(), &DaemonToWorker::Exit.encode(), None));
        w.state = WState::Exiting { deadline: Instant::now() + EXIT_GRACE, killed: false };
        if let Some(Err(e)) = sent {
            if e.kind() == io::ErrorKind::WouldBlock {
                // Its control socket is full: the worker is not reading it, so it will not
                // see the Exit either.
                log_at!(log, Warn, "worker {id:#x} does not read its control socket; killing it");
                kill(w);
            }
        }
    }

    /// Handles one event of a worker's control socket; false when there was none to handle.
    fn on_worker(&mut self, id: u64) -> bool {
        let log = self.log;
        let Some(w) = self.workers.map.get_mut(&id) else { return false };
        let Some(ctl) = &w.ctl else { return false };
        let r = proto::recv_msg(ctl.as_fd(), &mut self.recv_buf);
        let msg = match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Ok((n, None)) if n > 0 => WorkerToDaemon::decode(&self.recv_buf[..n]).ok(),
            _ => None,
        };
        match msg {
            Some(WorkerToDaemon::Ready { addrs }) if matches!(w.state, WState::Starting) => {
                log_at!(log, Debug, "worker {id:#x} ready");
                w.state = WState::Ready(addrs.clone());
                let pid = w.pid as u32;
                let mut answers = Vec::new();
                for a in &mut w.attached {
                    if let Some((req, host)) = a.pending.take() {
                        answers.push((
                            a.client,
                            Reply::Spawned { req, worker_id: id, pid, addrs: addrs.clone() },
                            host,
                        ));
                    }
                }
                for (cid, m, host) in answers {
                    self.reply(cid, &m, Some(&host));
                }
            }
            Some(WorkerToDaemon::Failed { status, reason }) if matches!(w.state, WState::Starting) => {
                log_at!(log, Warn, "worker {id:#x} failed to start: {reason}");
                let answers: Vec<(u64, u64)> =
                    w.attached.drain(..).filter_map(|a| a.pending.map(|(req, _)| (a.client, req))).collect();
                w.state = WState::Exiting { deadline: Instant::now() + EXIT_GRACE, killed: false };
                for (cid, req) in answers {
                    self.reply(cid, &Reply::Error { req, status, reason: reason.clone() }, None);
                }
            }
            other => {
                // Hang-up, or a message that makes no sense now: the worker is dead or broken.
                // Its clients hear about it when it is reaped (with how it ended).
                if other.is_some() {
                    log_at!(log, Error, "worker {id:#x}: protocol error on its control socket; killing it");
                    kill(w);
                } else {
                    log_at!(log, Debug, "worker {id:#x}: control socket closed");
                }
                w.ctl = None;
                if w.live() {
                    w.state = WState::Exiting { deadline: Instant::now() + EXIT_GRACE, killed: false };
                }
            }
        }
        true
    }

    fn enforce_deadlines(&mut self) {
        let now = Instant::now();
        for w in self.workers.map.values_mut() {
            if let WState::Exiting { deadline, killed: false } = w.state {
                if now >= deadline {
                    log_at!(self.log, Warn, "worker {:#x} (pid {}) did not exit in time; killing it", w.id, w.pid);
                    kill(w);
                }
            }
        }
    }

    /// Reaps every worker that ended; tells its attached clients.
    fn reap(&mut self) {
        let mut gone = Vec::new();
        for w in self.workers.map.values() {
            let mut status = 0;
            // SAFETY: waitpid on our own child with a valid status out-pointer.
            let r = unsafe { libc::waitpid(w.pid, &mut status, libc::WNOHANG) };
            if r == w.pid {
                gone.push((w.id, describe(status)));
            } else if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD) {
                gone.push((w.id, "already reaped".to_string()));
            }
        }
        for (id, how) in gone {
            // A worker that sends `Failed` (or `Ready`) and exits at once may be reaped before
            // this loop read its last words: read them first, they carry the real reason.
            while self.on_worker(id) {}
            let w = self.workers.map.remove(&id).expect("listed");
            if let Some(h) = &self.cfg.worker_cpus {
                h.exited(w.pid);
            }
            let expected = !w.live() && w.attached.is_empty();
            if expected {
                log_at!(self.log, Info, "worker {id:#x} (pid {}) {how}", w.pid);
            } else {
                log_at!(self.log, Warn, "worker {id:#x} (pid {}) died: {how}", w.pid);
            }
            let mut told = Vec::new();
            for a in w.attached {
                let m = match a.pending {
                    Some((req, _)) => Reply::Error {
                        req,
                        status: DOCA_ERROR_CONNECTION_ABORTED,
                        reason: format!("worker {id:#x} {how}"),
                    },
                    // One report per connection, however often it attached to this worker.
                    None if told.contains(&a.client) => continue,
                    None => {
                        told.push(a.client);
                        Reply::WorkerExited { worker_id: id, status: DOCA_ERROR_CONNECTION_ABORTED, how: how.clone() }
                    }
                };
                self.reply(a.client, &m, None);
            }
        }
    }
}

fn kill(w: &mut WorkerEntry) {
    // SAFETY: kill(2) on our own, not yet reaped child (entries leave the table when reaped,
    // so the pid cannot have been recycled).
    unsafe { libc::kill(w.pid, libc::SIGKILL) };
    w.state = WState::Exiting { deadline: Instant::now(), killed: true };
}

/// A wait status in words.
fn describe(status: libc::c_int) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("ended (wait status {status:#x})")
    }
}

impl Drop for Daemon {
    /// The safety net (and the end of [`serve`](Daemon::serve)): no worker outlives the
    /// daemon, and the socket file goes away if it is still ours.
    fn drop(&mut self) {
        self.clients.clear();
        let deadline = Instant::now() + EXIT_GRACE;
        for w in self.workers.map.values() {
            if let Some(c) = &w.ctl {
                let _ = proto::send_msg(c.as_fd(), &DaemonToWorker::Exit.encode(), None);
            }
        }
        while !self.workers.map.is_empty() {
            self.workers.map.retain(|_, w| {
                let mut st = 0;
                // SAFETY: waitpid on our own child.
                let r = unsafe { libc::waitpid(w.pid, &mut st, libc::WNOHANG) };
                r == 0
            });
            if Instant::now() >= deadline {
                for w in self.workers.map.values_mut() {
                    log_at!(self.log, Warn, "worker {:#x} (pid {}) still running at exit; killing it", w.id, w.pid);
                    // SAFETY: our own, unreaped child.
                    unsafe { libc::kill(w.pid, libc::SIGKILL) };
                    let mut st = 0;
                    // SAFETY: blocking waitpid on our own child, which SIGKILL ends.
                    unsafe { libc::waitpid(w.pid, &mut st, 0) };
                }
                self.workers.map.clear();
            } else {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.listener = None;
        if let Ok(m) = std::fs::symlink_metadata(&self.cfg.socket) {
            if (m.dev(), m.ino()) == self.socket_id {
                let _ = std::fs::remove_file(&self.cfg.socket);
            }
        }
    }
}
