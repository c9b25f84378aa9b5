// Value types of the DOCA 3.x C ABI: error codes, `doca_data`, enums, flags, callback types.
//
// This file is the single definition of the ABI's value types. `doca-sys` includes it to
// declare the API; `doca-soft` includes it (with `include!`) to implement the same API, so
// the two sides cannot drift apart and no crate cycle is needed (doca-sys depends on
// doca-soft to link it). The including module must have the opaque object types that the
// callback types name (`doca_task`, `doca_ctx`, the sync event and RDMA task types) in scope.
//
// Written by hand from the interface facts (names, argument order, numeric values); no
// NVIDIA header was copied.

use core::ffi::{c_int, c_void};

/// `DOCA_VERSION_MAJOR` of the DOCA API these declarations describe (3.0.0058).
pub const DOCA_VERSION_MAJOR: usize = 3;
/// `DOCA_VERSION_MINOR`.
pub const DOCA_VERSION_MINOR: usize = 0;
/// `DOCA_VERSION_PATCH`: the build number of the release.
pub const DOCA_VERSION_PATCH: usize = 58;
/// `DOCA_VERSION_STRING`, NUL-terminated for C.
pub const DOCA_VERSION_STRING: &core::ffi::CStr = c"3.0.0058";

/// `DOCA_VERSION_CALC_EXACT`: `major << 24 | minor << 16 | patch`, the form versioned structs
/// carry in their first member (`__doca_api_version`).
pub const fn doca_version_calc_exact(major: usize, minor: usize, patch: usize) -> usize {
    (major << 24) | (minor << 16) | patch
}

/// `DOCA_VERSION_EXACT` of 3.0.0058: `0x0300003A`. `DOCA_STRUCT_CTOR` stamps it.
pub const DOCA_VERSION_EXACT: usize = doca_version_calc_exact(DOCA_VERSION_MAJOR, DOCA_VERSION_MINOR, DOCA_VERSION_PATCH);

/// `DOCA_VERSION_CALC`: the comparison form, the patch multiplied by 1000.
pub const fn doca_version_calc(major: usize, minor: usize, patch: usize) -> usize {
    (major << 24) | (minor << 16) | (patch * 1000)
}

/// `DOCA_VERSION_OFFICIAL` of 3.0.0058: `0x0300E290`.
pub const DOCA_VERSION_OFFICIAL: usize = doca_version_calc(DOCA_VERSION_MAJOR, DOCA_VERSION_MINOR, DOCA_VERSION_PATCH);

/// A DOCA status code (`doca_error_t`, an int-sized C enum).
///
/// Modelled as a transparent integer, never as a Rust enum: a newer library may return a
/// value this crate does not know, and an unknown discriminant in a Rust enum would be
/// undefined behaviour.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct doca_error_t(pub c_int);

