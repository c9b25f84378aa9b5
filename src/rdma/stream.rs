//! Byte streams over RDMA: [`RdmaStream`] implements tokio's and the `futures` crate's
//! `AsyncRead` / `AsyncWrite`, so HTTP servers, codecs and anything else written against those
//! traits run over an RDMA [`Connection`].
//!
//! The design is in `docs/stream.md`; in short:
//!
//! * **Messages with posted receives, credit-based.** Each side posts `recv_buffers`
//!   receive buffers of `chunk_size` bytes (on its context; see [`StreamConfig`]). A writer
//!   may send a message only when it holds a *credit*, one per free receive buffer of the peer,
//!   so a message never waits for a receive and nothing is ever buffered without bound: a
//!   writer without credits (a slow reader) waits.
//! * **The immediate carries the protocol.** Every message is a `send_imm`; its 32-bit
//!   immediate carries a sequence number, the credits the sender gives back (buffers it
//!   re-posted since its last message) and two flags, `HELLO` and `FIN`. Data messages carry
//!   bytes, credit messages and `FIN` none.
//! * **Handshake.** Each side's first message is a `HELLO` with its chunk size and buffer
//!   count; the stream is returned once the peer's arrived, so both sides know how large a
//!   message the other takes and how many it may have in flight.
//! * **Shutdown.** [`poll_shutdown`](tokio::io::AsyncWrite::poll_shutdown) sends what is
//!   buffered, then a `FIN`: the peer reads the data, then EOF. A peer that goes away without
//!   a `FIN` makes pending and later reads and writes fail with
//!   [`ErrorKind::ConnectionLost`] (the `io::Error`'s inner
//!   error is the crate's [`Error`]). A stream kept after its executor ended (by a task of
//!   another runtime, say) gives what it had received, then fails with
//!   [`ErrorKind::BadState`]; dropping it then sends nothing and is safe anywhere.
//! * **Copies.** The traits lend the caller's bytes only for the duration of one `poll_*`
//!   call, while DOCA needs registered memory that stays put until the operation completes:
//!   so `poll_write` copies into a registered send chunk and `poll_read` copies out of the
//!   receive buffer, one copy on each side (what the kernel does for a TCP socket too).
//!   Between them the data moves by DMA, never through a CPU copy of ours.
//!
//! `RdmaStream` is `!Send` like every DOCA object: it lives on the executor (or the tokio
//! thread running [`run_local`](crate::tokio::run_local)) that made its connection.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};

use super::{ConnId, Connection, Listener, Opcode, Rdma, Received};
use crate::device::Device;
use crate::error::{Error, ErrorKind, Result};
use crate::executor::{spawn_local, yield_now, JoinHandle};
use crate::mem::{Access, Buf, Memory};

/// Default size of one message, and of each receive buffer (64 KiB).
pub const DEFAULT_CHUNK_SIZE: usize = 64 * 1024;
/// Default number of receive buffers per stream (the peer's credits).
pub const DEFAULT_RECV_BUFFERS: u16 = 16;
/// Default number of send chunks per stream (bytes accepted by `poll_write` before the
/// writer waits for completions).
pub const DEFAULT_SEND_BUFFERS: u16 = 16;

/// Largest `recv_buffers`: the credit field of the immediate has 14 bits.
pub const MAX_RECV_BUFFERS: u16 = CREDIT_MASK as u16;
/// Smallest `recv_buffers`: one credit stays in reserve and credit messages wait for two.
pub const MIN_RECV_BUFFERS: u16 = 4;
/// Smallest `chunk_size` (the `HELLO` message must fit).
pub const MIN_CHUNK_SIZE: usize = 64;

// The immediate: FIN (bit 31), HELLO (bit 30), credits given back (bits 29..16), sequence
// number of the message (bits 15..0).
const FIN: u32 = 1 << 31;
const HELLO: u32 = 1 << 30;
const CREDIT_SHIFT: u32 = 16;
const CREDIT_MASK: u32 = 0x3fff;
const SEQ_MASK: u32 = 0xffff;

/// `HELLO`'s payload: magic, version, chunk size, receive buffers (little endian u32 each).
const MAGIC: u32 = 0x5453_4452; // "RDST" read as little-endian bytes
const VERSION: u32 = 1;
const HELLO_LEN: usize = 16;

fn imm(flags: u32, credits: u32, seq: u16) -> u32 {
    flags | ((credits & CREDIT_MASK) << CREDIT_SHIFT) | u32::from(seq)
}

/// A message's immediate, taken apart (the inverse of [`imm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Imm {
    fin: bool,
    hello: bool,
    /// Credits the sender gives back (14 bits).
    credits: u32,
    seq: u16,
}

impl Imm {
    fn decode(imm: u32) -> Imm {
        Imm {
            fin: imm & FIN != 0,
            hello: imm & HELLO != 0,
            credits: (imm >> CREDIT_SHIFT) & CREDIT_MASK,
            seq: (imm & SEQ_MASK) as u16,
        }
    }
}

/// The parameters a side announces in its `HELLO`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hello {
    chunk_size: u32,
    recv_buffers: u32,
}

