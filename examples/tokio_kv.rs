//! An HTTP key-value service on tokio whose values live in another process's registered
//! memory, read and written with RDMA through the tokio bridge.
//!
//! ```text
//! cargo run --release --features tokio-example --example tokio_kv -- --listen 127.0.0.1:8080
//! curl -X PUT --data-binary 'hello' http://127.0.0.1:8080/greeting
//! curl http://127.0.0.1:8080/greeting
//! ```
//!
//! Two processes. The HTTP process (this program) starts the *memory server* (this same
//! program again, with `--memory-server`), which registers `SLOTS * SLOT_SIZE` bytes for
//! remote reads and writes, connects an RDMA context to the HTTP process and then only waits:
//! one-sided RDMA needs no CPU on its side. Blobs go over the child's stdin/stdout, one tagged
//! line each way.
//!
//! The HTTP process runs hyper on a multi-thread tokio runtime, and an async-doca runtime
//! beside it. The RDMA connection and a local staging buffer live on one async-doca executor
//! in a [`Pinned`] state; handlers on any tokio worker thread run `GET`/`PUT` as jobs on it
//! through the [`Bridge`] (at most `MAX_IN_FLIGHT` at a time: back-pressure). The index
//! (key to slot) stays in the HTTP process; each slot has a tokio `RwLock`, held across the
//! RDMA operation, so a `GET` never sees half of a `PUT`.
//!
//! * `PUT /key` with a body of at most `SLOT_SIZE` bytes: 204 (413 if larger, 507 when every
//!   slot is taken);
//! * `GET /key`: 200 with the value, or 404.
//!
//! It prints `KV-LISTEN <addr>` once it accepts connections (so `--listen 127.0.0.1:0`
//! works), and stops on SIGINT/SIGTERM, or on end of stdin with `--exit-on-stdin-eof`; it
//! then stops the memory server and waits for it.
//!
//! With `--rdma`, hyper serves HTTP over RDMA instead of TCP: `--listen` is then the RDMA
//! connection-management address, and every client connection is an
//! [`RdmaStream`](async_doca::rdma::RdmaStream) (wrapped in hyper-util's `TokioIo`, like a
//! `TcpStream`). The streams live on one thread that runs a current-thread tokio runtime
//! with the async-doca driver ([`run_local`](async_doca::tokio::run_local)); each connection
//! is a `spawn_local` task there, and its handlers reach the store through the bridge like the
//! TCP ones. Clients connect with `RdmaStream::connect` (see `tests/tokio_kv.rs`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::rc::Rc;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use async_doca::rdma::{Connection, Rdma, RdmaStreamListener, StreamConfig};
use async_doca::tokio::{Bridge, Pinned};
use async_doca::{Access, Device, Error, ErrorKind, Memory, RemoteMemory, Result, Runtime};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use tokio::sync::RwLock;

/// Values are stored in fixed slots of this size in the memory server.
pub const SLOT_SIZE: usize = 4096;
/// Number of slots (keys) the service holds.
pub const SLOTS: usize = 256;
/// Jobs in flight on the async-doca executor at once.
const MAX_IN_FLIGHT: usize = 64;
/// How long either process waits for the other during setup and shutdown.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

/// Stream parameters of the HTTP-over-RDMA mode: requests and answers are small (values
/// are at most `SLOT_SIZE`), so 16 KiB messages and a few buffers per connection suffice.
pub fn rdma_stream_config() -> StreamConfig {
    StreamConfig::default().chunk_size(16 * 1024).recv_buffers(8).send_buffers(4)
}
/// Connections the RDMA listener's context keeps open at the same time (its
/// `max_num_connections`; a closed connection frees its place).
const MAX_RDMA_CONNECTIONS: u16 = 256;

const BLOBS_TAG: &str = "KV-BLOBS";
const LISTEN_TAG: &str = "KV-LISTEN";

#[allow(dead_code)] // The integration test includes this file and has its own main.
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    kv_main(&args, &|role: &[&str]| {
        let mut c = Command::new(std::env::current_exe().expect("own executable"));
        c.args(role);
        c
    })
}

