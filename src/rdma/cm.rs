//! Connecting by address: [`Rdma::listen`] / [`Listener::accept`] on the server,
//! [`Rdma::connect`] on the client (DOCA's RDMA connection management).
//!
//! DOCA reports connection events through four callbacks that run inside progress. This
//! module turns them into futures: each context has a [`CmShared`] record (found from the
//! callbacks through the context's user data) that queues incoming requests and records
//! how each connection's handshake ended; the futures look at it and park their wakers
//! there until the next event.
//!
//! A connection, a request or a connect attempt may outlive the executor that owns its
//! context (a `Connection` returned out of `block_on`, a stream kept by a tokio task after
//! the driver ended). The executor destroys the context when it ends, and DOCA frees the
//! context's connections with it: from then on such a handle is inert. `disconnect`,
//! `accept` and `reject` fail with [`ErrorKind::BadState`], and dropping the handle only
//! frees what is ours (a client's address); it never names the freed connection to DOCA.
//!
//! ```
//! use async_doca::rdma::Rdma;
//! use async_doca::{Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     let server = Rdma::builder(&dev).max_connections(4).build().await?;
//!     let client = Rdma::builder(&dev).build().await?;
//!     # let mut port = 0;
//!     # let mut listener = None;
//!     # for _ in 0..20 {
//!     #     port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
//!     #     if let Ok(l) = server.listen(port) { listener = Some(l); break; }
//!     # }
//!     # let listener = listener.unwrap();
//!     // let listener = server.listen(13579)?;
//!     let accepting = async_doca::spawn_local(async move {
//!         let req = listener.request().await?;
//!         req.accept(b"welcome").await
//!     });
//!     let conn = client.connect(([127, 0, 0, 1], port).into()).await?;
//!     let at_server = accepting.await??;
//!     assert_eq!(conn.private_data(), b"welcome");
//!     assert!(at_server.peer_addr().is_some());
//!     conn.disconnect()?;
//!     at_server.closed().await;
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{CStr, CString};
use std::fmt;
use std::future::poll_fn;
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};

use super::{ConnInner, Connection, Rdma, RdmaInner};
use crate::error::{check, Error, ErrorKind, Result};
use crate::executor::context::CtxRecord;
use crate::sys;

type RawConn = *mut sys::doca_rdma_connection;

/// How a connection's handshake (or life) ended, as the callbacks reported it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Established,
    Failed,
    Disconnected,
}

/// The connection-management state of one context (see the module docs).
pub(super) struct CmShared {
    key: u64,
    requests: RefCell<VecDeque<RawConn>>,
    /// Connections someone may still ask about: a request from its callback until it is
    /// answered and over, a client connection from its first event until it is closed. Only
    /// their events are recorded. Any other event (a late one for a connection this side
    /// already ended) would sit in the maps below forever: nothing reads or forgets it, and
    /// a long-running server would grow by an entry per client.
    tracked: RefCell<HashSet<usize>>,
    outcomes: RefCell<HashMap<usize, Outcome>>,
    /// Connections that were established, even if they ended since: the handshake
    /// succeeded, which is what `accept` and `connect` report (a connection that is
    /// established and closed before its future looked is still a connection the peer used).
    established: RefCell<HashSet<usize>>,
    /// Client connections by the token passed as their user data to `connect_to_addr`.
    by_token: RefCell<HashMap<u64, usize>>,
    /// Tokens of the `connect` calls waiting for their connection's first event.
    connecting: RefCell<HashSet<u64>>,
    /// `connect` calls cancelled before their connection's first event, by token, with the
    /// address the attempt uses: that event ends the attempt (see `Connecting`). Shared
    /// with the context's destroy step, which frees the addresses of attempts whose event
    /// never came once the context is gone (DOCA may use them until then, possibly after
    /// this record is dropped).
    abandoned: Abandoned,
    next_token: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
    /// The context's record: whether DOCA's objects still exist. The executor destroys a
    /// context at its shutdown even while handles to it live on (a connection kept by a
    /// tokio task that outlives the driver, say), and `doca_rdma_destroy` frees the
    /// context's connections with it: after that, a connection pointer must not reach DOCA.
    ctx: Rc<CtxRecord>,
}

/// The addresses of `connect` attempts cancelled before their first event (see
/// `CmShared::abandoned`), shared by a context's record and its destroy step.
#[derive(Clone, Default)]
pub(super) struct Abandoned(Rc<RefCell<HashMap<u64, *mut sys::doca_rdma_addr>>>);

