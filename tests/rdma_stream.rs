//! `RdmaStream`: byte-exact streaming both ways at once with random write and read sizes,
//! shutdown and EOF, peer loss, back-pressure from a slow reader, streams dropped with I/O in
//! flight, a listener serving several streams, and a stream over a connection made with blobs.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_doca::rdma::{Rdma, RdmaStream, RdmaStreamListener, StreamConfig};
use async_doca::time::timeout;
use async_doca::{spawn_local, Access, Device, Error, ErrorKind, Result, Runtime};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};

/// Every wait is bounded: a bug shows up as a failure, never as a hang.
const LIMIT: Duration = Duration::from_secs(120);

fn rt() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

async fn bounded<T>(f: impl Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

/// A listener on a free port (bound then released; retried on the rare race).
async fn listen(dev: &Device, max: u16, cfg: StreamConfig) -> RdmaStreamListener {
    for _ in 0..20 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if let Ok(l) = RdmaStreamListener::bind_with(dev, port, max, cfg).await {
            return l;
        }
    }
    panic!("no free port");
}

/// A connected pair (client, server) through a listener.
async fn pair(dev: &Device, cfg: StreamConfig) -> Result<(RdmaStream, RdmaStream, RdmaStreamListener)> {
    let l = listen(dev, 4, cfg).await;
    let port = l.port();
    let dev2 = dev.clone();
    let client = spawn_local(async move { RdmaStream::connect_with(&dev2, ([127, 0, 0, 1], port).into(), cfg).await });
    let server = bounded(l.accept()).await??;
    let client = bounded(client).await???;
    Ok((client, server, l))
}

/// A reproducible byte stream (xorshift), so the reader checks what the writer sent without
/// keeping it.
struct Gen(u64);
impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn fill(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.next() as u8;
        }
    }
    fn size(&mut self, max: usize) -> usize {
        1 + (self.next() as usize) % max
    }
}

/// Writes `total` bytes of the stream seeded `seed` in random-sized writes, then shuts down.
async fn write_all_random(s: &mut (impl futures_lite::AsyncWrite + Unpin), total: usize, seed: u64) -> Result<()> {
    let (mut data, mut sizes) = (Gen(seed), Gen(seed ^ 0x5555));
    let mut buf = vec![0u8; 300 * 1024];
    let mut sent = 0;
    while sent < total {
        let n = sizes.size(buf.len()).min(total - sent);
        data.fill(&mut buf[..n]);
        s.write_all(&buf[..n]).await.map_err(io)?;
        sent += n;
    }
    s.close().await.map_err(io)?;
    Ok(())
}

/// Reads to EOF in random-sized reads, checking every byte; returns the count.
async fn read_check_random(s: &mut (impl futures_lite::AsyncRead + Unpin), seed: u64) -> Result<usize> {
    let (mut data, mut sizes) = (Gen(seed), Gen(seed ^ 0xaaaa));
    let mut buf = vec![0u8; 200 * 1024];
    let mut want = vec![0u8; buf.len()];
    let mut got = 0;
    loop {
        let n = sizes.size(buf.len());
        let r = s.read(&mut buf[..n]).await.map_err(io)?;
        if r == 0 {
            return Ok(got);
        }
        data.fill(&mut want[..r]);
        assert!(buf[..r] == want[..r], "stream corrupted after {got} bytes");
        got += r;
    }
}

fn io(e: std::io::Error) -> Error {
    Error::new(ErrorKind::Other, e.to_string())
}

/// The `async_doca::Error` inside an `io::Error` from the stream.
fn kind_of(e: &std::io::Error) -> Option<ErrorKind> {
    e.get_ref().and_then(|i| i.downcast_ref::<Error>()).map(Error::kind)
}

#[test]
fn byte_exact_both_directions_random_sizes_256_mib() {
    let each_way: usize = std::env::var("RDMA_STREAM_TEST_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(128) << 20;
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (client, server, _l) = pair(&dev, StreamConfig::default()).await?;
        // Each stream is split by sharing it between a reader task and a writer task.
        let (c, s) = (std::rc::Rc::new(client), std::rc::Rc::new(server));
        let tasks = [spawn_local(write_half(c.clone(), each_way, 1)), spawn_local(write_half(s.clone(), each_way, 2))];
        let reads = [spawn_local(read_half(s.clone(), 1)), spawn_local(read_half(c.clone(), 2))];
        for t in tasks {
            bounded(t).await???;
        }
        for r in reads {
            assert_eq!(bounded(r).await???, each_way, "every byte, then EOF");
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// `&RdmaStream` as a writer/reader (the stream's own methods take `&self`).
struct Half(std::rc::Rc<RdmaStream>);
impl futures_lite::AsyncWrite for Half {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &[u8]) -> Poll<std::io::Result<usize>> {
        self.0.poll_write_bytes(cx, b)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.0.poll_flush_bytes(cx)
    }
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.0.poll_close_bytes(cx)
    }
}
impl futures_lite::AsyncRead for Half {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, b: &mut [u8]) -> Poll<std::io::Result<usize>> {
        self.0.poll_read_bytes(cx, b)
    }
}

