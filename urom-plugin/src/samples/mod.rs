//! The command and notification formats of the two sample plugins, shared by the plugins
//! (`plugins/worker_graph`, `plugins/worker_sandbox`) and the host programs that drive them.
//!
//! Both speak the formats of NVIDIA's samples of the same names: C structs (a `u64` type, then
//! a union of per-type structs) in native byte order, which is little-endian on every platform
//! DOCA runs on, so NVIDIA's host code drives these plugins and this crate's host code drives
//! NVIDIA's. Decoding is strict: a short message, trailing bytes, an unknown type or a length
//! that disagrees with the message is a [`DecodeError`], which a plugin answers with
//! `DOCA_ERROR_INVALID_VALUE` (`From<DecodeError> for Status`) and an empty body.

pub mod graph;
pub mod sandbox;

/// A message that does not decode exactly (the SDK's [`wire`](crate::wire) codec is shared
/// by every plugin format).
pub use crate::wire::DecodeError;
pub(crate) use crate::wire::{Reader, Writer};
