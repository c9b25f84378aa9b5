//! Chooses and validates the DOCA provider that `doca-sys` links.
//!
//! * `soft`: nothing to do here; the `doca-soft` crate is linked as a Rust dependency.
//! * `system`: find NVIDIA's DOCA with pkg-config and link it. A build without the SDK stops
//!   with a message that says how to point at one (`PKG_CONFIG_PATH` or `DOCA_HOME`), while
//!   `cargo check` and `cargo doc` of the declarations still work without it.

fn main() {
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
    // DOCA_HOME (an SDK prefix such as /opt/mellanox/doca) is added to the pkg-config search.
    if let Some(home) = std::env::var_os("DOCA_HOME") {
        let home = std::path::PathBuf::from(home);
        let mut paths = vec![];
        for sub in
            ["lib/x86_64-linux-gnu/pkgconfig", "lib/aarch64-linux-gnu/pkgconfig", "lib64/pkgconfig", "lib/pkgconfig"]
        {
            paths.push(home.join(sub));
        }
        if let Some(old) = std::env::var_os("PKG_CONFIG_PATH") {
            paths.extend(std::env::split_paths(&old));
        }
        let joined = std::env::join_paths(paths).expect("DOCA_HOME contains a path separator");
        // The build script is single-threaded; the pkg-config crate reads this variable.
        std::env::set_var("PKG_CONFIG_PATH", joined);
    }
    match pkg_config::Config::new().atleast_version("3.0").probe("doca-common") {
        Ok(lib) => println!("cargo:version={}", lib.version),
        Err(e) => {
            // Not a panic: `cargo check` and `cargo doc` of the declarations must work on
            // machines without the SDK. Asking for the library anyway makes every real link
            // fail, right after this message.
            for line in [
                "NVIDIA DOCA 3.x was not found with pkg-config (package `doca-common`; RDMA and UROM also need `doca-rdma` and `doca-urom`).".to_string(),
                "Point at an SDK with PKG_CONFIG_PATH=/opt/mellanox/doca/lib/<arch>-linux-gnu/pkgconfig or DOCA_HOME=/opt/mellanox/doca.".to_string(),
                "Type-checking works without it; linking a program will fail with `cannot find -ldoca_common`.".to_string(),
                format!("pkg-config said: {}", e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")),
            ] {
                println!("cargo:warning=doca-sys (feature `system`): {line}");
            }
            println!("cargo:rustc-link-lib=dylib=doca_common");
        }
    }
    // The RDMA declarations (doca_rdma_*) live in `doca-rdma`, the UROM ones in `doca-urom`.
    for (pkg, lib) in [("doca-rdma", "doca_rdma"), ("doca-urom", "doca_urom")] {
        if pkg_config::Config::new().atleast_version("3.0").probe(pkg).is_err() {
            println!(
                "cargo:warning=doca-sys (feature `system`): `{pkg}` not found with pkg-config; linking {lib} by name."
            );
            println!("cargo:rustc-link-lib=dylib={lib}");
        }
    }
}
