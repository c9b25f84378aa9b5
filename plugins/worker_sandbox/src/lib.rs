//! `worker_sandbox`: tagged send/receive between the workers of a UROM domain, the offloaded
//! ping-pong. The plugin is [`doca_urom_plugin::samples::sandbox::Sandbox`] (so the soft UROM
//! service can also offer it built in); this crate exports it as `libworker_sandbox.so`.
#![deny(unsafe_code)]

pub use doca_urom_plugin::samples::sandbox::Sandbox;
#[cfg(test)]
use doca_urom_plugin::samples::sandbox::{ucs, Cmd, Notif, MAX_DATA};
#[cfg(test)]
use doca_urom_plugin::Status;

doca_urom_plugin::export_plugin!(Sandbox);

#[cfg(test)]
mod tests;
