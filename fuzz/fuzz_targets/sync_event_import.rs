//! `doca_sync_event_create_from_export` on arbitrary bytes. Whatever it accepts is used and
//! destroyed again, so nothing outlives an iteration.
#![no_main]

use doca_soft_fuzz::{check_fd_leaks, sync_event_import};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sync_event_import(data, "sync event import");
    check_fd_leaks();
});
