//! The command and notification formats of the sample plugins (bytes a worker plugin gets from
//! any host, and a host gets from a worker): never a panic. `worker_graph`'s messages have no
//! free bytes, so whatever decodes re-encodes to the same bytes; `worker_sandbox`'s are
//! NVIDIA's C structs, whose padding and ignored fields (an inline message's buffer address,
//! the map parameters) may hold anything, so there re-encoding must decode to the same value.
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

macro_rules! check_value {
    ($t:ty, $data:expr) => {
        if let Ok(m) = <$t>::decode($data) {
            assert_eq!(<$t>::decode(&m.encode()).as_ref(), Ok(&m), concat!(stringify!($t), ": not stable"));
        }
    };
}

fuzz_target!(|data: &[u8]| {
    check!(graph::Cmd, data);
    check!(graph::Notif, data);
    check_value!(sandbox::Cmd, data);
    check_value!(sandbox::Notif, data);
});
