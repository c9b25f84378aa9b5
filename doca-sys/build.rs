//! Chooses and validates the DOCA provider that `doca-sys` links.
//!
//! * `soft`: nothing to do here; the `doca-soft` crate is linked as a Rust dependency.
//! * `system`: find NVIDIA's DOCA (`doca-common`, `doca-argp`, `doca-rdma`, `doca-urom`,
//!   `doca-dma`, `doca-comch`) with pkg-config, optionally under the SDK prefix named by
//!   `DOCA_HOME`, check that it is DOCA 3.x (the ABI
//!   the declarations describe) and link it. A DOCA of another major version stops the build
//!   with a message naming the version found. A machine without the SDK gets warnings that say
//!   how to point at one, while `cargo check` and `cargo doc` still work: only a real link fails.

#[cfg(feature = "system")]
include!("build/version.rs");

fn main() {
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=DOCA_HOME");
    println!("cargo:rerun-if-changed=build/version.rs");
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

/// The DOCA packages the declarations need, with the library each one names.
#[cfg(feature = "system")]
const PACKAGES: [(&str, &str); 6] = [
    ("doca-common", "doca_common"),
    ("doca-argp", "doca_argp"),
    ("doca-rdma", "doca_rdma"),
    ("doca-urom", "doca_urom"),
    ("doca-dma", "doca_dma"),
    ("doca-comch", "doca_comch"),
];

#[cfg(feature = "system")]
fn link_system() {
    // DOCA_HOME (an SDK prefix such as /opt/mellanox/doca) is searched before PKG_CONFIG_PATH.
    let home = std::env::var_os("DOCA_HOME").map(std::path::PathBuf::from);
    if let Some(home) = &home {
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
    let mut missing = vec![];
    for (pkg, lib) in PACKAGES {
        // No version constraint in the probe: a DOCA that is found but has the wrong major
        // version must stop the build with our message, not look like a missing SDK.
        match pkg_config::Config::new().cargo_metadata(true).probe(pkg) {
            Ok(found) => {
                if let Err(msg) = check_doca_version(pkg, &found.version) {
                    panic!("{msg}");
                }
                println!("cargo:rustc-env=DOCA_SYS_{}_VERSION={}", lib.to_uppercase(), found.version);
                if pkg == "doca-common" {
                    println!("cargo:version={}", found.version);
                }
            }
            Err(e) => {
                // pkg-config's own text is long and mostly generic advice; its start says what failed.
                let mut said = e.to_string().split_whitespace().collect::<Vec<_>>().join(" ");
                if let Some((cut, _)) = said.char_indices().nth(300) {
                    said.truncate(cut);
                    said.push_str(" ...");
                }
                missing.push((pkg, lib, said));
            }
        }
    }
    if missing.is_empty() {
        return;
    }
    // Not a panic: `cargo check` and `cargo doc` of the declarations (and of everything built
    // on them) must work on machines without the SDK. Asking for the libraries by name makes
    // every real link fail, right after these messages.
    let names: Vec<&str> = missing.iter().map(|m| m.0).collect();
    for line in [
        format!("NVIDIA DOCA {DOCA_ABI_MAJOR}.x was not found with pkg-config (missing: {}).", names.join(", ")),
        "Point at an SDK with PKG_CONFIG_PATH=/opt/mellanox/doca/lib/<arch>-linux-gnu/pkgconfig or DOCA_HOME=/opt/mellanox/doca.".to_string(),
        "Type-checking works without it; linking a program will fail with `cannot find -ldoca_...`.".to_string(),
    ] {
        println!("cargo:warning=doca-sys (feature `system`): {line}");
    }
    for (pkg, lib, err) in &missing {
        println!("cargo:warning=doca-sys (feature `system`): pkg-config on `{pkg}`: {err}");
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
    if let Some(home) = &home {
        // An SDK without .pc files: let the linker look in its library directories.
        for sub in ["lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib"] {
            let dir = home.join(sub);
            if dir.is_dir() {
                println!("cargo:rustc-link-search=native={}", dir.display());
            }
        }
    }
}
