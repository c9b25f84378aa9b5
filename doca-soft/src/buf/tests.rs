//! Unit tests of `buf.rs` (moved out of line: longer than the workspace's ~150-line limit for
//! inline test modules).

use super::*;
use crate::dev::doca_dev_close;
use crate::mmap::*;
use crate::testkit::dev::test_open_default;
use crate::testkit::mem::local_mmap;

fn get_buf(
    inv: *mut doca_buf_inventory,
    m: *mut doca_mmap,
    a: usize,
    l: usize,
    d: usize,
    dl: usize,
) -> Result<*mut doca_buf, doca_error_t> {
    let mut b = ptr::null_mut();
    // SAFETY: live objects (or deliberately bad arguments the provider must refuse).
    let r = unsafe { doca_buf_inventory_buf_get_by_args(inv, m, a as *mut c_void, l, d as *mut c_void, dl, &mut b) };
    if r == DOCA_SUCCESS {
        Ok(b)
    } else {
        Err(r)
    }
}

fn free_count(inv: *mut doca_buf_inventory) -> u32 {
    let mut n = 0;
    // SAFETY: live inventory, valid out-pointer.
    let r = unsafe { doca_buf_inventory_get_num_free_elements(inv, &mut n) };
    assert_eq!(r, DOCA_SUCCESS);
    n
}

