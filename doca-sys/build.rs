//! Chooses and validates the DOCA provider that `doca-sys` links.
//!
//! * `soft`: nothing to do here; the `doca-soft` crate is linked as a Rust dependency.
//! * `system`: find NVIDIA's DOCA with pkg-config and link it. A build without the SDK stops
//!   with a message that says how to point at one. `DOCA_SYS_NO_LINK=1` skips the search so
//!   the declarations can be type-checked (`cargo check`, `cargo doc`) on machines without
//!   the SDK; such a build cannot link a program.

fn main() {
    println!("cargo:rerun-if-env-changed=DOCA_SYS_NO_LINK");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=DOCA_HOME");
    let soft = std::env::var_os("CARGO_FEATURE_SOFT").is_some();
    let system = std::env::var_os("CARGO_FEATURE_SYSTEM").is_some();
    if !soft && !system {
        panic!(
            "doca-sys: no DOCA provider selected. Enable the `soft` feature (the software \
             provider, default) or the `system` feature (NVIDIA's libraries)."
        );
    }
    println!("cargo:provider={}", if system { "system" } else { "soft" });
    #[cfg(feature = "system")]
    link_system();
}

#[cfg(feature = "system")]
fn link_system() {
    const PACKAGES: [&str; 1] = ["doca-common"];
    if std::env::var_os("DOCA_SYS_NO_LINK").is_some_and(|v| v != "0") {
        println!(
            "cargo:warning=doca-sys: DOCA_SYS_NO_LINK is set: declarations only, NVIDIA's \
             libraries are not searched or linked"
        );
        return;
    }
    // DOCA_HOME (an SDK prefix such as /opt/mellanox/doca) is added to the pkg-config search.
    if let Some(home) = std::env::var_os("DOCA_HOME") {
        let home = std::path::PathBuf::from(home);
        let mut paths = vec![];
        for sub in ["lib/x86_64-linux-gnu/pkgconfig", "lib/aarch64-linux-gnu/pkgconfig", "lib64/pkgconfig", "lib/pkgconfig"] {
            paths.push(home.join(sub));
        }
        if let Some(old) = std::env::var_os("PKG_CONFIG_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        let joined = std::env::join_paths(paths).expect("DOCA_HOME contains a path separator");
        // The build script is single-threaded; the pkg-config crate reads this variable.
        std::env::set_var("PKG_CONFIG_PATH", joined);
    }
    for pkg in PACKAGES {
        match pkg_config::Config::new().atleast_version("3.0").probe(pkg) {
            Ok(lib) => println!("cargo:version={}", lib.version),
            Err(e) => panic!(
                "\ndoca-sys (feature `system`): could not find NVIDIA DOCA 3.x library `{pkg}` \
                 with pkg-config.\n  Needed pkg-config packages: doca-common (and, for RDMA \
                 and UROM, doca-rdma and doca-urom).\n  Point at an SDK with \
                 PKG_CONFIG_PATH=/opt/mellanox/doca/lib/<arch>-linux-gnu/pkgconfig or \
                 DOCA_HOME=/opt/mellanox/doca.\n  To type-check without the SDK set \
                 DOCA_SYS_NO_LINK=1.\n  pkg-config said: {e}\n"
            ),
        }
    }
}
