//! `perf --server` / `perf --client`: the two processes find each other by address through
//! RDMA connection management ([`Rdma::listen`] / [`Rdma::connect`], DOCA's RDMA CM), and that
//! managed connection is their control channel: the run's header, the export blobs of each
//! run's measured contexts and memory, and the final `done` travel as RDMA sends on it.
//!
//! Each process keeps its control context on a thread of its own, in an event-mode runtime
//! (asleep on the PE's notification fd while nothing moves, so it does not compete with the
//! measured sides for their CPUs), and hands the sides an ordinary [`Link`]: the measured
//! code is the same for procs 1, procs 2 and client/server, and the raw rows (doca-sys only,
//! no runtime) run there too.
//!
//! Frames are whole RDMA messages (at most [`MAX_FRAME`] bytes), so no length prefix is
//! needed. The server serves one client run at a time, on one context for its whole life: a
//! receive is always posted on it, and what arrives is routed by the connection it came on.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use async_doca::rdma::{ConnId, Connection, Rdma};
use async_doca::{Access, CpuSet, Device, Error, ErrorKind, IdleMode, Memory, Result, Runtime};

use super::peer::Link;
use super::PEER_TIMEOUT;

/// The largest control frame: export blobs are a few hundred bytes; a run header less.
pub const MAX_FRAME: usize = 16 << 10;

/// Connections the server's control context may hold at once: one client at a time, plus
/// room for ones still being torn down.
const SERVER_CONNECTIONS: u16 = 16;

/// The control runtime: one executor on `cpu`, asleep when idle.
fn control_runtime(cpu: usize) -> Result<Runtime> {
    Runtime::builder().cpus(CpuSet::from_cpus([cpu])?).idle(IdleMode::Event).build()
}