/// Runs the role the arguments ask for and turns its result into an exit status.
pub fn kv_main(args: &[String], myself: &dyn Fn(&[&str]) -> Command) -> ExitCode {
    match kv_run(args, myself) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokio_kv: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the role the arguments ask for. `myself` makes the command that starts this program
/// again with the given arguments (the integration test starts itself instead).
pub fn kv_run(args: &[String], myself: &dyn Fn(&[&str]) -> Command) -> Result<()> {
    if args.first().map(String::as_str) == Some("--memory-server") {
        memory_server()
    } else {
        http_server(args, myself)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

/// Lines from `input` that start with `tag`, read on a thread (so waits can be bounded);
/// other lines are ignored (a test harness may print its own).
fn tagged_lines(input: impl std::io::Read + Send + 'static, tag: &'static str) -> mpsc::Receiver<Vec<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(input).lines() {
            let Ok(line) = line else { break };
            let mut words = line.split_whitespace();
            if words.next() == Some(tag) && tx.send(words.map(str::to_owned).collect()).is_err() {
                break;
            }
        }
    });
    rx
}

fn blobs_line(blobs: &[&[u8]]) -> String {
    let hexed: Vec<String> = blobs.iter().map(|b| hex(b)).collect();
    format!("{BLOBS_TAG} {}", hexed.join(" "))
}

fn parse_blobs(words: Vec<String>, n: usize) -> Result<Vec<Vec<u8>>> {
    let blobs: Option<Vec<Vec<u8>>> = words.iter().map(|w| unhex(w)).collect();
    match blobs {
        Some(b) if b.len() == n => Ok(b),
        _ => Err(Error::new(ErrorKind::InvalidArgument, "the peer's blob line is malformed")),
    }
}

// ---------------------------------------------------------------------------------------
// The memory server.

/// Registers the value memory, connects to the HTTP process, then waits for the end of
/// stdin (the HTTP process closes it to stop us, or it died).
fn memory_server() -> Result<()> {
    let rt = Runtime::builder().cpus(first_cpu()?).build()?;
    rt.block_on(async {
        let dev = Device::open_default()?;
        let rdma = Rdma::builder(&dev).permissions(Access::LOCAL_READ_WRITE | Access::RDMA_ALL).build().await?;
        let values = dev.alloc(SLOTS * SLOT_SIZE, Access::LOCAL_READ_WRITE | Access::RDMA_ALL)?;
        let (blob, pending) = rdma.export()?;
        let mut out = std::io::stdout();
        writeln!(out, "{}", blobs_line(&[&blob, &values.export_rdma()?]))
            .and_then(|()| out.flush())
            .map_err(|e| Error::os(e, "send blobs to the HTTP process"))?;
        let lines = tagged_lines(std::io::stdin(), BLOBS_TAG);
        let words = lines
            .recv_timeout(PEER_TIMEOUT)
            .map_err(|_| Error::new(ErrorKind::TimedOut, "the HTTP process sent no blob"))?;
        let peer = parse_blobs(words, 1)?;
        let _conn = pending.connect(&peer[0]).await?;
        // One-sided reads and writes need nothing from us: wait for the end of stdin,
        // keeping the context and the memory alive.
        while let Err(mpsc::TryRecvError::Empty) = lines.try_recv() {
            async_doca::time::sleep(Duration::from_millis(20)).await;
        }
        drop(values);
        Ok(())
    })
}

fn first_cpu() -> Result<async_doca::CpuSet> {
    let cpus = async_doca::CpuSet::current_affinity()?;
    let cpu = cpus.iter().next().ok_or_else(|| Error::new(ErrorKind::NotFound, "no CPU"))?;
    async_doca::CpuSet::from_cpus([cpu])
}

// ---------------------------------------------------------------------------------------
// The HTTP process.

/// What lives on the async-doca executor: the connection to the memory server, its memory,
/// and a local staging buffer with one region per slot.
struct Store {
    _rdma: Rdma,
    conn: Connection,
    remote: RemoteMemory,
    staging: Memory,
}