impl Hello {
    fn encode(self) -> [u8; HELLO_LEN] {
        let mut p = [0u8; HELLO_LEN];
        for (i, w) in [MAGIC, VERSION, self.chunk_size, self.recv_buffers].into_iter().enumerate() {
            p[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        p
    }

    /// The peer's `HELLO` payload (the message's bytes), or `None` if it is not an
    /// RdmaStream version 1 handshake: wrong length, magic or version, or parameters below
    /// the limits (a chunk too small for a `HELLO`, too few buffers for the credit scheme,
    /// more buffers than the immediate's 14-bit credit field can ever give back, which no
    /// RdmaStream announces: [`StreamConfig`] refuses it; accepting it would let a peer
    /// overflow our credit count with its first message).
    fn decode(payload: &[u8]) -> Option<Hello> {
        let p: &[u8; HELLO_LEN] = payload.try_into().ok()?;
        let word = |i: usize| u32::from_le_bytes([p[4 * i], p[4 * i + 1], p[4 * i + 2], p[4 * i + 3]]);
        let h = Hello { chunk_size: word(2), recv_buffers: word(3) };
        let ok = word(0) == MAGIC
            && word(1) == VERSION
            && h.chunk_size as usize >= MIN_CHUNK_SIZE
            && (u32::from(MIN_RECV_BUFFERS)..=u32::from(MAX_RECV_BUFFERS)).contains(&h.recv_buffers);
        ok.then_some(h)
    }
}

/// The ring parameters of a stream: both sides announce theirs in the handshake.
///
/// Memory per stream: `chunk_size * (recv_buffers + send_buffers)` bytes of registered
/// memory. A writer keeps at most `send_buffers` messages in flight or waiting, and at most
/// `recv_buffers - 1` of the peer's buffers filled (one credit stays for credit messages, so
/// the two sides can always hand credits back to each other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    chunk_size: usize,
    recv_buffers: u16,
    send_buffers: u16,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            chunk_size: DEFAULT_CHUNK_SIZE,
            recv_buffers: DEFAULT_RECV_BUFFERS,
            send_buffers: DEFAULT_SEND_BUFFERS,
        }
    }
}

impl StreamConfig {
    /// Bytes per message and per receive buffer (at least [`MIN_CHUNK_SIZE`]). All streams
    /// of one RDMA context share one chunk size (their receive buffers are one pool).
    pub fn chunk_size(mut self, n: usize) -> Self {
        self.chunk_size = n;
        self
    }

    /// Receive buffers this side posts for the stream, [`MIN_RECV_BUFFERS`] ..=
    /// [`MAX_RECV_BUFFERS`].
    pub fn recv_buffers(mut self, n: u16) -> Self {
        self.recv_buffers = n;
        self
    }

    /// Send chunks of the stream (at least 1).
    pub fn send_buffers(mut self, n: u16) -> Self {
        self.send_buffers = n;
        self
    }

    fn check(&self) -> Result<()> {
        if self.chunk_size < MIN_CHUNK_SIZE
            || u32::try_from(self.chunk_size).is_err()
            || !(MIN_RECV_BUFFERS..=MAX_RECV_BUFFERS).contains(&self.recv_buffers)
            || self.send_buffers == 0
        {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!(
                    "rdma.stream: chunk_size {} (>= {MIN_CHUNK_SIZE}), recv_buffers {} ({MIN_RECV_BUFFERS}..={MAX_RECV_BUFFERS}), \
                     send_buffers {} (>= 1)",
                    self.chunk_size, self.recv_buffers, self.send_buffers
                ),
            ));
        }
        Ok(())
    }

    /// A context made for streams: receive queue and task pools sized for `streams` streams.
    async fn context(&self, dev: &Device, streams: u16) -> Result<Rdma> {
        let recv = u32::from(self.recv_buffers) * u32::from(streams) + 16;
        Rdma::builder(dev).max_connections(streams).recv_queue_size(recv).recv_tasks(recv).build().await
    }
}

/// Whether a stream operation on `rdma` may be spawned: a stream runs each send and posted
/// receive as a task of the current executor, which is the context's own for as long as the
/// context exists. A stream kept past its executor (dropped by a foreign runtime's task
/// afterwards, say) has no context left to run on, and maybe no executor at all: it fails
/// instead, as its operations would.
fn runnable(rdma: &super::RdmaInner) -> Result<()> {
    rdma.ctx.as_ptr().map(drop).map_err(|e| e.context_prefix("rdma.stream"))
}

// ---- the receive pool of a context ----

thread_local! {
    /// The pool of each context that carries streams, by the address of its shared state.
    static HUBS: RefCell<HashMap<usize, Weak<Hub>>> = RefCell::new(HashMap::new());
}

/// The receive side of one RDMA context: DOCA posts receives on the context, not on a
/// connection, so every stream of the context shares one pool of posted buffers. A message
/// completes whichever receive is oldest; the hub hands it to the stream of its connection.
///
/// Invariant: `pool >= reserved`, where `pool` counts the buffers the hub owns (posted, or
/// waiting in a stream's queue) and `reserved` the sum of the live streams' `recv_buffers`.
/// A peer holds at most `recv_buffers` credits minus what its stream holds, so a message
/// always finds a posted receive.
struct Hub {
    key: usize,
    rdma: Rdma,
    chunk: usize,
    pool: Cell<usize>,
    reserved: Cell<usize>,
    streams: RefCell<HashMap<ConnId, Weak<Shared>>>,
    /// Messages for a connection whose stream is not registered yet (the peer's `HELLO` may
    /// arrive before our side of the handshake registered the stream).
    early: RefCell<HashMap<ConnId, Vec<(Received, Buf)>>>,
    /// The posted receives' tasks, cancelled when the hub goes (so that they do not keep
    /// the context alive: a cancelled receive keeps its buffer until DOCA flushes it).
    recvs: RefCell<HashMap<u64, JoinHandle<()>>>,
    next_recv: Cell<u64>,
    /// Set when a receive failed: the context is in the error state or stopping.
    broken: RefCell<Option<Error>>,
}

impl Hub {
    fn of(rdma: &Rdma, chunk: usize) -> Result<Rc<Hub>> {
        let key = Rc::as_ptr(&rdma.inner) as usize;
        if let Some(h) = HUBS.with(|m| m.borrow().get(&key).and_then(Weak::upgrade)) {
            if h.chunk != chunk {
                return Err(Error::new(
                    ErrorKind::InvalidArgument,
                    format!("rdma.stream: this context's streams use {}-byte chunks, not {chunk}", h.chunk),
                ));
            }
            return Ok(h);
        }
        let h = Rc::new(Hub {
            key,
            rdma: rdma.clone(),
            chunk,
            pool: Cell::new(0),
            reserved: Cell::new(0),
            streams: RefCell::new(HashMap::new()),
            early: RefCell::new(HashMap::new()),
            recvs: RefCell::new(HashMap::new()),
            next_recv: Cell::new(0),
            broken: RefCell::new(None),
        });
        HUBS.with(|m| m.borrow_mut().insert(key, Rc::downgrade(&h)));
        Ok(h)
    }

