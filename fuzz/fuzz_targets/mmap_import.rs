//! `doca_mmap_create_from_export` on arbitrary bytes. Whatever it accepts is checked and
//! destroyed again, so nothing outlives an iteration.
#![no_main]

use doca_soft_fuzz::{check_fd_leaks, mmap_import};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    mmap_import(data, "mmap import");
    check_fd_leaks();
});
