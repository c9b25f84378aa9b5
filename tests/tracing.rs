//! What a `tracing` subscriber sees (feature `tracing`): the span of one operation of each
//! kind (the eight RDMA operations, sync event, DMA, Comch, a UROM command) with its fields,
//! the status and DOCA code of a failed one, events of context state changes, and the soft
//! provider's SDK log routed into the same stream.
//!
//! Each test installs its collector for its own thread only (`with_default`) and runs its
//! operations on a `block_on` executor of that thread, so tests running in parallel do not
//! see each other's spans.
#![cfg(feature = "tracing")]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_doca::comch::{Client, Server};
use async_doca::dma::Dma;
use async_doca::rdma::Rdma;
use async_doca::sync_event::SyncEvent;
use async_doca::time::timeout;
use async_doca::{spawn_local, Access, Device, Error, ErrorKind, Result, Runtime};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

const LIMIT: Duration = Duration::from_secs(30);

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

fn rt() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

/// The fields of a span or an event, as text.
#[derive(Clone, Debug, Default)]
struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

impl Fields {
    fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str)
    }
}

/// One event: level, target, fields (with `message`), and the `op` of the span it was in.
#[derive(Clone, Debug)]
struct Ev {
    level: Level,
    target: String,
    fields: Fields,
    op: Option<String>,
}

#[derive(Default)]
struct Log {
    /// Closed spans: name and final fields.
    spans: Vec<(String, Fields)>,
    events: Vec<Ev>,
}

/// A layer that keeps every span (with the fields recorded later) and event.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Log>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Collector {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        ctx.span(id).expect("new span").extensions_mut().insert(f);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(f) = span.extensions_mut().get_mut::<Fields>() {
                values.record(f);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let op = ctx
            .event_span(event)
            .and_then(|s| s.extensions().get::<Fields>().and_then(|f| f.get("op").map(str::to_owned)));
        let meta = event.metadata();
        self.0.lock().unwrap().events.push(Ev {
            level: *meta.level(),
            target: meta.target().to_owned(),
            fields: f,
            op,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("closed span");
        let f = span.extensions().get::<Fields>().cloned().unwrap_or_default();
        self.0.lock().unwrap().spans.push((span.name().to_owned(), f));
    }
}

impl Collector {
    /// Runs `f` with this collector as the thread's subscriber (every level).
    fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let sub = tracing_subscriber::registry().with(self.clone());
        tracing::subscriber::with_default(sub, f)
    }

    /// The closed operation spans of `op`.
    fn ops(&self, op: &str) -> Vec<Fields> {
        let log = self.0.lock().unwrap();
        log.spans.iter().filter(|(n, f)| n == "doca.op" && f.get("op") == Some(op)).map(|(_, f)| f.clone()).collect()
    }

    /// The single successful span of `op` (panics with the list otherwise).
    fn one_ok(&self, op: &str) -> Fields {
        let all = self.ops(op);
        let ok: Vec<_> = all.iter().filter(|f| f.get("status") == Some("ok")).cloned().collect();
        assert!(!ok.is_empty(), "no successful span of {op}: {all:?}");
        ok[0].clone()
    }

    fn events(&self) -> Vec<Ev> {
        self.0.lock().unwrap().events.clone()
    }
}

