//! Comch as futures: the channel a DPU program ([`Server`]) and host programs ([`Client`])
//! talk over, in messages.
//!
//! | on | operation | result |
//! | --- | --- | --- |
//! | [`Server`] | [`accept`](Server::accept) | the next client's [`Connection`] |
//! | [`Client`] | [`ClientBuilder::connect`] | the client's one [`Connection`] |
//! | [`Connection`] | [`send`](Connection::send) | `()` once the message left |
//! | [`Connection`] | [`recv`](Connection::recv), [`messages`](Connection::messages) (a `Stream`) | the next message, `None` at disconnection |
//! | [`Connection`] | [`next_remote_consumer`](Connection::next_remote_consumer) | the id of the peer's next fast-path consumer |
//!
//! Beside messages, a connection carries the **fast path** ([`fast`]): a
//! [`Consumer`](fast::Consumer) posts buffers of registered memory and the peer's
//! [`Producer`](fast::Producer) writes into them directly, with immediate data.
//!
//! The server and its clients meet by *name* (a short string both sides agree on). A server
//! is bound to the device and, on a BlueField, the representor of the host function it
//! serves ([`ServerBuilder::representor`], found with [`Device::open_representor_by_pci`]);
//! a client names its device and the server. Messages are byte vectors up to the
//! negotiated maximum (the smaller of [`ServerBuilder::max_msg_size`] and [`ClientBuilder::max_msg_size`]).
//!
//! # Disconnection
//! When the peer goes away (it stops, drops its object, exits or crashes), pending and later
//! [`send`](Connection::send)s fail with [`ErrorKind::ConnectionLost`] and the message stream
//! ends ([`recv`](Connection::recv) returns `None`) after the messages that had arrived. A
//! server learns of a departure through DOCA's disconnect event; a client has no such event
//! in DOCA 3.0, so its [`recv`](Connection::recv) also re-checks the connection
//! (`doca_comch_connection_update_info`) every millisecond while it waits.
//!
//! # Threads
//! `Server`, `Client` and `Connection` are `!Send` (cheap `Rc` clones): a DOCA context and its
//! connections belong to the executor that created them.
//!
//! ```
//! use async_doca::comch::{Client, Server};
//! use async_doca::{spawn_local, Device, Runtime};
//!
//! Runtime::builder().cpus("0".parse()?).build()?.block_on(async {
//!     let dev = Device::open_default()?;
//!     // Normally the server runs on the DPU and the client on the host.
//!     let name = format!("doc-example-{}", std::process::id());
//!     let server = Server::builder(&dev, &name).build().await?;
//!     let client = spawn_local({
//!         let dev = dev.clone();
//!         async move { Client::builder(&dev, &name).connect().await }
//!     });
//!     let from_host = server.accept().await?;
//!     let to_dpu = client.await??;
//!     to_dpu.send(b"hello").await?;
//!     assert_eq!(from_host.recv().await.as_deref(), Some(&b"hello"[..]));
//!     from_host.send(b"hi").await?;
//!     assert_eq!(to_dpu.recv().await.as_deref(), Some(&b"hi"[..]));
//!     Ok::<(), async_doca::Error>(())
//! })?;
//! # Ok::<(), async_doca::Error>(())
//! ```

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::CString;
use std::fmt;
use std::future::poll_fn;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use crate::addr_map::AddrMap;
use crate::device::{Device, Representor};
use crate::error::{check, Error, ErrorKind, Result};
use crate::ext::DocaCtx;
use crate::ext::{completion_cb, success_cb, DocaTask, TaskSlot};
use crate::sys;

pub mod fast;

/// Default task-pool size (messages being sent at once).
pub const DEFAULT_SEND_TASKS: u32 = 64;
/// How often a waiting client re-checks its connection (see the module docs).
pub const CLIENT_CHECK_INTERVAL: Duration = Duration::from_millis(1);

