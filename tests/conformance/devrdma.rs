//! Conformance: device selection and queries, RDMA properties and capabilities, task re-use
//! through the per-task setters, `doca_task_submit_ex` and completion vectors.
//!
//! Where DOCA documents a code it is asserted; where a device may legitimately answer either
//! way (an address that is or is not assigned, a capability a given NIC has or lacks), the
//! assertion accepts the documented alternatives and the answer is printed, so a run on a
//! BlueField shows what NVIDIA's libraries say. Functions newer than DOCA 3.0
//! (`doca_devinfo_get_pci_func_type`, `doca_devinfo_get_sf_index`) are not called here, so
//! this suite links against a 3.0 SDK.

use std::ffi::{c_char, CStr};
use std::ptr;

use super::kit::*;

fn cstr(b: &[c_char]) -> String {
    // SAFETY: the getters NUL-terminate inside the buffer.
    unsafe { CStr::from_ptr(b.as_ptr()) }.to_string_lossy().into_owned()
}

/// Accepts one of `allowed` and says which.
#[track_caller]
fn one_of(what: &str, e: doca_error_t, allowed: &[doca_error_t]) {
    println!("{what}: {}", name(e));
    assert!(allowed.contains(&e), "{what}: {} is not a documented answer", name(e));
}

#[test]
fn devices_are_selected_by_ibdev_name_or_pci_address_as_the_samples_do() {
    let (mut list, mut n) = (ptr::null_mut(), 0u32);
    // SAFETY: valid out-pointers, buffers of the documented sizes; the list lives until destroyed.
    unsafe {
        ok(doca_devinfo_create_list(&mut list, &mut n));
        assert!(n >= 1, "no DOCA device");
        let first = *list;
        let mut ibdev = [0 as c_char; DOCA_DEVINFO_IBDEV_NAME_SIZE];
        let mut pci = [0 as c_char; DOCA_DEVINFO_PCI_ADDR_SIZE];
        ok(doca_devinfo_get_ibdev_name(first, ibdev.as_mut_ptr(), ibdev.len() as u32));
        ok(doca_devinfo_get_pci_addr_str(first, pci.as_mut_ptr()));
        let (want_name, want_pci) = (cstr(&ibdev), cstr(&pci));
        println!("first device: {want_name} at {want_pci}");
        // By name (-d mlx5_0): scan, compare, open the match. The scan starts at the first
        // device, so it always finds it: what can fail is another device of the same name
        // (a name that does not select one device).
        let mut named = Vec::new();
        for i in 0..n as usize {
            let info = *list.add(i);
            ok(doca_devinfo_get_ibdev_name(info, ibdev.as_mut_ptr(), ibdev.len() as u32));
            if cstr(&ibdev) == want_name {
                named.push(info);
            }
        }
        assert_eq!(named, [first], "the devices named {want_name}");
        let by_name = named[0];
        // By PCI address, in both documented forms ("DDDD:BB:DD.F" and "BB:DD.F").
        let mut eq = 9u8;
        let full = std::ffi::CString::new(want_pci.clone()).unwrap();
        ok(doca_devinfo_is_equal_pci_addr(first, full.as_ptr(), &mut eq));
        assert_eq!(eq, 1);
        if let Some(bdf) = want_pci.strip_prefix("0000:") {
            let bdf = std::ffi::CString::new(bdf).unwrap();
            ok(doca_devinfo_is_equal_pci_addr(first, bdf.as_ptr(), &mut eq));
            assert_eq!(eq, 1, "the short form assumes domain 0000");
        }
        let mut dev = ptr::null_mut();
        ok(doca_dev_open(by_name, &mut dev));
        let info = doca_dev_as_devinfo(dev);
        ok(doca_devinfo_is_equal_pci_addr(info, full.as_ptr(), &mut eq));
        assert_eq!(eq, 1);

        // Addresses and link: SUCCESS or the documented "does not have it" answers.
        let mut b = [0u8; 16];
        one_of("ipv4", doca_devinfo_get_ipv4_addr(info, b.as_mut_ptr(), 4), &[DOCA_SUCCESS, DOCA_ERROR_NOT_FOUND]);
        one_of("ipv6", doca_devinfo_get_ipv6_addr(info, b.as_mut_ptr(), 16), &[DOCA_SUCCESS, DOCA_ERROR_NOT_FOUND]);
        let mac = doca_devinfo_get_mac_addr(info, b.as_mut_ptr(), 6);
        let mut lid = 0u16;
        let lid_r = doca_devinfo_get_lid(info, &mut lid);
        one_of("mac", mac, &[DOCA_SUCCESS, DOCA_ERROR_NOT_FOUND, DOCA_ERROR_NOT_SUPPORTED]);
        one_of("lid", lid_r, &[DOCA_SUCCESS, DOCA_ERROR_NOT_SUPPORTED]);
        assert!(
            !(mac == DOCA_SUCCESS && lid_r == DOCA_SUCCESS),
            "a port is Ethernet (MAC, no LID) or InfiniBand (LID, no MAC)"
        );
        assert_eq!(doca_devinfo_get_ipv4_addr(info, b.as_mut_ptr(), 3), DOCA_ERROR_INVALID_VALUE);
        assert_eq!(doca_devinfo_get_mac_addr(info, b.as_mut_ptr(), 5), DOCA_ERROR_INVALID_VALUE);
        let mut rate = 0u64;
        let r = doca_devinfo_get_active_rate(info, &mut rate);
        one_of("active rate", r, &[DOCA_SUCCESS, DOCA_ERROR_NOT_SUPPORTED]);
        println!("active rate: {rate} bit/s");
        // Representors: listed from a DPU-side device; NOT_SUPPORTED on a host.
        let (mut reps, mut nreps) = (ptr::null_mut(), 0u32);
        let r = doca_devinfo_rep_create_list(dev, DOCA_DEVINFO_REP_FILTER_NET as i32, &mut reps, &mut nreps);
        one_of("representor list", r, &[DOCA_SUCCESS, DOCA_ERROR_NOT_SUPPORTED]);
        if r == DOCA_SUCCESS {
            println!("{nreps} network representors");
            ok(doca_devinfo_rep_destroy_list(reps));
        }
        let mut flag = 9u8;
        ok(doca_devinfo_rep_cap_is_filter_net_supported(info, &mut flag));
        assert!(flag <= 1);
        if r == DOCA_ERROR_NOT_SUPPORTED {
            assert_eq!(flag, 0, "no representors: the NET filter is not supported either");
        }
        // Opens are counted per device: a second open succeeds and each close matches one.
        let mut again = ptr::null_mut();
        ok(doca_dev_open(by_name, &mut again));
        println!("second open of the same devinfo gives the same handle: {}", again == dev);
        ok(doca_dev_close(again));
        ok(doca_dev_close(dev));
        ok(doca_devinfo_destroy_list(list));
    }
}

