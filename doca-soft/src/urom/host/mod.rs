//! The host side of UROM (`doca-urom`): the service, worker and domain ctxs, the worker command
//! task and the get-workers-by-gid task, over the soft daemon (docs/urom-soft.md).
//!
//! # Model
//!
//! * **Service** ([`service`]): a synchronous ctx. Start resolves the daemon's socket
//!   ([`resolve`]), connects, sends `Hello` and waits up to [`WELCOME_TIMEOUT`] for `Welcome`
//!   (plugins, cpuset, effective message size). The control connection stays registered with
//!   the PE (level mode) and carries get-workers-by-gid requests. A hang-up fails the pending
//!   ones with `CONNECTION_ABORTED`; later submissions fail with `NOT_CONNECTED`.
//! * **Worker** ([`worker`]): an asynchronous ctx with its own control connection (`Hello`,
//!   `Spawn`) and, once `Spawned`, the data connection passed with the reply. Commands
//!   ([`cmd_task`]) travel on the data connection keyed by a per-worker counter; `Notify`
//!   answers complete them. A data hang-up or a `WorkerExited` for this worker puts the worker in
//!   its error state: every in-flight command fails with `CONNECTION_ABORTED`, later submits
//!   with `NOT_CONNECTED`, until the ctx is stopped and started again.
//! * **Domain** ([`domain`]): an asynchronous ctx that exchanges the local workers' addresses
//!   and the registered buffers with the other processes through the user's OOB allgather
//!   (`domain::OobExchange`, two rounds), then sends `DomainCreate` to each local worker. The
//!   worker routes the `Notify { plugin: 0 }` answers to the domain through a shared
//!   `worker::DomainReply` cell (the only link from a worker back to a domain).
//!
//! # Ownership and lifetimes
//! The user owns every object (C pointers). A worker points at its service: the service
//! counts those workers and refuses `destroy` (`IN_USE`) while any exists. A domain points at
//! its workers (DOCA's contract: they outlive it); a domain that is not IDLE holds reply cells
//! in its workers, which it withdraws when it stops. Task pools belong to the ctxs (`task.rs`).
//! Command tasks own their payload and response memory (`cmd_task::TaskMemory`, one region per
//! worker, kept until the worker is destroyed or restarted with other sizes).
//!
//! # Threads
//! As in DOCA, each object is used on the thread of its PE. Workers may live on other threads
//! than their service: each has its own control connection, and what a worker reads of its
//! service (the `Welcome` snapshot, behind a mutex; the user count, atomic) is thread-safe. The
//! service must stay RUNNING while its workers start.

pub mod cmd_task;
mod conn;
pub mod domain;
pub mod gid_task;
pub mod resolve;
pub mod service;
mod wire;
pub mod worker;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use cmd_task::doca_urom_worker_cmd_task;
pub use domain::doca_urom_domain;
pub use gid_task::doca_urom_service_get_workers_by_gid_task;
pub use service::doca_urom_service;
pub use worker::doca_urom_worker;

/// How long the service start waits for the daemon's `Welcome`.
pub const WELCOME_TIMEOUT: Duration = Duration::from_secs(5);
/// The protocol version sent in `Hello`.
pub const PROTO_VERSION: u32 = 1;
/// Extra room in every packet beyond the effective `max_msg_size` (headers, lists).
pub const PACKET_SLACK: usize = 4096;
/// The default `doca_urom_worker_set_max_inflight_tasks`.
pub const DEFAULT_MAX_INFLIGHT: u32 = 32;
/// Largest accepted `max_inflight_tasks`.
pub const MAX_INFLIGHT_LIMIT: u32 = 1 << 16;
/// Inline user data of a command task, in bytes.
pub const CMD_USER_DATA_BYTES: usize = 32;
/// Get-workers-by-gid tasks a service can have allocated at once (one more: NO_MEMORY).
pub const GID_TASKS: u32 = 64;
/// The default `doca_urom_service_set_max_workers`.
pub const DEFAULT_MAX_WORKERS: u32 = 256;
/// Largest accepted `doca_urom_service_set_max_comm_msg_size` (a SEQPACKET message must fit in
/// a socket buffer; the daemon may lower it further).
pub const MAX_COMM_MSG_SIZE_LIMIT: usize = 64 << 20;