impl Store {
    async fn connect(server_blob: Vec<u8>, values_blob: Vec<u8>, ours: mpsc::Sender<Vec<u8>>) -> Result<Store> {
        let dev = Device::open_default()?;
        let rdma = Rdma::builder(&dev).permissions(Access::LOCAL_READ_WRITE | Access::RDMA_ALL).build().await?;
        let (blob, pending) = rdma.export()?;
        ours.send(blob).map_err(|_| Error::new(ErrorKind::Other, "blob channel closed"))?;
        let conn = pending.connect(&server_blob).await?;
        let remote = dev.import(&values_blob)?;
        let staging = dev.alloc(SLOTS * SLOT_SIZE, Access::LOCAL_READ_WRITE)?;
        Ok(Store { _rdma: rdma, conn, remote, staging })
    }

    async fn write(self: Rc<Self>, slot: usize, value: Bytes) -> Result<()> {
        let at = slot * SLOT_SIZE;
        let mut src = self.staging.slice(at..at + value.len());
        src.write(0, &value);
        self.conn.write(src, self.remote.slice(at..at + value.len())).await.0
    }

    async fn read(self: Rc<Self>, slot: usize, len: usize) -> Result<Vec<u8>> {
        let at = slot * SLOT_SIZE;
        let (r, dst) = self.conn.read(self.remote.slice(at..at + len), self.staging.slice(at..at + len)).await;
        r?;
        Ok(dst.to_vec())
    }
}

/// The HTTP process's view of the store: the index here, the values there.
struct Kv {
    store: Pinned<Store>,
    index: Mutex<Index>,
    /// Per slot: the length of the value stored there (`None`: not written yet).
    slots: Vec<Arc<RwLock<Option<usize>>>>,
}

struct Index {
    keys: HashMap<String, usize>,
    free: Vec<usize>,
}

type Body = Full<Bytes>;

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r
}

impl Kv {
    async fn put(&self, key: String, value: Bytes) -> Result<Response<Body>> {
        // A new key takes a free slot and its write lock under the index lock, so that no
        // reader of the key can come before the value is written.
        let existing = {
            let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
            match index.keys.get(&key) {
                Some(&slot) => Ok(slot),
                None => match index.free.pop() {
                    None => return Ok(reply(StatusCode::INSUFFICIENT_STORAGE, "no free slot\n")),
                    Some(slot) => {
                        let guard = self.slots[slot].clone().try_write_owned().expect("a free slot is unlocked");
                        index.keys.insert(key, slot);
                        Err((slot, guard))
                    }
                },
            }
        };
        let (slot, mut guard) = match existing {
            Ok(slot) => (slot, self.slots[slot].clone().write_owned().await),
            Err(fresh) => fresh,
        };
        let len = value.len();
        if len > 0 {
            self.store.run(move |s| s.write(slot, value)).await?;
        }
        *guard = Some(len);
        Ok(reply(StatusCode::NO_CONTENT, Bytes::new()))
    }

    async fn get(&self, key: &str) -> Result<Response<Body>> {
        let slot = self.index.lock().unwrap_or_else(|p| p.into_inner()).keys.get(key).copied();
        let Some(slot) = slot else { return Ok(reply(StatusCode::NOT_FOUND, "no such key\n")) };
        let guard = self.slots[slot].read().await;
        match *guard {
            None => Ok(reply(StatusCode::NOT_FOUND, "no such key\n")),
            Some(0) => Ok(reply(StatusCode::OK, Bytes::new())),
            Some(len) => {
                let value = self.store.run(move |s| s.read(slot, len)).await?;
                Ok(reply(StatusCode::OK, value))
            }
        }
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Response<Body> {
        let key = req.uri().path().trim_start_matches('/').to_owned();
        if key.is_empty() || key.contains('/') {
            return reply(StatusCode::BAD_REQUEST, "use /<key>\n");
        }
        let result = match *req.method() {
            Method::GET => self.get(&key).await,
            Method::PUT => match Limited::new(req.into_body(), SLOT_SIZE).collect().await {
                Ok(body) => self.put(key, body.to_bytes()).await,
                Err(_) => Ok(reply(StatusCode::PAYLOAD_TOO_LARGE, format!("values are at most {SLOT_SIZE} bytes\n"))),
            },
            _ => Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "GET or PUT\n")),
        };
        result.unwrap_or_else(|e| reply(StatusCode::BAD_GATEWAY, format!("rdma: {e}\n")))
    }
}

/// The memory server child: stopped by closing its stdin, killed if it does not exit.
struct MemoryServer(Option<Child>);