struct SendTask;
// SAFETY: `as_task` is the task type's own conversion; send tasks are freed with
// doca_task_free (the default).
unsafe impl DocaTask for SendTask {
    type Task = sys::doca_comch_task_send;
    unsafe fn as_task(task: *mut Self::Task) -> *mut sys::doca_task {
        // SAFETY: forwarded; the caller passes a live send task.
        unsafe { sys::doca_comch_task_send_as_task(task) }
    }
}

// ---- state shared with the C callbacks ----

/// One connection's incoming side.
///
/// `conn` may be used only while `closed` is false, or on a client (whose connection lives
/// as long as the client runs): a server's connection is freed by DOCA once its disconnect
/// event returned or after `doca_comch_server_disconnect`, and its address may then be
/// reused by the next client.
struct ConnShared {
    conn: *mut sys::doca_comch_connection,
    queue: RefCell<VecDeque<Vec<u8>>>,
    closed: Cell<bool>,
    waker: RefCell<Option<Waker>>,
    /// The peer's fast-path consumers ([`fast`]): announced, not yet taken by
    /// [`Connection::next_remote_consumer`], in order; and every one alive.
    announced: RefCell<VecDeque<u32>>,
    remote_consumers: RefCell<Vec<u32>>,
    consumer_waker: RefCell<Option<Waker>>,
}

impl ConnShared {
    fn new(conn: *mut sys::doca_comch_connection) -> Rc<ConnShared> {
        Rc::new(ConnShared {
            conn,
            queue: RefCell::new(VecDeque::new()),
            closed: Cell::new(false),
            waker: RefCell::new(None),
            announced: RefCell::new(VecDeque::new()),
            remote_consumers: RefCell::new(Vec::new()),
            consumer_waker: RefCell::new(None),
        })
    }
    /// Wakes a receiver waiting for a message.
    fn wake_receiver(&self) {
        wake(&self.waker);
    }
    /// Wakes a wait for the peer's next consumer.
    fn wake_consumer_wait(&self) {
        wake(&self.consumer_waker);
    }
    /// The connection ended: wakes every wait on it.
    fn wake_all(&self) {
        self.wake_receiver();
        self.wake_consumer_wait();
    }
}

fn wake(slot: &RefCell<Option<Waker>>) {
    // Taken before waking: the woken task may register again at once.
    let w = slot.borrow_mut().take();
    if let Some(w) = w {
        w.wake();
    }
}

/// What a server or client object shares with its callbacks.
#[derive(Default)]
struct Shared {
    conns: RefCell<AddrMap<Rc<ConnShared>>>,
    accepted: RefCell<VecDeque<Rc<ConnShared>>>,
    accept_waker: RefCell<Option<Waker>>,
}

thread_local! {
    /// The live servers and clients of this thread, by DOCA object address.
    static ENDPOINTS: RefCell<AddrMap<Weak<Shared>>> = RefCell::new(AddrMap::default());
}

/// The shared state of the server or client owning `conn`.
fn shared_of(conn: *mut sys::doca_comch_connection) -> Option<Rc<Shared>> {
    // SAFETY: `conn` is a live connection DOCA passed to a callback.
    let owner = unsafe {
        let s = sys::doca_comch_server_get_server_ctx(conn);
        if s.is_null() {
            sys::doca_comch_client_get_client_ctx(conn) as usize
        } else {
            s as usize
        }
    };
    ENDPOINTS.try_with(|m| m.borrow().get(&owner).and_then(Weak::upgrade)).ok().flatten()
}

fn conn_of(shared: &Shared, conn: *mut sys::doca_comch_connection) -> Rc<ConnShared> {
    shared.conns.borrow_mut().entry(conn as usize).or_insert_with(|| ConnShared::new(conn)).clone()
}

