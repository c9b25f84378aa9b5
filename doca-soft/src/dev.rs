//! Devices: `doca_devinfo_*` and `doca_dev_*`.
//!
//! # Model
//!
//! The soft provider has no hardware: a "device" is a name, a PCI address string and an
//! interface name. The list comes from the environment variable `DOCA_SOFT_DEVICES`, read at
//! every `doca_devinfo_create_list`:
//!
//! ```text
//! DOCA_SOFT_DEVICES="soft0@0000:03:00.0,soft1@04:00.0@sfeth9"
//!                    ibdev @ PCI address [@ iface]      (entries separated by ',')
//! ```
//!
//! The PCI address may use the short form `BB:DD.F` (domain 0000 is assumed). Without an
//! interface name, entry `i` gets `sfeth<i>`. Unset, the list is one device: `soft0`,
//! `0000:03:00.0`, `sfeth0`. Set but empty, the list is empty. A malformed value makes
//! `doca_devinfo_create_list` fail with `DOCA_ERROR_BAD_CONFIG`.
//!
//! # Ownership and lifetimes
//!
//! * A `doca_devinfo` is created once per distinct (ibdev, PCI, iface) triple and is never
//!   freed: it lives in a process-global table until exit. So a devinfo stays valid after
//!   `doca_devinfo_destroy_list`, including for devices opened from it (as in DOCA, where the
//!   devinfo of an open device stays valid), and `doca_dev_as_devinfo` can always return it.
//!   The table only grows when the environment names new devices, so it is bounded.
//! * A list (`doca_devinfo **`) is a heap array owned by the caller until
//!   `doca_devinfo_destroy_list`. Live lists are tracked: destroying a list twice, or a
//!   pointer that is not a list, is `DOCA_ERROR_INVALID_VALUE`, never a double free.
//! * A `doca_dev` is heap-allocated by the first `doca_dev_open` of a devinfo and freed by the
//!   matching last `doca_dev_close`. As in DOCA, opens are **counted per device**: opening a
//!   devinfo that is already open returns the same `doca_dev` and counts one more open; each
//!   close drops one, and only the last one releases the device. Live devices are tracked in
//!   a table, so a close beyond the opens is `DOCA_ERROR_INVALID_VALUE`. Objects that use a
//!   device (mmaps, contexts) hold a `DevRef`, a counted reference; the last close of a device
//!   that is still referenced fails with `DOCA_ERROR_IN_USE` (and leaves it open), so a
//!   `DevRef` never dangles.
//!
//! Every function here is thread-safe (the tables are behind mutexes; device use counts are
//! atomic).

use std::collections::HashMap;
use std::ffi::c_char;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::ffi::{guard, guard_err, out};
use crate::types::*;

/// Name of the environment variable that configures the device list.
pub const DEVICES_ENV: &str = "DOCA_SOFT_DEVICES";

/// Static information about one soft device.
#[repr(C)]
#[derive(Debug)]
pub struct doca_devinfo {
    ibdev: String,
    /// Normalised PCI address: `dddd:bb:dd.f`, lower-case hex.
    pci: String,
    iface: String,
}

impl doca_devinfo {
    /// The RDMA device name (`soft0`).
    pub fn ibdev_name(&self) -> &str {
        &self.ibdev
    }
    /// The PCI address, `0000:03:00.0` form.
    pub fn pci_addr(&self) -> &str {
        &self.pci
    }
    /// The network interface name (`sfeth0`).
    pub fn iface_name(&self) -> &str {
        &self.iface
    }
}

/// An open soft device.
#[repr(C)]
#[derive(Debug)]
pub struct doca_dev {
    info: &'static doca_devinfo,
    /// Objects (mmaps, contexts...) that reference this device through a [`DevRef`].
    users: AtomicUsize,
    /// `doca_dev_open` calls not yet matched by a `doca_dev_close` (changed under the DEVS
    /// lock only).
    opens: AtomicUsize,
}

impl doca_dev {
    /// The devinfo this device was opened from.
    pub fn devinfo(&self) -> &'static doca_devinfo {
        self.info
    }
}

/// Locks a table, recovering from poisoning (a panic elsewhere must not disable devices).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every devinfo ever created (never freed).
static DEVINFOS: Mutex<Vec<&'static doca_devinfo>> = Mutex::new(Vec::new());
/// Live devinfo lists.
static LISTS: ListRegistry<doca_devinfo> = ListRegistry::new();

/// The arrays handed out by a `*_create_list` function (address → number of slots, the
/// NULL terminator included), so that its `*_destroy_list` frees exactly those, once.
pub(crate) struct ListRegistry<T> {
    live: Mutex<Option<HashMap<usize, usize>>>,
    _items: core::marker::PhantomData<fn() -> T>,
}