pub const DOCA_SUCCESS: doca_error_t = doca_error_t(0);
pub const DOCA_ERROR_UNKNOWN: doca_error_t = doca_error_t(1);
pub const DOCA_ERROR_NOT_PERMITTED: doca_error_t = doca_error_t(2);
pub const DOCA_ERROR_IN_USE: doca_error_t = doca_error_t(3);
pub const DOCA_ERROR_NOT_SUPPORTED: doca_error_t = doca_error_t(4);
pub const DOCA_ERROR_AGAIN: doca_error_t = doca_error_t(5);
pub const DOCA_ERROR_INVALID_VALUE: doca_error_t = doca_error_t(6);
pub const DOCA_ERROR_NO_MEMORY: doca_error_t = doca_error_t(7);
pub const DOCA_ERROR_INITIALIZATION: doca_error_t = doca_error_t(8);
pub const DOCA_ERROR_TIME_OUT: doca_error_t = doca_error_t(9);
pub const DOCA_ERROR_SHUTDOWN: doca_error_t = doca_error_t(10);
pub const DOCA_ERROR_CONNECTION_RESET: doca_error_t = doca_error_t(11);
pub const DOCA_ERROR_CONNECTION_ABORTED: doca_error_t = doca_error_t(12);
pub const DOCA_ERROR_CONNECTION_INPROGRESS: doca_error_t = doca_error_t(13);
pub const DOCA_ERROR_NOT_CONNECTED: doca_error_t = doca_error_t(14);
pub const DOCA_ERROR_NO_LOCK: doca_error_t = doca_error_t(15);
pub const DOCA_ERROR_NOT_FOUND: doca_error_t = doca_error_t(16);
pub const DOCA_ERROR_IO_FAILED: doca_error_t = doca_error_t(17);
pub const DOCA_ERROR_BAD_STATE: doca_error_t = doca_error_t(18);
pub const DOCA_ERROR_UNSUPPORTED_VERSION: doca_error_t = doca_error_t(19);
pub const DOCA_ERROR_OPERATING_SYSTEM: doca_error_t = doca_error_t(20);
pub const DOCA_ERROR_DRIVER: doca_error_t = doca_error_t(21);
pub const DOCA_ERROR_UNEXPECTED: doca_error_t = doca_error_t(22);
pub const DOCA_ERROR_ALREADY_EXIST: doca_error_t = doca_error_t(23);
pub const DOCA_ERROR_FULL: doca_error_t = doca_error_t(24);
pub const DOCA_ERROR_EMPTY: doca_error_t = doca_error_t(25);
pub const DOCA_ERROR_IN_PROGRESS: doca_error_t = doca_error_t(26);
pub const DOCA_ERROR_TOO_BIG: doca_error_t = doca_error_t(27);
pub const DOCA_ERROR_AUTHENTICATION: doca_error_t = doca_error_t(28);
pub const DOCA_ERROR_BAD_CONFIG: doca_error_t = doca_error_t(29);
pub const DOCA_ERROR_SKIPPED: doca_error_t = doca_error_t(30);

/// Symbolic names of the codes this crate knows, indexed by value.
pub const DOCA_ERROR_NAMES: [&str; 31] = [
    "DOCA_SUCCESS",
    "DOCA_ERROR_UNKNOWN",
    "DOCA_ERROR_NOT_PERMITTED",
    "DOCA_ERROR_IN_USE",
    "DOCA_ERROR_NOT_SUPPORTED",
    "DOCA_ERROR_AGAIN",
    "DOCA_ERROR_INVALID_VALUE",
    "DOCA_ERROR_NO_MEMORY",
    "DOCA_ERROR_INITIALIZATION",
    "DOCA_ERROR_TIME_OUT",
    "DOCA_ERROR_SHUTDOWN",
    "DOCA_ERROR_CONNECTION_RESET",
    "DOCA_ERROR_CONNECTION_ABORTED",
    "DOCA_ERROR_CONNECTION_INPROGRESS",
    "DOCA_ERROR_NOT_CONNECTED",
    "DOCA_ERROR_NO_LOCK",
    "DOCA_ERROR_NOT_FOUND",
    "DOCA_ERROR_IO_FAILED",
    "DOCA_ERROR_BAD_STATE",
    "DOCA_ERROR_UNSUPPORTED_VERSION",
    "DOCA_ERROR_OPERATING_SYSTEM",
    "DOCA_ERROR_DRIVER",
    "DOCA_ERROR_UNEXPECTED",
    "DOCA_ERROR_ALREADY_EXIST",
    "DOCA_ERROR_FULL",
    "DOCA_ERROR_EMPTY",
    "DOCA_ERROR_IN_PROGRESS",
    "DOCA_ERROR_TOO_BIG",
    "DOCA_ERROR_AUTHENTICATION",
    "DOCA_ERROR_BAD_CONFIG",
    "DOCA_ERROR_SKIPPED",
];

/// `union doca_data`: eight bytes of user data, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub union doca_data {
    pub ptr: *mut c_void,
    pub u64_: u64,
}

impl doca_data {
    /// User data holding an integer (the runtime stores completion-slot keys this way).
    pub const fn from_u64(v: u64) -> Self {
        doca_data { u64_: v }
    }
    /// The data read as an integer. Every bit pattern is a valid `u64`.
    pub fn as_u64(self) -> u64 {
        // SAFETY: both fields are 8 bytes of plain data on 64-bit targets; any bit pattern
        // is a valid u64.
        unsafe { self.u64_ }
    }
}