unsafe extern "C" fn on_recv(
    _event: *mut sys::doca_comch_event_msg_recv,
    buf: *mut u8,
    len: u32,
    conn: *mut sys::doca_comch_connection,
) {
    let Some(shared) = shared_of(conn) else { return };
    let msg = if len == 0 {
        Vec::new()
    } else {
        // SAFETY: DOCA passes `len` readable bytes valid during the callback; copied at once.
        unsafe { std::slice::from_raw_parts(buf, len as usize) }.to_vec()
    };
    let c = conn_of(&shared, conn);
    c.queue.borrow_mut().push_back(msg);
    c.wake_receiver();
}

unsafe extern "C" fn on_connect(
    _event: *mut sys::doca_comch_event_connection_status_changed,
    conn: *mut sys::doca_comch_connection,
    ok: u8,
) {
    if ok == 0 {
        return;
    }
    let Some(shared) = shared_of(conn) else { return };
    let c = conn_of(&shared, conn);
    shared.accepted.borrow_mut().push_back(c);
    wake(&shared.accept_waker);
}

unsafe extern "C" fn on_disconnect(
    _event: *mut sys::doca_comch_event_connection_status_changed,
    conn: *mut sys::doca_comch_connection,
    _ok: u8,
) {
    let Some(shared) = shared_of(conn) else { return };
    let c = conn_of(&shared, conn);
    // The address is DOCA's to reuse from now on: forget it, so a later client is new.
    shared.conns.borrow_mut().remove(&(conn as usize));
    c.closed.set(true);
    c.wake_all();
}

unsafe extern "C" fn on_new_consumer(
    _event: *mut sys::doca_comch_event_consumer,
    conn: *mut sys::doca_comch_connection,
    id: u32,
) {
    let Some(shared) = shared_of(conn) else { return };
    let c = conn_of(&shared, conn);
    c.remote_consumers.borrow_mut().push(id);
    c.announced.borrow_mut().push_back(id);
    c.wake_consumer_wait();
}

unsafe extern "C" fn on_expired_consumer(
    _event: *mut sys::doca_comch_event_consumer,
    conn: *mut sys::doca_comch_connection,
    id: u32,
) {
    let Some(shared) = shared_of(conn) else { return };
    let c = conn_of(&shared, conn);
    c.remote_consumers.borrow_mut().retain(|&x| x != id);
    c.announced.borrow_mut().retain(|&x| x != id);
}

/// Comch's task allocations take no user data (DOCA's signatures: send, post-receive,
/// producer send): the slot key that routes a completion to its future is set on the task
/// right after a successful allocation (`rc`).
fn with_slot<K: DocaTask>(
    rc: sys::doca_error_t,
    t: *mut K::Task,
    slot: &TaskSlot,
) -> std::result::Result<*mut K::Task, sys::doca_error_t> {
    if rc != sys::DOCA_SUCCESS {
        return Err(rc);
    }
    // SAFETY: the task was just allocated, is of kind K and is ours.
    unsafe { sys::doca_task_set_user_data(K::as_task(t), slot.user_data()) };
    Ok(t)
}

// ---- endpoints ----

enum Kind {
    Server(DocaCtx<sys::doca_comch_server>),
    Client(DocaCtx<sys::doca_comch_client>),
}

struct Endpoint {
    kind: Kind,
    shared: Rc<Shared>,
    key: usize,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = ENDPOINTS.try_with(|m| m.borrow_mut().remove(&self.key));
    }
}

impl Endpoint {
    /// Whether the server or client still exists in DOCA: the executor destroys it when it
    /// ends, even while connections to it live on, and its connections go with it. Every
    /// call that names a connection checks this first (as the send path's `as_ptr` does).
    fn live(&self) -> Result<()> {
        match &self.kind {
            Kind::Server(ctx) => ctx.as_ptr().map(drop),
            Kind::Client(ctx) => ctx.as_ptr().map(drop),
        }
    }

