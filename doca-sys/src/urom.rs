//! UROM host API (`doca-urom`) and plugin ABI (`doca_urom_plugin.h`) declarations.

use super::{doca_ctx, doca_data, doca_dev, doca_error_t, doca_task, DOCA_ERROR_INVALID_VALUE, DOCA_VERSION_EXACT};
use core::ffi::{c_char, c_int, c_void};

include!("urom_types.rs");
include!("urom_plugin.rs");

opaque!(
    /// The UROM service (a ctx): the connection to the daemon that spawns workers.
    doca_urom_service,
    /// A UROM worker (a ctx): one offload process on the service side.
    doca_urom_worker,
    /// A group of workers of one parallel application (a ctx).
    doca_urom_domain,
    /// Worker task: one plugin command and its notification.
    doca_urom_worker_cmd_task,
    /// Service task: list the workers of a group id.
    doca_urom_service_get_workers_by_gid_task,
);

extern "C" {
    // ---- service ----
    pub fn doca_urom_service_create(service: *mut *mut doca_urom_service) -> doca_error_t;
    pub fn doca_urom_service_destroy(service: *mut doca_urom_service) -> doca_error_t;
    pub fn doca_urom_service_set_max_comm_msg_size(service: *mut doca_urom_service, msg_size: usize) -> doca_error_t;
    pub fn doca_urom_service_set_max_workers(service: *mut doca_urom_service, max_workers: u32) -> doca_error_t;
    pub fn doca_urom_service_set_dev(service: *mut doca_urom_service, dev: *mut doca_dev) -> doca_error_t;
    pub fn doca_urom_service_as_ctx(service: *mut doca_urom_service) -> *mut doca_ctx;
    pub fn doca_urom_service_get_plugins_list(
        service: *mut doca_urom_service,
        plugins: *mut *const doca_urom_service_plugin_info,
        plugins_count: *mut usize,
    ) -> doca_error_t;
    pub fn doca_urom_service_get_cpuset(service: *mut doca_urom_service, cpuset: *mut doca_cpu_set_t) -> doca_error_t;
    /// The split form of `..._allocate_init`: then `..._set_gid` and `..._set_cb`.
    pub fn doca_urom_service_get_workers_by_gid_task_allocate(
        service: *mut doca_urom_service,
        task: *mut *mut doca_urom_service_get_workers_by_gid_task,
    ) -> doca_error_t;
    pub fn doca_urom_service_get_workers_by_gid_task_set_gid(
        task: *mut doca_urom_service_get_workers_by_gid_task,
        gid: u32,
    );
    pub fn doca_urom_service_get_workers_by_gid_task_set_cb(
        task: *mut doca_urom_service_get_workers_by_gid_task,
        cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
    );
    pub fn doca_urom_service_get_workers_by_gid_task_allocate_init(
        service: *mut doca_urom_service,
        gid: u32,
        cb: doca_urom_service_get_workers_by_gid_task_completion_cb_t,
        task: *mut *mut doca_urom_service_get_workers_by_gid_task,
    ) -> doca_error_t;
    pub fn doca_urom_service_get_workers_by_gid_task_release(
        task: *mut doca_urom_service_get_workers_by_gid_task,
    ) -> doca_error_t;
    pub fn doca_urom_service_get_workers_by_gid_task_as_task(
        task: *mut doca_urom_service_get_workers_by_gid_task,
    ) -> *mut doca_task;
    pub fn doca_urom_service_get_workers_by_gid_task_get_workers_count(
        task: *mut doca_urom_service_get_workers_by_gid_task,
    ) -> usize;
    pub fn doca_urom_service_get_workers_by_gid_task_get_worker_ids(
        task: *mut doca_urom_service_get_workers_by_gid_task,
    ) -> *const u64;

    // ---- worker ----
    pub fn doca_urom_worker_create(worker: *mut *mut doca_urom_worker) -> doca_error_t;
    pub fn doca_urom_worker_destroy(worker: *mut doca_urom_worker) -> doca_error_t;
    pub fn doca_urom_worker_set_service(worker: *mut doca_urom_worker, service: *mut doca_urom_service)
        -> doca_error_t;
    pub fn doca_urom_worker_set_id(worker: *mut doca_urom_worker, worker_id: u64) -> doca_error_t;
    pub fn doca_urom_worker_set_gid(worker: *mut doca_urom_worker, gid: u32) -> doca_error_t;
    pub fn doca_urom_worker_set_plugins(worker: *mut doca_urom_worker, plugins: u64) -> doca_error_t;
    pub fn doca_urom_worker_set_cpuset(worker: *mut doca_urom_worker, cpuset: doca_cpu_set_t) -> doca_error_t;
    pub fn doca_urom_worker_set_max_inflight_tasks(worker: *mut doca_urom_worker, max_tasks: u32) -> doca_error_t;
    pub fn doca_urom_worker_set_env(
        worker: *mut doca_urom_worker,
        env: *const *mut c_char,
        count: usize,
    ) -> doca_error_t;
    pub fn doca_urom_worker_get_id(worker: *mut doca_urom_worker, worker_id: *mut u64) -> doca_error_t;
    pub fn doca_urom_worker_get_gid(worker: *mut doca_urom_worker, gid: *mut u32) -> doca_error_t;
    pub fn doca_urom_worker_as_ctx(worker: *mut doca_urom_worker) -> *mut doca_ctx;
    /// A command task with no plugin yet: `doca_urom_worker_cmd_task_set_plugin` before submit.
    pub fn doca_urom_worker_cmd_task_allocate(
        worker: *mut doca_urom_worker,
        task: *mut *mut doca_urom_worker_cmd_task,
    ) -> doca_error_t;
    pub fn doca_urom_worker_cmd_task_allocate_init(
        worker: *mut doca_urom_worker,
        plugin: u64,
        task: *mut *mut doca_urom_worker_cmd_task,
    ) -> doca_error_t;
    pub fn doca_urom_worker_cmd_task_release(task: *mut doca_urom_worker_cmd_task) -> doca_error_t;
    pub fn doca_urom_worker_cmd_task_set_plugin(task: *mut doca_urom_worker_cmd_task, plugin: u64);
    pub fn doca_urom_worker_cmd_task_set_cb(
        task: *mut doca_urom_worker_cmd_task,
        cb: doca_urom_worker_cmd_task_completion_cb_t,
    );
    pub fn doca_urom_worker_cmd_task_get_payload(task: *mut doca_urom_worker_cmd_task) -> *mut super::doca_buf;
    pub fn doca_urom_worker_cmd_task_get_response(task: *mut doca_urom_worker_cmd_task) -> *mut super::doca_buf;
    pub fn doca_urom_worker_cmd_task_get_user_data(task: *mut doca_urom_worker_cmd_task) -> *mut c_void;
    pub fn doca_urom_worker_cmd_task_as_task(task: *mut doca_urom_worker_cmd_task) -> *mut doca_task;

    // ---- domain ----
    pub fn doca_urom_domain_create(domain: *mut *mut doca_urom_domain) -> doca_error_t;
    pub fn doca_urom_domain_destroy(domain: *mut doca_urom_domain) -> doca_error_t;
    pub fn doca_urom_domain_set_oob(domain: *mut doca_urom_domain, oob: *mut doca_urom_domain_oob_coll)
        -> doca_error_t;
    pub fn doca_urom_domain_set_workers(
        domain: *mut doca_urom_domain,
        domain_worker_ids: *mut u64,
        workers: *mut *mut doca_urom_worker,
        workers_cnt: usize,
    ) -> doca_error_t;
    pub fn doca_urom_domain_set_buffers_count(domain: *mut doca_urom_domain, buffers_cnt: usize) -> doca_error_t;
    pub fn doca_urom_domain_add_buffer(
        domain: *mut doca_urom_domain,
        buffer: *mut c_void,
        buf_len: usize,
        memh: *mut c_void,
        memh_len: usize,
        mkey: *mut c_void,
        mkey_len: usize,
    ) -> doca_error_t;
    pub fn doca_urom_domain_as_ctx(domain: *mut doca_urom_domain) -> *mut doca_ctx;
}

