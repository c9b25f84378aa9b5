//! The UROM wire protocol of the soft provider (docs/urom-soft.md, "The wire"), shared by the
//! host side (the service, worker and domain ctxs), the daemon and the worker process.
//!
//! Every connection is an `AF_UNIX` `SOCK_SEQPACKET` socket: one message per packet, so a
//! message never needs framing and a peer that dies shows up as a hang-up (`recv` of 0 bytes).
//! A message is `u32 tag` + fields, little-endian; `bytes` is `u32 len` + bytes, `str` is
//! `bytes` holding UTF-8, `vec<T>` is `u32 count` + items, a cpuset is 16 × `u64`.
//!
//! Decoding is strict: a packet that does not decode exactly (too short, trailing bytes,
//! unknown tag, a length or count that points beyond the packet, a `str` that is not UTF-8) is
//! `DOCA_ERROR_INVALID_VALUE`, and the receiver drops the connection. Decoding never panics and
//! never allocates more than the packet's own size, whatever a length field claims.
//!
//! The socket helpers at the end are plain `libc` wrappers: sockets are created `CLOEXEC`
//! (workers are forked, and a host may `exec`), sends use `MSG_NOSIGNAL` (a dead peer is an
//! `EPIPE` error, never a `SIGPIPE`), and received descriptors are `CLOEXEC` too.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::types::*;

/// The protocol version a `Hello` carries and a `Welcome` answers with.
pub const PROTO_VERSION: u32 = 1;
/// `DOCA_UROM_WORKER_ID_ANY`: in `Spawn`, let the daemon choose the worker id.
pub const WORKER_ID_ANY: u64 = !0;
/// The first id the daemon hands out for `WORKER_ID_ANY`; later ones count up from it.
pub const WORKER_ID_FIRST: u64 = 1 << 63;
/// What a message may carry beyond `max_msg_size` (headers, addresses, ...): a packet is at
/// most `max_msg_size + MSG_OVERHEAD` bytes.
pub const MSG_OVERHEAD: usize = 4096;
/// `plugin` of the `Notify` that answers `DomainCreate` / `DomainDestroy`.
pub const PLUGIN_NONE: u64 = 0;

/// The largest packet either side sends or accepts for a given `max_msg_size`.
pub const fn max_packet(max_msg_size: usize) -> usize {
    max_msg_size.saturating_add(MSG_OVERHEAD)
}

/// A CPU set on the wire: 1024 bits in 16 little-endian words, bit `n % 64` of word `n / 64`
/// is CPU `n` (the layout of `doca_cpu_set_t` on a 64-bit machine).
pub type CpuSet = [u64; 16];

/// Whether every CPU of `a` is in `b`.
pub fn cpuset_is_subset(a: &CpuSet, b: &CpuSet) -> bool {
    a.iter().zip(b.iter()).all(|(x, y)| x & !y == 0)
}

/// Whether `set` names no CPU.
pub fn cpuset_is_empty(set: &CpuSet) -> bool {
    set.iter().all(|w| *w == 0)
}

/// One plugin the daemon offers (an entry of `Welcome.plugins`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginInfo {
    /// One bit.
    pub id: u64,
    /// What `urom_plugin_get_version` returned.
    pub version: u64,
    /// The file name without `.so`.
    pub name: String,
}

/// The worker address one plugin reported (`addr` entry point).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginAddr {
    /// The plugin's id (one bit).
    pub plugin: u64,
    /// The bytes the plugin wrote.
    pub addr: Vec<u8>,
}

/// One registered buffer of a domain member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seg {
    pub va: u64,
    pub len: u64,
    pub memh: Vec<u8>,
    pub mkey: Vec<u8>,
}

/// One worker of a domain: its id, the addresses its plugins reported, its buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub worker_id: u64,
    pub addrs: Vec<PluginAddr>,
    pub segs: Vec<Seg>,
}