async fn write_half(s: std::rc::Rc<RdmaStream>, total: usize, seed: u64) -> Result<()> {
    write_all_random(&mut Half(s), total, seed).await
}

async fn read_half(s: std::rc::Rc<RdmaStream>, seed: u64) -> Result<usize> {
    read_check_random(&mut Half(s), seed).await
}

/// Through tokio's traits (what hyper uses via TokioIo), with small chunks so that many
/// messages and credit rounds happen.
#[cfg(feature = "tokio")]
#[test]
fn tokio_traits_echo_with_small_chunks() {
    use tokio::io::AsyncWriteExt as _;
    rt().block_on(async {
        let dev = Device::open_default()?;
        let cfg = StreamConfig::default().chunk_size(256).recv_buffers(4).send_buffers(2);
        let (client, mut server, _l) = pair(&dev, cfg).await?;
        let echo = spawn_local(async move {
            let mut buf = vec![0u8; 1000];
            loop {
                let n = tokio::io::AsyncReadExt::read(&mut server, &mut buf).await?;
                if n == 0 {
                    server.shutdown().await?;
                    return Ok::<_, std::io::Error>(());
                }
                tokio::io::AsyncWriteExt::write_all(&mut server, &buf[..n]).await?;
            }
        });
        let msg: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut back = Vec::new();
        let (mut rd, mut wr) = tokio::io::split(client);
        let (w, r) = futures_lite::future::zip(
            async {
                wr.write_all(&msg).await?;
                wr.shutdown().await
            },
            tokio::io::AsyncReadExt::read_to_end(&mut rd, &mut back),
        )
        .await;
        w.map_err(io)?;
        r.map_err(io)?;
        assert_eq!(back, msg);
        bounded(echo).await??.map_err(io)?;
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Shutdown is EOF for the peer (after the data); writing after shutdown fails; the other
/// direction keeps working (half close). A disconnected peer (no FIN) makes a pending read
/// and a blocked write fail with ConnectionLost instead of hanging.
#[test]
fn eof_half_close_and_peer_loss() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let (mut c, mut s, _l) = pair(&dev, StreamConfig::default()).await?;
        c.write_all(b"last words").await.map_err(io)?;
        c.close().await.map_err(io)?;
        let e = c.write(b"more").await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        let mut got = Vec::new();
        bounded(s.read_to_end(&mut got)).await?.map_err(io)?;
        assert_eq!(got, b"last words");
        // Half close: the server still writes, the client still reads.
        s.write_all(b"reply").await.map_err(io)?;
        s.close().await.map_err(io)?;
        let mut got = Vec::new();
        bounded(c.read_to_end(&mut got)).await?.map_err(io)?;
        assert_eq!(got, b"reply");

        // Peer loss while a read waits and while a write is blocked by back-pressure.
        let cfg = StreamConfig::default().chunk_size(1024).recv_buffers(4).send_buffers(2);
        let (c, s, _l2) = pair(&dev, cfg).await?;
        let (c, s) = (std::rc::Rc::new(c), std::rc::Rc::new(s));
        let reader = spawn_local({
            let c = c.clone();
            async move {
                let mut b = [0u8; 16];
                std::future::poll_fn(|cx| c.poll_read_bytes(cx, &mut b)).await
            }
        });
        let writer = spawn_local({
            let c = c.clone();
            async move {
                let chunk = vec![7u8; 1024];
                loop {
                    std::future::poll_fn(|cx| c.poll_write_bytes(cx, &chunk)).await?;
                }
                #[allow(unreachable_code)]
                Ok::<usize, std::io::Error>(0)
            }
        });
        // Let the writer fill the pipe (the server never reads), then the server's side goes.
        for _ in 0..50 {
            async_doca::executor::yield_now().await;
        }
        s.connection().disconnect()?;
        let r = bounded(reader).await??.unwrap_err();
        assert_eq!(kind_of(&r), Some(ErrorKind::ConnectionLost), "{r}");
        let w = bounded(writer).await??.unwrap_err();
        assert_eq!(kind_of(&w), Some(ErrorKind::ConnectionLost), "{w}");
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// A writer whose reader does not read is held back: it gets at most its send chunks plus
/// the peer's buffers (less the reserved credit) accepted, then waits; once the reader
/// reads, everything arrives intact.
#[test]
fn back_pressure_from_a_slow_reader() {
    const CHUNK: usize = 4096;
    rt().block_on(async {
        let dev = Device::open_default()?;
        let cfg = StreamConfig::default().chunk_size(CHUNK).recv_buffers(8).send_buffers(4);
        let (c, mut s, _l) = pair(&dev, cfg).await?;
        let mut cx = Context::from_waker(Waker::noop());
        let data: Vec<u8> = (0..CHUNK as u32 * 64).map(|i| (i * 7 % 253) as u8).collect();
        let mut accepted = 0;
        let mut stalls = 0;
        // Offer bytes; between offers let the executor run the sends (nobody reads).
        while stalls < 200 && accepted < data.len() {
            match c.poll_write_bytes(&mut cx, &data[accepted..]) {
                Poll::Ready(n) => {
                    accepted += n.map_err(io)?;
                    stalls = 0;
                }
                Poll::Pending => stalls += 1,
            }
            async_doca::executor::yield_now().await;
        }
        let bound = CHUNK * (4 + 8 - 1);
        assert!(accepted <= bound, "accepted {accepted} bytes, more than the {bound} the rings hold");
        assert!(accepted >= CHUNK * (8 - 2), "accepted only {accepted} bytes");
        // Now read: the rest goes through, byte-exact.
        let c = std::rc::Rc::new(c);
        let w = spawn_local({
            let c = c.clone();
            let data = data.clone();
            async move {
                let mut h = Half(c);
                h.write_all(&data[accepted..]).await?;
                h.close().await
            }
        });
        let mut got = Vec::new();
        bounded(s.read_to_end(&mut got)).await?.map_err(io)?;
        bounded(w).await??.map_err(io)?;
        assert!(got == data, "{} bytes read, {} written", got.len(), data.len());
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// Streams dropped with sends in flight and data unread: nothing crashes, the peer sees
/// EOF or ConnectionLost (never a hang), the listener serves a new stream on the same pool,
/// and the runtime shuts down cleanly with everything released.
#[test]
fn drop_with_io_in_flight() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let cfg = StreamConfig::default().chunk_size(8192).recv_buffers(4).send_buffers(4);
        // DOCA counts a context's connections per start cycle: 2 per round.
        let l = listen(&dev, 8, cfg).await;
        let addr = ([127, 0, 0, 1], l.port()).into();
        for round in 0..4 {
            let dev2 = dev.clone();
            let client = spawn_local(async move { RdmaStream::connect_with(&dev2, addr, cfg).await });
            let mut s = bounded(l.accept()).await??;
            let c = bounded(client).await???;
            let mut cx = Context::from_waker(Waker::noop());
            let junk = vec![round as u8; 64 * 1024];
            // Fill what the rings take, leave sends in flight, then drop the writer.
            for _ in 0..16 {
                let _ = c.poll_write_bytes(&mut cx, &junk);
            }
            drop(c);
            let mut got = Vec::new();
            match bounded(s.read_to_end(&mut got)).await? {
                Ok(_) => assert!(got.iter().all(|&b| b == round as u8)),
                Err(e) => assert_eq!(kind_of(&e), Some(ErrorKind::ConnectionLost), "{e}"),
            }
            // And the other way: the server drops with data it never read.
            let dev2 = dev.clone();
            let client = spawn_local(async move { RdmaStream::connect_with(&dev2, addr, cfg).await });
            let s = bounded(l.accept()).await??;
            let mut c = bounded(client).await???;
            c.write_all(&junk[..20_000]).await.map_err(io)?;
            drop(s);
            let mut b = [0u8; 8];
            let r = bounded(c.read(&mut b)).await?;
            assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| kind_of(e) == Some(ErrorKind::ConnectionLost)));
        }
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// One listener, several clients at once, each echoing its own data.
#[test]
fn listener_serves_concurrent_streams() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let cfg = StreamConfig::default().chunk_size(16 * 1024).recv_buffers(8);
        let l = std::rc::Rc::new(listen(&dev, 8, cfg).await);
        let addr = ([127, 0, 0, 1], l.port()).into();
        let server = spawn_local({
            let l = l.clone();
            async move {
                let mut echoes = Vec::new();
                for _ in 0..6 {
                    let mut s = l.accept().await?;
                    echoes.push(spawn_local(async move {
                        let mut buf = vec![0u8; 10_000];
                        loop {
                            let n = s.read(&mut buf).await?;
                            if n == 0 {
                                return s.close().await;
                            }
                            s.write_all(&buf[..n]).await?;
                        }
                    }));
                }
                for e in echoes {
                    e.await?.map_err(io)?;
                }
                Ok::<_, Error>(())
            }
        });
        let mut clients = Vec::new();
        for i in 0..6u8 {
            let dev = dev.clone();
            clients.push(spawn_local(async move {
                let c = std::rc::Rc::new(RdmaStream::connect_with(&dev, addr, cfg).await?);
                let msg: Vec<u8> = (0..300_000u32).map(|x| (x as u8).wrapping_add(i)).collect();
                let w = spawn_local({
                    let (c, msg) = (c.clone(), msg.clone());
                    async move {
                        let mut h = Half(c);
                        h.write_all(&msg).await?;
                        h.close().await
                    }
                });
                let mut back = Vec::new();
                Half(c).read_to_end(&mut back).await.map_err(io)?;
                w.await?.map_err(io)?;
                assert!(back == msg, "client {i}: echo differs");
                Ok::<_, Error>(())
            }));
        }
        for c in clients {
            bounded(c).await???;
        }
        bounded(server).await???;
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// A stream over a connection made with blobs (both contexts on this executor).
#[test]
fn stream_over_a_blob_connection() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let a = Rdma::builder(&dev).build().await?;
        let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
        let ((blob_a, pa), (blob_b, pb)) = (a.export()?, b.export()?);
        let ab = pa.connect(&blob_b).await?;
        let ba = pb.connect(&blob_a).await?;
        let sb = spawn_local(RdmaStream::new(ba));
        let mut sa = bounded(RdmaStream::new(ab)).await??;
        let mut sb = bounded(sb).await???;
        sa.write_all(b"over blobs").await.map_err(io)?;
        sa.close().await.map_err(io)?;
        let mut got = Vec::new();
        bounded(sb.read_to_end(&mut got)).await?.map_err(io)?;
        assert_eq!(got, b"over blobs");
        Ok::<_, Error>(())
    })
    .unwrap();
}

/// The environment variable that makes this test binary the peer process of
/// `a_killed_peer_fails_pending_reads_and_writes` (the port to connect to).
const PEER_ENV: &str = "RDMA_STREAM_TEST_PEER_PORT";

/// The peer process: connects, writes a greeting, then never reads and waits to be killed.
#[test]
#[ignore = "started by a_killed_peer_fails_pending_reads_and_writes"]
fn stream_peer_process() {
    let Some(port) = std::env::var(PEER_ENV).ok().and_then(|p| p.parse::<u16>().ok()) else { return };
    let r = rt().block_on(async move {
        let dev = Device::open_default()?;
        let mut c = RdmaStream::connect(&dev, ([127, 0, 0, 1], port).into()).await?;
        c.write_all(b"hello from the peer").await.map_err(io)?;
        c.flush().await.map_err(io)?;
        // Bounded, should the parent fail to kill us.
        async_doca::time::sleep(LIMIT).await;
        Ok::<_, Error>(())
    });
    std::process::exit(i32::from(r.is_err()));
}

/// A peer process killed (SIGKILL, no FIN, no disconnect) while our read waits and our write
/// is held back by its full buffers: both fail with ConnectionLost, neither hangs.
#[test]
fn a_killed_peer_fails_pending_reads_and_writes() {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let l = listen(&dev, 1, StreamConfig::default()).await;
        let mut child = std::process::Command::new(std::env::current_exe().expect("own executable"))
            .args(["--exact", "stream_peer_process", "--ignored", "--nocapture", "--test-threads=1", "-q"])
            .env(PEER_ENV, l.port().to_string())
            .spawn()
            .expect("start the peer process");
        let result = async {
            let s = std::rc::Rc::new(bounded(l.accept()).await??);
            let mut hello = [0u8; 19];
            bounded(Half(s.clone()).read_exact(&mut hello)).await?.map_err(io)?;
            assert_eq!(&hello, b"hello from the peer");
            let reader = spawn_local({
                let s = s.clone();
                async move {
                    let mut b = [0u8; 16];
                    std::future::poll_fn(|cx| s.poll_read_bytes(cx, &mut b)).await
                }
            });
            let writer = spawn_local({
                let s = s.clone();
                async move {
                    let chunk = vec![1u8; 64 * 1024];
                    let mut h = Half(s);
                    loop {
                        h.write_all(&chunk).await?;
                    }
                    #[allow(unreachable_code)]
                    Ok::<(), std::io::Error>(())
                }
            });
            for _ in 0..100 {
                async_doca::executor::yield_now().await;
            }
            child.kill().expect("kill the peer");
            let r = bounded(reader).await??.unwrap_err();
            assert_eq!(kind_of(&r), Some(ErrorKind::ConnectionLost), "{r}");
            let w = bounded(writer).await??.unwrap_err();
            assert_eq!(kind_of(&w), Some(ErrorKind::ConnectionLost), "{w}");
            Ok::<_, Error>(())
        }
        .await;
        let _ = child.kill();
        let _ = child.wait();
        result
    })
    .unwrap();
}