    /// Reserves `n` buffers for a new stream, posting new ones when the pool is short.
    fn reserve(self: &Rc<Self>, n: u16) -> Result<Reservation> {
        if let Some(e) = self.broken.borrow().clone() {
            return Err(e);
        }
        let n = usize::from(n);
        let want = self.reserved.get() + n;
        let short = want.saturating_sub(self.pool.get());
        if short > 0 {
            let mem = self.rdma.device().alloc(short * self.chunk, Access::LOCAL_READ_WRITE)?;
            for i in 0..short {
                self.pool.set(self.pool.get() + 1);
                self.post(mem.slice(i * self.chunk..(i + 1) * self.chunk));
            }
        }
        self.reserved.set(want);
        Ok(Reservation { hub: self.clone(), n })
    }

    /// Posts `buf` as a receive.
    fn post(self: &Rc<Self>, buf: Buf) {
        if let Err(e) = runnable(&self.rdma.inner) {
            self.pool.set(self.pool.get() - 1);
            self.fail(e);
            return;
        }
        let id = self.next_recv.get();
        self.next_recv.set(id + 1);
        let (hub, rdma) = (Rc::downgrade(self), self.rdma.clone());
        let task = spawn_local(async move {
            let (r, buf) = rdma.recv(buf).await;
            drop(rdma);
            let Some(hub) = hub.upgrade() else { return };
            hub.recvs.borrow_mut().remove(&id);
            match r {
                Ok(m) => hub.dispatch(m, buf),
                Err(e) => {
                    hub.pool.set(hub.pool.get() - 1);
                    hub.fail(e);
                }
            }
        });
        self.recvs.borrow_mut().insert(id, task);
    }

    /// A buffer a stream (or the hub) is done with: posted again, or freed when the pool is
    /// larger than the live streams need.
    fn give_back(self: &Rc<Self>, buf: Buf) {
        if self.broken.borrow().is_some() || self.pool.get() > self.reserved.get() {
            self.pool.set(self.pool.get() - 1);
            return;
        }
        self.post(buf);
    }

    fn dispatch(self: &Rc<Self>, m: Received, buf: Buf) {
        let stream = self.streams.borrow().get(&m.conn).and_then(Weak::upgrade);
        if let Some(s) = stream {
            Shared::deliver(&s, m, buf);
            return;
        }
        // A stream's first message is its HELLO: anything else for an unknown connection is
        // left over from a stream that is gone.
        let hello = m.imm.is_some_and(|i| i & HELLO != 0);
        let mut early = self.early.borrow_mut();
        let queue = early.entry(m.conn).or_default();
        if hello || !queue.is_empty() {
            queue.push((m, buf));
        } else {
            drop(early);
            self.give_back(buf);
        }
    }

    fn fail(self: &Rc<Self>, e: Error) {
        let e = e.context_prefix("rdma.stream");
        self.broken.borrow_mut().get_or_insert(e.clone());
        let streams: Vec<_> = self.streams.borrow().values().filter_map(Weak::upgrade).collect();
        for s in streams {
            s.fail(e.clone());
        }
    }

    fn register(self: &Rc<Self>, s: &Rc<Shared>) {
        let id = s.conn.id();
        self.streams.borrow_mut().insert(id, Rc::downgrade(s));
        let early = self.early.borrow_mut().remove(&id).unwrap_or_default();
        // Only the messages from the last HELLO on belong to this stream.
        let from = early.iter().rposition(|(m, _)| m.imm.is_some_and(|i| i & HELLO != 0)).unwrap_or(0);
        for (i, (m, buf)) in early.into_iter().enumerate() {
            if i < from {
                self.give_back(buf);
            } else {
                Shared::deliver(s, m, buf);
            }
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = HUBS.try_with(|m| {
            let mut m = m.borrow_mut();
            if m.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
                m.remove(&self.key);
            }
        });
        for (_, t) in self.recvs.take() {
            t.cancel();
        }
    }
}

/// Buffers reserved in a hub for one stream; released when the stream (or a failed
/// handshake) drops it.
struct Reservation {
    hub: Rc<Hub>,
    n: usize,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.hub.reserved.set(self.hub.reserved.get() - self.n);
    }
}

// ---- sequence order ----

/// Puts one stream's messages back in sequence order. Receives complete in the order the
/// peer's sends were *submitted*, and a send that waited for room (a task pool shared by the
/// context's streams) may be submitted after a later one: so a message may come early, and
/// waits here until its turn. The sequence numbers are 16 bits and wrap; at most `window`
/// messages can be in flight (the credits), so "early" is well defined: a message at most
/// `window - 1` ahead of the next expected one. Anything else (a repeated number, or further
/// ahead than the credits allow) is a peer breaking the protocol.
#[derive(Debug)]
struct Reorder<T> {
    next: u16,
    window: u16,
    early: HashMap<u16, T>,
}

impl<T> Reorder<T> {
    fn new(window: u16) -> Self {
        Reorder { next: 0, window: window.max(1), early: HashMap::new() }
    }

    /// Message `seq` arrived: returns it if it is the next one (the usual case: no map is
    /// touched), keeps it if it came early, gives it back as `Err` if it is outside the window.
    fn arrive(&mut self, seq: u16, item: T) -> std::result::Result<Option<T>, T> {
        let ahead = seq.wrapping_sub(self.next);
        if ahead == 0 {
            self.next = self.next.wrapping_add(1);
            return Ok(Some(item));
        }
        if ahead >= self.window || self.early.contains_key(&seq) {
            return Err(item);
        }
        self.early.insert(seq, item);
        Ok(None)
    }

