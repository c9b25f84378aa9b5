//! The C ABI of the soft provider, seen from C: the project's own DOCA headers
//! (`doca-soft/include`) compiled with `cc` and linked against `libdoca_soft.so` (the cdylib
//! build of doca-soft).
//!
//! * [`c_program_runs_against_the_cdylib`] builds `tests/c/doca_abi.c` (a program written
//!   only against the DOCA API: progress engine, sync event, RDMA write and send between two
//!   processes, one UROM command) and runs it with a private UROM service. The program prints
//!   the size and field offsets of every public struct and the value of every constant; they
//!   must equal what doca-sys declares, line for line.
//! * [`headers_and_declarations_name_the_same_functions`] preprocesses the headers and checks
//!   that they declare exactly the functions doca-sys declares.
//! * [`every_header_function_is_exported_by_the_cdylib`] links a C file that takes the address
//!   of every declared function against the cdylib.
//!
//! Without a C compiler these tests say so and pass (CI machines have `cc`).

mod common;

use std::collections::BTreeMap;
use std::mem::{align_of, offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::cprog::run_bounded;
use common::urom::{Daemon, TempDir};
use common::{hex, unhex};
use doca_sys::*;
use doca_urom_plugin::samples::graph;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const LIMIT: Duration = Duration::from_secs(90);

fn include_dir() -> PathBuf {
    Path::new(ROOT).join("doca-soft/include")
}

/// The directory holding `libdoca_soft.so`: cargo builds doca-soft's cdylib next to the
/// dependencies of this test (`target/<profile>/deps`), from the same sources as the rlib
/// linked into it.
fn cdylib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    assert!(deps.join("libdoca_soft.so").exists(), "libdoca_soft.so is not in {}", deps.display());
    deps
}

/// Runs `cc` with `args`; `None` (after saying why) when there is no C compiler.
fn cc(args: &[&std::ffi::OsStr]) -> Option<Output> {
    match Command::new("cc").args(args).output() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("SKIPPED: no C compiler (`cc`) on this machine; the C ABI is not checked here");
            None
        }
        Err(e) => panic!("running cc: {e}"),
        Ok(o) => Some(o),
    }
}

