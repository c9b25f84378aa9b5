//! The pattern of NVIDIA's local-PCI sync-event samples: a DPU program and a host program
//! meet over Comch, trade a sync event's export blob over it, then signal and wait in rounds.
//!
//! Started plainly, the program is a launcher: it notes the PCI address of the host's device
//! and starts itself again as the DPU program, `--dpu <host PCI address>`, with
//! `DOCA_SOFT_ROLE=dpu` (the soft provider's DPU side). The DPU program finds the representor
//! of that host function by its PCI address (as NVIDIA's samples do with `-r`), runs a Comch
//! server bound to it, named after its pid, and starts the host program (`--host`, with
//! `DOCA_SOFT_ROLE=host`), which connects as a Comch client. The DPU
//! creates a sync event whose publisher is the remote (PCI) side, exports it and sends the
//! blob as a Comch message. The host opens the event from the blob and answers "ready". Each
//! round the host adds 1 (the counter becomes 2r+1), the DPU waits for exactly that value and
//! adds 1 (2r+2), and the host waits for it. At the end the host sends "done <rounds>" and the
//! DPU checks the final value. The program exits 0 only if every round arrived in order and
//! the child exited 0.
//!
//! ```text
//! cargo run --release --example comch_sync_event
//! ```

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use async_doca::comch::{Client, Server};
use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::timeout;
use async_doca::{Device, Error, ErrorKind, Result, Runtime};

const ROUNDS: u64 = 1000;
/// How long one side waits for the other before giving up: the example never hangs.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("--host") => Runtime::new().and_then(|rt| rt.block_on(host(args.get(2).cloned().unwrap_or_default()))),
        Some("--dpu") => dpu(args.get(2).cloned().unwrap_or_default()),
        _ => launch(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("comch_sync_event: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bounded<T>(what: &str, f: impl std::future::Future<Output = T>) -> Result<T> {
    timeout(PEER_TIMEOUT, f).await.map_err(|_| Error::new(ErrorKind::TimedOut, format!("{what}: no answer")))
}

fn mismatch(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::Other, msg.into())
}

/// The environment variable that chooses the soft provider's side.
const ROLE_ENV: &str = "DOCA_SOFT_ROLE";

/// The launcher: starts the DPU program for the host's device and reports its outcome.
fn launch() -> Result<()> {
    let host_pci = Device::list()?
        .first()
        .map(|d| d.pci_addr.clone())
        .ok_or_else(|| Error::new(ErrorKind::NotFound, "no DOCA device"))?;
    let exe = std::env::current_exe().map_err(|e| Error::os(e, "find own executable"))?;
    let status = Command::new(exe)
        .args(["--dpu", &host_pci])
        .env(ROLE_ENV, "dpu")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| Error::os(e, "run the DPU program"))?;
    if !status.success() {
        return Err(mismatch(format!("the DPU program failed: {status}")));
    }
    Ok(())
}

/// The DPU side: Comch server bound to the host's representor, sync event owner.
fn dpu(host_pci: String) -> Result<()> {
    let name = format!("comch-sync-event-{}", std::process::id());
    let rt = Runtime::new()?;
    let mut child = None;
    let r = rt.block_on(async {
        let dev = Device::open_default()?;
        let rep = dev.open_representor_by_pci(&host_pci)?;
        eprintln!("comch_sync_event (dpu): serving host function {} (VUID {})", rep.info().pci_addr, rep.info().vuid);
        let server =
            Server::builder(&dev, &name).representor(&rep).max_msg_size(1024).recv_queue_size(8).build().await?;
        let exe = std::env::current_exe().map_err(|e| Error::os(e, "find own executable"))?;
        child = Some(
            Command::new(exe)
                .args(["--host", &name])
                .env(ROLE_ENV, "host")
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| Error::os(e, "start the host process"))?,
        );
        let conn = bounded("the host's connection", server.accept()).await??;

        // The event the host signals over PCI; its blob goes to the host over Comch.
        let ev = SyncEvent::builder(&dev).publisher(Location::RemotePci).build().await?;
        conn.send(ev.export()?).await?;
        match bounded("the host's ready", conn.recv()).await? {
            Some(m) if m == b"ready" => {}
            other => return Err(mismatch(format!("expected ready, got {other:?}"))),
        }

        let t = Instant::now();
        for r in 0..ROUNDS {
            bounded("the host's signal", ev.wait_eq(2 * r + 1)).await??;
            ev.add(1).await?;
        }
        let elapsed = t.elapsed();
        let expect = format!("done {ROUNDS}");
        match bounded("the host's done", conn.recv()).await? {
            Some(m) if m == expect.as_bytes() => {}
            other => return Err(mismatch(format!("expected {expect:?}, got {other:?}"))),
        }
        let last = ev.get().await?;
        if last != 2 * ROUNDS {
            return Err(mismatch(format!("final value {last}, expected {}", 2 * ROUNDS)));
        }
        Ok(elapsed)
    });
    let status = child.take().map(|mut c| c.wait());
    let elapsed = r?;
    match status {
        Some(Ok(s)) if s.success() => {}
        other => return Err(mismatch(format!("the host side failed: {other:?}"))),
    }
    println!(
        "comch_sync_event: blob over Comch, {ROUNDS} signal/wait rounds in {:.1} ms ({:.2} us per round trip), verified",
        elapsed.as_secs_f64() * 1e3,
        elapsed.as_secs_f64() * 1e6 / ROUNDS as f64
    );
    Ok(())
}

/// The host side (the DPU program's child): Comch client, opens the event from the blob it receives.
async fn host(name: String) -> Result<()> {
    let dev = Device::open_default()?;
    let conn = bounded("the DPU's server", Client::builder(&dev, &name).max_msg_size(1024).connect()).await??;
    let blob = bounded("the DPU's blob", conn.recv()).await?.ok_or_else(|| mismatch("the DPU went away"))?;
    let ev = SyncEvent::open(&dev, &blob).await?;
    conn.send(b"ready".to_vec()).await?;
    for r in 0..ROUNDS {
        ev.add(1).await?;
        bounded("the DPU's answer", ev.wait_eq(2 * r + 2)).await??;
    }
    conn.send(format!("done {ROUNDS}").into_bytes()).await?;
    Ok(())
}
