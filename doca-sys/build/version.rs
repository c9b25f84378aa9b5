// The DOCA version rule of the `system` provider, shared by build.rs (which enforces it) and
// the crate's unit tests (which exercise it without an SDK). Plain std Rust, no dependencies.

/// The DOCA major version whose C ABI `doca-sys` declares.
pub const DOCA_ABI_MAJOR: u32 = 3;

/// Checks the version string pkg-config reported for the DOCA package `pkg` (for example
/// `"3.1.0105"`). `Err` carries the message the build stops with.
pub fn check_doca_version(pkg: &str, version: &str) -> Result<(), String> {
    let major = version.trim().split('.').next().and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(DOCA_ABI_MAJOR) => Ok(()),
        Some(m) => Err(format!(
            "doca-sys: found NVIDIA DOCA {version} (pkg-config package `{pkg}`), but these declarations \
             describe the DOCA {DOCA_ABI_MAJOR}.x C ABI. DOCA {m}.x differs in signatures this crate \
             declares{hint}; linking it would be undefined behaviour. Install DOCA {DOCA_ABI_MAJOR}.x and \
             point PKG_CONFIG_PATH or DOCA_HOME at it.",
            hint = if m < DOCA_ABI_MAJOR {
                " (the RDMA task signatures declared here are the 3.x ones, which name a connection; \
                 DOCA releases before 2.5 have no progress engine at all)"
            } else {
                ""
            },
        )),
        None => Err(format!(
            "doca-sys: pkg-config package `{pkg}` reports the version `{version}`, which is not a DOCA \
             version (expected {DOCA_ABI_MAJOR}.x)."
        )),
    }
}
