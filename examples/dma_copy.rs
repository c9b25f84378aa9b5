//! DMA between a host process and a "DPU" process: the DPU side copies a 64 MiB host buffer
//! in, computes on it, and copies the result back into host memory; the host verifies it.
//!
//! The parent plays the host: it registers 128 MiB with `PCI_READ_WRITE` (64 MiB of input,
//! 64 MiB for the result), fills the input and exports it with `export_pci`. It starts this
//! same program again as the child, the DPU side (with `DOCA_SOFT_ROLE=dpu`, so its soft
//! device acts as the DPU's), and hands it the blob and the host device's PCI address over
//! the child's stdin. The DPU side finds the representor of that host function by its PCI
//! address, as NVIDIA's DPU samples do with their `-r` argument, imports the host memory, DMAs the input into its own memory in 1 MiB
//! copies (all in flight at once), transforms every byte, DMAs the result back, and says
//! "done". The host then checks every byte of the result; the program exits 0 only if they
//! are all right and the child exited 0.
//!
//! On a BlueField the same code runs with the host half on the host and the DPU half on the
//! Arm cores (the DPU opens the host's memory through the blob, exchanged over Comch or a
//! socket). Here the soft provider copies with `process_vm_readv`/`writev` or shared memory.
//!
//! ```text
//! cargo run --release --example dma_copy
//! ```

use std::process::ExitCode;
use std::time::Instant;

use async_doca::dma::Dma;
use async_doca::{spawn_local, Access, Device, Result};

#[path = "common/mod.rs"]
mod common;
use common::{bounded, mismatch, pattern, Peer};

const LEN: usize = 64 << 20;
const CHUNK: usize = 1 << 20;
const SEED: u32 = 17;

/// What the DPU side computes: a byte-wise transform the host can check.
fn transform(b: u8) -> u8 {
    b.rotate_left(3) ^ 0x5A
}

fn main() -> ExitCode {
    common::main_host_dpu("dma_copy", host, dpu)
}

async fn host(mut peer: Peer) -> Result<String> {
    let dev = Device::open_default()?;
    let mem = dev.alloc(2 * LEN, Access::LOCAL_READ_WRITE | Access::PCI_READ_WRITE)?;
    let input = pattern(LEN, SEED);
    mem.slice(0..LEN).write(0, &input);
    let pci = dev.info().pci_addr.clone();
    let [_ready] = peer.exchange(&[&mem.export_pci()?, pci.as_bytes()])?;
    let [done] = peer.exchange(&[b"ok"])?;
    if done != b"done" {
        return Err(mismatch("the DPU side did not finish"));
    }
    let got = mem.slice(LEN..2 * LEN).to_vec();
    if let Some(at) = got.iter().zip(&input).position(|(g, i)| *g != transform(*i)) {
        return Err(mismatch(format!("byte {at} of the result is wrong")));
    }
    Ok(format!("dma_copy: the DPU side copied {} MiB in and the result back; verified by the host", LEN >> 20))
}

async fn dpu(mut peer: Peer) -> Result<()> {
    let [blob, host_pci] = peer.exchange(&[b"ready"])?;
    let dev = Device::open_default()?;
    // The host function this DPU serves, by the PCI address the host reported.
    let host_pci = String::from_utf8(host_pci).map_err(|_| mismatch("the host's PCI address is not text"))?;
    let rep = dev.open_representor_by_pci(&host_pci)?;
    eprintln!("dma_copy (dpu): serving host function {} (VUID {})", rep.info().pci_addr, rep.info().vuid);
    let host = dev.import(&blob)?;
    let dma = Dma::builder(&dev).max_tasks(64).build().await?;
    let local = dev.alloc(LEN, Access::LOCAL_READ_WRITE)?;

    let t = Instant::now();
    let copies: Vec<_> = (0..LEN / CHUNK)
        .map(|i| {
            let r = i * CHUNK..(i + 1) * CHUNK;
            let (dma, s, d) = (dma.clone(), host.slice(r.clone()), local.slice(r));
            spawn_local(async move { dma.memcpy(s, d).await.0 })
        })
        .collect();
    for c in copies {
        bounded("dma.memcpy in", c).await???;
    }
    let copied_in = t.elapsed();

    let mut data = local.buf().to_vec();
    for b in &mut data {
        *b = transform(*b);
    }
    let mut buf = local.buf();
    buf.write(0, &data);

    let t = Instant::now();
    let copies: Vec<_> = (0..LEN / CHUNK)
        .map(|i| {
            let (dma, s, d) = (
                dma.clone(),
                local.slice(i * CHUNK..(i + 1) * CHUNK),
                host.slice(LEN + i * CHUNK..LEN + (i + 1) * CHUNK),
            );
            spawn_local(async move { dma.memcpy(s, d).await.0 })
        })
        .collect();
    for c in copies {
        bounded("dma.memcpy out", c).await???;
    }
    eprintln!(
        "dma_copy (dpu): {} MiB in {:.1} ms, out {:.1} ms",
        LEN >> 20,
        copied_in.as_secs_f64() * 1e3,
        t.elapsed().as_secs_f64() * 1e3
    );
    let [_ok] = peer.exchange(&[b"done"])?;
    Ok(())
}