/// A domain as `DomainCreate` installs it in a worker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Domain {
    pub members: Vec<Member>,
}

/// Control connection, host → daemon. Every request carries the host's `req` key, echoed in
/// the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Tag 1. Must be the first message on a connection.
    Hello { req: u64, proto: u32, pid: u32, max_workers: u32, max_msg_size: u64 },
    /// Tag 2. Answered by `Spawned` (with the data connection's fd) or `Error`.
    Spawn { req: u64, worker_id: u64, gid: u32, plugins: u64, cpuset: CpuSet, max_inflight: u32, env: Vec<String> },
    /// Tag 3. Detaches this connection from the worker; answered by `Stopped` or `Error`.
    Stop { req: u64, worker_id: u64 },
    /// Tag 4. Answered by `Workers`.
    WorkersByGid { req: u64, gid: u32 },
}

/// Control connection, daemon → host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Tag 1. `max_msg_size` is the effective one (the smaller of the host's and the daemon's).
    Welcome { req: u64, proto: u32, max_msg_size: u64, max_workers: u32, cpuset: CpuSet, plugins: Vec<PluginInfo> },
    /// Tag 2. Sent with one fd (SCM_RIGHTS): the data connection to the worker, in blocking
    /// mode (the host sets `O_NONBLOCK` itself if it wants it).
    Spawned { req: u64, worker_id: u64, pid: u32, addrs: Vec<PluginAddr> },
    /// Tag 3.
    Stopped { req: u64, worker_id: u64 },
    /// Tag 4.
    Workers { req: u64, ids: Vec<u64> },
    /// Tag 5. `req` is 0 for a refusal at accept (the daemon has not read a request yet).
    Error { req: u64, status: doca_error_t, reason: String },
    /// Tag 6, unsolicited: a worker this connection is attached to died.
    WorkerExited { worker_id: u64, status: doca_error_t, how: String },
}

/// Data connection, host → worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostToWorker {
    /// Tag 1. `ctx` is the host's key for the task, echoed by the `Notify`.
    Command { ctx: u64, plugin: u64, payload: Vec<u8> },
    /// Tag 2. Answered by `Notify { plugin: 0 }`.
    DomainCreate { ctx: u64, domain: Domain },
    /// Tag 3. Answered by `Notify { plugin: 0 }`.
    DomainDestroy { ctx: u64 },
    /// Tag 4, the connection's first message when the host offers a shared-memory channel
    /// (`urom::channel`), with three descriptors: the memory file, the worker's wake-up
    /// eventfd, the host's. The fields are the channel's geometry, checked by the worker.
    /// Not answered: a worker that cannot attach keeps using the socket alone.
    Channel { slots: u32, slot_bytes: u32 },
}

/// Data connection, worker → host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerToHost {
    /// Tag 1. `packed` is what the plugin's `notif_pack` wrote (empty when `status` is an
    /// error the worker produced itself).
    Notify { ctx: u64, plugin: u64, status: doca_error_t, packed: Vec<u8> },
}

/// Worker control, worker → daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerToDaemon {
    /// Tag 1. Every plugin opened; their addresses.
    Ready { addrs: Vec<PluginAddr> },
    /// Tag 2. The worker could not start; it exits after sending this.
    Failed { status: doca_error_t, reason: String },
}

/// Worker control, daemon → worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DaemonToWorker {
    /// Tag 1. Sent with one fd: a new data connection, named `conn` in the worker (`dest_id`).
    Attach { conn: u64 },
    /// Tag 2. Close the plugins and exit.
    Exit,
}

// ----------------------------------------------------------------------------------------------
// Encoding

struct Writer(Vec<u8>);