impl<T> ListRegistry<T> {
    pub(crate) const fn new() -> Self {
        ListRegistry { live: Mutex::new(None), _items: core::marker::PhantomData }
    }

    /// Hands out `items` as a NULL-terminated array (a courtesy: the count is
    /// authoritative): the array to `list`, the count to `n`.
    ///
    /// # Safety
    /// `list` and `n` are non-NULL and writable (checked by the caller).
    pub(crate) unsafe fn publish(
        &self,
        mut items: Vec<*mut T>,
        list: *mut *mut *mut T,
        n: *mut u32,
    ) -> Result<(), doca_error_t> {
        let count = u32::try_from(items.len()).map_err(|_| DOCA_ERROR_BAD_CONFIG)?;
        items.push(ptr::null_mut());
        let slots = items.len();
        let raw = Box::into_raw(items.into_boxed_slice()) as *mut *mut T;
        lock(&self.live).get_or_insert_with(HashMap::new).insert(raw as usize, slots);
        // SAFETY: both out-pointers are non-NULL and writable (the caller's contract).
        unsafe {
            list.write(raw);
            n.write(count);
        }
        Ok(())
    }

    /// Frees an array handed out by [`publish`](Self::publish) (not the objects it points
    /// to); INVALID_VALUE for NULL or anything else.
    pub(crate) fn free(&self, list: *mut *mut T) -> Result<(), doca_error_t> {
        if list.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let slots =
            lock(&self.live).as_mut().and_then(|m| m.remove(&(list as usize))).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        // SAFETY: `list` was produced by `Box::into_raw` of a boxed slice of exactly `slots`
        // elements in `publish`, and it was just removed from the registry, so it is freed
        // exactly once.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(list, slots)) });
        Ok(())
    }
}
/// Live devices: addresses of `doca_dev` objects not yet closed.
static DEVS: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The devinfo behind `p`, if `p` is one of ours; INVALID_VALUE otherwise (NULL included).
/// Never dereferences a pointer it did not create.
pub(crate) fn devinfo_ref(p: *const doca_devinfo) -> Result<&'static doca_devinfo, doca_error_t> {
    if p.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    lock(&DEVINFOS).iter().copied().find(|d| ptr::eq(*d, p)).ok_or(DOCA_ERROR_INVALID_VALUE)
}

/// A counted reference to an open device: while one exists, `doca_dev_close` on that device
/// fails with `DOCA_ERROR_IN_USE`, so the device outlives every `DevRef`.
#[derive(Debug)]
pub(crate) struct DevRef {
    dev: NonNull<doca_dev>,
}

// SAFETY: `doca_dev` is immutable after creation except for its atomic use count, and it is
// freed only when no DevRef exists; so sharing or moving a DevRef across threads is sound.
unsafe impl Send for DevRef {}
// SAFETY: see `Send`; `&DevRef` only gives `&doca_dev`, whose fields are immutable or atomic.
unsafe impl Sync for DevRef {}

impl DevRef {
    /// The device.
    pub(crate) fn dev(&self) -> &doca_dev {
        // SAFETY: the device cannot be closed while this DevRef holds a use count (close
        // checks the count under the DEVS lock), so the pointer is valid.
        unsafe { self.dev.as_ref() }
    }
    /// The device as the C pointer the caller passed.
    pub(crate) fn as_ptr(&self) -> *mut doca_dev {
        self.dev.as_ptr()
    }
    /// True when `p` is this device.
    pub(crate) fn is(&self, p: *const doca_dev) -> bool {
        ptr::eq(self.dev.as_ptr(), p)
    }
}

impl Clone for DevRef {
    fn clone(&self) -> Self {
        self.dev().users.fetch_add(1, Ordering::Relaxed);
        DevRef { dev: self.dev }
    }
}

impl Drop for DevRef {
    fn drop(&mut self) {
        // After this decrement the device may be closed and freed: no access follows it.
        self.dev().users.fetch_sub(1, Ordering::Release);
    }
}

