//! The `async-doca` command line: measurements (`perf`), device information (`info`), CPU
//! masks (`taskset`) and, with the soft provider, the UROM service daemon (`urom-service`).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod logging;
mod perf;
mod taskset;

#[derive(Parser, Debug)]
#[command(name = "async-doca", version, about = "Asynchronous DOCA runtime: tools and measurements")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// What to log on stderr: a level (error, warn, info, debug, trace) or RUST_LOG
    /// directives such as `async_doca::rdma=trace` [default: $RUST_LOG, else warn; info for
    /// urom-service]
    #[arg(long, value_name = "LEVEL", global = true)]
    log_level: Option<String>,
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
    /// Show and change the CPU masks of the processes in a DROM registry, or start a
    /// program on reserved CPUs (like DLB's dlb_taskset).
    Taskset(taskset::TasksetArgs),
    /// The soft provider's UROM service: spawns UROM workers on this machine (foreground).
    #[cfg(feature = "soft")]
    UromService(UromServiceArgs),
}

/// `async-doca urom-service`: see docs/urom-soft.md.
#[cfg(feature = "soft")]
#[derive(clap::Args, Debug)]
struct UromServiceArgs {
    /// Socket to listen on [default: `$XDG_RUNTIME_DIR/async-doca-urom-<uid>.sock`, /tmp without XDG_RUNTIME_DIR]
    #[arg(long, value_name = "PATH")]
    socket: Option<std::path::PathBuf>,
    /// Plugin directories, `;`-separated [default: $UROM_PLUGIN_PATH]
    #[arg(long, value_name = "DIRS")]
    plugin_path: Option<String>,
    /// CPUs workers may use, e.g. `0-1,4` [default: this process's affinity; must be inside it]
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Offer N logical CPUs, 0 to N-1, as a DPU's Arm cores (NVIDIA's UROM samples ask for 0-7),
    /// and run each worker on the real CPUs behind its logical ones (logical CPU i on the
    /// (i mod R)-th of the R CPUs of --cpus) [default: offer the real CPUs]
    #[arg(long, value_name = "N")]
    arm_cpus: Option<u32>,
    /// Workers alive at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    max_workers: u32,
    /// Largest command / notification, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    max_msg_size: usize,
    /// Allow this uid (repeatable); when given, exactly these uids may connect [default: only
    /// the service's own uid]
    #[arg(long = "allow-uid", value_name = "UID")]
    allow_uids: Vec<u32>,
    /// Also offer the plugins compiled into this program (worker_graph, worker_sandbox,
    /// worker_coll), so no plugin shared object is needed.
    #[arg(long)]
    builtin_samples: bool,
    /// Register the workers in the DROM registry of this key, so that `async-doca taskset`
    /// lists and moves them (inside --cpus).
    #[arg(long, value_name = "KEY")]
    drom_key: Option<String>,
}

#[cfg(feature = "soft")]
fn urom_service(args: UromServiceArgs, log_level: Option<&str>) -> Result<(), String> {
    use async_doca::urom::daemon;
    let mut cfg = daemon::Config::new(args.socket.unwrap_or_else(daemon::default_socket_path));
    if let Some(p) = args.plugin_path {
        cfg.plugin_path = daemon::parse_plugin_path(&p);
    }
    cfg.cpus = args.cpus.as_deref().map(daemon::parse_cpu_list).transpose()?;
    cfg.arm_cpus = args.arm_cpus;
    cfg.max_workers = args.max_workers;
    cfg.max_msg_size = args.max_msg_size;
    cfg.allow_uids = args.allow_uids;
    cfg.log_level = logging::daemon_level(log_level);
    #[cfg(feature = "tracing")]
    {
        cfg.log_sink = Some(logging::daemon_sink);
    }
    if args.builtin_samples {
        cfg.builtins = daemon::sample_builtins();
    }
    if let Some(key) = args.drom_key {
        let workers = async_doca::drom::UromWorkers::new(&key, async_doca::drom::DEFAULT_CHECK_INTERVAL)
            .map_err(|e| e.to_string())?;
        cfg.worker_cpus = Some(std::sync::Arc::new(workers));
    }
    daemon::run(cfg)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (default_filter, who) = match cli.command {
        #[cfg(feature = "soft")]
        Command::UromService(_) => ("info", "urom-service: "),
        _ => ("warn", ""),
    };
    if let Err(e) = logging::init(cli.log_level.as_deref(), default_filter) {
        eprintln!("async-doca: {who}{e}");
        return ExitCode::FAILURE;
    }
    let result: Result<(), String> = match cli.command {
        Command::Perf(args) => perf::run(args).map_err(|e| e.to_string()),
        Command::PerfPeer(args) => perf::run_peer(args).map_err(|e| e.to_string()),
        Command::Info => info().map_err(|e| e.to_string()),
        Command::Taskset(args) => return taskset::run(args),
        #[cfg(feature = "soft")]
        Command::UromService(args) => {
            urom_service(args, cli.log_level.as_deref()).map_err(|e| format!("urom-service: {e}"))
        }
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
    match async_doca::sys::DOCA_SYSTEM_VERSION {
        _ if !cfg!(feature = "system") => println!("provider: doca-soft (software)"),
        Some(v) => println!("provider: NVIDIA DOCA {v} (system)"),
        None => println!("provider: NVIDIA DOCA (system, version not known at build time)"),
    }
    println!("cpus:     {}", async_doca::CpuSet::current_affinity()?);
    for (i, d) in async_doca::Device::list()?.iter().enumerate() {
        println!("device {i}: ibdev {}  iface {}  pci {}", d.ibdev_name, d.iface_name, d.pci_addr);
    }
    Ok(())
}
