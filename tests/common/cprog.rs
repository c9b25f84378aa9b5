//! Building and running DOCA C programs the way their authors build them against NVIDIA's SDK:
//! the only include and link flags come from `pkg-config --cflags --libs <DOCA packages>`, here
//! answered by the .pc files `scripts/soft-pkgconfig.sh` writes for libdoca_soft.so.
//!
//! ```ignore
//! let Some(prog) = CProgram::build("tests/c/log_argp.c", &["doca-common", "doca-argp"]) else { return };
//! let out = prog.run(&["-d", "dev0"]);
//! out.assert_success();
//! ```
//!
//! `build` returns `None` (after saying why) on a machine without `cc` or `pkg-config`, so the
//! tests pass there without checking anything; CI machines have both.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::urom::TempDir;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Warnings that must be errors: a program written for NVIDIA's headers must compile cleanly
/// against ours (missing declarations, wrong pointer or integer types).
pub const STRICT_FLAGS: [&str; 4] =
    ["-Werror=implicit-function-declaration", "-Werror=incompatible-pointer-types", "-Werror=int-conversion", "-Wall"];

/// How long one run may take before it is killed and the test fails.
const LIMIT: Duration = Duration::from_secs(60);

/// The directory holding `libdoca_soft.so`: cargo builds doca-soft's cdylib next to the
/// dependencies of the running test (`target/<profile>/deps`).
pub fn cdylib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    assert!(deps.join("libdoca_soft.so").exists(), "libdoca_soft.so is not in {}", deps.display());
    deps
}

fn have(tool: &str) -> bool {
    match Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("SKIPPED: no `{tool}` on this machine; the C program is not built here");
            false
        }
        Err(e) => panic!("running {tool}: {e}"),
    }
}

/// A compiled C program in a private temporary directory (removed on drop, with the .pc files).
pub struct CProgram {
    dir: TempDir,
    pub exe: PathBuf,
    /// The exact `pkg-config --cflags --libs` answer it was built with.
    pub pkg_flags: Vec<String>,
}

/// The output of one run.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn assert_success(&self) {
        assert_eq!(self.code, Some(0), "the C program failed:\n{}\n{}", self.stdout, self.stderr);
    }
    /// stdout and stderr together, for searching.
    pub fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

impl CProgram {
    /// Writes the .pc files for the cdylib this test links, then compiles `src` (relative to
    /// the workspace root) with the flags pkg-config gives for `packages` plus [`STRICT_FLAGS`].
    pub fn build(src: &str, packages: &[&str]) -> Option<CProgram> {
        if !have("cc") || !have("pkg-config") {
            return None;
        }
        let stem = Path::new(src).file_stem().unwrap().to_string_lossy().into_owned();
        let dir = TempDir::new(&format!("cprog-{stem}"));
        let pc = dir.path().join("pkgconfig");
        let script = Path::new(ROOT).join("scripts/soft-pkgconfig.sh");
        let o = Command::new("sh")
            .arg(&script)
            .arg("--libdir")
            .arg(cdylib_dir())
            .arg(&pc)
            .output()
            .expect("run scripts/soft-pkgconfig.sh");
        assert!(o.status.success(), "soft-pkgconfig.sh failed:\n{}", String::from_utf8_lossy(&o.stderr));

        let o = Command::new("pkg-config")
            .args(["--cflags", "--libs"])
            .args(packages)
            .env("PKG_CONFIG_PATH", &pc)
            .output()
            .expect("run pkg-config");
        assert!(o.status.success(), "pkg-config {packages:?} failed:\n{}", String::from_utf8_lossy(&o.stderr));
        let pkg_flags: Vec<String> =
            String::from_utf8(o.stdout).unwrap().split_whitespace().map(String::from).collect();

        let exe = dir.path().join(&stem);
        let o = Command::new("cc")
            .args(STRICT_FLAGS)
            .arg(Path::new(ROOT).join(src))
            .arg("-o")
            .arg(&exe)
            .args(&pkg_flags)
            .output()
            .expect("run cc");
        assert!(
            o.status.success(),
            "cc {src} with {pkg_flags:?} failed:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        Some(CProgram { dir, exe, pkg_flags })
    }

    /// A file path inside the program's temporary directory (for inputs such as JSON files).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs the program with `args` (stdin empty), bounded by a time limit.
    pub fn run(&self, args: &[&str]) -> Run {
        self.run_with(Command::new(&self.exe).args(args))
    }

    /// Runs a prepared command (extra environment, ...) bounded by a time limit.
    pub fn run_with(&self, cmd: &mut Command) -> Run {
        let out = run_bounded(cmd.stdin(Stdio::null()), LIMIT);
        Run {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs a C program's command to its exit, collecting its output; panics (a test failure)
/// when it has not exited within `limit` (it is killed).
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    // `cargo test` puts target/<profile> and its deps on LD_LIBRARY_PATH, which outranks the
    // program's rpath (a RUNPATH) and may hold an older libdoca_soft.so than the one the
    // test was built with. Run as a user would: on the rpath alone (unless the caller set it).
    if !cmd.get_envs().any(|(k, _)| k == "LD_LIBRARY_PATH") {
        cmd.env_remove("LD_LIBRARY_PATH");
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start the C program");
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = read(Box::new(child.stdout.take().unwrap()));
    let err = read(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish within {limit:?}", cmd.get_program().to_string_lossy());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}