// ---- soft-provider extension (not part of NVIDIA's DOCA) ----
//
// On hardware the service is found through `DOCA_UROM_SERVICE_FILE`, one per host. Tests and
// examples on one machine run several soft daemons side by side, and the environment is shared
// by every thread of a process, so the soft provider also takes the daemon's socket per service.
#[cfg(feature = "soft")]
extern "C" {
    /// Connects `service` to the soft daemon listening on the Unix socket `path` (a NUL-terminated
    /// file path) instead of resolving it through `DOCA_UROM_SERVICE_FILE` or the default path.
    /// Only before start; `DOCA_ERROR_BAD_STATE` otherwise.
    pub fn doca_soft_urom_service_set_socket_path(service: *mut doca_urom_service, path: *const c_char)
        -> doca_error_t;
    /// Why the last start of `worker` failed: writes the daemon's (or the connection's) code to
    /// `*error`, e.g. `DOCA_ERROR_NOT_FOUND` for an unknown plugin, `DOCA_ERROR_FULL` at the
    /// worker limit, `DOCA_ERROR_NOT_CONNECTED` when the daemon closed the connection; or
    /// `DOCA_SUCCESS` if the last start did not fail. A failed asynchronous start only reports
    /// STARTING → IDLE through the state callback; this says why. NULL arguments:
    /// `DOCA_ERROR_INVALID_VALUE`.
    pub fn doca_soft_urom_worker_get_start_error(
        worker: *mut doca_urom_worker,
        error: *mut doca_error_t,
    ) -> doca_error_t;

    /// The daemon's human-readable reason for the last failed start of `worker` (a
    /// NUL-terminated string, empty if none), owned by the worker and valid until its next start
    /// or its destroy. NULL arguments: `DOCA_ERROR_INVALID_VALUE`.
    pub fn doca_soft_urom_worker_get_start_error_reason(
        worker: *mut doca_urom_worker,
        reason: *mut *const c_char,
    ) -> doca_error_t;
}