/// Representors: on a host `doca_devinfo_rep_create_list` answers NOT_SUPPORTED; on a DPU
/// (or the soft provider with `DOCA_SOFT_ROLE=dpu`) a list whose every element answers its
/// getters and opens. Either way the answer is printed.
#[test]
fn representor_lists_are_not_supported_on_a_host_or_valid() {
    let dev = open_dev();
    // SAFETY: an open device, valid out-pointers and buffers of the documented sizes; list
    // elements are used only before their list is destroyed (or through an open rep).
    unsafe {
        let info = doca_dev_as_devinfo(dev);
        let (mut all_cap, mut net_cap, mut emu_cap) = (9u8, 9u8, 9u8);
        ok(doca_devinfo_rep_cap_is_filter_all_supported(info, &mut all_cap));
        ok(doca_devinfo_rep_cap_is_filter_net_supported(info, &mut net_cap));
        ok(doca_devinfo_rep_cap_is_filter_emulated_supported(info, &mut emu_cap));
        println!("representor filter caps: all {all_cap}, net {net_cap}, emulated {emu_cap}");
        for (fname, filter) in [("ALL", DOCA_DEVINFO_REP_FILTER_ALL), ("NET", DOCA_DEVINFO_REP_FILTER_NET)] {
            let (mut reps, mut n) = (ptr::null_mut(), 0u32);
            let r = doca_devinfo_rep_create_list(dev, filter as i32, &mut reps, &mut n);
            one_of(&format!("representor list, filter {fname}"), r, &[DOCA_SUCCESS, DOCA_ERROR_NOT_SUPPORTED]);
            if r != DOCA_SUCCESS {
                continue;
            }
            println!("  {n} representors");
            for i in 0..n as usize {
                let rep = *reps.add(i);
                let mut pci = [0 as c_char; DOCA_DEVINFO_REP_PCI_ADDR_SIZE];
                let mut vuid = [0 as c_char; DOCA_DEVINFO_REP_VUID_SIZE];
                ok(doca_devinfo_rep_get_pci_addr_str(rep, pci.as_mut_ptr()));
                ok(doca_devinfo_rep_get_vuid(rep, vuid.as_mut_ptr(), vuid.len() as u32));
                let mut ft = 99;
                ok(doca_devinfo_rep_get_pci_func_type(rep, &mut ft));
                println!("  rep {i}: pci {} vuid {} func type {ft}", cstr(&pci), cstr(&vuid));
                let mut eq = 9u8;
                ok(doca_devinfo_rep_is_equal_pci_addr(rep, pci.as_ptr(), &mut eq));
                assert_eq!(eq, 1, "a representor equals its own PCI address");
                let mut opened = ptr::null_mut();
                ok(doca_dev_rep_open(rep, &mut opened));
                assert!(!doca_dev_rep_as_devinfo(opened).is_null());
                ok(doca_dev_rep_close(opened));
            }
            ok(doca_devinfo_rep_destroy_list(reps));
        }
        ok(doca_dev_close(dev));
    }
}

