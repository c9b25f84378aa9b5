//! Drive plugins in-process, without a worker process: a fake worker ([`Worker`]) that calls a
//! plugin's C entry points exactly as the ABI prescribes (C-malloc'd command descriptors on a
//! list, notifications packed with `notif_pack` then freed), a fake domain ([`Domain`]) behind
//! its lookups, loading plugin shared objects ([`LoadedPlugin`]), building the C test plugin
//! ([`build_c_plugin`]) and finding the sample plugins cargo built ([`find_built_plugins`]).
//!
//! Everything here is single-threaded, like a real worker. Domain lookups return pointers into
//! the [`Domain`]'s tables; the domain can only change between plugin calls (a plugin has no
//! handle on it), which is what keeps those pointers valid for the call, as in the real worker.
//!
//! Public (not a `#[cfg(test)]` testkit) because users need it: plugin authors test their
//! plugins with it in-process (the sample plugins in `plugins/` and the workspace's integration
//! tests do).

use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use core::ptr;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use crate::abi::*;
use crate::{list, Status};

/// One registered buffer of a domain member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segment {
    /// Start address in the member's address space.
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
    /// Memory handle bytes.
    pub memh: Vec<u8>,
    /// Remote key bytes.
    pub mkey: Vec<u8>,
}

/// What the domain knows about one member.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Member {
    /// The address the plugin under test reported on that member, exactly as its `addr` entry
    /// point wrote it ([`Worker::address`]); `None`: the lookup fails with NOT_FOUND.
    pub addr: Option<Vec<u8>>,
    /// Registered buffers, in index order.
    pub segs: Vec<Segment>,
}

/// A fake domain table shared by the [`Worker`]s of one test, keyed by domain worker id.
#[derive(Debug, Default)]
pub struct Domain {
    members: RefCell<BTreeMap<u64, Member>>,
}

impl Domain {
    /// An empty domain.
    pub fn new() -> Rc<Domain> {
        Rc::new(Domain::default())
    }

    /// Adds or replaces member `id`.
    pub fn set_member(&self, id: u64, member: Member) {
        self.members.borrow_mut().insert(id, member);
    }

    /// Removes member `id`.
    pub fn remove_member(&self, id: u64) {
        self.members.borrow_mut().remove(&id);
    }
}

/// The fake worker's ctx: the ABI struct first, so the lookups can get back to the domain
/// from the `urom_worker_ctx` pointer the plugin passes them.
#[repr(C)]
struct FakeCtx {
    ctx: urom_worker_ctx,
    domain: Rc<Domain>,
}

/// Runs a lookup body, turning a panic into UNEXPECTED (these are `extern "C"`).
fn lookup_guard(body: impl FnOnce() -> Result<(), Status>) -> doca_error_t {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => DOCA_SUCCESS,
        Ok(Err(s)) => s.raw(),
        Err(_) => DOCA_ERROR_UNEXPECTED,
    }
}

/// The domain behind a ctx pointer.
///
/// # Safety
/// `ctx` is the `ctx` field (at offset 0) of a live `FakeCtx`, as every ctx a [`Worker`] hands
/// to its plugin is.
unsafe fn domain_of<'a>(ctx: *mut urom_worker_ctx) -> Result<&'a Domain, Status> {
    if ctx.is_null() {
        return Err(Status::INVALID_VALUE);
    }
    // SAFETY: caller contract; `FakeCtx` is repr(C) with `ctx` first, and the pointer was
    // derived from the whole `FakeCtx` (see `Worker::raw_ctx`).
    Ok(unsafe { &*(*ctx.cast::<FakeCtx>()).domain })
}

unsafe extern "C" fn fake_addr_lookup(ctx: *mut urom_worker_ctx, id: u64, addr: *mut *mut c_void) -> doca_error_t {
    lookup_guard(|| {
        // SAFETY: called by the plugin with the ctx its Worker gave it.
        let domain = unsafe { domain_of(ctx) }?;
        if addr.is_null() {
            return Err(Status::INVALID_VALUE);
        }
        let members = domain.members.borrow();
        let a = members.get(&id).and_then(|m| m.addr.as_ref()).ok_or(Status::NOT_FOUND)?;
        // SAFETY: `addr` is the plugin's out-pointer; the bytes stay put while the domain is
        // unchanged, i.e. for the rest of this plugin call.
        unsafe { *addr = a.as_ptr() as *mut c_void };
        Ok(())
    })
}

