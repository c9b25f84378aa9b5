//! [`HostComm`]: the collectives run by the host processes themselves over RDMA.

use std::cell::{Cell, RefCell};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use coll_algorithms::{Comm, Matcher, ReduceOp, Sent, Tag, Transport, TransportError, TransportErrorKind, Tuning};

use super::typed::{Element, TypedBuf};
use crate::error::{Error, ErrorKind, Result};
use crate::executor::context::CtxRecord;
use crate::executor::local_sync::{ResultCell, WakeFlag};
use crate::executor::{spawn_local, time, JoinHandle};
use crate::mem::{Access, Buf, Memory};
use crate::oob::{drive_allgather, Oob};
use crate::rdma::{ConnId, Connection, PendingConnection, Rdma};
use crate::Device;

/// The longest RDMA connection blob a member may announce in [`HostCommBuilder::build`]'s
/// exchange (real and soft blobs are tens to hundreds of bytes).
const MAX_BLOB: u32 = 64 << 10;

/// Default payload bytes per RDMA message ([`HostCommBuilder::chunk_bytes`]).
pub const DEFAULT_CHUNK_BYTES: usize = 64 * 1024;
/// Default number of receives kept posted ([`HostCommBuilder::recv_buffers`]).
pub const DEFAULT_RECV_BUFFERS: usize = 32;
/// Default number of RDMA sends in flight ([`HostCommBuilder::send_window`]).
pub const DEFAULT_SEND_WINDOW: usize = 32;
/// Default bound on the out-of-band exchanges of [`HostCommBuilder::build`].
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a dropped communicator keeps sending what its collectives had already handed to
/// the transport before it closes its connections.
const LINGER: Duration = Duration::from_secs(2);

/// Bytes of the chunk header: magic u32, sender rank u32, tag u64, message length u64, chunk
/// offset u64 (little-endian).
pub(crate) const CHUNK_HEADER: usize = 32;
const CHUNK_MAGIC: u32 = u32::from_le_bytes(*b"DCH1");

/// Builds a [`HostComm`]; see [`HostComm::builder`].
pub struct HostCommBuilder {
    dev: Device,
    oob: Box<dyn Oob>,
    tuning: Tuning,
    chunk_bytes: usize,
    recv_buffers: usize,
    send_window: usize,
    setup_timeout: Duration,
}

impl HostCommBuilder {
    /// The engine's algorithm knobs (default [`Tuning::default`]); must be the same on every
    /// member (members that differ fail with a mismatch rather than hang).
    pub fn tuning(mut self, tuning: Tuning) -> Self {
        self.tuning = tuning;
        self
    }

    /// Payload bytes per RDMA message (default 64 KiB); larger messages are split. Each
    /// posted receive and each send slot is this plus a 32-byte header. Must be the same on
    /// every member (a larger chunk than the receiver's buffers breaks the connection).
    pub fn chunk_bytes(mut self, n: usize) -> Self {
        self.chunk_bytes = n;
        self
    }

    /// Receives kept posted on the context (default 32).
    pub fn recv_buffers(mut self, n: usize) -> Self {
        self.recv_buffers = n;
        self
    }

    /// RDMA sends in flight at most (default 32); the outbox also holds at most this many
    /// chunks' worth of accepted messages before the engine is told to retry (`Sent::Busy`).
    pub fn send_window(mut self, n: usize) -> Self {
        self.send_window = n;
        self
    }

    /// Bound on the out-of-band exchanges of [`build`](Self::build) and of
    /// [`HostComm::close`] (default 30 s).
    pub fn setup_timeout(mut self, t: Duration) -> Self {
        self.setup_timeout = t;
        self
    }