impl Writer {
    fn new(tag: u32) -> Self {
        Writer::with_capacity(tag, 64)
    }
    /// A writer whose buffer holds `bytes` (the whole message, when its size is known) without
    /// growing.
    fn with_capacity(tag: u32, bytes: usize) -> Self {
        let mut w = Writer(Vec::with_capacity(bytes));
        w.u32(tag);
        w
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn status(&mut self, v: doca_error_t) {
        self.0.extend_from_slice(&v.0.to_le_bytes());
    }
    fn len(&mut self, n: usize) {
        self.u32(field_len(n));
    }
    fn bytes(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.extend_from_slice(b);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn cpuset(&mut self, c: &CpuSet) {
        for w in c {
            self.u64(*w);
        }
    }
    fn vec<T>(&mut self, items: &[T], mut f: impl FnMut(&mut Self, &T)) {
        self.len(items.len());
        for i in items {
            f(self, i);
        }
    }
    fn addrs(&mut self, a: &[PluginAddr]) {
        self.vec(a, |w, a| {
            w.u64(a.plugin);
            w.bytes(&a.addr);
        });
    }
    fn domain(&mut self, d: &Domain) {
        self.vec(&d.members, |w, m| {
            w.u64(m.worker_id);
            w.addrs(&m.addrs);
            w.vec(&m.segs, |w, s| {
                w.u64(s.va);
                w.u64(s.len);
                w.bytes(&s.memh);
                w.bytes(&s.mkey);
            });
        });
    }
}

/// A field's length as the wire carries it. Every message is bounded by max_msg_size + 4096,
/// far below 4 GiB; a longer field is a caller bug that must not silently wrap into a
/// different, valid-looking message.
fn field_len(n: usize) -> u32 {
    u32::try_from(n).expect("UROM wire field longer than 4 GiB")
}

/// The head of a packet whose body is sent beside it: `fields` (little-endian encodings, in
/// `Writer`'s order) side by side in an array of exactly their length.
fn head<const N: usize>(fields: &[&[u8]]) -> [u8; N] {
    let mut h = [0u8; N];
    let mut at = 0;
    for f in fields {
        h[at..at + f.len()].copy_from_slice(f);
        at += f.len();
    }
    debug_assert_eq!(at, N, "a head's fields fill it");
    h
}

struct Reader<'a> {
    buf: &'a [u8],
}

type R<T> = Result<T, doca_error_t>;

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if n > self.buf.len() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u32(&mut self) -> R<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> R<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn status(&mut self) -> R<doca_error_t> {
        Ok(doca_error_t(self.u32()? as i32))
    }
    fn bytes(&mut self) -> R<Vec<u8>> {
        Ok(self.bytes_ref()?.to_vec())
    }
    fn bytes_ref(&mut self) -> R<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn str(&mut self) -> R<String> {
        String::from_utf8(self.bytes()?).map_err(|_| DOCA_ERROR_INVALID_VALUE)
    }
    fn cpuset(&mut self) -> R<CpuSet> {
        let mut c = [0u64; 16];
        for w in c.iter_mut() {
            *w = self.u64()?;
        }
        Ok(c)
    }
    /// `vec<T>`; `min_item` is the smallest encoding of one item, so a count that cannot fit
    /// in what is left is refused before anything is allocated.
    fn vec<T>(&mut self, min_item: usize, mut f: impl FnMut(&mut Self) -> R<T>) -> R<Vec<T>> {
        let n = self.u32()? as usize;
        if n.checked_mul(min_item).is_none_or(|need| need > self.buf.len()) {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(f(self)?);
        }
        Ok(v)
    }
    fn addrs(&mut self) -> R<Vec<PluginAddr>> {
        self.vec(12, |r| Ok(PluginAddr { plugin: r.u64()?, addr: r.bytes()? }))
    }
    fn domain(&mut self) -> R<Domain> {
        let members = self.vec(16, |r| {
            let worker_id = r.u64()?;
            let addrs = r.addrs()?;
            let segs = r.vec(24, |r| Ok(Seg { va: r.u64()?, len: r.u64()?, memh: r.bytes()?, mkey: r.bytes()? }))?;
            Ok(Member { worker_id, addrs, segs })
        })?;
        Ok(Domain { members })
    }
    fn end<T>(self, v: T) -> R<T> {
        if self.buf.is_empty() {
            Ok(v)
        } else {
            Err(DOCA_ERROR_INVALID_VALUE)
        }
    }
}

