//! The worker side of `worker_sandbox`: tagged send/receive between the workers of a UROM
//! domain (formats in the parent module).
//!
//! # Model
//! * **Transport.** Each plugin instance (one per worker process) owns a non-blocking
//!   `AF_UNIX` datagram socket bound in `open` to an abstract name unique per instance
//!   (`async-doca-urom-sandbox-<pid>-<n>-<random>`); that name is the plugin's address, which
//!   the domain exchange spreads to the other members. A datagram is `tag: u64` (LE) followed
//!   by the data; datagram boundaries are the message boundaries. The socket closes when the
//!   worker closes the plugin.
//! * **Send.** `TagSend` looks up the destination member's address (`WorkerCtx::addr`) and
//!   sends at once; if the receiver's queue is full (`EAGAIN`) the message waits in a FIFO that
//!   `progress` retries, and later sends queue behind it so one sender's messages keep their
//!   order. `SendDone` answers the command once the kernel took the datagram. An unknown
//!   member is `NOT_FOUND`, a member whose socket is gone `NOT_CONNECTED`, more than
//!   `MAX_DATA` bytes `TOO_BIG`.
//! * **Receive.** `progress` drains the socket (bounded per call) and matches each message to
//!   the oldest pending `TagRecv` of its tag; a message nobody waits for is queued per tag
//!   and answers the next `TagRecv` of that tag immediately.
//! * **Trust.** Abstract socket names carry no permissions: any process in the same network
//!   namespace that learns the name (they are listed in `/proc/net/unix`) can send to it.
//!   This is a sample: it accepts such messages like any other and queues them without bound.
use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Cmd, Notif, MAX_DATA, VERSION};
use crate::{Command, Notifications, Plugin, ReplyTo, Status, WorkerCtx};

/// Datagram header: the tag.
const TAG_LEN: usize = 8;
/// Datagrams handled per `progress` call, so one call never runs unbounded.
const DRAIN_PER_PROGRESS: usize = 256;

/// Distinguishes instances within one process (tests open several).
static INSTANCE: AtomicU64 = AtomicU64::new(0);

/// A message waiting for room in its receiver's queue.
struct PendingSend {
    reply: ReplyTo,
    tag: u64,
    to: SocketAddr,
    datagram: Vec<u8>,
}

/// One sandbox instance: its socket and the queues described in the crate docs.
pub struct Sandbox {
    sock: UnixDatagram,
    name: Vec<u8>,
    sends: VecDeque<PendingSend>,
    recvs: HashMap<u64, VecDeque<ReplyTo>>,
    unexpected: HashMap<u64, VecDeque<Vec<u8>>>,
    buf: Vec<u8>,
}

/// Takes the oldest entry queued under `tag`, dropping the tag's queue once empty so tags
/// used once do not accumulate.
fn pop_tag<T>(map: &mut HashMap<u64, VecDeque<T>>, tag: u64) -> Option<T> {
    let q = map.get_mut(&tag)?;
    let v = q.pop_front();
    if q.is_empty() {
        map.remove(&tag);
    }
    v
}

fn bind_unique() -> Result<(UnixDatagram, Vec<u8>), Status> {
    let pid = std::process::id();
    let mut last = Status::UNEXPECTED;
    // A clash needs the same pid, counter and 64 random bits; retry a few times anyway
    // rather than fail on a freak collision.
    for _ in 0..8 {
        let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let random = RandomState::new().hash_one((pid, n, std::time::SystemTime::now()));
        let name = format!("async-doca-urom-sandbox-{pid}-{n}-{random:016x}").into_bytes();
        let addr = SocketAddr::from_abstract_name(&name).map_err(|e| Status::from_io(&e))?;
        match UnixDatagram::bind_addr(&addr) {
            Ok(sock) => {
                sock.set_nonblocking(true).map_err(|e| Status::from_io(&e))?;
                return Ok((sock, name));
            }
            Err(e) if e.kind() == ErrorKind::AddrInUse => last = Status::ALREADY_EXIST,
            Err(e) => return Err(Status::from_io(&e)),
        }
    }
    Err(last)
}