    /// Sends `msg` on `conn`. The allocation may be retried after the task pool was
    /// exhausted (`submit` waits for a freed task), and a server's disconnect event may have
    /// been delivered in between, after which DOCA frees the connection: every attempt looks
    /// at `closed` first and never hands DOCA a connection it may have freed.
    async fn send(&self, conn: &ConnShared, msg: Vec<u8>) -> Result<()> {
        const OP: &str = "comch.send";
        let (p, len) = (msg.as_ptr(), msg.len() as u32);
        let open = move || if conn.closed.get() { Err(sys::DOCA_ERROR_NOT_CONNECTED) } else { Ok(conn.conn) };
        let fut = match &self.kind {
            Kind::Server(ctx) => {
                let s = ctx.as_ptr()?;
                let alloc = move |slot: &TaskSlot| {
                    let c = open()?;
                    let mut t = std::ptr::null_mut();
                    // SAFETY: live server and one of its connections, not freed (its
                    // disconnect event has not run: `open`); `msg` (owned by the future until
                    // the completion) holds `len` bytes at `p`.
                    let rc = unsafe { sys::doca_comch_server_task_send_alloc_init(s, c, p.cast(), len, &mut t) };
                    with_slot::<SendTask>(rc, t, slot)
                };
                let f = ctx.submit_keeping::<SendTask, _, _>(OP, alloc, Some(conn.conn as usize), len as usize, msg);
                return f.await.0.map(drop);
            }
            Kind::Client(ctx) => ctx,
        };
        let c = fut.as_ptr()?;
        let alloc = move |slot: &TaskSlot| {
            let conn = open()?;
            let mut t = std::ptr::null_mut();
            // SAFETY: as above, for the client.
            let rc = unsafe { sys::doca_comch_client_task_send_alloc_init(c, conn, p.cast(), len, &mut t) };
            with_slot::<SendTask>(rc, t, slot)
        };
        let f = fut.submit_keeping::<SendTask, _, _>(OP, alloc, Some(conn.conn as usize), len as usize, msg);
        f.await.0.map(drop)
    }
}

/// Configures and creates a [`Server`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build() is awaited"]
pub struct ServerBuilder {
    dev: Device,
    name: String,
    max_msg: Option<u32>,
    recv_queue: Option<u32>,
    send_tasks: u32,
    rep: Option<Representor>,
}

impl ServerBuilder {
    /// Binds the server to the representor of the host function it serves (a BlueField
    /// requires one; the soft provider also accepts none, and serves local clients either
    /// way). The server keeps the representor open while it lives.
    pub fn representor(mut self, rep: &Representor) -> Self {
        self.rep = Some(rep.clone());
        self
    }
    /// The largest message (default: the provider's default).
    pub fn max_msg_size(mut self, n: u32) -> Self {
        self.max_msg = Some(n);
        self
    }
    /// Messages buffered before the sender is held back (default: the provider's default).
    pub fn recv_queue_size(mut self, n: u32) -> Self {
        self.recv_queue = Some(n);
        self
    }
    /// Messages being sent at once (default 64); more wait.
    pub fn send_tasks(mut self, n: u32) -> Self {
        self.send_tasks = n;
        self
    }