    /// The message whose turn it is now, if it came early.
    fn next_ready(&mut self) -> Option<T> {
        if self.early.is_empty() {
            return None;
        }
        let item = self.early.remove(&self.next)?;
        self.next = self.next.wrapping_add(1);
        Some(item)
    }

    /// The messages still waiting (the stream goes away).
    fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        self.early.drain().map(|(_, item)| item)
    }
}

// ---- one stream ----

/// What the peer announced in its HELLO.
#[derive(Clone, Copy, Debug)]
struct PeerParams {
    chunk: usize,
}

struct State {
    // Receive side.
    /// The peer's messages back in sequence order.
    reorder: Reorder<(Received, Buf)>,
    /// Data in order, with the read position in the front buffer.
    rx: VecDeque<(Buf, usize)>,
    rx_pos: usize,
    fin_received: bool,
    peer: Option<PeerParams>,
    /// Credits owed to the peer: its messages' buffers we posted again.
    owed: u32,
    read_waker: Option<Waker>,

    // Send side.
    /// Messages we may send (free receive buffers of the peer).
    credits: u32,
    next_tx_seq: u16,
    /// Offsets of free send chunks in `send_mem`.
    free: Vec<usize>,
    /// The chunk being filled: offset and bytes in it.
    pending: Option<(usize, usize)>,
    in_flight: usize,
    /// `poll_flush`/`poll_shutdown` asked for the partial chunk to go now.
    flushing: bool,
    shutdown: bool,
    fin_sent: bool,
    fin_done: bool,
    write_waker: Option<Waker>,
    /// The first failure; reads fail with it once the data received before it is read.
    error: Option<Error>,
}

struct Shared {
    st: RefCell<State>,
    hub: Rc<Hub>,
    conn: Connection,
    send_mem: Memory,
    chunk: usize,
    /// Owed credits worth a message of their own: a quarter of our receive buffers, >= 2.
    credit_threshold: u32,
    _reservation: Reservation,
}

fn io_err(e: &Error) -> io::Error {
    let kind = match e.kind() {
        ErrorKind::ConnectionLost => io::ErrorKind::ConnectionReset,
        ErrorKind::Cancelled => io::ErrorKind::ConnectionAborted,
        ErrorKind::TimedOut => io::ErrorKind::TimedOut,
        ErrorKind::InvalidArgument => io::ErrorKind::InvalidInput,
        ErrorKind::PermissionDenied => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.clone())
}