unsafe extern "C" fn fake_seg_lookup(ctx: *mut urom_worker_ctx, id: u64, va: u64, seg: *mut c_int) -> doca_error_t {
    lookup_guard(|| {
        // SAFETY: as in `fake_addr_lookup`.
        let domain = unsafe { domain_of(ctx) }?;
        if seg.is_null() {
            return Err(Status::INVALID_VALUE);
        }
        let members = domain.members.borrow();
        let m = members.get(&id).ok_or(Status::NOT_FOUND)?;
        let i = m.segs.iter().position(|s| va >= s.va && va - s.va < s.len).ok_or(Status::NOT_FOUND)?;
        // SAFETY: the plugin's out-pointer.
        unsafe { *seg = c_int::try_from(i).map_err(|_| Status::TOO_BIG)? };
        Ok(())
    })
}

fn seg_bytes(
    ctx: *mut urom_worker_ctx,
    id: u64,
    seg: c_int,
    len: *mut usize,
    out: *mut *mut c_void,
    pick: fn(&Segment) -> &Vec<u8>,
) -> doca_error_t {
    lookup_guard(|| {
        // SAFETY: as in `fake_addr_lookup`.
        let domain = unsafe { domain_of(ctx) }?;
        if len.is_null() || out.is_null() {
            return Err(Status::INVALID_VALUE);
        }
        let members = domain.members.borrow();
        let m = members.get(&id).ok_or(Status::NOT_FOUND)?;
        let s = usize::try_from(seg).ok().and_then(|i| m.segs.get(i)).ok_or(Status::NOT_FOUND)?;
        let bytes = pick(s);
        // SAFETY: the plugin's out-pointers; the bytes stay put for the call.
        unsafe {
            *len = bytes.len();
            *out = bytes.as_ptr() as *mut c_void;
        }
        Ok(())
    })
}

unsafe extern "C" fn fake_memh_lookup(
    ctx: *mut urom_worker_ctx,
    id: u64,
    seg: c_int,
    len: *mut usize,
    memh: *mut *mut c_void,
) -> doca_error_t {
    seg_bytes(ctx, id, seg, len, memh, |s| &s.memh)
}

unsafe extern "C" fn fake_mkey_lookup(
    ctx: *mut urom_worker_ctx,
    id: u64,
    seg: c_int,
    len: *mut usize,
    mkey: *mut *mut c_void,
) -> doca_error_t {
    seg_bytes(ctx, id, seg, len, mkey, |s| &s.mkey)
}

/// Calls `f` with a [`WorkerCtx`](crate::WorkerCtx) whose lookups read `domain`, for
/// unit-testing a plugin's methods directly (no C entry points, no `plugin_ctx`).
pub fn with_worker_ctx<R>(domain: Rc<Domain>, f: impl FnOnce(&crate::WorkerCtx) -> R) -> R {
    let mut fake = Box::new(FakeCtx {
        ctx: urom_worker_ctx {
            // SAFETY: all-zero is a valid urom_plugin_iface (a zero usize and `None`s); no
            // entry point is called through this ctx.
            iface: unsafe { core::mem::zeroed() },
            domain_iface: fake_lookups(),
            plugin_ctx: ptr::null_mut(),
        },
        domain,
    });
    let whole: *mut FakeCtx = &mut *fake;
    // SAFETY: the ctx lives in `fake` until after `f` returns, and its lookups are the fake
    // ones, which expect exactly this layout.
    let ctx = unsafe { crate::WorkerCtx::from_raw(whole.cast::<urom_worker_ctx>()) };
    f(&ctx)
}

fn fake_lookups() -> urom_domain_lookups_iface {
    urom_domain_lookups_iface {
        addr_lookup: Some(fake_addr_lookup),
        seg_lookup: Some(fake_seg_lookup),
        memh_lookup: Some(fake_memh_lookup),
        mkey_lookup: Some(fake_mkey_lookup),
    }
}

/// A notification as a worker hands it to the host: header fields plus the packed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The descriptor's `dest_id`.
    pub dest_id: u64,
    /// `worker_notif.type`: the plugin id.
    pub plugin: u64,
    /// `worker_notif.urom_context`.
    pub urom_context: u64,
    /// The status the host's task completes with: the packed header's (as the worker reads
    /// it), or the descriptor's when packing failed.
    pub status: Status,
    /// The body the host receives (what `notif_pack` wrote after the header), or the error.
    pub packed: Result<Vec<u8>, Status>,
}