    /// Creates the server on the current executor and starts listening.
    ///
    /// # Errors
    /// A name that is empty or too long ([`ErrorKind::InvalidArgument`]), another server of
    /// this name already running (`DOCA_ERROR_IN_USE`), what DOCA refuses.
    pub async fn build(self) -> Result<Server> {
        let name = cname(&self.name)?;
        let mut s = std::ptr::null_mut();
        let rep = self.rep.as_ref().map_or(std::ptr::null_mut(), Representor::as_ptr);
        check(
            // SAFETY: open device, NULL or an open representor, NUL-terminated name, valid
            // out-pointer.
            unsafe { sys::doca_comch_server_create(self.dev.as_ptr(), rep, name.as_ptr(), &mut s) },
            "comch: doca_comch_server_create",
        )?;
        // The device and representor outlive the server: released after its destroy.
        let keep = (self.dev.clone(), self.rep.clone());
        // SAFETY: a fresh, IDLE, unconnected server of this thread, destroyed only by DocaCtx.
        let ctx = unsafe {
            DocaCtx::new("comch_server", s, sys::doca_comch_server_as_ctx(s), move |s| {
                let rc = sys::doca_comch_server_destroy(s);
                drop(keep);
                rc
            })
        }?;
        // SAFETY: the server is live and IDLE; the callbacks have the exact C signatures.
        unsafe {
            if let Some(n) = self.max_msg {
                check(sys::doca_comch_server_set_max_msg_size(s, n), "comch: set max msg size")?;
            }
            if let Some(n) = self.recv_queue {
                check(sys::doca_comch_server_set_recv_queue_size(s, n), "comch: set recv queue size")?;
            }
            check(
                sys::doca_comch_server_task_send_set_conf(
                    s,
                    Some(success_cb::<SendTask>),
                    Some(completion_cb::<SendTask>),
                    self.send_tasks,
                ),
                "comch: configure send tasks",
            )?;
            check(sys::doca_comch_server_event_msg_recv_register(s, Some(on_recv)), "comch: register recv")?;
            check(
                sys::doca_comch_server_event_consumer_register(s, Some(on_new_consumer), Some(on_expired_consumer)),
                "comch: register consumer events",
            )?;
            check(
                sys::doca_comch_server_event_connection_status_changed_register(
                    s,
                    Some(on_connect),
                    Some(on_disconnect),
                ),
                "comch: register connection events",
            )?;
        }
        let shared = Rc::new(Shared::default());
        ENDPOINTS.with(|m| m.borrow_mut().insert(s as usize, Rc::downgrade(&shared)));
        let ep = Rc::new(Endpoint { kind: Kind::Server(ctx), shared, key: s as usize });
        if let Kind::Server(ctx) = &ep.kind {
            ctx.start().await?;
        }
        Ok(Server { ep, dev: self.dev })
    }
}

fn cname(name: &str) -> Result<CString> {
    CString::new(name).map_err(|_| Error::new(ErrorKind::InvalidArgument, "comch: the name contains a NUL byte"))
}

/// The DPU side of a channel (see the [module documentation](self)).
#[derive(Clone)]
pub struct Server {
    ep: Rc<Endpoint>,
    dev: Device,
}

impl Server {
    /// A builder for a server of `name` on `dev`.
    pub fn builder(dev: &Device, name: &str) -> ServerBuilder {
        ServerBuilder {
            dev: dev.clone(),
            name: name.into(),
            max_msg: None,
            recv_queue: None,
            send_tasks: DEFAULT_SEND_TASKS,
            rep: None,
        }
    }

    /// The device of the server.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    /// Waits for the next client to connect.
    ///
    /// # Errors
    /// The server's executor ended ([`ErrorKind::BadState`]): the server is gone with it.
    pub async fn accept(&self) -> Result<Connection> {
        let shared = self.ep.shared.clone();
        let c = poll_fn(|cx| {
            if let Some(c) = shared.accepted.borrow_mut().pop_front() {
                return Poll::Ready(Ok(c));
            }
            // A destroyed server reports no more clients.
            if let Err(e) = self.ep.live() {
                return Poll::Ready(Err(e.context_prefix("comch.accept")));
            }
            *shared.accept_waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await?;
        Ok(Connection { shared: c, ep: self.ep.clone(), client: false })
    }
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("comch::Server").finish_non_exhaustive()
    }
}

/// Configures and connects a [`Client`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .connect() is awaited"]
pub struct ClientBuilder {
    dev: Device,
    name: String,
    max_msg: Option<u32>,
    recv_queue: Option<u32>,
    send_tasks: u32,
}

impl ClientBuilder {
    /// The largest message (default: the provider's default); the smaller of the two sides'
    /// limits applies.
    pub fn max_msg_size(mut self, n: u32) -> Self {
        self.max_msg = Some(n);
        self
    }
    /// Messages buffered before the server is held back.
    pub fn recv_queue_size(mut self, n: u32) -> Self {
        self.recv_queue = Some(n);
        self
    }
    /// Messages being sent at once (default 64).
    pub fn send_tasks(mut self, n: u32) -> Self {
        self.send_tasks = n;
        self
    }