impl Abandoned {
    #[cfg(test)]
    fn borrow(&self) -> std::cell::Ref<'_, HashMap<u64, *mut sys::doca_rdma_addr>> {
        self.0.borrow()
    }

    fn borrow_mut(&self) -> std::cell::RefMut<'_, HashMap<u64, *mut sys::doca_rdma_addr>> {
        self.0.borrow_mut()
    }

    /// Frees the addresses whose attempt never reported its first event.
    ///
    /// # Safety
    /// The context these attempts belong to is destroyed (`doca_rdma_destroy` succeeded):
    /// nothing can use the addresses any more.
    pub(super) unsafe fn free_after_destroy(&self) {
        for (_, addr) in self.0.borrow_mut().drain() {
            // SAFETY: an address created by `connect` and left by its cancelled attempt,
            // whose context is gone (the caller's contract); freed once (drained).
            let _ = unsafe { sys::doca_rdma_addr_destroy(addr) };
        }
    }
}

thread_local! {
    /// The contexts of this thread, by their ctx user data (what the callbacks receive).
    static REGISTRY: RefCell<HashMap<u64, Weak<CmShared>>> = RefCell::new(HashMap::new());
}

impl CmShared {
    /// Registers the record of the context whose callbacks receive `key` as ctx user data.
    pub(super) fn register(key: u64, abandoned: Abandoned, ctx: Rc<CtxRecord>) -> Rc<CmShared> {
        let cm = Rc::new(CmShared {
            key,
            requests: RefCell::new(VecDeque::new()),
            tracked: RefCell::new(HashSet::new()),
            outcomes: RefCell::new(HashMap::new()),
            established: RefCell::new(HashSet::new()),
            by_token: RefCell::new(HashMap::new()),
            connecting: RefCell::new(HashSet::new()),
            abandoned,
            next_token: Cell::new(1),
            wakers: RefCell::new(Vec::new()),
            ctx,
        });
        REGISTRY.with(|r| r.borrow_mut().insert(key, Rc::downgrade(&cm)));
        cm
    }

    /// Whether the context, and with it every connection of it, still exists in DOCA (see
    /// `ctx`). Every call that names a connection checks it first.
    pub(super) fn live(&self) -> bool {
        self.ctx.is_alive()
    }

    fn wake(&self) {
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    fn park(&self, w: &Waker) {
        let mut v = self.wakers.borrow_mut();
        if !v.iter().any(|x| x.will_wake(w)) {
            v.push(w.clone());
        }
    }

    fn outcome(&self, c: RawConn) -> Option<Outcome> {
        self.outcomes.borrow().get(&(c as usize)).copied()
    }

    /// How `c`'s handshake ended: established (even if it ended since), or failed.
    fn settled(&self, c: RawConn) -> Option<Outcome> {
        if self.established.borrow().contains(&(c as usize)) {
            return Some(Outcome::Established);
        }
        self.outcome(c)
    }

    /// Whether answering request `c` failed with `rc` because its client left before the
    /// answer: a CM failure (CONNECTION_ABORTED), or, from a provider that calls it a bad
    /// state, a BAD_STATE after the request's failure was reported.
    fn request_gone(&self, c: RawConn, rc: sys::doca_error_t) -> bool {
        rc == sys::DOCA_ERROR_CONNECTION_ABORTED
            || (rc == sys::DOCA_ERROR_BAD_STATE && self.outcome(c) == Some(Outcome::Failed))
    }

    /// Stops tracking `c` and forgets what was recorded about it: nobody will ask again, and
    /// DOCA may give its address to a later connection. Called on every path that ends a
    /// connection or a request for this side: closed, rejected (or dropped unanswered),
    /// refused by `accept`, or failed.
    fn forget(&self, c: RawConn) {
        self.tracked.borrow_mut().remove(&(c as usize));
        self.outcomes.borrow_mut().remove(&(c as usize));
        self.established.borrow_mut().remove(&(c as usize));
    }

    /// Entries held for connections and requests, all maps together (for the tests: a
    /// context that ended every connection holds none).
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.tracked.borrow().len()
            + self.outcomes.borrow().len()
            + self.established.borrow().len()
            + self.by_token.borrow().len()
            + self.connecting.borrow().len()
            + self.abandoned.borrow().len()
    }

    /// Waits until `ready` gives a value, or until the context is gone (`None`): the
    /// executor destroys a context when it ends, and a destroyed context reports no more
    /// events, so a wait for one would never end (see `ctx`). Every wait of this module
    /// goes through here.
    async fn until<T>(&self, mut ready: impl FnMut(&Self) -> Option<T>) -> Option<T> {
        poll_fn(|cx| {
            if let Some(v) = ready(self) {
                return Poll::Ready(Some(v));
            }
            if !self.live() {
                return Poll::Ready(None);
            }
            self.park(cx.waker());
            Poll::Pending
        })
        .await
    }