/// A fake worker hosting one plugin instance (one `urom_worker_ctx`).
///
/// Opens the plugin on creation and closes it on drop.
pub struct Worker {
    ctx: Box<FakeCtx>,
    opened: bool,
    /// Room `progress` gives `notif_pack` (the host's `max_msg_size`). Default 64 KiB.
    pub pack_room: usize,
}

impl Worker {
    /// Asks `get_iface` for the entry points, checks them like the daemon does (API major 3,
    /// no NULL entry) and opens the plugin with lookups into `domain`.
    pub fn open(get_iface: urom_plugin_get_iface_fn, domain: Rc<Domain>) -> Result<Worker, Status> {
        // SAFETY: all-zero is a valid urom_plugin_iface (a zero usize and `None`s).
        let mut iface: urom_plugin_iface = unsafe { core::mem::zeroed() };
        // SAFETY: `get_iface` is a plugin's `urom_plugin_get_iface`; `iface` is writable.
        Status(unsafe { get_iface(&mut iface) }).result()?;
        if iface.__doca_api_version >> 24 != UROM_PLUGIN_DOCA_API_VERSION >> 24 {
            return Err(Status::UNSUPPORTED_VERSION);
        }
        let complete = iface.open.is_some()
            && iface.close.is_some()
            && iface.addr.is_some()
            && iface.worker_cmd.is_some()
            && iface.progress.is_some()
            && iface.notif_pack.is_some();
        if !complete {
            return Err(Status::NOT_SUPPORTED);
        }
        let ctx = Box::new(FakeCtx {
            ctx: urom_worker_ctx { iface, domain_iface: fake_lookups(), plugin_ctx: ptr::null_mut() },
            domain,
        });
        let mut w = Worker { ctx, opened: false, pack_room: 64 * 1024 };
        let open = iface.open.expect("checked above");
        // SAFETY: the plugin's open with its own live ctx.
        Status(unsafe { open(w.raw_ctx()) }).result()?;
        w.opened = true;
        Ok(w)
    }

    /// The ctx pointer handed to the plugin, derived from the whole `FakeCtx` so the lookups
    /// may read the fields after the ABI struct.
    pub fn raw_ctx(&mut self) -> *mut urom_worker_ctx {
        let whole: *mut FakeCtx = &mut *self.ctx;
        whole.cast::<urom_worker_ctx>()
    }

    /// The plugin's entry points.
    pub fn iface(&self) -> urom_plugin_iface {
        self.ctx.ctx.iface
    }

    /// Calls `addr` with `room` bytes of space: `Ok(address)`, or the status and the length
    /// the plugin reported.
    pub fn address_with_room(&mut self, room: usize) -> Result<Vec<u8>, (Status, usize)> {
        let f = self.iface().addr.expect("checked at open");
        let mut buf = vec![0u8; room];
        let mut len = room;
        let ctx = self.raw_ctx();
        // SAFETY: the plugin's addr with its ctx, `room` writable bytes and a valid length.
        let st = Status(unsafe { f(ctx, buf.as_mut_ptr().cast(), &mut len) });
        if st.is_success() && len <= room {
            buf.truncate(len);
            Ok(buf)
        } else {
            Err((st, len))
        }
    }

    /// The plugin's address as the worker stores it (what a domain member's
    /// [`Member::addr`] should hold): asks for the size first, like a worker does.
    pub fn address(&mut self) -> Result<Vec<u8>, Status> {
        match self.address_with_room(0) {
            Ok(a) => Ok(a),
            Err((s, needed)) if s == Status::INVALID_VALUE => self.address_with_room(needed).map_err(|(s, _)| s),
            Err((s, _)) => Err(s),
        }
    }

