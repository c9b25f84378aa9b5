//! UROM end to end on the soft provider: a real `async-doca urom-service` daemon per test,
//! real worker processes, plugins loaded from shared objects (the Rust samples and a C plugin).
//!
//! Every test starts its own daemon on a socket in its own directory and ends with
//! [`Daemon::stop`], which checks that the daemon exits cleanly, removes its socket and leaves
//! no worker process behind.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use async_doca::oob::UnixOob;
use async_doca::time::timeout;
use async_doca::urom::{Domain, Service, Worker};
use async_doca::{spawn_local, Device, Error, ErrorKind, Result, Runtime};
use common::urom::{alive, cpus_allowed, Daemon, TempDir};
use common::Reap;
use doca_urom_plugin::samples::{graph, sandbox};
use doca_urom_plugin::testing::{build_c_plugin, sample_plugins_dir};

const LIMIT: Duration = Duration::from_secs(20);

fn rt() -> Runtime {
    Runtime::builder().cpus("0".parse().unwrap()).build().unwrap()
}

async fn bounded<T>(f: impl std::future::Future<Output = T>) -> Result<T> {
    timeout(LIMIT, f).await.map_err(Error::from)
}

/// A plugin directory holding the two Rust sample plugins (and, with `c`, the C one).
fn plugin_dir(c: bool) -> TempDir {
    let dir = TempDir::new("urom-plugins");
    let built = sample_plugins_dir().expect("the sample plugins (cargo build -p worker_graph -p worker_sandbox)");
    for f in [graph::FILE_NAME, sandbox::FILE_NAME] {
        std::os::unix::fs::symlink(built.join(f), dir.path().join(f)).unwrap();
    }
    if c {
        build_c_plugin(dir.path()).expect("a C compiler (cc) to build the C test plugin");
    }
    dir
}

fn daemon_with(plugins: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec!["--plugin-path", plugins.to_str().unwrap(), "--log-level", "warn"];
    args.extend_from_slice(extra);
    Daemon::start(&args)
}

async fn connect(d: &Daemon) -> Result<Service> {
    let dev = Device::open_default()?;
    bounded(Service::builder(&dev).socket_path(&d.socket).connect()).await?
}

async fn loopback(w: &Worker, svc: &Service, value: u64) -> Result<u64> {
    let id = svc.plugin(graph::PLUGIN_NAME)?.id;
    let reply = bounded(w.command(id, &graph::Cmd::Loopback { value }.encode())).await??;
    match graph::Notif::decode(&reply).map_err(|e| Error::new(ErrorKind::InvalidArgument, e.to_string()))? {
        graph::Notif::Loopback { value } => Ok(value),
    }
}

