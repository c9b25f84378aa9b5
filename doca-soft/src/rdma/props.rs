//! RDMA context properties (`doca_rdma_set_*` / `doca_rdma_get_*`) and device capabilities
//! (`doca_rdma_cap_*`).
//!
//! # What the soft provider does with them
//!
//! The soft transport has no wire: messages go through shared-memory rings and one-sided
//! operations through the imported mmap (see the parent module). So the link-level
//! properties — transport type, MTU, GRH, GID index, service level, RNR retry count,
//! connection-request timeout — are **stored, validated and read back** exactly as DOCA
//! describes them, and change nothing about how data moves. Each setter works only while the
//! ctx is IDLE (`DOCA_ERROR_BAD_STATE` otherwise); getters work in any state.
//!
//! The limits, in contrast, are the ones the soft provider *enforces*, and the capability
//! queries report exactly those:
//!
//! | capability | answer | enforced where |
//! |---|---|---|
//! | max send / receive queue size | [`MAX_QUEUE_SIZE`] | `set_*_queue_size`; the sizes bound in-flight sends / posted receives |
//! | max message size | [`MAX_MESSAGE_BYTES`] | submit: `DOCA_ERROR_TOO_BIG` |
//! | max send buf list len, receive dst buf list len | [`MAX_BUF_LIST_LEN`] (1 until set) | submit: a longer list is `DOCA_ERROR_INVALID_VALUE` |
//! | GID table | four entries, laid out as a RoCE port with one IPv4 address: `fe80::1` (RoCE v1, v2), `::ffff:127.0.0.1` (RoCE v1, v2) | the GID index selects nothing on the soft data path; the table's addresses all name this host (`addr.rs`) |
//! | transports | RC only; DC: `DOCA_ERROR_NOT_SUPPORTED` | |
//! | every task type of `doca_rdma.h` (the eight data tasks and the three remote-net sync event tasks) | supported | |

use core::ptr;

use super::{configure, doca_rdma, rdma_ref, MAX_MESSAGE_BYTES, MAX_QUEUE_SIZE};
use crate::dev::{devinfo_ref, doca_devinfo};
use crate::ffi::{guard_err, out};
use crate::types::*;

/// The MTU reported before any is set: 4 KiB, the largest IB MTU (the soft transport does
/// not packetise, so no smaller unit would describe it better).
pub(crate) const DEFAULT_MTU: doca_mtu_size = DOCA_MTU_SIZE_4K_BYTES;
/// The RNR retry count before any is set: 7, which in InfiniBand means "retry forever" (the
/// soft transport never drops a message for lack of a posted receive; it waits).
pub(crate) const DEFAULT_RNR_RETRY: u8 = 7;
/// Largest RNR retry count (a 3-bit field in InfiniBand).
pub(crate) const MAX_RNR_RETRY: u8 = 7;
/// Largest service level (a 4-bit field in InfiniBand).
pub(crate) const MAX_SL: u32 = 15;
/// The connection-request timeout before any is set, in milliseconds. It only matters to
/// connection establishment by address (`cm.rs`: the handshake deadline).
pub(crate) const DEFAULT_CONN_REQUEST_TIMEOUT_MS: u16 = 5000;
/// Longest buffer list an RDMA task may be configured to take where DOCA accepts lists
/// (`max_send_buf_list_len`, the receive's `dst_buf_list_len`; both 1 until set). A software
/// choice: the engine walks a list once per operation (`tasks.rs`, `check_list`).
pub(crate) const MAX_BUF_LIST_LEN: u32 = 16;
/// The soft device's GID table, laid out as a ConnectX RoCE port with one IPv4 address lists
/// it: a link-local GID, then the IPv4-mapped address, each once for RoCE v1 and once for v2.
/// Programs pick an index with `-g` (NVIDIA's RDMA samples; 3 is RoCE v2 over IPv4 on such a
/// port), so every index such a port has is valid here. The soft device reaches only this host:
/// its link-local GID is `fe80::1` and its address the loopback, both of which name this host
/// for connection management (`addr.rs`); the index selects nothing on the data path.
pub(crate) const GID_TABLE: [doca_rdma_gid; 4] = [LINK_LOCAL_GID, LINK_LOCAL_GID, LOOPBACK_GID, LOOPBACK_GID];
const LINK_LOCAL_GID: doca_rdma_gid = doca_rdma_gid { raw: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1] };
const LOOPBACK_GID: doca_rdma_gid = doca_rdma_gid { raw: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1] };