fn cc_ok(args: &[&std::ffi::OsStr]) -> Option<Output> {
    let o = cc(args)?;
    assert!(
        o.status.success(),
        "cc failed ({}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some(o)
}

/// Compiles and links a C file against the headers and the cdylib.
fn build(src: &Path, out: &Path) -> Option<()> {
    let lib = cdylib_dir();
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    let args: Vec<std::ffi::OsString> = vec![
        "-std=c11".into(),
        "-O1".into(),
        "-Wall".into(),
        "-Wextra".into(),
        "-Werror".into(),
        // As every NVIDIA sample builds: experimental (E) functions without the warning.
        "-DDOCA_ALLOW_EXPERIMENTAL_API".into(),
        "-I".into(),
        include_dir().into(),
        src.into(),
        "-o".into(),
        out.into(),
        "-L".into(),
        lib.into(),
        "-ldoca_soft".into(),
        rpath.into(),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    cc_ok(&args).map(|_| ())
}

// ---- the layout table the C program's output is compared with ----

macro_rules! size {
    ($m:ident, $c:literal, $t:ty) => {
        $m.insert(format!("layout size {}", $c), size_of::<$t>() as i64);
    };
}
macro_rules! align {
    ($m:ident, $c:literal, $t:ty) => {
        $m.insert(format!("layout align {}", $c), align_of::<$t>() as i64);
    };
}
macro_rules! off {
    ($m:ident, $c:literal, $t:ty, $($f:ident => $cf:literal),+) => {
        $( $m.insert(format!("layout offset {}.{}", $c, $cf), offset_of!($t, $f) as i64); )+
    };
}
macro_rules! value {
    ($m:ident, $($name:ident),+) => {
        $( $m.insert(format!("value {}", stringify!($name)), i64::from($name)); )+
    };
}

/// What doca-sys declares, in the C program's words.
fn rust_layout() -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    size!(m, "union doca_data", doca_data);
    align!(m, "union doca_data", doca_data);
    off!(m, "union doca_data", doca_data, ptr => "ptr", u64_ => "u64");
    size!(m, "doca_error_t", doca_error_t);
    size!(m, "doca_notification_handle_t", doca_notification_handle_t);
    size!(m, "doca_be32_t", doca_be32_t);
    size!(m, "enum doca_ctx_states", doca_ctx_states);
    size!(m, "enum doca_pe_event_mode", doca_pe_event_mode);
    size!(m, "enum doca_rdma_opcode", doca_rdma_opcode);
    size!(m, "doca_cpu_set_t", doca_cpu_set_t);
    align!(m, "doca_cpu_set_t", doca_cpu_set_t);
    size!(m, "struct doca_urom_service_plugin_info", doca_urom_service_plugin_info);
    off!(m, "struct doca_urom_service_plugin_info", doca_urom_service_plugin_info,
        id => "id", version => "version", plugin_name => "plugin_name");
    size!(m, "struct doca_urom_domain_oob_coll", doca_urom_domain_oob_coll);
    off!(m, "struct doca_urom_domain_oob_coll", doca_urom_domain_oob_coll,
        allgather => "allgather", req_test => "req_test", req_free => "req_free", coll_info => "coll_info",
        n_oob_indexes => "n_oob_indexes", oob_index => "oob_index");
    size!(m, "struct urom_worker_cmd", urom_worker_cmd);
    off!(m, "struct urom_worker_cmd", urom_worker_cmd,
        type_ => "type", urom_context => "urom_context", len => "len", plugin_cmd => "plugin_cmd");
    size!(m, "struct urom_worker_notify", urom_worker_notify);
    off!(m, "struct urom_worker_notify", urom_worker_notify,
        type_ => "type", urom_context => "urom_context", len => "len", status => "status",
        reserved => "reserved", plugin_notif => "plugin_notif");
    size!(m, "struct ucs_list_link", ucs_list_link);
    off!(m, "struct ucs_list_link", ucs_list_link, prev => "prev", next => "next");
    size!(m, "struct urom_worker_cmd_desc", urom_worker_cmd_desc);
    off!(m, "struct urom_worker_cmd_desc", urom_worker_cmd_desc,
        entry => "entry", dest_id => "dest_id", worker_cmd => "worker_cmd");
    size!(m, "struct urom_worker_notif_desc", urom_worker_notif_desc);
    off!(m, "struct urom_worker_notif_desc", urom_worker_notif_desc,
        entry => "entry", dest_id => "dest_id", worker_notif => "worker_notif");
    size!(m, "struct urom_plugin_iface", urom_plugin_iface);
    off!(m, "struct urom_plugin_iface", urom_plugin_iface,
        __doca_api_version => "__doca_api_version", open => "open", close => "close", addr => "addr",
        worker_cmd => "worker_cmd", progress => "progress", notif_pack => "notif_pack");
    size!(m, "struct urom_domain_lookups_iface", urom_domain_lookups_iface);
    off!(m, "struct urom_domain_lookups_iface", urom_domain_lookups_iface,
        addr_lookup => "addr_lookup", seg_lookup => "seg_lookup", memh_lookup => "memh_lookup",
        mkey_lookup => "mkey_lookup");
    size!(m, "struct urom_worker_ctx", urom_worker_ctx);
    off!(m, "struct urom_worker_ctx", urom_worker_ctx,
        iface => "iface", domain_iface => "domain_iface", plugin_ctx => "plugin_ctx");

    for (i, name) in DOCA_ERROR_NAMES.iter().enumerate() {
        m.insert(format!("value {name}"), i as i64);
    }
    // The constants above are the Rust names; check they agree with the name table.
    for e in [DOCA_SUCCESS, DOCA_ERROR_NO_MEMORY, DOCA_ERROR_IN_PROGRESS, DOCA_ERROR_SKIPPED] {
        assert_eq!(m[&format!("value {}", doca_error_name(e).unwrap())], i64::from(e.0));
    }
    value!(m, DOCA_CTX_STATE_IDLE, DOCA_CTX_STATE_STARTING, DOCA_CTX_STATE_RUNNING, DOCA_CTX_STATE_STOPPING);
    value!(m, DOCA_PE_EVENT_MODE_PROGRESS_SELECTIVE, DOCA_PE_EVENT_MODE_PROGRESS_ALL);
    value!(
        m,
        DOCA_ACCESS_FLAG_LOCAL_READ_ONLY,
        DOCA_ACCESS_FLAG_LOCAL_READ_WRITE,
        DOCA_ACCESS_FLAG_RDMA_READ,
        DOCA_ACCESS_FLAG_RDMA_WRITE,
        DOCA_ACCESS_FLAG_RDMA_ATOMIC,
        DOCA_ACCESS_FLAG_PCI_READ_ONLY,
        DOCA_ACCESS_FLAG_PCI_READ_WRITE,
        DOCA_ACCESS_FLAG_PCI_RELAXED_ORDERING
    );
    value!(m, DOCA_RDMA_OPCODE_RECV_SEND, DOCA_RDMA_OPCODE_RECV_SEND_WITH_IMM, DOCA_RDMA_OPCODE_RECV_WRITE_WITH_IMM);
    for (k, v) in [
        ("DOCA_UROM_PLUGIN_NAME_MAX_LEN", DOCA_UROM_PLUGIN_NAME_MAX_LEN),
        ("DOCA_DEVINFO_PCI_ADDR_SIZE", DOCA_DEVINFO_PCI_ADDR_SIZE),
        ("DOCA_DEVINFO_IBDEV_NAME_SIZE", DOCA_DEVINFO_IBDEV_NAME_SIZE),
        ("DOCA_DEVINFO_IFACE_NAME_SIZE", DOCA_DEVINFO_IFACE_NAME_SIZE),
    ] {
        m.insert(format!("value {k}"), v as i64);
    }
    m.insert("value DOCA_UROM_WORKER_ID_ANY_IS_ALL_ONES".into(), i64::from(DOCA_UROM_WORKER_ID_ANY == u64::MAX));
    m.insert("value DOCA_VERSION_EXACT".into(), DOCA_VERSION_EXACT as i64);
    m.insert("value DOCA_VERSION_OFFICIAL".into(), DOCA_VERSION_OFFICIAL as i64);
    m.insert("value DOCA_VERSION_LTE_CURRENT_3_0_58".into(), 1);
    m.insert("value DOCA_VERSION_RUNTIME_IS_COMPILED".into(), 1);
    m.insert("value DOCA_CPU_MACROS".into(), 1);
    m
}

/// Splits "layout offset struct x.y 8" into ("layout offset struct x.y", 8).
fn parse_layout(out: &str) -> BTreeMap<String, i64> {
    out.lines()
        .filter(|l| l.starts_with("layout ") || l.starts_with("value "))
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse::<i64>().unwrap_or_else(|_| panic!("bad line {l:?}")))
        })
        .collect()
}

