//! UROM as futures: offload workers on the DPU, their plugins, and domains.
//!
//! UROM (Unified Resource and Offload Manager) runs user code next to the network, on the
//! DPU's cores. Its pieces, and who owns them:
//!
//! * the **service** ([`Service`]) is a daemon on the DPU (on the soft provider,
//!   `async-doca urom-service` on this machine). A host process connects to it; it lists the
//!   **plugins** it can load (shared objects written with the plugin SDK, [`plugin`]) and
//!   spawns workers;
//! * a **worker** ([`Worker`]) is a process the service spawns for this host process, pinned to
//!   a CPU set, with a set of plugins loaded. The host sends it **commands**
//!   ([`Worker::command`]): bytes packed in a plugin's format, answered by the plugin's
//!   **notification**. Commands are DOCA tasks; each resolves a future;
//! * a **domain** ([`Domain`]) groups the workers of the processes of one parallel application
//!   (like an MPI communicator). Starting it runs an out-of-band allgather ([`Oob`](crate::oob::Oob)) through
//!   which every worker learns the others' addresses and every member's registered buffers, so
//!   plugins can talk to each other and reach host memory directly.
//!
//! ```text
//!  host process                               service (DPU)
//!  Service ──connect──────────────────────▶  daemon ──spawn──▶ worker process
//!  Worker  ──command(plugin, bytes)──────────────────────────▶   plugin.worker_cmd
//!          ◀──────────────────notification bytes──────────────   plugin.progress / notif_pack
//!  Domain  ──OOB allgather with the other host processes, then to the workers
//! ```
//!
//! # Threads and lifetimes
//! Like every DOCA object here, `Service`, `Worker` and `Domain` belong to the executor that
//! created them (`!Send`); they are cheap `Rc` handles. A worker keeps its service alive, a
//! domain its workers and buffers. Dropping the last handle of a worker stops it: the service
//! tears the process down unless another connection is attached to the same worker id.
//! Dropping a command's future while it is in flight is harmless: the notification is
//! discarded when it arrives.
//!
//! # Failures
//! A worker process that dies makes its pending and later commands fail with
//! [`ErrorKind::ConnectionLost`](crate::ErrorKind::ConnectionLost); the service keeps running.
//! A service that dies makes pending queries fail the same way. A plugin that rejects a
//! command answers with an error status, which becomes the command's error; the worker goes on.

pub mod coll;
#[cfg(feature = "soft")]
pub mod daemon;
mod domain;
mod service;
mod sink;
mod worker;

/// The plugin SDK: write UROM worker plugins in safe Rust (re-export of `doca-urom-plugin`).
pub use doca_urom_plugin as plugin;
pub use domain::{Domain, DomainBuilder, DEFAULT_DOMAIN_TIMEOUT};
pub use service::{PluginInfo, Service, ServiceBuilder};
pub use worker::{Worker, WorkerBuilder, DEFAULT_MAX_INFLIGHT};