    /// Creates the RDMA context on the current executor, connects a full mesh through the
    /// out-of-band allgather and starts the communicator's driver task. Every member must
    /// call it (it is collective).
    ///
    /// # Errors
    /// Bad parameters ([`ErrorKind::InvalidArgument`]), members that do not arrive within the
    /// setup timeout ([`ErrorKind::TimedOut`]), or what the RDMA context and connections
    /// report.
    pub async fn build(self) -> Result<HostComm> {
        let (rank, size) = (self.oob.rank() as usize, self.oob.size() as usize);
        if size == 0 || rank >= size {
            return Err(invalid(format!("coll: rank {rank} of a group of {size}")));
        }
        if self.chunk_bytes == 0 || self.chunk_bytes > 1 << 30 {
            return Err(invalid(format!("coll: chunk of {} bytes (1 ..= 1 GiB)", self.chunk_bytes)));
        }
        if !(1..=65536).contains(&self.recv_buffers) || !(1..=65536).contains(&self.send_window) {
            return Err(invalid(format!(
                "coll: {} receive buffers and a send window of {} (each 1 ..= 65536)",
                self.recv_buffers, self.send_window
            )));
        }
        let peers = u16::try_from(size - 1).map_err(|_| invalid(format!("coll: {size} members is too many")))?;
        let rdma = Rdma::builder(&self.dev)
            .max_connections(peers.max(1))
            .recv_queue_size(self.recv_buffers as u32)
            .send_queue_size(self.send_window as u32)
            .build()
            .await?;

        // One connection per peer; my blob for peer j goes in slot j of my contribution.
        let mut pending: Vec<Option<PendingConnection>> = (0..size).map(|_| None).collect();
        let mut blobs = vec![Vec::new(); size];
        for j in (0..size).filter(|&j| j != rank) {
            let (blob, p) = rdma.export()?;
            blobs[j] = blob;
            pending[j] = Some(p);
        }
        let deadline = Instant::now() + self.setup_timeout;
        let oob = &*self.oob;
        let longest = blobs.iter().map(Vec::len).max().unwrap_or(0) as u32;
        let lens = drive_allgather(oob, &longest.to_le_bytes(), deadline, "coll").await?;
        let m = lens.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))).max().unwrap_or(0);
        // Every member allocates `size × size` records of the longest announced: a member that
        // announces nonsense must not make the others allocate gigabytes.
        if m > MAX_BLOB {
            return Err(invalid(format!(
                "coll: a member announced a connection blob of {m} bytes (at most {MAX_BLOB})"
            )));
        }
        let rec = 4 + m as usize;
        let mut mine = vec![0u8; size * rec];
        for (j, b) in blobs.iter().enumerate() {
            mine[j * rec..j * rec + 4].copy_from_slice(&(b.len() as u32).to_le_bytes());
            mine[j * rec + 4..j * rec + 4 + b.len()].copy_from_slice(b);
        }
        let all = drive_allgather(oob, &mine, deadline, "coll").await?;
        if all.len() != size * size * rec {
            return Err(Error::new(ErrorKind::Other, "coll: the out-of-band allgather returned a wrong length"));
        }
        let mut conns: Vec<Option<Connection>> = (0..size).map(|_| None).collect();
        let mut peer_of = HashMap::new();
        for j in (0..size).filter(|&j| j != rank) {
            let r = &all[(j * size + rank) * rec..(j * size + rank + 1) * rec];
            let n = u32::from_le_bytes(r[..4].try_into().expect("4 bytes")) as usize;
            let blob = r.get(4..4 + n).ok_or_else(|| invalid(format!("coll: member {j} sent a bad blob length")))?;
            let p = pending[j].take().expect("exported above");
            let c = p.connect(blob).await.map_err(|e| e.context_prefix(&format!("coll: connect to member {j}")))?;
            peer_of.insert(c.id(), j);
            conns[j] = Some(c);
        }
        // Nobody sends before everyone is connected, so a member that failed to connect
        // fails the build everywhere (by timeout) rather than the first collective.
        drive_allgather(oob, &[1], deadline, "coll").await?;

        let slot_bytes = CHUNK_HEADER + self.chunk_bytes;
        let recv_mem = self.dev.alloc(self.recv_buffers * slot_bytes, Access::LOCAL_READ_WRITE)?;
        let send_mem = self.dev.alloc(self.send_window * slot_bytes, Access::LOCAL_READ_WRITE)?;
        let shared = Rc::new(Shared {
            rdma: rdma.clone(),
            conns,
            peer_of,
            send_mem,
            chunk_bytes: self.chunk_bytes,
            wake: WakeFlag::default(),
            settled: WakeFlag::default(),
            tasks: RefCell::new(Vec::new()),
            closing: Cell::new(false),
            state: RefCell::new(State {
                comm: Comm::new(self.tuning),
                net: Net {
                    rank,
                    size,
                    matcher: Matcher::new(),
                    partial: HashMap::new(),
                    outbox: VecDeque::new(),
                    outbox_bytes: 0,
                    max_outbox_bytes: self.send_window * self.chunk_bytes,
                    refused: false,
                    dead: None,
                },
                waiters: VecDeque::new(),
                free_slots: (0..self.send_window).map(|i| i * slot_bytes).collect(),
                in_flight: 0,
            }),
        });
        let mut tasks = Vec::with_capacity(self.recv_buffers + 1);
        if size > 1 {
            for i in 0..self.recv_buffers {
                let buf = recv_mem.slice(i * slot_bytes..(i + 1) * slot_bytes);
                tasks.push(spawn_local(receive_loop(shared.clone(), buf)));
            }
        }
        *shared.tasks.borrow_mut() = tasks;
        spawn_local(drive(shared.clone())).detach();
        Ok(HostComm { shared, oob: self.oob, setup_timeout: self.setup_timeout, rank, size, tuning: self.tuning })
    }
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

