//! Registered memory for tests: a started local mmap in one call.

use core::ptr;

use crate::dev::doca_dev;
use crate::mmap::*;
use crate::types::*;

/// A started mmap over `[p, p+len)` with `perms` and `dev` added.
pub(crate) fn local_mmap(p: *mut u8, len: usize, perms: u32, dev: *mut doca_dev) -> *mut doca_mmap {
    let mut m = ptr::null_mut();
    // SAFETY: valid out-pointer; the memory stays alive for the test's duration.
    unsafe {
        assert_eq!(doca_mmap_create(&mut m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_set_memrange(m, p.cast(), len), DOCA_SUCCESS);
        assert_eq!(doca_mmap_set_permissions(m, perms), DOCA_SUCCESS);
        assert_eq!(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
        assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
    }
    m
}
