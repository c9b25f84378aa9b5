//! `async-doca taskset`: inspect and change the CPU masks of the processes in a DROM registry
//! (like DLB's `dlb_taskset`), or start a program on reserved CPUs.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode};
use std::time::Duration;

use async_doca::drom::{self, Flags, Registry};
use async_doca::CpuSet;

/// How often a launcher looks whether its child exited (changes wake it at once).
const FOLLOW_INTERVAL: Duration = Duration::from_millis(20);

/// `async-doca taskset`: see docs/drom.md.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Examples:\n  async-doca taskset --list\n  async-doca taskset -p 4242 -c 0-1 --steal --sync\n  async-doca taskset -c 1 -- ./my-service --flag"
)]
pub struct TasksetArgs {
    /// Registry key [default: $ASYNC_DOCA_DROM_KEY, else `default`]
    #[arg(long, value_name = "KEY")]
    key: Option<String>,
    /// List the registered processes, their masks and the free CPUs.
    #[arg(short = 'l', long, conflicts_with_all = ["pid", "cpus", "command"])]
    list: bool,
    /// The process to show (alone) or change (with -c).
    #[arg(short = 'p', long, value_name = "PID")]
    pid: Option<i32>,
    /// CPU list, e.g. `0-1,4`.
    #[arg(short = 'c', long = "cpu-list", value_name = "CPUS")]
    cpus: Option<String>,
    /// Take the CPUs from the processes that own them.
    #[arg(long)]
    steal: bool,
    /// Wait until the process (and those that lost CPUs) applied the change.
    #[arg(long)]
    sync: bool,
    /// How long --sync waits, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 5000)]
    timeout_ms: u64,
    /// With -p: give PID back the CPUs stolen from it that are free now.
    #[arg(long, requires = "pid", conflicts_with = "cpus")]
    recover: bool,
    /// When launching: when the program exits, give free stolen CPUs back to their owners.
    #[arg(long)]
    return_stolen: bool,
    /// The program to start on the CPUs of -c, and its arguments (after `--`).
    #[arg(last = true, value_name = "PROGRAM")]
    command: Vec<String>,
}

/// Runs the subcommand; errors are printed here so that a launched program's exit code can
/// be passed through.
pub fn run(args: TasksetArgs) -> ExitCode {
    match dispatch(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("async-doca taskset: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: TasksetArgs) -> async_doca::Result<ExitCode> {
    let key = args.key.clone().unwrap_or_else(drom::default_key);
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut flags = Flags::NONE;
    if args.steal {
        flags = flags | Flags::STEAL_CPUS;
    }
    if args.sync {
        flags = flags | Flags::SYNC_QUERY;
    }
    let cpus: Option<CpuSet> = args.cpus.as_deref().map(str::parse).transpose()?;
    if args.list {
        list(&Registry::attach(&key)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.command.is_empty() {
        let Some(cpus) = cpus else { return Err(usage("a program needs -c CPUS")) };
        if args.pid.is_some() {
            return Err(usage("-p and a program exclude each other"));
        }
        let mut post = Flags::NONE;
        if args.return_stolen {
            post = post | Flags::RETURN_STOLEN;
        }
        return launch(&Registry::open(&key)?, &cpus, flags, post, &args.command);
    }
    let Some(pid) = args.pid else { return Err(usage("nothing to do: give --list, -p PID or -c CPUS -- PROGRAM")) };
    let reg = Registry::attach(&key)?.sync_timeout(timeout);
    if args.recover {
        let got = reg.recover_stolen(pid)?;
        println!("pid {pid} recovered CPUs {}", show(&got));
        return Ok(ExitCode::SUCCESS);
    }
    match cpus {
        Some(cpus) => {
            reg.set_mask(pid, &cpus, flags)?;
            println!(
                "pid {pid} mask {cpus}{}",
                if args.sync { " (applied)" } else { " (pending until it applies it)" }
            );
        }
        None => println!("pid {pid} mask {}", reg.get_mask(pid, flags)?),
    }
    Ok(ExitCode::SUCCESS)
}

fn usage(msg: &str) -> async_doca::Error {
    async_doca::Error::new(async_doca::ErrorKind::InvalidArgument, msg.to_owned())
}

fn show(set: &CpuSet) -> String {
    if set.is_empty() {
        "-".to_owned()
    } else {
        set.to_string()
    }
}

fn list(reg: &Registry) -> async_doca::Result<()> {
    println!("{:<9} {:<12} {:<12} {:<12} STATE", "PID", "MASK", "CURRENT", "STOLEN");
    for p in reg.processes()? {
        let state = match (p.reserved_by, p.dirty) {
            (Some(l), _) => format!("reserved-by-{l}"),
            (None, true) => "pending".to_owned(),
            (None, false) => "running".to_owned(),
        };
        println!("{:<9} {:<12} {:<12} {:<12} {state}", p.pid, show(&p.mask), show(&p.current), show(&p.stolen));
    }
    println!("free: {}  (node: {})", show(&reg.free_cpus()?), reg.system_cpus());
    Ok(())
}

/// Reserves `cpus`, starts the program pinned to them with the reservation in its
/// environment, and finalizes its registration when it exits.
fn launch(
    reg: &Registry,
    cpus: &CpuSet,
    flags: Flags,
    post: Flags,
    command: &[String],
) -> async_doca::Result<ExitCode> {
    let res = reg.pre_init(cpus, flags)?;
    let (var, value) = res.env();
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for cpu in cpus.iter() {
        // SAFETY: writes bit `cpu` (< CPU_SETSIZE, a CpuSet bound) of a valid set.
        unsafe { libc::CPU_SET(cpu, &mut raw) };
    }
    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]).env(var, value);
    // SAFETY: the closure runs in the forked child before exec and only makes one
    // async-signal-safe system call on memory copied into it; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| async_doca::Error::os(e, &format!("start {}", command[0])))?;
    let pid = child.id() as i32;
    // The child may have adopted the reservation, or even exited, already: both are fine.
    let _ = res.bind(pid);
    // Until the child exits, apply the changes made to a reservation it did not adopt (a
    // program that knows nothing of DROM); an adopting runtime follows by itself.
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) => {}
            Err(e) => break Err(async_doca::Error::os(e, "wait for the program")),
        }
        res.wait(FOLLOW_INTERVAL);
        if let Ok(Some(mask)) = res.poll() {
            if let Err(e) = drom::pin_process(pid, &mask) {
                eprintln!("async-doca taskset: moving pid {pid} to {mask}: {e}");
            }
            let _ = res.applied(&mask);
        }
    };
    reg.post_finalize(pid, post)?;
    let status = status?;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}