struct Waiter {
    seq: u32,
    op: &'static str,
    slot: Rc<ResultCell<Vec<u8>>>,
}

/// A message accepted from the engine, not yet fully handed to RDMA sends.
struct Outgoing {
    to: usize,
    tag: u64,
    data: Vec<u8>,
    /// Bytes already put into chunks.
    next: usize,
}

struct Partial {
    data: Vec<u8>,
    got: usize,
}

/// A zeroed buffer of `n` bytes, or `None` when the allocator refuses. Zeroed pages are
/// mapped lazily, so a message being reassembled costs the memory of the chunks that
/// arrived, not of the length its header announced.
fn try_zeroed(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: a layout of non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return None;
    }
    // SAFETY: allocated just above by the global allocator with this layout (alignment 1,
    // `n` bytes: the capacity), and every byte is initialised (zeroed).
    Some(unsafe { Vec::from_raw_parts(p, n, n) })
}

/// The engine's [`Transport`]: an outbox on the send side, a reassembly map and the
/// [`Matcher`] on the receive side. It never touches RDMA itself (the driver and the
/// receive tasks do), so the engine's calls never wait.
struct Net {
    rank: usize,
    size: usize,
    matcher: Matcher,
    partial: HashMap<(usize, u64), Partial>,
    outbox: VecDeque<Outgoing>,
    outbox_bytes: usize,
    max_outbox_bytes: usize,
    /// A send was refused (`Busy`) since the flag was last cleared.
    refused: bool,
    /// Set once the RDMA context failed: every later operation fails with it.
    dead: Option<TransportError>,
}

impl Net {
    fn kill(&mut self, e: TransportError) {
        if self.dead.is_none() {
            self.dead = Some(e);
            self.outbox.clear();
            self.outbox_bytes = 0;
            self.partial.clear();
        }
    }

