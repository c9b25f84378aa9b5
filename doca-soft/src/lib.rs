//! The software DOCA provider: the DOCA 3.x C ABI implemented in Rust.
//!
//! Every `#[no_mangle] extern "C"` function here has the exact signature that `doca-sys`
//! declares, so code written against DOCA runs unchanged on a machine without a DPU.
#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)] // C entry points: the contract is DOCA's, documented in docs/

/// The ABI's value types, shared with `doca-sys` (same source file).
pub mod types {
    pub use crate::objects::*;
    include!("../../doca-sys/src/types.rs");
}

/// The concrete object types the callback types name.
mod objects {
    pub use crate::ctx::doca_ctx;
    pub use crate::task::doca_task;
    pub use crate::sync_event::{
        doca_sync_event_task_get, doca_sync_event_task_notify_add, doca_sync_event_task_notify_set,
        doca_sync_event_task_wait_eq, doca_sync_event_task_wait_neq,
    };
}

mod ffi;
