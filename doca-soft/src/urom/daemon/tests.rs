//! Tests of plugin discovery and of the whole daemon, against plugins compiled from C here
//! (so they do not depend on the Rust plugins). Skipped with a message when `cc` is missing.
//!
//! The end-to-end tests run the daemon in a child process (this test binary re-executed with
//! one `#[ignore]`d test, [`daemon_child`]), never in a thread: the daemon forks workers and
//! installs process-wide signal handlers.

use std::io::{BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::*;
use crate::urom::proto::{Domain, HostToWorker, Member, PluginAddr, PluginInfo, Seg, WorkerToHost, WORKER_ID_FIRST};

/// What the C plugins below share: the headers they include and the UROM plugin ABI's
/// structures they declare (a literal, for `concat!`).
macro_rules! c_abi {
    () => {
        r#"
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
typedef int doca_error_t;
struct list { struct list *prev, *next; };
struct cmd { uint64_t type, ctx, len; uint8_t data[]; };
struct notify { uint64_t type, ctx, len; doca_error_t status; uint32_t reserved; uint8_t data[]; };
struct cmd_desc { struct list entry; uint64_t dest_id; struct cmd c; };
struct notif_desc { struct list entry; uint64_t dest_id; struct notify n; };
struct wctx;
struct iface {
    size_t ver;
    doca_error_t (*open)(struct wctx *);
    void (*close)(struct wctx *);
    doca_error_t (*addr)(struct wctx *, void *, size_t *);
    doca_error_t (*worker_cmd)(struct wctx *, struct list *);
    doca_error_t (*progress)(struct wctx *, struct list *);
    doca_error_t (*notif_pack)(struct notify *, size_t *, void *);
};
"#
    };
}

/// A minimal loopback plugin against the UROM plugin ABI. Commands (payload prefixes):
/// `HOLD` is kept until a `RELEASE` arrives (on any connection); `FAIL` makes worker_cmd fail
/// with NOT_SUPPORTED; `GETENV<name>` answers the variable's value; `LOOKUP` + u64 domain id +
/// u64 va answers the four domain lookups; anything else is echoed. Its address is 300 bytes
/// (more than the worker's first guess, to exercise the grow path). `LOOP_OPEN_FAIL` in the
/// environment makes open fail with NOT_PERMITTED; `LOOP_CLOSE_HANG` makes close never return.
const LOOP_C: &str = concat!(
    c_abi!(),
    r#"
struct lookups {
    doca_error_t (*addr_lookup)(struct wctx *, uint64_t, void **);
    doca_error_t (*seg_lookup)(struct wctx *, uint64_t, uint64_t, int *);
    doca_error_t (*memh_lookup)(struct wctx *, uint64_t, int, size_t *, void **);
    doca_error_t (*mkey_lookup)(struct wctx *, uint64_t, int, size_t *, void **);
};
struct wctx { struct iface iface; struct lookups dom; void *plugin_ctx; };
struct state { struct list ready, held; };

static void add_tail(struct list *h, struct list *e) { e->prev = h->prev; e->next = h; h->prev->next = e; h->prev = e; }
static void del(struct list *e) { e->prev->next = e->next; e->next->prev = e->prev; }
static void init(struct list *h) { h->prev = h->next = h; }

static doca_error_t p_open(struct wctx *ctx) {
    if (getenv("LOOP_OPEN_FAIL")) return 2;
    struct state *s = malloc(sizeof *s);
    if (!s) return 7;
    init(&s->ready); init(&s->held);
    ctx->plugin_ctx = s;
    return 0;
}
static void p_close(struct wctx *ctx) {
    if (getenv("LOOP_CLOSE_HANG")) for (;;) pause();
    free(ctx->plugin_ctx); ctx->plugin_ctx = 0;
}
#define ADDR_LEN 300
static doca_error_t p_addr(struct wctx *ctx, void *addr, size_t *len) {
    (void)ctx;
    if (*len < ADDR_LEN) { *len = ADDR_LEN; return 6; }
    for (int i = 0; i < ADDR_LEN; i++) ((uint8_t *)addr)[i] = (uint8_t)(i ^ 0x5a);
    *len = ADDR_LEN;
    return 0;
}
static struct notif_desc *answer(struct cmd_desc *c, const void *body, size_t len, doca_error_t st) {
    struct notif_desc *n = malloc(sizeof *n + len);
    n->dest_id = c->dest_id;
    n->n.type = c->c.type; n->n.ctx = c->c.ctx; n->n.len = len; n->n.status = st; n->n.reserved = 0;
    memcpy(n->n.data, body, len);
    return n;
}
static doca_error_t p_cmd(struct wctx *ctx, struct list *cmds) {
    struct state *s = ctx->plugin_ctx;
    while (cmds->next != cmds) {
        struct cmd_desc *c = (struct cmd_desc *)cmds->next;
        del(&c->entry);
        const char *p = (const char *)c->c.data;
        size_t len = c->c.len;
        if (len >= 4 && !memcmp(p, "FAIL", 4)) { free(c); return 4; }
        if (len >= 4 && !memcmp(p, "HOLD", 4)) {
            add_tail(&s->held, &answer(c, p, len, 0)->entry);
        } else if (len >= 7 && !memcmp(p, "RELEASE", 7)) {
            while (s->held.next != &s->held) { struct list *e = s->held.next; del(e); add_tail(&s->ready, e); }
            add_tail(&s->ready, &answer(c, p, len, 0)->entry);
        } else if (len >= 6 && !memcmp(p, "GETENV", 6)) {
            char name[64] = {0};
            memcpy(name, p + 6, len - 6 < 63 ? len - 6 : 63);
            const char *v = getenv(name);
            add_tail(&s->ready, &answer(c, v ? v : "", v ? strlen(v) : 0, v ? 0 : 16)->entry);
        } else if (len == 22 && !memcmp(p, "LOOKUP", 6)) {
            uint64_t dom, va;
            memcpy(&dom, p + 6, 8); memcpy(&va, p + 14, 8);
            /* Answer: addr (len-prefixed), seg index, memh, mkey. */
            uint8_t out[1024]; size_t o = 0; void *a = 0; int seg = -1; size_t ml = 0, kl = 0; void *mh = 0, *mk = 0;
            doca_error_t st = ctx->dom.addr_lookup(ctx, dom, &a);
            if (!st) st = ctx->dom.seg_lookup(ctx, dom, va, &seg);
            if (!st) st = ctx->dom.memh_lookup(ctx, dom, seg, &ml, &mh);
            if (!st) st = ctx->dom.mkey_lookup(ctx, dom, seg, &kl, &mk);
            if (!st && ml + kl + 16 < sizeof out) {
                memcpy(out + o, a, 9); o += 9;
                out[o++] = (uint8_t)seg;
                out[o++] = (uint8_t)ml; memcpy(out + o, mh, ml); o += ml;
                out[o++] = (uint8_t)kl; memcpy(out + o, mk, kl); o += kl;
            }
            add_tail(&s->ready, &answer(c, out, o, st)->entry);
        } else {
            add_tail(&s->ready, &answer(c, p, len, 0)->entry);
        }
        free(c);
    }
    return 0;
}
static doca_error_t p_progress(struct wctx *ctx, struct list *notifs) {
    struct state *s = ctx->plugin_ctx;
    if (s->ready.next == &s->ready) return 25;
    while (s->ready.next != &s->ready) { struct list *e = s->ready.next; del(e); add_tail(notifs, e); }
    return 0;
}
static doca_error_t p_pack(struct notify *n, size_t *len, void *out) {
    /* DOCA's packed form: the header, then the body. */
    if (*len < sizeof(*n) + n->len) return 6;
    memcpy(out, n, sizeof(*n) + n->len);
    *len = sizeof(*n) + n->len;
    return 0;
}
doca_error_t urom_plugin_get_iface(struct iface *i) {
#ifdef BAD_MAJOR
    i->ver = (size_t)2 << 24;
#else
    i->ver = (size_t)3 << 24 | 58; /* DOCA_VERSION_EXACT of 3.0.0058 */
#endif
    i->open = p_open; i->close = p_close; i->addr = p_addr; i->worker_cmd = p_cmd;
    i->progress = p_progress; i->notif_pack = p_pack;
#ifdef NULL_PACK
    i->notif_pack = 0;
#endif
    return 0;
}
doca_error_t urom_plugin_get_version(uint64_t *v) { *v = 7; return 0; }
"#
);

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A directory removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "urom-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Compiles C source into `out` as a shared object; false (with a message) without a compiler.
fn cc(src: &str, defines: &[&str], out: &Path) -> bool {
    let dir = out.parent().unwrap();
    let c = dir.join(format!("{}.c", out.file_name().unwrap().to_string_lossy()));
    std::fs::write(&c, src).unwrap();
    let mut cmd = Command::new("cc");
    cmd.args(["-shared", "-fPIC", "-O1", "-o"]).arg(out).arg(&c);
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    match cmd.output() {
        Ok(o) if o.status.success() => {
            let _ = std::fs::remove_file(&c);
            true
        }
        Ok(o) => panic!("cc failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => {
            eprintln!("skipping: no C compiler ({e})");
            false
        }
    }
}

fn quiet() -> Log {
    Log { level: LogLevel::Error, worker: None, sink: None }
}

#[test]
fn discovery_loads_valid_plugins_and_skips_the_rest() {
    let d1 = TempDir::new("disc1");
    let d2 = TempDir::new("disc2");
    if !cc(LOOP_C, &[], &d1.path().join("loop.so")) {
        return;
    }
    // Noise, an ELF without the symbols, a wrong API major, a NULL entry point.
    let mut x: u64 = 0x1234_5678;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) as u8
        })
        .collect();
    std::fs::write(d1.path().join("x.so"), noise).unwrap();
    assert!(cc("int not_a_plugin(void) { return 1; }\n", &[], &d1.path().join("nosym.so")));
    assert!(cc(LOOP_C, &["BAD_MAJOR"], &d1.path().join("badver.so")));
    assert!(cc(LOOP_C, &["NULL_PACK"], &d1.path().join("nullpack.so")));
    std::fs::write(d1.path().join("readme.txt"), "not a plugin").unwrap();
    // A second directory: `loop` again (the first directory wins) and one more plugin.
    assert!(cc(LOOP_C, &[], &d2.path().join("aaa.so")));
    assert!(cc(LOOP_C, &["BAD_MAJOR"], &d2.path().join("loop.so")));

    let missing = d1.path().join("does-not-exist");
    let plugins = plugins::discover(&[missing, d1.path().to_path_buf(), d2.path().to_path_buf()], &[], &quiet());
    let names: Vec<(&str, u64, u64)> = plugins.list().iter().map(|p| (p.name.as_str(), p.id, p.version)).collect();
    assert_eq!(names, vec![("aaa", 1, 7), ("loop", 2, 7)]);
    assert_eq!(plugins.by_id(2).unwrap().path, d1.path().join("loop.so"));
    assert_eq!(plugins.mask(), 3);
    assert_eq!(plugins.infos()[1], PluginInfo { id: 2, version: 7, name: "loop".into() });
    assert!(plugins::discover(&[], &[], &quiet()).list().is_empty());
}

