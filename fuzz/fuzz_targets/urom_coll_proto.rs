//! The `worker_coll` command and notification formats (bytes the collectives plugin gets from
//! any host, and a host gets from a worker): never a panic; whatever decodes re-encodes to the
//! same bytes.
#![no_main]

use doca_urom_coll::proto::{Cmd, Notif};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(c) = Cmd::decode(data) {
        assert_eq!(c.encode(), data, "Cmd: not canonical");
    }
    if let Ok(n) = Notif::decode(data) {
        assert_eq!(n.encode(), data, "Notif: not canonical");
    }
});