/// An IDLE rdma ctx on a PE, with everything needed to start it.
struct Idle {
    dev: *mut doca_dev,
    pe: *mut doca_pe,
    rdma: *mut doca_rdma,
}

impl Idle {
    fn new() -> Idle {
        let dev = open_dev();
        let (mut pe, mut rdma) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: valid out-pointers, live device.
        unsafe {
            ok(doca_pe_create(&mut pe));
            ok(doca_rdma_create(dev, &mut rdma));
        }
        Idle { dev, pe, rdma }
    }

    fn ctx(&self) -> *mut doca_ctx {
        // SAFETY: live rdma.
        unsafe { doca_rdma_as_ctx(self.rdma) }
    }

    fn start(&self) {
        // SAFETY: live objects.
        unsafe {
            ok(doca_pe_connect_ctx(self.pe, self.ctx()));
            ok_or_in_progress(doca_ctx_start(self.ctx()));
        }
        progress_to(self.pe, self.ctx(), DOCA_CTX_STATE_RUNNING);
    }

    fn destroy(self) {
        if state(self.ctx()) != DOCA_CTX_STATE_IDLE {
            // SAFETY: live ctx.
            ok_or_in_progress(unsafe { doca_ctx_stop(self.ctx()) });
            progress_to(self.pe, self.ctx(), DOCA_CTX_STATE_IDLE);
        }
        // SAFETY: live objects, no task allocated.
        unsafe {
            ok(doca_rdma_destroy(self.rdma));
            ok(doca_pe_destroy(self.pe));
            ok(doca_dev_close(self.dev));
        }
    }
}