    /// Waits until `c`'s handshake ended (see [`settled`](Self::settled)); `None` when
    /// the context is gone.
    async fn wait_outcome(&self, c: RawConn) -> Option<Outcome> {
        self.until(|cm| cm.settled(c)).await
    }
}

impl Drop for CmShared {
    fn drop(&mut self) {
        let _ = REGISTRY.try_with(|r| r.borrow_mut().remove(&self.key));
    }
}

fn with_cm(ctx_ud: sys::doca_data, f: impl FnOnce(&CmShared)) {
    let cm = REGISTRY.try_with(|r| r.borrow().get(&ctx_ud.as_u64()).and_then(Weak::upgrade)).ok().flatten();
    if let Some(cm) = cm {
        f(&cm);
        cm.wake();
    }
}

unsafe extern "C" fn on_request(c: RawConn, ctx_ud: sys::doca_data) {
    crate::trace::event!(
        info,
        { conn = c as usize, peer = crate::trace::dbg(peer_of(c)) },
        "rdma: connection request"
    );
    with_cm(ctx_ud, |cm| {
        // A new connection: whatever was recorded at this address belonged to an old one.
        cm.forget(c);
        cm.tracked.borrow_mut().insert(c as usize);
        cm.requests.borrow_mut().push_back(c);
    });
}

fn record(c: RawConn, ud: sys::doca_data, ctx_ud: sys::doca_data, o: Outcome) {
    crate::trace::event!(
        info,
        { conn = c as usize, outcome = crate::trace::dbg(o) },
        "rdma: connection {}",
        match o {
            Outcome::Established => "established",
            Outcome::Failed => "failed (refused, rejected or timed out)",
            Outcome::Disconnected => "closed by the peer",
        }
    );
    with_cm(ctx_ud, |cm| {
        let (key, token) = (c as usize, ud.as_u64());
        if o != Outcome::Disconnected {
            let abandoned = cm.abandoned.borrow_mut().remove(&token);
            if let Some(addr) = abandoned {
                // The first event of a connect cancelled before it: nobody will own this
                // connection. Established, it is ended at once (the peer sees it close, as
                // the samples end a connection from a callback); failed, the attempt is
                // over. Either way its address is no longer used.
                // SAFETY: a connection of this live context, reported by its callback; the
                // address is the attempt's, freed once (it left `abandoned` above).
                unsafe {
                    if o == Outcome::Established {
                        let _ = sys::doca_rdma_connection_disconnect(c);
                    }
                    let _ = sys::doca_rdma_addr_destroy(addr);
                }
                return;
            }
        }
        if o != Outcome::Disconnected && cm.connecting.borrow().contains(&token) {
            // A client connection's first event: its `connect` is waiting for it.
            cm.tracked.borrow_mut().insert(key);
            cm.by_token.borrow_mut().insert(token, key);
        }
        if !cm.tracked.borrow().contains(&key) {
            return;
        }
        cm.outcomes.borrow_mut().insert(key, o);
        if o == Outcome::Established {
            cm.established.borrow_mut().insert(key);
        }
    });
}

unsafe extern "C" fn on_established(c: RawConn, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    record(c, ud, ctx_ud, Outcome::Established);
}

unsafe extern "C" fn on_failure(c: RawConn, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    record(c, ud, ctx_ud, Outcome::Failed);
}

unsafe extern "C" fn on_disconnect(c: RawConn, ud: sys::doca_data, ctx_ud: sys::doca_data) {
    record(c, ud, ctx_ud, Outcome::Disconnected);
}

/// Registers the four callbacks on an IDLE `rdma`.
///
/// # Safety
/// `rdma` is live and IDLE.
pub(super) unsafe fn install(rdma: *mut sys::doca_rdma) -> Result<()> {
    // SAFETY: the caller's contract; the callbacks have the exact C signatures.
    check(
        unsafe {
            sys::doca_rdma_set_connection_state_callbacks(
                rdma,
                Some(on_request),
                Some(on_established),
                Some(on_failure),
                Some(on_disconnect),
            )
        },
        "rdma: set connection callbacks",
    )
}