/// This host's name, as the soft provider matches it in the service file.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname");
    let n = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn c_program_runs_against_the_cdylib() {
    let dir = TempDir::new("c-abi");
    let exe = dir.path().join("doca_abi");
    if build(&Path::new(ROOT).join("tests/c/doca_abi.c"), &exe).is_none() {
        return;
    }

    // A private service, named through DOCA's own mechanism (the service file), so the C
    // program needs no soft-provider extension.
    let daemon = Daemon::start(&["--builtin-samples"]);
    let pci = async_doca::Device::list().unwrap()[0].pci_addr.clone();
    let service_file = dir.path().join("urom.conf");
    std::fs::write(
        &service_file,
        format!("# written by tests/c_abi.rs\n{} dpu {} {pci} soft0\n", hostname(), daemon.socket.display()),
    )
    .unwrap();
    let value = 0x5eed_0123_4567_89ab_u64;
    let mut cmd = Command::new(&exe);
    cmd.arg(graph::PLUGIN_NAME)
        .arg(hex(&graph::Cmd::Loopback { value }.encode()))
        .env("DOCA_UROM_SERVICE_FILE", &service_file)
        .stdin(Stdio::null());
    let out = run_bounded(&mut cmd, LIMIT);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the C program failed ({}):\n{stdout}\n{stderr}", out.status);
    for step in ["ok rdma", "ok sync_event", "ok urom", "ok all"] {
        assert!(stdout.lines().any(|l| l == step), "no `{step}` in:\n{stdout}");
    }

    let c = parse_layout(&stdout);
    let rust = rust_layout();
    let mut diffs = Vec::new();
    for (k, v) in &rust {
        match c.get(k) {
            Some(cv) if cv == v => {}
            Some(cv) => diffs.push(format!("{k}: C {cv}, Rust {v}")),
            None => diffs.push(format!("{k}: not printed by the C program")),
        }
    }
    for k in c.keys().filter(|k| !rust.contains_key(*k)) {
        diffs.push(format!("{k}: not declared on the Rust side"));
    }
    assert!(diffs.is_empty(), "C and Rust disagree:\n{}", diffs.join("\n"));
    assert!(c.len() >= 100, "only {} layout lines", c.len());

    let reply = stdout.lines().find_map(|l| l.strip_prefix("urom_reply ")).expect("no urom_reply line");
    assert_eq!(graph::Notif::decode(&unhex(reply)).unwrap(), graph::Notif::Loopback { value });
    daemon.stop();
}

