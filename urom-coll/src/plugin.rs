//! [`CollPlugin`]: the worker side of `worker_coll` (see the crate docs for the model).

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::rc::Rc;

use coll_algorithms::{
    Comm, Completion, Error, Kind, Matcher, Sent, Tag, Transport, TransportError, TransportErrorKind,
};
use doca_sys as sys;
use doca_urom_plugin::wire::bind_unique_datagram;
use doca_urom_plugin::{Arm, Command, Notifications, Plugin, ReplyTo, Status, WorkerCtx};

use crate::proto::{Cmd, CollSpec, Notif, MAX_MEMBERS, VERSION};
use crate::rdma::{status as status_from, ChunkHeader, Event, Rdma, CHUNK, IO_MAX, SEND_SLOTS};

/// Bytes the engine may have queued for sending before `send` answers [`Sent::Busy`] (a
/// single larger message is still taken when nothing is queued).
const SEND_WINDOW_BYTES: usize = 8 << 20;
/// The largest message a peer may announce (the soft provider's own message limit).
const MAX_MESSAGE: u64 = 1 << 30;
/// Passes of one progress call at most (see [`CollPlugin::step`]): the input's read and the
/// result's write, and one more for a transfer that a completed one made room for.
const PASSES_PER_STEP: usize = 3;
/// Control datagrams handled per progress call.
const DRAIN_PER_PROGRESS: usize = 64;
/// Magic of a hello datagram ("DCH1").
const HELLO_MAGIC: u32 = u32::from_le_bytes(*b"DCH1");
/// Hello header: magic u32, from_rank u32, from_member u64, to_member u64, then the blob.
const HELLO_HDR: usize = 24;
/// Largest control datagram accepted (blobs are a few hundred bytes).
const MAX_HELLO: usize = 64 * 1024;

/// Where the engine's whole messages wait: those arrived and not asked for yet, and those
/// accepted and not yet handed to RDMA. The engine reaches it through [`Wire`]; the plugin
/// moves the bytes ([`Group::pump`], [`Group::on_chunk`]).
struct Mailbox {
    rank: usize,
    size: usize,
    matcher: Matcher,
    /// Messages accepted from the engine, not yet fully handed to RDMA, oldest first.
    out: VecDeque<Outgoing>,
    out_bytes: usize,
    /// Messages being reassembled from chunks, by (sender, tag bits).
    partial: HashMap<(usize, u64), Partial>,
    /// Set once the network failed: every later operation fails with it.
    error: Option<TransportError>,
}

struct Outgoing {
    to: usize,
    tag: u64,
    data: Vec<u8>,
    /// Bytes handed to RDMA so far (an empty message is one header-only chunk).
    off: usize,
}

struct Partial {
    data: Vec<u8>,
    got: usize,
}

impl Mailbox {
    fn fail(&mut self, e: TransportError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }
}

impl Mailbox {
    /// Queues a message for [`Group::pump`]: `Busy` when the queue holds its window already.
    fn queue(&mut self, to: usize, tag: Tag, parts: &[&[u8]], len: usize) -> Sent {
        if self.out_bytes > 0 && self.out_bytes + len > SEND_WINDOW_BYTES {
            return Sent::Busy;
        }
        self.out.push_back(Outgoing { to, tag: tag.to_bits(), data: parts.concat(), off: 0 });
        self.out_bytes += len;
        Sent::Accepted
    }
}

/// The engine's transport during one [`Comm::progress`]: the mailbox, and what it takes to
/// hand a message to RDMA at once. A message that fits one chunk, with nothing queued before
/// it and a send slot free, goes straight from the engine's parts into the slot; the rest is
/// queued in the mailbox for [`Group::pump`]. The direct way spares the common small message
/// its assembly into a queued `Vec` (an allocation and a copy) and a trip through the queue,
/// on the collective's critical path: the peer waits for it.
struct Wire<'a> {
    mail: &'a mut Mailbox,
    net: &'a mut Rdma,
    peers: &'a [Option<Peer>],
    slot_seq: &'a mut [Option<u32>],
    /// A message went to RDMA from here (movement, as in [`Group::pump`]).
    sent: bool,
}