#[test]
fn discovery_loads_good_plugins_and_skips_the_rest() {
    let dir = plugin_dir(true);
    // A file that is not ELF at all, and a valid shared object that is not a plugin.
    std::fs::write(dir.path().join("junk.so"), b"\x7fELF but not really").unwrap();
    let src = dir.path().join("plain.c");
    std::fs::write(&src, "int not_a_plugin(void) { return 42; }\n").unwrap();
    let ok = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.path().join("libplain.so"))
        .arg(&src)
        .status()
        .expect("cc");
    assert!(ok.success());
    std::fs::write(dir.path().join("README.txt"), b"not a shared object").unwrap();
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let mut names: Vec<&str> = svc.plugins().iter().map(|p| p.name.as_str()).collect();
        names.sort();
        assert_eq!(names, ["c_loopback", "worker_graph", "worker_sandbox"]);
        let mut bits = 0u64;
        for p in svc.plugins() {
            assert_eq!(p.id.count_ones(), 1, "{p:?}");
            assert_eq!(bits & p.id, 0, "ids are distinct bits");
            bits |= p.id;
        }
        assert_eq!(svc.plugin("worker_graph")?.version, graph::VERSION);
        assert_eq!(svc.plugin("plain").unwrap_err().kind(), ErrorKind::NotFound);

        // The C plugin loads in a worker and answers: it reverses the payload.
        let c = svc.plugin("c_loopback")?.id;
        let w = bounded(Worker::builder(&svc).plugin_ids(c).start()).await??;
        assert_eq!(bounded(w.command(c, b"abcdef")).await??, b"fedcba");
        // A worker with both kinds of plugin routes each command to its plugin.
        let both = bounded(Worker::builder(&svc).plugin("c_loopback").plugin("worker_graph").start()).await??;
        assert_eq!(loopback(&both, &svc, 99).await?, 99);
        assert_eq!(bounded(both.command(c, b"xy")).await??, b"yx");
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn worker_runs_pinned_to_its_cpuset() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    let last = async_doca::CpuSet::current_affinity().unwrap().iter().last().unwrap();
    rt().block_on(async {
        let svc = connect(&d).await?;
        let _w =
            bounded(Worker::builder(&svc).plugin("worker_graph").cpuset(format!("{last}").parse()?).start()).await??;
        let pids = d.wait_workers(1);
        assert_eq!(cpus_allowed(pids[0]), last.to_string());
        // Outside the service's CPUs: refused before anything is spawned.
        let outside = format!("{}", svc.cpuset().iter().last().unwrap() + 1).parse()?;
        let e = Worker::builder(&svc).plugin("worker_graph").cpuset(outside).start().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn worker_ids_any_and_reuse_and_gid_queries() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let a = bounded(Worker::builder(&svc).plugin("worker_graph").gid(5).start()).await??;
        assert!(a.id() >= 1 << 63, "ANY picks from the service's range: {:#x}", a.id());
        // The same id again attaches to the same worker process.
        let a2 = bounded(Worker::builder(&svc).id(a.id()).plugin("worker_graph").start()).await??;
        assert_eq!(a2.id(), a.id());
        assert_eq!(d.wait_workers(1).len(), 1);
        assert_eq!(loopback(&a, &svc, 1).await?, 1);
        assert_eq!(loopback(&a2, &svc, 2).await?, 2);
        let b = bounded(Worker::builder(&svc).id(42).plugin("worker_graph").gid(5).start()).await??;
        let c = bounded(Worker::builder(&svc).id(43).plugin("worker_graph").gid(6).start()).await??;
        assert_eq!((b.id(), c.id()), (42, 43));
        d.wait_workers(3);
        let mut five = bounded(svc.workers_by_gid(5)).await??;
        five.sort();
        assert_eq!(five, {
            let mut v = vec![a.id(), 42];
            v.sort();
            v
        });
        assert_eq!(bounded(svc.workers_by_gid(6)).await??, vec![43]);
        assert!(bounded(svc.workers_by_gid(7)).await??.is_empty());
        // Stopping one of two attachments keeps the worker; stopping the last tears it down.
        bounded(a2.stop()).await??;
        assert_eq!(loopback(&a, &svc, 3).await?, 3);
        bounded(c.stop()).await??;
        d.wait_workers(2);
        assert_eq!(bounded(svc.workers_by_gid(6)).await??, Vec::<u64>::new());
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn many_concurrent_commands_within_the_inflight_limit() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let e = Worker::builder(&svc).plugin("worker_graph").max_inflight(3).start().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        // Four in flight at most; the worker answers FULL to a host that sends more, so every
        // command succeeding shows the limit held.
        let w = bounded(Worker::builder(&svc).plugin("worker_graph").max_inflight(4).start()).await??;
        let tasks: Vec<_> = (0..300u64)
            .map(|i| {
                let (w, svc) = (w.clone(), svc.clone());
                spawn_local(async move { loopback(&w, &svc, i * 7).await })
            })
            .collect();
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await??, i as u64 * 7);
        }
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

/// A host whose executor sleeps between commands (nothing else in flight) is woken by each
/// answer that comes through the shared-memory channel: the wake-up request it leaves when
/// it arms its PE must survive the progress DOCA's idle protocol makes before the wait.
/// (A lost wake-up showed as commands that took the executor's 20 s housekeeping tick.)
#[test]
fn a_sleeping_host_is_woken_by_each_answer() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let w = bounded(Worker::builder(&svc).plugin("worker_graph").start()).await??;
        for i in 0..50u64 {
            // Let the worker go idle and block, and the host sleep, before each command.
            async_doca::time::sleep(Duration::from_micros(200)).await;
            let id = svc.plugin(graph::PLUGIN_NAME)?.id;
            let cmd = graph::Cmd::Loopback { value: i }.encode();
            // A lost wake-up is not a hang: the timeout's own timer wakes the host, which then
            // finds the answer. So the check is the time the answer took (microseconds when
            // it wakes the host; the bound is a liveness limit, not a performance one).
            let t0 = std::time::Instant::now();
            let reply = timeout(Duration::from_secs(5), w.command(id, &cmd)).await??;
            let took = t0.elapsed();
            // (4 s: below the 5 s timeout that would wake a lost wake-up, far above a loaded
            // machine's scheduling delays.)
            assert!(took < Duration::from_secs(4), "command {i} took {took:?}: a lost wake-up");
            assert_eq!(graph::Notif::decode(&reply).unwrap(), graph::Notif::Loopback { value: i });
        }
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