// ---- the headers and the declarations name the same functions ----

/// The names of the functions the headers declare (after the preprocessor expanded the
/// per-task-kind macros), static inline helpers included.
fn header_functions(dir: &Path) -> Option<Vec<String>> {
    let src = dir.join("all.c");
    let mut text = String::new();
    for h in std::fs::read_dir(include_dir()).unwrap() {
        let h = h.unwrap().file_name().into_string().unwrap();
        if h.ends_with(".h") {
            text.push_str(&format!("#include <{h}>\n"));
        }
    }
    std::fs::write(&src, text).unwrap();
    let inc = include_dir();
    let args: [&std::ffi::OsStr; 5] = ["-E".as_ref(), "-P".as_ref(), "-I".as_ref(), inc.as_os_str(), src.as_os_str()];
    let out = cc_ok(&args)?;
    let pre = String::from_utf8(out.stdout).unwrap();
    let mut names: Vec<String> = Vec::new();
    // A declaration or definition: an identifier starting `doca_` directly followed by `(`,
    // neither a function-pointer declarator `(*name)` nor a type name (`..._t`).
    let bytes = pre.as_bytes();
    let mut i = 0;
    while let Some(pos) = pre[i..].find("doca_").map(|p| p + i) {
        i = pos + 5;
        if pos > 0 && (bytes[pos - 1].is_ascii_alphanumeric() || bytes[pos - 1] == b'_') {
            continue;
        }
        if pos > 1 && &bytes[pos - 2..pos] == b"(*" {
            continue;
        }
        let end = pos + pre[pos..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap();
        let rest = pre[end..].trim_start();
        if rest.starts_with('(') && !pre[pos..end].ends_with("_t") {
            names.push(pre[pos..end].to_string());
        }
    }
    // Calls inside the inline helpers' bodies name functions that are declared anyway.
    names.sort();
    names.dedup();
    Some(names)
}

/// The `extern "C"` functions doca-sys declares, by scanning its sources: the names inside
/// `extern "C" { ... }` blocks, plus the re-implemented inline helpers.
fn rust_functions() -> Vec<String> {
    let mut names = Vec::new();
    for f in [
        "lib.rs",
        "urom.rs",
        "urom_plugin.rs",
        "common.rs",
        "rdma_more.rs",
        "pe_more.rs",
        "dev_more.rs",
        "sync_event_more.rs",
        "dma.rs",
        "comch.rs",
    ] {
        let text = std::fs::read_to_string(Path::new(ROOT).join("doca-sys/src").join(f)).unwrap();
        let mut inside = false;
        for line in text.lines() {
            if line.starts_with("extern \"C\" {") {
                inside = true;
            } else if line.starts_with('}') {
                inside = false;
            }
            let l = line.trim_start();
            let decl = if inside { l.strip_prefix("pub fn ") } else { l.strip_prefix("pub unsafe fn ") };
            if let Some(rest) = decl {
                names.push(rest.split('(').next().unwrap().to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn headers_and_declarations_name_the_same_functions() {
    let dir = TempDir::new("c-abi-names");
    let Some(c) = header_functions(dir.path()) else { return };
    let rust = rust_functions();
    assert!(rust.len() > 150, "scanned only {} Rust declarations", rust.len());
    // doca_cpu_set_add is a convenience of our header (a static inline, no symbol).
    let c: Vec<String> = c.into_iter().filter(|n| n != "doca_cpu_set_add").collect();
    let only_c: Vec<&String> = c.iter().filter(|n| !rust.contains(n)).collect();
    let only_rust: Vec<&String> = rust.iter().filter(|n| !c.contains(n)).collect();
    assert!(
        only_c.is_empty() && only_rust.is_empty(),
        "declared only in the C headers: {only_c:?}\ndeclared only in doca-sys: {only_rust:?}"
    );
}

#[test]
fn every_header_function_is_exported_by_the_cdylib() {
    let dir = TempDir::new("c-abi-link");
    let Some(names) = header_functions(dir.path()) else { return };
    let mut src = String::from("#include <stdio.h>\n");
    for h in std::fs::read_dir(include_dir()).unwrap() {
        let h = h.unwrap().file_name().into_string().unwrap();
        if h.ends_with(".h") {
            src.push_str(&format!("#include <{h}>\n"));
        }
    }
    src.push_str("static void *const fns[] = {\n");
    for n in &names {
        src.push_str(&format!("\t(void *)&{n},\n"));
    }
    src.push_str("};\nint main(void)\n{\n\tsize_t i, n = 0;\n");
    src.push_str("\tfor (i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)\n\t\tn += fns[i] != NULL;\n");
    src.push_str("\tprintf(\"%zu\\n\", n);\n\treturn 0;\n}\n");
    let file = dir.path().join("link_all.c");
    std::fs::write(&file, src).unwrap();
    let exe = dir.path().join("link_all");
    if build(&file, &exe).is_none() {
        return;
    }
    let out = run_bounded(&mut Command::new(&exe), LIMIT);
    assert!(out.status.success(), "{}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(n, names.len(), "some function resolved to NULL");
}

// ---- doca_compat.h / doca_version.h as programs use them ----

/// A program that uses the struct-version helpers and both version functions.
const COMPAT_C: &str = r#"
#include <stdio.h>
#include <string.h>
#include <doca_compat.h>
#include <doca_version.h>

struct versioned {
	DOCA_STRUCT_START;
	int value;
};

int main(void)
{
	struct versioned a = {DOCA_STRUCT_CTOR_LIST_START, .value = 1};
	struct versioned b;
	struct versioned *p = &b;
	DOCA_STRUCT_DEF(versioned, c);

	b.value = 7;
	DOCA_STRUCT_PTR_MEMSET_CTOR(p);
	if (DOCA_STRUCT_GET_VERSION(&a) != DOCA_VERSION_EXACT || DOCA_STRUCT_GET_VERSION(p) != DOCA_VERSION_EXACT ||
	    b.value != 0 || c.__doca_api_version != 0x0300003A || c.value != 0)
		return 1;
	if (!DOCA_VERSION_EQ_CURRENT(3, 0, 58) || DOCA_VERSION_LTE_CURRENT(3, 1, 0) || !DOCA_VERSION_LTE_CURRENT(2, 10, 0))
		return 2;
	printf("%s %s\n", doca_version(), doca_version_runtime());
	return 0;
}
"#;

/// `doca_version_runtime` is experimental, as in DOCA: without `DOCA_ALLOW_EXPERIMENTAL_API`
/// a call draws a deprecation warning (an error under `-Werror`), with it none; the struct
/// helpers stamp `DOCA_VERSION_EXACT`; compiled-against and loaded versions agree.
#[test]
fn compat_and_version_headers_work_as_programs_use_them() {
    let dir = TempDir::new("c-abi-compat");
    let src = dir.path().join("compat.c");
    std::fs::write(&src, COMPAT_C).unwrap();
    let exe = dir.path().join("compat");
    let inc = include_dir();
    let strict: [&std::ffi::OsStr; 7] = [
        "-std=c11".as_ref(),
        "-Werror".as_ref(),
        "-fsyntax-only".as_ref(),
        "-I".as_ref(),
        inc.as_os_str(),
        src.as_os_str(),
        "-Wdeprecated-declarations".as_ref(),
    ];
    let Some(o) = cc(&strict) else { return };
    assert!(!o.status.success(), "an experimental call without DOCA_ALLOW_EXPERIMENTAL_API compiled cleanly");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("doca_version_runtime") && err.contains("deprecated"), "{err}");
    if build(&src, &exe).is_none() {
        return;
    }
    let out = run_bounded(&mut Command::new(&exe), LIMIT);
    assert!(out.status.success(), "{}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "3.0.0058 3.0.0058");
}