/// The address DOCA reports for a connection.
fn peer_of(c: RawConn) -> Option<SocketAddr> {
    let mut a = std::ptr::null_mut();
    // SAFETY: a live connection; valid out-pointer.
    if unsafe { sys::doca_rdma_connection_get_addr(c, &mut a) } != sys::DOCA_SUCCESS || a.is_null() {
        return None;
    }
    let (mut ty, mut p, mut port) = (0, std::ptr::null(), 0u16);
    // SAFETY: a live address object; valid out-pointers; the string belongs to it.
    if unsafe { sys::doca_rdma_addr_get_params(a, &mut ty, &mut p, &mut port) } != sys::DOCA_SUCCESS || p.is_null() {
        return None;
    }
    // SAFETY: DOCA returned a NUL-terminated string owned by the address object.
    let text = unsafe { CStr::from_ptr(p) }.to_str().ok()?;
    let ip: IpAddr = text.parse().ok()?;
    Some(SocketAddr::new(ip, port))
}

/// The private data the server accepted with (client side; soft provider only: DOCA's C
/// API has no getter for it).
fn private_of(c: RawConn) -> Vec<u8> {
    #[cfg(feature = "soft")]
    {
        let mut buf = [0u8; 255];
        let mut n = 0u8;
        // SAFETY: a live connection; `buf` has room for 255 bytes, `n` is writable.
        if unsafe { sys::doca_soft_rdma_connection_get_private_data(c, buf.as_mut_ptr(), &mut n) } == sys::DOCA_SUCCESS
        {
            return buf[..usize::from(n)].to_vec();
        }
    }
    #[cfg(not(feature = "soft"))]
    let _ = c;
    Vec::new()
}

/// What a managed connection adds to [`ConnInner`].
pub(super) struct ConnCm {
    shared: Rc<CmShared>,
    /// The `doca_rdma_addr` a client connected with (it must outlive the connection).
    addr: *mut sys::doca_rdma_addr,
    peer: Option<SocketAddr>,
    private: Vec<u8>,
}

impl ConnCm {
    /// Ends the connection on our side (idempotent), then frees the client's address. A
    /// connection whose context the executor destroyed ended with it: only the address is
    /// left to free.
    pub(super) fn close(&self, c: RawConn) {
        if self.shared.live() {
            crate::trace::event!(info, { conn = c as usize }, "rdma: disconnecting");
            // SAFETY: a connection of a context that still exists (checked just above; a
            // context's connections live until it is destroyed).
            let _ = unsafe { sys::doca_rdma_connection_disconnect(c) };
        }
        // Nothing asks about it any more (a late event may record it again: harmless, a new
        // connection at this address starts with a request, which forgets it).
        self.shared.forget(c);
        if !self.addr.is_null() {
            // SAFETY: our address object; no longer used by the disconnected connection.
            let _ = unsafe { sys::doca_rdma_addr_destroy(self.addr) };
        }
    }
}

fn managed(rdma: Rc<RdmaInner>, conn: RawConn, cm: ConnCm) -> Connection {
    Connection { inner: Rc::new(ConnInner::new(rdma, conn, Some(cm))) }
}

impl Rdma {
    /// Listens for connection requests on `port` (127.0.0.1 and ::1 with the soft
    /// provider, whose data path needs both peers on one host).
    ///
    /// # Errors
    /// A port another listener holds (DOCA's code, [`ErrorKind::ConnectionLost`]), port 0
    /// ([`ErrorKind::InvalidArgument`]), a context not running.
    pub fn listen(&self, port: u16) -> Result<Listener> {
        let rdma = self.inner.ctx.as_ptr()?;
        // SAFETY: live, started context of this thread.
        check(unsafe { sys::doca_rdma_start_listen_to_port(rdma, port) }, "rdma.listen")?;
        Ok(Listener { rdma: self.inner.clone(), port })
    }

