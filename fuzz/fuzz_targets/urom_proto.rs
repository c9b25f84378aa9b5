//! Every UROM wire message decoder of the soft provider (host ↔ daemon, host ↔ worker,
//! daemon ↔ worker) on arbitrary bytes: never a panic, only INVALID_VALUE, and whatever decodes
//! re-encodes to exactly the same bytes (the format has one encoding per message).
#![no_main]

use doca_soft::types::DOCA_ERROR_INVALID_VALUE;
use doca_soft::urom::proto::{DaemonToWorker, HostToWorker, Reply, Request, WorkerToDaemon, WorkerToHost};
use libfuzzer_sys::fuzz_target;

macro_rules! check {
    ($t:ty, $data:expr) => {
        match <$t>::decode($data) {
            Ok(m) => assert_eq!(m.encode(), $data, concat!(stringify!($t), ": not canonical")),
            Err(e) => assert_eq!(e, DOCA_ERROR_INVALID_VALUE),
        }
    };
}

fuzz_target!(|data: &[u8]| {
    check!(Request, data);
    check!(Reply, data);
    check!(HostToWorker, data);
    check!(WorkerToHost, data);
    check!(DaemonToWorker, data);
    check!(WorkerToDaemon, data);
});
