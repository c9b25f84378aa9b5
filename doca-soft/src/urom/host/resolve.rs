//! Finding the daemon's socket (docs/urom-soft.md, "Finding the daemon").
//!
//! The order is: the service's own socket path (the soft extension
//! `doca_soft_urom_service_set_socket_path`), else the first matching line of the file named by
//! `DOCA_UROM_SERVICE_FILE`, else the default per-user socket. [`resolve`] is pure (every input
//! is an argument) so it is tested with temporary files; [`resolve_from_env`] gathers the inputs
//! of this process.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::types::*;

/// The environment variable naming the service file.
pub const SERVICE_FILE_ENV: &str = "DOCA_UROM_SERVICE_FILE";

/// The directory sockets live in: `$XDG_RUNTIME_DIR`, or `/tmp` when it is unset or empty.
fn runtime_dir(xdg_runtime_dir: Option<&OsString>) -> PathBuf {
    match xdg_runtime_dir {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from("/tmp"),
    }
}

/// The default socket of the daemon of user `uid`: `$XDG_RUNTIME_DIR/async-doca-urom-<uid>.sock`.
pub fn default_socket(xdg_runtime_dir: Option<&OsString>, uid: u32) -> PathBuf {
    runtime_dir(xdg_runtime_dir).join(format!("async-doca-urom-{uid}.sock"))
}

/// What the host needs to know to find its daemon.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The socket set on the service (soft extension), if any.
    pub explicit: Option<PathBuf>,
    /// The value of `DOCA_UROM_SERVICE_FILE`, if set.
    pub service_file: Option<OsString>,
    /// The value of `XDG_RUNTIME_DIR`, if set.
    pub xdg_runtime_dir: Option<OsString>,
    /// This host's name (`gethostname`).
    pub hostname: String,
    /// The service device's PCI address, normalised (`dddd:bb:dd.f`).
    pub pci_addr: String,
    /// This process's real uid.
    pub uid: u32,
}

/// The daemon's socket for `inp`. Errors: a service file without a matching line (or one that
/// does not exist) is `DOCA_ERROR_NOT_FOUND`; one that cannot be read otherwise is
/// `DOCA_ERROR_IO_FAILED`.
pub fn resolve(inp: &Inputs) -> Result<PathBuf, doca_error_t> {
    if let Some(p) = &inp.explicit {
        return Ok(p.clone());
    }
    let Some(file) = inp.service_file.as_ref().filter(|f| !f.is_empty()) else {
        return Ok(default_socket(inp.xdg_runtime_dir.as_ref(), inp.uid));
    };
    let text = std::fs::read(Path::new(file)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => DOCA_ERROR_NOT_FOUND,
        _ => DOCA_ERROR_IO_FAILED,
    })?;
    let text = String::from_utf8_lossy(&text);
    let dev_hostname = find_line(&text, &inp.hostname, &inp.pci_addr).ok_or(DOCA_ERROR_NOT_FOUND)?;
    if dev_hostname.contains('/') {
        Ok(PathBuf::from(dev_hostname))
    } else {
        Ok(runtime_dir(inp.xdg_runtime_dir.as_ref()).join(format!("async-doca-urom-{dev_hostname}.sock")))
    }
}

/// The `dev_hostname` of the first line `<app_hostname> dpu <dev_hostname> <dev_pci_addr>
/// <net,devs>` for this host and device. Lines of another shape are skipped: the file is
/// shared with NVIDIA's tools, and one bad line must not hide the others.
fn find_line<'a>(text: &'a str, hostname: &str, pci_addr: &str) -> Option<&'a str> {
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 5 || f[1] != "dpu" || f[0] != hostname {
            continue;
        }
        if crate::dev::parse_pci(f[3]).as_deref() == Some(pci_addr) {
            return Some(f[2]);
        }
    }
    None
}

