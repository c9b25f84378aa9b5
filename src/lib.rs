//! placeholder
pub use doca_sys as sys;
