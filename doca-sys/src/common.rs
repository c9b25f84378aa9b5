// The common C API every DOCA program uses: logging (`doca_log.h`, part of `doca-common`) and
// parameter parsing (`doca_argp.h`, `doca-argp`). Included into the crate root by lib.rs.


opaque!(
    /// A log destination (`struct doca_log_backend`), owned by the library until exit.
    doca_log_backend,
    /// One flag of the parameter parser (`struct doca_argp_param`).
    doca_argp_param,
    /// One sub-command of the parameter parser (`struct doca_argp_cmd`).
    doca_argp_cmd,
);

/// C's `FILE` (only ever handled by pointer).
pub type FILE = c_void;

// ---- doca_log.h ----
extern "C" {
    pub fn doca_log_register_source(source_name: *const c_char, source: *mut c_int) -> doca_error_t;
    pub fn doca_log_unregister_source(source: c_int) -> doca_error_t;
    pub fn doca_log_backend_create_standard() -> doca_error_t;
    pub fn doca_log_backend_create_with_file(fptr: *mut FILE, backend: *mut *mut doca_log_backend) -> doca_error_t;
    pub fn doca_log_backend_create_with_fd(fd: c_int, backend: *mut *mut doca_log_backend) -> doca_error_t;
    pub fn doca_log_backend_create_with_buf(
        buf: *mut c_char,
        capacity: usize,
        handler: log_flush_callback,
        backend: *mut *mut doca_log_backend,
    ) -> doca_error_t;
    pub fn doca_log_backend_create_with_syslog(name: *const c_char, backend: *mut *mut doca_log_backend)
        -> doca_error_t;
    pub fn doca_log_backend_create_with_file_sdk(fptr: *mut FILE, backend: *mut *mut doca_log_backend) -> doca_error_t;
    pub fn doca_log_backend_create_with_fd_sdk(fd: c_int, backend: *mut *mut doca_log_backend) -> doca_error_t;
    pub fn doca_log_backend_create_with_buf_sdk(
        buf: *mut c_char,
        capacity: usize,
        handler: log_flush_callback,
        backend: *mut *mut doca_log_backend,
    ) -> doca_error_t;
    pub fn doca_log_backend_create_with_syslog_sdk(
        name: *const c_char,
        backend: *mut *mut doca_log_backend,
    ) -> doca_error_t;
    pub fn doca_log_backend_set_level_lower_limit(backend: *mut doca_log_backend, level: u32) -> doca_error_t;
    pub fn doca_log_backend_set_level_upper_limit(backend: *mut doca_log_backend, upper_limit: u32) -> doca_error_t;
    pub fn doca_log_backend_set_level_lower_limit_strict(backend: *mut doca_log_backend) -> doca_error_t;
    pub fn doca_log_backend_set_level_upper_limit_strict(backend: *mut doca_log_backend) -> doca_error_t;
    pub fn doca_log_backend_set_sdk_level(backend: *mut doca_log_backend, level: u32) -> doca_error_t;
    pub fn doca_log_level_set_global_lower_limit(level: u32) -> doca_error_t;
    pub fn doca_log_level_set_global_upper_limit(upper_limit: u32) -> doca_error_t;
    pub fn doca_log_level_get_global_lower_limit() -> u32;
    pub fn doca_log_level_get_global_upper_limit() -> u32;
    pub fn doca_log_level_set_global_sdk_limit(level: u32) -> doca_error_t;
    pub fn doca_log_level_get_global_sdk_limit() -> u32;
}