    /// Files one received chunk (`len` bytes at the start of `buf`) that came from `from`.
    fn on_chunk(&mut self, from: Option<usize>, buf: &Buf, len: usize) -> std::result::Result<(), String> {
        if len < CHUNK_HEADER {
            return Err(format!("a {len}-byte message is shorter than the chunk header"));
        }
        let mut h = [0u8; CHUNK_HEADER];
        buf.read(0, &mut h);
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        if u32_at(0) != CHUNK_MAGIC {
            return Err("bad chunk magic".into());
        }
        let sender = u32_at(4) as usize;
        if from != Some(sender) || sender >= self.size {
            return Err(format!("a chunk claiming member {sender} came from connection of member {from:?}"));
        }
        let (tag, total, off) = (u64_at(8), u64_at(16) as usize, u64_at(24) as usize);
        let n = len - CHUNK_HEADER;
        if off.checked_add(n).is_none_or(|end| end > total) {
            return Err(format!("chunk {off}+{n} beyond a {total}-byte message"));
        }
        if off == 0 && n == total {
            let mut v = vec![0u8; total];
            buf.read(CHUNK_HEADER, &mut v);
            self.matcher.push(sender, Tag::from_bits(tag), v);
            return Ok(());
        }
        let p = match self.partial.entry((sender, tag)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                // The length is the sender's word: an absurd one (a corrupt or hostile
                // header) fails the connection here instead of aborting the process.
                let data = try_zeroed(total)
                    .ok_or_else(|| format!("cannot hold a {total}-byte message member {sender} announced"))?;
                e.insert(Partial { data, got: 0 })
            }
        };
        if p.data.len() != total {
            return Err(format!("chunks of one message disagree on its length ({} vs {total})", p.data.len()));
        }
        buf.read(CHUNK_HEADER, &mut p.data[off..off + n]);
        p.got += n;
        if p.got >= total {
            let p = self.partial.remove(&(sender, tag)).expect("present");
            self.matcher.push(sender, Tag::from_bits(tag), p.data);
        }
        Ok(())
    }
}

impl Transport for Net {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn send(&mut self, to: usize, tag: Tag, parts: &[&[u8]]) -> std::result::Result<Sent, TransportError> {
        if let Some(e) = &self.dead {
            return Err(e.clone());
        }
        let len: usize = parts.iter().map(|p| p.len()).sum();
        // An empty outbox always takes the message, however large: it is then sent in chunks
        // through the window, so no message is too big to ever be accepted.
        if !self.outbox.is_empty() && self.outbox_bytes + len > self.max_outbox_bytes {
            self.refused = true;
            return Ok(Sent::Busy);
        }
        let mut data = Vec::with_capacity(len);
        for p in parts {
            data.extend_from_slice(p);
        }
        self.outbox.push_back(Outgoing { to, tag: tag.to_bits(), data, next: 0 });
        self.outbox_bytes += len;
        Ok(Sent::Accepted)
    }

    fn recv(&mut self, from: usize, tag: Tag, buf: &mut Vec<u8>) -> std::result::Result<Option<usize>, TransportError> {
        if let Some(n) = self.matcher.recv_into(from, tag, buf) {
            return Ok(Some(n));
        }
        match &self.dead {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }
}

struct State {
    comm: Comm,
    net: Net,
    /// The futures of submitted collectives, in submission (= completion) order.
    waiters: VecDeque<Waiter>,
    /// Offsets of free send slots in `Shared::send_mem`.
    free_slots: Vec<usize>,
    in_flight: usize,
}

struct Shared {
    rdma: Rdma,
    conns: Vec<Option<Connection>>,
    peer_of: HashMap<ConnId, usize>,
    send_mem: Memory,
    chunk_bytes: usize,
    wake: WakeFlag,
    /// Notified by the driver whenever a step leaves the communicator settled (see
    /// [`Shared::settled`]): what [`HostComm::close`] waits for.
    settled: WakeFlag,
    /// The receive tasks (cancelled when the communicator closes).
    tasks: RefCell<Vec<JoinHandle<()>>>,
    /// The `HostComm` is gone: only flush the outbox, then stop.
    closing: Cell<bool>,
    state: RefCell<State>,
}

impl Shared {
    /// Fails every collective waiting for the driver, which is gone: the executor that ran
    /// it ended (a communicator kept past its executor), or it stopped after `close`. The
    /// futures' own check (`HostComm::answer`) makes them fail anyway at their next poll;
    /// this also wakes them.
    fn driver_gone(&self) {
        let waiters = match self.state.try_borrow_mut() {
            Ok(mut st) => std::mem::take(&mut st.waiters),
            // Only `step` borrows the state across an await-free stretch; a drop of the
            // driver cannot happen inside it.
            Err(_) => return,
        };
        for w in waiters {
            w.slot.complete(Err(destroyed(&self.rdma.ctx_record(), w.op)));
        }
    }

