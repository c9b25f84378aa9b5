//! Whole sessions with the soft UROM daemon over its real socket: the input is a script of
//! steps — well-formed requests with fuzzed fields (Hello, Spawn, Stop, WorkersByGid, in any
//! order, repeated), well-formed requests with one byte changed, raw packets, reads of the
//! answers, hang-ups and reconnections, several connections at once. The daemon runs on its
//! own thread for the whole fuzzing run (workers disabled: `max_workers` 0, so a Spawn is
//! answered, never forked). Checked: every packet the daemon sends decodes as a `Reply`, and
//! after each session a fresh connection still gets its `Welcome` (the daemon neither died
//! nor hung, and kept serving). A daemon panic aborts the process (a crash for libFuzzer).
#![no_main]

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use doca_soft::urom::daemon::{Config, Daemon, LogLevel};
use doca_soft::urom::proto::{recv_msg, send_msg, CpuSet, Reply, Request, PROTO_VERSION};
use libfuzzer_sys::fuzz_target;

/// The daemon's socket, started once per fuzzing process.
fn daemon() -> &'static PathBuf {
    static SOCKET: OnceLock<PathBuf> = OnceLock::new();
    SOCKET.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("urom-session-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("urom.sock");
        let mut cfg = Config::new(socket.clone());
        cfg.plugin_path = Vec::new();
        cfg.max_workers = 0;
        cfg.log_level = LogLevel::Error;
        // The daemon is bound on its own thread (it is not `Send`); the socket is ready when
        // the thread says so.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let d = Daemon::bind(cfg).expect("bind the daemon");
            tx.send(()).unwrap();
            if let Err(e) = d.serve() {
                eprintln!("urom_session: the daemon stopped: {e}");
                std::process::abort();
            }
        });
        rx.recv().expect("the daemon thread bound its socket");
        socket
    })
}

/// A SEQPACKET connection to the daemon (what the host side uses).
fn connect() -> OwnedFd {
    let path = daemon();
    // SAFETY: plain socket(2); the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor we own.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: sockaddr_un is plain old data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: `addr` is a valid sockaddr_un for the length given.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
    let t = libc::timeval { tv_sec: 0, tv_usec: 20_000 };
    // SAFETY: a valid timeval for SO_RCVTIMEO on our socket.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&t as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
    fd
}

/// Reads what the daemon sent (until a short timeout): every packet must be a `Reply`.
/// Returns false when the daemon hung up.
fn drain(fd: &OwnedFd) -> bool {
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match recv_msg(fd.as_fd(), &mut buf) {
            Ok((0, _)) => return false,
            Ok((n, _)) => {
                if let Err(e) = Reply::decode(&buf[..n]) {
                    panic!("the daemon sent a packet that is not a Reply ({e:?}): {:?}", &buf[..n.min(64)]);
                }
            }
            Err(_) => return true, // timeout (or a reset): nothing more now
        }
    }
}

/// The fuzzer's bytes, read as the script's values.
struct Script<'a>(&'a [u8]);

impl Script<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |v, _| (v << 8) | u64::from(self.u8().unwrap_or(0)))
    }
    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let n = (self.u8().unwrap_or(0) as usize).min(max).min(self.0.len());
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        b.to_vec()
    }
    fn request(&mut self) -> Request {
        let req = self.u64() & 0xFF;
        match self.u8().unwrap_or(0) % 4 {
            0 => Request::Hello {
                req,
                proto: if self.u8().unwrap_or(0) < 200 { PROTO_VERSION } else { self.u64() as u32 },
                pid: self.u64() as u32,
                max_workers: self.u64() as u32 % 8,
                max_msg_size: self.u64() % (1 << 24),
            },
            1 => {
                let mut cpuset: CpuSet = [0; 16];
                cpuset[0] = self.u64();
                let env = (0..self.u8().unwrap_or(0) % 3)
                    .map(|_| String::from_utf8_lossy(&self.bytes(32)).into_owned())
                    .collect();
                Request::Spawn {
                    req,
                    worker_id: self.u64(),
                    gid: self.u64() as u32,
                    plugins: self.u64(),
                    cpuset,
                    max_inflight: self.u64() as u32,
                    env,
                }
            }
            2 => Request::Stop { req, worker_id: self.u64() },
            _ => Request::WorkersByGid { req, gid: self.u64() as u32 },
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut s = Script(data);
    // Up to three connections at once; step i acts on connection `which`.
    let mut conns: Vec<Option<OwnedFd>> = vec![None, None, None];
    let mut steps = 0;
    while let Some(op) = s.u8() {
        steps += 1;
        if steps > 64 {
            break;
        }
        let which = (op >> 5) as usize % conns.len();
        let fd = conns[which].get_or_insert_with(connect);
        let sent = match op % 6 {
            0 | 1 => send_msg(fd.as_fd(), &s.request().encode(), None),
            2 => {
                let mut m = s.request().encode();
                let at = s.u8().unwrap_or(0) as usize % m.len();
                m[at] ^= s.u8().unwrap_or(1) | 1;
                send_msg(fd.as_fd(), &m, None)
            }
            3 => {
                let raw = s.bytes(255);
                if raw.is_empty() {
                    Ok(())
                } else {
                    send_msg(fd.as_fd(), &raw, None)
                }
            }
            4 => {
                if !drain(fd) {
                    conns[which] = None; // the daemon hung up on it (a protocol error)
                }
                Ok(())
            }
            _ => {
                conns[which] = None; // hang up
                Ok(())
            }
        };
        if sent.is_err() {
            conns[which] = None; // the daemon closed it already
        }
    }
    for c in conns.iter().flatten() {
        drain(c);
    }
    drop(conns);
    // The daemon still serves: a fresh Hello is welcomed.
    let fd = connect();
    let hello =
        Request::Hello { req: 7, proto: PROTO_VERSION, pid: std::process::id(), max_workers: 0, max_msg_size: 4096 };
    send_msg(fd.as_fd(), &hello.encode(), None).expect("send Hello");
    let mut buf = vec![0u8; 1 << 20];
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match recv_msg(fd.as_fd(), &mut buf) {
            Ok((n, _)) if n > 0 => match Reply::decode(&buf[..n]) {
                Ok(Reply::Welcome { req: 7, .. }) => break,
                other => panic!("a fresh Hello got {other:?}"),
            },
            Ok(_) => panic!("the daemon hung up on a fresh Hello"),
            Err(_) if Instant::now() < until => continue,
            Err(e) => panic!("no Welcome within 10 s after the session: {e}"),
        }
    }
});