    /// Hands the plugin one command on a one-entry list, as the worker does. An error is what
    /// `worker_cmd` returned. Descriptors the plugin left on the list are freed here and
    /// reported as `BAD_STATE` (the plugin must take every command it is given).
    pub fn command(&mut self, plugin: u64, urom_context: u64, dest_id: u64, payload: &[u8]) -> Result<(), Status> {
        let f = self.iface().worker_cmd.expect("checked at open");
        let off = offset_of!(urom_worker_cmd_desc, worker_cmd) + offset_of!(urom_worker_cmd, plugin_cmd);
        let size = (off + payload.len()).max(size_of::<urom_worker_cmd_desc>());
        // SAFETY: plain C allocation, freed by the plugin (or below).
        let desc = unsafe { libc::malloc(size) }.cast::<urom_worker_cmd_desc>();
        if desc.is_null() {
            return Err(Status::NO_MEMORY);
        }
        let mut head = ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() };
        // SAFETY: `desc` has room for the header plus the payload; `write` into fresh memory;
        // `head` and the descriptor outlive the call.
        let st = unsafe {
            desc.write(urom_worker_cmd_desc {
                entry: ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() },
                dest_id,
                worker_cmd: urom_worker_cmd { type_: plugin, urom_context, len: payload.len() as u64, plugin_cmd: [] },
            });
            ptr::copy_nonoverlapping(payload.as_ptr(), desc.cast::<u8>().add(off), payload.len());
            list::init(&mut head);
            list::push_back(&mut head, ptr::addr_of_mut!((*desc).entry));
            let ctx = self.raw_ctx();
            Status(f(ctx, &mut head))
        };
        let mut leftover = false;
        // SAFETY: entries still on the list are the worker's descriptors (malloc'd above).
        while let Some(l) = unsafe { list::pop_front(&mut head) } {
            leftover = true;
            // SAFETY: as above; the entry link is at offset 0 of the descriptor.
            unsafe { libc::free(l.as_ptr().cast::<c_void>()) };
        }
        st.result()?;
        if leftover {
            return Err(Status::BAD_STATE);
        }
        Ok(())
    }

    /// One `progress` call: the notifications it appended, packed and freed as a worker does.
    /// `EMPTY` is an empty vector; other errors are returned.
    pub fn progress(&mut self) -> Result<Vec<Packed>, Status> {
        let iface = self.iface();
        let (f, pack) = (iface.progress.expect("checked at open"), iface.notif_pack.expect("checked at open"));
        let mut head = ucs_list_link { prev: ptr::null_mut(), next: ptr::null_mut() };
        // SAFETY: `head` is a fresh list; the plugin appends malloc'd notification descriptors.
        let st = unsafe {
            list::init(&mut head);
            let ctx = self.raw_ctx();
            Status(f(ctx, &mut head))
        };
        let mut out = Vec::new();
        // SAFETY: every entry is a `urom_worker_notif_desc` the plugin malloc'd and handed
        // over; the worker packs and frees each.
        while let Some(l) = unsafe { list::pop_front(&mut head) } {
            let desc = l.as_ptr().cast::<urom_worker_notif_desc>();
            let mut buf = vec![0u8; self.pack_room];
            let mut len = buf.len();
            // SAFETY: `desc` is live until the free below; `buf` has `len` writable bytes.
            let (hdr, pst) = unsafe {
                let n = ptr::addr_of_mut!((*desc).worker_notif);
                let hdr = ((*desc).dest_id, (*n).type_, (*n).urom_context, Status((*n).status));
                (hdr, Status(pack(n, &mut len, buf.as_mut_ptr().cast())))
            };
            // SAFETY: the worker frees each descriptor after packing (C malloc'd by the plugin).
            unsafe { libc::free(desc.cast::<c_void>()) };
            // As the worker does: the packed form is header + body; the host sees the body
            // and the header's status.
            let (status, packed) = if pst.is_success() && len <= buf.len() {
                match urom_notify_unpack(&buf[..len]) {
                    Some((st, body)) => (Status(st), Ok(body.to_vec())),
                    None => (hdr.3, Err(Status::UNEXPECTED)),
                }
            } else if pst.is_success() {
                (hdr.3, Err(Status::UNEXPECTED))
            } else {
                (hdr.3, Err(pst))
            };
            out.push(Packed { dest_id: hdr.0, plugin: hdr.1, urom_context: hdr.2, status, packed });
        }
        match st {
            s if s.is_success() => Ok(out),
            Status::EMPTY if out.is_empty() => Ok(out),
            s => Err(s),
        }
    }

    /// Calls `progress` until `want` notifications came or `rounds` calls passed (1 ms
    /// apart once a call brought nothing), returning what came.
    pub fn progress_until(&mut self, want: usize, rounds: usize) -> Result<Vec<Packed>, Status> {
        let mut got = Vec::new();
        for _ in 0..rounds {
            let more = self.progress()?;
            if more.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
            got.extend(more);
            if got.len() >= want {
                break;
            }
        }
        Ok(got)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.opened {
            let close = self.iface().close.expect("checked at open");
            let ctx = self.raw_ctx();
            // SAFETY: the plugin was opened on this ctx and is closed once.
            unsafe { close(ctx) };
        }
    }
}