impl Request {
    /// The packet for this message.
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            Request::Hello { req, proto, pid, max_workers, max_msg_size } => {
                let mut w = Writer::new(1);
                w.u64(*req);
                w.u32(*proto);
                w.u32(*pid);
                w.u32(*max_workers);
                w.u64(*max_msg_size);
                w
            }
            Request::Spawn { req, worker_id, gid, plugins, cpuset, max_inflight, env } => {
                let mut w = Writer::new(2);
                w.u64(*req);
                w.u64(*worker_id);
                w.u32(*gid);
                w.u64(*plugins);
                w.cpuset(cpuset);
                w.u32(*max_inflight);
                w.vec(env, |w, s| w.str(s));
                w
            }
            Request::Stop { req, worker_id } => {
                let mut w = Writer::new(3);
                w.u64(*req);
                w.u64(*worker_id);
                w
            }
            Request::WorkersByGid { req, gid } => {
                let mut w = Writer::new(4);
                w.u64(*req);
                w.u32(*gid);
                w
            }
        };
        w.0
    }

    /// Decodes one packet exactly; anything else is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode(buf: &[u8]) -> Result<Self, doca_error_t> {
        let mut r = Reader { buf };
        let m = match r.u32()? {
            1 => Request::Hello {
                req: r.u64()?,
                proto: r.u32()?,
                pid: r.u32()?,
                max_workers: r.u32()?,
                max_msg_size: r.u64()?,
            },
            2 => Request::Spawn {
                req: r.u64()?,
                worker_id: r.u64()?,
                gid: r.u32()?,
                plugins: r.u64()?,
                cpuset: r.cpuset()?,
                max_inflight: r.u32()?,
                env: r.vec(4, |r| r.str())?,
            },
            3 => Request::Stop { req: r.u64()?, worker_id: r.u64()? },
            4 => Request::WorkersByGid { req: r.u64()?, gid: r.u32()? },
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        r.end(m)
    }
}

impl Reply {
    /// The packet for this message.
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            Reply::Welcome { req, proto, max_msg_size, max_workers, cpuset, plugins } => {
                let mut w = Writer::new(1);
                w.u64(*req);
                w.u32(*proto);
                w.u64(*max_msg_size);
                w.u32(*max_workers);
                w.cpuset(cpuset);
                w.vec(plugins, |w, p| {
                    w.u64(p.id);
                    w.u64(p.version);
                    w.str(&p.name);
                });
                w
            }
            Reply::Spawned { req, worker_id, pid, addrs } => {
                let mut w = Writer::new(2);
                w.u64(*req);
                w.u64(*worker_id);
                w.u32(*pid);
                w.addrs(addrs);
                w
            }
            Reply::Stopped { req, worker_id } => {
                let mut w = Writer::new(3);
                w.u64(*req);
                w.u64(*worker_id);
                w
            }
            Reply::Workers { req, ids } => {
                let mut w = Writer::new(4);
                w.u64(*req);
                w.vec(ids, |w, id| w.u64(*id));
                w
            }
            Reply::Error { req, status, reason } => {
                let mut w = Writer::new(5);
                w.u64(*req);
                w.status(*status);
                w.str(reason);
                w
            }
            Reply::WorkerExited { worker_id, status, how } => {
                let mut w = Writer::new(6);
                w.u64(*worker_id);
                w.status(*status);
                w.str(how);
                w
            }
        };
        w.0
    }

    /// Decodes one packet exactly; anything else is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode(buf: &[u8]) -> Result<Self, doca_error_t> {
        let mut r = Reader { buf };
        let m = match r.u32()? {
            1 => Reply::Welcome {
                req: r.u64()?,
                proto: r.u32()?,
                max_msg_size: r.u64()?,
                max_workers: r.u32()?,
                cpuset: r.cpuset()?,
                plugins: r.vec(20, |r| Ok(PluginInfo { id: r.u64()?, version: r.u64()?, name: r.str()? }))?,
            },
            2 => Reply::Spawned { req: r.u64()?, worker_id: r.u64()?, pid: r.u32()?, addrs: r.addrs()? },
            3 => Reply::Stopped { req: r.u64()?, worker_id: r.u64()? },
            4 => Reply::Workers { req: r.u64()?, ids: r.vec(8, |r| r.u64())? },
            5 => Reply::Error { req: r.u64()?, status: r.status()?, reason: r.str()? },
            6 => Reply::WorkerExited { worker_id: r.u64()?, status: r.status()?, how: r.str()? },
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        r.end(m)
    }
}