/// Commands and answers small enough for the shared-memory channel's slots and too big for
/// them (the socket), mixed and in flight together: every answer is its own command's.
#[test]
fn commands_of_every_size_cross_the_channel_and_the_socket() {
    let dir = plugin_dir(true);
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let c = svc.plugin("c_loopback")?.id;
        let w = bounded(Worker::builder(&svc).plugin_ids(c).max_inflight(16).start()).await??;
        // Around the slot size (1 KiB with the message's header) and past it, within the
        // service's message size.
        let sizes = [1usize, 64, 900, 1000, 1024, 1100, 2000, 3000];
        let tasks: Vec<_> = (0..240usize)
            .map(|i| {
                let w = w.clone();
                let payload: Vec<u8> = (0..sizes[i % sizes.len()]).map(|k| (i * 31 + k) as u8).collect();
                spawn_local(async move {
                    let answer = bounded(w.command(c, &payload)).await??;
                    Ok::<_, Error>((payload, answer))
                })
            })
            .collect();
        for t in tasks {
            let (payload, answer) = t.await??;
            let reversed: Vec<u8> = payload.iter().rev().copied().collect();
            assert_eq!(answer, reversed, "an answer of {} bytes", payload.len());
        }
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn malformed_command_gets_an_error_and_the_worker_lives_on() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let g = svc.plugin("worker_graph")?.id;
        let w = bounded(Worker::builder(&svc).plugin_ids(g).start()).await??;
        let e = bounded(w.command(g, b"\x01\x02")).await?.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert_eq!(loopback(&w, &svc, 5).await?, 5);
        // A plugin the worker did not load, and a payload beyond the message size.
        let s = svc.plugin("worker_sandbox")?.id;
        assert_eq!(w.command(s, b"x").await.unwrap_err().kind(), ErrorKind::InvalidArgument);
        let big = vec![0u8; 1 << 20];
        assert_eq!(bounded(w.command(g, &big)).await?.unwrap_err().kind(), ErrorKind::InvalidArgument);
        assert_eq!(loopback(&w, &svc, 6).await?, 6);
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn unauthenticated_client_is_refused() {
    let dir = plugin_dir(false);
    // Only uid 65534 may connect: this test's user is refused by its credentials.
    let d = daemon_with(dir.path(), &["--allow-uid", "65534"]);
    rt().block_on(async {
        let e = connect(&d).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
        assert_eq!(e.code().map(|c| c.0), Some(async_doca::sys::DOCA_ERROR_AUTHENTICATION));
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn worker_limit_is_reported() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &["--max-workers", "1"]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let _one = bounded(Worker::builder(&svc).plugin("worker_graph").start()).await??;
        let e = bounded(Worker::builder(&svc).plugin("worker_graph").start()).await?.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted, "{e}");
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

/// A receive nobody sends to: a command that stays in flight until something breaks.
fn pending_recv(w: &Worker, svc: &Service) -> async_doca::JoinHandle<Result<Vec<u8>>> {
    let id = svc.plugin(sandbox::PLUGIN_NAME).unwrap().id;
    let w = w.clone();
    spawn_local(async move { bounded(w.command(id, &sandbox::Cmd::recv(77, 77).encode())).await? })
}

#[test]
fn killed_worker_fails_its_commands_and_the_service_stays_up() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let w = bounded(Worker::builder(&svc).plugin("worker_sandbox").plugin("worker_graph").start()).await??;
        let pending = pending_recv(&w, &svc);
        async_doca::time::sleep(Duration::from_millis(50)).await;
        let pid = d.wait_workers(1)[0];
        // SAFETY: kill(2) on the worker process the daemon spawned for this test.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let e = pending.await?.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
        assert_eq!(loopback(&w, &svc, 1).await.unwrap_err().kind(), ErrorKind::ConnectionLost);
        assert!(!alive(pid));
        // The service still serves.
        let w2 = bounded(Worker::builder(&svc).plugin("worker_graph").start()).await??;
        assert_eq!(loopback(&w2, &svc, 2).await?, 2);
        Ok::<(), Error>(())
    })
    .unwrap();
    d.stop();
}