impl Transport for Wire<'_> {
    fn rank(&self) -> usize {
        self.mail.rank
    }

    fn size(&self) -> usize {
        self.mail.size
    }

    fn send(&mut self, to: usize, tag: Tag, parts: &[&[u8]]) -> Result<Sent, TransportError> {
        if let Some(e) = &self.mail.error {
            return Err(e.clone());
        }
        if to >= self.mail.size || to == self.mail.rank {
            return Err(TransportError::other(Some(to), "no such peer"));
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let peer = self.peers.get(to).and_then(Option::as_ref);
        if let Some(peer) = peer.filter(|_| self.mail.out.is_empty() && len <= CHUNK) {
            let h = ChunkHeader { from: self.mail.rank, tag: tag.to_bits(), off: 0, total: len as u64 };
            match self.net.send(peer.conn, &h.encode(), parts) {
                Ok(Some(slot)) => {
                    self.slot_seq[slot] = Some(tag.seq());
                    self.sent = true;
                    return Ok(Sent::Accepted);
                }
                // No slot free: queued below.
                Ok(None) => {}
                Err(s) => {
                    let e = send_failed(to, s);
                    self.mail.fail(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(self.mail.queue(to, tag, parts, len))
    }

    fn recv(&mut self, from: usize, tag: Tag, buf: &mut Vec<u8>) -> Result<Option<usize>, TransportError> {
        if let Some(n) = self.mail.matcher.recv_into(from, tag, buf) {
            return Ok(Some(n));
        }
        match &self.mail.error {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }
}

/// The failure of an RDMA send to member `to`: the peer counts as gone.
fn send_failed(to: usize, s: Status) -> TransportError {
    TransportError::peer_gone(to, format!("RDMA send failed: {s}"))
}

/// One peer of the group.
struct Peer {
    conn: *mut sys::doca_rdma_connection,
    /// The hello datagram for this peer (our blob for it) and where it goes.
    hello: Vec<u8>,
    to: SocketAddr,
    hello_sent: bool,
    /// Our connection for this peer is connected to its blob.
    connected: bool,
}

/// Where a collective is.
enum Stage {
    /// Waiting for a free transfer slot to read `src` from the host.
    NeedRead,
    Reading(u64),
    /// Input ready, waiting for the earlier collectives to be submitted.
    Ready(Vec<u8>),
    /// Submitted to the engine under this sequence number.
    Running(u32),
    NeedWrite(Vec<u8>),
    Writing(u64),
    Done,
    Failed(Status, String),
}

#[derive(Clone)]
struct HostRegion {
    /// Shared with the [`Regions`] cache and the other collectives on the same buffer.
    mkey: Rc<[u8]>,
    va: u64,
    len: usize,
}

/// The host buffers this group's collectives used, as looked up through the worker: a host
/// issues its collectives on the same few buffers, and each lookup took two segment lookups
/// and a key lookup through the worker (~700 instructions in the soft worker) and a copy of the
/// ~100-byte key, for each of a collective's two buffers. A domain's segments are fixed while
/// it lives, which the group does not outlive, so a range found once stays where it was.
#[derive(Default)]
struct Regions {
    /// The regions found, most recently added last.
    known: Vec<HostRegion>,
}

impl Regions {
    /// Buffers remembered at most; beyond, the oldest is forgotten.
    const MAX: usize = 16;

    /// The region of `len` bytes at `va` of member `own`'s registered memory: remembered, or
    /// looked up through `ctx`.
    fn get(&mut self, ctx: &WorkerCtx, own: u64, va: u64, len: u64) -> Result<HostRegion, Status> {
        if let Some(r) = self.known.iter().find(|r| r.va == va && r.len as u64 == len) {
            return Ok(r.clone());
        }
        let len_usize = usize::try_from(len).map_err(|_| Status::INVALID_VALUE)?;
        let last = va.checked_add(len - 1).ok_or(Status::INVALID_VALUE)?;
        let seg = ctx.segment_of(own, va)?;
        // The whole range must be inside that one segment: a range that starts in one and
        // ends elsewhere is a bad length, not a missing buffer.
        if ctx.segment_of(own, last) != Ok(seg) {
            return Err(Status::INVALID_VALUE);
        }
        let r = HostRegion { mkey: Rc::from(ctx.mkey(own, seg)?), va, len: len_usize };
        if self.known.len() == Self::MAX {
            self.known.remove(0);
        }
        self.known.push(r.clone());
        Ok(r)
    }
}

enum OpKind {
    /// `invalid`: a stand-in for a collective whose arguments the host rejected
    /// ([`Cmd::Invalid`]); it fails on every member.
    Coll {
        spec: CollSpec,
        src: Option<HostRegion>,
        dst: Option<HostRegion>,
        invalid: bool,
    },
    Fini,
}

struct Op {
    reply: ReplyTo,
    kind: OpKind,
    stage: Stage,
    /// The engine's sequence number once submitted.
    comm_seq: Option<u32>,
}

/// This worker's membership in a group, from `Init` to `Fini`.
struct Group {
    rank: usize,
    members: Vec<u64>,
    host_conn: *mut sys::doca_rdma_connection,
    peers: Vec<Option<Peer>>,
    comm: Comm,
    mail: Mailbox,
    ops: VecDeque<Op>,
    /// The engine sequence number of the chunk in each send slot, while it is in flight.
    slot_seq: Vec<Option<u32>>,
    /// Large buffers kept for reuse (see [`Spare`]).
    spare: Spare,
    regions: Regions,
}

impl Group {
    /// Whether bytes of collective `seq` still wait to leave (queued, or in a send task that
    /// has not completed). The worker stops calling `progress` once every command is
    /// answered, so a collective is only answered once its messages are out: a root whose
    /// broadcast finished locally must not strand the chunks its children wait for.
    fn sending(&self, seq: Option<u32>) -> bool {
        if self.mail.error.is_some() {
            // Nothing leaves any more.
            return false;
        }
        let queued = |o: &Outgoing| seq.is_none_or(|s| Tag::from_bits(o.tag).seq() == s);
        self.mail.out.iter().any(queued) || self.slot_seq.iter().any(|x| x.is_some() && (seq.is_none() || *x == seq))
    }

    fn all_connected(&self) -> bool {
        self.peers.iter().flatten().all(|p| p.connected)
    }

    /// Hands queued message bytes to RDMA while send slots are free; whether it sent any.
    fn pump(&mut self, net: &mut Rdma) -> bool {
        let mut sent = false;
        while let Some(o) = self.mail.out.front_mut() {
            if self.mail.error.is_some() || !net.can_send() {
                return sent;
            }
            let Some(peer) = self.peers.get(o.to).and_then(Option::as_ref) else { return sent };
            let n = (o.data.len() - o.off).min(CHUNK);
            let h = ChunkHeader { from: self.rank, tag: o.tag, off: o.off as u64, total: o.data.len() as u64 };
            match net.send(peer.conn, &h.encode(), &[&o.data[o.off..o.off + n]]) {
                Ok(Some(slot)) => {
                    sent = true;
                    self.slot_seq[slot] = Some(Tag::from_bits(o.tag).seq());
                    o.off += n;
                    if o.off == o.data.len() {
                        self.mail.out_bytes -= o.data.len();
                        self.mail.out.pop_front();
                    }
                }
                Ok(None) => return sent,
                Err(s) => {
                    let e = send_failed(o.to, s);
                    self.mail.fail(e);
                    return sent;
                }
            }
        }
        sent
    }

    /// Files one received chunk.
    fn on_chunk(&mut self, data: &[u8]) -> Result<(), String> {
        let (ChunkHeader { from, tag, off, total }, payload) = ChunkHeader::decode(data)?;
        if from >= self.mail.size || from == self.rank {
            return Err("a chunk with a bad header".into());
        }
        let end = off.checked_add(payload.len() as u64).filter(|&e| e <= total && total <= MAX_MESSAGE);
        let Some(end) = end else { return Err(format!("a chunk beyond its message from member {from}")) };
        if off == 0 && end == total {
            self.mail.matcher.push(from, Tag::from_bits(tag), payload.to_vec());
            return Ok(());
        }
        let p = self
            .mail
            .partial
            .entry((from, tag))
            .or_insert_with(|| Partial { data: self.spare.take(total as usize), got: 0 });
        if p.data.len() as u64 != total {
            return Err(format!("chunks of one message from member {from} disagree on its length"));
        }
        p.data[off as usize..end as usize].copy_from_slice(payload);
        p.got += payload.len();
        if p.got as u64 == total {
            let p = self.mail.partial.remove(&(from, tag)).expect("just filled");
            self.mail.matcher.push(from, Tag::from_bits(tag), p.data);
        }
        Ok(())
    }

    /// Starts host transfers for collectives that need one, while transfer slots are free.
    /// Whether it started any.
    fn start_io(&mut self, net: &mut Rdma) -> bool {
        let mut any = false;
        for op in self.ops.iter_mut() {
            if net.io_in_flight() >= IO_MAX {
                return any;
            }
            let OpKind::Coll { src, dst, .. } = &op.kind else { continue };
            let started = match &mut op.stage {
                Stage::NeedRead => {
                    let r = src.as_ref().expect("NeedRead has a source");
                    let into = self.spare.take(r.len);
                    net.start_read(self.host_conn, &r.mkey, r.va, into).map(Stage::Reading)
                }
                Stage::NeedWrite(data) => {
                    let r = dst.as_ref().expect("NeedWrite has a destination");
                    net.start_write(self.host_conn, &r.mkey, r.va, std::mem::take(data)).map(Stage::Writing)
                }
                _ => continue,
            };
            any |= started.is_ok();
            op.stage = started.unwrap_or_else(|s| Stage::Failed(s, format!("RDMA transfer with the host failed: {s}")));
        }
        any
    }

    /// Submits ready collectives to the engine, in command order.
    fn submit(&mut self) {
        for op in self.ops.iter_mut() {
            let OpKind::Coll { spec, invalid, .. } = &op.kind else { continue };
            match &mut op.stage {
                Stage::NeedRead | Stage::Reading(_) => return,
                Stage::Ready(input) => {
                    let input = std::mem::take(input);
                    let c = &mut self.comm;
                    let seq = match spec.kind {
                        _ if *invalid => {
                            c.invalid(spec.kind, format!("member {}'s host rejected its arguments", self.rank))
                        }
                        Kind::Allreduce => c.allreduce(spec.dtype, spec.op, input),
                        Kind::Allgather => c.allgather(input),
                        Kind::Broadcast => c.broadcast(spec.root as usize, input),
                        Kind::Barrier => c.barrier(),
                        Kind::ReduceScatter => c.reduce_scatter(spec.dtype, spec.op, input),
                    };
                    op.stage = Stage::Running(seq);
                    op.comm_seq = Some(seq);
                }
                _ => {}
            }
        }
    }

    fn on_completion(&mut self, c: Completion) {
        let Some(op) = self.ops.iter_mut().find(|op| matches!(op.stage, Stage::Running(s) if s == c.seq)) else {
            return;
        };
        let OpKind::Coll { dst, .. } = &op.kind else { return };
        op.stage = match c.result {
            Ok(out) if dst.is_none() => {
                if out.is_empty() {
                    Stage::Done
                } else {
                    Stage::Failed(Status::UNEXPECTED, format!("the collective produced {} bytes for none", out.len()))
                }
            }
            Ok(out) if Some(out.len()) == dst.as_ref().map(|d| d.len) => Stage::NeedWrite(out),
            Ok(out) => Stage::Failed(Status::UNEXPECTED, format!("the collective produced {} bytes", out.len())),
            Err(e) => Stage::Failed(status_of(&e), e.to_string()),
        };
    }

    fn on_io(&mut self, id: u64, status: sys::doca_error_t, mem: Vec<u8>) {
        let Some(op) =
            self.ops.iter_mut().find(|op| matches!(op.stage, Stage::Reading(i) | Stage::Writing(i) if i == id))
        else {
            return;
        };
        let st = status_from(status);
        op.stage = match (&op.stage, st.is_success()) {
            (Stage::Reading(_), true) => Stage::Ready(mem),
            (Stage::Writing(_), true) => {
                self.spare.give(mem);
                Stage::Done
            }
            (_, false) => Stage::Failed(st, format!("RDMA transfer with the host failed: {st}")),
            _ => unreachable!("matched Reading or Writing above"),
        };
    }
}

/// A few large buffers kept for reuse: results written to the host come back here and become
/// the staging memory of later reads and the reassembly buffers of large messages. Large
/// allocations are fresh pages from the kernel each time, and faulting them in cost more than
/// the copies of a megabyte-sized allreduce.
#[derive(Default)]
struct Spare(Vec<Vec<u8>>);

impl Spare {
    /// Buffers kept at most.
    const MAX: usize = 8;
    /// Smaller buffers are not worth keeping (the allocator recycles them itself).
    const MIN_CAPACITY: usize = 128 * 1024;

    /// A zeroed buffer of `len` bytes, reused when one is big enough.
    fn take(&mut self, len: usize) -> Vec<u8> {
        match self.0.iter().position(|b| b.capacity() >= len) {
            Some(i) if len >= Self::MIN_CAPACITY => {
                let mut b = self.0.swap_remove(i);
                b.clear();
                b.resize(len, 0);
                b
            }
            _ => vec![0; len],
        }
    }

    fn give(&mut self, b: Vec<u8>) {
        if b.capacity() >= Self::MIN_CAPACITY {
            if self.0.len() == Self::MAX {
                // Keep the larger ones: they serve every smaller request too.
                let smallest = (0..self.0.len()).min_by_key(|&i| self.0[i].capacity()).expect("MAX > 0");
                if self.0[smallest].capacity() >= b.capacity() {
                    return;
                }
                self.0.swap_remove(smallest);
            }
            self.0.push(b);
        }
    }
}

/// How a failed collective is reported to the host.
fn status_of(e: &Error) -> Status {
    match e {
        Error::Invalid(_) | Error::Mismatch { .. } => Status::INVALID_VALUE,
        Error::Protocol { .. } => Status::IO_FAILED,
        // A peer that lost a member broke the group; one that saw bad or mismatched
        // arguments did not.
        Error::Aborted { peer_lost: true, .. } => Status::CONNECTION_ABORTED,
        Error::Aborted { .. } => Status::INVALID_VALUE,
        Error::Transport(t) if t.kind == TransportErrorKind::PeerGone => Status::CONNECTION_ABORTED,
        Error::Transport(_) => Status::IO_FAILED,
        _ => Status::UNEXPECTED,
    }
}

enum State {
    Idle,
    Active(Box<Group>),
    Finished,
}

/// The `worker_coll` plugin (one per worker process); see the crate docs.
pub struct CollPlugin {
    state: State,
    /// Hellos that arrived before `Init` (a faster peer), by sender rank.
    early: HashMap<usize, (u64, u64, Vec<u8>)>,
    sock: UnixDatagram,
    name: Vec<u8>,
    buf: Vec<u8>,
    /// What the worker sleeps on (see [`Plugin::arm`]): an epoll set of the PE's notification
    /// handle and, while hellos are expected, the socket.
    wake: Wake,
    // Last: dropped after the group, whose raw connection pointers it owns.
    net: Rdma,
}

impl CollPlugin {
    fn init(&mut self, ctx: &WorkerCtx, cmd: &Command<'_>, init: Cmd, out: &mut Notifications) -> Result<(), Status> {
        let Cmd::Init { rank, members, host_blob, tuning } = init else { unreachable!("called with Init") };
        if !matches!(self.state, State::Idle) {
            return Err(Status::BAD_STATE);
        }
        let rank = rank as usize;
        let mut sorted = members.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if members.is_empty() || members.len() > MAX_MEMBERS || rank >= members.len() || sorted.len() != members.len() {
            return Err(Status::INVALID_VALUE);
        }
        let tuning = tuning.to_tuning().ok_or(Status::INVALID_VALUE)?;
        let own = members[rank];
        // Every lookup before any export, so a member missing from the domain wastes no
        // connection (a ctx exports a bounded number per start).
        let mut addrs = Vec::with_capacity(members.len());
        for (r, &m) in members.iter().enumerate() {
            addrs.push(if r == rank {
                None
            } else {
                Some(SocketAddr::from_abstract_name(ctx.addr(m)?).map_err(|_| Status::INVALID_VALUE)?)
            });
        }
        let mut peers = Vec::with_capacity(members.len());
        for (&m, to) in members.iter().zip(addrs) {
            let Some(to) = to else {
                peers.push(None);
                continue;
            };
            let (blob, conn) = self.net.export()?;
            let mut hello = Vec::with_capacity(HELLO_HDR + blob.len());
            hello.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
            hello.extend_from_slice(&(rank as u32).to_le_bytes());
            hello.extend_from_slice(&own.to_le_bytes());
            hello.extend_from_slice(&m.to_le_bytes());
            hello.extend_from_slice(&blob);
            peers.push(Some(Peer { conn, hello, to, hello_sent: false, connected: false }));
        }
        let (worker_blob, host_conn) = self.net.export()?;
        self.net.connect(host_conn, &host_blob)?;
        let size = members.len();
        let mut g = Box::new(Group {
            rank,
            members,
            host_conn,
            peers,
            comm: Comm::new(tuning),
            mail: Mailbox {
                rank,
                size,
                matcher: Matcher::new(),
                out: VecDeque::new(),
                out_bytes: 0,
                partial: HashMap::new(),
                error: None,
            },
            ops: VecDeque::new(),
            slot_seq: vec![None; SEND_SLOTS],
            spare: Spare::default(),
            regions: Regions::default(),
        });
        for (from, (from_member, to_member, blob)) in std::mem::take(&mut self.early) {
            apply_hello(&mut g, &mut self.net, from, from_member, to_member, &blob);
        }
        self.state = State::Active(g);
        self.send_hellos();
        out.push(cmd.reply_to().ok(Notif::InitDone { worker_blob }.encode()));
        Ok(())
    }

    fn coll(&mut self, ctx: &WorkerCtx, cmd: &Command<'_>, spec: CollSpec) -> Result<(), Status> {
        let State::Active(g) = &mut self.state else { return Err(Status::BAD_STATE) };
        if g.ops.back().is_some_and(|o| matches!(o.kind, OpKind::Fini)) {
            return Err(Status::BAD_STATE);
        }
        spec.check(g.members.len(), g.rank).map_err(|_| Status::INVALID_VALUE)?;
        let own = g.members[g.rank];
        let regions = &mut g.regions;
        let mut region = |va: u64, len: u64| -> Result<Option<HostRegion>, Status> {
            if len == 0 {
                return Ok(None);
            }
            regions.get(ctx, own, va, len).map(Some)
        };
        let (_, dst_len) = spec.expected_lengths(g.members.len()).ok_or(Status::INVALID_VALUE)?;
        let needs_src = !(spec.kind == Kind::Broadcast && spec.root as usize != g.rank);
        let src = if needs_src { region(spec.src_va, spec.src_len)? } else { None };
        let dst = region(spec.dst_va, spec.dst_len)?;
        let stage = match &src {
            Some(_) => Stage::NeedRead,
            // A non-root's broadcast input only gives the length; an empty source is empty input.
            None => Stage::Ready(vec![0; if needs_src { 0 } else { dst_len as usize }]),
        };
        g.ops.push_back(Op {
            reply: cmd.reply_to(),
            kind: OpKind::Coll { spec, src, dst, invalid: false },
            stage,
            comm_seq: None,
        });
        Ok(())
    }

    /// Sends the hellos not sent yet; a peer whose socket is gone fails the group.
    fn send_hellos(&mut self) {
        let State::Active(g) = &mut self.state else { return };
        for (r, p) in g.peers.iter_mut().enumerate() {
            let Some(p) = p else { continue };
            if p.hello_sent {
                continue;
            }
            match self.sock.send_to_addr(&p.hello, &p.to) {
                Ok(_) => p.hello_sent = true,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => {
                    p.hello_sent = true;
                    g.mail.fail(TransportError::peer_gone(r, format!("cannot reach member {r}'s worker: {e}")));
                }
            }
        }
    }

    fn drain_socket(&mut self) {
        for _ in 0..DRAIN_PER_PROGRESS {
            let n = match self.sock.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let d = &self.buf[..n];
            // Anything else on the socket is foreign (abstract names carry no permissions).
            if n < HELLO_HDR || n == self.buf.len() || d[0..4] != HELLO_MAGIC.to_le_bytes() {
                continue;
            }
            let from = u32::from_le_bytes(d[4..8].try_into().expect("4 bytes")) as usize;
            let from_member = u64::from_le_bytes(d[8..16].try_into().expect("8 bytes"));
            let to_member = u64::from_le_bytes(d[16..24].try_into().expect("8 bytes"));
            let blob = d[HELLO_HDR..].to_vec();
            match &mut self.state {
                State::Active(g) => apply_hello(g, &mut self.net, from, from_member, to_member, &blob),
                State::Idle if from < MAX_MEMBERS => {
                    self.early.insert(from, (from_member, to_member, blob));
                }
                _ => {}
            }
        }
    }

    fn on_events(&mut self) {
        while let Some(ev) = self.net.next_event() {
            match ev {
                Event::Recv { slot, len, status } => {
                    if status != sys::DOCA_SUCCESS {
                        // The ctx is in the error state (a peer vanished or a receive
                        // failed): nothing will arrive any more.
                        if let State::Active(g) = &mut self.state {
                            let st = status_from(status);
                            g.mail.fail(TransportError {
                                kind: TransportErrorKind::PeerGone,
                                peer: None,
                                message: format!("RDMA receive failed: {st}"),
                            });
                        }
                        continue;
                    }
                    if let State::Active(g) = &mut self.state {
                        let r = g.on_chunk(self.net.recv_data(slot, len));
                        if let Err(m) = r {
                            g.mail.fail(TransportError::other(None, m));
                        }
                    }
                    if let Err(s) = self.net.post_recv(slot) {
                        if let State::Active(g) = &mut self.state {
                            // Only a broken ctx refuses a receive (a peer vanished and DOCA
                            // moved it to the error state): nothing will arrive any more.
                            g.mail.fail(TransportError {
                                kind: TransportErrorKind::PeerGone,
                                peer: None,
                                message: format!("reposting a receive failed: {s}"),
                            });
                        }
                    }
                }
                Event::Send { slot, status } => {
                    self.net.send_done(slot);
                    if let State::Active(g) = &mut self.state {
                        if let Some(x) = g.slot_seq.get_mut(slot) {
                            *x = None;
                        }
                    }
                    if status != sys::DOCA_SUCCESS {
                        if let State::Active(g) = &mut self.state {
                            let st = status_from(status);
                            g.mail.fail(TransportError {
                                kind: TransportErrorKind::PeerGone,
                                peer: None,
                                message: format!("RDMA send failed: {st}"),
                            });
                        }
                    }
                }
                Event::Io { id, status } => {
                    let mem = self.net.finish_io(id).unwrap_or_default();
                    if let State::Active(g) = &mut self.state {
                        g.on_io(id, status, mem);
                        if status != sys::DOCA_SUCCESS {
                            // A failed task breaks every connection of the ctx.
                            let st = status_from(status);
                            g.mail.fail(TransportError::other(None, format!("RDMA with the host failed: {st}")));
                        }
                    }
                }
            }
        }
    }

    /// Answers the finished operations at the front, in command order.
    fn answer(&mut self, out: &mut Notifications) {
        let State::Active(g) = &mut self.state else { return };
        while let Some(op) = g.ops.front() {
            // Fini waits for every message of the group to be out; a collective for its own
            // (one never submitted sent nothing).
            let waiting = match (&op.kind, op.comm_seq) {
                (OpKind::Fini, _) => g.sending(None),
                (OpKind::Coll { .. }, Some(seq)) => g.sending(Some(seq)),
                (OpKind::Coll { .. }, None) => false,
            };
            if waiting {
                return;
            }
            let n = match (&op.kind, &op.stage) {
                (OpKind::Fini, _) => op.reply.ok(Notif::FiniDone.encode()),
                (OpKind::Coll { spec, .. }, Stage::Done) => op.reply.ok(Notif::CollDone { seq: spec.seq }.encode()),
                (OpKind::Coll { spec, .. }, Stage::Failed(s, why)) => {
                    op.reply.with(*s, Notif::Failed { seq: spec.seq, reason: why.clone() }.encode())
                }
                _ => return,
            };
            let fini = matches!(op.kind, OpKind::Fini);
            g.ops.pop_front();
            out.push(n);
            if fini {
                self.state = State::Finished;
                return;
            }
        }
    }

    /// Whether anything moved: an RDMA completion, a transfer or a send started, an answer.
    fn step(&mut self, out: &mut Notifications) -> bool {
        let mut moved = false;
        // A pass that started a transfer with the host goes round again: a transfer may have
        // completed already (the soft provider moves the bytes at submit and queues the
        // completion for the next `doca_pe_progress`), and taking it now saves the collective
        // a trip round the worker's loop twice (the read of its input, the write of its
        // result), each a `sched_yield` when the loop sees no progress. On hardware the
        // second pass finds nothing and costs one empty `doca_pe_progress`.
        for _ in 0..PASSES_PER_STEP {
            let (started, other) = self.pass(out);
            moved |= started || other;
            if !started {
                break;
            }
        }
        let answered = out.len();
        self.answer(out);
        moved || out.len() != answered
    }

    /// One pass of [`CollPlugin::step`]: whether it started a transfer with the host, and
    /// whether anything else moved (an RDMA completion, a message handed to RDMA).
    fn pass(&mut self, out: &mut Notifications) -> (bool, bool) {
        let mut progressed = self.net.progress();
        if progressed {
            // RDMA completions (chunks in or out, host transfers): a long collective is
            // moving even while it has nothing to answer yet.
            out.made_progress();
        }
        self.on_events();
        // Hellos are all the socket carries: once every peer is connected (or the group is
        // over) it is not read, which spares a system call per progress.
        let listening = match &self.state {
            State::Idle => true,
            State::Active(g) => !g.all_connected(),
            State::Finished => false,
        };
        if listening {
            self.drain_socket();
            self.send_hellos();
        }
        let State::Active(g) = &mut self.state else { return (false, progressed) };
        let mut started = g.start_io(&mut self.net);
        g.submit();
        if g.all_connected() || g.mail.error.is_some() {
            let mut wire =
                Wire { mail: &mut g.mail, net: &mut self.net, peers: &g.peers, slot_seq: &mut g.slot_seq, sent: false };
            let done = g.comm.progress(&mut wire);
            progressed |= wire.sent;
            for c in done {
                g.on_completion(c);
            }
            // Abort notices and strays of collectives no longer in flight are never asked
            // for: drop them (sequence numbers wrap, hence the signed distance).
            let oldest = g.comm.next_seq().wrapping_sub(g.comm.in_flight() as u32);
            if g.comm.in_flight() == 0 || g.mail.matcher.len() > 1024 {
                g.mail.matcher.retain(|_, t| (t.seq().wrapping_sub(oldest) as i32) >= 0);
            }
            progressed |= g.pump(&mut self.net);
        }
        started |= g.start_io(&mut self.net);
        (started, progressed)
    }
}

/// An epoll set for the worker to sleep on (see [`CollPlugin::arm`]).
struct Wake {
    fd: OwnedFd,
    /// Whether the socket is in the set.
    socket: bool,
}

impl Wake {
    /// A set holding the PE's notification handle `pe_fd`.
    fn new(pe_fd: RawFd) -> Result<Wake, Status> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(Status::from_io(&std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor that nothing else owns.
        let wake = Wake { fd: unsafe { OwnedFd::from_raw_fd(fd) }, socket: false };
        wake.ctl(libc::EPOLL_CTL_ADD, pe_fd)?;
        Ok(wake)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd) -> Result<(), Status> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
        // SAFETY: our epoll fd, a live `fd` of this plugin, a valid event.
        if unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) } < 0 {
            return Err(Status::from_io(&std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Puts the socket in the set or takes it out.
    fn watch_socket(&mut self, sock: RawFd, on: bool) -> Result<(), Status> {
        if on != self.socket {
            self.ctl(if on { libc::EPOLL_CTL_ADD } else { libc::EPOLL_CTL_DEL }, sock)?;
            self.socket = on;
        }
        Ok(())
    }
}

/// Connects our connection for `from` with the blob of its hello.
fn apply_hello(g: &mut Group, net: &mut Rdma, from: usize, from_member: u64, to_member: u64, blob: &[u8]) {
    if g.members.get(from) != Some(&from_member) || g.members[g.rank] != to_member {
        return;
    }
    let Some(Some(p)) = g.peers.get_mut(from) else { return };
    if p.connected {
        return;
    }
    match net.connect(p.conn, blob) {
        Ok(()) => p.connected = true,
        Err(s) => g.mail.fail(TransportError::peer_gone(from, format!("connecting to member {from} failed: {s}"))),
    }
}

impl Plugin for CollPlugin {
    const VERSION: u64 = VERSION;

    fn open(_: &WorkerCtx) -> Result<Self, Status> {
        let (sock, name) = bind_unique_datagram("async-doca-urom-coll")?;
        let net = Rdma::open()?;
        let wake = Wake::new(net.notification_fd()?)?;
        Ok(CollPlugin { state: State::Idle, early: HashMap::new(), sock, name, buf: vec![0; MAX_HELLO + 1], wake, net })
    }

    /// Everything this plugin waits for has an fd: RDMA completions and rings (the PE's
    /// notification handle) and hellos (the socket, watched only while they are expected, so a
    /// stray datagram later cannot keep the worker awake). Internal work never waits: the
    /// worker arms only after a `progress` that advanced nothing, and `step` runs the engine
    /// until it waits on the network.
    fn arm(&mut self, _: &WorkerCtx) -> Arm {
        let listening = match &self.state {
            State::Idle => true,
            State::Active(g) => {
                if g.peers.iter().flatten().any(|p| !p.hello_sent) {
                    return Arm::Busy; // a hello waits for room in a peer's socket: retry
                }
                !g.all_connected()
            }
            State::Finished => false,
        };
        if self.wake.watch_socket(self.sock.as_raw_fd(), listening).is_err() || self.net.arm().is_err() {
            return Arm::Unsupported;
        }
        Arm::Sleep(self.wake.fd.as_raw_fd())
    }

    fn address(&self) -> &[u8] {
        &self.name
    }

    fn command(&mut self, ctx: &WorkerCtx, cmd: Command<'_>, out: &mut Notifications) -> Result<(), Status> {
        match Cmd::decode(cmd.payload)? {
            init @ Cmd::Init { .. } => self.init(ctx, &cmd, init, out)?,
            Cmd::Coll(spec) => self.coll(ctx, &cmd, spec)?,
            Cmd::Invalid { seq, kind } => {
                let State::Active(g) = &mut self.state else { return Err(Status::BAD_STATE) };
                if g.ops.back().is_some_and(|o| matches!(o.kind, OpKind::Fini)) {
                    return Err(Status::BAD_STATE);
                }
                let spec = CollSpec {
                    seq,
                    kind,
                    dtype: coll_algorithms::DataType::I32,
                    op: coll_algorithms::ReduceOp::Sum,
                    root: 0,
                    count: 0,
                    src_va: 0,
                    src_len: 0,
                    dst_va: 0,
                    dst_len: 0,
                };
                let kind = OpKind::Coll { spec, src: None, dst: None, invalid: true };
                g.ops.push_back(Op { reply: cmd.reply_to(), kind, stage: Stage::Ready(Vec::new()), comm_seq: None });
            }
            Cmd::Fini => {
                let State::Active(g) = &mut self.state else { return Err(Status::BAD_STATE) };
                if g.ops.back().is_some_and(|o| matches!(o.kind, OpKind::Fini)) {
                    return Err(Status::BAD_STATE);
                }
                g.ops.push_back(Op { reply: cmd.reply_to(), kind: OpKind::Fini, stage: Stage::Done, comm_seq: None });
            }
        }
        // Start at once what can start (reads, sends), rather than at the next progress.
        self.step(out);
        Ok(())
    }

    fn progress(&mut self, _: &WorkerCtx, out: &mut Notifications) {
        // A step that moved something is followed by another: what it sent or started may
        // have completed already (the soft provider completes a transfer at its next
        // `doca_pe_progress`), and a collective is answered only once its messages are out.
        // A quiet step is not repeated: a second look right after finding nothing costs a
        // progress of every connection for nothing. Nor is one that answered: the worker
        // sends the answer when this call returns and, to a host on its own CPU, yields at
        // once; a second step (a pass that finds nothing, ~1 500 instructions) came first,
        // on the collective's critical path. While commands are outstanding the worker's
        // loop calls `progress` again at once after a call that moved something.
        if self.step(out) && out.is_empty() {
            self.step(out);
        }
    }
}