/// Bytes of a `Command` packet before its payload: tag, ctx, plugin, the payload's length.
pub const COMMAND_HEAD: usize = 4 + 8 + 8 + 4;
/// Bytes of a `Notify` packet before its notification: tag, ctx, plugin, status, length.
pub const NOTIFY_HEAD: usize = 4 + 8 + 8 + 4 + 4;

/// A `Command` whose payload is borrowed from the packet ([`HostToWorker::decode_command`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandRef<'a> {
    pub ctx: u64,
    pub plugin: u64,
    pub payload: &'a [u8],
}

/// A `Notify` whose notification is borrowed from the packet ([`WorkerToHost::decode_notify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifyRef<'a> {
    pub ctx: u64,
    pub plugin: u64,
    pub status: doca_error_t,
    pub packed: &'a [u8],
}

impl HostToWorker {
    /// The bytes of a `Command` packet before its payload. The packet is these bytes then the
    /// payload: a sender that writes both into place (a channel slot) needs no packet buffer.
    pub fn command_head(ctx: u64, plugin: u64, payload_len: usize) -> [u8; COMMAND_HEAD] {
        let len = field_len(payload_len);
        head(&[&1u32.to_le_bytes(), &ctx.to_le_bytes(), &plugin.to_le_bytes(), &len.to_le_bytes()])
    }

    /// The packet of a `Command`, from a borrowed payload: [`HostToWorker::command_head`] and
    /// the payload in one buffer of their exact size.
    pub fn encode_command(ctx: u64, plugin: u64, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::with_capacity(COMMAND_HEAD + payload.len());
        v.extend_from_slice(&Self::command_head(ctx, plugin, payload.len()));
        v.extend_from_slice(payload);
        v
    }

    /// A `Command` packet, its payload borrowed from `buf` (what a
    /// worker does with every command: no copy before the one into the plugin's desc).
    /// `Ok(None)`: another message, for [`HostToWorker::decode`]. As strict as `decode`: a
    /// malformed command is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode_command(buf: &[u8]) -> Result<Option<CommandRef<'_>>, doca_error_t> {
        let mut r = Reader { buf };
        if r.u32()? != 1 {
            return Ok(None);
        }
        let c = CommandRef { ctx: r.u64()?, plugin: r.u64()?, payload: r.bytes_ref()? };
        r.end(Some(c))
    }

    /// The packet for this message.
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            HostToWorker::Command { ctx, plugin, payload } => return Self::encode_command(*ctx, *plugin, payload),
            HostToWorker::DomainCreate { ctx, domain } => {
                let mut w = Writer::new(2);
                w.u64(*ctx);
                w.domain(domain);
                w
            }
            HostToWorker::DomainDestroy { ctx } => {
                let mut w = Writer::new(3);
                w.u64(*ctx);
                w
            }
            HostToWorker::Channel { slots, slot_bytes } => {
                let mut w = Writer::new(4);
                w.u32(*slots);
                w.u32(*slot_bytes);
                w
            }
        };
        w.0
    }

    /// Decodes one packet exactly; anything else is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode(buf: &[u8]) -> Result<Self, doca_error_t> {
        let mut r = Reader { buf };
        let m = match r.u32()? {
            1 => HostToWorker::Command { ctx: r.u64()?, plugin: r.u64()?, payload: r.bytes()? },
            2 => HostToWorker::DomainCreate { ctx: r.u64()?, domain: r.domain()? },
            3 => HostToWorker::DomainDestroy { ctx: r.u64()? },
            4 => HostToWorker::Channel { slots: r.u32()?, slot_bytes: r.u32()? },
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        r.end(m)
    }
}