// ---- doca_argp.h ----
extern "C" {
    pub fn doca_argp_init(program_name: *const c_char, program_config: *mut c_void) -> doca_error_t;
    pub fn doca_argp_start(argc: c_int, argv: *mut *mut c_char) -> doca_error_t;
    pub fn doca_argp_destroy() -> doca_error_t;
    /// Prints the usage on stdout and returns.
    pub fn doca_argp_usage();
    pub fn doca_argp_set_dpdk_program(callback: doca_argp_dpdk_cb_t);
    pub fn doca_argp_register_param(input_param: *mut doca_argp_param) -> doca_error_t;
    pub fn doca_argp_register_cmd(input_cmd: *mut doca_argp_cmd) -> doca_error_t;
    pub fn doca_argp_register_version_callback(callback: doca_argp_param_cb_t) -> doca_error_t;
    pub fn doca_argp_register_validation_callback(callback: doca_argp_validation_cb_t) -> doca_error_t;
    pub fn doca_argp_disable_logger_callback() -> doca_error_t;
    pub fn doca_argp_get_log_level(log_level: *mut c_int) -> doca_error_t;
    pub fn doca_argp_get_sdk_log_level(log_level: *mut c_int) -> doca_error_t;
    pub fn doca_argp_param_create(param: *mut *mut doca_argp_param) -> doca_error_t;
    pub fn doca_argp_param_destroy(param: *mut doca_argp_param) -> doca_error_t;
    pub fn doca_argp_param_set_short_name(param: *mut doca_argp_param, name: *const c_char);
    pub fn doca_argp_param_set_long_name(param: *mut doca_argp_param, name: *const c_char);
    pub fn doca_argp_param_set_arguments(param: *mut doca_argp_param, arguments: *const c_char);
    pub fn doca_argp_param_set_description(param: *mut doca_argp_param, description: *const c_char);
    pub fn doca_argp_param_set_callback(param: *mut doca_argp_param, callback: doca_argp_param_cb_t);
    pub fn doca_argp_param_set_type(param: *mut doca_argp_param, ty: doca_argp_type);
    pub fn doca_argp_param_set_mandatory(param: *mut doca_argp_param);
    pub fn doca_argp_param_set_cli_only(param: *mut doca_argp_param);
    pub fn doca_argp_param_set_multiplicity(param: *mut doca_argp_param);
    pub fn doca_argp_param_set_singular(param: *mut doca_argp_param);
    pub fn doca_argp_param_set_inherited(param: *mut doca_argp_param);
    pub fn doca_argp_param_set_hidden(param: *mut doca_argp_param);
    pub fn doca_argp_cmd_create(cmd: *mut *mut doca_argp_cmd) -> doca_error_t;
    pub fn doca_argp_cmd_destroy(cmd: *mut doca_argp_cmd) -> doca_error_t;
    pub fn doca_argp_cmd_set_name(cmd: *mut doca_argp_cmd, name: *const c_char);
    pub fn doca_argp_cmd_set_description(cmd: *mut doca_argp_cmd, description: *const c_char);
    pub fn doca_argp_cmd_set_callback(cmd: *mut doca_argp_cmd, callback: doca_argp_cmd_cb_t);
    pub fn doca_argp_cmd_set_hidden(cmd: *mut doca_argp_cmd);
    pub fn doca_argp_cmd_register_param(cmd: *mut doca_argp_cmd, input_param: *mut doca_argp_param) -> doca_error_t;
    pub fn doca_argp_cmd_register_cmd(cmd: *mut doca_argp_cmd, input_cmd: *mut doca_argp_cmd) -> doca_error_t;
}

// Functions that NVIDIA's libraries export but that are `static inline` in doca-soft's headers
// (C variadics and `va_list` callbacks cannot be written in stable Rust; see doca_log.h and
// doca_argp.h). With the soft provider, Rust code logs through `doca_soft::log` instead.
#[cfg(feature = "system")]
extern "C" {
    /// printf-style: `format` and the variadic arguments as C's printf takes them.
    pub fn doca_log(
        level: u32,
        source: c_int,
        fname: *const c_char,
        line: c_int,
        func: *const c_char,
        format: *const c_char,
        ...
    ) -> doca_error_t;
    pub fn doca_argp_register_logger_callback(callback: doca_argp_logger_cb_t) -> doca_error_t;
}

// The soft provider's halves of those two inline functions (not part of NVIDIA's DOCA).
#[cfg(feature = "soft")]
extern "C" {
    /// Whether an application backend would print a record of `level` (1) or not (0).
    pub fn doca_soft_log_enabled(level: u32) -> c_int;
    /// Logs one finished application record (what the header's `doca_log` formats).
    pub fn doca_soft_log_emit(
        level: u32,
        source: c_int,
        fname: *const c_char,
        line: c_int,
        func: *const c_char,
        message: *const c_char,
    ) -> doca_error_t;
    /// Where argp sends its own message lines (the header's logger trampoline).
    pub fn doca_soft_argp_set_line_logger(
        logger: Option<unsafe extern "C" fn(level: u32, line: *const c_char)>,
    ) -> doca_error_t;
}