impl core::fmt::Debug for doca_data {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "doca_data({:#x})", self.as_u64())
    }
}

/// The PE's notification handle: a file descriptor on Linux; -1 is invalid.
pub type doca_notification_handle_t = c_int;
pub const DOCA_NOTIFICATION_HANDLE_INVALID: doca_notification_handle_t = -1;

/// A `uint32_t` that holds a big-endian value (immediate data).
pub type doca_be32_t = u32;

/// `enum doca_ctx_states`.
pub type doca_ctx_states = u32;
pub const DOCA_CTX_STATE_IDLE: doca_ctx_states = 0;
pub const DOCA_CTX_STATE_STARTING: doca_ctx_states = 1;
pub const DOCA_CTX_STATE_RUNNING: doca_ctx_states = 2;
pub const DOCA_CTX_STATE_STOPPING: doca_ctx_states = 3;

/// `enum doca_pe_event_mode`.
pub type doca_pe_event_mode = u32;
pub const DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE: doca_pe_event_mode = 0;
pub const DOCA_PE_EVENT_MODE_PROGRESS_ALL: doca_pe_event_mode = 1;

/// `enum doca_access_flag` (bits combined into a `uint32_t` mask).
pub type doca_access_flag = u32;
pub const DOCA_ACCESS_FLAG_LOCAL_READ_ONLY: doca_access_flag = 0;
pub const DOCA_ACCESS_FLAG_LOCAL_READ_WRITE: doca_access_flag = 1;
pub const DOCA_ACCESS_FLAG_RDMA_READ: doca_access_flag = 2;
pub const DOCA_ACCESS_FLAG_RDMA_WRITE: doca_access_flag = 4;
pub const DOCA_ACCESS_FLAG_RDMA_ATOMIC: doca_access_flag = 8;
pub const DOCA_ACCESS_FLAG_PCI_READ_ONLY: doca_access_flag = 16;
pub const DOCA_ACCESS_FLAG_PCI_READ_WRITE: doca_access_flag = 32;
pub const DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING: doca_access_flag = 64;

/// Size of the buffer `doca_devinfo_get_pci_addr_str` fills ("0000:03:00.0" plus NUL).
pub const DOCA_DEVINFO_PCI_ADDR_SIZE: usize = 13;
/// Buffer sizes the samples use for ibdev and interface names.
pub const DOCA_DEVINFO_IBDEV_NAME_SIZE: usize = 64;
pub const DOCA_DEVINFO_IFACE_NAME_SIZE: usize = 256;

/// Generic task completion callback (`doca_task_completion_cb_t`).
pub type doca_task_completion_cb_t =
    Option<unsafe extern "C" fn(task: *mut doca_task, task_user_data: doca_data, ctx_user_data: doca_data)>;

/// Context state-change callback (`doca_ctx_state_changed_callback_t`).
pub type doca_ctx_state_changed_callback_t = Option<
    unsafe extern "C" fn(
        user_data: doca_data,
        ctx: *mut doca_ctx,
        prev_state: doca_ctx_states,
        next_state: doca_ctx_states,
    ),
>;

/// Sync event task completion callbacks, one type per task kind.
pub type doca_sync_event_task_get_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_sync_event_task_get, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_sync_event_task_notify_set_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_sync_event_task_notify_set,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;
pub type doca_sync_event_task_notify_add_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_sync_event_task_notify_add,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;
pub type doca_sync_event_task_wait_eq_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_sync_event_task_wait_eq,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;
pub type doca_sync_event_task_wait_neq_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_sync_event_task_wait_neq,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;

/// `enum doca_rdma_opcode`: what kind of incoming message completed a receive task.
pub type doca_rdma_opcode = u32;
pub const DOCA_RDMA_OPCODE_RECV_SEND: doca_rdma_opcode = 0;
pub const DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM: doca_rdma_opcode = 1;
pub const DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM: doca_rdma_opcode = 2;