#[test]
fn rdma_properties_are_set_while_idle_and_read_back() {
    let s = Idle::new();
    let r = s.rdma;
    let (mut v32, mut v16, mut v8) = (0u32, 0u16, 0u8);
    // SAFETY: a live rdma and device; valid out-pointers.
    unsafe {
        let info = doca_dev_as_devinfo(s.dev);
        ok(doca_rdma_cap_transport_type_is_supported(info, DOCA_RDMA_TRANSPORT_TYPE_RC));
        ok(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_RC));
        ok(doca_rdma_get_transport_type(r, &mut v32));
        assert_eq!(v32, DOCA_RDMA_TRANSPORT_TYPE_RC);
        if doca_rdma_cap_transport_type_is_supported(info, DOCA_RDMA_TRANSPORT_TYPE_DC) != DOCA_SUCCESS {
            assert_ne!(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_DC), DOCA_SUCCESS);
        }
        let mut gids = 0u32;
        ok(doca_rdma_cap_get_gid_table_size(info, &mut gids));
        assert!(gids >= 1, "a port has at least one GID");
        let mut gid = doca_rdma_gid::default();
        ok(doca_rdma_cap_get_gid(info, 0, 1, &mut gid));
        println!("GID table: {gids} entries, [0] = {}", hex(&gid.raw));
        ok(doca_rdma_set_gid_index(r, 0));
        ok(doca_rdma_get_gid_index(r, &mut v32));
        assert_eq!(v32, 0);
        ok(doca_rdma_set_sl(r, 0));
        ok(doca_rdma_get_sl(r, &mut v32));
        assert_eq!(v32, 0);
        ok(doca_rdma_set_rnr_retry_count(r, 7));
        ok(doca_rdma_get_rnr_retry_count(r, &mut v8));
        assert_eq!(v8, 7);
        ok(doca_rdma_set_mtu(r, DOCA_MTU_SIZE_1K_BYTES));
        ok(doca_rdma_get_mtu(r, &mut v32));
        assert_eq!(v32, DOCA_MTU_SIZE_1K_BYTES);
        ok(doca_rdma_set_connection_request_timeout(r, 1500));
        ok(doca_rdma_get_connection_request_timeout(r, &mut v16));
        assert_eq!(v16, 1500);
        ok(doca_rdma_set_permissions(r, ALL_RDMA));
        ok(doca_rdma_get_permissions(r, &mut v32));
        assert_eq!(v32, ALL_RDMA);
        ok(doca_rdma_set_max_num_connections(r, 3));
        ok(doca_rdma_get_max_num_connections(r, &mut v16));
        assert_eq!(v16, 3);
        // Queue sizes: the size in use, a power of two at least as large as asked.
        let mut max_sq = 0u32;
        ok(doca_rdma_cap_get_max_send_queue_size(info, &mut max_sq));
        assert!(max_sq >= 64);
        ok(doca_rdma_set_send_queue_size(r, 50));
        ok(doca_rdma_get_send_queue_size(r, &mut v32));
        assert!(v32 >= 50 && v32.is_power_of_two(), "send queue size {v32}");
        let mut max_list = 0u32;
        ok(doca_rdma_cap_get_max_send_buf_list_len(info, &mut max_list));
        assert!(max_list >= 1);
        ok(doca_rdma_set_max_send_buf_list_len(r, max_list));
        ok(doca_rdma_get_max_send_buf_list_len(r, &mut v32));
        assert_eq!(v32, max_list);
        let mut max_msg = 0u32;
        ok(doca_rdma_cap_get_max_message_size(info, &mut max_msg));
        assert!(max_msg >= 1 << 20, "max message size {max_msg}");
        ok(doca_rdma_cap_task_write_is_supported(info));
        ok(doca_rdma_cap_task_read_is_supported(info));
        ok(doca_rdma_cap_task_send_is_supported(info));
        ok(doca_rdma_cap_task_receive_is_supported(info));
        ok(doca_rdma_cap_task_atomic_fetch_add_is_supported(info));
        ok(doca_rdma_cap_task_atomic_cmp_swp_is_supported(info));

        // Completion vectors: IDLE only, 0 .. n-1.
        let mut nvec = 0u32;
        ok(doca_ctx_cap_get_num_completion_vectors(info, &mut nvec));
        assert!(nvec >= 1);
        let vec_r = doca_ctx_set_completion_vector(s.ctx(), 0);
        one_of("completion vector 0", vec_r, &[DOCA_SUCCESS, DOCA_ERROR_NOT_SUPPORTED]);
        if vec_r == DOCA_SUCCESS {
            assert_ne!(doca_ctx_set_completion_vector(s.ctx(), nvec), DOCA_SUCCESS);
        }

        s.start();
        // Configuration after start: BAD_STATE; getters still answer.
        assert_eq!(doca_rdma_set_mtu(r, DOCA_MTU_SIZE_2K_BYTES), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_gid_index(r, 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_sl(r, 0), DOCA_ERROR_BAD_STATE);
        assert_eq!(doca_rdma_set_transport_type(r, DOCA_RDMA_TRANSPORT_TYPE_RC), DOCA_ERROR_BAD_STATE);
        if vec_r == DOCA_SUCCESS {
            assert_eq!(doca_ctx_set_completion_vector(s.ctx(), 0), DOCA_ERROR_BAD_STATE);
        }
        ok(doca_rdma_get_max_num_connections(r, &mut v16));
        assert_eq!(v16, 3);
    }
    s.destroy();
}