    /// Connects to the server of the name (waiting for it to appear, within DOCA's start
    /// limits) and returns the connection; the [`Client`] stays alive with it.
    ///
    /// # Errors
    /// No server answered in time or it refused (the start failed: [`ErrorKind::BadState`]
    /// or DOCA's code), a bad name ([`ErrorKind::InvalidArgument`]).
    pub async fn connect(self) -> Result<Connection> {
        let name = cname(&self.name)?;
        let mut c = std::ptr::null_mut();
        check(
            // SAFETY: open device, NUL-terminated name, valid out-pointer.
            unsafe { sys::doca_comch_client_create(self.dev.as_ptr(), name.as_ptr(), &mut c) },
            "comch: doca_comch_client_create",
        )?;
        let keep = self.dev.clone();
        // SAFETY: as for the server.
        let ctx = unsafe {
            DocaCtx::new("comch_client", c, sys::doca_comch_client_as_ctx(c), move |c| {
                let rc = sys::doca_comch_client_destroy(c);
                drop(keep);
                rc
            })
        }?;
        // SAFETY: the client is live and IDLE; the callbacks have the exact C signatures.
        unsafe {
            if let Some(n) = self.max_msg {
                check(sys::doca_comch_client_set_max_msg_size(c, n), "comch: set max msg size")?;
            }
            if let Some(n) = self.recv_queue {
                check(sys::doca_comch_client_set_recv_queue_size(c, n), "comch: set recv queue size")?;
            }
            check(
                sys::doca_comch_client_task_send_set_conf(
                    c,
                    Some(success_cb::<SendTask>),
                    Some(completion_cb::<SendTask>),
                    self.send_tasks,
                ),
                "comch: configure send tasks",
            )?;
            check(sys::doca_comch_client_event_msg_recv_register(c, Some(on_recv)), "comch: register recv")?;
            check(
                sys::doca_comch_client_event_consumer_register(c, Some(on_new_consumer), Some(on_expired_consumer)),
                "comch: register consumer events",
            )?;
        }
        let shared = Rc::new(Shared::default());
        ENDPOINTS.with(|m| m.borrow_mut().insert(c as usize, Rc::downgrade(&shared)));
        let ep = Rc::new(Endpoint { kind: Kind::Client(ctx), shared, key: c as usize });
        if let Kind::Client(ctx) = &ep.kind {
            ctx.start().await.map_err(|e| e.context_prefix("comch.connect"))?;
        }
        let mut conn = std::ptr::null_mut();
        // SAFETY: a RUNNING client; valid out-pointer.
        check(unsafe { sys::doca_comch_client_get_connection(c, &mut conn) }, "comch.connect")?;
        let shared = conn_of(&ep.shared, conn);
        Ok(Connection { shared, ep, client: true })
    }
}

/// The host side of a channel: use [`Client::builder`], whose `connect` gives the
/// [`Connection`] (which keeps the client alive).
#[derive(Debug)]
pub struct Client;

impl Client {
    /// A builder for a client of the server named `name`, on `dev`.
    pub fn builder(dev: &Device, name: &str) -> ClientBuilder {
        ClientBuilder {
            dev: dev.clone(),
            name: name.into(),
            max_msg: None,
            recv_queue: None,
            send_tasks: DEFAULT_SEND_TASKS,
        }
    }
}

/// One client's connection, on either side (see the [module documentation](self)).
#[derive(Clone)]
pub struct Connection {
    shared: Rc<ConnShared>,
    ep: Rc<Endpoint>,
    client: bool,
}

impl Connection {
    /// Sends one message; completes once it left (the peer has it or will get it).
    ///
    /// # Errors
    /// The peer is gone ([`ErrorKind::ConnectionLost`]), a message larger than the
    /// negotiated maximum ([`ErrorKind::InvalidArgument`]).
    pub async fn send(&self, msg: impl Into<Vec<u8>>) -> Result<()> {
        if self.shared.closed.get() {
            // The connection object may be gone already (see `ConnShared`).
            return Err(Error::new(ErrorKind::ConnectionLost, "comch.send: the connection ended"));
        }
        self.ep.send(&self.shared, msg.into()).await
    }

