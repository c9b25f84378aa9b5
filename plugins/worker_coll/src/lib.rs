//! `worker_coll`: the UROM plugin that runs collectives on the workers of a domain. The plugin
//! is [`doca_urom_coll::CollPlugin`] (formats in `doca_urom_coll::proto`); this crate exports
//! it as `libworker_coll.so`, which the UROM service loads from `UROM_PLUGIN_PATH`. Where the
//! other collectives layers live: `docs/collectives.md`.
#![deny(unsafe_code)]

pub use doca_urom_coll::CollPlugin;

doca_urom_plugin::export_plugin!(CollPlugin);
