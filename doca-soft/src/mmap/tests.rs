//! Unit tests of the mmap: lifecycle and validation, export/import on both paths, key
//! revocation, remote access and atomics, and blobs from a child process.

use super::alloc::{page_size, SEG_NSLOTS};
use super::*;
use crate::blob::{BlobKind, BlobReader, BlobWriter};
use crate::dev::doca_dev_close;
use crate::testkit::dev::test_open_default;
use crate::testkit::mem::local_mmap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::ptr;
use std::time::{Duration, Instant};

const ALL_REMOTE: u32 = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE
    | DOCA_ACCESS_FLAG_RDMA_READ
    | DOCA_ACCESS_FLAG_RDMA_WRITE
    | DOCA_ACCESS_FLAG_RDMA_ATOMIC;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

fn export_rdma(m: *mut doca_mmap, dev: *mut doca_dev) -> Vec<u8> {
    let mut p = ptr::null();
    let mut n = 0usize;
    // SAFETY: valid out-pointers; the blob is copied while the mmap lives.
    unsafe {
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
        std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
    }
}

fn import(blob: &[u8], dev: *mut doca_dev) -> Result<*mut doca_mmap, doca_error_t> {
    let mut m = ptr::null_mut();
    let ud = doca_data::from_u64(7);
    // SAFETY: `blob` is readable for its length; valid out-pointer.
    let r = unsafe { doca_mmap_create_from_export(&ud, blob.as_ptr().cast(), blob.len(), dev, &mut m) };
    if r == DOCA_SUCCESS {
        Ok(m)
    } else {
        Err(r)
    }
}

fn region(m: *mut doca_mmap) -> RemoteRegion {
    // SAFETY: `m` is a live mmap of this provider.
    unsafe { mmap_ref(m) }.unwrap().remote_region().unwrap()
}

fn destroy(m: *mut doca_mmap) {
    // SAFETY: `m` is a live mmap.
    assert_eq!(unsafe { doca_mmap_destroy(m) }, DOCA_SUCCESS);
}

