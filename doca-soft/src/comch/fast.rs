//! The Comch fast path (`doca_comch_consumer.h`, `doca_comch_producer.h`): declared, not
//! implemented.
//!
//! NVIDIA's comch sample build compiles the fast path's common file into every comch sample,
//! the control-path ones included, so without these symbols none of them links. What the soft
//! provider answers:
//!
//! * `*_cap_is_supported`: `DOCA_ERROR_NOT_SUPPORTED`, so a program that checks the device
//!   (as NVIDIA's do) learns it before creating anything; the `*_cap_get_max_*` queries answer
//!   the same (after the usual argument checks).
//! * `*_create`: `DOCA_ERROR_NOT_SUPPORTED` with an SDK log line saying why.
//! * Everything that takes a consumer, a producer or one of their tasks: since none can exist,
//!   any pointer is refused (`DOCA_ERROR_INVALID_VALUE`), and the accessors without a status
//!   answer NULL or 0 and change nothing.
//!
//! What implementing it needs (see the closing notes of issue 14): per-consumer receive
//! credits visible to the peer's producers (a send finding none answers `DOCA_ERROR_AGAIN` at
//! submit, as NVIDIA's samples expect), a data path from a producer's buffer into a consumer's
//! posted buffer across processes, and the new/expired consumer events through the
//! connection's server or client.

use crate::dev::doca_devinfo;
use crate::ffi::guard_err;
use crate::types::*;

/// `struct doca_comch_consumer` (never created by this provider).
#[repr(C)]
pub struct doca_comch_consumer {
    _opaque: [u8; 0],
}

/// `struct doca_comch_producer` (never created by this provider).
#[repr(C)]
pub struct doca_comch_producer {
    _opaque: [u8; 0],
}

/// `struct doca_comch_consumer_task_post_recv` (never created by this provider).
#[repr(C)]
pub struct doca_comch_consumer_task_post_recv {
    _opaque: [u8; 0],
}

/// `struct doca_comch_producer_task_send` (never created by this provider).
#[repr(C)]
pub struct doca_comch_producer_task_send {
    _opaque: [u8; 0],
}

const WHY: &str = "the soft provider does not implement the comch consumer/producer fast path \
                   (doca_comch_consumer.h, doca_comch_producer.h); use comch send tasks, or RDMA";

/// The answer of a capability query: the arguments are checked, then NOT_SUPPORTED.
fn cap<T>(devinfo: *const doca_devinfo, out: *mut T) -> doca_error_t {
    if devinfo.is_null() || out.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    DOCA_ERROR_NOT_SUPPORTED
}

/// A create: NOT_SUPPORTED with the reason logged (after the argument checks).
fn create<C, O>(conn: *mut C, out: *mut *mut O, name: &str) -> doca_error_t {
    guard_err(|| {
        if conn.is_null() || out.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "{name}: {WHY}"))
    })
}