/// RDMA task completion callbacks, one type per task kind.
pub type doca_rdma_task_receive_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_receive, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_send_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_send, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_send_imm_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_send_imm, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_read_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_read, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_write_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_write, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_write_imm_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_write_imm, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_atomic_cmp_swp_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_atomic_cmp_swp, task_user_data: doca_data, ctx_user_data: doca_data),
>;
pub type doca_rdma_task_atomic_fetch_add_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_rdma_task_atomic_fetch_add, task_user_data: doca_data, ctx_user_data: doca_data),
>;

// ---- value types of the devinfo, RDMA configuration and submit-flag additions ----

/// More `DOCA_DEVINFO_*_SIZE` buffer sizes (terminating NUL included for strings).
pub const DOCA_DEVINFO_VUID_SIZE: usize = 128;
pub const DOCA_DEVINFO_IPV4_ADDR_SIZE: usize = 4;
pub const DOCA_DEVINFO_IPV6_ADDR_SIZE: usize = 16;
pub const DOCA_DEVINFO_MAC_ADDR_SIZE: usize = 6;
pub const DOCA_DEVINFO_PCI_BDF_SIZE: usize = 8;
pub const DOCA_DEVINFO_REP_VUID_SIZE: usize = 128;
pub const DOCA_DEVINFO_REP_PCI_ADDR_SIZE: usize = 13;
pub const DOCA_DEVINFO_REP_PCI_BDF_SIZE: usize = 8;

/// `enum doca_devinfo_rep_filter`: which representors `doca_devinfo_rep_create_list` lists
/// (a bit mask; ALL = 0 means no filter).
pub type doca_devinfo_rep_filter = u32;
pub const DOCA_DEVINFO_REP_FILTER_ALL: doca_devinfo_rep_filter = 0;
pub const DOCA_DEVINFO_REP_FILTER_NET: doca_devinfo_rep_filter = 1 << 1;
pub const DOCA_DEVINFO_REP_FILTER_EMULATED: doca_devinfo_rep_filter = 1 << 2;

/// `enum doca_rdma_transport_type`: reliable connection or dynamically connected transport.
pub type doca_rdma_transport_type = u32;
pub const DOCA_RDMA_TRANSPORT_TYPE_RC: doca_rdma_transport_type = 0;
pub const DOCA_RDMA_TRANSPORT_TYPE_DC: doca_rdma_transport_type = 1;

/// Completion callback of `doca_rdma_task_remote_net_sync_event_get`.
pub type doca_rdma_task_remote_net_sync_event_get_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_rdma_task_remote_net_sync_event_get,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;
/// Completion callback of `doca_rdma_task_remote_net_sync_event_notify_set`.
pub type doca_rdma_task_remote_net_sync_event_notify_set_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_set,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;
/// Completion callback of `doca_rdma_task_remote_net_sync_event_notify_add`.
pub type doca_rdma_task_remote_net_sync_event_notify_add_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_rdma_task_remote_net_sync_event_notify_add,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;

/// `enum doca_rdma_addr_type`: how the address string of `doca_rdma_addr_create` is read.
pub type doca_rdma_addr_type = u32;
/// A dotted IPv4 address (`"127.0.0.1"`).
#[allow(non_upper_case_globals)]
pub const DOCA_RDMA_ADDR_TYPE_IPv4: doca_rdma_addr_type = 0;
/// An IPv6 address (`"::1"`).
#[allow(non_upper_case_globals)]
pub const DOCA_RDMA_ADDR_TYPE_IPv6: doca_rdma_addr_type = 1;
/// A GID, written like an IPv6 address (RoCE GIDs are IPv6 or IPv4-mapped addresses).
pub const DOCA_RDMA_ADDR_TYPE_GID: doca_rdma_addr_type = 2;

/// Connection management: a connection request arrived at a listening port (server side).
pub type doca_rdma_connection_request_cb_t =
    Option<unsafe extern "C" fn(rdma_connection: *mut doca_rdma_connection, ctx_user_data: doca_data)>;