#[test]
fn cpu_lists_parse_and_format() {
    let s = parse_cpu_list("0-2, 5,64").unwrap();
    assert_eq!(s[0], 0b100111);
    assert_eq!(s[1], 1);
    assert_eq!(format_cpu_list(&s), "0-2,5,64");
    assert!(parse_cpu_list("").is_err());
    assert!(parse_cpu_list("3-1").is_err());
    assert!(parse_cpu_list("1024").is_err());
    assert!(parse_cpu_list("a").is_err());
    assert_eq!(parse_plugin_path(";/a;;/b;"), vec![PathBuf::from("/a"), PathBuf::from("/b")]);
}

/// A socket path unique in this process: the testkit's one counter, shared with the host's
/// end-to-end tests (two counters made `urom-e2e-<pid>-<n>.sock` twice when both reached the
/// same `n`, and one daemon found the other's socket).
fn sock_path(tag: &str) -> PathBuf {
    crate::testkit::fake_daemon::unique_path(tag)
}

/// Leaves a stale socket file at `path`: a SEQPACKET socket bound there that never listened,
/// closed. (A closed listener is stale too, but a process that a parallel test forks at that
/// moment holds a copy of it until its exec, and the daemon's probe then connects, or meets
/// EPROTOTYPE for a stream listener, instead of ECONNREFUSED; a socket that never listened
/// refuses in every case.)
fn stale_socket(path: &Path) {
    let fd = crate::urom::proto::seqpacket_socket(false).unwrap();
    let (addr, len) = crate::urom::proto::unix_addr(path).unwrap();
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; `fd` is our socket.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) };
    assert_eq!(rc, 0, "bind {}: {}", path.display(), std::io::Error::last_os_error());
}