    /// Connects to a listening peer at `addr`. Completes once both sides are established.
    /// Dropping the future before that gives up the attempt: a connection it still makes is
    /// ended at once, so the server sees it close.
    ///
    /// # Errors
    /// Nobody listening, a rejection or the request timeout ([`ErrorKind::ConnectionLost`]),
    /// an address of another host ([`ErrorKind::NotSupported`] with the soft provider),
    /// more connections than [`RdmaBuilder::max_connections`](super::RdmaBuilder::max_connections)
    /// ([`ErrorKind::ResourceExhausted`]).
    pub async fn connect(&self, addr: SocketAddr) -> Result<Connection> {
        let rdma = self.inner.ctx.as_ptr()?;
        let cm = self.inner.cm.clone();
        let (ty, text) = match addr.ip() {
            IpAddr::V4(ip) => (sys::DOCA_RDMA_ADDR_TYPE_IPv4, ip.to_string()),
            IpAddr::V6(ip) => (sys::DOCA_RDMA_ADDR_TYPE_IPv6, ip.to_string()),
        };
        let text = CString::new(text).map_err(|_| Error::new(ErrorKind::InvalidArgument, "rdma.connect: address"))?;
        let mut a = std::ptr::null_mut();
        // SAFETY: a NUL-terminated string and a valid out-pointer.
        check(unsafe { sys::doca_rdma_addr_create(ty, text.as_ptr(), addr.port(), &mut a) }, "rdma.connect")?;
        let token = cm.next_token.get();
        cm.next_token.set(token + 1);
        // SAFETY: live context and address; the address lives until the connection ends.
        let rc = unsafe { sys::doca_rdma_connect_to_addr(rdma, a, sys::doca_data::from_u64(token)) };
        if rc != sys::DOCA_SUCCESS {
            // SAFETY: our address, unused.
            unsafe { sys::doca_rdma_addr_destroy(a) };
            return Err(Error::from_doca(rc, "rdma.connect"));
        }
        // No callback runs before the next progress, so the attempt's first event cannot
        // come before this.
        let waiting = Connecting { cm: &cm, token, addr: a };
        cm.connecting.borrow_mut().insert(token);
        // Gone with the context, the attempt's guard frees the address.
        let conn = cm.until(|cm| cm.by_token.borrow().get(&token).map(|&c| c as RawConn)).await;
        let conn = conn.ok_or_else(|| cm.ctx.destroyed("rdma.connect"))?;
        waiting.done();
        let c = ConnCm { shared: cm.clone(), addr: a, peer: Some(addr), private: Vec::new() };
        match cm.settled(conn) {
            Some(Outcome::Established) => {
                let private = private_of(conn);
                Ok(managed(self.inner.clone(), conn, ConnCm { private, ..c }))
            }
            _ => {
                c.close(conn);
                Err(Error::new(
                    ErrorKind::ConnectionLost,
                    format!("rdma.connect: {addr}: refused, rejected or timed out"),
                ))
            }
        }
    }
}

/// A `connect` waiting for its connection's first event; its token stops being waited for
/// when it is dropped. A connect cancelled after that event (its connection is in
/// `by_token`, nobody took it) ends the connection as `ConnCm::close` would. Cancelled
/// before it, the attempt stays with DOCA (there is no call to cancel it), with its address
/// (DOCA may still use it): the token goes to `abandoned`, and the attempt's first event
/// ends the connection if it was established and frees the address (`record`); if the
/// context is destroyed first, its destroy step frees the address (`Abandoned`).
struct Connecting<'a> {
    cm: &'a CmShared,
    token: u64,
    addr: *mut sys::doca_rdma_addr,
}

impl Connecting<'_> {
    /// The first event came and `connect` took its connection: nothing to clean up.
    fn done(self) {
        self.cm.connecting.borrow_mut().remove(&self.token);
        self.cm.by_token.borrow_mut().remove(&self.token);
    }
}

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        if !self.cm.connecting.borrow_mut().remove(&self.token) {
            return; // `done`
        }
        let orphan = self.cm.by_token.borrow_mut().remove(&self.token);
        if let Some(c) = orphan {
            let c = c as RawConn;
            if self.cm.live() {
                // SAFETY: a connection of this context, which still exists (checked just
                // above), that nobody owns: ended once.
                let _ = unsafe { sys::doca_rdma_connection_disconnect(c) };
            }
            // SAFETY: the attempt's address, no longer used: its connection is ended, or was
            // destroyed with its context.
            let _ = unsafe { sys::doca_rdma_addr_destroy(self.addr) };
            self.cm.forget(c);
        } else if self.cm.live() {
            self.cm.abandoned.borrow_mut().insert(self.token, self.addr);
        } else {
            // SAFETY: the attempt's address; its context is destroyed, so DOCA no longer uses
            // it (and the destroy step, which frees the parked ones, has run).
            let _ = unsafe { sys::doca_rdma_addr_destroy(self.addr) };
        }
    }
}

/// A port this context listens on (see [`Rdma::listen`]). Dropping it stops listening;
/// connections already made stay.
pub struct Listener {
    rdma: Rc<RdmaInner>,
    port: u16,
}

impl Listener {
    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The next connection request, to [accept](ConnectionRequest::accept) or
    /// [reject](ConnectionRequest::reject).
    pub async fn request(&self) -> Result<ConnectionRequest> {
        let cm = self.rdma.cm.clone();
        let conn =
            cm.until(|cm| cm.requests.borrow_mut().pop_front()).await.ok_or_else(|| cm.ctx.destroyed("rdma.listen"))?;
        Ok(ConnectionRequest { rdma: Some(self.rdma.clone()), conn, peer: peer_of(conn) })
    }

