//! The `async-doca` command line: measurements (`perf`) and device information (`info`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod perf;

#[derive(Parser, Debug)]
#[command(name = "async-doca", version, about = "Asynchronous DOCA runtime: tools and measurements")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Latency and throughput of every operation, raw DOCA loop vs the async runtime.
    Perf(perf::PerfArgs),
    /// One side of a two-process perf test (started by `perf` itself).
    #[command(hide = true)]
    PerfPeer(perf::PeerArgs),
    /// The DOCA provider this binary links and the devices it sees.
    Info,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Perf(args) => perf::run(args),
        Command::PerfPeer(args) => perf::run_peer(args),
        Command::Info => info(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async-doca: {e}");
            ExitCode::FAILURE
        }
    }
}

fn info() -> async_doca::Result<()> {
    println!("provider: {}", if cfg!(feature = "system") { "NVIDIA DOCA (system)" } else { "doca-soft (software)" });
    println!("cpus:     {}", async_doca::CpuSet::current_affinity()?);
    for (i, d) in async_doca::Device::list()?.iter().enumerate() {
        println!("device {i}: ibdev {}  iface {}  pci {}", d.ibdev_name, d.iface_name, d.pci_addr);
    }
    Ok(())
}
