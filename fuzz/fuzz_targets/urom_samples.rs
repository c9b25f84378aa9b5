//! The command and notification formats of the sample plugins (bytes a worker plugin gets from
//! any host, and a host gets from a worker): never a panic; whatever decodes re-encodes to the
//! same bytes.
#![no_main]

use doca_urom_plugin::samples::{graph, sandbox};
use libfuzzer_sys::fuzz_target;

macro_rules! check {
    ($t:ty, $data:expr) => {
        if let Ok(m) = <$t>::decode($data) {
            assert_eq!(m.encode(), $data, concat!(stringify!($t), ": not canonical"));
        }
    };
}

fuzz_target!(|data: &[u8]| {
    check!(graph::Cmd, data);
    check!(graph::Notif, data);
    check!(sandbox::Cmd, data);
    check!(sandbox::Notif, data);
});