/// Outgoing frames: from the side's channel to RDMA sends on `conn`, until the side drops its
/// link (after its last frame). Polls the channel with a growing pause (100 µs up to 20 ms)
/// while it is empty: the control channel is idle during the measurement.
async fn send_frames(conn: &Connection, mem: &Memory, out: mpsc::Receiver<Vec<u8>>) -> Result<()> {
    let mut pause = Duration::from_micros(100);
    loop {
        match out.try_recv() {
            Ok(frame) => {
                if frame.len() > MAX_FRAME {
                    return Err(Error::new(ErrorKind::InvalidArgument, "perf: control frame too large"));
                }
                let mut buf = mem.slice(MAX_FRAME..MAX_FRAME + frame.len());
                buf.write(0, &frame);
                conn.send(buf).await.0?;
                pause = Duration::from_micros(100);
            }
            Err(mpsc::TryRecvError::Empty) => {
                async_doca::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(mpsc::TryRecvError::Disconnected) => return Ok(()),
        }
    }
}

/// Incoming frames of every connection of `rdma`: one receive always posted, each message
/// handed to the channel of its connection (kept aside until that connection is registered:
/// a client may send before the server's accept has returned).
#[derive(Default)]
struct Routes {
    sinks: HashMap<ConnId, mpsc::Sender<Vec<u8>>>,
    early: Vec<(ConnId, Vec<u8>)>,
}

impl Routes {
    fn deliver(&mut self, conn: ConnId, frame: Vec<u8>) {
        match self.sinks.get(&conn) {
            // A side that is gone does not want it.
            Some(tx) => drop(tx.send(frame)),
            None => self.early.push((conn, frame)),
        }
    }

    fn register(&mut self, conn: ConnId, tx: mpsc::Sender<Vec<u8>>) {
        let (mine, others) = std::mem::take(&mut self.early).into_iter().partition(|(c, _)| *c == conn);
        self.early = others;
        for (_, frame) in mine {
            let _ = tx.send(frame);
        }
        self.sinks.insert(conn, tx);
    }
}

async fn receive_frames(rdma: &Rdma, mem: &Memory, routes: &RefCell<Routes>) -> Result<()> {
    let mut buf = mem.slice(0..MAX_FRAME);
    loop {
        let (got, b) = rdma.recv(buf).await;
        buf = b;
        let msg = got?;
        let mut frame = vec![0u8; msg.len];
        buf.read(0, &mut frame);
        routes.borrow_mut().deliver(msg.conn, frame);
    }
}

/// A control context: the RDMA context, its memory (one receive and one send buffer).
async fn control_context(dev: &Device, connections: u16) -> Result<(Rdma, Memory)> {
    let rdma = Rdma::builder(dev).max_connections(connections).build().await?;
    let mem = dev.alloc(2 * MAX_FRAME, Access::LOCAL_READ_WRITE)?;
    Ok((rdma, mem))
}

/// The client's control link: a thread that connects to the server at `addr` (retrying
/// until [`PEER_TIMEOUT`] while nobody listens there yet) and carries the frames. The thread
/// ends when the returned link is dropped or the server goes away.
pub fn connect(addr: SocketAddr, cpu: usize) -> Result<Link> {
    let (out_tx, out_rx) = mpsc::channel();
    let (in_tx, in_rx) = mpsc::channel();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    let ready_err = ready_tx.clone();
    std::thread::Builder::new()
        .name("perf-cm-client".into())
        .spawn(move || {
            let run = move || -> Result<()> {
                let rt = control_runtime(cpu)?;
                let job = rt.spawn_on(cpu, move || async move {
                    let dev = Device::open_default()?;
                    let (rdma, mem) = control_context(&dev, 1).await?;
                    let deadline = Instant::now() + PEER_TIMEOUT;
                    let conn = loop {
                        match rdma.connect(addr).await {
                            Ok(c) => break c,
                            // Refused (nobody listens yet) or timed out: try again, bounded.
                            Err(e) if e.kind() == ErrorKind::ConnectionLost && Instant::now() < deadline => {
                                async_doca::time::sleep(Duration::from_millis(100)).await
                            }
                            Err(e) => return Err(e.context_prefix(&format!("perf --client: connect to {addr}"))),
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let routes = RefCell::new(Routes::default());
                    routes.borrow_mut().register(conn.id(), in_tx);
                    // Until the measuring side is done with the link, or the server is gone.
                    let sending = send_frames(&conn, &mem, out_rx);
                    let receiving = receive_frames(&rdma, &mem, &routes);
                    let result = futures_lite::future::or(sending, receiving).await;
                    let _ = conn.disconnect();
                    result
                })?;
                rt.block_on(job)?
            };
            // A failure before the connection is reported to the caller; one after it shows
            // as the link breaking (the measuring side then reports the lost peer).
            if let Err(e) = run() {
                let msg = e.to_string();
                if ready_err.send(Err(e)).is_err() {
                    log(&msg);
                }
            }
        })
        .map_err(|e| Error::os(e, "perf --client: start the control thread"))?;
    match ready_rx.recv_timeout(PEER_TIMEOUT + Duration::from_secs(5)) {
        Ok(Ok(())) => Ok(Link::from_channels(out_tx, in_rx)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::new(ErrorKind::TimedOut, format!("perf --client: no connection to {addr}"))),
    }
}

/// Errors of a control thread that has nobody left to return them to. Never fails (the
/// stderr of a server may be a pipe nobody reads any more).
fn log(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "perf control: {msg}");
}

/// The server's control side: listens on `port` for the life of the process and sends each
/// accepted client's link (and address) to `links`, one client run at a time.
pub fn listen(port: u16, cpu: usize, links: mpsc::Sender<(Link, Option<SocketAddr>)>) -> Result<()> {
    let (ready_tx, ready_rx) = mpsc::channel::<Result<()>>();
    std::thread::Builder::new()
        .name("perf-cm-server".into())
        .spawn(move || {
            let ready = ready_tx.clone();
            let run = move || -> Result<()> {
                let rt = control_runtime(cpu)?;
                let job = rt.spawn_on(cpu, move || async move {
                    let dev = Device::open_default()?;
                    let (rdma, mem) = control_context(&dev, SERVER_CONNECTIONS).await?;
                    let listener = rdma.listen(port)?;
                    let _ = ready.send(Ok(()));
                    let (rdma, mem) = (Rc::new(rdma), Rc::new(mem));
                    let routes = Rc::new(RefCell::new(Routes::default()));
                    let mut receiver = {
                        let (rdma, mem, routes) = (rdma.clone(), mem.clone(), routes.clone());
                        async_doca::spawn_local(async move { receive_frames(&rdma, &mem, &routes).await })
                    };
                    loop {
                        // The next client, unless the receiving side of the context failed.
                        let accepted = async { Some(listener.accept().await) };
                        let failed = async {
                            let ended = (&mut receiver).await;
                            log(&format!("receiving stopped: {:?}", ended.and_then(|r| r)));
                            None
                        };
                        let Some(conn) = futures_lite::future::or(accepted, failed).await else { break };
                        let conn = conn?;
                        let (out_tx, out_rx) = mpsc::channel();
                        let (in_tx, in_rx) = mpsc::channel();
                        routes.borrow_mut().register(conn.id(), in_tx);
                        if links.send((Link::from_channels(out_tx, in_rx), conn.peer_addr())).is_err() {
                            break;
                        }
                        // This run lasts until its side drops the link or the client goes.
                        let sending = send_frames(&conn, &mem, out_rx);
                        let closed = async {
                            conn.closed().await;
                            Ok(())
                        };
                        if let Err(e) = futures_lite::future::or(sending, closed).await {
                            log(&e.to_string());
                        }
                        let _ = conn.disconnect();
                        // The side's receiving end goes with the route: it sees the peer gone.
                        routes.borrow_mut().sinks.remove(&conn.id());
                    }
                    Err(Error::new(ErrorKind::ConnectionLost, "perf --server: the control context stopped receiving"))
                })?;
                rt.block_on(job)?
            };
            if let Err(e) = run() {
                let msg = e.to_string();
                if ready_tx.send(Err(e)).is_err() {
                    log(&msg);
                }
            }
        })
        .map_err(|e| Error::os(e, "perf --server: start the control thread"))?;
    match ready_rx.recv_timeout(PEER_TIMEOUT) {
        Ok(r) => r,
        Err(_) => Err(Error::new(ErrorKind::TimedOut, "perf --server: the control context did not start")),
    }
}
