//! Structure-aware `doca_rdma_connect`: the input is an edit program (see
//! `doca_soft_fuzz::edit`) applied to one of the two valid connection blobs of the running
//! ctx (the connecting connection's own blob, for a loopback, and the other connection's),
//! with the checksum recomputed unless the program says otherwise. The unedited blob must
//! connect; a connect that succeeds is torn down with its ctx, which is rebuilt with fresh
//! exports (the blobs kept in the `OnceLock` are replaced then).
#![no_main]

use std::sync::{Mutex, OnceLock};

use doca_soft_fuzz::{check_fd_leaks, edit, RdmaSide};
use libfuzzer_sys::fuzz_target;

static SIDE: OnceLock<Mutex<RdmaSide>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let mut side = SIDE.get_or_init(|| Mutex::new(RdmaSide::new())).lock().unwrap();
    let refs: Vec<&[u8]> = side.blobs.iter().map(Vec::as_slice).collect();
    let (which, blob) = edit(&refs, data);
    let base_unchanged = blob == side.blobs[which];
    let connected = side.connect(&blob, "rdma connect (edited blob)");
    if base_unchanged {
        assert!(connected, "a valid, unclaimed connection blob did not connect");
    }
    check_fd_leaks();
});