    /// Progresses the engine until nothing more can happen now, completing futures in order
    /// and starting RDMA sends.
    fn step(self: &Rc<Self>) {
        let mut guard = self.state.borrow_mut();
        let st = &mut *guard;
        if self.closing.get() {
            self.pump(st);
            return;
        }
        loop {
            st.net.refused = false;
            let done = st.comm.progress(&mut st.net);
            let finished = !done.is_empty();
            let dead = st.net.dead.is_some();
            for c in done {
                let w = st.waiters.pop_front().expect("every submitted collective has a waiter");
                debug_assert_eq!(w.seq, c.seq);
                w.slot.complete(c.result.map_err(|e| map_error(w.op, e, dead)));
            }
            if finished && !st.net.matcher.is_empty() {
                // Messages of collectives already reported (late abort notices, strays) are
                // never asked for again.
                let low = st.waiters.front().map_or(st.comm.next_seq(), |w| w.seq);
                st.net.matcher.retain(|_, tag| tag.seq().wrapping_sub(low) < 1 << 31);
            }
            let pumped = self.pump(st);
            if !(finished || (st.net.refused && pumped)) {
                break;
            }
        }
    }

    /// Moves chunks from the outbox into free send slots and starts their RDMA sends.
    fn pump(self: &Rc<Self>, st: &mut State) -> bool {
        let mut did = false;
        while st.net.dead.is_none() {
            let Some(front) = st.net.outbox.front_mut() else { break };
            let Some(off) = st.free_slots.pop() else { break };
            let total = front.data.len();
            let n = self.chunk_bytes.min(total - front.next);
            let mut h = [0u8; CHUNK_HEADER];
            h[0..4].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
            h[4..8].copy_from_slice(&(st.net.rank as u32).to_le_bytes());
            h[8..16].copy_from_slice(&front.tag.to_le_bytes());
            h[16..24].copy_from_slice(&(total as u64).to_le_bytes());
            h[24..32].copy_from_slice(&(front.next as u64).to_le_bytes());
            let mut buf = self.send_mem.slice(off..off + CHUNK_HEADER + n);
            buf.write(0, &h);
            buf.write(CHUNK_HEADER, &front.data[front.next..front.next + n]);
            front.next += n;
            let to = front.to;
            if front.next == total {
                st.net.outbox_bytes -= total;
                st.net.outbox.pop_front();
            }
            st.in_flight += 1;
            did = true;
            let conn = self.conns[to].clone().expect("the engine never sends to its own rank");
            let shared = self.clone();
            spawn_local(async move {
                let (r, _buf) = conn.send(buf).await;
                {
                    let mut st = shared.state.borrow_mut();
                    st.in_flight -= 1;
                    st.free_slots.push(off);
                    if let Err(e) = r {
                        st.net.kill(transport_error(Some(to), &e));
                    }
                }
                shared.wake.notify();
            })
            .detach();
        }
        did
    }

    fn flushed(&self) -> bool {
        let st = self.state.borrow();
        st.net.dead.is_some() || (st.net.outbox.is_empty() && st.in_flight == 0)
    }