impl WorkerToHost {
    /// The bytes of a `Notify` packet before its notification (see
    /// [`HostToWorker::command_head`]).
    pub fn notify_head(ctx: u64, plugin: u64, status: doca_error_t, packed_len: usize) -> [u8; NOTIFY_HEAD] {
        let len = field_len(packed_len);
        head(&[
            &1u32.to_le_bytes(),
            &ctx.to_le_bytes(),
            &plugin.to_le_bytes(),
            &status.0.to_le_bytes(),
            &len.to_le_bytes(),
        ])
    }

    /// The packet for this message.
    pub fn encode(&self) -> Vec<u8> {
        let WorkerToHost::Notify { ctx, plugin, status, packed } = self;
        let mut v = Vec::with_capacity(NOTIFY_HEAD + packed.len());
        v.extend_from_slice(&Self::notify_head(*ctx, *plugin, *status, packed.len()));
        v.extend_from_slice(packed);
        v
    }

    /// Decodes one packet exactly, the notification borrowed from `buf`; anything else is
    /// `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode_notify(buf: &[u8]) -> Result<NotifyRef<'_>, doca_error_t> {
        let mut r = Reader { buf };
        let n = match r.u32()? {
            1 => NotifyRef { ctx: r.u64()?, plugin: r.u64()?, status: r.status()?, packed: r.bytes_ref()? },
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        r.end(n)
    }

    /// Decodes one packet exactly; anything else is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode(buf: &[u8]) -> Result<Self, doca_error_t> {
        let n = Self::decode_notify(buf)?;
        Ok(WorkerToHost::Notify { ctx: n.ctx, plugin: n.plugin, status: n.status, packed: n.packed.to_vec() })
    }
}

impl WorkerToDaemon {
    /// The packet for this message.
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            WorkerToDaemon::Ready { addrs } => {
                let mut w = Writer::new(1);
                w.addrs(addrs);
                w
            }
            WorkerToDaemon::Failed { status, reason } => {
                let mut w = Writer::new(2);
                w.status(*status);
                w.str(reason);
                w
            }
        };
        w.0
    }

    /// Decodes one packet exactly; anything else is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode(buf: &[u8]) -> Result<Self, doca_error_t> {
        let mut r = Reader { buf };
        let m = match r.u32()? {
            1 => WorkerToDaemon::Ready { addrs: r.addrs()? },
            2 => WorkerToDaemon::Failed { status: r.status()?, reason: r.str()? },
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        r.end(m)
    }
}

impl DaemonToWorker {
    /// The packet for this message.
    pub fn encode(&self) -> Vec<u8> {
        let w = match self {
            DaemonToWorker::Attach { conn } => {
                let mut w = Writer::new(1);
                w.u64(*conn);
                w
            }
            DaemonToWorker::Exit => Writer::new(2),
        };
        w.0
    }

    /// Decodes one packet exactly; anything else is `DOCA_ERROR_INVALID_VALUE`.
    pub fn decode(buf: &[u8]) -> Result<Self, doca_error_t> {
        let mut r = Reader { buf };
        let m = match r.u32()? {
            1 => DaemonToWorker::Attach { conn: r.u64()? },
            2 => DaemonToWorker::Exit,
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        };
        r.end(m)
    }
}

// ----------------------------------------------------------------------------------------------
// Sockets

