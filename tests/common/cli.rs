//! Where the `async-doca` command line is, for the tests that run it (the soft UROM service
//! daemon `async-doca urom-service`, the `taskset` tool).
//!
//! The binary belongs to the workspace member `cli/` (package `async-doca-cli`), so cargo gives
//! the library's tests no `CARGO_BIN_EXE_async-doca`. `cargo test` at the repository root and
//! `cargo test --workspace` build it beside the tests (`target/<profile>/async-doca`, because
//! `cli/` is a default member with integration tests of its own), and this finds it there.
//! When it is missing (e.g. `cargo test -p async-doca --test urom` on a fresh checkout) it is
//! built with the cargo running the test into a target directory of its own, never into the
//! running one: a `-p async-doca-cli` build resolves features for that package alone and would
//! rewrite doca-soft's unhashed rlib and `libdoca_soft.so` under tests that use them (see
//! `urom-coll/tests/plugin.rs`). Not in a sanitizer build (`scripts/sanitize.sh`, which
//! builds the binary itself before the tests): there it is an error to be missing.
//!
//! Included by `tests/common/mod.rs` and, with `#[path]`, by `tests/conformance.rs`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The `async-doca` executable of this test's profile. Panics (a test setup failure) when it
/// is neither built nor buildable.
pub fn exe() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| find_or_build().unwrap_or_else(|e| panic!("the async-doca binary: {e}")))
}

fn find_or_build() -> Result<PathBuf, String> {
    let profile_dir = doca_urom_plugin::testing::exe_profile_dir().ok_or("no target directory")?;
    let built = profile_dir.join("async-doca");
    if built.is_file() {
        warn_if_stale(&built);
        return Ok(built);
    }
    if std::env::var_os("CARGO").is_none() {
        return Err(format!(
            "{} is missing and CARGO is not set: run `cargo build -p async-doca-cli`",
            built.display()
        ));
    }
    // A sanitizer build (scripts/sanitize.sh) cannot be repeated by a nested `cargo build`: it
    // would inherit RUSTFLAGS=-Zsanitizer=... without the outer build's -Zbuild-std and
    // --target, so the sanitizer flags would reach the proc macros (serde_derive), which rustc
    // then cannot load. The script builds the binary first, the same way; say so instead of
    // failing deep inside cargo.
    if std::env::var("RUSTFLAGS").is_ok_and(|f| f.contains("-Zsanitizer")) {
        return Err(format!(
            "{} is missing in a sanitizer build: build it first with the same RUSTFLAGS, \
             -Zbuild-std and --target (`cargo +nightly build -Zbuild-std --target HOST -p \
             async-doca-cli --bin async-doca`, as scripts/sanitize.sh does)",
            built.display()
        ));
    }
    // Bounded: a build that takes over ten minutes is killed (a whole profile from scratch).
    let args = ["-p", "async-doca-cli", "--bin", "async-doca"];
    let dir = doca_urom_plugin::testing::cargo_build(&args, Some("nested-cli"), Duration::from_secs(600))?;
    Ok(dir.join("async-doca"))
}

/// Says so on stderr when a source file the binary is built from is newer than the binary:
/// `cargo test --test X` builds the test, not the CLI, so after a change to the daemon or the
/// provider such a run would test the old binary (`cargo test --workspace`, `scripts/test.sh`
/// and CI build it first). Not an error: the binary may not depend on the file that changed.
/// libtest shows it with the output of the test that first needed the binary: when that test
/// fails, or with `--nocapture`.
fn warn_if_stale(binary: &Path) {
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else { return };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut dirs: Vec<PathBuf> =
        ["src", "cli/src", "doca-soft/src", "doca-sys/src"].iter().map(|d| root.join(d)).collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                dirs.push(path);
            } else if let Ok(t) = meta.modified() {
                if newest.as_ref().is_none_or(|(n, _)| t > *n) {
                    newest = Some((t, path));
                }
            }
        }
    }
    if let Some((t, path)) = newest {
        if t > built {
            eprintln!(
                "warning: {} is older than {}: it may not have been rebuilt; run `cargo build -p async-doca-cli`",
                binary.display(),
                path.display()
            );
        }
    }
}