fn wake(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

impl Shared {
    fn fail(&self, e: Error) {
        let mut st = self.st.borrow_mut();
        st.error.get_or_insert(e);
        wake(&mut st.read_waker);
        wake(&mut st.write_waker);
    }

    /// A completed receive of this stream's connection, in any order.
    fn deliver(self: &Rc<Self>, m: Received, buf: Buf) {
        let Some(imm) = m.imm.filter(|_| m.opcode == Opcode::SendImm) else {
            self.hub.give_back(buf);
            self.fail(Error::new(ErrorKind::InvalidArgument, "rdma.stream: a message without the stream's header"));
            return;
        };
        let seq = Imm::decode(imm).seq;
        let mut st = self.st.borrow_mut();
        // The usual case, the message whose turn it is, goes straight in; only one that
        // came early waits (and a message in order may release those).
        let mut next = match st.reorder.arrive(seq, (m, buf)) {
            Ok(next) => next,
            Err((_, buf)) => {
                drop(st);
                self.hub.give_back(buf);
                self.fail(Error::new(
                    ErrorKind::InvalidArgument,
                    "rdma.stream: a message outside the stream's window (a repeated sequence number, or more \
                     messages than the credits allow)",
                ));
                return;
            }
        };
        let mut to_give_back = Vec::new();
        while let Some((m, buf)) = next.take().or_else(|| st.reorder.next_ready()) {
            let imm = Imm::decode(m.imm.unwrap_or(0));
            st.credits += imm.credits;
            if imm.hello {
                // Only a message of exactly HELLO_LEN bytes is read: any other length is
                // rejected without touching the buffer.
                let hello = (m.len == HELLO_LEN)
                    .then(|| {
                        let mut p = [0u8; HELLO_LEN];
                        buf.read(0, &mut p);
                        p
                    })
                    .and_then(|p| Hello::decode(&p));
                match hello {
                    None => {
                        st.error.get_or_insert(Error::new(
                            ErrorKind::InvalidArgument,
                            "rdma.stream: the peer's HELLO is not an RdmaStream version 1 handshake",
                        ));
                    }
                    Some(h) => {
                        st.peer = Some(PeerParams { chunk: h.chunk_size as usize });
                        // Its HELLO took one of our buffers, ours one of its: it had `recv_buffers`.
                        st.credits += h.recv_buffers - 1;
                    }
                }
                to_give_back.push(buf);
            } else if m.len > 0 {
                st.rx.push_back((buf, m.len));
            } else {
                if imm.fin {
                    st.fin_received = true;
                }
                to_give_back.push(buf);
            }
        }
        st.owed += to_give_back.len() as u32;
        wake(&mut st.read_waker);
        wake(&mut st.write_waker);
        drop(st);
        for b in to_give_back {
            self.hub.give_back(b);
        }
        self.pump();
    }

    /// Sends what may go now: the pending chunk when it is full (or when nothing is in
    /// flight, or on flush), the FIN once everything before it went, or a credit message
    /// when the peer waits for many credits and no data will carry them.
    fn pump(self: &Rc<Self>) {
        loop {
            let mut st = self.st.borrow_mut();
            if st.error.is_some() || st.peer.is_none() {
                return;
            }
            let peer_chunk = st.peer.map_or(0, |p| p.chunk).min(self.chunk);
            // Data: never takes the last credit (kept for credit messages and the FIN).
            if let Some((off, len)) = st.pending {
                if st.credits >= 2 && (len == peer_chunk || st.in_flight == 0 || st.flushing) {
                    st.pending = None;
                    drop(st);
                    self.submit(self.send_mem.slice(off..off + len), 0);
                    continue;
                }
            }
            if st.shutdown && !st.fin_sent && st.pending.is_none() && st.credits >= 1 {
                st.fin_sent = true;
                drop(st);
                self.submit(self.send_mem.slice(0..0), FIN);
                continue;
            }
            // Credits go back with the next message; when no data can go now, in a message
            // of their own once a quarter of our buffers waits (never for a single one: a credit
            // message itself takes a buffer the peer must give back, so a threshold of one
            // would bounce credit messages forever). It may take the reserved last credit:
            // that is what the reserve is for, since two writers each waiting for credits
            // with data pending would otherwise wait for each other forever.
            if st.owed >= self.credit_threshold && st.credits >= 1 {
                drop(st);
                self.submit(self.send_mem.slice(0..0), 0);
                continue;
            }
            return;
        }
    }

    /// Sends one message (data, credit or FIN), giving back the credits owed.
    fn submit(self: &Rc<Self>, buf: Buf, flags: u32) {
        if let Err(e) = runnable(&self.conn.inner.rdma) {
            self.fail(e);
            return;
        }
        let imm = {
            let mut st = self.st.borrow_mut();
            st.credits -= 1;
            st.in_flight += 1;
            let seq = st.next_tx_seq;
            st.next_tx_seq = seq.wrapping_add(1);
            let owed = std::mem::take(&mut st.owed);
            imm(flags, owed, seq)
        };
        let me = self.clone();
        spawn_local(async move {
            let (r, buf) = me.conn.send_imm(buf, imm).await;
            {
                let mut st = me.st.borrow_mut();
                st.in_flight -= 1;
                if !buf.is_empty() {
                    st.free.push(buf.offset());
                }
                if flags & FIN != 0 && r.is_ok() {
                    st.fin_done = true;
                }
                wake(&mut st.write_waker);
            }
            match r {
                Ok(()) => me.pump(),
                Err(e) => me.fail(e.context_prefix("rdma.stream")),
            }
        })
        .detach();
    }

    /// Fails the stream once its context is gone (see `runnable`): its receives and sends
    /// ended with it, so no data, credit or completion will come, and a read or flush
    /// would wait forever.
    fn check_context(&self) {
        if let Err(e) = runnable(&self.conn.inner.rdma) {
            self.fail(e);
        }
    }

    fn poll_read_raw(self: &Rc<Self>, cx: &mut Context<'_>, dst: &mut [MaybeUninit<u8>]) -> Poll<io::Result<usize>> {
        self.check_context();
        if dst.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let mut st = self.st.borrow_mut();
        let mut n = 0;
        while n < dst.len() {
            let pos = st.rx_pos;
            let Some((buf, len)) = st.rx.front() else { break };
            let take = (len - pos).min(dst.len() - n);
            // SAFETY: `buf` is a live registered buffer of at least `len` bytes that no one
            // writes any more (its message completed and it is not posted); `dst[n..]` has room
            // for `take` bytes; the regions are distinct (DOCA memory vs the caller's).
            unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(pos), dst[n..].as_mut_ptr().cast::<u8>(), take) };
            n += take;
            if pos + take == *len {
                let (b, _) = st.rx.pop_front().expect("front exists");
                st.rx_pos = 0;
                st.owed += 1;
                // Given back outside the borrow (no list of them to allocate).
                drop(st);
                self.hub.give_back(b);
                st = self.st.borrow_mut();
            } else {
                st.rx_pos = pos + take;
            }
        }
        if n > 0 {
            drop(st);
            self.pump();
            return Poll::Ready(Ok(n));
        }
        if st.fin_received {
            return Poll::Ready(Ok(0));
        }
        if let Some(e) = &st.error {
            return Poll::Ready(Err(io_err(e)));
        }
        st.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn poll_write(self: &Rc<Self>, cx: &mut Context<'_>, src: &[u8]) -> Poll<io::Result<usize>> {
        self.check_context();
        let mut st = self.st.borrow_mut();
        if let Some(e) = &st.error {
            return Poll::Ready(Err(io_err(e)));
        }
        if st.shutdown {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "rdma.stream: written after shutdown")));
        }
        if src.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let peer_chunk = st.peer.map_or(0, |p| p.chunk).min(self.chunk);
        let (off, filled) = match st.pending {
            Some((off, filled)) if filled < peer_chunk => (off, filled),
            Some(_) => {
                // Full and waiting for a credit: back-pressure.
                st.write_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            None => match st.free.pop() {
                Some(off) => (off, 0),
                None => {
                    st.write_waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            },
        };
        let n = src.len().min(peer_chunk - filled);
        let mut chunk = self.send_mem.slice(off..off + peer_chunk);
        chunk.write(filled, &src[..n]);
        st.pending = Some((off, filled + n));
        drop(st);
        self.pump();
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: &Rc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_context();
        {
            let mut st = self.st.borrow_mut();
            if let Some(e) = &st.error {
                return Poll::Ready(Err(io_err(e)));
            }
            if st.pending.is_none() && st.in_flight == 0 {
                st.flushing = false;
                return Poll::Ready(Ok(()));
            }
            st.flushing = true;
            st.write_waker = Some(cx.waker().clone());
        }
        self.pump();
        Poll::Pending
    }

    fn poll_shutdown(self: &Rc<Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_context();
        {
            let mut st = self.st.borrow_mut();
            if st.fin_done {
                return Poll::Ready(Ok(()));
            }
            if let Some(e) = &st.error {
                // A peer that finished its side and then closed the connection needs no FIN
                // of ours (TCP's shutdown succeeds then too); nothing of ours was lost.
                if st.fin_received && st.pending.is_none() && e.kind() == ErrorKind::ConnectionLost {
                    return Poll::Ready(Ok(()));
                }
                return Poll::Ready(Err(io_err(e)));
            }
            st.shutdown = true;
            st.flushing = true;
            st.write_waker = Some(cx.waker().clone());
        }
        self.pump();
        Poll::Pending
    }
}