/// A plugin shared object loaded with `dlopen(RTLD_NOW | RTLD_LOCAL)`, as the daemon loads
/// it. Never unloaded: code of a Rust cdylib may still be referenced (thread-local
/// destructors), and a test process is short-lived.
pub struct LoadedPlugin {
    /// `urom_plugin_get_iface` of the object.
    pub get_iface: urom_plugin_get_iface_fn,
    /// `urom_plugin_get_version` of the object.
    pub get_version: urom_plugin_get_version_fn,
}

impl LoadedPlugin {
    /// Loads `path` and resolves the two plugin symbols.
    pub fn load(path: &Path) -> Result<LoadedPlugin, String> {
        use std::os::unix::ffi::OsStrExt;
        let c = CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated path; loading runs the object's initialisers, which is
        // what loading a plugin means.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(format!("dlopen {}: {}", path.display(), dlerror()));
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: `h` is a live handle and `name` NUL-terminated.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            if p.is_null() {
                Err(format!("{}: no symbol {:?}", path.display(), name))
            } else {
                Ok(p)
            }
        };
        let gi = sym(c"urom_plugin_get_iface")?;
        let gv = sym(c"urom_plugin_get_version")?;
        // SAFETY: the plugin ABI gives these symbols exactly these C signatures.
        unsafe {
            Ok(LoadedPlugin {
                get_iface: core::mem::transmute::<*mut c_void, urom_plugin_get_iface_fn>(gi),
                get_version: core::mem::transmute::<*mut c_void, urom_plugin_get_version_fn>(gv),
            })
        }
    }

    /// The version the plugin reports.
    pub fn version(&self) -> Result<u64, Status> {
        let mut v = 0u64;
        // SAFETY: the plugin's get_version with a valid out-pointer.
        Status(unsafe { (self.get_version)(&mut v) }).result()?;
        Ok(v)
    }
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl call
    // on this thread; it is copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown error".into()
        } else {
            std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

/// The C test plugin's source (`plugins/c_loopback/c_loopback.c`).
pub fn c_plugin_source() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/c_loopback/c_loopback.c")
}

/// The directory of `doca_urom_plugin.h` (`doca-soft/include`).
pub fn c_include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../doca-soft/include")
}

/// Compiles the C test plugin into `out_dir/libc_loopback.so` with
/// `cc -shared -fPIC -O2 -Wall -Werror`. `None` when there is no `cc`; a compiler error
/// panics with the compiler's output (a broken plugin must fail the test, not skip it).
pub fn build_c_plugin(out_dir: &Path) -> Option<PathBuf> {
    build_c_plugin_with(out_dir, &[])
}

/// [`build_c_plugin`] with extra compiler arguments (`-DASYNC_DOCA_NO_UCX` builds it with the
/// header's own list even where UCX's headers are installed).
pub fn build_c_plugin_with(out_dir: &Path, extra: &[&str]) -> Option<PathBuf> {
    let out = out_dir.join("libc_loopback.so");
    let res = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c11"])
        .args(extra)
        .arg("-I")
        .arg(c_include_dir())
        .arg("-o")
        .arg(&out)
        .arg(c_plugin_source())
        .output();
    match res {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => panic!("running cc: {e}"),
        Ok(o) if !o.status.success() => {
            panic!(
                "cc failed ({}):\n{}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        }
        Ok(_) => Some(out),
    }
}

/// File names of the sample plugins cargo builds.
pub const SAMPLE_PLUGIN_FILES: [&str; 2] = [crate::samples::graph::FILE_NAME, crate::samples::sandbox::FILE_NAME];

/// The cargo output directory of the running executable (`target/<profile>/`): the
/// executable's own directory, or its parent for a test (`deps/`) or an example
/// (`examples/`).
pub fn exe_profile_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    match dir.file_name().and_then(|n| n.to_str()) {
        Some("deps" | "examples") => dir.parent().map(Path::to_path_buf),
        _ => Some(dir.to_path_buf()),
    }
}

/// The directories of `UROM_PLUGIN_PATH` (`;`-separated), in order.
fn env_plugin_dirs() -> Vec<PathBuf> {
    std::env::var_os("UROM_PLUGIN_PATH")
        .map(|v| v.to_string_lossy().split(';').filter(|d| !d.is_empty()).map(PathBuf::from).collect())
        .unwrap_or_default()
}

/// Where cargo may have put the workspace's cdylibs, as seen from the running executable:
/// `target/<profile>/` (where `cargo build` puts them) and, for a test, `target/<profile>/deps/`
/// (where a `cargo test` that builds them as libraries leaves them).
fn exe_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = exe_profile_dir() {
        dirs.push(p.clone());
        dirs.push(p.join("deps"));
    }
    dirs
}