#[test]
fn the_eight_rdma_operations_each_have_a_span() {
    let c = Collector::default();
    c.run(|| {
        rt().block_on(async {
            let dev = Device::open_default()?;
            let a = Rdma::builder(&dev).build().await?;
            let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let (blob_a, pa) = a.export()?;
            let (blob_b, pb) = b.export()?;
            let ab = pa.connect(&blob_b).await?;
            let _ba = pb.connect(&blob_a).await?;
            let target = dev.alloc(4096, Access::RDMA_ALL)?;
            let remote = dev.import(&target.export_rdma()?)?;
            let mem = dev.alloc(4096, Access::LOCAL_READ_WRITE)?;

            // Two-sided: send, send_imm and write_imm each complete a receive posted on b.
            for kind in 0..3 {
                let recv = spawn_local({
                    let (b, buf) = (b.clone(), target.slice(1024..2048));
                    async move { b.recv(buf).await.0 }
                });
                let src = mem.slice(0..100);
                let (r, _) = match kind {
                    0 => ab.send(src).await,
                    1 => ab.send_imm(src, 7).await,
                    _ => ab.write_imm(src, remote.slice(0..100), 9).await,
                };
                r?;
                bounded(recv).await???;
            }
            let (r, _) = ab.write(mem.slice(0..64), remote.slice(0..64)).await;
            r?;
            let (r, _) = ab.read(remote.slice(0..32), mem.slice(0..32)).await;
            r?;
            let (r, _) = ab.fetch_add(remote.slice(512..520), 5, mem.slice(8..16)).await;
            r?;
            let (r, _) = ab.compare_swap(remote.slice(512..520), 5, 9, mem.slice(8..16)).await;
            r?;
            Ok::<_, Error>(())
        })
    })
    .unwrap();

    let sizes = [
        ("rdma.send", 100),
        ("rdma.send_imm", 100),
        ("rdma.write_imm", 100),
        ("rdma.write", 64),
        ("rdma.read", 32),
        ("rdma.fetch_add", 8),
        ("rdma.compare_swap", 8),
    ];
    let first_conn = c.one_ok("rdma.send").get("conn").map(str::to_owned);
    assert!(first_conn.is_some(), "a connection id on rdma.send");
    for (op, size) in sizes {
        let f = c.one_ok(op);
        assert_eq!(f.get("ctx"), Some("rdma"), "{op}: {f:?}");
        assert!(f.get("ctx_id").is_some(), "{op}: {f:?}");
        assert_eq!(f.get("size"), Some(size.to_string().as_str()), "{op}: {f:?}");
        assert_eq!(f.get("conn").map(str::to_owned), first_conn, "{op}: all on one connection: {f:?}");
        assert_eq!(f.get("code"), None, "{op}: no code on success");
    }
    // Receives are posted on the context, not on a connection: no `conn`, the buffer's size.
    let recvs: Vec<_> = c.ops("rdma.recv").into_iter().filter(|f| f.get("status") == Some("ok")).collect();
    assert_eq!(recvs.len(), 3, "{recvs:?}");
    assert!(recvs.iter().all(|f| f.get("conn").is_none() && f.get("size") == Some("1024")), "{recvs:?}");
    // The contexts' state changes are events too.
    assert!(
        c.events().iter().any(|e| e.fields.get("message") == Some("context state changed")
            && e.fields.get("ctx") == Some("rdma")
            && e.fields.get("to") == Some("Running")),
        "no RUNNING state-change event"
    );
}

#[test]
fn a_failed_operation_records_status_and_doca_code() {
    let c = Collector::default();
    c.run(|| {
        rt().block_on(async {
            let dev = Device::open_default()?;
            let a = Rdma::builder(&dev).build().await?;
            let b = Rdma::builder(&dev).permissions(Access::RDMA_ALL).build().await?;
            let (blob_a, pa) = a.export()?;
            let (blob_b, pb) = b.export()?;
            let ab = pa.connect(&blob_b).await?;
            let _ba = pb.connect(&blob_a).await?;
            let ro = dev.alloc(64, Access::LOCAL_READ_WRITE | Access::RDMA_READ)?;
            let ro_remote = dev.import(&ro.export_rdma()?)?;
            let mem = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
            let (r, _) = ab.write(mem.slice(0..8), ro_remote.slice(0..8)).await;
            assert_eq!(r.unwrap_err().kind(), ErrorKind::PermissionDenied);
            Ok::<_, Error>(())
        })
    })
    .unwrap();
    let spans = c.ops("rdma.write");
    assert_eq!(spans.len(), 1, "{spans:?}");
    let f = &spans[0];
    assert_eq!(f.get("status"), Some("error"), "{f:?}");
    assert_eq!(f.get("code"), Some("DOCA_ERROR_NOT_PERMITTED"), "{f:?}");
    assert_eq!(f.get("kind"), Some("PermissionDenied"), "{f:?}");
    // And a DEBUG event inside the operation's span carries the error.
    let failed: Vec<_> = c
        .events()
        .into_iter()
        .filter(|e| e.fields.get("message") == Some("operation failed") && e.op.as_deref() == Some("rdma.write"))
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].level, Level::DEBUG);
    assert!(failed[0].fields.get("error").unwrap().contains("DOCA_ERROR_NOT_PERMITTED"), "{failed:?}");
}

#[test]
fn sync_event_dma_and_comch_operations_have_spans() {
    let c = Collector::default();
    let name = format!("trace-{}", std::process::id());
    c.run(|| {
        rt().block_on(async {
            let dev = Device::open_default()?;
            // Sync event.
            let ev = SyncEvent::builder(&dev).build().await?;
            ev.add(1).await?;
            assert_eq!(ev.get().await?, 1);
            ev.wait_eq(1).await?;

            // DMA, local to local.
            let dma = Dma::builder(&dev).build().await?;
            let mem = dev.alloc(8192, Access::LOCAL_READ_WRITE)?;
            let (r, _, _) = bounded(dma.memcpy(mem.slice(0..4096), mem.slice(4096..8192))).await?;
            r?;

            // Comch, a server and a client on this executor.
            let server = Server::builder(&dev, &name).max_msg_size(256).build().await?;
            let client = spawn_local({
                let (dev, name) = (dev.clone(), name.clone());
                async move { Client::builder(&dev, &name).connect().await }
            });
            let at_server = bounded(server.accept()).await??;
            let client = bounded(client).await???;
            client.send(b"hello".to_vec()).await?;
            assert_eq!(bounded(at_server.recv()).await?.as_deref(), Some(&b"hello"[..]));
            Ok::<_, Error>(())
        })
    })
    .unwrap();
    for op in ["sync_event.add", "sync_event.get", "sync_event.wait_eq"] {
        let f = c.one_ok(op);
        assert_eq!(f.get("ctx"), Some("sync_event"), "{f:?}");
    }
    let dma = c.one_ok("dma.memcpy");
    assert_eq!(dma.get("size"), Some("4096"), "{dma:?}");
    let send = c.one_ok("comch.send");
    assert_eq!(send.get("size"), Some("5"), "{send:?}");
    assert!(send.get("conn").is_some(), "{send:?}");
}