/// A counted reference to the open device `p`; INVALID_VALUE for NULL or a pointer that is
/// not an open device of this provider. Never dereferences a pointer it did not create.
pub(crate) fn dev_ref(p: *const doca_dev) -> Result<DevRef, doca_error_t> {
    if p.is_null() {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let devs = lock(&DEVS);
    if !devs.contains(&(p as usize)) {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    let nn = NonNull::new(p as *mut doca_dev).ok_or(DOCA_ERROR_INVALID_VALUE)?;
    // SAFETY: `p` is in DEVS, so it is a live device; it cannot be closed concurrently
    // because close takes the DEVS lock, which we hold while taking the count.
    unsafe { nn.as_ref() }.users.fetch_add(1, Ordering::Relaxed);
    Ok(DevRef { dev: nn })
}

/// Parses and normalises a PCI address: `dddd:bb:dd.f` or `bb:dd.f` (hex, any case).
pub(crate) fn parse_pci(s: &str) -> Option<String> {
    let s = s.trim();
    let (dom, rest) = match s.matches(':').count() {
        2 => {
            let (d, r) = s.split_once(':')?;
            (d, r)
        }
        1 => ("0000", s),
        _ => return None,
    };
    let (bus, rest) = rest.split_once(':')?;
    let (devn, func) = rest.split_once('.')?;
    let hex = |v: &str, width: usize, max: u32| -> Option<u32> {
        if v.is_empty() || v.len() > width || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(v, 16).ok().filter(|&n| n <= max)
    };
    let dom = hex(dom, 4, 0xffff)?;
    let bus = hex(bus, 2, 0xff)?;
    let devn = hex(devn, 2, 0x1f)?;
    let func = hex(func, 1, 0x7)?;
    Some(format!("{dom:04x}:{bus:02x}:{devn:02x}.{func:x}"))
}

fn valid_name(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// The configured devices as (ibdev, pci, iface) triples.
fn configured_devices() -> Result<Vec<(String, String, String)>, doca_error_t> {
    match std::env::var(DEVICES_ENV) {
        Ok(s) => parse_spec(&s),
        Err(std::env::VarError::NotPresent) => parse_spec("soft0@0000:03:00.0@sfeth0"),
        Err(std::env::VarError::NotUnicode(_)) => Err(DOCA_ERROR_BAD_CONFIG),
    }
}

/// Parses a `DOCA_SOFT_DEVICES` value (see the module docs).
fn parse_spec(spec: &str) -> Result<Vec<(String, String, String)>, doca_error_t> {
    let mut v: Vec<(String, String, String)> = Vec::new();
    for (i, entry) in spec.split(',').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
        let mut parts = entry.split('@');
        let ibdev = parts.next().unwrap_or("").trim();
        let pci = parts.next().ok_or(DOCA_ERROR_BAD_CONFIG)?;
        let iface = parts.next().map(|s| s.trim().to_string()).unwrap_or_else(|| format!("sfeth{i}"));
        if parts.next().is_some() || !valid_name(ibdev, DOCA_DEVINFO_IBDEV_NAME_SIZE - 1) || !valid_name(&iface, 15) {
            return Err(DOCA_ERROR_BAD_CONFIG);
        }
        let pci = parse_pci(pci).ok_or(DOCA_ERROR_BAD_CONFIG)?;
        if v.iter().any(|(n, p, _)| *n == ibdev || *p == pci) {
            return Err(DOCA_ERROR_BAD_CONFIG);
        }
        v.push((ibdev.to_string(), pci, iface));
    }
    Ok(v)
}

/// The process-global devinfo for a triple, created on first use.
pub(crate) fn intern_devinfo(ibdev: String, pci: String, iface: String) -> &'static doca_devinfo {
    let mut all = lock(&DEVINFOS);
    if let Some(d) = all.iter().find(|d| d.ibdev == ibdev && d.pci == pci && d.iface == iface) {
        return d;
    }
    let d: &'static doca_devinfo = Box::leak(Box::new(doca_devinfo { ibdev, pci, iface }));
    all.push(d);
    d
}

// ---- the role (`DOCA_SOFT_ROLE`): which side of the PCI link the devices stand on ----
//
// Here, with the rest of the device configuration, because both this module (which refuses a
// bad value at `doca_devinfo_create_list`) and `rep.rs` (which lists representors only in the
// DPU role) need it; see `rep.rs` for what the role changes.

/// Name of the environment variable that chooses the role of this process's soft devices.
pub const ROLE_ENV: &str = "DOCA_SOFT_ROLE";

/// Which side of the PCI link the soft devices of this process stand on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Role {
    /// A host: its devices manage no other functions.
    Host,
    /// A DPU: each device manages (and represents) the host PF of the same PCI address.
    Dpu,
}

#[cfg(test)]
thread_local! {
    /// Unit tests run in parallel threads of one process, so they choose a role per thread
    /// instead of changing the process environment.
    static TEST_ROLE: std::cell::Cell<Option<Role>> = const { std::cell::Cell::new(None) };
}