    /// Accepts the next request without private data.
    pub async fn accept(&self) -> Result<Connection> {
        self.request().await?.accept(&[]).await
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Ok(rdma) = self.rdma.ctx.as_ptr() {
            // SAFETY: live context of this thread.
            let _ = unsafe { sys::doca_rdma_stop_listen_to_port(rdma, self.port) };
        }
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener").field("port", &self.port).finish()
    }
}

/// A client's request to connect. Dropping it unanswered rejects it.
pub struct ConnectionRequest {
    rdma: Option<Rc<RdmaInner>>,
    conn: RawConn,
    peer: Option<SocketAddr>,
}

impl ConnectionRequest {
    /// The client's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Accepts, sending `private_data` (at most 255 bytes) to the client; completes once the
    /// connection is established. Dropping the future before that ends the connection (the
    /// client's connect fails, or its connection closes).
    ///
    /// # Errors
    /// More than 255 bytes ([`ErrorKind::InvalidArgument`]); the client vanished meanwhile
    /// ([`ErrorKind::ConnectionLost`]).
    pub async fn accept(mut self, private_data: &[u8]) -> Result<Connection> {
        let rdma = self.rdma.take().expect("a request is answered once");
        // The request died with its context if the executor destroyed it.
        rdma.ctx.as_ptr().map_err(|e| e.context_prefix("rdma.accept"))?;
        let len = u8::try_from(private_data.len())
            .map_err(|_| Error::new(ErrorKind::InvalidArgument, "rdma.accept: private data above 255 bytes"))?;
        let ptr = if len == 0 { std::ptr::null_mut() } else { private_data.as_ptr() as *mut _ };
        // SAFETY: a live requested connection; DOCA only reads `len` bytes at `ptr`.
        let rc = unsafe { sys::doca_rdma_connection_accept(self.conn, ptr, len) };
        if rc != sys::DOCA_SUCCESS {
            let gone = rdma.cm.request_gone(self.conn, rc);
            rdma.cm.forget(self.conn);
            if gone {
                return Err(Error::new(ErrorKind::ConnectionLost, "rdma.accept: the client went away"));
            }
            check(rc, "rdma.accept")?;
        }
        let cm = rdma.cm.clone();
        // Accepted: the connection is ours until the handshake ends. Cancelled meanwhile (the
        // future dropped), the guard ends it as a failed handshake is ended: otherwise it
        // would be established with nobody to own, use or close it.
        let mut accepted = Accepted {
            conn: self.conn,
            cm: Some(ConnCm { shared: cm.clone(), addr: std::ptr::null_mut(), peer: self.peer, private: Vec::new() }),
        };
        let outcome = cm.wait_outcome(self.conn).await;
        let c = accepted.cm.take().expect("taken once, here");
        match outcome {
            Some(Outcome::Established) => Ok(managed(rdma, self.conn, c)),
            None => {
                c.close(self.conn);
                Err(cm.ctx.destroyed("rdma.accept"))
            }
            _ => {
                c.close(self.conn);
                Err(Error::new(ErrorKind::ConnectionLost, "rdma.accept: the client went away"))
            }
        }
    }

    /// Rejects the request (the client's connect fails). A client that left before the answer
    /// is not an error: it did not connect, which is what rejecting asks for.
    pub fn reject(mut self) -> Result<()> {
        crate::trace::event!(info, { conn = self.conn as usize }, "rdma: rejecting a connection request");
        let rdma = self.rdma.take();
        if let Some(r) = &rdma {
            // The request died with its context if the executor destroyed it.
            r.ctx.as_ptr().map_err(|e| e.context_prefix("rdma.reject"))?;
        }
        // SAFETY: a requested connection of a context that still exists (checked above).
        let rc = unsafe { sys::doca_rdma_connection_reject(self.conn) };
        let gone = rdma.as_ref().is_some_and(|r| r.cm.request_gone(self.conn, rc));
        if let Some(r) = &rdma {
            r.cm.forget(self.conn);
        }
        if gone {
            return Ok(());
        }
        check(rc, "rdma.reject")
    }
}

/// A connection `accept` answered whose handshake has not ended (see `accept`).
struct Accepted {
    conn: RawConn,
    cm: Option<ConnCm>,
}

impl Drop for Accepted {
    fn drop(&mut self) {
        if let Some(c) = self.cm.take() {
            c.close(self.conn);
        }
    }
}

impl Drop for ConnectionRequest {
    fn drop(&mut self) {
        if let Some(rdma) = self.rdma.take() {
            if rdma.cm.live() {
                // SAFETY: a requested connection, not answered, of a context that still
                // exists (checked just above).
                let _ = unsafe { sys::doca_rdma_connection_reject(self.conn) };
            }
            rdma.cm.forget(self.conn);
        }
    }
}

impl fmt::Debug for ConnectionRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionRequest").field("peer", &self.peer).finish()
    }
}