/// A byte stream over an RDMA connection (see the [module documentation](self)).
pub struct RdmaStream {
    shared: Rc<Shared>,
    watcher: Option<JoinHandle<()>>,
}

impl RdmaStream {
    /// Makes a stream of an established connection, with the default [`StreamConfig`]. Both
    /// sides call it (or [`with_config`](RdmaStream::with_config)); it completes once the
    /// peer's handshake arrived.
    ///
    /// The stream takes over the receives of the connection's context: do not post
    /// receives there yourself, and give every stream of one context the same chunk size.
    /// The context's receive queue must hold `recv_buffers` per stream (plus one per stream
    /// for the handshake while the peer has not made its stream yet).
    pub async fn new(conn: Connection) -> Result<RdmaStream> {
        Self::with_config(conn, StreamConfig::default()).await
    }

    /// [`new`](RdmaStream::new) with explicit ring parameters.
    pub async fn with_config(conn: Connection, cfg: StreamConfig) -> Result<RdmaStream> {
        cfg.check()?;
        let rdma = Rdma { inner: conn.inner.rdma.clone() };
        let hub = Hub::of(&rdma, cfg.chunk_size)?;
        let reservation = hub.reserve(cfg.recv_buffers)?;
        Self::handshake(hub, conn, cfg, reservation).await
    }

    /// Connects to an [`RdmaStreamListener`] at `addr` (a context of its own on `dev`).
    pub async fn connect(dev: &Device, addr: SocketAddr) -> Result<RdmaStream> {
        Self::connect_with(dev, addr, StreamConfig::default()).await
    }

    /// [`connect`](RdmaStream::connect) with explicit ring parameters.
    pub async fn connect_with(dev: &Device, addr: SocketAddr, cfg: StreamConfig) -> Result<RdmaStream> {
        cfg.check()?;
        let rdma = cfg.context(dev, 1).await?;
        let hub = Hub::of(&rdma, cfg.chunk_size)?;
        // Posted before connecting, so the server's HELLO finds a receive.
        let reservation = hub.reserve(cfg.recv_buffers)?;
        let conn = rdma.connect(addr).await?;
        Self::handshake(hub, conn, cfg, reservation).await
    }

    async fn handshake(hub: Rc<Hub>, conn: Connection, cfg: StreamConfig, reservation: Reservation) -> Result<Self> {
        let n = usize::from(cfg.send_buffers);
        let send_mem = hub.rdma.device().alloc(n * cfg.chunk_size, Access::LOCAL_READ_WRITE)?;
        let shared = Rc::new(Shared {
            st: RefCell::new(State {
                // One more than the credits we give: the peer's HELLO took a buffer of its own.
                reorder: Reorder::new(cfg.recv_buffers.saturating_add(1)),
                rx: VecDeque::new(),
                rx_pos: 0,
                fin_received: false,
                peer: None,
                owed: 0,
                read_waker: None,
                credits: 0,
                next_tx_seq: 0,
                free: (0..n).rev().map(|i| i * cfg.chunk_size).collect(),
                pending: None,
                in_flight: 0,
                flushing: false,
                shutdown: false,
                fin_sent: false,
                fin_done: false,
                write_waker: None,
                error: hub.broken.borrow().clone(),
            }),
            hub: hub.clone(),
            conn: conn.clone(),
            send_mem,
            chunk: cfg.chunk_size,
            credit_threshold: u32::from(cfg.recv_buffers / 4).max(2),
            _reservation: reservation,
        });
        let watcher = spawn_local(watch(Rc::downgrade(&shared), conn));
        let stream = RdmaStream { shared, watcher: Some(watcher) };

        // Our HELLO (sequence number 0) goes in the first send chunk; it uses the buffer the
        // peer posted for it before its side of the connection was made.
        let off = stream.shared.st.borrow_mut().free.pop().expect("send_buffers >= 1");
        let mut hello = stream.shared.send_mem.slice(off..off + HELLO_LEN);
        hello
            .write(0, &Hello { chunk_size: cfg.chunk_size as u32, recv_buffers: u32::from(cfg.recv_buffers) }.encode());
        stream.shared.st.borrow_mut().credits += 1;
        stream.shared.submit(hello, HELLO);
        // Then the peer's messages, which may have arrived already.
        hub.register(&stream.shared);
        poll_fn(|cx| {
            let mut st = stream.shared.st.borrow_mut();
            if let Some(e) = &st.error {
                return Poll::Ready(Err(e.clone()));
            }
            if st.peer.is_some() {
                return Poll::Ready(Ok(()));
            }
            st.read_waker = Some(cx.waker().clone());
            Poll::Pending
        })
        .await?;
        Ok(stream)
    }

    /// The connection the stream runs over.
    pub fn connection(&self) -> &Connection {
        &self.shared.conn
    }

    /// The peer's address (streams made by address).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.shared.conn.peer_addr()
    }

    /// Reads into `buf`; 0 at EOF (the peer shut its side down).
    pub fn poll_read_bytes(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        // SAFETY: `[u8]` and `[MaybeUninit<u8>]` have the same layout, and the reader only
        // writes initialised bytes into it.
        let dst = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.shared.poll_read_raw(cx, dst)
    }

    /// Accepts up to one chunk of `buf`.
    pub fn poll_write_bytes(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.shared.poll_write(cx, buf)
    }

    /// Completes when everything written so far was delivered to the peer's buffers.
    pub fn poll_flush_bytes(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.poll_flush(cx)
    }

    /// Flushes, then sends the end of the stream; later writes fail.
    pub fn poll_close_bytes(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.shared.poll_shutdown(cx)
    }
}

