//! UROM on the soft provider (docs/urom-soft.md): the wire protocol shared by every side, the
//! service daemon with its worker processes, and the host side (`doca-urom`'s C ABI).
//!
//! The daemon (`async-doca urom-service`) is a single-threaded process that accepts host
//! connections on an `AF_UNIX` `SOCK_SEQPACKET` socket and forks one worker process per
//! worker; plugins (`.so` files) run inside the workers. Commands and notifications between a
//! host and its worker travel through a shared-memory channel beside their data connection.

pub(crate) mod channel;
pub mod daemon;
pub mod host;
pub mod proto;
