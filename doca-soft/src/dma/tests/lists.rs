//! Copies between buffer lists: the source's payloads gathered in order, scattered into the
//! room after each destination element's payload in order; mixed local and imported
//! elements; the list-length capability; failures that write nothing.

use super::*;

fn chain(list: &[*mut doca_buf]) -> *mut doca_buf {
    for &b in &list[1..] {
        // SAFETY: buffers of this test, each a first element with a count of 1.
        assert_eq!(unsafe { doca_buf_chain_list(list[0], b) }, DOCA_SUCCESS);
    }
    list[0]
}

fn data_of(b: *mut doca_buf) -> Vec<u8> {
    let (mut p, mut n) = (ptr::null_mut(), 0);
    // SAFETY: a live local buffer; its payload is readable memory of this test.
    unsafe {
        assert_eq!(doca_buf_get_data(b, &mut p), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_data_len(b, &mut n), DOCA_SUCCESS);
        std::slice::from_raw_parts(p as *const u8, n).to_vec()
    }
}

#[test]
fn a_copy_gathers_the_source_list_and_scatters_into_the_destination_list() {
    let rig = Rig::new(8);
    let mut src = b"abc.....defgh...".to_vec();
    let mut dst = vec![0u8; 64];
    dst[..2].copy_from_slice(b"XY");
    dst[8..11].copy_from_slice(b"ZZZ");
    let ms = rig.mmap(&mut src, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let md = rig.mmap(&mut dst, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE);
    let sp = src.as_mut_ptr();
    let dp = dst.as_mut_ptr();
    // Every offset below stays inside the 16- and 64-byte vectors.
    let s = [rig.buf(ms, sp, 3, 3), rig.buf(ms, sp.wrapping_add(3), 5, 0), rig.buf(ms, sp.wrapping_add(8), 5, 5)];
    // Rooms after the payloads: 2, 0 (full), 4, 10.
    let d = [
        rig.buf(md, dp, 4, 2),
        rig.buf(md, dp.wrapping_add(8), 3, 3),
        rig.buf(md, dp.wrapping_add(16), 4, 0),
        rig.buf(md, dp.wrapping_add(32), 10, 0),
    ];
    let (sl, dl) = (chain(&s), chain(&d));
    assert_eq!(rig.memcpy(sl, dl, 1), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(1, DOCA_SUCCESS)]);
    let got: Vec<Vec<u8>> = d.iter().map(|&b| data_of(b)).collect();
    assert_eq!(got, [b"XYab".to_vec(), b"ZZZ".to_vec(), b"cdef".to_vec(), b"gh".to_vec()]);
    assert_eq!(dst[34..42], [0; 8], "nothing past what the source had");
    assert_eq!(data_len(sl), 3, "the source's data sections are untouched");

    // The only room left is the last element's 8 bytes, just what the source holds: made one
    // byte short, the copy fails and writes nothing at all.
    // SAFETY: a live buffer of this test; 3 bytes stay inside its 10.
    unsafe { assert_eq!(doca_buf_set_data_len(d[3], 3), DOCA_SUCCESS) };
    assert_eq!(rig.memcpy(sl, dl, 2), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(2, DOCA_ERROR_INVALID_VALUE)]);
    assert_eq!(data_len(d[3]), 3);
    assert_eq!(dst[34..42], [0; 8], "a refused copy writes nothing");
    rig.restart_after_failure();

    // A list is given back whole through its first element.
    let mut free = 0;
    dec(sl);
    dec(dl);
    // SAFETY: live inventory, valid out-pointer.
    unsafe { assert_eq!(doca_buf_inventory_get_num_free_elements(rig.inv, &mut free), DOCA_SUCCESS) };
    assert_eq!(free, 64);
    destroy_mmap(ms);
    destroy_mmap(md);
    rig.finish();
}

#[test]
fn lists_mix_local_and_imported_elements_and_have_a_length_limit() {
    let rig = Rig::new(8);
    let mut m = rig.host_and_local(4096, DOCA_ACCESS_FLAG_PCI_READ_WRITE, |i| (i % 251) as u8);
    let (hp, lp, ml, remote) = (m.host.as_mut_ptr(), m.local.as_mut_ptr(), m.ml, m.remote);

    // Source: 100 bytes of host memory (imported), then 50 local bytes.
    m.local[3000..3050].fill(0xee);
    // Every offset below stays inside the 4 KiB vectors.
    let src = chain(&[rig.buf(remote, hp, 100, 100), rig.buf(ml, lp.wrapping_add(3000), 50, 50)]);
    // Destination: 60 local bytes, then host memory at 1024 (imported), room 200.
    let dst = chain(&[rig.buf(ml, lp, 60, 0), rig.buf(remote, hp.wrapping_add(1024), 200, 0)]);
    assert_eq!(rig.memcpy(src, dst, 1), DOCA_SUCCESS);
    drain(rig.pe);
    assert_eq!(take_done(), vec![(1, DOCA_SUCCESS)]);
    let want: Vec<u8> = m.host[..100].iter().copied().chain([0xee; 50]).collect();
    assert_eq!(m.local[..60], want[..60]);
    assert_eq!(m.host[1024..1114], want[60..]);
    let mut second = ptr::null_mut();
    // SAFETY: a live list.
    unsafe { assert_eq!(doca_buf_get_next_in_list(dst, &mut second), DOCA_SUCCESS) };
    assert_eq!((data_len(dst), data_len(second)), (60, 90));

    // One element more than the capability: refused at submit, with the reason logged.
    let (mut cap, mut free) = (0u32, 0u32);
    // SAFETY: live objects, valid out-pointers.
    unsafe {
        assert_eq!(doca_dma_cap_task_memcpy_get_max_buf_list_len(doca_dev_as_devinfo(rig.dev), &mut cap), DOCA_SUCCESS);
        assert_eq!(doca_buf_inventory_get_num_free_elements(rig.inv, &mut free), DOCA_SUCCESS);
    }
    assert!(cap >= 2, "NVIDIA's DMA samples need one source and one destination element: {cap}");
    assert!(free > cap, "the rig's inventory holds a list one too long");
    let long: Vec<*mut doca_buf> = (0..=cap as usize).map(|i| rig.buf(ml, lp.wrapping_add(2048 + i), 1, 0)).collect();
    let long = chain(&long);
    let one = rig.buf(ml, lp, 1, 1);
    assert_eq!(rig.memcpy(one, long, 2), DOCA_ERROR_INVALID_VALUE);
    assert_eq!(rig.memcpy(long, one, 3), DOCA_ERROR_INVALID_VALUE);
    assert!(take_done().is_empty());

    for b in [src, dst, long, one] {
        dec(b);
    }
    m.destroy();
    rig.finish();
}
