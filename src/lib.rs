//! async-doca: NVIDIA DOCA tasks as futures.
//!
//! One executor thread per CPU, pinned, drives that CPU's DOCA progress engine and its
//! notification fd; every DOCA task it submits (an RDMA operation, a sync-event wait; UROM
//! commands next) resolves a future. The crate talks to DOCA only through [`sys`]
//! (`doca-sys`), whose default provider is a software implementation of the DOCA C ABI,
//! so the same code runs on a laptop, in CI, and on a BlueField host.
//!
//! ```
//! use async_doca::sync_event::SyncEvent;
//! use async_doca::{Device, Runtime};
//!
//! let rt = Runtime::builder().cpus("0".parse()?).build()?;
//! let seen = rt.block_on(async {
//!     let dev = Device::open_default()?;
//!     let ev = SyncEvent::builder(&dev).build().await?;
//!     // A second handle on the same counter, as another process or the DPU would open it.
//!     let peer = SyncEvent::open(&dev, &ev.export()?).await?;
//!     let waiter = async_doca::spawn_local(async move { peer.wait_gt(0).await });
//!     ev.add(1).await?;
//!     waiter.await?
//! })?;
//! assert_eq!(seen, 1);
//! # Ok::<(), async_doca::Error>(())
//! ```
//!
//! Where to start: [`Runtime`] (executors, spawning, `block_on`), [`rdma`] (connections and
//! the eight RDMA operations on owned buffers of registered [`Memory`]),
//! [`sync_event::SyncEvent`], [`Error`] (every failure keeps its DOCA code), and `docs/ARCHITECTURE.md` for the model:
//! which thread owns what, how a DOCA callback becomes a wake-up, what happens on drop.
//! To wrap a DOCA library this crate does not cover, see [`ext`] (unstable).
//!
//! Observability: with the feature `tracing` (on by default) every DOCA operation is a
//! `TRACE` span and the runtime's own decisions are events; install any `tracing`
//! subscriber to see them. [`trace`] lists what is traced at which level.
pub use doca_sys as sys;

mod addr_map;
pub mod coll;
pub mod comch;
mod cpuset;
pub mod device;
pub mod dma;
pub mod drom;
pub mod error;
pub mod executor;
pub mod ext;
pub mod lanes;
pub mod mem;
pub mod oob;
pub mod rdma;
pub mod sync_event;
#[cfg(test)]
pub(crate) mod testkit;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod trace;
pub mod urom;

pub use cpuset::CpuSet;
pub use device::{Device, DeviceInfo, Representor, RepresentorInfo};
pub use error::{DocaCode, Error, ErrorKind, Result};
pub use executor::{spawn, spawn_local, time, Builder, Handle, IdleMode, JoinHandle, Runtime};
pub use mem::{Access, Buf, Memory, RemoteMemory, RemoteSlice};