#[test]
fn bind_replaces_a_stale_socket_and_refuses_a_live_one() {
    let path = sock_path("bind");
    stale_socket(&path);
    assert!(path.exists());
    let mut cfg = Config::new(path.clone());
    cfg.plugin_path = vec![];
    cfg.log_level = LogLevel::Error;
    let d = Daemon::bind(cfg.clone()).expect("stale socket replaced");
    // A second daemon on the same path is refused while the first listens.
    let err = Daemon::bind(cfg.clone()).err().expect("live socket refused");
    assert!(err.contains("another"), "{err}");
    drop(d);
    assert!(!path.exists(), "the socket is unlinked when the daemon goes away");
    // A regular file is never replaced.
    std::fs::write(&path, "x").unwrap();
    assert!(Daemon::bind(cfg.clone()).is_err());
    std::fs::remove_file(&path).unwrap();
    // CPUs outside the affinity are refused.
    cfg.cpus = Some([u64::MAX; 16]);
    if current_affinity().unwrap() != [u64::MAX; 16] {
        assert!(Daemon::bind(cfg).is_err());
    }
}

// ---- end to end

const CHILD_ENV: &str = "UROM_TEST_DAEMON";

/// The daemon, in a re-executed test binary. Configured by `UROM_TEST_DAEMON` =
/// `socket|plugin dir|max workers|allow uid or empty`; without it (a plain `--ignored` run)
/// it does nothing.
#[test]
#[ignore]
fn daemon_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let f: Vec<&str> = spec.split('|').collect();
    let mut cfg = Config::new(PathBuf::from(f[0]));
    cfg.arm_cpus = f[4].parse().ok();
    cfg.plugin_path = vec![PathBuf::from(f[1])];
    cfg.max_workers = f[2].parse().unwrap();
    if !f[3].is_empty() {
        cfg.allow_uids = vec![f[3].parse().unwrap()];
    }
    cfg.log_level = LogLevel::Debug;
    // The thread that will serve: the parent signals it, not the process (see `terminate`).
    // SAFETY: gettid(2) has no arguments and cannot fail.
    println!("serving thread {}", unsafe { libc::gettid() });
    run(cfg).unwrap();
}

/// The daemon child process; killed and reaped on drop if the test did not stop it.
struct DaemonProc {
    child: Option<Child>,
    socket: PathBuf,
    /// The thread running the daemon's loop (libtest runs the test on a thread of its own).
    tid: libc::pid_t,
}

