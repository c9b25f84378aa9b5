//! Plugin discovery: every `.so` in the plugin directories, `dlopen`ed once by the daemon.
//!
//! The daemon loads each candidate itself (`RTLD_NOW | RTLD_LOCAL`), so a broken file is found
//! at start, logged and skipped, rather than in every worker. Workers are forked from the
//! daemon and inherit the loaded objects and the [`Plugin`] table: a worker never `dlopen`s.
//! Handles stay open for the life of the [`Plugins`] value (the daemon's life); dropping it
//! `dlclose`s them, which is only done once no worker of this process runs their code.

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::log::{log_at, Log, LogLevel};
use crate::types::*;
use crate::urom::proto::PluginInfo;

/// The longest plugin name: `DOCA_UROM_PLUGIN_NAME_MAX_LEN` (48) with its NUL.
pub const PLUGIN_NAME_MAX: usize = 47;
/// Ids are one bit each.
pub const MAX_PLUGINS: usize = 64;

/// One loaded plugin.
#[derive(Debug)]
pub struct Plugin {
    /// One bit: `1 << n`, `n` its rank in name order.
    pub id: u64,
    /// What `urom_plugin_get_version` reported.
    pub version: u64,
    /// The file name without a leading `lib` and the `.so` suffix.
    pub name: String,
    /// The file it was loaded from (`(built in)` for a [`Builtin`]).
    pub path: PathBuf,
    /// Its entry points, every one non-NULL (checked at load).
    pub iface: urom_plugin_iface,
    /// The soft-only `urom_plugin_soft_arm`, when the plugin exports it: what lets the worker
    /// sleep while commands are outstanding (see `doca_urom_plugin.h`).
    pub arm: Option<urom_plugin_soft_arm_fn>,
}

/// The plugins of a daemon, in id order, and the `dlopen` handles that keep them loaded.
#[derive(Debug, Default)]
pub struct Plugins {
    list: Vec<Plugin>,
    handles: Vec<Handle>,
}

#[derive(Debug)]
struct Handle(*mut libc::c_void);

/// A plugin compiled into the program that runs the daemon: offered like a discovered one,
/// with no shared object to load. Workers are forked from the daemon, so the entry points are
/// valid in them as well.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// The name it is listed under.
    pub name: &'static str,
    /// The version it reports.
    pub version: u64,
    /// Its entry points (checked like a loaded plugin's).
    pub iface: urom_plugin_iface,
    /// Its soft-only `urom_plugin_soft_arm`, if it has one (see [`Plugin::arm`]).
    pub arm: Option<urom_plugin_soft_arm_fn>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a handle from a successful dlopen, closed once; nothing of this library is
        // used after the owning Plugins is dropped.
        unsafe { libc::dlclose(self.0) };
    }
}

impl Plugins {
    /// The plugins, in id order.
    pub fn list(&self) -> &[Plugin] {
        &self.list
    }

    /// The plugin whose id is `id` (one bit).
    pub fn by_id(&self, id: u64) -> Option<&Plugin> {
        self.list.iter().find(|p| p.id == id)
    }

    /// The OR of every plugin id.
    pub fn mask(&self) -> u64 {
        self.list.iter().fold(0, |m, p| m | p.id)
    }

    /// What a `Welcome` lists.
    pub fn infos(&self) -> Vec<PluginInfo> {
        self.list.iter().map(|p| PluginInfo { id: p.id, version: p.version, name: p.name.clone() }).collect()
    }
}

