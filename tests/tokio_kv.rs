//! The `tokio_kv` example end to end: the HTTP process and its memory server as two real
//! processes (this test binary started again in each role), driven over 127.0.0.1 on an
//! ephemeral port by a real HTTP client (hyper) with many concurrent requests, every value
//! checked; then both processes are shut down and must exit 0. Twice: HTTP over TCP, and
//! HTTP over RDMA (`--rdma`: hyper on both sides over `RdmaStream`s).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::future::Future;

use async_doca::rdma::RdmaStream;
use async_doca::Device;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};

#[path = "../examples/tokio_kv.rs"]
mod kv;

/// The arguments of a process this test started in one of the example's roles.
const ARGS_ENV: &str = "TOKIO_KV_TEST_ARGS";
/// Every wait is bounded.
const LIMIT: Duration = Duration::from_secs(30);

/// This test binary, started to run only `kv_process` with `role` as the example's arguments.
fn myself(role: &[&str]) -> Command {
    let mut c = Command::new(std::env::current_exe().expect("own executable"));
    c.args(["--exact", "kv_process", "--ignored", "--nocapture", "--test-threads=1", "-q"])
        .env(ARGS_ENV, role.join(" "));
    c
}

/// The example's `main`, in the role given by the parent test (or by the HTTP process, for
/// the memory server). Ignored: only those processes run it.
#[test]
#[ignore = "started by http_clients_read_and_write_values_through_rdma"]
fn kv_process() {
    let args: Vec<String> =
        std::env::var(ARGS_ENV).expect("started by the parent test").split_whitespace().map(String::from).collect();
    if let Err(e) = kv::kv_run(&args, &myself) {
        eprintln!("tokio_kv process: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

/// Kills and reaps the HTTP process if the test fails before it exited.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

async fn tcp_client(addr: SocketAddr) -> Sender {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.expect("handshake");
    tokio::task::spawn_local(conn);
    sender
}

/// A client over RDMA: its own context and stream, hyper over `TokioIo<RdmaStream>`.
async fn rdma_client(addr: SocketAddr) -> Sender {
    let dev = Device::open_default().expect("device");
    let stream = RdmaStream::connect_with(&dev, addr, kv::rdma_stream_config()).await.expect("rdma connect");
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.expect("handshake");
    tokio::task::spawn_local(conn);
    sender
}

async fn request(s: &mut Sender, method: &str, key: &str, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    let req = Request::builder()
        .method(method)
        .uri(format!("/{key}"))
        .header("host", "127.0.0.1")
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    s.ready().await.expect("connection ready");
    let resp = s.send_request(req).await.expect("response");
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes().to_vec();
    (status, body)
}

/// A value of a size between 1 and the slot size that tells `(task, round)` apart.
fn value(task: usize, round: usize) -> Vec<u8> {
    let len = 1 + (task * 977 + round * 131) % kv::SLOT_SIZE;
    (0..len).map(|i| (i * 7 + task * 13 + round) as u8).collect()
}

/// Starts the HTTP process with `args`; returns it, its stdin and the address it listens on.
fn start(args: &[&str]) -> (Reap, std::process::ChildStdin, SocketAddr) {
    let mut proc = myself(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("start the HTTP process");
    let (stdin, stdout) = (proc.stdin.take().expect("piped"), proc.stdout.take().expect("piped"));
    let proc = Reap(Some(proc));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line.strip_prefix("KV-LISTEN ") {
                let _ = tx.send(addr.trim().to_owned());
            }
        }
    });
    let addr: SocketAddr = rx.recv_timeout(LIMIT).expect("the service listens").parse().expect("an address");
    (proc, stdin, addr)
}

#[test]
fn http_clients_read_and_write_values_through_rdma() {
    let (proc, stdin, addr) = start(&["--listen", "127.0.0.1:0", "--exit-on-stdin-eof"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio::task::LocalSet::new().block_on(&rt, workload(move || tcp_client(addr)));
    drop(rt);
    finish(proc, stdin);
}

/// The same over RDMA: the service's hyper serves `RdmaStream`s, the clients' hyper runs over
/// `RdmaStream`s too (on this thread, under the async-doca driver inside tokio).
#[test]
fn http_over_rdma_streams() {
    let (proc, stdin, addr) = start(&["--rdma", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    tokio::task::LocalSet::new()
        .block_on(&rt, async_doca::tokio::run_local(workload(move || rdma_client(addr))))
        .expect("the driver ran");
    drop(rt);
    finish(proc, stdin);
}

/// The requests of both tests: many concurrent clients (tasks of this thread), each on its
/// own connection made by `connect`.
async fn workload<C, F>(connect: C)
where
    C: Fn() -> F + Clone + 'static,
    F: Future<Output = Sender> + 'static,
{
    {
        tokio::time::timeout(LIMIT, async {
            // 32 clients at once, each on its own connection: put, get, overwrite, get.
            let tasks: Vec<_> = (0..32)
                .map(|t| {
                    let connect = connect.clone();
                    tokio::task::spawn_local(async move {
                        let mut s = connect().await;
                        let key = format!("key{t}");
                        for round in 0..4 {
                            let v = value(t, round);
                            assert_eq!(request(&mut s, "PUT", &key, v.clone()).await.0, StatusCode::NO_CONTENT);
                            let (status, got) = request(&mut s, "GET", &key, Vec::new()).await;
                            assert_eq!(status, StatusCode::OK);
                            assert!(got == v, "key {key} round {round}: wrong value ({} bytes)", got.len());
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("client task");
            }

            // One key overwritten by some clients while others read it: every read returns
            // one whole written value, never a mix.
            let shared: Vec<Vec<u8>> = (0..8).map(|r| vec![r as u8 + 1; 1000 + r * 300]).collect();
            let mut s = connect().await;
            assert_eq!(request(&mut s, "PUT", "shared", shared[0].clone()).await.0, StatusCode::NO_CONTENT);
            let mut tasks = Vec::new();
            for w in 0..4 {
                let (shared, connect) = (shared.clone(), connect.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    let mut s = connect().await;
                    for r in 0..8 {
                        let v = shared[(w + r) % shared.len()].clone();
                        assert_eq!(request(&mut s, "PUT", "shared", v).await.0, StatusCode::NO_CONTENT);
                    }
                }));
            }
            for _ in 0..8 {
                let (shared, connect) = (shared.clone(), connect.clone());
                tasks.push(tokio::task::spawn_local(async move {
                    let mut s = connect().await;
                    for _ in 0..8 {
                        let (status, got) = request(&mut s, "GET", "shared", Vec::new()).await;
                        assert_eq!(status, StatusCode::OK);
                        assert!(shared.contains(&got), "a read saw a torn value ({} bytes)", got.len());
                    }
                }));
            }
            for t in tasks {
                t.await.expect("client task");
            }

            // Errors: a missing key, a value larger than a slot, a bad method.
            assert_eq!(request(&mut s, "GET", "missing", Vec::new()).await.0, StatusCode::NOT_FOUND);
            let big = vec![0u8; kv::SLOT_SIZE + 1];
            assert_eq!(request(&mut s, "PUT", "big", big).await.0, StatusCode::PAYLOAD_TOO_LARGE);
            assert_eq!(request(&mut s, "POST", "k", Vec::new()).await.0, StatusCode::METHOD_NOT_ALLOWED);
            // The empty value is a value.
            assert_eq!(request(&mut s, "PUT", "empty", Vec::new()).await.0, StatusCode::NO_CONTENT);
            assert_eq!(request(&mut s, "GET", "empty", Vec::new()).await, (StatusCode::OK, Vec::new()));
        })
        .await
        .expect("the requests finished in time");
    }
}

/// Shuts the HTTP process down and checks its exit status.
fn finish(mut proc: Reap, stdin: std::process::ChildStdin) {
    // Shut down: the end of its stdin stops the service, which stops its memory server
    // and exits 0 only if that one exited 0 too.
    drop(stdin);
    let mut child = proc.0.take().expect("running");
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the HTTP process did not exit");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "the HTTP process failed: {status}");
}
