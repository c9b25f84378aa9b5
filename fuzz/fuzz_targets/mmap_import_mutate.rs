//! Structure-aware `doca_mmap_create_from_export`: the input is an edit program (see
//! `doca_soft_fuzz::edit`) applied to one of four valid exports of live mmaps made once in
//! this process — shared-memory and process_vm transports, each as an RDMA and a PCI export —
//! with the checksum recomputed unless the program says otherwise. The unedited blob must
//! import; every import that succeeds is destroyed again.
#![no_main]

use std::ptr;
use std::sync::OnceLock;

use doca_soft::mmap::*;
use doca_soft::types::*;
use doca_soft_fuzz::{check_fd_leaks, device, edit, mmap_import, ok, Ptr};
use libfuzzer_sys::fuzz_target;

const LEN: usize = 2 * 4096;

/// The live objects that own the exports, and the exports.
type Exports = (Vec<Ptr<doca_mmap>>, Vec<Vec<u8>>);

/// The valid exports (owned by mmaps that live for the whole run).
fn bases() -> &'static [Vec<u8>] {
    static BASES: OnceLock<Exports> = OnceLock::new();
    &BASES
        .get_or_init(|| {
            let dev = device();
            let perms = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
                | DOCA_ACCESS_FLAG_RDMA_READ
                | DOCA_ACCESS_FLAG_RDMA_WRITE
                | DOCA_ACCESS_FLAG_RDMA_ATOMIC
                | DOCA_ACCESS_FLAG_PCI_READ_WRITE;
            let mut shared = ptr::null_mut();
            // SAFETY: valid out-pointer; the allocation is never freed.
            ok(unsafe { doca_soft_alloc_shared(LEN, &mut shared) }, "doca_soft_alloc_shared");
            let private = Box::leak(vec![0u8; LEN].into_boxed_slice()).as_mut_ptr();
            let mut mmaps = Vec::new();
            let mut blobs = Vec::new();
            for mem in [shared.cast::<u8>(), private] {
                let mut m = ptr::null_mut();
                // SAFETY: valid out-pointers; `mem` is LEN bytes that live for the whole run.
                unsafe {
                    ok(doca_mmap_create(&mut m), "doca_mmap_create");
                    ok(doca_mmap_set_memrange(m, mem.cast(), LEN), "doca_mmap_set_memrange");
                    ok(doca_mmap_set_permissions(m, perms), "doca_mmap_set_permissions");
                    ok(doca_mmap_add_dev(m, dev), "doca_mmap_add_dev");
                    ok(doca_mmap_start(m), "doca_mmap_start");
                }
                for export in [doca_mmap_export_rdma, doca_mmap_export_pci] {
                    let (mut p, mut n) = (ptr::null(), 0usize);
                    // SAFETY: valid out-pointers; the blob is owned by the live mmap.
                    unsafe {
                        ok(export(m, dev, &mut p, &mut n), "doca_mmap_export");
                        blobs.push(std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec());
                    }
                }
                mmaps.push(Ptr(m));
            }
            (mmaps, blobs)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let bases = bases();
    let refs: Vec<&[u8]> = bases.iter().map(Vec::as_slice).collect();
    let (which, blob) = edit(&refs, data);
    let imported = mmap_import(&blob, "mmap import (edited export)");
    if blob == bases[which] {
        assert!(imported, "a valid export of a live mmap did not import");
    }
    check_fd_leaks();
});