/// Submits a task we own; panics (after printing) on failure.
#[track_caller]
fn submit(t: *mut doca_task) {
    // SAFETY: a task of ours.
    ok(unsafe { doca_task_submit(t) });
}

#[track_caller]
fn one_kept(pes: &[*mut doca_pe]) -> *mut doca_task {
    assert!(run_until(pes, T, || rec_count() >= 1));
    let recs = take_recs();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].status, DOCA_SUCCESS, "{recs:?}");
    let kept = take_kept();
    assert_eq!(kept.len(), 1);
    kept[0]
}

#[test]
fn rdma_tasks_are_reused_with_their_setters_and_results_append() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    keep_tasks(true);
    a.mem()[0..4].copy_from_slice(b"abcd");
    a.mem()[8..12].copy_from_slice(b"efgh");
    let (src1, src2) = (a.buf(0, 4, 4), a.buf(8, 4, 4));
    let dst1 = a.rbuf(bm, base, 16, 0);
    let mut w = ptr::null_mut();
    // SAFETY: live objects; each task is ours between its callback and the next submit.
    unsafe {
        ok(doca_rdma_task_write_allocate_init(a.rdma, ca, src1, dst1, doca_data::from_u64(1), &mut w));
        assert_eq!(doca_rdma_task_write_get_src_buf(w), src1 as *const _);
        assert_eq!(doca_rdma_task_write_get_dst_buf(w), dst1);
        assert_eq!(doca_rdma_task_write_get_rdma_connection(w), ca as *const _);
        submit(doca_rdma_task_write_as_task(w));
        assert_eq!(one_kept(&[a.pe]), doca_rdma_task_write_as_task(w));
        // Same task, new source, destination not reset: the result lands after the first.
        doca_rdma_task_write_set_src_buf(w, src2);
        doca_task_set_user_data(doca_rdma_task_write_as_task(w), doca_data::from_u64(2));
        submit(doca_rdma_task_write_as_task(w));
        one_kept(&[a.pe]);
        assert_eq!(&b.mem()[0..8], b"abcdefgh");
        assert_eq!(data_len(dst1), 8);
        // A fresh destination.
        let dst2 = a.rbuf(bm, base + 100, 16, 0);
        doca_rdma_task_write_set_dst_buf(w, dst2);
        submit(doca_rdma_task_write_as_task(w));
        one_kept(&[a.pe]);
        assert_eq!(&b.mem()[100..104], b"efgh");
        doca_task_free(doca_rdma_task_write_as_task(w));

        // Read: the result length, then the same task again after resetting its destination.
        b.mem()[200..208].copy_from_slice(b"12345678");
        let rsrc = a.rbuf(bm, base + 200, 8, 8);
        // Room for exactly one result: the read fills the destination's free space.
        let rdst = a.buf(1000, 8, 0);
        let mut rd = ptr::null_mut();
        ok(doca_rdma_task_read_allocate_init(a.rdma, ca, rsrc, rdst, doca_data::from_u64(3), &mut rd));
        submit(doca_rdma_task_read_as_task(rd));
        one_kept(&[a.pe]);
        assert_eq!(doca_rdma_task_read_get_result_len(rd), 8);
        assert_eq!(&a.mem()[1000..1008], b"12345678");
        // Reset and read again into the same place.
        a.mem()[1000..1008].fill(0);
        ok(doca_buf_reset_data_len(rdst));
        submit(doca_rdma_task_read_as_task(rd));
        one_kept(&[a.pe]);
        assert_eq!(&a.mem()[1000..1008], b"12345678");
        assert_eq!(data_len(rdst), 8);
        doca_task_free(doca_rdma_task_read_as_task(rd));

        // Fetch-and-add with a new operand; the result buffer reset between runs.
        b.mem()[512..520].copy_from_slice(&10u64.to_ne_bytes());
        let ctr = a.rbuf(bm, base + 512, 8, 8);
        let res = a.buf(2000, 8, 0);
        let mut fa = ptr::null_mut();
        ok(doca_rdma_task_atomic_fetch_add_allocate_init(a.rdma, ca, ctr, res, 5, doca_data::from_u64(4), &mut fa));
        submit(doca_rdma_task_atomic_fetch_add_as_task(fa));
        one_kept(&[a.pe]);
        assert_eq!(a.u64_at(2000), 10);
        doca_rdma_task_atomic_fetch_add_set_add_data(fa, 7);
        assert_eq!(doca_rdma_task_atomic_fetch_add_get_add_data(fa), 7);
        // Without a reset the result buffer is full: if the library refuses the submit, the
        // task is still ours and works once the buffer is reset.
        let r = doca_task_submit(doca_rdma_task_atomic_fetch_add_as_task(fa));
        println!("fetch_add resubmitted into a full result buffer: {}", name(r));
        if r == DOCA_SUCCESS {
            one_kept(&[a.pe]);
        }
        ok(doca_buf_reset_data_len(res));
        let before = b.u64_at(512);
        submit(doca_rdma_task_atomic_fetch_add_as_task(fa));
        one_kept(&[a.pe]);
        assert_eq!(a.u64_at(2000), before);
        assert_eq!(b.u64_at(512), before + 7);
        doca_task_free(doca_rdma_task_atomic_fetch_add_as_task(fa));
    }
    keep_tasks(false);
    a.destroy();
    b.destroy();
}