/// Marks the stream lost when its connection closes (connections made by address).
async fn watch(shared: Weak<Shared>, conn: Connection) {
    conn.closed().await;
    // The messages that arrived before the disconnect complete their receives in the same
    // progress call; let their tasks hand them (the FIN among them) to the stream first.
    for _ in 0..4 {
        yield_now().await;
    }
    if let Some(s) = shared.upgrade() {
        s.fail(Error::new(ErrorKind::ConnectionLost, "rdma.stream: the peer disconnected"));
    }
}

impl Drop for RdmaStream {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.cancel();
        }
        let s = &self.shared;
        s.hub.streams.borrow_mut().remove(&s.conn.id());
        let rx: Vec<Buf> = {
            let mut st = s.st.borrow_mut();
            let mut v: Vec<Buf> = st.reorder.drain().map(|(_, b)| b).collect();
            v.extend(st.rx.drain(..).map(|(b, _)| b));
            v
        };
        for b in rx {
            s.hub.give_back(b);
        }
        // Like closing a socket: what was written goes, then the FIN (when credits allow;
        // otherwise the connection just closes and the peer sees it lost).
        let mut st = s.st.borrow_mut();
        if st.error.is_none() && !st.shutdown {
            st.shutdown = true;
            st.flushing = true;
            drop(st);
            s.pump();
        }
        // The send tasks in flight hold the shared state (and the connection) until DOCA
        // completes them; the connection disconnects when the last of them is done.
    }
}

impl fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaStream").field("conn", &self.shared.conn.id()).field("chunk", &self.shared.chunk).finish()
    }
}

impl futures_io::AsyncRead for RdmaStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.poll_read_bytes(cx, buf)
    }
}

impl futures_io::AsyncWrite for RdmaStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_bytes(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush_bytes(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_close_bytes(cx)
    }
}

#[cfg(feature = "tokio")]
impl tokio::io::AsyncRead for RdmaStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        // SAFETY: only initialised bytes are written into the unfilled part, and exactly the
        // `n` bytes written are then marked filled.
        let dst = unsafe { buf.unfilled_mut() };
        match self.shared.poll_read_raw(cx, dst) {
            Poll::Ready(Ok(n)) => {
                // SAFETY: `poll_read_raw` initialised the first `n` unfilled bytes.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(feature = "tokio")]
impl tokio::io::AsyncWrite for RdmaStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_bytes(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_flush_bytes(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_close_bytes(cx)
    }
}

/// Accepts [`RdmaStream`]s on a port (one RDMA context for all its streams).
pub struct RdmaStreamListener {
    listener: Listener,
    hub: Rc<Hub>,
    cfg: StreamConfig,
}

impl RdmaStreamListener {
    /// Listens on `port` with the default [`StreamConfig`], for at most `max_streams`
    /// streams at once.
    pub async fn bind(dev: &Device, port: u16, max_streams: u16) -> Result<RdmaStreamListener> {
        Self::bind_with(dev, port, max_streams, StreamConfig::default()).await
    }

    /// [`bind`](RdmaStreamListener::bind) with explicit ring parameters.
    pub async fn bind_with(dev: &Device, port: u16, max_streams: u16, cfg: StreamConfig) -> Result<RdmaStreamListener> {
        cfg.check()?;
        if max_streams == 0 {
            return Err(Error::new(ErrorKind::InvalidArgument, "rdma.stream: max_streams must be >= 1"));
        }
        let rdma = cfg.context(dev, max_streams).await?;
        let listener = rdma.listen(port)?;
        let hub = Hub::of(&rdma, cfg.chunk_size)?;
        Ok(RdmaStreamListener { listener, hub, cfg })
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.listener.port()
    }

    /// The next stream. The buffers for the client's messages are posted before the
    /// connection is accepted.
    pub async fn accept(&self) -> Result<RdmaStream> {
        let reservation = self.hub.reserve(self.cfg.recv_buffers)?;
        let conn = self.listener.accept().await?;
        RdmaStream::handshake(self.hub.clone(), conn, self.cfg, reservation).await
    }
}

impl fmt::Debug for RdmaStreamListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaStreamListener").field("port", &self.port()).finish()
    }
}

/// Entry points for the fuzz target `fuzz/fuzz_targets/rdma_stream_hello.rs`: the pure
/// encoders and decoders of the stream's header (the immediate) and handshake (the `HELLO`
/// payload), the first bytes a peer controls.
///
/// **Not API**: hidden from the docs, no stability promise, may change or go at any time.
#[doc(hidden)]
pub mod fuzzing {
    pub use super::{MAX_RECV_BUFFERS, MIN_CHUNK_SIZE, MIN_RECV_BUFFERS};
    /// Length of a `HELLO` payload.
    pub const HELLO_LEN: usize = super::HELLO_LEN;
    /// The `HELLO` payload's first word.
    pub const MAGIC: u32 = super::MAGIC;
    /// The `HELLO` payload's second word.
    pub const VERSION: u32 = super::VERSION;
    /// The immediate's `FIN` flag bit.
    pub const FIN: u32 = super::FIN;
    /// The immediate's `HELLO` flag bit.
    pub const HELLO: u32 = super::HELLO;

    /// An immediate, taken apart: `(fin, hello, credits, seq)`.
    pub fn decode_imm(imm: u32) -> (bool, bool, u32, u16) {
        let i = super::Imm::decode(imm);
        (i.fin, i.hello, i.credits, i.seq)
    }

    /// The immediate a message with `flags` (`FIN`, `HELLO`), `credits` (14 bits kept) and
    /// `seq` carries.
    pub fn encode_imm(flags: u32, credits: u32, seq: u16) -> u32 {
        super::imm(flags, credits, seq)
    }

    /// A `HELLO` payload announcing `chunk_size` and `recv_buffers`.
    pub fn encode_hello(chunk_size: u32, recv_buffers: u32) -> [u8; HELLO_LEN] {
        super::Hello { chunk_size, recv_buffers }.encode()
    }