#[test]
fn inventory_and_buffers() {
    let dev = test_open_default();
    let mut mem = vec![0u8; 1024];
    let base = mem.as_mut_ptr() as usize;
    let m = local_mmap(mem.as_mut_ptr(), 1024, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, dev);
    let mut inv = ptr::null_mut();
    // SAFETY: every call gets live objects or deliberately bad arguments.
    unsafe {
        assert_eq!(doca_buf_inventory_create(0, &mut inv), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_inventory_create(2, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_inventory_create(2, &mut inv), DOCA_SUCCESS);
        assert_eq!(get_buf(inv, m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_BAD_STATE); // not started
        assert_eq!(doca_buf_inventory_stop(inv), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_buf_inventory_start(inv), DOCA_SUCCESS);
        assert_eq!(doca_buf_inventory_start(inv), DOCA_ERROR_BAD_STATE);
        assert_eq!(free_count(inv), 2);

        // Range validation.
        assert_eq!(get_buf(inv, m, base - 1, 16, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(inv, m, base, 1025, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(inv, m, base + 1000, 25, base + 1000, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(inv, m, base, 16, base + 8, 9).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(inv, m, base + 8, 16, base, 1).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(inv, m, usize::MAX, 2, usize::MAX, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(ptr::null_mut(), m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(get_buf(inv, ptr::null_mut(), base, 16, base, 0).unwrap_err(), DOCA_ERROR_INVALID_VALUE);
        let r = doca_buf_inventory_buf_get_by_args(
            inv,
            m,
            base as *mut c_void,
            16,
            base as *mut c_void,
            0,
            ptr::null_mut(),
        );
        assert_eq!(r, DOCA_ERROR_INVALID_VALUE);
        assert_eq!(free_count(inv), 2, "failed gets leak nothing");
        assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 0);

        // by_addr (destination) and by_data (source) equivalents.
        let b1 = get_buf(inv, m, base, 1024, base, 0).unwrap();
        let b2 = get_buf(inv, m, base + 100, 50, base + 100, 50).unwrap();
        assert_eq!(free_count(inv), 0);
        assert_eq!(get_buf(inv, m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_NO_MEMORY);
        assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 2);

        let (mut l, mut h, mut d, mut dl) = (0usize, ptr::null_mut(), ptr::null_mut(), 0usize);
        assert_eq!(doca_buf_get_len(b2, &mut l), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_head(b2, &mut h), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_data(b2, &mut d), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_data_len(b2, &mut dl), DOCA_SUCCESS);
        assert_eq!((l, h as usize, d as usize, dl), (50, base + 100, base + 100, 50));
        assert_eq!(doca_buf_get_len(b2, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_get_len(ptr::null(), &mut l), DOCA_ERROR_INVALID_VALUE);

        // set_data / set_data_len / reset.
        assert_eq!(doca_buf_set_data(b2, (base + 110) as *mut c_void, 40), DOCA_SUCCESS);
        assert_eq!(doca_buf_set_data(b2, (base + 110) as *mut c_void, 41), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_set_data(b2, (base + 99) as *mut c_void, 1), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_set_data(b2, usize::MAX as *mut c_void, 2), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_set_data_len(b2, 40), DOCA_SUCCESS);
        assert_eq!(doca_buf_set_data_len(b2, 41), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_set_data_len(b2, usize::MAX), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_reset_data_len(b2), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_data(b2, &mut d), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_data_len(b2, &mut dl), DOCA_SUCCESS);
        assert_eq!((d as usize, dl), (base + 110, 0), "reset keeps data, zeroes data_len");
        assert_eq!(doca_buf_chain_list(b1, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);

        // Reference counts: the out-value is the count before the call (DOCA 3.x).
        let mut rc = 0u16;
        assert_eq!(doca_buf_inc_refcount(b1, &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 1);
        assert_eq!(doca_buf_inc_refcount(b1, ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!(doca_buf_get_refcount(b1, &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 3);
        assert_eq!(doca_buf_get_refcount(b1, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_dec_refcount(b1, &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 3);
        assert_eq!(doca_buf_dec_refcount(b1, ptr::null_mut()), DOCA_SUCCESS);
        // In use: inventory and mmap refuse to go away.
        assert_eq!(doca_buf_inventory_stop(inv), DOCA_ERROR_IN_USE);
        assert_eq!(doca_buf_inventory_destroy(inv), DOCA_ERROR_IN_USE);
        assert_eq!(doca_mmap_stop(m), DOCA_ERROR_IN_USE);
        assert_eq!(doca_mmap_destroy(m), DOCA_ERROR_IN_USE);
        assert_eq!(doca_buf_dec_refcount(b1, &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 1, "the last reference");
        assert_eq!(free_count(inv), 1);
        // A returned buffer is stale: every call refuses it.
        assert_eq!(doca_buf_dec_refcount(b1, &mut rc), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_buf_inc_refcount(b1, &mut rc), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_buf_get_len(b1, &mut l), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_buf_set_data_len(b1, 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(free_count(inv), 1);
        // Refcount saturation.
        let b3 = get_buf(inv, m, base, 8, base, 8).unwrap();
        (*b3).refcount.set(u16::MAX);
        assert_eq!(doca_buf_inc_refcount(b3, &mut rc), DOCA_ERROR_TOO_BIG);
        (*b3).refcount.set(1);
        assert_eq!(doca_buf_dec_refcount(b3, ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!(doca_buf_dec_refcount(b2, ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!(free_count(inv), 2);
        assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 0);

        // A stopped mmap gives no buffers.
        assert_eq!(doca_mmap_stop(m), DOCA_SUCCESS);
        assert_eq!(get_buf(inv, m, base, 16, base, 0).unwrap_err(), DOCA_ERROR_BAD_STATE);
        assert_eq!(free_count(inv), 2);

        assert_eq!(doca_buf_inventory_stop(inv), DOCA_SUCCESS);
        assert_eq!(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
        assert_eq!(doca_buf_inventory_destroy(inv), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_inventory_destroy(ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}

#[test]
fn crate_accessors_local_and_remote() {
    let dev = test_open_default();
    let sp = alloc_shared(4096).unwrap();
    let base = sp as usize;
    let all = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE | DOCA_ACCESS_FLAG_RDMA_READ | DOCA_ACCESS_FLAG_RDMA_WRITE;
    let m = local_mmap(sp, 4096, all, dev);
    let mut ro_mem = vec![0u8; 64];
    let ro = local_mmap(ro_mem.as_mut_ptr(), 64, DOCA_ACCESS_FLAG_LOCAL_READ_ONLY, dev);
    let mut inv = ptr::null_mut();
    let (mut p, mut n) = (ptr::null(), 0usize);
    let mut im = ptr::null_mut();
    // SAFETY: live objects; the blob is read while the exporter lives.
    unsafe {
        assert_eq!(doca_buf_inventory_create(8, &mut inv), DOCA_SUCCESS);
        assert_eq!(doca_buf_inventory_start(inv), DOCA_SUCCESS);
        assert_eq!(doca_mmap_export_rdma(m, dev, &mut p, &mut n), DOCA_SUCCESS);
        assert_eq!(doca_mmap_create_from_export(ptr::null(), p, n, dev, &mut im), DOCA_SUCCESS);
    }
    // Local destination: append.
    let dst = get_buf(inv, m, base, 16, base, 0).unwrap();
    // SAFETY: live buffer.
    let db = unsafe { buf_ref(dst) }.unwrap();
    assert_eq!(db.tail_space(), (base, 16));
    db.append(b"hello ").unwrap();
    db.append(b"world").unwrap();
    assert_eq!(db.data(), (base, 11));
    assert_eq!(db.append(b"123456").unwrap_err(), DOCA_ERROR_TOO_BIG);
    // A failing fill leaves data_len alone.
    // SAFETY: the closure gets the only reference to the tail bytes of this buffer.
    let r = unsafe { db.append_with(1, |_| Err(DOCA_ERROR_IO_FAILED)) };
    assert_eq!(r, Err(DOCA_ERROR_IO_FAILED));
    assert_eq!(db.data(), (base, 11));
    // SAFETY: as above.
    assert_eq!(unsafe { db.append_with(0, |_| Ok(())) }, Ok(()));
    // SAFETY: as above.
    let r = unsafe {
        db.append_with(5, |s| {
            s.copy_from_slice(b"!!!!!");
            Ok(())
        })
    };
    r.unwrap();
    // SAFETY: as above (refused: the buffer is full).
    let r = unsafe { db.append_with(1, |_| Ok(())) };
    assert_eq!(r, Err(DOCA_ERROR_TOO_BIG));
    // SAFETY: no other reference to the payload is alive.
    assert_eq!(unsafe { db.payload_slice() }.unwrap(), b"hello world!!!!!");
    assert_eq!(db.head(), (base, 16));
    assert!(std::ptr::eq(db.mmap_ptr(), m));
    assert_eq!(db.remote_payload().unwrap_err(), DOCA_ERROR_INVALID_VALUE);

    // A read-only local mmap refuses destination writes.
    let rob = get_buf(inv, ro, ro_mem.as_ptr() as usize, 64, ro_mem.as_ptr() as usize, 0).unwrap();
    // SAFETY: live buffer.
    let robr = unsafe { buf_ref(rob) }.unwrap();
    assert_eq!(robr.append(b"x").unwrap_err(), DOCA_ERROR_NOT_PERMITTED);
    // SAFETY: as above; fill closure must not run.
    let r = unsafe { robr.append_with(1, |_| panic!("must not run")) };
    assert_eq!(r.unwrap_err(), DOCA_ERROR_NOT_PERMITTED);

    // Remote buffers over the imported mmap (owner addresses).
    let rsrc = get_buf(inv, im, base, 16, base, 11).unwrap();
    // SAFETY: live buffer.
    let rs = unsafe { buf_ref(rsrc) }.unwrap();
    let (region, off, len) = rs.remote_payload().unwrap();
    assert_eq!((off, len), (0, 11));
    let mut tmp = [0u8; 11];
    region.read(off, &mut tmp).unwrap();
    assert_eq!(&tmp, b"hello world");
    let rdst = get_buf(inv, im, base + 100, 32, base + 100, 4).unwrap();
    // SAFETY: live buffer.
    let rd = unsafe { buf_ref(rdst) }.unwrap();
    let (region, off, cap) = rd.remote_tail().unwrap();
    assert_eq!((off, cap), (104, 28));
    region.write(off, b"remote").unwrap();
    rd.grow_data_len(6).unwrap();
    assert_eq!(rd.data(), (base + 100, 10));
    // SAFETY: sp is 4096 bytes of live memory.
    let written = unsafe { std::slice::from_raw_parts(sp.add(104), 6) };
    assert_eq!(written, b"remote");
    // Local-only helpers refuse imported memory.
    assert_eq!(rd.append(b"x").unwrap_err(), DOCA_ERROR_INVALID_VALUE);
    // SAFETY: refused before any slice is made.
    let r = unsafe { rd.payload_slice() };
    assert_eq!(r.unwrap_err(), DOCA_ERROR_INVALID_VALUE);

    // SAFETY: live objects; all buffers returned before their inventory and mmaps go.
    unsafe {
        for b in [dst, rob, rsrc, rdst] {
            assert_eq!(doca_buf_dec_refcount(b, ptr::null_mut()), DOCA_SUCCESS);
        }
        assert_eq!(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
        assert_eq!(doca_mmap_destroy(im), DOCA_SUCCESS);
        assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
        assert_eq!(doca_mmap_destroy(ro), DOCA_SUCCESS);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
    free_shared(sp).unwrap();
}

/// Reads one list answer of a buffer.
fn flags(b: *mut doca_buf) -> (u8, u8, u8) {
    let (mut first, mut last, mut inl) = (9u8, 9u8, 9u8);
    // SAFETY: a live buffer and valid out-pointers.
    unsafe {
        assert_eq!(doca_buf_is_first_in_list(b, &mut first), DOCA_SUCCESS);
        assert_eq!(doca_buf_is_last_in_list(b, &mut last), DOCA_SUCCESS);
        assert_eq!(doca_buf_is_in_list(b, &mut inl), DOCA_SUCCESS);
    }
    (first, last, inl)
}

fn next_of(b: *mut doca_buf) -> *mut doca_buf {
    let mut n = ptr::dangling_mut();
    // SAFETY: a live buffer and a valid out-pointer.
    assert_eq!(unsafe { doca_buf_get_next_in_list(b, &mut n) }, DOCA_SUCCESS);
    n
}

fn last_of(b: *mut doca_buf) -> *mut doca_buf {
    let mut n = ptr::null_mut();
    // SAFETY: a live buffer and a valid out-pointer.
    assert_eq!(unsafe { doca_buf_get_last_in_list(b, &mut n) }, DOCA_SUCCESS);
    n
}

fn list_len(b: *mut doca_buf) -> Result<u32, doca_error_t> {
    let mut n = 0;
    // SAFETY: a live buffer (or one the provider must refuse) and a valid out-pointer.
    match unsafe { doca_buf_get_list_len(b, &mut n) } {
        DOCA_SUCCESS => Ok(n),
        e => Err(e),
    }
}

#[test]
fn lists_chain_walk_split_and_return_together() {
    let dev = test_open_default();
    let mut mem = vec![0u8; 1024];
    let base = mem.as_mut_ptr() as usize;
    let m = local_mmap(mem.as_mut_ptr(), 1024, DOCA_ACCESS_FLAG_LOCAL_READ_WRITE, dev);
    let (mut inv_a, mut inv_b) = (ptr::null_mut(), ptr::null_mut());
    // SAFETY: every call gets live objects or deliberately bad arguments.
    unsafe {
        for inv in [&mut inv_a, &mut inv_b] {
            assert_eq!(doca_buf_inventory_create(4, inv), DOCA_SUCCESS);
            assert_eq!(doca_buf_inventory_start(*inv), DOCA_SUCCESS);
        }
        // Elements from two inventories: each goes back to its own.
        let b: Vec<*mut doca_buf> = (0..5)
            .map(|i| get_buf(if i % 2 == 0 { inv_a } else { inv_b }, m, base + i * 64, 64, base + i * 64, 8).unwrap())
            .collect();
        assert_eq!(flags(b[0]), (1, 1, 0), "a buffer is a list of one");
        assert_eq!(list_len(b[0]), Ok(1));
        assert_eq!(last_of(b[0]), b[0]);
        assert!(next_of(b[0]).is_null());

        // [0,1,2] and [3,4], then the second appended to the first.
        assert_eq!(doca_buf_chain_list(b[0], b[1]), DOCA_SUCCESS);
        assert_eq!(doca_buf_chain_list(b[0], b[2]), DOCA_SUCCESS);
        assert_eq!(doca_buf_chain_list_tail(b[3], b[3], b[4]), DOCA_SUCCESS);
        assert_eq!(list_len(b[3]), Ok(2));
        // list2 must be a first element with a count of exactly 1.
        assert_eq!(doca_buf_inc_refcount(b[3], ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!(doca_buf_chain_list(b[0], b[3]), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(doca_buf_dec_refcount(b[3], ptr::null_mut()), DOCA_SUCCESS);
        // Misuse: a chained element on either side, a list onto itself, a tail that is not one.
        assert_eq!(doca_buf_chain_list(b[0], b[4]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_chain_list(b[1], b[3]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_chain_list(b[0], b[0]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_chain_list_tail(b[0], b[1], b[3]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_chain_list_tail(b[0], b[0], b[3]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_chain_list_tail(b[0], b[2], b[3]), DOCA_SUCCESS);

        assert_eq!(list_len(b[0]), Ok(5));
        assert_eq!(list_len(b[2]), Err(DOCA_ERROR_NOT_PERMITTED), "only a first element has a length");
        assert_eq!(flags(b[0]), (1, 0, 1));
        assert_eq!(flags(b[2]), (0, 0, 1));
        assert_eq!(flags(b[4]), (0, 1, 1));
        let mut walk = vec![b[0]];
        while !next_of(*walk.last().unwrap()).is_null() {
            walk.push(next_of(*walk.last().unwrap()));
        }
        assert_eq!(walk, b, "the elements in chaining order");
        assert_eq!(last_of(b[0]), b[4]);
        assert_eq!(last_of(b[2]), b[4], "the last of any element's tail");

        // The count belongs to the first element.
        let mut rc = 0;
        assert_eq!(doca_buf_inc_refcount(b[1], &mut rc), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(doca_buf_dec_refcount(b[1], &mut rc), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(doca_buf_get_refcount(b[1], &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 1);
        // The first element's own data stays its own.
        let mut dl = 0;
        assert_eq!(doca_buf_get_data_len(b[0], &mut dl), DOCA_SUCCESS);
        assert_eq!(dl, 8);

        // Split after the third element: two lists again, the second counting 1.
        assert_eq!(doca_buf_unchain_list(b[0], b[0]), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_unchain_list(b[3], b[1]), DOCA_ERROR_INVALID_VALUE, "b1 is not after b3");
        assert_eq!(doca_buf_unchain_list(b[0], b[3]), DOCA_SUCCESS);
        assert_eq!((list_len(b[0]), list_len(b[3])), (Ok(3), Ok(2)));
        assert_eq!(flags(b[2]), (0, 1, 1));
        assert_eq!(flags(b[3]), (1, 0, 1));
        assert_eq!(doca_buf_get_refcount(b[3], &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 1);

        // A list with two references survives one release; the last returns all of it.
        assert_eq!(doca_buf_inc_refcount(b[0], ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!(doca_buf_dec_refcount(b[0], &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 2);
        assert_eq!((free_count(inv_a), free_count(inv_b)), (1, 2));
        assert_eq!(doca_buf_dec_refcount(b[0], &mut rc), DOCA_SUCCESS);
        assert_eq!(rc, 1);
        assert_eq!((free_count(inv_a), free_count(inv_b)), (3, 3), "b0, b2 to a; b1 to b");
        assert_eq!(doca_buf_get_next_in_list(b[1], &mut ptr::null_mut()), DOCA_ERROR_BAD_STATE, "stale");
        assert_eq!(mmap_ref(m).unwrap().outstanding_bufs(), 2);
        // A fresh buffer from a reused descriptor is a list of one.
        let again = get_buf(inv_b, m, base, 64, base, 0).unwrap();
        assert_eq!(flags(again), (1, 1, 0));
        assert_eq!(doca_buf_dec_refcount(again, ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!(doca_buf_dec_refcount(b[3], ptr::null_mut()), DOCA_SUCCESS);
        assert_eq!((free_count(inv_a), free_count(inv_b)), (4, 4));

        // NULLs are refused everywhere.
        assert_eq!(doca_buf_get_list_len(ptr::null(), &mut 0), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_buf_unchain_list(ptr::null_mut(), ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(
            doca_buf_chain_list_tail(ptr::null_mut(), ptr::null_mut(), ptr::null_mut()),
            DOCA_ERROR_INVALID_VALUE
        );

        for inv in [inv_a, inv_b] {
            assert_eq!(doca_buf_inventory_destroy(inv), DOCA_SUCCESS);
        }
        assert_eq!(doca_mmap_destroy(m), DOCA_SUCCESS);
        assert_eq!(doca_dev_close(dev), DOCA_SUCCESS);
    }
}