// ---- consumer ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_create(
    comch_connection: *mut doca_comch_connection,
    buf_mmap: *mut crate::mmap::doca_mmap,
    consumer: *mut *mut doca_comch_consumer,
) -> doca_error_t {
    if buf_mmap.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    create(comch_connection, consumer, "doca_comch_consumer_create")
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_destroy(_consumer: *mut doca_comch_consumer) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_as_ctx(_consumer: *mut doca_comch_consumer) -> *mut doca_ctx {
    core::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_get_id(
    _consumer: *const doca_comch_consumer,
    _id: *mut u32,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    if devinfo.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    DOCA_ERROR_NOT_SUPPORTED
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_num_tasks(
    devinfo: *const doca_devinfo,
    max_num_tasks: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_num_tasks)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_buf_size(
    devinfo: *const doca_devinfo,
    max_buf_size: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_buf_size)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_buf_list_len(
    devinfo: *const doca_devinfo,
    max_buf_list_len: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_buf_list_len)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_consumers(
    devinfo: *const doca_devinfo,
    max_consumers: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_consumers)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_cap_get_max_imm_data_len(
    devinfo: *const doca_devinfo,
    max_imm_data_len: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_imm_data_len)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_set_imm_data_len(
    _consumer: *mut doca_comch_consumer,
    _imm_data_len: u32,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_get_imm_data_len(
    _consumer: *const doca_comch_consumer,
    _imm_data_len: *mut u32,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_set_conf(
    _consumer: *mut doca_comch_consumer,
    _task_completion_cb: doca_comch_consumer_task_post_recv_completion_cb_t,
    _task_error_cb: doca_comch_consumer_task_post_recv_completion_cb_t,
    _num_post_recv_tasks: u32,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_alloc_init(
    _consumer: *mut doca_comch_consumer,
    _buf: *mut crate::buf::doca_buf,
    _task: *mut *mut doca_comch_consumer_task_post_recv,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_buf(
    _task: *const doca_comch_consumer_task_post_recv,
) -> *mut crate::buf::doca_buf {
    core::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_set_buf(
    _task: *mut doca_comch_consumer_task_post_recv,
    _buf: *mut crate::buf::doca_buf,
) {
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_producer_id(
    _task: *const doca_comch_consumer_task_post_recv,
) -> u32 {
    0
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_imm_data(
    _task: *const doca_comch_consumer_task_post_recv,
) -> *const u8 {
    core::ptr::null()
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_get_imm_data_len(
    _task: *const doca_comch_consumer_task_post_recv,
) -> u32 {
    0
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_consumer_task_post_recv_as_task(
    _task: *mut doca_comch_consumer_task_post_recv,
) -> *mut doca_task {
    core::ptr::null_mut()
}

// ---- producer ----

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_create(
    comch_connection: *mut doca_comch_connection,
    producer: *mut *mut doca_comch_producer,
) -> doca_error_t {
    create(comch_connection, producer, "doca_comch_producer_create")
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_destroy(_producer: *mut doca_comch_producer) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_as_ctx(_producer: *mut doca_comch_producer) -> *mut doca_ctx {
    core::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_get_id(
    _producer: *const doca_comch_producer,
    _id: *mut u32,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_is_supported(devinfo: *const doca_devinfo) -> doca_error_t {
    if devinfo.is_null() {
        return DOCA_ERROR_INVALID_VALUE;
    }
    DOCA_ERROR_NOT_SUPPORTED
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_num_tasks(
    devinfo: *const doca_devinfo,
    max_num_tasks: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_num_tasks)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_buf_size(
    devinfo: *const doca_devinfo,
    max_buf_size: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_buf_size)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_buf_list_len(
    devinfo: *const doca_devinfo,
    max_buf_list_len: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_buf_list_len)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_cap_get_max_producers(
    devinfo: *const doca_devinfo,
    max_producers: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_producers)
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_conf(
    _producer: *mut doca_comch_producer,
    _task_completion_cb: doca_comch_producer_task_send_completion_cb_t,
    _task_error_cb: doca_comch_producer_task_send_completion_cb_t,
    _num_send_tasks: u32,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_alloc_init(
    _producer: *mut doca_comch_producer,
    _buf: *const crate::buf::doca_buf,
    _imm_data: *mut u8,
    _imm_data_len: u32,
    _consumer_id: u32,
    _task: *mut *mut doca_comch_producer_task_send,
) -> doca_error_t {
    DOCA_ERROR_INVALID_VALUE
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_buf(
    _task: *const doca_comch_producer_task_send,
) -> *const crate::buf::doca_buf {
    core::ptr::null()
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_buf(
    _task: *mut doca_comch_producer_task_send,
    _buf: *const crate::buf::doca_buf,
) {
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_consumer_id(
    _task: *const doca_comch_producer_task_send,
) -> u32 {
    0
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_consumer_id(
    _task: *mut doca_comch_producer_task_send,
    _consumer_id: u32,
) {
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_imm_data(
    _task: *const doca_comch_producer_task_send,
) -> *mut u8 {
    core::ptr::null_mut()
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_get_imm_data_len(
    _task: *const doca_comch_producer_task_send,
) -> u32 {
    0
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_set_imm_data(
    _task: *mut doca_comch_producer_task_send,
    _imm_data: *mut u8,
    _imm_data_len: u32,
) {
}

#[no_mangle]
pub unsafe extern "C" fn doca_comch_producer_task_send_as_task(
    _task: *mut doca_comch_producer_task_send,
) -> *mut doca_task {
    core::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::dev::test_open_default;
    use core::ptr;

    #[test]
    fn the_fast_path_is_declared_and_answers_not_supported() {
        let dev = test_open_default();
        // SAFETY: a live device, valid out-pointers, deliberate NULLs.
        unsafe {
            let info = crate::dev::doca_dev_as_devinfo(dev);
            let mut v = 7u32;
            assert_eq!(doca_comch_consumer_cap_is_supported(info), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_comch_producer_cap_is_supported(info), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_comch_consumer_cap_is_supported(ptr::null()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(doca_comch_consumer_cap_get_max_num_tasks(info, &mut v), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_comch_producer_cap_get_max_producers(info, &mut v), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_comch_producer_cap_get_max_buf_size(info, ptr::null_mut()), DOCA_ERROR_INVALID_VALUE);
            assert_eq!(v, 7, "nothing written");
            // A connection pointer is never dereferenced by a create that cannot succeed.
            let fake = ptr::NonNull::<doca_comch_connection>::dangling().as_ptr();
            let (mut c, mut p) = (ptr::null_mut(), ptr::null_mut());
            let m = ptr::NonNull::<crate::mmap::doca_mmap>::dangling().as_ptr();
            assert_eq!(doca_comch_consumer_create(fake, m, &mut c), DOCA_ERROR_NOT_SUPPORTED);
            assert_eq!(doca_comch_producer_create(fake, &mut p), DOCA_ERROR_NOT_SUPPORTED);
            assert!(c.is_null() && p.is_null());
            assert_eq!(doca_comch_producer_create(ptr::null_mut(), &mut p), DOCA_ERROR_INVALID_VALUE);
            assert!(doca_comch_consumer_as_ctx(ptr::null_mut()).is_null());
            assert!(doca_comch_producer_task_send_as_task(ptr::null_mut()).is_null());
            assert_eq!(crate::dev::doca_dev_close(dev), DOCA_SUCCESS);
        }
    }
}