    /// A received `HELLO` payload: `Some((chunk_size, recv_buffers))`, or `None` when the
    /// stream would refuse it.
    pub fn decode_hello(payload: &[u8]) -> Option<(u32, u32)> {
        super::Hello::decode(payload).map(|h| (h.chunk_size, h.recv_buffers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything `Reorder` hands out, in order, for arrivals in `order` starting at `first`.
    fn replay(first: u16, window: u16, order: &[u16]) -> Vec<u16> {
        let mut r = Reorder::new(window);
        r.next = first;
        let mut out = Vec::new();
        for &seq in order {
            let mut next = r.arrive(seq, seq).expect("inside the window");
            while let Some(s) = next.take().or_else(|| r.next_ready()) {
                out.push(s);
            }
        }
        out
    }

    #[test]
    fn messages_come_back_in_sequence_order_across_the_wrap() {
        // In order: straight through.
        assert_eq!(replay(0, 16, &[0, 1, 2, 3]), [0, 1, 2, 3]);
        // Early ones wait for the gap, across the 16-bit wrap, in every order a window of 4
        // allows (permutations of four consecutive numbers).
        let first = u16::MAX - 1;
        let seqs: Vec<u16> = (0..4).map(|i| first.wrapping_add(i)).collect();
        let mut orders = 0;
        for code in 0..4u32.pow(4) {
            let pos: Vec<usize> = (0..4).map(|k| (code / 4u32.pow(k)) as usize % 4).collect();
            if (0..4).any(|i| !pos.contains(&i)) {
                continue; // not a permutation
            }
            let order: Vec<u16> = pos.iter().map(|&k| seqs[k]).collect();
            assert_eq!(replay(first, 4, &order), seqs, "arrival order {order:?}");
            orders += 1;
        }
        assert_eq!(orders, 24);
    }

    #[test]
    fn outside_the_window_and_repeats_are_refused() {
        let mut r = Reorder::new(4);
        assert_eq!(r.arrive(0, 'a'), Ok(Some('a')));
        assert_eq!(r.arrive(3, 'd'), Ok(None), "3 ahead of 1 is inside a window of 4");
        assert_eq!(r.arrive(5, 'x'), Err('x'), "4 ahead: more than the credits allow");
        assert_eq!(r.arrive(3, 'y'), Err('y'), "a repeated sequence number");
        assert_eq!(r.arrive(0, 'z'), Err('z'), "one already delivered (65535 ahead)");
        assert_eq!(r.next_ready(), None, "1 has not come");
        assert_eq!(r.arrive(1, 'b'), Ok(Some('b')));
        assert_eq!(r.next_ready(), None);
        assert_eq!(r.arrive(2, 'c'), Ok(Some('c')));
        assert_eq!(r.next_ready(), Some('d'));
        assert_eq!(r.arrive(6, 'g'), Ok(None));
        assert_eq!(r.drain().collect::<Vec<_>>(), ['g'], "what waits is handed back when the stream goes");
    }

    #[test]
    fn immediates_round_trip_every_flag_combination() {
        for flags in [0, FIN, HELLO, FIN | HELLO] {
            for (credits, seq) in [(0, 0), (1, 1), (CREDIT_MASK, u16::MAX), (0x1234, 0xabcd)] {
                let i = Imm::decode(imm(flags, credits, seq));
                assert_eq!(i, Imm { fin: flags & FIN != 0, hello: flags & HELLO != 0, credits, seq });
            }
        }
        // Credits beyond 14 bits are cut, never spilled into the flags.
        assert_eq!(Imm::decode(imm(0, CREDIT_MASK + 1, 0)), Imm { fin: false, hello: false, credits: 0, seq: 0 });
        assert_eq!(Imm::decode(imm(0, u32::MAX, 0)).credits, CREDIT_MASK);
        assert!(!Imm::decode(imm(0, u32::MAX, 0)).fin);
    }

    #[test]
    fn hello_round_trips_and_rejects_what_is_not_ours() {
        let h = Hello { chunk_size: DEFAULT_CHUNK_SIZE as u32, recv_buffers: u32::from(DEFAULT_RECV_BUFFERS) };
        let p = h.encode();
        assert_eq!(&p[..4], b"RDST");
        assert_eq!(Hello::decode(&p), Some(h));
        // Wrong length (short, long, empty).
        assert_eq!(Hello::decode(&p[..HELLO_LEN - 1]), None);
        assert_eq!(Hello::decode(&[&p[..], &[0]].concat()), None);
        assert_eq!(Hello::decode(&[]), None);
        // Wrong magic, wrong version.
        let mut bad = p;
        bad[0] ^= 1;
        assert_eq!(Hello::decode(&bad), None);
        let mut bad = p;
        bad[4] = 2;
        assert_eq!(Hello::decode(&bad), None);
        // Parameters below the minimums.
        let small = Hello { chunk_size: MIN_CHUNK_SIZE as u32 - 1, ..h };
        assert_eq!(Hello::decode(&small.encode()), None);
        let few = Hello { recv_buffers: u32::from(MIN_RECV_BUFFERS) - 1, ..h };
        assert_eq!(Hello::decode(&few.encode()), None);
        // More buffers than the credit field can count (a hostile peer's u32::MAX would
        // overflow our credits).
        let many = Hello { recv_buffers: u32::from(MAX_RECV_BUFFERS) + 1, ..h };
        assert_eq!(Hello::decode(&many.encode()), None);
        assert_eq!(Hello::decode(&Hello { recv_buffers: u32::MAX, ..h }.encode()), None);
        // The limits themselves are fine.
        let least = Hello { chunk_size: MIN_CHUNK_SIZE as u32, recv_buffers: u32::from(MIN_RECV_BUFFERS) };
        assert_eq!(Hello::decode(&least.encode()), Some(least));
        let most = Hello { chunk_size: u32::MAX, recv_buffers: u32::from(MAX_RECV_BUFFERS) };
        assert_eq!(Hello::decode(&most.encode()), Some(most));
    }
}
