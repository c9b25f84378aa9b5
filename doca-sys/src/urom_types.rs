// UROM host-side value types and callback types. Shared by doca-sys and doca-soft through
// `include!`; the task types the callbacks name must be in scope where this is included.

/// `DOCA_UROM_WORKER_ID_ANY`: let the service choose the worker id.
pub const DOCA_UROM_WORKER_ID_ANY: u64 = !0;
/// `DOCA_UROM_PLUGIN_NAME_MAX_LEN`: room for a plugin name, NUL included.
pub const DOCA_UROM_PLUGIN_NAME_MAX_LEN: usize = 48;
/// The default `doca_urom_service_set_max_comm_msg_size`.
pub const DOCA_UROM_DEFAULT_MAX_COMM_MSG_SIZE: usize = 4096;

/// Number of CPUs a [`doca_cpu_set_t`] describes.
pub const DOCA_CPU_SETSIZE: usize = 1024;

/// `doca_cpu_set_t`, which is UCX's `ucs_cpu_set_t`: a 1024-bit CPU mask in `unsigned long`
/// words (128 bytes), passed by value.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct doca_cpu_set_t {
    pub ucs_bits: [core::ffi::c_ulong; DOCA_CPU_SETSIZE / (8 * core::mem::size_of::<core::ffi::c_ulong>())],
}

impl doca_cpu_set_t {
    const WORD: usize = 8 * core::mem::size_of::<core::ffi::c_ulong>();

    /// The empty set.
    pub const fn empty() -> Self {
        doca_cpu_set_t { ucs_bits: [0; DOCA_CPU_SETSIZE / (8 * core::mem::size_of::<core::ffi::c_ulong>())] }
    }
    /// Adds `cpu` (ignored beyond [`DOCA_CPU_SETSIZE`]).
    pub fn set(&mut self, cpu: usize) {
        if cpu < DOCA_CPU_SETSIZE {
            self.ucs_bits[cpu / Self::WORD] |= 1 << (cpu % Self::WORD);
        }
    }
    /// Whether `cpu` is in the set.
    pub fn is_set(&self, cpu: usize) -> bool {
        cpu < DOCA_CPU_SETSIZE && self.ucs_bits[cpu / Self::WORD] & (1 << (cpu % Self::WORD)) != 0
    }
    /// Whether no CPU is set.
    pub fn is_empty(&self) -> bool {
        self.ucs_bits.iter().all(|w| *w == 0)
    }
    /// Whether every CPU of `self` is also in `other`.
    pub fn is_subset_of(&self, other: &doca_cpu_set_t) -> bool {
        self.ucs_bits.iter().zip(other.ucs_bits.iter()).all(|(a, b)| a & !b == 0)
    }
}

impl Default for doca_cpu_set_t {
    fn default() -> Self {
        Self::empty()
    }
}

impl core::fmt::Debug for doca_cpu_set_t {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries((0..DOCA_CPU_SETSIZE).filter(|c| self.is_set(*c))).finish()
    }
}

/// `struct doca_urom_service_plugin_info`: one plugin the service offers.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct doca_urom_service_plugin_info {
    /// The plugin's id: one bit, OR-ed into a worker's plugin set and a command's plugin.
    pub id: u64,
    /// The version the plugin reports (`urom_plugin_get_version`).
    pub version: u64,
    /// NUL-terminated name: the plugin file's name without `.so`.
    pub plugin_name: [c_char; DOCA_UROM_PLUGIN_NAME_MAX_LEN],
}

impl core::fmt::Debug for doca_urom_service_plugin_info {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let len = self.plugin_name.iter().position(|c| *c == 0).unwrap_or(DOCA_UROM_PLUGIN_NAME_MAX_LEN);
        let mut name = [0u8; DOCA_UROM_PLUGIN_NAME_MAX_LEN];
        for (d, s) in name.iter_mut().zip(self.plugin_name.iter()) {
            *d = *s as u8;
        }
        f.debug_struct("doca_urom_service_plugin_info")
            .field("id", &self.id)
            .field("version", &self.version)
            .field("plugin_name", &core::str::from_utf8(&name[..len]).unwrap_or("<not utf-8>"))
            .finish()
    }
}

/// Completion callback of a get-workers-by-gid task.
pub type doca_urom_service_get_workers_by_gid_task_completion_cb_t = Option<
    unsafe extern "C" fn(
        task: *mut doca_urom_service_get_workers_by_gid_task,
        task_user_data: doca_data,
        ctx_user_data: doca_data,
    ),
>;

/// Completion callback of a worker command task (success and failure alike).
pub type doca_urom_worker_cmd_task_completion_cb_t = Option<
    unsafe extern "C" fn(task: *mut doca_urom_worker_cmd_task, task_user_data: doca_data, ctx_user_data: doca_data),
>;

/// The OOB allgather a domain runs at start: gather `msglen` bytes of `sbuf` from every OOB
/// index into `rbuf` (index order), returning a request in `*req`.
pub type doca_urom_domain_allgather_cb_t = Option<
    unsafe extern "C" fn(
        sbuf: *mut c_void,
        rbuf: *mut c_void,
        msglen: usize,
        coll_info: *mut c_void,
        req: *mut *mut c_void,
    ) -> doca_error_t,
>;
/// Tests an OOB request: `DOCA_SUCCESS` when done, `DOCA_ERROR_IN_PROGRESS` otherwise.
pub type doca_urom_domain_req_test_cb_t = Option<unsafe extern "C" fn(req: *mut c_void) -> doca_error_t>;
/// Frees a finished OOB request.
pub type doca_urom_domain_req_free_cb_t = Option<unsafe extern "C" fn(req: *mut c_void) -> doca_error_t>;

/// `struct doca_urom_domain_oob_coll`: the user's out-of-band collective for domain start.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct doca_urom_domain_oob_coll {
    pub allgather: doca_urom_domain_allgather_cb_t,
    pub req_test: doca_urom_domain_req_test_cb_t,
    pub req_free: doca_urom_domain_req_free_cb_t,
    /// Passed back to `allgather`.
    pub coll_info: *mut c_void,
    /// Number of OOB participants (host processes).
    pub n_oob_indexes: u32,
    /// This process's index among them.
    pub oob_index: u32,
}

#[allow(dead_code)]
const _UROM_ABI_CHECKS: () = {
    assert!(core::mem::size_of::<doca_cpu_set_t>() == 128);
    assert!(core::mem::size_of::<doca_urom_service_plugin_info>() == 64);
    assert!(core::mem::size_of::<doca_urom_domain_oob_coll>() == 40);
};