/// This host's name, as `gethostname` reports it.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it when the
    // name fits (and we force a terminator at the end otherwise).
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) };
    if r != 0 {
        return String::new();
    }
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len() - 1);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// [`resolve`] with this process's environment, host name and uid.
pub fn resolve_from_env(explicit: Option<PathBuf>, pci_addr: &str) -> Result<PathBuf, doca_error_t> {
    let inp = Inputs {
        explicit,
        service_file: std::env::var_os(SERVICE_FILE_ENV),
        xdg_runtime_dir: std::env::var_os("XDG_RUNTIME_DIR"),
        hostname: hostname(),
        pci_addr: pci_addr.to_string(),
        // SAFETY: getuid has no preconditions and cannot fail.
        uid: unsafe { libc::getuid() },
    };
    resolve(&inp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A temporary file removed on drop (unique per process and call).
    struct TempFile(PathBuf);
    impl TempFile {
        fn new(contents: &str) -> TempFile {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "urom-resolve-{}-{}.txt",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::write(&p, contents).unwrap();
            TempFile(p)
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn inputs(file: Option<&TempFile>, xdg: Option<&str>) -> Inputs {
        Inputs {
            explicit: None,
            service_file: file.map(|f| f.0.clone().into_os_string()),
            xdg_runtime_dir: xdg.map(OsString::from),
            hostname: "hostA".into(),
            pci_addr: "0000:03:00.0".into(),
            uid: 1234,
        }
    }

    #[test]
    fn explicit_path_wins() {
        let f = TempFile::new("garbage\n");
        let mut i = inputs(Some(&f), Some("/run/user/1"));
        i.explicit = Some(PathBuf::from("/x/y.sock"));
        assert_eq!(resolve(&i), Ok(PathBuf::from("/x/y.sock")));
    }

    #[test]
    fn default_socket_uses_xdg_or_tmp() {
        assert_eq!(
            resolve(&inputs(None, Some("/run/user/7"))),
            Ok(PathBuf::from("/run/user/7/async-doca-urom-1234.sock"))
        );
        assert_eq!(resolve(&inputs(None, None)), Ok(PathBuf::from("/tmp/async-doca-urom-1234.sock")));
        assert_eq!(resolve(&inputs(None, Some(""))), Ok(PathBuf::from("/tmp/async-doca-urom-1234.sock")));
    }

    #[test]
    fn service_file_first_matching_line() {
        let f = TempFile::new(
            "# comment line\n\
             hostB dpu other 0000:03:00.0 p0\n\
             hostA dpu wrongdev 0000:04:00.0 p0\n\
             hostA notdpu x 0000:03:00.0 p0\n\
             hostA dpu tooshort 0000:03:00.0\n\
             hostA dpu dpu0 03:00.0 p0,p1  # trailing comment\n\
             hostA dpu dpu1 0000:03:00.0 p0\n",
        );
        assert_eq!(resolve(&inputs(Some(&f), Some("/run/u"))), Ok(PathBuf::from("/run/u/async-doca-urom-dpu0.sock")));
        assert_eq!(resolve(&inputs(Some(&f), None)), Ok(PathBuf::from("/tmp/async-doca-urom-dpu0.sock")));
    }

    #[test]
    fn service_file_path_with_slash_is_the_socket() {
        let f = TempFile::new("hostA dpu /some/where/d.sock 0000:03:00.0 p0\n");
        assert_eq!(resolve(&inputs(Some(&f), None)), Ok(PathBuf::from("/some/where/d.sock")));
    }

    #[test]
    fn service_file_without_match_or_missing_is_not_found() {
        let f = TempFile::new("hostA dpu d 0000:05:00.0 p0\n#hostA dpu d 0000:03:00.0 p0\n");
        assert_eq!(resolve(&inputs(Some(&f), None)), Err(DOCA_ERROR_NOT_FOUND));
        let mut i = inputs(None, None);
        i.service_file = Some(OsString::from("/nonexistent/urom/service/file"));
        assert_eq!(resolve(&i), Err(DOCA_ERROR_NOT_FOUND));
    }

    #[test]
    fn hostname_is_not_empty() {
        assert!(!hostname().is_empty());
    }
}