    /// The next message, or `None` once the peer is gone and every message that arrived
    /// before was returned.
    pub async fn recv(&self) -> Option<Vec<u8>> {
        // A message already queued needs no wait (whose deadline's clock read would come
        // first on a client).
        if let Some(m) = self.shared.queue.borrow_mut().pop_front() {
            return Some(m);
        }
        self.wait_or_end(|cx| self.poll_recv(cx)).await
    }

    /// Waits with `poll`, which is ready once there is something to return or the connection
    /// ended (it looks at that itself). A client polls again every [`CLIENT_CHECK_INTERVAL`]
    /// while it waits: DOCA 3.0 gives a client no disconnect event (see the module docs).
    async fn wait_or_end<T>(&self, mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
        loop {
            let wait = poll_fn(&mut poll);
            if !self.client {
                return wait.await;
            }
            if let Ok(r) = crate::time::timeout(CLIENT_CHECK_INTERVAL, wait).await {
                return r;
            }
        }
    }

    fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        if let Some(m) = self.shared.queue.borrow_mut().pop_front() {
            return Poll::Ready(Some(m));
        }
        if self.shared.closed.get() || self.ep.live().is_err() || (self.client && !self.alive()) {
            self.shared.closed.set(true);
            return Poll::Ready(None);
        }
        *self.shared.waker.borrow_mut() = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Whether DOCA still reports the connection as up.
    fn alive(&self) -> bool {
        // SAFETY: called on clients only (`poll_recv`, `next_remote_consumer`), after
        // `Endpoint::live`: the connection lives as long as the client does, which `self`
        // keeps alive.
        let rc = unsafe { sys::doca_comch_connection_update_info(self.shared.conn) };
        rc == sys::DOCA_SUCCESS || rc == sys::DOCA_ERROR_CONNECTION_INPROGRESS
    }

