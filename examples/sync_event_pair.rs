//! The host/DPU sync-event pattern, as two real processes.
//!
//! The parent (the "host") creates a sync event, exports it, and starts this same program
//! again as the child (the "DPU" side) with the export blob on its command line. Each round
//! the host signals (the counter becomes 2r+1), the child waits for exactly that value and
//! answers (2r+2), and the host waits for the answer. Both sides check that every value
//! arrives in order; the program exits 0 only if all rounds did.
//!
//! ```text
//! cargo run --release --example sync_event_pair [ROUNDS]
//! ```

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use async_doca::sync_event::{Location, SyncEvent};
use async_doca::time::timeout;
use async_doca::{Device, Error, ErrorKind, Result, Runtime};

/// How long one side waits for the other before giving up: the example never hangs.
const PEER_TIMEOUT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("--child") => child(args.get(2).map(String::as_str).unwrap_or(""), rounds_arg(args.get(3))),
        other => host(rounds_arg(other.map(str::to_owned).as_ref())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sync_event_pair: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rounds_arg(arg: Option<&String>) -> u64 {
    arg.and_then(|s| s.parse().ok()).unwrap_or(1000)
}

/// A wait that fails instead of hanging when the peer is gone.
async fn wait_for(ev: &SyncEvent, value: u64) -> Result<()> {
    timeout(PEER_TIMEOUT, ev.wait_eq(value))
        .await
        .map_err(|_| Error::new(ErrorKind::TimedOut, format!("peer never set the counter to {value}")))?
}

fn host(rounds: u64) -> Result<()> {
    let rt = Runtime::new()?;
    rt.block_on(async {
        let dev = Device::open_default()?;
        // The peer publishes into this event from "the other side of the PCI bus".
        let ev = SyncEvent::builder(&dev).publisher(Location::RemotePci).build().await?;
        let blob: String = ev.export()?.iter().map(|b| format!("{b:02x}")).collect();

        let exe = std::env::current_exe().map_err(|e| Error::os(e, "find own executable"))?;
        let mut child = Command::new(exe)
            .args(["--child", &blob, &rounds.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| Error::os(e, "start the DPU-side process"))?;

        let started = Instant::now();
        let outcome = async {
            for r in 0..rounds {
                let before = ev.add(1).await?;
                if before != 2 * r {
                    return Err(Error::new(
                        ErrorKind::Other,
                        format!("round {r}: counter was {before}, not {}", 2 * r),
                    ));
                }
                wait_for(&ev, 2 * r + 2).await?;
            }
            Ok(())
        }
        .await;
        let elapsed = started.elapsed();
        if outcome.is_err() {
            let _ = child.kill();
        }
        let status = child.wait().map_err(|e| Error::os(e, "wait for the DPU-side process"))?;
        outcome?;
        if !status.success() {
            return Err(Error::new(ErrorKind::Other, format!("the DPU-side process failed: {status}")));
        }
        println!(
            "{rounds} rounds in order across two processes; {:.2} µs per round trip",
            elapsed.as_secs_f64() * 1e6 / rounds as f64
        );
        Ok(())
    })
}

fn child(blob_hex: &str, rounds: u64) -> Result<()> {
    let blob = (0..blob_hex.len())
        .step_by(2)
        .map(|i| blob_hex.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| Error::new(ErrorKind::InvalidArgument, "the blob argument is not hex"))?;
    let rt = Runtime::new()?;
    rt.block_on(async {
        let dev = Device::open_default()?;
        let ev = SyncEvent::open(&dev, &blob).await?;
        for r in 0..rounds {
            wait_for(&ev, 2 * r + 1).await?;
            let before = ev.add(1).await?;
            if before != 2 * r + 1 {
                return Err(Error::new(
                    ErrorKind::Other,
                    format!("round {r}: counter was {before}, not {}", 2 * r + 1),
                ));
            }
        }
        Ok(())
    })
}