/// Connection management: the handshake of a connection completed (both sides).
pub type doca_rdma_connection_established_cb_t = Option<
    unsafe extern "C" fn(rdma_connection: *mut doca_rdma_connection, connection_user_data: doca_data, ctx_user_data: doca_data),
>;
/// Connection management: a connection could not be established (resolve, connect, reject,
/// timeout, the peer vanished during the handshake).
pub type doca_rdma_connection_failure_cb_t = Option<
    unsafe extern "C" fn(rdma_connection: *mut doca_rdma_connection, connection_user_data: doca_data, ctx_user_data: doca_data),
>;
/// Connection management: the peer of an established connection disconnected (or vanished).
pub type doca_rdma_connection_disconnection_cb_t = Option<
    unsafe extern "C" fn(rdma_connection: *mut doca_rdma_connection, connection_user_data: doca_data, ctx_user_data: doca_data),
>;

/// `struct doca_rdma_gid`: one entry of a device's GID table.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct doca_rdma_gid {
    pub raw: [u8; DOCA_GID_BYTE_LENGTH],
}

/// `enum doca_task_submit_flag`: flags of `doca_task_submit_ex` (a bit mask).
pub type doca_task_submit_flag = u32;
pub const DOCA_TASK_SUBMIT_FLAG_NONE: doca_task_submit_flag = 0;
pub const DOCA_TASK_SUBMIT_FLAG_FLUSH: doca_task_submit_flag = 1 << 0;
pub const DOCA_TASK_SUBMIT_FLAG_OPTIMIZE_REPORTS: doca_task_submit_flag = 1 << 1;

/// `doca_dpa_dev_rdma_t`: an RDMA context's handle on a DPA (never produced by the soft
/// provider).
pub type doca_dpa_dev_rdma_t = u64;

#[allow(dead_code)]
const _ABI_CHECKS: () = {
    assert!(core::mem::size_of::<doca_data>() == 8);
    assert!(core::mem::size_of::<doca_error_t>() == 4);
    let _ = core::mem::size_of::<*mut c_void>();
};

// ---- doca_types.h: common value types ----

/// An OS event handle (`doca_event_handle_t`): a file descriptor on Linux.
pub type doca_event_handle_t = c_int;
/// `doca_event_invalid_handle`: the value no valid event handle has (DOCA names this macro
/// in lower case; the Rust name follows Rust's convention).
pub const DOCA_EVENT_INVALID_HANDLE: doca_event_handle_t = -1;
/// Length in bytes of an InfiniBand/RoCE GID.
pub const DOCA_GID_BYTE_LENGTH: usize = 16;
/// A `uint16_t` that holds a big-endian value.
pub type doca_be16_t = u16;
/// A `uint64_t` that holds a big-endian value.
pub type doca_be64_t = u64;

/// `struct doca_gather_list`: one memory range of a chain; `next` NULL ends it.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct doca_gather_list {
    pub addr: *mut c_void,
    pub len: u64,
    pub next: *mut doca_gather_list,
}

/// `enum doca_pci_func_type`.
pub type doca_pci_func_type = u32;
pub const DOCA_PCI_FUNC_TYPE_PF: doca_pci_func_type = 0;
pub const DOCA_PCI_FUNC_TYPE_VF: doca_pci_func_type = 1;
pub const DOCA_PCI_FUNC_TYPE_SF: doca_pci_func_type = 2;

/// `enum doca_gpu_mem_type`.
pub type doca_gpu_mem_type = u32;
pub const DOCA_GPU_MEM_TYPE_GPU: doca_gpu_mem_type = 0;
pub const DOCA_GPU_MEM_TYPE_GPU_CPU: doca_gpu_mem_type = 1;
pub const DOCA_GPU_MEM_TYPE_CPU_GPU: doca_gpu_mem_type = 2;

