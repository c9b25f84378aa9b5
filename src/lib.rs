//! async-doca: NVIDIA DOCA tasks as futures.
pub use doca_sys as sys;

pub mod device;
pub mod error;
pub mod executor;
pub mod sync_event;

pub use device::{Device, DeviceInfo};
pub use error::{DocaCode, Error, ErrorKind, Result};
pub use executor::{spawn, spawn_local, time, Builder, CpuSet, Handle, IdleMode, JoinHandle, Runtime};