/// Whether `ip` is one of the soft device's GIDs (all of which name this host).
pub(crate) fn is_soft_gid(ip: std::net::Ipv6Addr) -> bool {
    GID_TABLE.iter().any(|g| g.raw == ip.octets())
}

/// Reads a property of a live rdma into `dst` (any ctx state).
///
/// # Safety
/// `rdma` NULL or a live rdma; `dst` NULL or writable.
unsafe fn get<T>(rdma: *const doca_rdma, dst: *mut T, f: impl FnOnce(&doca_rdma) -> T) -> doca_error_t {
    guard_err(|| {
        // SAFETY: per the contract.
        let r = unsafe { rdma_ref(rdma) }?;
        // SAFETY: per the contract (NULL is refused by `out`).
        unsafe { out(dst, f(r)) }
    })
}

/// Runs a setter on an IDLE rdma (BAD_STATE otherwise).
///
/// # Safety
/// `rdma` NULL or a live rdma.
unsafe fn set(rdma: *mut doca_rdma, f: impl FnOnce(&doca_rdma) -> Result<(), doca_error_t>) -> doca_error_t {
    // SAFETY: per the contract.
    guard_err(|| unsafe { configure(rdma, f) })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_transport_type(
    rdma: *mut doca_rdma,
    transport_type: doca_rdma_transport_type,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| match transport_type {
            DOCA_RDMA_TRANSPORT_TYPE_RC => {
                r.transport.set(transport_type);
                Ok(())
            }
            // NOT_SUPPORTED, reason: the soft provider implements reliable connections only;
            // dynamically connected transport needs a hardware DC target.
            DOCA_RDMA_TRANSPORT_TYPE_DC => Err(crate::sdk_fail!(
                DOCA_ERROR_NOT_SUPPORTED,
                "doca_rdma_set_transport_type: the soft provider implements reliable connections (RC) only"
            )),
            _ => Err(DOCA_ERROR_INVALID_VALUE),
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_transport_type(
    rdma: *const doca_rdma,
    transport_type: *mut doca_rdma_transport_type,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, transport_type, |r| r.transport.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_mtu(rdma: *mut doca_rdma, mtu: doca_mtu_size) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            // RAW_ETHERNET is reserved: not an RDMA path MTU.
            if mtu > DOCA_MTU_SIZE_4K_BYTES {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            r.mtu.set(mtu);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_mtu(rdma: *const doca_rdma, mtu: *mut doca_mtu_size) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, mtu, |r| r.mtu.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_permissions(rdma: *mut doca_rdma, permissions: *mut u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, permissions, |r| r.perms.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_grh_enabled(rdma: *mut doca_rdma, grh_enabled: u8) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            if grh_enabled == 0 {
                // NOT_SUPPORTED, reason: the soft device is an Ethernet-like port without
                // LIDs (doca_devinfo_get_lid answers NOT_SUPPORTED), so GRH (GID) addressing
                // is the only one it has; DOCA requires GRH on Ethernet ports too.
                return Err(crate::sdk_fail!(
                    DOCA_ERROR_NOT_SUPPORTED,
                    "doca_rdma_set_grh_enabled: the soft device addresses by GID only; GRH cannot be off"
                ));
            }
            r.grh.set(1);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_grh_enabled(rdma: *const doca_rdma, grh_enabled: *mut u8) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, grh_enabled, |r| r.grh.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_gid_index(rdma: *mut doca_rdma, gid_index: u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            if gid_index as usize >= GID_TABLE.len() {
                return Err(crate::sdk_fail!(
                    DOCA_ERROR_INVALID_VALUE,
                    "doca_rdma_set_gid_index: index {gid_index} is beyond the soft device's GID table of {} entries",
                    GID_TABLE.len()
                ));
            }
            r.gid_index.set(gid_index);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_gid_index(rdma: *const doca_rdma, gid_index: *mut u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, gid_index, |r| r.gid_index.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_sl(rdma: *mut doca_rdma, sl: u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            if sl > MAX_SL {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            r.sl.set(sl);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_sl(rdma: *const doca_rdma, sl: *mut u32) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, sl, |r| r.sl.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_rnr_retry_count(rdma: *mut doca_rdma, rnr_retry_count: u8) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            if rnr_retry_count > MAX_RNR_RETRY {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            r.rnr_retry.set(rnr_retry_count);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_rnr_retry_count(
    rdma: *const doca_rdma,
    rnr_retry_count: *mut u8,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, rnr_retry_count, |r| r.rnr_retry.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_connection_request_timeout(rdma: *mut doca_rdma, timeout: u16) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            if timeout == 0 {
                return Err(DOCA_ERROR_INVALID_VALUE);
            }
            r.conn_request_timeout_ms.set(timeout);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_connection_request_timeout(
    rdma: *const doca_rdma,
    timeout: *mut u16,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, timeout, |r| r.conn_request_timeout_ms.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_max_num_connections(
    rdma: *mut doca_rdma,
    max_num_connections: *mut u16,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, max_num_connections, |r| r.max_conns.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_send_queue_size(
    rdma: *const doca_rdma,
    send_queue_size: *mut u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, send_queue_size, |r| r.sq_size.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_recv_queue_size(
    rdma: *const doca_rdma,
    recv_queue_size: *mut u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, recv_queue_size, |r| r.rq_size.get()) }
}

/// A buffer-list length: 1 ..= [`MAX_BUF_LIST_LEN`].
fn buf_list_len(n: u32) -> Result<u32, doca_error_t> {
    if n == 0 || n > MAX_BUF_LIST_LEN {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(n)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_set_max_send_buf_list_len(
    rdma: *mut doca_rdma,
    max_send_buf_list_len: u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            r.send_buf_list_len.set(buf_list_len(max_send_buf_list_len)?);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_max_send_buf_list_len(
    rdma: *const doca_rdma,
    max_send_buf_list_len: *mut u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, max_send_buf_list_len, |r| r.send_buf_list_len.get()) }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_set_dst_buf_list_len(
    rdma: *mut doca_rdma,
    buf_list_len: u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe {
        set(rdma, |r| {
            r.recv_buf_list_len.set(self::buf_list_len(buf_list_len)?);
            Ok(())
        })
    }
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_task_receive_get_dst_buf_list_len(
    rdma: *const doca_rdma,
    buf_list_len: *mut u32,
) -> doca_error_t {
    // SAFETY: forwarded contract.
    unsafe { get(rdma, buf_list_len, |r| r.recv_buf_list_len.get()) }
}

// ---- GPU / DPA data paths: none in the soft provider ----

/// `struct doca_gpu_dev_rdma` (opaque; the soft provider never produces one).
#[repr(C)]
pub struct doca_gpu_dev_rdma {
    _opaque: [u8; 0],
}

/// `struct doca_dpa_completion` (opaque; the soft provider never produces one).
#[repr(C)]
pub struct doca_dpa_completion {
    _opaque: [u8; 0],
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_dpa_handle(
    rdma: *mut doca_rdma,
    dpa_rdma: *mut doca_dpa_dev_rdma_t,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { rdma_ref(rdma) }?;
        if dpa_rdma.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: the soft provider has no DPA (no data path on a DPA).
        Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "doca_rdma_get_dpa_handle: the soft provider has no DPA"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_get_gpu_handle(
    rdma: *mut doca_rdma,
    gpu_rdma: *mut *mut doca_gpu_dev_rdma,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { rdma_ref(rdma) }?;
        if gpu_rdma.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: the soft provider has no GPU data path.
        Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "doca_rdma_get_gpu_handle: the soft provider has no GPU"))
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_dpa_completion_attach(
    rdma: *mut doca_rdma,
    dpa_comp: *mut doca_dpa_completion,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        unsafe { rdma_ref(rdma) }?;
        if dpa_comp.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // NOT_SUPPORTED, reason: the soft provider has no DPA, so no DPA completion exists.
        Err(crate::sdk_fail!(DOCA_ERROR_NOT_SUPPORTED, "doca_rdma_dpa_completion_attach: the soft provider has no DPA"))
    })
}

// ---- capabilities ----

/// Writes a capability of a valid devinfo.
fn cap<T>(devinfo: *const doca_devinfo, dst: *mut T, v: T) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        // SAFETY: the caller's contract makes a non-NULL `dst` writable; NULL is refused.
        unsafe { out(dst, v) }
    })
}

/// SUCCESS for a valid devinfo (a capability the soft device has).
fn supported(devinfo: *const doca_devinfo) -> doca_error_t {
    guard_err(|| devinfo_ref(devinfo).map(|_| ()))
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_get_max_recv_queue_size(
    devinfo: *const doca_devinfo,
    max_recv_queue_size: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_recv_queue_size, MAX_QUEUE_SIZE)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_get_max_send_queue_size(
    devinfo: *const doca_devinfo,
    max_send_queue_size: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_send_queue_size, MAX_QUEUE_SIZE)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_get_max_send_buf_list_len(
    devinfo: *const doca_devinfo,
    max_send_buf_list_len: *mut u32,
) -> doca_error_t {
    cap(devinfo, max_send_buf_list_len, MAX_BUF_LIST_LEN)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_get_max_message_size(
    devinfo: *const doca_devinfo,
    max_message_size: *mut u32,
) -> doca_error_t {
    const _: () = assert!(MAX_MESSAGE_BYTES <= u32::MAX as usize);
    cap(devinfo, max_message_size, MAX_MESSAGE_BYTES as u32)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_get_gid_table_size(
    devinfo: *const doca_devinfo,
    gid_table_size: *mut u32,
) -> doca_error_t {
    cap(devinfo, gid_table_size, GID_TABLE.len() as u32)
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_get_gid(
    devinfo: *const doca_devinfo,
    start_index: u32,
    num_entries: u32,
    gid_array: *mut doca_rdma_gid,
) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        let end = (start_index as usize).checked_add(num_entries as usize).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        if gid_array.is_null() || num_entries == 0 || end > GID_TABLE.len() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller's array holds `num_entries` GIDs (DOCA contract); the source range
        // was checked to lie inside the table; a caller array cannot overlap our constant.
        unsafe {
            ptr::copy_nonoverlapping(GID_TABLE[start_index as usize..end].as_ptr(), gid_array, num_entries as usize)
        };
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_transport_type_is_supported(
    devinfo: *const doca_devinfo,
    transport_type: doca_rdma_transport_type,
) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        match transport_type {
            DOCA_RDMA_TRANSPORT_TYPE_RC => Ok(()),
            // NOT_SUPPORTED, reason: reliable connections only (no DC target in software).
            DOCA_RDMA_TRANSPORT_TYPE_DC => Err(DOCA_ERROR_NOT_SUPPORTED),
            _ => Err(DOCA_ERROR_INVALID_VALUE),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_cap_task_receive_get_max_dst_buf_list_len(
    devinfo: *const doca_devinfo,
    transport_type: doca_rdma_transport_type,
    max_buf_list_len: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        devinfo_ref(devinfo)?;
        match transport_type {
            DOCA_RDMA_TRANSPORT_TYPE_RC => {}
            // NOT_SUPPORTED, reason: reliable connections only (no DC target in software).
            DOCA_RDMA_TRANSPORT_TYPE_DC => return Err(DOCA_ERROR_NOT_SUPPORTED),
            _ => return Err(DOCA_ERROR_INVALID_VALUE),
        }
        // SAFETY: as in `cap`.
        unsafe { out(max_buf_list_len, MAX_BUF_LIST_LEN) }
    })
}

macro_rules! task_supported {
    ($($name:ident),* $(,)?) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name(devinfo: *const doca_devinfo) -> doca_error_t {
            supported(devinfo)
        }
    )*};
}

task_supported!(
    doca_rdma_cap_task_receive_is_supported,
    doca_rdma_cap_task_send_is_supported,
    doca_rdma_cap_task_send_imm_is_supported,
    doca_rdma_cap_task_read_is_supported,
    doca_rdma_cap_task_write_is_supported,
    doca_rdma_cap_task_write_imm_is_supported,
    doca_rdma_cap_task_atomic_cmp_swp_is_supported,
    doca_rdma_cap_task_atomic_fetch_add_is_supported,
);
