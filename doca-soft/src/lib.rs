//! The software DOCA provider: the DOCA 3.x C ABI implemented in Rust.
//!
//! Every `#[no_mangle] extern "C"` function here has the exact signature that `doca-sys`
//! declares, so code written against DOCA runs unchanged on a machine without a DPU.
//!
//! | module | what it implements |
//! | --- | --- |
//! | [`pe`], [`ctx`], [`task`] | progress engine with an epoll notification fd, ctx state machine, fixed task pools |
//! | [`doorbell`] | per-PE wake-up sockets that other threads and processes ring |
//! | [`sync_event`] | the 64-bit counter in shared memory, standalone and as a ctx |
//! | [`rdma`] | RC connections over shared-memory rings, the eight RDMA operations |
//! | [`comch`] | the host/DPU communication channel: server, clients, messages (Unix seqpacket sockets) |
//! | [`dma`] | DMA memcpy between local memory and memory imported from a PCI export |
//! | [`dev`] | the soft device list (`DOCA_SOFT_DEVICES`) |
//! | [`mmap`], [`buf`] | registered memory, export/import, buffer inventories and buffers |
//! | [`shm`], [`blob`] | memfd segments and the versioned, checksummed export blob format |
//! | [`errors`] | `doca_error_get_name` / `doca_error_get_descr` |
//! | [`version`] | `doca_version_runtime` |
//! | [`log`] | `doca_log.h`: sources, application and SDK backends, levels; [`sdk_log!`] for the provider's own messages |
//! | [`argp`] | `doca_argp.h`: parameters, commands, command-line and JSON parsing, the built-in flags |
//! | [`urom`] | UROM: the wire protocol, the service daemon and its worker processes, the host side (service, worker, domain ctxs) |
//!
//! The design, and where the provider differs from hardware, is in `docs/soft-provider.md`.
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // C entry points: the contract is DOCA's, documented in docs/

/// The ABI's value types, shared with `doca-sys` (same source file).
pub mod types {
    pub use crate::objects::*;
    include!("../../doca-sys/src/types.rs");
    include!("../../doca-sys/src/urom_plugin.rs");
    #[allow(unused_imports)]
    use core::ffi::c_char;
    include!("../../doca-sys/src/urom_types.rs");
    include!("../../doca-sys/src/dma_types.rs");
    include!("../../doca-sys/src/comch_types.rs");
    include!("../../doca-sys/src/comch_fast_types.rs");
}

/// The concrete object types the callback types name.
mod objects {
    pub use crate::comch::consumer::doca_comch_consumer_task_post_recv;
    pub use crate::comch::producer::doca_comch_producer_task_send;
    pub use crate::comch::{
        doca_comch_connection, doca_comch_event_connection_status_changed, doca_comch_event_consumer,
        doca_comch_event_msg_recv, doca_comch_task_send,
    };
    pub use crate::ctx::doca_ctx;
    pub use crate::dma::doca_dma_task_memcpy;
    pub use crate::rdma::remote::{
        doca_rdma_task_remote_net_sync_event_get, doca_rdma_task_remote_net_sync_event_notify_add,
        doca_rdma_task_remote_net_sync_event_notify_set,
    };
    pub use crate::rdma::{
        doca_rdma_connection, doca_rdma_task_atomic_cmp_swp, doca_rdma_task_atomic_fetch_add, doca_rdma_task_read,
        doca_rdma_task_receive, doca_rdma_task_send, doca_rdma_task_send_imm, doca_rdma_task_write,
        doca_rdma_task_write_imm,
    };
    pub use crate::sync_event::{
        doca_sync_event_task_get, doca_sync_event_task_notify_add, doca_sync_event_task_notify_set,
        doca_sync_event_task_wait_eq, doca_sync_event_task_wait_neq,
    };
    pub use crate::task::doca_task;
    pub use crate::urom::host::{
        doca_urom_domain, doca_urom_service, doca_urom_service_get_workers_by_gid_task, doca_urom_worker,
        doca_urom_worker_cmd_task,
    };
}

pub mod argp;
pub mod blob;
pub mod buf;
pub mod comch;
pub mod ctx;
pub mod dev;
pub mod dev_more;
pub mod dma;
pub mod doorbell;
pub mod errors;
mod eventfd;
mod ffi;
pub mod log;
pub mod mmap;
pub mod pe;
pub mod rdma;
pub mod rep;
mod retry_pace;
pub mod shm;
pub mod sync_event;
pub mod task;
#[cfg(test)]
mod testkit;
mod thread_mark;
pub mod urom;
pub mod version;