    /// Nothing more will happen without a new collective: every submitted one completed and
    /// every chunk was sent, or the transport is dead.
    fn settled(&self) -> bool {
        let st = self.state.borrow();
        st.net.dead.is_some() || (st.waiters.is_empty() && st.net.outbox.is_empty() && st.in_flight == 0)
    }
}

fn transport_error(peer: Option<usize>, e: &Error) -> TransportError {
    let kind = match e.kind() {
        ErrorKind::ConnectionLost | ErrorKind::Cancelled | ErrorKind::BadState => TransportErrorKind::PeerGone,
        _ => TransportErrorKind::Other,
    };
    TransportError { kind, peer, message: e.to_string() }
}

/// The engine's errors as the crate's: local argument problems and disagreements between
/// members are `InvalidArgument`, a lost member is `ConnectionLost`.
fn map_error(op: &'static str, e: coll_algorithms::Error, dead: bool) -> Error {
    use coll_algorithms::Error as E;
    let kind = match &e {
        E::Invalid(_) | E::Mismatch { .. } => ErrorKind::InvalidArgument,
        E::Transport(t) if t.kind == TransportErrorKind::PeerGone => ErrorKind::ConnectionLost,
        // A peer's abort notice says why it failed; with this member's transport dead too,
        // the group is broken whatever the peer saw.
        E::Aborted { peer_lost: true, .. } => ErrorKind::ConnectionLost,
        E::Aborted { .. } if dead => ErrorKind::ConnectionLost,
        E::Aborted { .. } => ErrorKind::InvalidArgument,
        _ => ErrorKind::Other,
    };
    Error::with_source(kind, format!("coll.{op}: {e}"), e)
}

/// Keeps one receive posted in `buf` and files what arrives, until the context fails or the
/// communicator closes (which cancels this task).
async fn receive_loop(shared: Rc<Shared>, mut buf: Buf) {
    loop {
        let (r, b) = shared.rdma.recv(buf).await;
        buf = b;
        {
            let mut st = shared.state.borrow_mut();
            match r {
                Ok(m) => {
                    let from = shared.peer_of.get(&m.conn).copied();
                    if let Err(msg) = st.net.on_chunk(from, &buf, m.len) {
                        st.net.kill(TransportError::other(from, format!("bad chunk: {msg}")));
                    }
                }
                Err(e) => st.net.kill(transport_error(None, &e)),
            }
            if st.net.dead.is_some() {
                drop(st);
                shared.wake.notify();
                return;
            }
        }
        shared.wake.notify();
    }
}

/// Held by the driver's future: when it goes, finished or dropped with its executor, the
/// collectives still waiting fail instead of waiting for a driver that no longer runs.
struct DriverGone(Rc<Shared>);

impl Drop for DriverGone {
    fn drop(&mut self) {
        self.0.driver_gone();
    }
}

/// Collective `op`'s refusal once the communicator's context is gone with its executor.
fn destroyed(ctx: &CtxRecord, op: &str) -> Error {
    ctx.destroyed(&format!("coll.{op}"))
}

/// The communicator's driver task: progresses the engine whenever something changed; after
/// the `HostComm` is dropped, flushes the outbox (bounded by [`LINGER`]) and stops.
async fn drive(shared: Rc<Shared>) {
    let _gone = DriverGone(shared.clone());
    let mut linger_until = None;
    loop {
        shared.step();
        // Every change `close` waits for (a collective completing, a send finishing, the
        // transport dying) wakes this task, so a settled state is seen right here.
        if shared.settled() {
            shared.settled.notify();
        }
        if shared.closing.get() {
            let until = *linger_until.get_or_insert_with(|| Instant::now() + LINGER);
            if shared.flushed() || Instant::now() >= until {
                break;
            }
            let _ = time::timeout_at(until, shared.wake.wait()).await;
        } else {
            shared.wake.wait().await;
        }
    }
    for t in shared.tasks.borrow_mut().drain(..) {
        t.cancel();
    }
    // The last handles on the context go with `shared` (send tasks finished: flushed), which
    // stops it: the peers see their connections to this member reset.
}

/// A communicator of host processes running collectives among themselves over RDMA (see the
/// [module documentation](super) for the model).
///
/// Collectives are submitted when the method is called (in call order, which must be the same
/// on every member) and complete, in that order, when their future is awaited; several may be
/// in flight. `!Send`: it belongs to the executor that built it.
pub struct HostComm {
    shared: Rc<Shared>,
    /// Kept for [`HostComm::close`]'s final agreement.
    oob: Box<dyn Oob>,
    setup_timeout: Duration,
    rank: usize,
    size: usize,
    tuning: Tuning,
}

impl HostComm {
    /// A builder for a communicator over `dev` among the members of `oob` (rank and size are
    /// `oob`'s).
    pub fn builder(dev: &Device, oob: impl Oob) -> HostCommBuilder {
        HostCommBuilder {
            dev: dev.clone(),
            oob: Box::new(oob),
            tuning: Tuning::default(),
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            recv_buffers: DEFAULT_RECV_BUFFERS,
            send_window: DEFAULT_SEND_WINDOW,
            setup_timeout: DEFAULT_SETUP_TIMEOUT,
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn tuning(&self) -> &Tuning {
        &self.tuning
    }

    /// Collectives submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.shared.state.borrow().waiters.len()
    }

    /// The result of a collective `submit` numbered: its slot's, or `BadState` once the
    /// context is gone with the executor (whose driver task would have delivered it).
    fn answer(
        &self,
        op: &'static str,
        slot: Rc<ResultCell<Vec<u8>>>,
    ) -> impl Future<Output = Result<Vec<u8>>> + 'static {
        slot.wait_on(self.shared.rdma.ctx_record(), move |ctx| destroyed(ctx, op))
    }

