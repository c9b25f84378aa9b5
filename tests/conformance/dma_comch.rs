//! Conformance: DOCA DMA (the memcpy pattern of NVIDIA's PE samples, on local memory and on
//! memory imported from a PCI export) and DOCA Comch (server and client start results,
//! connection event, messages both ways, IDLE-only configuration). Included by
//! `tests/conformance.rs`; runs against whichever provider is linked.

use std::cell::RefCell;
use std::ptr;
use std::time::Duration;

use super::kit::*;

thread_local! {
    static DMA_DONE: RefCell<Vec<(u64, doca_error_t)>> = const { RefCell::new(Vec::new()) };
    static COMCH: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

unsafe extern "C" fn dma_cb(task: *mut doca_dma_task_memcpy, ud: doca_data, _cud: doca_data) {
    // SAFETY: the task is ours inside its callback; freed once.
    unsafe {
        let st = doca_task_get_status(doca_dma_task_memcpy_as_task(task));
        DMA_DONE.with(|d| d.borrow_mut().push((ud.as_u64(), st)));
        doca_task_free(doca_dma_task_memcpy_as_task(task));
    }
}

fn local_mmap(dev: *mut doca_dev, m: &Mem, perms: u32) -> *mut doca_mmap {
    let mut mm = ptr::null_mut();
    // SAFETY: valid out-pointer; `m` outlives the mmap (destroyed by the test first).
    unsafe {
        ok(doca_mmap_create(&mut mm));
        ok(doca_mmap_set_memrange(mm, m.ptr.cast(), m.len));
        ok(doca_mmap_set_permissions(mm, perms));
        ok(doca_mmap_add_dev(mm, dev));
        ok(doca_mmap_start(mm));
    }
    mm
}

#[test]
fn dma_memcpy_as_the_pe_samples_use_it() {
    const LEN: usize = 4096;
    let dev = open_dev();
    let (src, dst, host) = (Mem::new(LEN), Mem::new(LEN), Mem::new(LEN));
    // SAFETY: the three allocations are LEN writable bytes each, not aliased here.
    unsafe {
        for i in 0..LEN {
            *src.ptr.add(i) = (i % 251) as u8;
            *host.ptr.add(i) = (i % 13) as u8;
        }
    }
    let rw = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
    let (ms, md) = (local_mmap(dev, &src, rw), local_mmap(dev, &dst, rw));
    let mh = local_mmap(dev, &host, rw | DOCA_ACCESS_FLAG_PCI_READ_WRITE);
    let (mut pe, mut dma, mut inv, mut imported) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: the C sequence of the PE samples on this thread; every object is torn down below.
    unsafe {
        ok(doca_dma_cap_task_memcpy_is_supported(doca_dev_as_devinfo(dev)));
        let mut max = 0u64;
        ok(doca_dma_cap_task_memcpy_get_max_buf_size(doca_dev_as_devinfo(dev), &mut max));
        assert!(max >= LEN as u64);
        ok(doca_pe_create(&mut pe));
        ok(doca_dma_create(dev, &mut dma));
        ok(doca_dma_task_memcpy_set_conf(dma, Some(dma_cb), Some(dma_cb), 2));
        ok(doca_pe_connect_ctx(pe, doca_dma_as_ctx(dma)));
        ok(doca_ctx_start(doca_dma_as_ctx(dma)));
        assert_eq!(state(doca_dma_as_ctx(dma)), DOCA_CTX_STATE_RUNNING);
        assert!(res(doca_dma_task_memcpy_set_conf(dma, Some(dma_cb), Some(dma_cb), 4)).is_err(), "IDLE-only");
        ok(doca_buf_inventory_create(8, &mut inv));
        ok(doca_buf_inventory_start(inv));
        // Source by data (full payload), destination by address (empty payload).
        let (mut sb, mut db) = (ptr::null_mut(), ptr::null_mut());
        ok(doca_buf_inventory_buf_get_by_data(inv, ms, src.ptr.cast(), LEN, &mut sb));
        ok(doca_buf_inventory_buf_get_by_addr(inv, md, dst.ptr.cast(), LEN, &mut db));
        let mut t = ptr::null_mut();
        ok(doca_dma_task_memcpy_alloc_init(dma, sb, db, doca_data::from_u64(1), &mut t));
        assert_eq!(doca_dma_task_memcpy_get_src(t), sb as *const _);
        assert_eq!(doca_dma_task_memcpy_get_dst(t), db);
        ok(doca_task_submit(doca_dma_task_memcpy_as_task(t)));
        assert!(run_until(&[pe], Duration::from_secs(10), || DMA_DONE.with(|d| !d.borrow().is_empty())));
        assert_eq!(DMA_DONE.with(|d| d.borrow_mut().split_off(0)), vec![(1, DOCA_SUCCESS)]);
        let mut n = 0usize;
        ok(doca_buf_get_data_len(db, &mut n));
        assert_eq!(n, LEN, "the destination's data grows by the bytes copied");
        assert_eq!(std::slice::from_raw_parts(dst.ptr, LEN), std::slice::from_raw_parts(src.ptr, LEN));

        // Memory exported over PCI and imported: copied in, like a DPU program does.
        let (mut blob, mut bl) = (ptr::null(), 0usize);
        ok(doca_mmap_export_pci(mh, dev, &mut blob, &mut bl));
        ok(doca_mmap_create_from_export(ptr::null(), blob, bl, dev, &mut imported));
        let (mut rb, mut db2) = (ptr::null_mut(), ptr::null_mut());
        ok(doca_buf_inventory_buf_get_by_data(inv, imported, host.ptr.cast(), LEN, &mut rb));
        ok(doca_buf_inventory_buf_get_by_addr(inv, md, dst.ptr.cast(), LEN, &mut db2));
        ok(doca_dma_task_memcpy_alloc_init(dma, rb, db2, doca_data::from_u64(2), &mut t));
        ok(doca_task_submit(doca_dma_task_memcpy_as_task(t)));
        assert!(run_until(&[pe], Duration::from_secs(10), || DMA_DONE.with(|d| !d.borrow().is_empty())));
        assert_eq!(DMA_DONE.with(|d| d.borrow_mut().split_off(0)), vec![(2, DOCA_SUCCESS)]);
        assert_eq!(std::slice::from_raw_parts(dst.ptr, LEN), std::slice::from_raw_parts(host.ptr, LEN));

        // A destination without room fails through the error callback.
        let mut small = ptr::null_mut();
        ok(doca_buf_inventory_buf_get_by_addr(inv, md, dst.ptr.cast(), 16, &mut small));
        ok(doca_dma_task_memcpy_alloc_init(dma, sb, small, doca_data::from_u64(3), &mut t));
        match res(doca_task_submit(doca_dma_task_memcpy_as_task(t))) {
            Ok(()) => {
                assert!(run_until(&[pe], Duration::from_secs(10), || DMA_DONE.with(|d| !d.borrow().is_empty())));
                let (ud, st) = DMA_DONE.with(|d| d.borrow_mut().remove(0));
                assert_eq!(ud, 3);
                assert_ne!(st, DOCA_SUCCESS, "a copy larger than the destination's room fails");
                println!("dma memcpy without room: {}", name(st));
            }
            Err(e) => {
                println!("dma memcpy without room refused at submit: {}", name(e));
                doca_task_free(doca_dma_task_memcpy_as_task(t));
            }
        }

        for b in [sb, db, rb, db2, small] {
            doca_buf_dec_refcount(b, ptr::null_mut());
        }
        ok_or_in_progress(doca_ctx_stop(doca_dma_as_ctx(dma)));
        progress_to(pe, doca_dma_as_ctx(dma), DOCA_CTX_STATE_IDLE);
        ok(doca_dma_destroy(dma));
        ok(doca_pe_destroy(pe));
        ok(doca_buf_inventory_stop(inv));
        ok(doca_buf_inventory_destroy(inv));
        for m in [imported, ms, md, mh] {
            ok(doca_mmap_destroy(m));
        }
        ok(doca_dev_close(dev));
    }
}

/// Buffer lists as DOCA documents them (the first element holds the count and returns the
/// list; the others refuse inc/dec) and a memcpy between lists as NVIDIA's DMA samples build
/// them: regions cut into segments, source segments full, destination segments empty.
#[test]
fn buffer_lists_and_a_memcpy_between_them() {
    const LEN: usize = 3000;
    let dev = open_dev();
    let (src, dst) = (Mem::new(LEN), Mem::new(LEN));
    // SAFETY: LEN writable bytes each, not aliased here.
    unsafe {
        for i in 0..LEN {
            *src.ptr.add(i) = (i % 241) as u8;
        }
    }
    let rw = DOCA_ACCESS_FLAG_LOCAL_READ_WRITE;
    let (ms, md) = (local_mmap(dev, &src, rw), local_mmap(dev, &dst, rw));
    let (mut pe, mut dma, mut inv) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: the C sequence of the DMA samples on this thread; every object is torn down below.
    unsafe {
        ok(doca_buf_inventory_create(8, &mut inv));
        ok(doca_buf_inventory_start(inv));
        let seg = |m, base: *mut u8, at: usize, n: usize, full: bool| {
            let mut b = ptr::null_mut();
            let p = base.add(at).cast();
            if full {
                ok(doca_buf_inventory_buf_get_by_data(inv, m, p, n, &mut b));
            } else {
                ok(doca_buf_inventory_buf_get_by_addr(inv, m, p, n, &mut b));
            }
            b
        };
        // Source: 3 segments (1000 each); destination: 2 segments (1500 each).
        let s: Vec<_> = (0..3).map(|i| seg(ms, src.ptr, i * 1000, 1000, true)).collect();
        let d: Vec<_> = (0..2).map(|i| seg(md, dst.ptr, i * 1500, 1500, false)).collect();

        // The documented list rules.
        let mut rc = 0u16;
        ok(doca_buf_inc_refcount(s[2], &mut rc));
        assert_eq!(rc, 1, "inc_refcount reports the count before the call");
        assert_eq!(doca_buf_chain_list(s[0], s[2]), DOCA_ERROR_NOT_PERMITTED, "list2 must have a count of 1");
        ok(doca_buf_dec_refcount(s[2], &mut rc));
        assert_eq!(rc, 2, "dec_refcount reports the count before the call");
        ok(doca_buf_chain_list(s[0], s[1]));
        ok(doca_buf_chain_list(s[0], s[2]));
        ok(doca_buf_chain_list(d[0], d[1]));
        let (mut n, mut flag, mut next, mut last) = (0u32, 0u8, ptr::null_mut(), ptr::null_mut());
        ok(doca_buf_get_list_len(s[0], &mut n));
        assert_eq!(n, 3);
        assert_eq!(doca_buf_get_list_len(s[1], &mut n), DOCA_ERROR_NOT_PERMITTED, "not a first element");
        ok(doca_buf_get_next_in_list(s[0], &mut next));
        assert_eq!(next, s[1]);
        ok(doca_buf_get_next_in_list(s[2], &mut next));
        assert!(next.is_null());
        ok(doca_buf_get_last_in_list(s[0], &mut last));
        assert_eq!(last, s[2]);
        ok(doca_buf_is_first_in_list(s[1], &mut flag));
        assert_eq!(flag, 0);
        ok(doca_buf_is_last_in_list(s[2], &mut flag));
        assert_eq!(flag, 1);
        ok(doca_buf_is_in_list(s[1], &mut flag));
        assert_eq!(flag, 1);
        assert_eq!(doca_buf_inc_refcount(s[1], &mut rc), DOCA_ERROR_NOT_PERMITTED);
        assert_eq!(doca_buf_dec_refcount(s[1], &mut rc), DOCA_ERROR_NOT_PERMITTED);
        ok(doca_buf_get_refcount(s[1], &mut rc));
        assert_eq!(rc, 1, "an element after the first counts 1");
        assert_eq!(doca_buf_unchain_list(d[0], s[1]), DOCA_ERROR_INVALID_VALUE, "not in that list");

        // A memcpy between the lists, where the device takes lists that long.
        let mut max_list = 0u32;
        ok(doca_dma_cap_task_memcpy_get_max_buf_list_len(doca_dev_as_devinfo(dev), &mut max_list));
        println!("dma memcpy max_buf_list_len: {max_list}");
        if max_list >= 3 {
            ok(doca_pe_create(&mut pe));
            ok(doca_dma_create(dev, &mut dma));
            ok(doca_dma_task_memcpy_set_conf(dma, Some(dma_cb), Some(dma_cb), 1));
            ok(doca_pe_connect_ctx(pe, doca_dma_as_ctx(dma)));
            ok(doca_ctx_start(doca_dma_as_ctx(dma)));
            let mut t = ptr::null_mut();
            ok(doca_dma_task_memcpy_alloc_init(dma, s[0], d[0], doca_data::from_u64(7), &mut t));
            ok(doca_task_submit(doca_dma_task_memcpy_as_task(t)));
            assert!(run_until(&[pe], Duration::from_secs(10), || DMA_DONE.with(|x| !x.borrow().is_empty())));
            assert_eq!(DMA_DONE.with(|x| x.borrow_mut().split_off(0)), vec![(7, DOCA_SUCCESS)]);
            assert_eq!(std::slice::from_raw_parts(dst.ptr, LEN), std::slice::from_raw_parts(src.ptr, LEN));
            let mut dl = [0usize; 2];
            ok(doca_buf_get_data_len(d[0], &mut dl[0]));
            ok(doca_buf_get_data_len(d[1], &mut dl[1]));
            println!("dma memcpy into a list of two: data_len {dl:?}");
            ok_or_in_progress(doca_ctx_stop(doca_dma_as_ctx(dma)));
            progress_to(pe, doca_dma_as_ctx(dma), DOCA_CTX_STATE_IDLE);
            ok(doca_dma_destroy(dma));
            ok(doca_pe_destroy(pe));
        }

        // The first elements give back their whole lists.
        ok(doca_buf_dec_refcount(s[0], ptr::null_mut()));
        ok(doca_buf_dec_refcount(d[0], ptr::null_mut()));
        ok(doca_buf_inventory_get_num_free_elements(inv, &mut n));
        assert_eq!(n, 8);
        ok(doca_buf_inventory_stop(inv));
        ok(doca_buf_inventory_destroy(inv));
        for m in [ms, md] {
            ok(doca_mmap_destroy(m));
        }
        ok(doca_dev_close(dev));
    }
}

unsafe extern "C" fn comch_sent(t: *mut doca_comch_task_send, _ud: doca_data, _cud: doca_data) {
    // SAFETY: the task is ours inside its callback; freed once.
    unsafe {
        let st = doca_task_get_status(doca_comch_task_send_as_task(t));
        COMCH.with(|c| c.borrow_mut().push(format!("sent {}", name(st))));
        doca_task_free(doca_comch_task_send_as_task(t));
    }
}
unsafe extern "C" fn comch_recv(
    _e: *mut doca_comch_event_msg_recv,
    buf: *mut u8,
    len: u32,
    _c: *mut doca_comch_connection,
) {
    // SAFETY: `len` bytes are valid during the callback.
    let m = unsafe { std::slice::from_raw_parts(buf, len as usize) };
    COMCH.with(|c| c.borrow_mut().push(format!("recv {}", String::from_utf8_lossy(m))));
}
thread_local! {
    static SERVER_CONN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
unsafe extern "C" fn comch_connect(
    _e: *mut doca_comch_event_connection_status_changed,
    c: *mut doca_comch_connection,
    ok: u8,
) {
    SERVER_CONN.with(|s| s.set(c as usize));
    COMCH.with(|x| x.borrow_mut().push(format!("connect {ok}")));
}
unsafe extern "C" fn comch_disconnect(
    _e: *mut doca_comch_event_connection_status_changed,
    _c: *mut doca_comch_connection,
    _ok: u8,
) {
    COMCH.with(|x| x.borrow_mut().push("disconnect".into()));
}

fn seen(what: &str) -> bool {
    COMCH.with(|c| c.borrow().iter().any(|s| s == what))
}

#[test]
fn comch_server_and_client_start_connect_and_talk() {
    let dev = open_dev();
    let name = std::ffi::CString::new(format!("conf-{}", std::process::id())).unwrap();
    let (mut spe, mut cpe, mut s, mut c) = (ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    // SAFETY: the sequence of NVIDIA's comch samples on this thread; torn down below.
    unsafe {
        let info = doca_dev_as_devinfo(dev);
        ok(doca_comch_cap_server_is_supported(info));
        ok(doca_comch_cap_client_is_supported(info));
        let mut max = 0u32;
        ok(doca_comch_cap_get_max_msg_size(info, &mut max));
        assert!(max >= 1024);
        ok(doca_pe_create(&mut spe));
        ok(doca_pe_create(&mut cpe));
        // No representor: the soft provider accepts NULL in either role; NVIDIA's server
        // needs one (a DPU run opens it from doca_devinfo_rep_create_list, as the examples do).
        ok(doca_comch_server_create(dev, ptr::null_mut(), name.as_ptr(), &mut s));
        ok(doca_comch_server_set_max_msg_size(s, 1024));
        ok(doca_comch_server_set_recv_queue_size(s, 8));
        ok(doca_comch_server_task_send_set_conf(s, Some(comch_sent), Some(comch_sent), 8));
        ok(doca_comch_server_event_msg_recv_register(s, Some(comch_recv)));
        ok(doca_comch_server_event_connection_status_changed_register(s, Some(comch_connect), Some(comch_disconnect)));
        ok(doca_pe_connect_ctx(spe, doca_comch_server_as_ctx(s)));
        // Server start: SUCCESS and RUNNING at once (the samples treat STARTING as unexpected).
        ok(doca_ctx_start(doca_comch_server_as_ctx(s)));
        assert_eq!(state(doca_comch_server_as_ctx(s)), DOCA_CTX_STATE_RUNNING);
        assert!(res(doca_comch_server_set_max_msg_size(s, 512)).is_err(), "setters are IDLE-only");

        ok(doca_comch_client_create(dev, name.as_ptr(), &mut c));
        ok(doca_comch_client_set_max_msg_size(c, 1024));
        ok(doca_comch_client_set_recv_queue_size(c, 8));
        ok(doca_comch_client_task_send_set_conf(c, Some(comch_sent), Some(comch_sent), 8));
        ok(doca_comch_client_event_msg_recv_register(c, Some(comch_recv)));
        ok(doca_pe_connect_ctx(cpe, doca_comch_client_as_ctx(c)));
        let mut conn = ptr::null_mut();
        assert!(res(doca_comch_client_get_connection(c, &mut conn)).is_err(), "no connection before start");
        // Client start: IN_PROGRESS, then RUNNING through progress.
        assert_eq!(doca_ctx_start(doca_comch_client_as_ctx(c)), DOCA_ERROR_IN_PROGRESS);
        let cctx = doca_comch_client_as_ctx(c);
        assert!(run_until(&[spe, cpe], Duration::from_secs(10), || state(cctx) == DOCA_CTX_STATE_RUNNING));
        assert!(run_until(&[spe, cpe], Duration::from_secs(10), || seen("connect 1")));
        ok(doca_comch_client_get_connection(c, &mut conn));
        assert_eq!(doca_comch_client_get_client_ctx(conn), c);
        let sconn = SERVER_CONN.with(|x| x.get()) as *mut doca_comch_connection;
        assert_eq!(doca_comch_server_get_server_ctx(sconn), s);

        let msg = b"from host";
        let mut t = ptr::null_mut();
        ok(doca_comch_client_task_send_alloc_init(c, conn, msg.as_ptr().cast(), msg.len() as u32, &mut t));
        ok(doca_task_submit(doca_comch_task_send_as_task(t)));
        assert!(run_until(&[spe, cpe], Duration::from_secs(10), || seen("recv from host")));
        let reply = b"from dpu";
        ok(doca_comch_server_task_send_alloc_init(s, sconn, reply.as_ptr().cast(), reply.len() as u32, &mut t));
        ok(doca_task_submit(doca_comch_task_send_as_task(t)));
        assert!(run_until(&[spe, cpe], Duration::from_secs(10), || seen("recv from dpu")));
        assert!(COMCH.with(|x| x.borrow().iter().filter(|s| *s == "sent DOCA_SUCCESS").count()) == 2);

        ok_or_in_progress(doca_ctx_stop(cctx));
        progress_to(cpe, cctx, DOCA_CTX_STATE_IDLE);
        ok_or_in_progress(doca_ctx_stop(doca_comch_server_as_ctx(s)));
        progress_to(spe, doca_comch_server_as_ctx(s), DOCA_CTX_STATE_IDLE);
        ok(doca_comch_client_destroy(c));
        ok(doca_comch_server_destroy(s));
        ok(doca_pe_destroy(spe));
        ok(doca_pe_destroy(cpe));
        ok(doca_dev_close(dev));
    }
}
