//! The soft provider's UROM service, runnable from any program (feature `soft`).
//!
//! On a BlueField host NVIDIA's UROM service runs on the DPU. On the soft provider the service
//! is `async-doca urom-service`, which is this module's [`run`] behind a command line. Programs
//! that want a private service (tests, the examples, `perf`) can run it themselves, in a
//! **process of its own**: the daemon forks its workers, which is only sound in a process with
//! no other threads (re-execute the program with an argument that makes it call [`run`] first
//! thing, as the UROM examples do).
//!
//! [`sample_builtins`] offers the sample plugins and the collectives plugin compiled in, so such a service needs no
//! plugin shared objects on disk.

pub use doca_soft::urom::daemon::{
    default_socket_path, parse_cpu_list, parse_plugin_path, run, Builtin, Config, LogLevel, LogSink,
};

use doca_urom_plugin::samples::{graph, sandbox};
use doca_urom_plugin::Plugin;

/// `worker_graph`, `worker_sandbox` and `worker_coll` (the collectives offload), as plugins
/// compiled into this program.
pub fn sample_builtins() -> Vec<Builtin> {
    vec![
        builtin::<graph::Graph>(graph::PLUGIN_NAME),
        builtin::<sandbox::Sandbox>(sandbox::PLUGIN_NAME),
        builtin::<doca_urom_coll::CollPlugin>(doca_urom_coll::proto::PLUGIN_NAME),
    ]
}

fn builtin<P: Plugin>(name: &'static str) -> Builtin {
    let iface = doca_urom_plugin::iface_of::<P>();
    // SAFETY: the SDK's `urom_plugin_iface` and doca-soft's are the same `#[repr(C)]` struct
    // from the same source file (`doca-sys/src/urom_plugin.rs`, included by both crates), so
    // they have one layout and the function pointers one ABI; only the Rust type names differ.
    let iface = unsafe {
        std::mem::transmute::<doca_urom_plugin::abi::urom_plugin_iface, doca_soft::types::urom_plugin_iface>(iface)
    };
    let arm = doca_urom_plugin::soft_arm_of::<P>();
    // SAFETY: as above: one function type from the same source file, seen through the two
    // crates' copies of `urom_worker_ctx` (one layout).
    let arm = unsafe {
        std::mem::transmute::<doca_urom_plugin::abi::urom_plugin_soft_arm_fn, doca_soft::types::urom_plugin_soft_arm_fn>(
            arm,
        )
    };
    Builtin { name, version: P::VERSION, iface, arm: Some(arm) }
}