impl MemoryServer {
    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.0.take() else { return Ok(()) };
        drop(child.stdin.take());
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            match child.try_wait().map_err(|e| Error::os(e, "wait for the memory server"))? {
                Some(s) if s.success() => return Ok(()),
                Some(s) => return Err(Error::new(ErrorKind::Other, format!("the memory server failed: {s}"))),
                None if Instant::now() > deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::new(ErrorKind::TimedOut, "the memory server did not exit"));
                }
                None => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    }
}

impl Drop for MemoryServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn http_server(args: &[String], myself: &dyn Fn(&[&str]) -> Command) -> Result<()> {
    let mut listen: SocketAddr = "127.0.0.1:8080".parse().expect("valid");
    let mut exit_on_eof = false;
    let mut rdma = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--listen" => {
                listen = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "--listen needs host:port"))?;
            }
            "--exit-on-stdin-eof" => exit_on_eof = true,
            "--rdma" => rdma = true,
            other => return Err(Error::new(ErrorKind::InvalidArgument, format!("unknown argument {other:?}"))),
        }
    }

    // The memory server first: its blobs, then ours once the store's context exists.
    let mut child = myself(&["--memory-server"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Error::os(e, "start the memory server"))?;
    let (child_in, child_out) = (child.stdin.take(), child.stdout.take());
    let mut server = MemoryServer(Some(child));
    let (Some(mut child_in), Some(child_out)) = (child_in, child_out) else {
        return Err(Error::new(ErrorKind::Other, "memory server without pipes"));
    };
    let words = tagged_lines(child_out, BLOBS_TAG)
        .recv_timeout(PEER_TIMEOUT)
        .map_err(|_| Error::new(ErrorKind::TimedOut, "the memory server sent no blobs"))?;
    let mut blobs = parse_blobs(words, 2)?.into_iter();
    let (server_blob, values_blob) = (blobs.next().expect("2"), blobs.next().expect("2"));

    let doca = Runtime::builder().cpus(first_cpu()?).build()?;
    let bridge = Bridge::builder(doca.handle()).max_in_flight(MAX_IN_FLIGHT).build();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::os(e, "build the tokio runtime"))?;
    let served = tokio_rt.block_on(async {
        let (tx, rx) = mpsc::channel();
        let cpu = doca.cpus().iter().next().expect("one CPU");
        let store = bridge.pin(cpu, move || Store::connect(server_blob, values_blob, tx));
        // The store's blob goes out while it connects (the connect completes once the memory
        // server connected too).
        let send_blob = async {
            let blob = tokio::task::spawn_blocking(move || rx.recv_timeout(PEER_TIMEOUT))
                .await
                .map_err(|_| Error::new(ErrorKind::Other, "blob thread"))?
                .map_err(|_| Error::new(ErrorKind::TimedOut, "the store sent no blob"))?;
            writeln!(child_in, "{}", blobs_line(&[&blob]))
                .and_then(|()| child_in.flush())
                .map_err(|e| Error::os(e, "send the blob to the memory server"))?;
            Ok::<_, Error>(child_in)
        };
        let (store, child_in) = tokio::join!(store, send_blob);
        let (store, child_in) = (store?, child_in?);
        let kv = Arc::new(Kv {
            store,
            index: Mutex::new(Index { keys: HashMap::new(), free: (0..SLOTS).rev().collect() }),
            slots: (0..SLOTS).map(|_| Arc::new(RwLock::new(None))).collect(),
        });
        if rdma {
            serve_rdma(listen, kv, exit_on_eof).await?;
            return Ok::<_, Error>(child_in);
        }
        let listener =
            tokio::net::TcpListener::bind(listen).await.map_err(|e| Error::os(e, "bind the HTTP listener"))?;
        let addr = listener.local_addr().map_err(|e| Error::os(e, "listener address"))?;
        println!("{LISTEN_TAG} {addr}");
        let _ = std::io::stdout().flush();
        serve(listener, kv, exit_on_eof).await;
        Ok::<_, Error>(child_in)
    });
    // Stop the memory server (closing its stdin), whatever happened to the service.
    let stopped = match served {
        Ok(child_in) => {
            drop(child_in);
            server.stop()
        }
        Err(e) => {
            drop(server);
            return Err(e);
        }
    };
    // A reader of stdin may still block (without `--exit-on-stdin-eof` there is none).
    tokio_rt.shutdown_timeout(Duration::from_secs(1));
    doca.shutdown();
    stopped
}