    fn submit(&self, op: &'static str, f: impl FnOnce(&mut Comm) -> u32) -> Rc<ResultCell<Vec<u8>>> {
        let slot = Rc::new(ResultCell::default());
        {
            let mut st = self.shared.state.borrow_mut();
            let seq = f(&mut st.comm);
            st.waiters.push_back(Waiter { seq, op, slot: slot.clone() });
        }
        self.shared.wake.notify();
        slot
    }

    /// Elementwise reduction of every member's `src` into every member's `dst` (same length
    /// as `src`; the same on every member).
    ///
    /// Submitted at once; the future completes it. A `dst` of the wrong length fails this
    /// member's future with [`ErrorKind::InvalidArgument`] after the collective ran (it still
    /// runs, so the group's collectives stay in step); other errors: see the module docs.
    pub fn allreduce<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + 'a {
        let answer = self.answer("allreduce", self.submit("allreduce", |c| c.allreduce(T::DATA_TYPE, op, src.bytes())));
        async move { deliver("allreduce", answer.await?, dst) }
    }

    /// Every member's `src` (the same length everywhere), concatenated in rank order into
    /// every member's `dst` (`size × src.len()` elements).
    pub fn allgather<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        let answer = self.answer("allgather", self.submit("allgather", |c| c.allgather(src.bytes())));
        async move { deliver("allgather", answer.await?, dst) }
    }

    /// `root`'s `buf` copied into every member's `buf` (the same length everywhere).
    pub fn broadcast<'a, T: Element>(
        &'a self,
        root: usize,
        buf: &'a mut TypedBuf<T>,
    ) -> impl Future<Output = Result<()>> + 'a {
        let answer = self.answer("broadcast", self.submit("broadcast", |c| c.broadcast(root, buf.bytes())));
        async move { deliver("broadcast", answer.await?, buf) }
    }

    /// Completes once every member has entered it.
    pub fn barrier(&self) -> impl Future<Output = Result<()>> + '_ {
        let answer = self.answer("barrier", self.submit("barrier", Comm::barrier));
        async move { answer.await.map(drop) }
    }

    /// Block `rank` of the elementwise reduction of every member's `src` (`size × dst.len()`
    /// elements) into `dst`.
    pub fn reduce_scatter<'a, T: Element>(
        &'a self,
        src: &TypedBuf<T>,
        dst: &'a mut TypedBuf<T>,
        op: ReduceOp,
    ) -> impl Future<Output = Result<()>> + 'a {
        let answer = self.answer(
            "reduce_scatter",
            self.submit("reduce_scatter", |c| c.reduce_scatter(T::DATA_TYPE, op, src.bytes())),
        );
        async move { deliver("reduce_scatter", answer.await?, dst) }
    }

    /// Closes the communicator cleanly; every member must call it. It waits until this
    /// member's collectives have all completed (including those whose futures were dropped)
    /// and its sends were handed to the peers, then for every other member to get there too
    /// (an out-of-band allgather), and only then drops the connections.
    ///
    /// That second step matters: all connections share one RDMA context, and a peer's
    /// closing breaks it (DOCA's context-wide error state), so a member that closed as soon as
    /// its own work was done would fail members still waiting for a third one's messages.
    /// Dropping without `close` is that abrupt way: the peers' pending and later collectives
    /// fail with [`ErrorKind::ConnectionLost`].
    ///
    /// # Errors
    /// [`ErrorKind::ConnectionLost`] when the group had already lost a member (then nothing is
    /// waited for), [`ErrorKind::TimedOut`] when this member's collectives or the other
    /// members did not finish within the builder's setup timeout.
    pub async fn close(self) -> Result<()> {
        let deadline = Instant::now() + self.setup_timeout;
        loop {
            if let Some(e) = &self.shared.state.borrow().net.dead {
                return Err(Error::with_source(ErrorKind::ConnectionLost, format!("coll.close: {e}"), e.clone()));
            }
            if self.shared.settled() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Error::new(ErrorKind::TimedOut, "coll.close: collectives still in flight"));
            }
            // The driver notifies once a step leaves everything settled; a notification
            // from an earlier settled moment only costs one more look.
            let _ = time::timeout_at(deadline, self.shared.settled.wait()).await;
        }
        drive_allgather(&*self.oob, &[1], deadline, "coll").await.map_err(|e| e.context_prefix("coll.close"))?;
        Ok(())
    }
}