impl Sandbox {
    /// Tries to send `p` now: `Ok(true)` sent, `Ok(false)` the receiver's queue is full.
    fn try_send(&self, p: &PendingSend) -> Result<bool, Status> {
        match self.sock.send_to_addr(&p.datagram, &p.to) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(Status::from_io(&e)),
        }
    }

    /// Sends queued messages in order until one finds its receiver full.
    fn flush_sends(&mut self, out: &mut Notifications) {
        while let Some(p) = self.sends.front() {
            let outcome = self.try_send(p);
            match outcome {
                Ok(false) => break,
                Ok(true) => out.push(p.reply.ok(Notif::SendDone { tag: p.tag }.encode())),
                Err(s) => out.push(p.reply.error(s)),
            }
            self.sends.pop_front();
        }
    }

    fn deliver(&mut self, tag: u64, data: Vec<u8>, out: &mut Notifications) {
        match pop_tag(&mut self.recvs, tag) {
            Some(reply) => out.push(reply.ok(Notif::Received { tag, data }.encode())),
            None => self.unexpected.entry(tag).or_default().push_back(data),
        }
    }

    fn drain_socket(&mut self, out: &mut Notifications) {
        for _ in 0..DRAIN_PER_PROGRESS {
            let n = match self.sock.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    eprintln!("worker_sandbox: receive failed: {e}");
                    return;
                }
            };
            // The buffer is one byte larger than the largest valid datagram, so a full buffer
            // means a truncated, foreign message; shorter than a tag is foreign too.
            if n < TAG_LEN || n == self.buf.len() {
                eprintln!("worker_sandbox: dropped a malformed datagram of {n} bytes");
                continue;
            }
            let mut tag = [0u8; TAG_LEN];
            tag.copy_from_slice(&self.buf[..TAG_LEN]);
            let data = self.buf[TAG_LEN..n].to_vec();
            self.deliver(u64::from_le_bytes(tag), data, out);
        }
    }
}

impl Plugin for Sandbox {
    const VERSION: u64 = VERSION;

    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        let (sock, name) = bind_unique()?;
        Ok(Sandbox {
            sock,
            name,
            sends: VecDeque::new(),
            recvs: HashMap::new(),
            unexpected: HashMap::new(),
            buf: vec![0; TAG_LEN + MAX_DATA + 1],
        })
    }

    fn address(&self) -> &[u8] {
        &self.name
    }

    fn command(&mut self, ctx: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
        match Cmd::decode(cmd.payload)? {
            Cmd::TagSend { dest, tag, data } => {
                if data.len() > MAX_DATA {
                    return Err(Status::TOO_BIG);
                }
                let to = SocketAddr::from_abstract_name(ctx.addr(dest)?).map_err(|_| Status::INVALID_VALUE)?;
                let mut datagram = Vec::with_capacity(TAG_LEN + data.len());
                datagram.extend_from_slice(&tag.to_le_bytes());
                datagram.extend_from_slice(&data);
                let p = PendingSend { reply: cmd.reply_to(), tag, to, datagram };
                // Behind earlier queued sends, so messages leave in command order.
                if self.sends.is_empty() && self.try_send(&p)? {
                    out.push(p.reply.ok(Notif::SendDone { tag }.encode()));
                } else {
                    self.sends.push_back(p);
                }
            }
            Cmd::TagRecv { tag } => match pop_tag(&mut self.unexpected, tag) {
                Some(data) => out.push(cmd.reply_to().ok(Notif::Received { tag, data }.encode())),
                None => self.recvs.entry(tag).or_default().push_back(cmd.reply_to()),
            },
        }
        Ok(())
    }

    fn progress(&mut self, _: &WorkerCtx, out: &mut Notifications) {
        self.flush_sends(out);
        self.drain_socket(out);
    }
}
