//! The C test plugin (`plugins/c_loopback`), compiled against `doca-soft/include/doca_urom_plugin.h`,
//! loaded with `dlopen` and driven by the SDK's fake worker: checks that the header describes
//! the ABI the Rust side implements (its `_Static_assert`s check the struct sizes at build).

use doca_urom_plugin::abi::{urom_plugin_iface, DOCA_VERSION_EXACT};
use doca_urom_plugin::testing::{build_c_plugin, build_c_plugin_with, Domain, LoadedPlugin, Worker};
use doca_urom_plugin::Status;
use std::path::PathBuf;

/// A scratch directory unique to this test process, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("urom-plugin-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn c_loopback_reverses_payloads_through_the_abi() {
    let dir = TempDir::new("c-loopback");
    let Some(so) = build_c_plugin(&dir.0) else {
        eprintln!("no `cc`: skipping the C plugin test");
        return;
    };
    let lib = LoadedPlugin::load(&so).expect("load");
    assert_eq!(lib.version(), Ok(1));

    let mut w = Worker::open(lib.get_iface, Domain::new()).expect("open");
    assert_eq!(w.address_with_room(3).unwrap_err(), (Status::INVALID_VALUE, 10));
    assert_eq!(w.address().unwrap(), b"c_loopback");

    assert!(w.progress().unwrap().is_empty(), "EMPTY before any command");
    w.command(1 << 4, 11, 3, b"abcdef").unwrap();
    w.command(1 << 4, 12, 4, b"").unwrap();
    let got = w.progress().unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].plugin, got[0].urom_context, got[0].dest_id, got[0].status), (1 << 4, 11, 3, Status::SUCCESS));
    assert_eq!(got[0].packed.as_deref(), Ok(&b"fedcba"[..]));
    assert_eq!((got[1].urom_context, got[1].dest_id), (12, 4));
    assert_eq!(got[1].packed.as_deref(), Ok(&[][..]));

    w.pack_room = 2;
    w.command(1, 13, 1, b"xyz").unwrap();
    assert_eq!(w.progress().unwrap()[0].packed, Err(Status::TOO_BIG));

    // A command left unanswered at close is freed by the plugin's close (run under a leak
    // checker to see it); here it must simply not crash.
    w.command(1, 14, 1, b"pending").unwrap();
    drop(w);
}

/// Reads the C plugin's `c_loopback_list_impl` string: which list definition its build used.
fn list_impl(so: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(so.as_os_str().as_bytes()).unwrap();
    // SAFETY: dlopen of the plugin just built (its constructors are the C runtime's); the
    // symbol is a NUL-terminated char array; the handle is closed after the copy.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null(), "dlopen {}", so.display());
        let sym = libc::dlsym(h, c"c_loopback_list_impl".as_ptr());
        assert!(!sym.is_null());
        let s = std::ffi::CStr::from_ptr(sym.cast()).to_string_lossy().into_owned();
        libc::dlclose(h);
        s
    }
}

/// doca_urom_plugin.h takes UCX's list from `<ucs/datastruct/list.h>` when UCX is installed
/// (as DOCA's header does) and its own compatible definition otherwise; the plugin works
/// either way, and stamps DOCA_VERSION_EXACT through DOCA_STRUCT_CTOR.
#[test]
fn c_plugin_builds_with_ucx_list_when_present_and_with_the_fallback() {
    let ucx = std::path::Path::new("/usr/include/ucs/datastruct/list.h").exists();
    for (tag, extra, want) in [
        ("c-list-default", &[][..], if ucx { "ucx" } else { "fallback" }),
        ("c-list-fallback", &["-DASYNC_DOCA_NO_UCX"][..], "fallback"),
    ] {
        let dir = TempDir::new(tag);
        let Some(so) = build_c_plugin_with(&dir.0, extra) else {
            eprintln!("no `cc`: skipping the C plugin test");
            return;
        };
        assert_eq!(list_impl(&so), want, "{tag}");
        let lib = LoadedPlugin::load(&so).expect("load");
        // SAFETY: all-zero is a valid iface; get_iface fills it.
        let mut iface: urom_plugin_iface = unsafe { std::mem::zeroed() };
        // SAFETY: the plugin's exported urom_plugin_get_iface with a writable table.
        assert_eq!(Status(unsafe { (lib.get_iface)(&mut iface) }), Status::SUCCESS);
        assert_eq!(iface.__doca_api_version, DOCA_VERSION_EXACT, "stamped by DOCA_STRUCT_CTOR");
        let domain = Domain::new();
        let mut w = Worker::open(lib.get_iface, domain.clone()).expect("open");
        w.command(1, 1, 1, b"ab").unwrap();
        let got = w.progress().unwrap();
        assert_eq!(got[0].packed.as_deref(), Ok(&b"ba"[..]), "{tag}");
        probe_lookups(&so, &mut w, &domain);
    }
    if !ucx {
        println!(
            "UCX headers are not installed (scripts/setup.sh installs libucx-dev): only the fallback list was built"
        );
    }
}

type ProbeFn = unsafe extern "C" fn(
    *mut doca_urom_plugin::abi::urom_worker_ctx,
    u64,
    u64,
    usize,
    *mut u8,
    *mut usize,
) -> doca_urom_plugin::abi::doca_error_t;

/// The header-only `doca_urom_worker_domain_*_lookup` wrappers, compiled into the C plugin,
/// reach the worker's lookup table (here the SDK's fake worker and its domain).
fn probe_lookups(so: &std::path::Path, w: &mut Worker, domain: &Domain) {
    use doca_urom_plugin::testing::{Member, Segment};
    use std::os::unix::ffi::OsStrExt;
    let me = w.address().unwrap();
    domain.set_member(
        7,
        Member {
            addr: Some(me.clone()),
            segs: vec![
                Segment { va: 0x1000, len: 0x100, memh: b"h0".to_vec(), mkey: b"k0".to_vec() },
                Segment { va: 0x8000, len: 0x10, memh: b"memh1".to_vec(), mkey: b"mkey-1".to_vec() },
            ],
        },
    );
    let path = std::ffi::CString::new(so.as_os_str().as_bytes()).unwrap();
    // SAFETY: dlopen of the plugin just built; the symbol has the ProbeFn signature (see
    // c_loopback.c); the ctx is the fake worker's live ctx; `out` has `n` writable bytes.
    unsafe {
        let h = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        assert!(!h.is_null());
        let sym = libc::dlsym(h, c"c_loopback_probe_lookups".as_ptr());
        assert!(!sym.is_null());
        let probe: ProbeFn = std::mem::transmute(sym);
        let mut out = [0u8; 256];
        let mut n = out.len();
        let st = probe(w.raw_ctx(), 7, 0x8004, me.len(), out.as_mut_ptr(), &mut n);
        assert_eq!(Status(st), Status::SUCCESS);
        let mut want = me.clone();
        want.extend_from_slice(&[1, 5]);
        want.extend_from_slice(b"memh1");
        want.push(6);
        want.extend_from_slice(b"mkey-1");
        assert_eq!(&out[..n], &want[..]);
        let mut n = out.len();
        assert_eq!(Status(probe(w.raw_ctx(), 8, 0, 0, out.as_mut_ptr(), &mut n)), Status::NOT_FOUND, "no member 8");
        let mut n = out.len();
        assert_eq!(
            Status(probe(w.raw_ctx(), 7, 0x9000, 0, out.as_mut_ptr(), &mut n)),
            Status::NOT_FOUND,
            "no segment there"
        );
        libc::dlclose(h);
    }
}