    /// Waits for the peer's next fast-path [`Consumer`](fast::Consumer) on this connection
    /// and returns its id, for [`Producer::send`](fast::Producer::send). Consumers are
    /// returned once each, in the order the peer announced them; one withdrawn before it was
    /// taken is skipped.
    ///
    /// # Errors
    /// The connection ended ([`ErrorKind::ConnectionLost`]) or its server or client is gone
    /// ([`ErrorKind::BadState`]).
    pub async fn next_remote_consumer(&self) -> Result<u32> {
        const OP: &str = "comch.next_remote_consumer";
        self.wait_or_end(|cx| {
            if let Some(id) = self.shared.announced.borrow_mut().pop_front() {
                return Poll::Ready(Ok(id));
            }
            if let Err(e) = self.ep.live() {
                return Poll::Ready(Err(e.context_prefix(OP)));
            }
            if self.shared.closed.get() || (self.client && !self.alive()) {
                self.shared.closed.set(true);
                return Poll::Ready(Err(Error::new(ErrorKind::ConnectionLost, format!("{OP}: the connection ended"))));
            }
            *self.shared.consumer_waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// The DOCA connection, for creating a consumer or producer on it: it must not have
    /// ended, and its server or client must exist (DOCA frees the connection with either).
    fn open_ptr(&self, op: &str) -> Result<*mut sys::doca_comch_connection> {
        self.ep.live().map_err(|e| e.context_prefix(op))?;
        if self.shared.closed.get() {
            return Err(Error::new(ErrorKind::ConnectionLost, format!("{op}: the connection ended")));
        }
        Ok(self.shared.conn)
    }

    /// The ids of the peer's fast-path consumers on this connection that are alive now
    /// (announced and not withdrawn).
    pub fn remote_consumers(&self) -> Vec<u32> {
        self.shared.remote_consumers.borrow().clone()
    }

    /// The messages as a `Stream` (ends at disconnection).
    pub fn messages(&self) -> Messages {
        Messages { conn: self.clone(), pending: None }
    }

    /// Counters of the connection: (messages sent, bytes sent, messages received, bytes
    /// received).
    pub fn counters(&self) -> Result<(u64, u64, u64, u64)> {
        if self.shared.closed.get() {
            return Err(Error::new(ErrorKind::ConnectionLost, "comch.counters: the connection ended"));
        }
        self.ep.live().map_err(|e| e.context_prefix("comch.counters"))?;
        let c = self.shared.conn;
        // SAFETY: not closed and its server or client exists (checked above): DOCA has not
        // freed it.
        check(unsafe { sys::doca_comch_connection_update_info(c) }, "comch.counters")?;
        let get = |t| {
            let mut v = 0u64;
            // SAFETY: live connection, valid out-pointer.
            check(unsafe { sys::doca_comch_connection_get_counter(c, t, &mut v) }, "comch.counters").map(|()| v)
        };
        Ok((
            get(sys::DOCA_COMCH_COUNTER_SENT_MESSAGES)?,
            get(sys::DOCA_COMCH_COUNTER_SENT_BYTES)?,
            get(sys::DOCA_COMCH_COUNTER_RECV_MESSAGES)?,
            get(sys::DOCA_COMCH_COUNTER_RECV_BYTES)?,
        ))
    }

    /// Server side: closes this client's connection (the client sees it end).
    pub fn disconnect(&self) -> Result<()> {
        match &self.ep.kind {
            Kind::Server(ctx) => {
                if self.shared.closed.get() {
                    return Err(Error::from_doca(sys::DOCA_ERROR_NOT_CONNECTED, "comch.disconnect"));
                }
                let s = ctx.as_ptr()?;
                // SAFETY: live server and one of its connections (not closed, checked above).
                check(unsafe { sys::doca_comch_server_disconnect(s, self.shared.conn) }, "comch.disconnect")?;
                self.ep.shared.conns.borrow_mut().remove(&(self.shared.conn as usize));
                self.shared.closed.set(true);
                self.shared.wake_all();
                Ok(())
            }
            Kind::Client(_) => Err(Error::new(
                ErrorKind::NotSupported,
                "comch.disconnect: a client disconnects by dropping its connection",
            )),
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("comch::Connection").field("client", &self.client).finish_non_exhaustive()
    }
}

/// The `recv` in progress of a [`Messages`] stream.
type NextMessage = Pin<Box<dyn std::future::Future<Output = Option<Vec<u8>>>>>;

/// The messages of a [`Connection`] as a [`futures_lite::Stream`].
pub struct Messages {
    conn: Connection,
    pending: Option<NextMessage>,
}

impl futures_lite::Stream for Messages {
    type Item = Vec<u8>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Vec<u8>>> {
        if self.pending.is_none() {
            let c = self.conn.clone();
            self.pending = Some(Box::pin(async move { c.recv().await }));
        }
        let r = self.pending.as_mut().expect("set above").as_mut().poll(cx);
        if r.is_ready() {
            self.pending = None;
        }
        r
    }
}

/// The largest message the device's Comch supports, in bytes (`doca_comch_cap_get_max_msg_size`):
/// the upper bound for [`ServerBuilder::max_msg_size`] and [`ClientBuilder::max_msg_size`].
///
/// # Errors
/// The device has no Comch ([`ErrorKind::NotSupported`]).
pub fn max_msg_size(dev: &Device) -> Result<u32> {
    let mut n = 0u32;
    check(
        // SAFETY: the device is open (`dev` holds it); valid out-pointer.
        unsafe { sys::doca_comch_cap_get_max_msg_size(sys::doca_dev_as_devinfo(dev.as_ptr()), &mut n) },
        "comch: max msg size",
    )?;
    Ok(n)
}