/// `enum doca_eth_wait_on_time_type`.
pub type doca_eth_wait_on_time_type = u32;
pub const DOCA_ETH_WAIT_ON_TIME_TYPE_NONE: doca_eth_wait_on_time_type = 0;
pub const DOCA_ETH_WAIT_ON_TIME_TYPE_NATIVE: doca_eth_wait_on_time_type = 1;
pub const DOCA_ETH_WAIT_ON_TIME_TYPE_DPDK: doca_eth_wait_on_time_type = 2;

/// `enum doca_mtu_size` (RAW_ETHERNET is reserved).
pub type doca_mtu_size = u32;
pub const DOCA_MTU_SIZE_256_BYTES: doca_mtu_size = 0;
pub const DOCA_MTU_SIZE_512_BYTES: doca_mtu_size = 1;
pub const DOCA_MTU_SIZE_1K_BYTES: doca_mtu_size = 2;
pub const DOCA_MTU_SIZE_2K_BYTES: doca_mtu_size = 3;
pub const DOCA_MTU_SIZE_4K_BYTES: doca_mtu_size = 4;
pub const DOCA_MTU_SIZE_RAW_ETHERNET: doca_mtu_size = 5;

// ---- doca_log.h ----

/// `enum doca_log_level`: bigger is more verbose. A backend prints a record of level L when
/// `upper_limit <= L <= lower_limit`.
pub type doca_log_level = u32;
pub const DOCA_LOG_LEVEL_DISABLE: doca_log_level = 10;
pub const DOCA_LOG_LEVEL_CRIT: doca_log_level = 20;
pub const DOCA_LOG_LEVEL_ERROR: doca_log_level = 30;
pub const DOCA_LOG_LEVEL_WARNING: doca_log_level = 40;
pub const DOCA_LOG_LEVEL_INFO: doca_log_level = 50;
pub const DOCA_LOG_LEVEL_DEBUG: doca_log_level = 60;
pub const DOCA_LOG_LEVEL_TRACE: doca_log_level = 70;

/// `log_flush_callback`: called by a buffer backend with the buffer holding one record.
pub type log_flush_callback = Option<unsafe extern "C" fn(buf: *mut core::ffi::c_char)>;

// ---- doca_argp.h ----

/// `enum doca_argp_type`: what a parameter's value is, and so what its callback receives.
pub type doca_argp_type = u32;
pub const DOCA_ARGP_TYPE_UNKNOWN: doca_argp_type = 0;
/// The callback receives a `char *` (NUL-terminated, valid during the call).
pub const DOCA_ARGP_TYPE_STRING: doca_argp_type = 1;
/// The callback receives an `int *`.
pub const DOCA_ARGP_TYPE_INT: doca_argp_type = 2;
/// The callback receives a `bool *`; on the command line the flag takes no value.
pub const DOCA_ARGP_TYPE_BOOLEAN: doca_argp_type = 3;
/// The callback receives the object's JSON text as a `char *` (soft provider; see
/// docs/soft-provider.md).
pub const DOCA_ARGP_TYPE_JSON_OBJ: doca_argp_type = 4;

/// A parameter's callback: `(value pointer, program config)`.
pub type doca_argp_param_cb_t = Option<unsafe extern "C" fn(param: *mut c_void, config: *mut c_void) -> doca_error_t>;
/// A command's callback: `(program config)`.
pub type doca_argp_cmd_cb_t = Option<unsafe extern "C" fn(config: *mut c_void) -> doca_error_t>;
/// The DPDK part of a DPDK program's command line: `(argc, argv)`.
pub type doca_argp_dpdk_cb_t = Option<unsafe extern "C" fn(argc: c_int, argv: *mut *mut core::ffi::c_char) -> doca_error_t>;
/// Called after parsing with the program config.
pub type doca_argp_validation_cb_t = Option<unsafe extern "C" fn(config: *mut c_void) -> doca_error_t>;
/// argp's logger: `(level, printf format, va_list)`. The `va_list` is passed as the
/// platform passes it (a pointer on x86-64); stable Rust cannot build one, so only C
/// implements this callback.
pub type doca_argp_logger_cb_t =
    Option<unsafe extern "C" fn(level: doca_log_level, format: *const core::ffi::c_char, args: *mut c_void) -> doca_error_t>;