impl DaemonProc {
    fn start(socket: &Path, plugins: &Path, max_workers: u32, allow: Option<u32>, arm_cpus: Option<u32>) -> DaemonProc {
        let spec = format!(
            "{}|{}|{max_workers}|{}|{}",
            socket.display(),
            plugins.display(),
            allow.map(|u| u.to_string()).unwrap_or_default(),
            arm_cpus.map(|n| n.to_string()).unwrap_or_default()
        );
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "urom::daemon::tests::daemon_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, spec)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut proc = DaemonProc { child: Some(child), socket: socket.to_path_buf(), tid: 0 };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest prints "test <name> ... " without a newline before the test runs.
                for what in ["serving thread ", "listening on "] {
                    if let Some(i) = line.find(what) {
                        let _ = tx.send(line[i..].to_string());
                    }
                }
            }
        });
        let said = || rx.recv_timeout(Duration::from_secs(30)).expect("the daemon never said it listens");
        let tid = said();
        proc.tid = tid.strip_prefix("serving thread ").and_then(|t| t.parse().ok()).expect("the serving thread's id");
        assert_eq!(said(), format!("listening on {}", socket.display()));
        proc
    }

    fn pid(&self) -> libc::pid_t {
        self.child.as_ref().unwrap().id() as libc::pid_t
    }

    /// SIGTERM, then wait (bounded) for a clean exit.
    ///
    /// The signal goes to the daemon's serving thread (tgkill), not to the process: a signal
    /// sent to the process may be taken by libtest's main thread, which sleeps in a futex
    /// wait until the test ends. Without sanitizers its handler runs there at once (it only
    /// writes to the daemon's self-pipe), but ThreadSanitizer defers every asynchronous
    /// signal until the thread that took it next passes through one of its interceptors or
    /// blocks in an intercepted call, and that thread's raw futex system call is neither: the
    /// handler never ran, and the daemon never stopped (the test was skipped under TSan for
    /// it). The serving thread waits in `poll`, an intercepted blocking call, where TSan runs
    /// handlers at once. A daemon run as its program's only thread (`async-doca
    /// urom-service`) has no such second thread.
    fn terminate(&mut self) {
        // SAFETY: tgkill(2) on a thread of our own child, which has not been reaped.
        unsafe { libc::syscall(libc::SYS_tgkill, self.pid(), self.tid, libc::SIGTERM) };
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                assert!(st.success(), "daemon exit status {st}");
                return;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the daemon did not stop on SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for DaemonProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A fake host connection with a receive timeout, so a missing answer fails the test
/// instead of hanging it.
struct Conn(OwnedFd);

impl Conn {
    fn new(fd: OwnedFd) -> Conn {
        let tv = libc::timeval { tv_sec: 10, tv_usec: 0 };
        // SAFETY: setsockopt with a valid timeval of the stated size.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        Conn(fd)
    }
    fn connect(path: &Path) -> Conn {
        Conn::new(proto::connect(path, false).unwrap())
    }
    fn send(&self, bytes: &[u8]) {
        proto::send_msg(self.0.as_fd(), bytes, None).unwrap();
    }
    fn recv(&self) -> (Vec<u8>, Option<OwnedFd>) {
        let mut buf = vec![0u8; max_packet(1 << 16)];
        let (n, fd) = proto::recv_msg(self.0.as_fd(), &mut buf).expect("no answer in time");
        buf.truncate(n);
        (buf, fd)
    }
    fn reply(&self) -> (Reply, Option<OwnedFd>) {
        let (b, fd) = self.recv();
        assert!(!b.is_empty(), "daemon hung up");
        (Reply::decode(&b).unwrap(), fd)
    }
    fn notify(&self) -> (u64, u64, doca_error_t, Vec<u8>) {
        let (b, fd) = self.recv();
        assert!(fd.is_none() && !b.is_empty(), "worker hung up");
        let WorkerToHost::Notify { ctx, plugin, status, packed } = WorkerToHost::decode(&b).unwrap();
        (ctx, plugin, status, packed)
    }
    fn hello(path: &Path) -> (Conn, Reply) {
        let c = Conn::connect(path);
        let hello = Request::Hello {
            req: 1,
            proto: PROTO_VERSION,
            pid: std::process::id(),
            max_workers: 0,
            max_msg_size: 4096,
        };
        c.send(&hello.encode());
        let (w, _) = c.reply();
        (c, w)
    }
    fn spawn(&self, req: u64, worker_id: u64, plugins: u64, cpuset: CpuSet, inflight: u32, env: &[&str]) -> Reply {
        let m = Request::Spawn {
            req,
            worker_id,
            gid: 9,
            plugins,
            cpuset,
            max_inflight: inflight,
            env: env.iter().map(|s| s.to_string()).collect(),
        };
        self.send(&m.encode());
        self.reply().0
    }
    fn spawn_ok(&self, req: u64, worker_id: u64, plugins: u64, cpuset: CpuSet) -> (u64, u32, Vec<PluginAddr>, Conn) {
        let m = Request::Spawn {
            req,
            worker_id,
            gid: 9,
            plugins,
            cpuset,
            max_inflight: 4,
            env: vec!["UROM_TEST_VAR=hello world".into()],
        };
        self.send(&m.encode());
        match self.reply() {
            (Reply::Spawned { req: r, worker_id, pid, addrs }, Some(fd)) => {
                assert_eq!(r, req);
                (worker_id, pid, addrs, Conn::new(fd))
            }
            other => panic!("spawn failed: {other:?}"),
        }
    }
    fn command(&self, ctx: u64, plugin: u64, payload: &[u8]) {
        self.send(&HostToWorker::Command { ctx, plugin, payload: payload.to_vec() }.encode());
    }
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie shows state Z.
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(s) => !s.lines().any(|l| l.starts_with("State:") && l.contains('Z')),
        Err(_) => false,
    }
}

fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) {
        assert!(Instant::now() < deadline, "process {pid} still runs");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The CPU list process `pid` may run on, as the kernel prints it.
fn allowed_cpus(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    line.split_whitespace().nth(1).unwrap().to_string()
}

fn first_cpu(set: &CpuSet) -> usize {
    (0..1024).find(|c| set[c / 64] & (1 << (c % 64)) != 0).unwrap()
}

#[test]
fn end_to_end_spawn_command_reconnect_crash_and_shutdown() {
    let dir = TempDir::new("e2e");
    if !cc(LOOP_C, &[], &dir.path().join("loop.so")) {
        return;
    }
    let sock = sock_path("e2e");
    let mut daemon = DaemonProc::start(&sock, dir.path(), 3, None, None);

    // Hello / Welcome: the plugin list and the daemon's CPUs.
    let (c1, welcome) = Conn::hello(&sock);
    let Reply::Welcome { req: 1, proto: 1, max_msg_size: 4096, max_workers: 3, cpuset, plugins } = welcome else {
        panic!("{welcome:?}")
    };
    assert_eq!(plugins, vec![PluginInfo { id: 1, version: 7, name: "loop".into() }]);
    assert_eq!(cpuset, current_affinity().unwrap());
    let cpu = first_cpu(&cpuset);
    let mut one = [0u64; 16];
    one[cpu / 64] |= 1 << (cpu % 64);

    // Spawn on one CPU: the worker runs pinned, with the requested environment.
    let (wid, pid, addrs, d1) = c1.spawn_ok(2, WORKER_ID_ANY, 1, one);
    assert_eq!(wid, WORKER_ID_FIRST);
    assert_eq!(addrs.len(), 1);
    assert_eq!(addrs[0].plugin, 1);
    assert_eq!(addrs[0].addr, (0..300).map(|i| (i as u8) ^ 0x5a).collect::<Vec<u8>>());
    assert_eq!(allowed_cpus(pid), cpu.to_string());
    // Beyond stdin/out/err the worker holds its control socket and its data connection only:
    // none of the daemon's descriptors (listener, other hosts' connections) leak into it.
    let extra: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    assert_eq!(extra.len(), 2, "worker fds {extra:?}");

    // Commands: echo, environment, a worker_cmd failure, an unknown plugin.
    d1.command(10, 1, b"hello");
    assert_eq!(d1.notify(), (10, 1, DOCA_SUCCESS, b"hello".to_vec()));
    d1.command(11, 1, b"GETENVUROM_TEST_VAR");
    assert_eq!(d1.notify(), (11, 1, DOCA_SUCCESS, b"hello world".to_vec()));
    d1.command(12, 1, b"FAIL");
    assert_eq!(d1.notify().2, DOCA_ERROR_NOT_SUPPORTED);
    d1.command(13, 2, b"x");
    assert_eq!(d1.notify(), (13, 2, DOCA_ERROR_NOT_FOUND, vec![]));

    // max_inflight (4) per connection: the fifth outstanding command is refused FULL.
    for ctx in 20..24 {
        d1.command(ctx, 1, b"HOLD");
    }
    d1.command(24, 1, b"one too many");
    assert_eq!(d1.notify(), (24, 1, DOCA_ERROR_FULL, vec![]));

    // Reconnect by id from another control connection: same worker, new data connection,
    // with its own in-flight budget. Its RELEASE completes the held commands on d1.
    let (c2, _) = Conn::hello(&sock);
    let (wid2, pid2, addrs2, d2) = c2.spawn_ok(3, wid, 1, [0; 16]);
    assert_eq!((wid2, pid2, &addrs2), (wid, pid, &addrs));
    d2.command(30, 1, b"RELEASE");
    assert_eq!(d2.notify(), (30, 1, DOCA_SUCCESS, b"RELEASE".to_vec()));
    let mut held: Vec<u64> = (0..4)
        .map(|_| d1.notify())
        .map(|(ctx, _, st, _)| {
            assert_eq!(st, DOCA_SUCCESS);
            ctx
        })
        .collect();
    held.sort();
    assert_eq!(held, vec![20, 21, 22, 23]);
    // Reconnecting with plugins the worker does not run is refused.
    assert!(matches!(
        c2.spawn(4, wid, 3, [0; 16], 4, &[]),
        Reply::Error { req: 4, status: DOCA_ERROR_INVALID_VALUE, .. }
    ));

    // Domains: install, look up through the four callbacks, destroy.
    let domain = Domain {
        members: vec![Member {
            worker_id: 42,
            addrs: vec![PluginAddr { plugin: 1, addr: b"peer-addr".to_vec() }],
            segs: vec![
                Seg { va: 0x1000, len: 0x100, memh: b"MH0".to_vec(), mkey: b"K0".to_vec() },
                Seg { va: 0x4000, len: 0x100, memh: b"MH1".to_vec(), mkey: b"KEY1".to_vec() },
            ],
        }],
    };
    d1.send(&HostToWorker::DomainCreate { ctx: 40, domain }.encode());
    assert_eq!(d1.notify(), (40, 0, DOCA_SUCCESS, vec![]));
    let lookup = |ctx: u64, dom: u64, va: u64| {
        let mut p = b"LOOKUP".to_vec();
        p.extend_from_slice(&dom.to_ne_bytes());
        p.extend_from_slice(&va.to_ne_bytes());
        d1.command(ctx, 1, &p);
        d1.notify()
    };
    let mut want = b"peer-addr".to_vec();
    want.extend_from_slice(&[1, 3]);
    want.extend_from_slice(b"MH1");
    want.push(4);
    want.extend_from_slice(b"KEY1");
    assert_eq!(lookup(41, 42, 0x40ff), (41, 1, DOCA_SUCCESS, want));
    assert_eq!(lookup(42, 42, 0x4100).2, DOCA_ERROR_NOT_FOUND, "va past the segment");
    assert_eq!(lookup(43, 7, 0x1000).2, DOCA_ERROR_NOT_FOUND, "not a member");
    d1.send(&HostToWorker::DomainDestroy { ctx: 40 }.encode());
    assert_eq!(d1.notify(), (40, 0, DOCA_SUCCESS, vec![]));
    assert_eq!(lookup(44, 42, 0x1000).2, DOCA_ERROR_NOT_FOUND, "destroyed");

    // Workers by gid.
    c1.send(&Request::WorkersByGid { req: 50, gid: 9 }.encode());
    assert_eq!(c1.reply().0, Reply::Workers { req: 50, ids: vec![wid] });
    c1.send(&Request::WorkersByGid { req: 51, gid: 10 }.encode());
    assert_eq!(c1.reply().0, Reply::Workers { req: 51, ids: vec![] });

    // Refused spawns: CPUs outside the service's, unknown plugins, in-flight not a power of
    // two, a plugin whose open fails (through the requested environment).
    let outside = (0..1024).find(|c| cpuset[c / 64] & (1 << (c % 64)) == 0);
    if let Some(c) = outside {
        let mut bad = [0u64; 16];
        bad[c / 64] |= 1 << (c % 64);
        assert!(matches!(
            c1.spawn(60, WORKER_ID_ANY, 1, bad, 4, &[]),
            Reply::Error { req: 60, status: DOCA_ERROR_NOT_PERMITTED, .. }
        ));
    }
    assert!(matches!(
        c1.spawn(61, WORKER_ID_ANY, 2, [0; 16], 4, &[]),
        Reply::Error { req: 61, status: DOCA_ERROR_NOT_FOUND, .. }
    ));
    assert!(matches!(
        c1.spawn(62, WORKER_ID_ANY, 1, [0; 16], 3, &[]),
        Reply::Error { req: 62, status: DOCA_ERROR_INVALID_VALUE, .. }
    ));
    assert!(matches!(
        c1.spawn(63, WORKER_ID_ANY, 1, [0; 16], 4, &["LOOP_OPEN_FAIL=1"]),
        Reply::Error { req: 63, status: DOCA_ERROR_NOT_PERMITTED, .. }
    ));
    assert!(matches!(
        c1.spawn(64, WORKER_ID_ANY, 1, [0; 16], 4, &["NOEQUALS"]),
        Reply::Error { req: 64, status: DOCA_ERROR_INVALID_VALUE, .. }
    ));

    // Stop detaches c2 only: the worker keeps serving c1.
    c2.send(&Request::Stop { req: 70, worker_id: wid }.encode());
    assert_eq!(c2.reply().0, Reply::Stopped { req: 70, worker_id: wid });
    c2.send(&Request::Stop { req: 71, worker_id: wid }.encode());
    assert!(matches!(c2.reply().0, Reply::Error { req: 71, status: DOCA_ERROR_NOT_FOUND, .. }));
    d1.command(72, 1, b"still here");
    assert_eq!(d1.notify().3, b"still here");

    // The worker crashes: c1 hears WorkerExited, its data connection hangs up, and the daemon
    // keeps answering.
    // SAFETY: kill(2) on the worker the test just spawned (a live child of the daemon).
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    match c1.reply().0 {
        Reply::WorkerExited { worker_id, status, how } => {
            assert_eq!((worker_id, status), (wid, DOCA_ERROR_CONNECTION_ABORTED));
            assert!(how.contains("signal 9"), "{how}");
        }
        other => panic!("{other:?}"),
    }
    assert!(d1.recv().0.is_empty(), "data connection hung up");
    c1.send(&Request::WorkersByGid { req: 80, gid: 9 }.encode());
    assert_eq!(c1.reply().0, Reply::Workers { req: 80, ids: vec![] });
    wait_gone(pid);

    // Limits: three workers at most (the daemon's max_workers).
    let (_, pa, _, _da) = c1.spawn_ok(90, WORKER_ID_ANY, 1, [0; 16]);
    let (_, pb, _, _db) = c2.spawn_ok(91, 0x55, 1, [0; 16]);
    let (_, pc, _, _dc) = c2.spawn_ok(92, WORKER_ID_ANY, 1, [0; 16]);
    assert!(matches!(
        c1.spawn(93, WORKER_ID_ANY, 1, [0; 16], 4, &[]),
        Reply::Error { req: 93, status: DOCA_ERROR_FULL, .. }
    ));
    c1.send(&Request::WorkersByGid { req: 94, gid: 9 }.encode());
    let Reply::Workers { ids, .. } = c1.reply().0 else { panic!() };
    assert_eq!(ids.len(), 3);
    assert!(ids.contains(&0x55));

    // Closing a client connection detaches it: its only workers exit; c1's stays.
    drop(c2);
    wait_gone(pb);
    wait_gone(pc);
    assert!(alive(pa));

    // A worker that does not exit when told (its plugin's close hangs) is killed after the
    // grace period, and reaped.
    let m = Request::Spawn {
        req: 95,
        worker_id: WORKER_ID_ANY,
        gid: 11,
        plugins: 1,
        cpuset: [0; 16],
        max_inflight: 1,
        env: vec!["LOOP_CLOSE_HANG=1".into()],
    };
    c1.send(&m.encode());
    let (Reply::Spawned { worker_id: hang, pid: phang, .. }, Some(_dh)) = c1.reply() else { panic!("spawn failed") };
    c1.send(&Request::Stop { req: 96, worker_id: hang }.encode());
    assert_eq!(c1.reply().0, Reply::Stopped { req: 96, worker_id: hang });
    wait_gone(phang);
    c1.send(&Request::WorkersByGid { req: 97, gid: 11 }.encode());
    assert_eq!(c1.reply().0, Reply::Workers { req: 97, ids: vec![] });

    // Protocol errors drop the connection (here: a request before Hello).
    let raw = Conn::connect(&sock);
    raw.send(&Request::WorkersByGid { req: 1, gid: 9 }.encode());
    assert!(raw.recv().0.is_empty());

    // SIGTERM: workers told to exit and reaped, the socket removed, exit status 0.
    daemon.terminate();
    assert!(!sock.exists(), "socket file left behind");
    wait_gone(pa);
    assert!(c1.recv().0.is_empty(), "clients see the daemon go");
}

/// With `arm_cpus` the service offers logical CPUs 0..N (what NVIDIA's UROM samples look
/// for) and pins a worker to the real CPUs behind the logical ones it asked for.
#[test]
fn arm_cpus_are_offered_as_logical_cpus_and_run_on_the_real_ones() {
    let dir = TempDir::new("arm");
    if !cc(LOOP_C, &[], &dir.path().join("loop.so")) {
        return;
    }
    let sock = sock_path("arm");
    let mut daemon = DaemonProc::start(&sock, dir.path(), 2, None, Some(8));
    let (c, welcome) = Conn::hello(&sock);
    let Reply::Welcome { cpuset, .. } = welcome else { panic!("{welcome:?}") };
    assert_eq!(format_cpu_list(&cpuset), "0-7");
    let real = current_affinity().unwrap();
    let (_, all, _, _d1) = c.spawn_ok(2, WORKER_ID_ANY, 1, cpuset);
    assert_eq!(allowed_cpus(all), format_cpu_list(&real), "logical 0-7 runs on every real CPU");
    let (_, one, _, _d2) = c.spawn_ok(3, WORKER_ID_ANY, 1, parse_cpu_list("0").unwrap());
    assert_eq!(allowed_cpus(one), first_cpu(&real).to_string(), "logical 0 runs on the first real CPU");
    assert!(matches!(
        c.spawn(4, WORKER_ID_ANY, 1, parse_cpu_list("8").unwrap(), 4, &[]),
        Reply::Error { req: 4, status: DOCA_ERROR_NOT_PERMITTED, .. }
    ));
    daemon.terminate();
    wait_gone(all);
    wait_gone(one);
}

#[test]
fn service_cpus_map_logical_cpus_round_robin_onto_the_real_ones() {
    let real = parse_cpu_list("2,5,9").unwrap();
    let same = ServiceCpus::new(real, None).unwrap();
    assert_eq!(same.offered(), &real);
    assert_eq!(same.to_real(&parse_cpu_list("5").unwrap()), parse_cpu_list("5").unwrap());

    let arm = ServiceCpus::new(real, Some(8)).unwrap();
    assert_eq!(format_cpu_list(arm.offered()), "0-7");
    assert_eq!(arm.real(), &real);
    let mapped = |l: &str| format_cpu_list(&arm.to_real(&parse_cpu_list(l).unwrap()));
    assert_eq!(mapped("0"), "2");
    assert_eq!(mapped("3"), "2");
    assert_eq!(mapped("1,4"), "5");
    assert_eq!(mapped("2,5"), "9");
    assert_eq!(mapped("6,7"), "2,5");
    assert_eq!(mapped("0-7"), "2,5,9");

    assert!(ServiceCpus::new(real, Some(0)).is_err());
    assert!(ServiceCpus::new(real, Some(MAX_ARM_CPUS)).is_ok());
    assert!(ServiceCpus::new(real, Some(MAX_ARM_CPUS + 1)).is_err());
}

#[test]
fn end_to_end_auth_refusal_and_stale_socket() {
    let dir = TempDir::new("auth");
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    let other = if me == 65534 { 65533 } else { 65534 };
    let sock = sock_path("auth");
    stale_socket(&sock);
    let mut daemon = DaemonProc::start(&sock, dir.path(), 4, Some(other), None);
    let c = Conn::connect(&sock);
    match c.reply().0 {
        Reply::Error { req: 0, status, .. } => assert_eq!(status, DOCA_ERROR_AUTHENTICATION),
        other => panic!("{other:?}"),
    }
    assert!(c.recv().0.is_empty(), "refused connections are closed");
    daemon.terminate();
    assert!(!sock.exists());
}

#[test]
fn plugin_names_drop_lib_prefix_and_so_suffix() {
    assert_eq!(plugins::plugin_name("libworker_graph.so"), Some("worker_graph"));
    assert_eq!(plugins::plugin_name("c_loopback.so"), Some("c_loopback"));
    assert_eq!(plugins::plugin_name("lib.so"), Some("lib"));
    assert_eq!(plugins::plugin_name("libworker_graph.so.1"), None);
    assert_eq!(plugins::plugin_name("README"), None);
}

#[test]
fn builtins_are_checked_like_loaded_plugins() {
    let none = urom_plugin_iface {
        __doca_api_version: UROM_PLUGIN_DOCA_API_VERSION,
        open: None,
        close: None,
        addr: None,
        worker_cmd: None,
        progress: None,
        notif_pack: None,
    };
    let b = [plugins::Builtin { name: "hollow", version: 1, iface: none, arm: None }];
    assert!(plugins::discover(&[], &b, &quiet()).list().is_empty(), "NULL entry points are refused");
}

/// A plugin with the soft-only `urom_plugin_soft_arm` (see `doca_urom_plugin.h`): `PARK` is
/// answered once a byte can be read from the FIFO named by `ARM_FIFO`, whose read end is the
/// fd it arms with; `STATS` answers "<progress calls> <arm calls>" (counted since the last
/// `STATS`); anything else is echoed.
const ARM_C: &str = concat!(
    c_abi!(),
    r#"
struct wctx { struct iface iface; void *dom[4]; void *plugin_ctx; };
struct state { struct list ready, parked; int fifo; unsigned long progress, arms; };

static void add_tail(struct list *h, struct list *e) { e->prev = h->prev; e->next = h; h->prev->next = e; h->prev = e; }
static void del(struct list *e) { e->prev->next = e->next; e->next->prev = e->prev; }
static void init(struct list *h) { h->prev = h->next = h; }

static doca_error_t p_open(struct wctx *ctx) {
    struct state *s = calloc(1, sizeof *s);
    if (!s) return 7;
    init(&s->ready); init(&s->parked);
    s->fifo = open(getenv("ARM_FIFO") ? getenv("ARM_FIFO") : "/nonexistent", O_RDWR | O_NONBLOCK);
    ctx->plugin_ctx = s;
    return 0;
}
static void p_close(struct wctx *ctx) { free(ctx->plugin_ctx); ctx->plugin_ctx = 0; }
static doca_error_t p_addr(struct wctx *ctx, void *addr, size_t *len) { (void)ctx; (void)addr; *len = 0; return 0; }
static struct notif_desc *answer(struct cmd_desc *c, const void *body, size_t len) {
    struct notif_desc *n = malloc(sizeof *n + len);
    n->dest_id = c->dest_id;
    n->n.type = c->c.type; n->n.ctx = c->c.ctx; n->n.len = len; n->n.status = 0; n->n.reserved = 0;
    memcpy(n->n.data, body, len);
    return n;
}
static doca_error_t p_cmd(struct wctx *ctx, struct list *cmds) {
    struct state *s = ctx->plugin_ctx;
    while (cmds->next != cmds) {
        struct cmd_desc *c = (struct cmd_desc *)cmds->next;
        del(&c->entry);
        const char *p = (const char *)c->c.data;
        size_t len = c->c.len;
        if (len == 4 && !memcmp(p, "PARK", 4)) {
            add_tail(&s->parked, &answer(c, p, len)->entry);
        } else if (len == 5 && !memcmp(p, "STATS", 5)) {
            char b[64];
            int n = snprintf(b, sizeof b, "%lu %lu", s->progress, s->arms);
            s->progress = s->arms = 0;
            add_tail(&s->ready, &answer(c, b, (size_t)n)->entry);
        } else {
            add_tail(&s->ready, &answer(c, p, len)->entry);
        }
        free(c);
    }
    return 0;
}
static doca_error_t p_progress(struct wctx *ctx, struct list *notifs) {
    struct state *s = ctx->plugin_ctx;
    char b;
    s->progress++;
    if (s->parked.next != &s->parked && read(s->fifo, &b, 1) == 1)
        while (s->parked.next != &s->parked) { struct list *e = s->parked.next; del(e); add_tail(&s->ready, e); }
    if (s->ready.next == &s->ready) return 25;
    while (s->ready.next != &s->ready) { struct list *e = s->ready.next; del(e); add_tail(notifs, e); }
    return 0;
}
static doca_error_t p_pack(struct notify *n, size_t *len, void *out) {
    if (*len < sizeof(*n) + n->len) return 6;
    memcpy(out, n, sizeof(*n) + n->len);
    *len = sizeof(*n) + n->len;
    return 0;
}
doca_error_t urom_plugin_get_iface(struct iface *i) {
    i->ver = (size_t)3 << 24 | 58;
    i->open = p_open; i->close = p_close; i->addr = p_addr; i->worker_cmd = p_cmd;
    i->progress = p_progress; i->notif_pack = p_pack;
    return 0;
}
doca_error_t urom_plugin_get_version(uint64_t *v) { *v = 1; return 0; }
doca_error_t urom_plugin_soft_arm(struct wctx *ctx, int *fd) {
    struct state *s = ctx->plugin_ctx;
    s->arms++;
    if (s->ready.next != &s->ready) return 11; /* DOCA_ERROR_AGAIN: answers wait */
    if (s->fifo < 0) return 14;                  /* cannot tell: poll me */
    *fd = s->fifo;
    return 0;
}
"#
);

/// A worker whose plugin exports `urom_plugin_soft_arm` sleeps on the plugin's fd while a
/// command waits, instead of calling `progress` in a loop, and wakes up when the fd becomes
/// readable. (Counts, not times, are asserted: a polling worker calls `progress` at least
/// once per millisecond of the wait, an armed one a few dozen times in all.)
#[test]
fn worker_sleeps_on_an_armed_plugins_fd() {
    let dir = TempDir::new("arm");
    if !cc(ARM_C, &[], &dir.path().join("armed.so")) {
        return;
    }
    let fifo = dir.path().join("wake.fifo");
    let cpath = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C path.
    assert_eq!(unsafe { libc::mkfifo(cpath.as_ptr(), 0o600) }, 0);
    let sock = sock_path("arm");
    let mut daemon = DaemonProc::start(&sock, dir.path(), 1, None, None);
    let (c, _) = Conn::hello(&sock);
    let env = format!("ARM_FIFO={}", fifo.display());
    let m = Request::Spawn {
        req: 2,
        worker_id: WORKER_ID_ANY,
        gid: 9,
        plugins: 1,
        cpuset: current_affinity().unwrap(),
        max_inflight: 4,
        env: vec![env],
    };
    c.send(&m.encode());
    let (Reply::Spawned { .. }, Some(fd)) = c.reply() else { panic!("spawn failed") };
    let w = Conn::new(fd);
    let stats = |ctx: u64| {
        w.command(ctx, 1, b"STATS");
        let (got, _, st, body) = w.notify();
        assert_eq!((got, st), (ctx, DOCA_SUCCESS));
        let text = String::from_utf8(body).unwrap();
        let v: Vec<u64> = text.split(' ').map(|n| n.parse().unwrap()).collect();
        (v[0], v[1])
    };
    // Echo works as usual.
    w.command(1, 1, b"echo");
    assert_eq!(w.notify(), (1, 1, DOCA_SUCCESS, b"echo".to_vec()));
    let (before, _) = stats(2);
    // Park a command for a while: the worker polls for ARMED_SPIN_TIME, then arms the plugin
    // and sleeps (the polling fallback made 578 calls in the same 300 ms).
    w.command(3, 1, b"PARK");
    // A window of 300 ms, again while the worker has not armed yet (a starved worker on a
    // loaded machine may not have reached its arming point in the first).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (mut before, mut ctx) = (before, 4);
    let (after, arms) = loop {
        std::thread::sleep(Duration::from_millis(300));
        let (after, arms) = stats(ctx);
        ctx += 1;
        if arms >= 1 || Instant::now() > deadline {
            break (after, arms);
        }
        before = after;
    };
    let polled = after - before;
    assert!(arms >= 1, "the worker never armed the plugin");
    assert!(polled < 250, "the worker polled progress {polled} times in 300 ms instead of sleeping");
    // A byte in the FIFO wakes it: the parked command is answered.
    let wfd = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    std::io::Write::write_all(&mut &wfd, b"x").unwrap();
    assert_eq!(w.notify(), (3, 1, DOCA_SUCCESS, b"PARK".to_vec()));
    drop(w);
    drop(c);
    daemon.terminate();
}