/// Sets (or with None clears) this thread's role override (unit tests only).
#[cfg(test)]
pub(crate) fn set_test_role(role: Option<Role>) {
    TEST_ROLE.with(|r| r.set(role));
}

/// Parses a `DOCA_SOFT_ROLE` value.
pub(crate) fn parse_role(v: &str) -> Option<Role> {
    match v.trim() {
        "" | "host" => Some(Role::Host),
        "dpu" => Some(Role::Dpu),
        _ => None,
    }
}

/// The role of this process's soft devices (`DOCA_SOFT_ROLE`); BAD_CONFIG, logged, for a
/// value that is neither `host` nor `dpu`.
pub fn role() -> Result<Role, doca_error_t> {
    #[cfg(test)]
    if let Some(r) = TEST_ROLE.with(|r| r.get()) {
        return Ok(r);
    }
    match std::env::var(ROLE_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(Role::Host),
        Ok(v) if parse_role(&v).is_some() => Ok(parse_role(&v).unwrap_or(Role::Host)),
        _ => Err(crate::sdk_fail!(
            DOCA_ERROR_BAD_CONFIG,
            "{ROLE_ENV} must be \"host\" or \"dpu\" (unset means host); refusing to guess the side"
        )),
    }
}

/// The devinfos of the configured devices (creating them as needed).
pub(crate) fn current_devinfos() -> Result<Vec<&'static doca_devinfo>, doca_error_t> {
    Ok(configured_devices()?.into_iter().map(|(a, b, c)| intern_devinfo(a, b, c)).collect())
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_create_list(
    dev_list: *mut *mut *mut doca_devinfo,
    nb_devs: *mut u32,
) -> doca_error_t {
    guard_err(|| {
        if dev_list.is_null() || nb_devs.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // The role is checked here, where a program first meets the soft devices, so a
        // mistyped DOCA_SOFT_ROLE fails loudly instead of silently meaning "host".
        role()?;
        let infos = current_devinfos()?;
        let arr = infos.into_iter().map(|d| d as *const doca_devinfo as *mut doca_devinfo).collect();
        // SAFETY: both out-pointers were checked non-NULL; the caller guarantees they are
        // writable (DOCA contract). The devinfos are global: never freed.
        unsafe { LISTS.publish(arr, dev_list, nb_devs) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_destroy_list(dev_list: *mut *mut doca_devinfo) -> doca_error_t {
    // The devinfos it points to are not freed (they are global).
    guard_err(|| LISTS.free(dev_list))
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_open(devinfo: *mut doca_devinfo, dev: *mut *mut doca_dev) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if dev.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        let mut devs = lock(&DEVS);
        // Already open: the same device, one more open.
        for &d in devs.iter() {
            // SAFETY: every address in DEVS is a live device (freed only after removal, under
            // this lock, which we hold).
            let open = unsafe { &*(d as *const doca_dev) };
            if ptr::eq(open.info, info) {
                open.opens.fetch_add(1, Ordering::Relaxed);
                // SAFETY: `dev` was checked non-NULL; the caller guarantees it is writable.
                return unsafe { out(dev, d as *mut doca_dev) };
            }
        }
        let p = Box::into_raw(Box::new(doca_dev { info, users: AtomicUsize::new(0), opens: AtomicUsize::new(1) }));
        devs.push(p as usize);
        // SAFETY: `dev` was checked non-NULL; the caller guarantees it is writable.
        unsafe { out(dev, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_close(dev: *mut doca_dev) -> doca_error_t {
    guard_err(|| {
        if dev.is_null() {
            // A no-op that succeeds. DOCA documents no error but IN_USE for close, and
            // NVIDIA's DMA samples close their device a second time as NULL
            // (`destroy_core_objects` closes it and clears the pointer, then
            // `destroy_dma_resources` closes `state.dev` again), propagating any error into
            // the sample's exit status.
            return Ok(());
        }
        let mut devs = lock(&DEVS);
        let idx = devs.iter().position(|&d| d == dev as usize).ok_or(DOCA_ERROR_INVALID_VALUE)?;
        // SAFETY: `dev` is in DEVS, hence a live device created by doca_dev_open.
        let d = unsafe { &*dev };
        if d.opens.load(Ordering::Relaxed) > 1 {
            // Not the last close: the other opens keep the device.
            d.opens.fetch_sub(1, Ordering::Relaxed);
            return Ok(());
        }
        if d.users.load(Ordering::Acquire) != 0 {
            return Err(DOCA_ERROR_IN_USE);
        }
        devs.swap_remove(idx);
        drop(devs);
        // SAFETY: `dev` came from Box::into_raw in doca_dev_open, was just removed from DEVS
        // (so no other close can free it) and has no DevRef (users == 0; new DevRefs need
        // it in DEVS). Freed exactly once.
        drop(unsafe { Box::from_raw(dev) });
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_dev_as_devinfo(dev: *const doca_dev) -> *mut doca_devinfo {
    guard(ptr::null_mut(), || match dev_ref(dev) {
        Ok(r) => r.dev().info as *const doca_devinfo as *mut doca_devinfo,
        Err(_) => ptr::null_mut(),
    })
}

/// Copies `s` and a NUL into `dst` of `size` bytes; INVALID_VALUE when it does not fit.
///
/// # Safety
/// `dst` must be non-NULL and writable for `size` bytes.
pub(crate) unsafe fn write_cstr(dst: *mut c_char, size: usize, s: &str) -> Result<(), doca_error_t> {
    if s.len() >= size {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `s.len() + 1 <= size` bytes are written, within the caller's buffer; `s` is a
    // Rust string that cannot overlap the caller's buffer in a way that matters for a copy
    // of plain bytes (copy_nonoverlapping's requirement holds: our strings live in our heap).
    unsafe {
        ptr::copy_nonoverlapping(s.as_ptr(), dst.cast::<u8>(), s.len());
        dst.add(s.len()).write(0);
    }
    Ok(())
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_pci_addr_str(
    devinfo: *const doca_devinfo,
    pci_addr_str: *mut c_char,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if pci_addr_str.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL checked; DOCA's contract is a buffer of DOCA_DEVINFO_PCI_ADDR_SIZE
        // (13) bytes, and a normalised address is exactly 12 characters.
        unsafe { write_cstr(pci_addr_str, DOCA_DEVINFO_PCI_ADDR_SIZE, &info.pci) }
    })
}

/// Reads and normalises a caller's PCI address string (`DDDD:BB:DD.F` or `BB:DD.F`).
///
/// # Safety
/// `p` must be non-NULL and NUL-terminated.
pub(crate) unsafe fn read_pci_arg(p: *const c_char) -> Result<String, doca_error_t> {
    let pci_addr_str = p;
    // Read at most 32 bytes looking for the NUL: a PCI address is at most 12 characters
    // (plus whitespace we tolerate), and we never scan an unterminated buffer forever.
    let mut bytes = Vec::with_capacity(32);
    loop {
        if bytes.len() == 32 {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the caller passes a NUL-terminated string; we stop at its NUL, so
        // every byte read is part of the string.
        let b = unsafe { *pci_addr_str.add(bytes.len()) } as u8;
        if b == 0 {
            break;
        }
        bytes.push(b);
    }
    let s = std::str::from_utf8(&bytes).map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
    parse_pci(s).ok_or(DOCA_ERROR_INVALID_VALUE)
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_is_equal_pci_addr(
    devinfo: *const doca_devinfo,
    pci_addr_str: *const c_char,
    is_equal: *mut u8,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if pci_addr_str.is_null() || is_equal.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL checked; NUL-terminated by the caller's contract.
        let norm = unsafe { read_pci_arg(pci_addr_str) }?;
        // SAFETY: `is_equal` checked non-NULL; writable by the caller's contract.
        unsafe { out(is_equal, u8::from(norm == info.pci)) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_ibdev_name(
    devinfo: *const doca_devinfo,
    ibdev_name: *mut c_char,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if ibdev_name.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL checked; the caller guarantees `size` writable bytes.
        unsafe { write_cstr(ibdev_name, size as usize, &info.ibdev) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_devinfo_get_iface_name(
    devinfo: *const doca_devinfo,
    iface_name: *mut c_char,
    size: u32,
) -> doca_error_t {
    guard_err(|| {
        let info = devinfo_ref(devinfo)?;
        if iface_name.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL checked; the caller guarantees `size` writable bytes.
        unsafe { write_cstr(iface_name, size as usize, &info.iface) }
    })
}

/// Reads a NUL-terminated C string written by one of the getters (test helper).
#[cfg(test)]
fn cstr(buf: &[c_char]) -> String {
    // SAFETY: the getters NUL-terminate inside the buffer.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

/// The test device helpers live in the crate's testkit; re-exported here, their old path,
/// which other modules' tests still use.
#[cfg(test)]
pub(crate) use crate::testkit::dev::{test_open_default, test_open_private};

/// The number of interned devinfos (for `testkit::dev`, which names its private devices by it).
#[cfg(test)]
pub(crate) fn interned_devinfos() -> usize {
    lock(&DEVINFOS).len()
}

#[cfg(test)]
mod tests;