/// `$XDG_RUNTIME_DIR`, or `/tmp` when it is unset or empty: where sockets go by default.
fn runtime_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()).map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// The default socket of docs/urom-soft.md (rule 3 of "Finding the daemon", and the daemon's
/// default `--socket`): `$XDG_RUNTIME_DIR/async-doca-urom-<uid>.sock`, `/tmp` without
/// `XDG_RUNTIME_DIR`.
pub fn default_socket_path() -> PathBuf {
    // SAFETY: getuid cannot fail.
    runtime_dir().join(format!("async-doca-urom-{}.sock", unsafe { libc::getuid() }))
}

/// The socket named by a service file's `dev_hostname` (rule 2 of "Finding the daemon"): the
/// name itself if it contains a `/`, else `$XDG_RUNTIME_DIR/async-doca-urom-<name>.sock`.
pub fn service_socket_path(dev_hostname: &str) -> PathBuf {
    if dev_hostname.contains('/') {
        PathBuf::from(dev_hostname)
    } else {
        runtime_dir().join(format!("async-doca-urom-{dev_hostname}.sock"))
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn sock_flags(nonblock: bool) -> libc::c_int {
    libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | if nonblock { libc::SOCK_NONBLOCK } else { 0 }
}

/// A new, unconnected `AF_UNIX` `SOCK_SEQPACKET` socket (`CLOEXEC`, and `O_NONBLOCK` if asked).
pub fn seqpacket_socket(nonblock: bool) -> io::Result<OwnedFd> {
    // SAFETY: socket() takes no pointers; a non-negative result is a new fd we own.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, sock_flags(nonblock), 0) })?;
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A connected pair of `SOCK_SEQPACKET` sockets (`CLOEXEC`, and `O_NONBLOCK` if asked).
pub fn seqpacket_pair(nonblock: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1 as RawFd; 2];
    // SAFETY: `fds` is a valid array of two ints for socketpair() to fill.
    cvt(unsafe { libc::socketpair(libc::AF_UNIX, sock_flags(nonblock), 0, fds.as_mut_ptr()) })?;
    // SAFETY: both fds were just created by socketpair() and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `sockaddr_un` for `path`; paths that do not fit (108 bytes with the NUL) or hold a NUL are
/// `InvalidInput`.
pub fn unix_addr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad socket path {}", path.display())));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = (size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    Ok((addr, len))
}

/// Connects a new `SOCK_SEQPACKET` socket to the daemon listening at `path`. The connect
/// itself blocks (it is local and immediate unless the backlog is full); the socket is then
/// switched to `O_NONBLOCK` if asked. No listener is `ECONNREFUSED` or `ENOENT`.
pub fn connect(path: &Path, nonblock: bool) -> io::Result<OwnedFd> {
    let (addr, len) = unix_addr(path)?;
    let fd = seqpacket_socket(false)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; `fd` is a live socket we own.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) })?;
    if nonblock {
        set_nonblocking(fd.as_fd(), true)?;
    }
    Ok(fd)
}

/// Sets or clears `O_NONBLOCK`.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: fcntl on a live fd with integer arguments only.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let flags = if on { flags | libc::O_NONBLOCK } else { flags & !libc::O_NONBLOCK };
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags) })?;
    Ok(())
}