impl Connection {
    /// The peer's address (connections made by address only).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.inner.cm.as_ref().and_then(|c| c.peer)
    }

    /// The private data the server accepted this connection with (client side, connections
    /// made by address; empty otherwise).
    pub fn private_data(&self) -> &[u8] {
        self.inner.cm.as_ref().map_or(&[], |c| &c.private)
    }

    /// Completes when the peer disconnected or vanished (connections made by address). Its
    /// operations then fail with [`ErrorKind::ConnectionLost`]. Also when the context is
    /// gone with its executor (see the [module docs](super#threads)), whichever way the
    /// connection was made; otherwise a connection made with blobs never completes this.
    pub async fn closed(&self) {
        let Some(c) = self.inner.cm.as_ref() else {
            // No events for blob connections: only the end of the context ends one, seen at
            // any poll (nothing wakes this future for it; the executor that would is the one
            // that ended).
            let rec = self.inner.rdma.ctx.record();
            return poll_fn(|_| if rec.is_alive() { Poll::Pending } else { Poll::Ready(()) }).await;
        };
        let conn = self.inner.conn;
        // A connection ends with its context: a context gone is a connection closed.
        let over = |cm: &CmShared| matches!(cm.outcome(conn), Some(Outcome::Disconnected | Outcome::Failed));
        c.shared.until(|cm| over(cm).then_some(())).await;
    }

    /// Disconnects (connections made by address): the peer's [`closed`](Connection::closed)
    /// completes; operations in flight here fail with [`ErrorKind::ConnectionLost`].
    pub fn disconnect(&self) -> Result<()> {
        if self.inner.cm.is_none() {
            return Err(Error::new(ErrorKind::NotSupported, "rdma.disconnect: not a connection made by address"));
        }
        // A connection ends with its context if the executor destroyed it.
        self.inner.rdma.ctx.as_ptr().map_err(|e| e.context_prefix("rdma.disconnect"))?;
        // SAFETY: a connection of a context that still exists (checked just above).
        check(unsafe { sys::doca_rdma_connection_disconnect(self.inner.conn) }, "rdma.disconnect")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Rdma;
    use super::Listener;
    use crate::{Device, ErrorKind};

    /// A server for 4 clients listening on a free loopback port, a client, the listener and
    /// its address.
    async fn server_and_client() -> crate::Result<(Rdma, Rdma, Listener, std::net::SocketAddr)> {
        let dev = Device::open_default()?;
        let server = Rdma::builder(&dev).max_connections(4).build().await?;
        let client = Rdma::builder(&dev).build().await?;
        let listener = (0..20)
            .find_map(|_| {
                let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
                server.listen(port).ok()
            })
            .expect("a free port");
        let addr = ([127, 0, 0, 1], listener.port()).into();
        Ok((server, client, listener, addr))
    }

    /// `client` connects to `addr` in a task of its own (so the server can answer meanwhile).
    fn connect_in_task(
        client: &Rdma,
        addr: std::net::SocketAddr,
    ) -> crate::JoinHandle<crate::Result<super::Connection>> {
        let c = client.clone();
        crate::spawn_local(async move { c.connect(addr).await })
    }

    /// A connection established, then closed by the client; the server sees it close.
    async fn connect_and_close(client: &Rdma, listener: &Listener, addr: std::net::SocketAddr) -> crate::Result<()> {
        let connecting = connect_in_task(client, addr);
        let at_server = listener.request().await?.accept(&[]).await?;
        let conn = connecting.await??;
        conn.disconnect()?;
        at_server.closed().await;
        Ok(())
    }

    /// A server and its clients keep no record of a connection or request once it is over,
    /// whichever way it ended: closed by either side, rejected, dropped unanswered, or a
    /// connect cancelled; late events (DOCA may report a connection again after this side
    /// ended it) are not recorded. Before, each rejected or refused request and each late
    /// event left an entry behind: a long-running server grew by one per client.
    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn nothing_is_kept_for_connections_and_requests_that_ended() {
        crate::testkit::runtime()
            .block_on(async {
                let (server, client, listener, addr) = server_and_client().await?;
                for round in 0..3 {
                    connect_and_close(&client, &listener, addr).await?;
                    // Rejected, then dropped unanswered: the client's connect fails both times.
                    for reject in [true, false] {
                        let connecting = connect_in_task(&client, addr);
                        let req = listener.request().await?;
                        if reject {
                            req.reject()?;
                        } else {
                            drop(req);
                        }
                        let e = connecting.await?.expect_err("refused");
                        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "round {round}: {e}");
                    }
                }
                // Late events have time to arrive (and must not be recorded).
                crate::time::sleep(Duration::from_millis(50)).await;
                assert_eq!(server.inner.cm.entries(), 0, "the server keeps records of ended connections");
                assert_eq!(client.inner.cm.entries(), 0, "the client keeps records of ended connections");
                Ok::<_, crate::Error>(())
            })
            .unwrap();
    }

    /// Polls `f` once with a waker that does nothing.
    fn poll_once<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
        f.poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    }

    /// An `accept` or a `connect` cancelled in the middle of its handshake (the future
    /// dropped after DOCA took the answer or the attempt) leaves no connection behind: the
    /// other side's connection ends (or never establishes), and neither side keeps a record.
    /// Before, the accepted connection was established with nobody to own or close it, and
    /// so was the connection of a connect cancelled before its first event: the peer's
    /// `closed` never completed.
    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn a_cancelled_accept_or_connect_leaves_no_connection_behind() {
        crate::testkit::runtime()
            .block_on(async {
                let within = |what: &'static str| {
                    move |r: std::result::Result<(), crate::time::Elapsed>| {
                        r.unwrap_or_else(|_| panic!("{what}: the other side's connection stayed open"))
                    }
                };
                let (server, client, listener, addr) = server_and_client().await?;
                for _ in 0..3 {
                    // The server accepts, then gives up before the handshake ends.
                    let connecting = connect_in_task(&client, addr);
                    let req = listener.request().await?;
                    let mut accept = Box::pin(req.accept(&[]));
                    assert!(poll_once(accept.as_mut()).is_pending(), "the handshake takes a progress");
                    drop(accept);
                    if let Ok(conn) = connecting.await? {
                        within("accept cancelled")(crate::time::timeout(Duration::from_secs(10), conn.closed()).await);
                    }

                    // The client gives up before its attempt's first event.
                    let mut connect = Box::pin(client.connect(addr));
                    assert!(poll_once(connect.as_mut()).is_pending(), "the attempt takes a progress");
                    drop(connect);
                    if let Ok(at_server) = listener.request().await?.accept(&[]).await {
                        within("connect cancelled")(
                            crate::time::timeout(Duration::from_secs(10), at_server.closed()).await,
                        );
                    }
                }
                // Still serving.
                connect_and_close(&client, &listener, addr).await?;
                crate::time::sleep(Duration::from_millis(50)).await;
                assert_eq!(server.inner.cm.entries(), 0, "the server keeps records of ended connections");
                assert_eq!(client.inner.cm.entries(), 0, "the client keeps records of ended connections");
                Ok::<_, crate::Error>(())
            })
            .unwrap();
    }

    /// An executor destroys its contexts when it ends, even while handles to them live on,
    /// and DOCA frees a context's connections with it. Connections made by address (both
    /// ends), an unanswered request, a cancelled connect and a listener that outlive their
    /// executor must not reach DOCA when they are used or dropped afterwards. Before, dropping
    /// such a connection called `doca_rdma_connection_disconnect` on a freed connection: a
    /// crash `tokio_kv`'s RDMA test hit about once in ten runs, when hyper's connection tasks
    /// outlived the driver.
    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn handles_that_outlive_their_executor_do_not_reach_doca() {
        let rt = crate::testkit::runtime();
        let (at_client, at_server, request, cancelled, listener) = rt
            .block_on(crate::time::timeout(Duration::from_secs(20), async {
                let (_server, client, listener, addr) = server_and_client().await?;
                let connecting = connect_in_task(&client, addr);
                let at_server = listener.request().await?.accept(&[]).await?;
                let at_client = connecting.await??;
                // A second client's request, not answered.
                let second = Rdma::builder(&Device::open_default()?).build().await?;
                let _pending = connect_in_task(&second, addr);
                let request = listener.request().await?;
                // A third client's connect, cancelled before its first event, its future kept.
                let third = Rdma::builder(&Device::open_default()?).build().await?;
                let mut cancelled = Box::pin(async move { third.connect(addr).await });
                assert!(poll_once(cancelled.as_mut()).is_pending(), "the attempt takes a progress");
                Ok::<_, crate::Error>((at_client, at_server, request, cancelled, listener))
            }))
            .expect("within 20 s")
            .unwrap();
        // The executor of `block_on` is gone, and every context with it.
        for (who, c) in [("client", &at_client), ("server", &at_server)] {
            let e = c.disconnect().expect_err("a connection of a destroyed context");
            assert_eq!(e.kind(), ErrorKind::BadState, "{who}: {e}");
        }
        assert!(request.reject().is_err(), "a request of a destroyed context");
        drop((at_client, at_server, cancelled, listener));
    }
}