/// Splits a `;`-separated plugin path (`UROM_PLUGIN_PATH`), dropping empty entries.
pub fn parse_plugin_path(s: &str) -> Vec<PathBuf> {
    s.split(';').filter(|d| !d.is_empty()).map(PathBuf::from).collect()
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        // SAFETY: non-NULL and NUL-terminated per dlerror's contract.
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// What loading a plugin yields: its version, its entry points and its optional soft-only arm.
type Loaded = (u64, urom_plugin_iface, Option<urom_plugin_soft_arm_fn>);

/// Loads and checks one file; the reason on failure.
fn load(path: &Path) -> Result<(Handle, Loaded), String> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| "path holds a NUL byte".to_string())?;
    // SAFETY: `c` is a valid C string; dlopen runs the object's constructors, which is what
    // loading a plugin means.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if h.is_null() {
        return Err(dlerror());
    }
    let handle = Handle(h);
    let sym = |name: &CStr| {
        // SAFETY: `h` is a live handle and `name` a valid C string.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        if p.is_null() {
            Err(format!("no symbol {}", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    let get_iface = sym(c"urom_plugin_get_iface")?;
    let get_version = sym(c"urom_plugin_get_version")?;
    // SAFETY: the plugin ABI fixes these symbols' types; a non-NULL dlsym result is the
    // function's address.
    let (get_iface, get_version) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, urom_plugin_get_iface_fn>(get_iface),
            std::mem::transmute::<*mut libc::c_void, urom_plugin_get_version_fn>(get_version),
        )
    };
    let mut version = 0u64;
    // SAFETY: `version` is a valid out-pointer for the call.
    let st = unsafe { get_version(&mut version) };
    if st != DOCA_SUCCESS {
        return Err(format!("urom_plugin_get_version failed: {}", err_name(st)));
    }
    let mut iface = urom_plugin_iface {
        __doca_api_version: 0,
        open: None,
        close: None,
        addr: None,
        worker_cmd: None,
        progress: None,
        notif_pack: None,
    };
    // SAFETY: `iface` is a valid, initialized out-struct of the ABI's layout.
    let st = unsafe { get_iface(&mut iface) };
    if st != DOCA_SUCCESS {
        return Err(format!("urom_plugin_get_iface failed: {}", err_name(st)));
    }
    check_iface(&iface)?;
    // Optional and soft-only: a plugin without it is polled (see `doca_urom_plugin.h`).
    // SAFETY: `h` is a live handle and the name a valid C string.
    let arm = unsafe { libc::dlsym(h, c"urom_plugin_soft_arm".as_ptr()) };
    let arm = (!arm.is_null()).then(|| {
        // SAFETY: the extension fixes this symbol's type (`urom_plugin_soft_arm_fn`); a
        // non-NULL dlsym result is the function's address.
        unsafe { std::mem::transmute::<*mut libc::c_void, urom_plugin_soft_arm_fn>(arm) }
    });
    Ok((handle, (version, iface, arm)))
}

/// The checks every plugin passes: API major 3 and no NULL entry point.
fn check_iface(iface: &urom_plugin_iface) -> Result<(), String> {
    let major = iface.__doca_api_version >> 24;
    if major != UROM_PLUGIN_DOCA_API_VERSION >> 24 {
        return Err(format!("built for DOCA API major {major}, this service speaks 3"));
    }
    let missing: Vec<&str> = [
        ("open", iface.open.is_none()),
        ("close", iface.close.is_none()),
        ("addr", iface.addr.is_none()),
        ("worker_cmd", iface.worker_cmd.is_none()),
        ("progress", iface.progress.is_none()),
        ("notif_pack", iface.notif_pack.is_none()),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(n, _)| *n)
    .collect();
    if !missing.is_empty() {
        return Err(format!("NULL entry points: {}", missing.join(", ")));
    }
    Ok(())
}

/// The name a plugin file is listed under: without `.so`, and without a leading `lib` (cargo
/// and most build systems name shared objects `lib<name>.so`). `None` for other files.
pub fn plugin_name(file_name: &str) -> Option<&str> {
    let stem = file_name.strip_suffix(".so")?;
    Some(stem.strip_prefix("lib").filter(|s| !s.is_empty()).unwrap_or(stem))
}

pub(crate) fn err_name(e: doca_error_t) -> &'static str {
    usize::try_from(e.0).ok().and_then(|i| DOCA_ERROR_NAMES.get(i)).copied().unwrap_or("DOCA_ERROR_UNRECOGNIZED_CODE")
}