/// Raises the socket's send buffer so one packet of `packet` bytes fits: on `AF_UNIX`
/// `SOCK_SEQPACKET` a packet larger than `SO_SNDBUF` is `EMSGSIZE`. Best effort (the kernel
/// caps it at `wmem_max`); a send that still does not fit fails loudly.
pub fn fit_packet(fd: BorrowedFd<'_>, packet: usize) -> io::Result<()> {
    let want = libc::c_int::try_from(packet.saturating_mul(2).saturating_add(4096)).unwrap_or(libc::c_int::MAX);
    let mut cur: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `cur`/`len` are valid out-pointers of the right size for SO_SNDBUF.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&mut cur as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    if cur >= want {
        return Ok(());
    }
    // SAFETY: `want` is a valid c_int option value of the stated size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&want as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// The most descriptors one packet passes (a channel's three, `HostToWorker::Channel`).
pub const MAX_PASSED_FDS: usize = 3;

/// Room for [`MAX_PASSED_FDS`] `SCM_RIGHTS` descriptors in a control buffer
/// (`CMSG_SPACE(3 * sizeof(int))` is 32 on 64-bit Linux; 64 leaves margin and keeps the buffer
/// `cmsghdr`-aligned through `u64`).
const CMSG_WORDS: usize = 8;

/// Sends one packet, with `pass` attached as `SCM_RIGHTS` if given. `MSG_NOSIGNAL`: a closed
/// peer is `EPIPE`. On a non-blocking socket a full buffer is `WouldBlock` and nothing was sent.
pub fn send_msg(fd: BorrowedFd<'_>, bytes: &[u8], pass: Option<BorrowedFd<'_>>) -> io::Result<()> {
    send_msg_fds(fd, bytes, pass.as_slice())
}

/// As [`send_msg`], with up to [`MAX_PASSED_FDS`] descriptors attached.
pub fn send_msg_fds(fd: BorrowedFd<'_>, bytes: &[u8], pass: &[BorrowedFd<'_>]) -> io::Result<()> {
    assert!(pass.len() <= MAX_PASSED_FDS, "at most {MAX_PASSED_FDS} descriptors per packet");
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    let mut cbuf = [0u64; CMSG_WORDS];
    // SAFETY: msghdr is plain old data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !pass.is_empty() {
        let bytes = (pass.len() * size_of::<RawFd>()) as u32;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(bytes) } as usize;
        debug_assert!(space <= size_of::<[u64; CMSG_WORDS]>());
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points to `space` zeroed, aligned bytes that we own, so
        // CMSG_FIRSTHDR returns a valid header inside it and CMSG_DATA has room for
        // `pass.len()` ints.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as _;
            for (i, p) in pass.iter().enumerate() {
                std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>().add(i), p.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` points to the iovec and control buffer above, alive for the call.
        let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            // SEQPACKET sends are atomic: all or an error.
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Receives one packet into `buf`. Returns its length and the descriptor passed with it, if
/// any (`CLOEXEC`). A length of 0 is the peer's hang-up (no message of this protocol is
/// empty). A packet longer than `buf` is `InvalidData` (the rest was discarded by the kernel,
/// so the connection must be dropped); so is a truncated control message. Extra descriptors
/// beyond the first are closed. On a non-blocking socket no packet is `WouldBlock`.
pub fn recv_msg(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    let (n, mut fds) = recv_msg_fds(fd, buf)?;
    fds.truncate(1);
    Ok((n, fds.pop()))
}

/// As [`recv_msg`], returning every descriptor passed with the packet (in order).
pub fn recv_msg_fds(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let mut cbuf = [0u64; CMSG_WORDS];
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr().cast();
    msg.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
    let n = loop {
        // SAFETY: `msg` points to `buf` and `cbuf`, both alive and writable for the call.
        let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    // Take ownership of every received descriptor first, so none leaks on the error paths.
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG_* walk stays inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / size_of::<RawFd>() {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    // The kernel installed this fd in our table for us: we own it now.
                    fds.push(OwnedFd::from_raw_fd(raw));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_TRUNC != 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "packet larger than the receive buffer"));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "control message truncated"));
    }
    Ok((n, fds))
}

/// The credentials of the process at the other end of a connected `AF_UNIX` socket, as the
/// kernel recorded them at `connect` (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected socket.
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    // SAFETY: ucred is plain old data; all-zero is a valid value.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred`/`len` are valid out-pointers of the right size for SO_PEERCRED.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(PeerCred { pid: cred.pid as u32, uid: cred.uid, gid: cred.gid })
}

#[cfg(test)]
mod tests;
