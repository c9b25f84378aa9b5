//! UROM worker commands awaited from tokio, through both styles of the tokio bridge, against
//! a real soft UROM service daemon (with its built-in sample plugins) and worker process.

mod common;

use std::rc::Rc;
use std::time::Duration;

use async_doca::tokio::{run_local, Bridge};
use async_doca::urom::{Service, Worker};
use async_doca::{Device, Error, ErrorKind, IdleMode, Result, Runtime};
use common::urom::Daemon;
use doca_urom_plugin::samples::graph;

const LIMIT: Duration = Duration::from_secs(20);

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Result<T> {
    tokio::time::timeout(LIMIT, f).await.map_err(|_| Error::new(ErrorKind::TimedOut, "test: no answer"))
}

/// A service connection and a worker running `worker_graph`.
struct Urom {
    svc: Service,
    worker: Worker,
}

async fn start(socket: std::path::PathBuf) -> Result<Urom> {
    let dev = Device::open_default()?;
    let svc = Service::builder(&dev).socket_path(&socket).connect().await?;
    let worker = Worker::builder(&svc).plugin(graph::PLUGIN_NAME).max_inflight(8).start().await?;
    Ok(Urom { svc, worker })
}

impl Urom {
    async fn loopback(&self, value: u64) -> Result<u64> {
        let id = self.svc.plugin(graph::PLUGIN_NAME)?.id;
        let reply = self.worker.command(id, &graph::Cmd::Loopback { value }.encode()).await?;
        match graph::Notif::decode(&reply).map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))? {
            graph::Notif::Loopback { value } => Ok(value),
        }
    }
}

#[test]
fn urom_commands_from_tokio_tasks_through_the_driver() {
    let d = Daemon::start(&["--builtin-samples", "--log-level", "warn"]);
    let socket = d.socket.clone();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let local = tokio::task::LocalSet::new();
    local
        .block_on(
            &rt,
            run_local(async move {
                let u = Rc::new(bounded(start(socket)).await??);
                // Many tokio tasks of this thread, each awaiting worker commands.
                let tasks: Vec<_> = (0..16u64)
                    .map(|t| {
                        let u = u.clone();
                        tokio::task::spawn_local(async move {
                            for i in 0..5 {
                                let v = t * 100 + i;
                                assert_eq!(bounded(u.loopback(v)).await??, v);
                            }
                            Ok::<_, Error>(())
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.expect("task ran")?;
                }
                Ok::<_, Error>(())
            }),
        )
        .unwrap()
        .unwrap();
    drop(local);
    d.stop();
}

#[test]
fn urom_commands_from_a_multi_thread_runtime_through_the_handle() {
    let d = Daemon::start(&["--builtin-samples", "--log-level", "warn"]);
    let socket = d.socket.clone();
    let doca = Runtime::builder().cpus("0".parse().unwrap()).idle(IdleMode::Event).build().unwrap();
    let bridge = Bridge::new(doca.handle());
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let u = bounded(bridge.pin(0, move || start(socket))).await??;
        let tasks: Vec<_> = (0..16u64)
            .map(|t| {
                let u = u.clone();
                tokio::spawn(async move {
                    for i in 0..5 {
                        let v = t * 100 + i;
                        assert_eq!(bounded(u.run(move |u| async move { u.loopback(v).await })).await??, v);
                    }
                    Ok::<_, Error>(())
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task ran")?;
        }
        Ok::<_, Error>(())
    })
    .unwrap();
    drop(rt);
    doca.shutdown();
    d.stop();
}