/// Copies a collective's output into `dst`, checking the length.
fn deliver<T: Element>(op: &str, out: Vec<u8>, dst: &mut TypedBuf<T>) -> Result<()> {
    if out.len() != dst.byte_len() {
        return Err(invalid(format!(
            "coll.{op}: the result has {} {} elements but the destination holds {}",
            out.len() / T::SIZE,
            T::DATA_TYPE,
            dst.len()
        )));
    }
    dst.put_bytes(&out);
    Ok(())
}

impl Drop for HostComm {
    fn drop(&mut self) {
        self.shared.closing.set(true);
        self.shared.wake.notify();
    }
}

impl fmt::Debug for HostComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::LyingPeer;

    /// A chunk whose header announces an absurd message length (corrupt, or a hostile
    /// member) fails its connection with a message; before, reassembly allocated the
    /// announced length at once and the allocation failure aborted the process.
    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn an_absurd_announced_message_length_fails_the_chunk_not_the_process() {
        let mut net = Net {
            rank: 0,
            size: 2,
            matcher: Matcher::new(),
            partial: HashMap::new(),
            outbox: VecDeque::new(),
            outbox_bytes: 0,
            max_outbox_bytes: 1 << 20,
            refused: false,
            dead: None,
        };
        crate::testkit::runtime().block_on(async {
            let dev = Device::open_default().unwrap();
            let mem = dev.alloc(CHUNK_HEADER + 16, Access::LOCAL_READ_WRITE).unwrap();
            let mut buf = mem.buf();
            let header = |total: u64, off: u64| {
                let mut h = [0u8; CHUNK_HEADER];
                h[0..4].copy_from_slice(&CHUNK_MAGIC.to_le_bytes());
                h[4..8].copy_from_slice(&1u32.to_le_bytes());
                h[8..16].copy_from_slice(&7u64.to_le_bytes());
                h[16..24].copy_from_slice(&total.to_le_bytes());
                h[24..32].copy_from_slice(&off.to_le_bytes());
                h
            };
            // 2^62 bytes: no allocator gives that.
            buf.write(0, &header(1 << 62, 0));
            let e = net.on_chunk(Some(1), &buf, CHUNK_HEADER + 16).expect_err("an impossible length");
            assert!(e.contains("4611686018427387904"), "{e}");
            assert!(net.partial.is_empty());
            // A plausible one is reassembled as before.
            buf.write(0, &header(32, 0));
            buf.write(CHUNK_HEADER, &[1; 16]);
            net.on_chunk(Some(1), &buf, CHUNK_HEADER + 16).unwrap();
            buf.write(0, &header(32, 16));
            buf.write(CHUNK_HEADER, &[2; 16]);
            net.on_chunk(Some(1), &buf, CHUNK_HEADER + 16).unwrap();
            assert!(net.partial.is_empty(), "complete");
        });
    }

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn an_announced_blob_length_is_bounded() {
        let rt = crate::testkit::runtime();
        let e = rt
            .block_on(async {
                let dev = Device::open_default().unwrap();
                // The peer announces a connection blob of 4 GiB.
                HostComm::builder(&dev, LyingPeer { peer: u32::MAX.to_le_bytes().to_vec() }).build().await
            })
            .expect_err("a 4 GiB blob");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("4294967295"), "{e}");
    }
}
