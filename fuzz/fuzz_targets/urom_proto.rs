//! Every UROM wire message decoder of the soft provider (host ↔ daemon, host ↔ worker,
//! daemon ↔ worker) on arbitrary bytes: never a panic, only INVALID_VALUE, and whatever decodes
//! re-encodes to exactly the same bytes (the format has one encoding per message). The
//! in-place decoders of the per-operation messages (`decode_command`, `decode_notify`) agree
//! with the owned ones on every input.
#![no_main]

use doca_soft::types::DOCA_ERROR_INVALID_VALUE;
use doca_soft::urom::proto::{
    CommandRef, DaemonToWorker, HostToWorker, NotifyRef, Reply, Request, WorkerToDaemon, WorkerToHost,
};
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
    match (HostToWorker::decode_command(data), HostToWorker::decode(data)) {
        (
            Ok(Some(CommandRef { ctx, plugin, payload })),
            Ok(HostToWorker::Command { ctx: c, plugin: p, payload: v }),
        ) => {
            assert_eq!((ctx, plugin, payload), (c, p, &v[..]))
        }
        (Ok(None), Ok(m)) => assert!(!matches!(m, HostToWorker::Command { .. }), "a command not seen in place"),
        (Ok(None), Err(_)) | (Err(_), Err(_)) => {}
        (a, b) => panic!("in place {a:?}, owned {b:?}"),
    }
    match (WorkerToHost::decode_notify(data), WorkerToHost::decode(data)) {
        (
            Ok(NotifyRef { ctx, plugin, status, packed }),
            Ok(WorkerToHost::Notify { ctx: c, plugin: p, status: s, packed: v }),
        ) => {
            assert_eq!((ctx, plugin, status, packed), (c, p, s, &v[..]))
        }
        (Err(a), Err(b)) => assert_eq!(a, b),
        (a, b) => panic!("in place {a:?}, owned {b:?}"),
    }
});