fn has_samples(d: &Path) -> bool {
    SAMPLE_PLUGIN_FILES.iter().all(|f| d.join(f).is_file())
}

/// The directory holding both sample plugins ([`SAMPLE_PLUGIN_FILES`]) without building
/// anything: the first of `UROM_PLUGIN_PATH`'s directories that has them, else the cargo
/// output directories of the running executable. `None` when they are not there.
///
/// What cargo leaves there: `cargo build --workspace` (or `-p worker_graph -p worker_sandbox`)
/// writes them to `target/<profile>/`; `cargo test --workspace` does *not* build them (a
/// cdylib-only crate is only compiled as its test harness), so they may be missing or stale.
/// Tests should prefer [`sample_plugins_dir`].
pub fn find_built_plugins() -> Option<PathBuf> {
    env_plugin_dirs().into_iter().chain(exe_dirs()).find(|d| has_samples(d))
}

/// The path of plugin file `file` (e.g. `libworker_graph.so`) in the search order of
/// [`find_built_plugins`].
pub fn find_plugin(file: &str) -> Option<PathBuf> {
    env_plugin_dirs().into_iter().chain(exe_dirs()).map(|d| d.join(file)).find(|p| p.is_file())
}

/// Runs `cargo build --offline --quiet <args>` with the cargo running this test (`$CARGO`,
/// which cargo sets for the tests and examples it runs), in the running executable's profile,
/// and returns the profile's output directory. `target_dir`: `None` builds into the running
/// executable's target directory; `Some(name)` into `<target>/<name>`, a directory of its own
/// (for a `-p` build whose feature resolution differs from the running one's, which would
/// otherwise rewrite doca-soft's unhashed rlib under the tests that use it). Cargo does not
/// hold its build lock while tests run, so this works from inside `cargo test`. Bounded: a
/// cargo that has not finished within `limit` is killed.
pub fn cargo_build(args: &[&str], target_dir: Option<&str>, limit: Duration) -> Result<PathBuf, String> {
    let what = format!("cargo build {}", args.join(" "));
    let cargo = std::env::var_os("CARGO").ok_or_else(|| format!("{what}: CARGO is not set (not run by cargo)"))?;
    let profile_dir = exe_profile_dir().ok_or("cannot locate the running executable")?;
    let profile_name = profile_dir.file_name().and_then(|n| n.to_str()).ok_or("unnamed profile directory")?;
    let profile = if profile_name == "debug" { "dev" } else { profile_name };
    let mut target = profile_dir.parent().ok_or("executable outside a cargo target directory")?.to_path_buf();
    if let Some(name) = target_dir {
        target.push(name);
    }
    let mut child = std::process::Command::new(cargo)
        .args(["build", "--offline", "--quiet"])
        .args(args)
        .args(["--profile", profile, "--target-dir"])
        .arg(&target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("running cargo: {e}"))?;
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(st) => break st,
            None if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not finish in {} s", limit.as_secs()));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    if !status.success() {
        return Err(format!("{what} failed: {status}"));
    }
    Ok(target.join(profile_name))
}

/// Builds the sample plugins ([`cargo_build`]) into the running executable's target directory
/// and profile, and returns `target/<profile>/`; when the plugins are fresh it only checks.
/// Bounded: five minutes.
pub fn build_sample_plugins() -> Result<PathBuf, String> {
    let dir = cargo_build(&["-p", "worker_graph", "-p", "worker_sandbox"], None, Duration::from_secs(300))?;
    if !has_samples(&dir) {
        return Err(format!("cargo built the sample plugins but they are not in {}", dir.display()));
    }
    Ok(dir)
}

/// The directory to load the sample plugins from, for tests and examples: a
/// `UROM_PLUGIN_PATH` directory that has them (the caller chose), else freshly built by
/// [`build_sample_plugins`] when run by cargo, else whatever [`find_built_plugins`] finds.
pub fn sample_plugins_dir() -> Result<PathBuf, String> {
    if let Some(d) = env_plugin_dirs().into_iter().find(|d| has_samples(d)) {
        return Ok(d);
    }
    if std::env::var_os("CARGO").is_some() {
        return build_sample_plugins();
    }
    find_built_plugins()
        .ok_or_else(|| "sample plugins not built: run `cargo build -p worker_graph -p worker_sandbox`".into())
}