#[test]
fn killed_daemon_fails_everything_without_hanging() {
    let dir = plugin_dir(false);
    let mut d = daemon_with(dir.path(), &[]);
    rt().block_on(async {
        let svc = connect(&d).await?;
        let w = bounded(Worker::builder(&svc).plugin("worker_sandbox").start()).await??;
        let pending = pending_recv(&w, &svc);
        async_doca::time::sleep(Duration::from_millis(50)).await;
        let workers = d.wait_workers(1);
        d.kill();
        let e = pending.await?.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
        let e = bounded(svc.workers_by_gid(0)).await?.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionLost, "{e}");
        for p in workers {
            assert!(!alive(p), "worker {p} outlived its daemon");
        }
        Ok::<(), Error>(())
    })
    .unwrap();
}

// ---- a domain across two processes: the sandbox ping-pong -------------------------------

const SOCKET_ENV: &str = "ASYNC_DOCA_TEST_UROM_SOCKET";
const BASE_ENV: &str = "ASYNC_DOCA_TEST_UROM_BASE";
const ROUNDS: u64 = 20;

/// One member: its worker is `base + rank`; rank 0 pings, rank 1 pongs.
fn domain_member(socket: &Path, oob_path: &Path, rank: u32, base: u64) -> Result<()> {
    rt().block_on(async {
        let dev = Device::open_default()?;
        let svc = bounded(Service::builder(&dev).socket_path(socket).connect()).await??;
        let id = svc.plugin(sandbox::PLUGIN_NAME)?.id;
        let w = bounded(Worker::builder(&svc).id(base + rank as u64).plugin_ids(id).start()).await??;
        let oob = UnixOob::connect(oob_path, rank, 2, LIMIT)?;
        let domain = bounded(Domain::builder(oob).worker(&w).start()).await??;
        assert_eq!((domain.rank(), domain.size()), (rank, 2));
        assert_eq!(domain.members(), [vec![base], vec![base + 1]], "every member's workers, by rank");
        let peer = domain.members()[1 - rank as usize][0];
        let send = |tag: u64, data: Vec<u8>| sandbox::Cmd::send(tag, peer, tag, data).encode();
        let recv = |tag: u64| sandbox::Cmd::recv(tag, tag).encode();
        let received = |bytes: Vec<u8>| match sandbox::Notif::decode(&bytes) {
            Ok(sandbox::Notif::TagRecv { data, .. }) => Ok(data),
            other => Err(Error::new(ErrorKind::Other, format!("unexpected notification {other:?}"))),
        };
        for i in 0..ROUNDS {
            let ping = format!("ping {i}").into_bytes();
            let pong = format!("pong {i}").into_bytes();
            if rank == 0 {
                bounded(w.command(id, &send(1, ping))).await??;
                assert_eq!(received(bounded(w.command(id, &recv(2))).await??)?, pong);
            } else {
                assert_eq!(received(bounded(w.command(id, &recv(1))).await??)?, ping);
                bounded(w.command(id, &send(2, pong))).await??;
            }
        }
        bounded(domain.stop()).await??;
        Ok(())
    })
}

#[test]
fn domain_across_two_processes_runs_the_sandbox_ping_pong() {
    let dir = plugin_dir(false);
    let d = daemon_with(dir.path(), &[]);
    let oob = d.dir.path().join("oob.sock");
    let base = (std::process::id() as u64) << 32;
    let mut child = Reap(Some(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "domain_child", "--ignored", "--nocapture", "--test-threads=1"])
            .env(SOCKET_ENV, &d.socket)
            .env(async_doca::oob::OOB_PATH_ENV, &oob)
            .env(BASE_ENV, base.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    domain_member(&d.socket, &oob, 0, base).unwrap();
    let status = child.0.take().unwrap().wait().unwrap();
    assert!(status.success(), "the other member failed: {status}");
    d.stop();
}

#[test]
#[ignore = "started by domain_across_two_processes_runs_the_sandbox_ping_pong as the other member"]
fn domain_child() {
    let socket = PathBuf::from(std::env::var(SOCKET_ENV).expect("started by the parent test"));
    let oob = PathBuf::from(std::env::var(async_doca::oob::OOB_PATH_ENV).unwrap());
    let base: u64 = std::env::var(BASE_ENV).unwrap().parse().unwrap();
    domain_member(&socket, &oob, 1, base).unwrap();
}