#[cfg(feature = "soft")]
#[test]
fn a_urom_command_has_a_span() {
    use async_doca::urom::{Service, Worker};
    use doca_urom_plugin::samples::graph;
    let d = common::urom::Daemon::start(&["--builtin-samples", "--log-level", "warn"]);
    let socket = d.socket.clone();
    let c = Collector::default();
    c.run(|| {
        rt().block_on(async move {
            let dev = Device::open_default()?;
            let svc = bounded(Service::builder(&dev).socket_path(&socket).connect()).await??;
            let worker = bounded(Worker::builder(&svc).plugin(graph::PLUGIN_NAME).start()).await??;
            let id = svc.plugin(graph::PLUGIN_NAME)?.id;
            let cmd = graph::Cmd::Loopback { value: 42 }.encode();
            bounded(worker.command(id, &cmd)).await??;
            bounded(worker.stop()).await??;
            Ok::<_, Error>(())
        })
    })
    .unwrap();
    d.stop();
    let f = c.one_ok("urom.worker.command");
    assert_eq!(f.get("ctx"), Some("urom.worker"), "{f:?}");
    assert!(f.get("size").is_some(), "{f:?}");
    // The worker's life is told at INFO.
    let life: Vec<_> = c
        .events()
        .into_iter()
        .filter(|e| e.level == Level::INFO && e.fields.get("message").is_some_and(|m| m.starts_with("urom: worker")))
        .map(|e| e.fields.get("message").unwrap().to_owned())
        .collect();
    assert!(life.iter().any(|m| m == "urom: worker running"), "{life:?}");
    assert!(life.iter().any(|m| m == "urom: worker stopped"), "{life:?}");
}

#[cfg(feature = "soft")]
#[test]
fn provider_errors_reach_the_same_stream() {
    let c = Collector::default();
    c.run(|| {
        // Building a runtime installs the route from doca-soft's SDK log into tracing.
        let _rt = rt();
        // A provider error: freeing something that is not a task. DOCA ignores the call and
        // says so in its SDK log (ERROR).
        // doca-soft recognises its task headers by a magic word; a zeroed block, larger than
        // any task header, is not one.
        let mut junk = vec![0u64; 1024];
        // SAFETY: the pointer is valid for reads of 8 KiB of zeroes; doca-soft only reads the
        // header's magic, finds no task, logs and ignores the call.
        unsafe { async_doca::sys::doca_task_free(junk.as_mut_ptr().cast()) };
    });
    let provider: Vec<_> = c.events().into_iter().filter(|e| e.target == "doca_soft").collect();
    let hit = provider
        .iter()
        .find(|e| e.fields.get("message").is_some_and(|m| m.contains("doca_task_free: invalid task pointer")));
    let hit = hit.unwrap_or_else(|| panic!("provider record not routed: {provider:?}"));
    assert_eq!(hit.level, Level::ERROR);
    assert!(hit.fields.get("file").is_some_and(|f| f.ends_with(".rs")), "{hit:?}");
}

/// `async-doca urom-service`: the daemon's own lines come out as `tracing` events of target
/// `urom_service` through the command line's subscriber (on stderr; stdout keeps the bare
/// `listening on` line programs wait for).
#[cfg(feature = "soft")]
#[test]
fn the_urom_daemon_logs_structured_events() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::{Command, Stdio};
    let dir = common::urom::TempDir::new("trace-daemon");
    let socket = dir.path().join("urom.sock");
    let child = Command::new(common::cli::exe())
        .args(["urom-service", "--builtin-samples", "--log-level", "info", "--socket"])
        .arg(&socket)
        .env_remove("UROM_PLUGIN_PATH")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start async-doca urom-service");
    let mut child = common::Reap(Some(child));
    let c = child.0.as_mut().unwrap();
    let mut first = String::new();
    BufReader::new(c.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first.trim_end(), format!("listening on {}", socket.display()));
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(c.wait().unwrap().success(), "{err}");
    child.0 = None;
    let line = err.lines().find(|l| l.contains("listening on")).unwrap_or_else(|| panic!("no event: {err}"));
    assert!(line.contains("INFO") && line.contains("urom_service"), "not a tracing event: {line}");
    assert!(err.lines().any(|l| l.contains("urom_service") && l.contains("stopped")), "{err}");
}
