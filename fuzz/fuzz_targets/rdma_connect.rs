//! `doca_rdma_connect` with arbitrary bytes as the remote connection details, on an exported
//! connection of a running ctx. A connect that succeeds is torn down (ctx stopped, destroyed
//! and rebuilt), so nothing outlives an iteration.
#![no_main]

use std::sync::{Mutex, OnceLock};

use doca_soft_fuzz::{check_fd_leaks, RdmaSide};
use libfuzzer_sys::fuzz_target;

static SIDE: OnceLock<Mutex<RdmaSide>> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let mut side = SIDE.get_or_init(|| Mutex::new(RdmaSide::new())).lock().unwrap();
    side.connect(data, "rdma connect");
    check_fd_leaks();
});