#[test]
fn lifecycle_and_validation() {
    let dev = crate::dev::test_open_private("mmap-lifecycle"); // IN_USE below needs the last open
    let mut mem = vec![0u8; 4096];
    let mut m = ptr::null_mut();
    let mut p = ptr::null();
    let mut n = 0usize;
    let mut a = ptr::null_mut();
    let mut l = 0usize;
    // SAFETY: every pointer is valid or deliberately NULL/foreign; `mem` outlives the mmap.
    unsafe {
        assert_eq!(doca_mmap_create(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_create(&mut m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_get_memrange(m, &mut a, &mut l), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_start(m), DOCA_ERROR_BAD_STATE); // no memrange
        assert_eq!(doca_mmap_set_memrange(m, ptr::null_mut(), 16), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_set_memrange(ptr::null_mut(), mem.as_mut_ptr().cast(), 16), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_set_memrange(m, usize::MAX as *mut c_void, 2), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), mem.len()), DOCA_SUCCESS);
        assert_eq!(doca_mmap_set_permissions(m, 0x80), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_set_permissions(m, 1 << 31), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_set_permissions(m, ACCESS_MASK_ALL), DOCA_SUCCESS);
        assert_eq!(doca_mmap_set_permissions(m, ALL_REMOTE), DOCA_SUCCESS);
        assert_eq!(doca_mmap_add_dev(m, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_add_dev(m, 0x1000 as *mut doca_dev), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_ERROR_BAD_STATE); // not started
        assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_start(m), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_set_memrange(m, mem.as_mut_ptr().cast(), 16), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_set_permissions(m, 1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_add_dev(m, dev), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_get_memrange(m, &mut a, &mut l), DOCA_SUCCESS);
        assert_eq!((a as usize, l), (mem.as_ptr() as usize, 4096));
        assert_eq!(doca_mmap_get_memrange(m, ptr::null_mut(), &mut l), DOCA_ERROR_INVALID_VALUE);
        // Export needs the device added.
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_export_rdma(m, ptr::null(), &mut p, &mut n), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_stop(m), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_add_dev(m, dev), DOCA_SUCCESS);
        assert_eq!(doca_mmap_add_dev(m, dev), DOCA_SUCCESS); // idempotent
        assert_eq!(doca_dev_close(dev), DOCA_ERROR_IN_USE); // the mmap references it
        assert_eq!(doca_mmap_start(m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
        let (p1, n1) = (p, n);
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
        assert_eq!((p, n), (p1, n1), "same blob while the export lives");
        assert_eq!(doca_mmap_export_pci(m, dev, &mut p, &mut n), DOCA_SUCCESS);
        assert_ne!(p, p1);
        // Outstanding buffers block stop and destroy.
        let mr = mmap_ref(m).unwrap();
        assert_eq!(mr.buf_acquire(mem.as_ptr() as usize + 4000, 97).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        mr.buf_acquire(mem.as_ptr() as usize, 16).unwrap();
        assert_eq!(doca_mmap_stop(m), DOCA_ERROR_IN_USE);
        assert_eq!(doca_mmap_destroy(m), DOCA_ERROR_IN_USE);
        mr.buf_release();
        // Blobs from before a stop stay readable until destroy.
        assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS);
        assert!(BlobReader::new(std::slice::from_raw_parts(p1.cast::<u8>(), n1), BlobKind::Mmap).is_ok());
        assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_destroy(m), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

#[test]
fn shared_alloc_registry() {
    let p = alloc_shared(100).unwrap();
    assert_eq!(p as usize % page_size(), 0);
    assert!(is_shared(p, 100));
    assert!(is_shared(p, page_size())); // rounded up to a page
    assert!(!is_shared(p, page_size() + 1));
    // SAFETY: p is 100+ writable bytes.
    unsafe { *p.add(99) = 1 };
    assert_eq!(alloc_shared(0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    let mut q = ptr::null_mut();
    // SAFETY: valid out-pointer; then frees of a live, a foreign and a freed pointer.
    unsafe {
        assert_eq!(doca_soft_alloc_shared(10, &mut q), DOCA_SUCCESS);
        assert_eq!(doca_soft_alloc_shared(10, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_soft_free_shared(q), DOCA_SUCCESS);
        assert_eq!(doca_soft_free_shared(q), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_soft_free_shared(p.add(1).cast()), DOCA_ERROR_INVALID_VALUE);
    }
    free_shared(p).unwrap();
    assert!(!is_shared(p, 1));
}

/// Exercises an imported region against the local memory it maps.
fn check_region(r: &RemoteRegion, local: *mut u8, len: usize, atomics: bool) {
    // SAFETY: `local` is `len` bytes of live memory in this process, written only here.
    let mem = unsafe { std::slice::from_raw_parts_mut(local, len) };
    mem[..4].copy_from_slice(b"abcd");
    let mut b = [0u8; 4];
    r.read(0, &mut b).unwrap();
    assert_eq!(&b, b"abcd");
    r.write(8, b"wxyz").unwrap();
    assert_eq!(&mem[8..12], b"wxyz");
    r.read(len - 4, &mut b).unwrap();
    assert_eq!(r.read(len - 3, &mut b).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(r.write(usize::MAX, b"x").unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(r.offset_of(r.addr() + 16, 8).unwrap(), 16);
    assert_eq!(r.offset_of(r.addr() - 1, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(r.offset_of(r.addr() + len as u64, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    if atomics {
        mem[16..24].copy_from_slice(&5u64.to_ne_bytes());
        assert_eq!(r.atomic_fetch_add(16, 3).unwrap(), 5);
        assert_eq!(r.atomic_cas(16, 8, 100).unwrap(), 8);
        assert_eq!(r.atomic_cas(16, 8, 200).unwrap(), 100);
        assert_eq!(u64::from_ne_bytes(mem[16..24].try_into().unwrap()), 100);
        assert_eq!(r.atomic_fetch_add(17, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(r.atomic_fetch_add(len - 4, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    } else {
        assert_eq!(r.atomic_fetch_add(16, 1).unwrap_err(), DOCA_ERROR_NOT_SUPPORTED);
    }
    assert!(r.owner_alive());
}

#[test]
fn import_in_process_both_paths() {
    let dev = test_open_default();
    // Shared-memory path.
    let len = 8192;
    let sp = alloc_shared(len).unwrap();
    let m1 = local_mmap(sp, len, ALL_REMOTE, dev);
    let blob1 = export_rdma(m1, dev);
    let i1 = import(&blob1, dev).unwrap();
    let r1 = region(i1);
    assert!(r1.is_shared_memory());
    assert_eq!(r1.addr(), sp as u64);
    check_region(&r1, sp, len, true);
    // The imported mmap reports the owner's range.
    let (mut a, mut l) = (ptr::null_mut(), 0usize);
    // SAFETY: live mmap, valid out-pointers.
    unsafe { assert_eq!(doca_mmap_get_memrange(i1, &mut a, &mut l), DOCA_SUCCESS) };
    assert_eq!((a as usize, l), (sp as usize, len));
    // SAFETY: live imported mmap: configuration and re-export are refused.
    unsafe {
        assert_eq!(doca_mmap_set_permissions(i1, 1), DOCA_ERROR_BAD_STATE);
        let (mut p, mut n) = (ptr::null(), 0usize);
        assert_eq!(doca_mmap_export_rdma(i1, dev, &mut p, &mut n), DOCA_ERROR_NOT_SUPPORTED);
    }

    // process_vm path over ordinary heap memory.
    let mut heap = vec![0u8; 4096];
    let hp = heap.as_mut_ptr();
    let m2 = local_mmap(hp, heap.len(), ALL_REMOTE, dev);
    let blob2 = export_rdma(m2, dev);
    let i2 = import(&blob2, dev).unwrap();
    let r2 = region(i2);
    assert!(!r2.is_shared_memory());
    check_region(&r2, hp, 4096, false);

    // A sub-range of a shared allocation also takes the shared path.
    // SAFETY: inside the allocation.
    let m3 = local_mmap(unsafe { sp.add(4096) }, 64, DOCA_ACCESS_FLAG_RDMA_READ, dev);
    let i3 = import(&export_rdma(m3, dev), dev).unwrap();
    let r3 = region(i3);
    assert!(r3.is_shared_memory());
    let mut b = [0u8; 8];
    r3.read(0, &mut b).unwrap();
    // Read-only export: writes and atomics refused.
    assert_eq!(r3.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r3.atomic_fetch_add(0, 1).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);

    // Revocation: stopping (then destroying) the exporter invalidates the key.
    // SAFETY: live local mmaps without buffers.
    unsafe {
        assert_eq!(doca_mmap_stop(m1), DOCA_SUCCESS);
        assert_eq!(doca_mmap_destroy(m2), DOCA_SUCCESS);
    }
    assert_eq!(r1.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r1.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r1.atomic_fetch_add(16, 1).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r2.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r2.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    // Importing a revoked export fails cleanly.
    assert_eq!(import(&blob1, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    assert_eq!(import(&blob2, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    // Restarting gives a new key; the old blob stays dead, the new one works.
    // SAFETY: live stopped mmap.
    unsafe { assert_eq!(doca_mmap_start(m1), DOCA_SUCCESS) };
    let blob1b = export_rdma(m1, dev);
    assert_ne!(blob1, blob1b);
    assert_eq!(r1.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    let i1b = import(&blob1b, dev).unwrap();
    region(i1b).read(0, &mut b).unwrap();

    // The region outlives its imported mmap.
    // Stopping an imported mmap succeeds (NVIDIA's samples rely on it), once; it cannot
    // be started again, and destroy still works.
    // SAFETY: live imported mmap without buffers.
    unsafe {
        assert_eq!(doca_mmap_stop(i1), DOCA_SUCCESS);
        assert_eq!(doca_mmap_stop(i1), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_mmap_start(i1), DOCA_ERROR_BAD_STATE);
    }
    destroy(i1);
    destroy(i1b);
    destroy(i2);
    assert_eq!(r3.len(), 64);
    destroy(i3);
    r3.read(0, &mut b).unwrap();
    destroy(m3);
    assert_eq!(r3.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    destroy(m1);
    free_shared(sp).unwrap();
    drop((r1, r2, r3));
    // SAFETY: no mmap references the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}

/// Memory unmapped under a live process_vm export: IO_FAILED; once revoked: NOT_PERMITTED.
#[test]
fn pvm_unmapped_memory() {
    let dev = test_open_default();
    let len = page_size();
    // SAFETY: a fresh private anonymous mapping, unmapped at the end of the test.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    let m = local_mmap(p.cast(), len, ALL_REMOTE, dev);
    let i = import(&export_rdma(m, dev), dev).unwrap();
    let r = region(i);
    let mut b = [0u8; 8];
    r.read(0, &mut b).unwrap();
    // Made inaccessible rather than unmapped, so a parallel test cannot get the same
    // address from the kernel meanwhile.
    // SAFETY: changes the protection of our own mapping, which nothing dereferences
    // until it is unmapped at the end of the test.
    assert_eq!(unsafe { libc::mprotect(p, len, libc::PROT_NONE) }, 0);
    assert_eq!(r.read(0, &mut b).unwrap_err(), DOCA_ERROR_IO_FAILED);
    assert_eq!(r.write(0, &b).unwrap_err(), DOCA_ERROR_IO_FAILED);
    destroy(m);
    assert_eq!(r.read(0, &mut b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r.write(0, &b).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    destroy(i);
    drop(r);
    // SAFETY: the mapping made above, unmapped once, no longer referenced.
    assert_eq!(unsafe { libc::munmap(p, len) }, 0);
    // SAFETY: no mmap references the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}

#[test]
fn pci_export_permissions() {
    let dev = test_open_default();
    let sp = alloc_shared(4096).unwrap();
    let m = local_mmap(sp, 4096, DOCA_ACCESS_FLAG_PCI_READ_ONLY | DOCA_ACCESS_FLAG_RDMA_WRITE, dev);
    let (mut p, mut n) = (ptr::null(), 0usize);
    // SAFETY: live mmap, valid out-pointers; the blob is copied while it lives.
    let blob = unsafe {
        assert_eq!(doca_mmap_export_pci(m, dev, &mut p, &mut n), DOCA_SUCCESS);
        std::slice::from_raw_parts(p.cast::<u8>(), n).to_vec()
    };
    let i = import(&blob, dev).unwrap();
    let r = region(i);
    let mut b = [0u8; 4];
    r.read(0, &mut b).unwrap();
    // RDMA_WRITE does not grant PCI writes.
    assert_eq!(r.write(0, b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    assert_eq!(r.atomic_cas(0, 0, 1).unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    destroy(i);
    destroy(m);
    free_shared(sp).unwrap();
    // SAFETY: no mmap references the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}

#[test]
fn bad_blobs_are_invalid_value() {
    let dev = test_open_default();
    let sp = alloc_shared(4096).unwrap();
    let m = local_mmap(sp, 4096, ALL_REMOTE, dev);
    let mut heap = vec![0u8; 256];
    let m2 = local_mmap(heap.as_mut_ptr(), 256, ALL_REMOTE, dev);
    for blob in [export_rdma(m, dev), export_rdma(m2, dev)] {
        // Every truncation.
        for n in 0..blob.len() {
            assert_eq!(ExportDesc::decode(&blob[..n]).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "len {n}");
            if n > 0 {
                assert_eq!(import(&blob[..n], dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "len {n}");
            }
        }
        // Every flipped byte.
        for i in 0..blob.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut c = blob.clone();
                c[i] ^= mask;
                let e = import(&c, dev).unwrap_err();
                let version_byte = i == 4 || i == 5;
                assert!(
                    e == DOCA_ERROR_INVALID_VALUE || (version_byte && e == DOCA_ERROR_UNSUPPORTED_VERSION),
                    "byte {i} mask {mask:#x}: {e:?}"
                );
            }
        }
        // NULL and empty.
        let mut out_m = ptr::null_mut();
        // SAFETY: deliberately NULL / zero-length inputs.
        unsafe {
            assert_eq!(
                doca_mmap_create_from_export(ptr::null(), ptr::null(), 10, dev, &mut out_m),
                DOCA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), 0, dev, &mut out_m),
                DOCA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                doca_mmap_create_from_export(
                    ptr::null(),
                    blob.as_ptr().cast(),
                    blob.len(),
                    ptr::null_mut(),
                    &mut out_m
                ),
                DOCA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), blob.len(), dev, ptr::null_mut()),
                DOCA_ERROR_INVALID_VALUE
            );
            // NULL user_data is allowed.
            assert_eq!(
                doca_mmap_create_from_export(ptr::null(), blob.as_ptr().cast(), blob.len(), dev, &mut out_m),
                DOCA_SUCCESS
            );
            destroy(out_m);
        }
        // Well-framed blobs with bad fields.
        let good = ExportDesc::decode(&blob).unwrap();
        let mut bad_fields: Vec<ExportDesc> = Vec::new();
        let mut d = good.clone();
        d.pid = 0;
        bad_fields.push(d);
        let mut d = good.clone();
        d.pid = u32::MAX;
        bad_fields.push(d);
        let mut d = good.clone();
        d.len = 0;
        bad_fields.push(d);
        let mut d = good.clone();
        d.addr = u64::MAX - 2;
        bad_fields.push(d);
        let mut d = good.clone();
        d.addr = 0;
        bad_fields.push(d);
        let mut d = good.clone();
        d.perms = 0x100;
        bad_fields.push(d);
        let mut d = good.clone();
        d.key = 0;
        bad_fields.push(d);
        match good.transport {
            Transport::Shm { fd, seg_len, offset, slot } => {
                let mut d = good.clone();
                d.transport = Transport::Shm { fd, seg_len, offset, slot: SEG_NSLOTS };
                bad_fields.push(d);
                let mut d = good.clone();
                d.transport = Transport::Shm { fd, seg_len, offset: 0, slot };
                bad_fields.push(d);
                let mut d = good.clone();
                d.transport = Transport::Shm { fd, seg_len: offset, offset, slot };
                bad_fields.push(d);
                let mut d = good.clone();
                d.len = seg_len;
                bad_fields.push(d);
            }
            Transport::ProcessVm { .. } => {
                let mut d = good.clone();
                d.transport = Transport::ProcessVm { key_cell: 0 };
                bad_fields.push(d);
                let mut d = good.clone();
                d.transport = Transport::ProcessVm { key_cell: 12 };
                bad_fields.push(d);
            }
        }
        for d in bad_fields {
            assert_eq!(import(&d.encode(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE, "{d:?}");
        }
        // Unknown export type / transport tags.
        let mut w = BlobWriter::new(BlobKind::Mmap);
        w.u8(3).u8(1);
        assert_eq!(import(&w.finish(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        let mut w = BlobWriter::new(BlobKind::Mmap);
        w.u8(1).u8(9).u32(1).u64(1).u64(1).u32(0).u64(1).u64(8);
        assert_eq!(import(&w.finish(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        // Trailing bytes after a complete description.
        let mut raw = ExportDesc::decode(&blob).unwrap().encode();
        let payload_len = u32::from_le_bytes(raw[8..12].try_into().unwrap()) + 1;
        raw.truncate(raw.len() - 8);
        raw.push(0);
        raw[8..12].copy_from_slice(&payload_len.to_le_bytes());
        let sum = crate::blob::fnv1a64(&raw);
        raw.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(import(&raw, dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        // A well-formed blob with a wrong key: the export is not found.
        let mut d = good.clone();
        d.key ^= 1;
        assert_eq!(import(&d.encode(), dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
        // A sync-event blob is not an mmap blob.
        let mut w = BlobWriter::new(BlobKind::SyncEvent);
        w.u64(1);
        assert_eq!(import(&w.finish(), dev).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    }
    // A shared-memory blob pointing at a descriptor that is not our segment.
    let good = ExportDesc::decode(&export_rdma(m, dev)).unwrap();
    if let Transport::Shm { seg_len, offset, slot, .. } = good.transport {
        let mut d = good.clone();
        d.transport = Transport::Shm { fd: 0, seg_len, offset, slot };
        assert!(import(&d.encode(), dev).is_err());
        let mut d = good.clone();
        d.transport = Transport::Shm { fd: 1_000_000, seg_len, offset, slot };
        assert_eq!(import(&d.encode(), dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    }
    destroy(m);
    destroy(m2);
    free_shared(sp).unwrap();
    // SAFETY: no mmap references the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}

// ---- cross-process tests: the test binary re-executes itself as the child ----

const ROLE_ENV: &str = "DOCA_SOFT_TEST_MMAP_ROLE";
const SHM_BLOB_ENV: &str = "DOCA_SOFT_TEST_MMAP_SHM_BLOB";
const PVM_BLOB_ENV: &str = "DOCA_SOFT_TEST_MMAP_PVM_BLOB";

fn test_name(f: &str) -> String {
    let m = module_path!();
    format!("{}::{f}", m.split_once("::").map_or(m, |x| x.1))
}

/// Spawns this test binary running only `test` with `envs`, stdin/stdout piped.
fn spawn_child(test: &str, role: &str, envs: &[(&str, String)]) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", &test_name(test), "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in envs {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Waits for the child, killing it after `limit`.
fn wait_bounded(mut child: Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child timed out after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads one line from the child's stdout with a deadline (a thread does the read).
fn read_line_bounded(child: &mut Child, limit: Duration) -> Option<String> {
    let stdout = child.stdout.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    // The harness may have printed "test name ... " on the same line.
                    if let Some(i) = line.find("BLOB=") {
                        let _ = tx.send(line[i + 5..].trim().to_string());
                        return;
                    }
                }
            }
        }
    });
    rx.recv_timeout(limit).ok()
}

/// Parent exports two regions (shared memory and heap); the child imports both, checks
/// the contents, writes new contents and uses atomics; the parent then checks.
#[test]
fn cross_process_import() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("importer") {
        let dev = test_open_default();
        let i1 = import(&unhex(&std::env::var(SHM_BLOB_ENV).unwrap()), dev).unwrap();
        let i2 = import(&unhex(&std::env::var(PVM_BLOB_ENV).unwrap()), dev).unwrap();
        let (r1, r2) = (region(i1), region(i2));
        assert!(r1.is_shared_memory() && !r2.is_shared_memory());
        assert_ne!(r1.owner_pid(), std::process::id());
        let mut b = [0u8; 16];
        r1.read(0, &mut b).unwrap();
        assert_eq!(&b, b"parent-shm-data!");
        r2.read(0, &mut b).unwrap();
        assert_eq!(&b, b"parent-heap-data");
        r1.write(0, b"child-wrote-shm!").unwrap();
        r2.write(0, b"child-wrote-heap").unwrap();
        assert_eq!(r1.atomic_fetch_add(64, 10).unwrap(), 32);
        assert_eq!(r1.atomic_cas(64, 42, 1000).unwrap(), 42);
        assert_eq!(r2.atomic_fetch_add(64, 1).unwrap_err(), DOCA_ERROR_NOT_SUPPORTED);
        assert_eq!(r1.read(4096, &mut b).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert!(r1.owner_alive() && r2.owner_alive());
        destroy(i1);
        destroy(i2);
        // SAFETY: no mmap references the device any more.
        assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
        println!("CHILD-OK");
        return;
    }
    if std::env::var_os(ROLE_ENV).is_some() {
        return; // another role: not for this test
    }
    let dev = test_open_default();
    let sp = alloc_shared(4096).unwrap();
    // SAFETY: 4096 writable bytes.
    let shm = unsafe { std::slice::from_raw_parts_mut(sp, 4096) };
    shm[..16].copy_from_slice(b"parent-shm-data!");
    shm[64..72].copy_from_slice(&32u64.to_ne_bytes());
    let mut heap = vec![0u8; 128];
    heap[..16].copy_from_slice(b"parent-heap-data");
    let m1 = local_mmap(sp, 4096, ALL_REMOTE, dev);
    let m2 = local_mmap(heap.as_mut_ptr(), heap.len(), ALL_REMOTE, dev);
    let child = spawn_child(
        "cross_process_import",
        "importer",
        &[(SHM_BLOB_ENV, hex(&export_rdma(m1, dev))), (PVM_BLOB_ENV, hex(&export_rdma(m2, dev)))],
    );
    let st = wait_bounded(child, Duration::from_secs(60));
    assert!(st.success(), "child failed: {st:?}");
    assert_eq!(&shm[..16], b"child-wrote-shm!");
    // The child wrote the heap Vec through process_vm_writev.
    assert_eq!(&heap[..16], b"child-wrote-heap");
    assert_eq!(u64::from_ne_bytes(shm[64..72].try_into().unwrap()), 1000);
    destroy(m1);
    destroy(m2);
    free_shared(sp).unwrap();
    // SAFETY: no mmap references the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}

/// A child exports memory and waits; the parent imports it, then kills the child:
/// process_vm accesses fail with CONNECTION_ABORTED, the shared path reports the owner
/// dead, and new imports fail with NOT_FOUND.
#[test]
fn dead_owner() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("exporter") {
        let dev = test_open_default();
        let sp = alloc_shared(4096).unwrap();
        // SAFETY: 4096 writable bytes.
        unsafe { sp.copy_from(b"child-memory".as_ptr(), 12) };
        let m1 = local_mmap(sp, 4096, ALL_REMOTE, dev);
        let heap: &'static mut [u8] = Box::leak(vec![7u8; 64].into_boxed_slice());
        let m2 = local_mmap(heap.as_mut_ptr(), 64, ALL_REMOTE, dev);
        println!("BLOB={},{}", hex(&export_rdma(m1, dev)), hex(&export_rdma(m2, dev)));
        std::io::stdout().flush().unwrap();
        // Wait until the parent kills us (or closes stdin), bounded.
        let mut s = String::new();
        let _ = std::io::stdin().read_line(&mut s);
        std::process::exit(0);
    }
    if std::env::var_os(ROLE_ENV).is_some() {
        return;
    }
    let dev = test_open_default();
    let mut child = spawn_child("dead_owner", "exporter", &[]);
    let line = match read_line_bounded(&mut child, Duration::from_secs(60)) {
        Some(l) => l,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child did not export in time");
        }
    };
    let (b1, b2) = line.split_once(',').unwrap();
    let (b1, b2) = (unhex(b1), unhex(b2));
    let i1 = import(&b1, dev).unwrap();
    let i2 = import(&b2, dev).unwrap();
    let (r1, r2) = (region(i1), region(i2));
    let mut b = [0u8; 12];
    r1.read(0, &mut b).unwrap();
    assert_eq!(&b, b"child-memory");
    r2.read(0, &mut b).unwrap();
    assert_eq!(b, [7u8; 12]);
    assert!(r1.owner_alive() && r2.owner_alive());
    assert!(r1.owner_alive_lately());
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(r2.read(0, &mut b).unwrap_err(), DOCA_ERROR_CONNECTION_ABORTED);
    assert_eq!(r2.write(0, b"x").unwrap_err(), DOCA_ERROR_CONNECTION_ABORTED);
    assert!(!r1.owner_alive() && !r2.owner_alive());
    // The cached answer follows once it is older than the recheck interval (a coarse clock
    // tick is at most 10 ms at HZ=100), and a death once seen stays seen.
    std::thread::sleep(super::liveness::OWNER_RECHECK + Duration::from_millis(15));
    assert!(!r1.owner_alive_lately());
    assert!(!r1.owner_alive_lately());
    // The orphaned segment is still mapped here: reading it is harmless.
    r1.read(0, &mut b).unwrap();
    assert_eq!(import(&b1, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    assert_eq!(import(&b2, dev).unwrap_err(), DOCA_ERROR_NOT_FOUND);
    destroy(i1);
    destroy(i2);
    // SAFETY: no mmap references the device any more.
    assert_eq!(unsafe { doca_dev_close(dev) }, DOCA_SUCCESS);
}