#[test]
fn submit_ex_without_flush_completes_once_flushed() {
    let (a, b, ca, _cb) = pair(Cfg::default(), Cfg::default());
    let (bm, base) = a.import(&b.export_mem());
    a.mem()[0..3].copy_from_slice(b"one");
    a.mem()[8..11].copy_from_slice(b"two");
    let mut t = [ptr::null_mut(); 3];
    // SAFETY: live objects; the tasks are freed by the recording callbacks.
    unsafe {
        for (i, slot) in t.iter_mut().enumerate() {
            let (src, dst) = (a.buf(i * 8, 3, 3), a.rbuf(bm, base + i * 16, 16, 0));
            ok(doca_rdma_task_write_allocate_init(a.rdma, ca, src, dst, doca_data::from_u64(i as u64), slot));
        }
        // Held until a flush: doca_ctx_flush_tasks...
        ok(doca_task_submit_ex(doca_rdma_task_write_as_task(t[0]), DOCA_TASK_SUBMIT_FLAG_NONE));
        doca_ctx_flush_tasks(a.ctx());
        // ...or a flushed submit, which pushes the earlier unflushed task first.
        ok(doca_task_submit_ex(doca_rdma_task_write_as_task(t[1]), DOCA_TASK_SUBMIT_FLAG_OPTIMIZE_REPORTS));
        ok(doca_task_submit_ex(doca_rdma_task_write_as_task(t[2]), DOCA_TASK_SUBMIT_FLAG_FLUSH));
    }
    assert!(run_until(&[a.pe], T, || rec_count() >= 3));
    let recs = take_recs();
    assert!(recs.iter().all(|r| r.status == DOCA_SUCCESS), "{recs:?}");
    assert_eq!(recs.iter().map(|r| r.ud).collect::<Vec<_>>(), [0, 1, 2], "completions in submission order");
    assert_eq!(&b.mem()[0..3], b"one");
    assert_eq!(&b.mem()[16..19], b"two");
    a.destroy();
    b.destroy();
}

thread_local! {
    static SE_DONE: std::cell::RefCell<Vec<(u64, doca_error_t)>> = const { std::cell::RefCell::new(Vec::new()) };
}