/// Completes on a stop signal (or the end of stdin, if asked).
async fn stop_signal(exit_on_eof: bool) {
    let eof = async {
        if exit_on_eof {
            let _ = tokio::task::spawn_blocking(|| {
                let mut sink = Vec::new();
                let _ = std::io::copy(&mut std::io::stdin(), &mut sink);
            })
            .await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let terminated = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = eof => {}
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated => {}
    }
}

/// HTTP over RDMA: a thread of its own runs the RDMA listener and every connection (DOCA
/// objects stay on the thread that made them) under the async-doca driver in a
/// current-thread tokio runtime; this task waits for the stop signal and then stops it.
async fn serve_rdma(listen: SocketAddr, kv: Arc<Kv>, exit_on_eof: bool) -> Result<()> {
    let (port_tx, port_rx) = tokio::sync::oneshot::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || -> Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::os(e, "build the RDMA thread's tokio runtime"))?;
        let local = tokio::task::LocalSet::new();
        rt.block_on(local.run_until(async_doca::tokio::run_local(rdma_accept_loop(listen, kv, port_tx, stop_rx))))?
    });
    let port = port_rx.await.map_err(|_| Error::new(ErrorKind::Other, "the RDMA listener did not start"));
    if let Ok(port) = port {
        println!("{LISTEN_TAG} {}", SocketAddr::new(listen.ip(), port));
        let _ = std::io::stdout().flush();
        stop_signal(exit_on_eof).await;
    }
    let _ = stop_tx.send(());
    let joined = tokio::task::spawn_blocking(move || thread.join())
        .await
        .map_err(|_| Error::new(ErrorKind::Other, "join the RDMA thread"))?;
    joined.unwrap_or_else(|_| Err(Error::new(ErrorKind::Other, "the RDMA thread panicked")))?;
    port.map(drop)
}

/// Binds the RDMA listener (a free port for port 0), reports the port, and serves each
/// accepted stream with hyper until `stop` fires.
async fn rdma_accept_loop(
    listen: SocketAddr,
    kv: Arc<Kv>,
    port_tx: tokio::sync::oneshot::Sender<u16>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> Result<()> {
    let dev = Device::open_default()?;
    let cfg = rdma_stream_config();
    let mut listener = None;
    for _ in 0..20 {
        let port = match listen.port() {
            0 => std::net::TcpListener::bind((listen.ip(), 0))
                .and_then(|l| l.local_addr())
                .map_err(|e| Error::os(e, "find a free port"))?
                .port(),
            p => p,
        };
        match RdmaStreamListener::bind_with(&dev, port, MAX_RDMA_CONNECTIONS, cfg).await {
            Ok(l) => {
                listener = Some(l);
                break;
            }
            Err(e) if listen.port() != 0 => return Err(e),
            Err(_) => continue,
        }
    }
    let listener = listener.ok_or_else(|| Error::new(ErrorKind::ResourceExhausted, "no free port for RDMA"))?;
    let _ = port_tx.send(listener.port());
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok(s) => s,
                    // A client that went away during its handshake: serve the next one.
                    Err(e) if e.kind() == ErrorKind::ConnectionLost => continue,
                    // The listener's context failed: nothing more will be accepted.
                    Err(e) => {
                        eprintln!("tokio_kv: RDMA listener: {e}");
                        break;
                    }
                };
                let kv = kv.clone();
                connections.spawn_local(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let kv = kv.clone();
                        async move { Ok::<_, std::convert::Infallible>(kv.handle(req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        }
    }
    // Connections still open end with the service (their streams close).
    connections.shutdown().await;
    Ok(())
}

/// Accepts connections until a stop signal (or the end of stdin, if asked).
async fn serve(listener: tokio::net::TcpListener, kv: Arc<Kv>, exit_on_eof: bool) {
    let stop = stop_signal(exit_on_eof);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let kv = kv.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let kv = kv.clone();
                        async move { Ok::<_, std::convert::Infallible>(kv.handle(req).await) }
                    });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
                });
            }
        }
    }
}