/// Gives the DOCA library a plugin is linked to its own standard log backend, once per copy of
/// that library, when it is not the daemon's: whether one was given (`routed` holds the copies
/// seen so far).
///
/// NVIDIA's plugins log with `DOCA_LOG` and are linked to DOCA's libraries, as NVIDIA's UROM
/// worker is, so the two share one logging state there and the worker's output carries the
/// plugins' lines. Here the service links doca-soft into its own program, and a plugin built
/// with `pkg-config --libs doca-common` brings `libdoca_soft.so`: a second copy, whose log has
/// no backend until something creates one, so its lines were dropped. `dlsym` on the plugin's
/// handle searches the plugin and its dependencies only, so it finds that copy (or nothing,
/// for a plugin linked to no DOCA library). Workers are forked after discovery and inherit the
/// backend: the plugins' lines go to the service's stdout (INFO and more verbose) and stderr,
/// at the copy's default levels (INFO, or DEBUG when the service logs at debug).
fn route_plugin_logs(h: &Handle, level: LogLevel, routed: &mut Vec<usize>) -> bool {
    // SAFETY: `h` is a live handle and the name a valid C string.
    let create = unsafe { libc::dlsym(h.0, c"doca_log_backend_create_standard".as_ptr()) };
    let own = crate::log::doca_log_backend_create_standard as *const () as usize;
    if create.is_null() || create as usize == own || routed.contains(&(create as usize)) {
        return false;
    }
    routed.push(create as usize);
    // SAFETY: DOCA's `doca_error_t doca_log_backend_create_standard(void)`, the type of the
    // symbol of that name in any DOCA library (ours among them).
    let create = unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn() -> doca_error_t>(create) };
    let _ = create();
    if level == LogLevel::Debug {
        // SAFETY: as above: DOCA's `doca_error_t doca_log_level_set_global_lower_limit(uint32_t)`.
        let set = unsafe { libc::dlsym(h.0, c"doca_log_level_set_global_lower_limit".as_ptr()) };
        if !set.is_null() {
            // SAFETY: as above.
            let set = unsafe { std::mem::transmute::<*mut libc::c_void, extern "C" fn(u32) -> doca_error_t>(set) };
            let _ = set(DOCA_LOG_LEVEL_DEBUG);
        }
    }
    true
}

/// Loads every valid plugin of `dirs` (see the module doc and docs/urom-soft.md) after the
/// built-ins: names are file names without `lib` and `.so`, a built-in or the first directory
/// holding a valid plugin of a name wins, ids are `1 << n` in name order, at most 64.
/// Everything skipped is logged with the reason.
pub(crate) fn discover(dirs: &[PathBuf], builtins: &[Builtin], log: &Log) -> Plugins {
    let mut found: BTreeMap<String, (PathBuf, Option<Handle>, Loaded)> = BTreeMap::new();
    let mut routed = Vec::new();
    for b in builtins {
        match check_iface(&b.iface) {
            Ok(()) if !b.name.is_empty() && b.name.len() <= PLUGIN_NAME_MAX && !found.contains_key(b.name) => {
                found.insert(b.name.to_string(), (PathBuf::from("(built in)"), None, (b.version, b.iface, b.arm)));
            }
            Ok(()) => log_at!(log, Warn, "skipping built-in plugin {:?}: bad or repeated name", b.name),
            Err(why) => log_at!(log, Warn, "skipping built-in plugin {}: {why}", b.name),
        }
    }
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                log_at!(log, Warn, "plugin directory {}: {e}", dir.display());
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for path in files {
            let Some(fname) = path.file_name().and_then(|n| n.to_str()) else { continue };
            let Some(name) = plugin_name(fname) else { continue };
            if !path.is_file() {
                continue;
            }
            if name.is_empty() || name.len() > PLUGIN_NAME_MAX {
                log_at!(log, Warn, "skipping plugin {}: name must be 1 to {PLUGIN_NAME_MAX} bytes", path.display());
                continue;
            }
            if let Some((first, ..)) = found.get(name) {
                log_at!(
                    log,
                    Info,
                    "skipping plugin {}: {name} already loaded from {}",
                    path.display(),
                    first.display()
                );
                continue;
            }
            match load(&path) {
                Ok((h, loaded)) => {
                    log_at!(log, Debug, "loaded plugin {name} version {} from {}", loaded.0, path.display());
                    if route_plugin_logs(&h, log.level, &mut routed) {
                        log_at!(
                            log,
                            Debug,
                            "plugin {name} brings its own DOCA library: its DOCA_LOG lines go to the service's output"
                        );
                    }
                    found.insert(name.to_string(), (path, Some(h), loaded));
                }
                Err(why) => log_at!(log, Warn, "skipping plugin {}: {why}", path.display()),
            }
        }
    }
    let mut plugins = Plugins::default();
    for (n, (name, (path, h, (version, iface, arm)))) in found.into_iter().enumerate() {
        if n >= MAX_PLUGINS {
            log_at!(log, Warn, "skipping plugin {}: more than {MAX_PLUGINS} plugins", path.display());
            continue;
        }
        log_at!(log, Info, "plugin {name} (id {:#x}, version {version}) from {}", 1u64 << n, path.display());
        plugins.list.push(Plugin { id: 1 << n, version, name, path, iface, arm });
        plugins.handles.extend(h);
    }
    plugins
}