unsafe extern "C" fn se_add_done(t: *mut doca_sync_event_task_notify_add, ud: doca_data, _cud: doca_data) {
    // SAFETY: a live task handed back by the PE; kept (not freed) for re-use.
    let st = unsafe { doca_task_get_status(doca_sync_event_task_notify_add_as_doca_task(t)) };
    SE_DONE.with(|d| d.borrow_mut().push((ud.as_u64(), st)));
}

unsafe extern "C" fn se_get_done(t: *mut doca_sync_event_task_get, ud: doca_data, _cud: doca_data) {
    // SAFETY: as above.
    let st = unsafe { doca_task_get_status(doca_sync_event_task_get_as_doca_task(t)) };
    SE_DONE.with(|d| d.borrow_mut().push((ud.as_u64(), st)));
}

#[test]
fn sync_event_tasks_are_reused_through_their_setters() {
    let dev = open_dev();
    let (mut pe, mut ev) = (ptr::null_mut(), ptr::null_mut());
    let (mut fetched, mut other, mut got) = (0u64, 0u64, 0u64);
    let (mut add, mut get) = (ptr::null_mut(), ptr::null_mut());
    let wait = |n: usize, pe: *mut doca_pe| {
        assert!(run_until(&[pe], T, || SE_DONE.with(|d| d.borrow().len()) >= n));
        let done = SE_DONE.with(|d| std::mem::take(&mut *d.borrow_mut()));
        assert!(done.iter().all(|&(_, st)| st == DOCA_SUCCESS), "{done:?}");
    };
    // SAFETY: live objects and valid pointers; the tasks are ours between callback and submit.
    unsafe {
        ok(doca_pe_create(&mut pe));
        ok(doca_sync_event_create(&mut ev));
        ok(doca_sync_event_add_publisher_location_cpu(ev, dev));
        ok(doca_sync_event_add_subscriber_location_cpu(ev, dev));
        ok(doca_sync_event_task_notify_add_set_conf(ev, Some(se_add_done), Some(se_add_done), 1));
        ok(doca_sync_event_task_get_set_conf(ev, Some(se_get_done), Some(se_get_done), 1));
        let ctx = doca_sync_event_as_ctx(ev);
        ok(doca_pe_connect_ctx(pe, ctx));
        ok_or_in_progress(doca_ctx_start(ctx));
        progress_to(pe, ctx, DOCA_CTX_STATE_RUNNING);
        ok(doca_sync_event_task_notify_add_alloc_init(ev, 2, &mut fetched, doca_data::from_u64(1), &mut add));
        ok(doca_sync_event_task_get_alloc_init(ev, &mut got, doca_data::from_u64(2), &mut get));
        assert_eq!(doca_sync_event_task_notify_add_get_inc_val(add), 2);
        assert_eq!(doca_sync_event_task_get_get_ret_val_ptr(get), &mut got as *mut u64);
        submit(doca_sync_event_task_notify_add_as_doca_task(add));
        wait(1, pe);
        assert_eq!(fetched, 0);
        // The same task with a new increment and a new place for the old value.
        doca_sync_event_task_notify_add_set_inc_val(add, 40);
        doca_sync_event_task_notify_add_set_fetched_val_ptr(add, &mut other);
        assert_eq!(doca_sync_event_task_notify_add_get_fetched_val_ptr(add), &mut other as *mut u64);
        submit(doca_sync_event_task_notify_add_as_doca_task(add));
        wait(1, pe);
        assert_eq!(other, 2);
        submit(doca_sync_event_task_get_as_doca_task(get));
        wait(1, pe);
        assert_eq!(got, 42);
        doca_task_free(doca_sync_event_task_notify_add_as_doca_task(add));
        doca_task_free(doca_sync_event_task_get_as_doca_task(get));
        ok_or_in_progress(doca_ctx_stop(ctx));
        progress_to(pe, ctx, DOCA_CTX_STATE_IDLE);
        ok(doca_sync_event_destroy(ev));
        ok(doca_pe_destroy(pe));
        ok(doca_dev_close(dev));
    }
}
