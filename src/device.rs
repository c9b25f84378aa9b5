//! DOCA devices: finding and opening the device that RDMA, sync events and UROM run on.
//!
//! On a BlueField host these are NVIDIA's devices (one per port/function); with the software
//! provider there is one soft device (more with `DOCA_SOFT_DEVICES`). A [`Device`] is a
//! cheap, shareable handle: cloning it shares one open `doca_dev`, closed when the last
//! clone drops. Unlike progress engines and contexts, a device is not tied to one thread.

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use crate::error::{check, Error, ErrorKind, Result};
use crate::sys;

/// Static facts about a device: its names and PCI address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The InfiniBand device name, such as `mlx5_0` (or `soft0` on the soft provider).
    pub ibdev_name: String,
    /// The network interface name, such as `p0`.
    pub iface_name: String,
    /// The PCI address, `"0000:03:00.0"`.
    pub pci_addr: String,
}

/// An open DOCA device.
///
/// ```
/// let dev = async_doca::Device::open_default()?;
/// println!("{}", dev.info().ibdev_name);
/// # Ok::<(), async_doca::Error>(())
/// ```
#[derive(Clone)]
pub struct Device {
    inner: Arc<DevInner>,
}

struct DevInner {
    dev: *mut sys::doca_dev,
    info: DeviceInfo,
}

// SAFETY: a doca_dev is opened once and then only read (mmaps and contexts reference it);
// DOCA's single-thread rule covers progress engines, contexts, tasks and buffers, not
// devices, and the pointer is closed only once, by the last owner, in Drop.
unsafe impl Send for DevInner {}
// SAFETY: see Send; &DevInner only hands out the raw pointer for DOCA calls that take it.
unsafe impl Sync for DevInner {}

impl Drop for DevInner {
    fn drop(&mut self) {
        // SAFETY: `dev` came from doca_dev_open and is closed exactly once, here.
        let rc = unsafe { sys::doca_dev_close(self.dev) };
        if rc != sys::DOCA_SUCCESS {
            // Objects created on the device are still alive somewhere (a leak elsewhere);
            // closing cannot be retried from a destructor, so say it and move on.
            crate::trace::report!("doca_dev_close({}) failed: {:?}", self.info.ibdev_name, crate::DocaCode(rc));
        }
    }
}

/// The list from `doca_devinfo_create_list`, destroyed on drop.
struct DevinfoList {
    list: *mut *mut sys::doca_devinfo,
    len: usize,
}

impl DevinfoList {
    fn new() -> Result<DevinfoList> {
        let mut list = std::ptr::null_mut();
        let mut n = 0u32;
        // SAFETY: both out-pointers are valid for writes.
        check(unsafe { sys::doca_devinfo_create_list(&mut list, &mut n) }, "doca_devinfo_create_list")?;
        Ok(DevinfoList { list, len: n as usize })
    }

    fn get(&self, i: usize) -> *mut sys::doca_devinfo {
        assert!(i < self.len);
        // SAFETY: the list holds `len` valid devinfo pointers while it is alive.
        unsafe { *self.list.add(i) }
    }
}

impl Drop for DevinfoList {
    fn drop(&mut self) {
        // SAFETY: `list` came from doca_devinfo_create_list and is destroyed once.
        unsafe { sys::doca_devinfo_destroy_list(self.list) };
    }
}

fn read_info(devinfo: *const sys::doca_devinfo) -> Result<DeviceInfo> {
    let mut pci = [0 as std::ffi::c_char; sys::DOCA_DEVINFO_PCI_ADDR_SIZE];
    let mut ibdev = [0 as std::ffi::c_char; sys::DOCA_DEVINFO_IBDEV_NAME_SIZE];
    let mut iface = [0 as std::ffi::c_char; sys::DOCA_DEVINFO_IFACE_NAME_SIZE];
    // SAFETY: each buffer is writable for the size DOCA documents or the size passed.
    unsafe {
        check(sys::doca_devinfo_get_pci_addr_str(devinfo, pci.as_mut_ptr()), "devinfo: PCI address")?;
        check(
            sys::doca_devinfo_get_ibdev_name(devinfo, ibdev.as_mut_ptr(), ibdev.len() as u32),
            "devinfo: ibdev name",
        )?;
        check(
            sys::doca_devinfo_get_iface_name(devinfo, iface.as_mut_ptr(), iface.len() as u32),
            "devinfo: iface name",
        )?;
    }
    Ok(DeviceInfo { pci_addr: c_text(&pci), ibdev_name: c_text(&ibdev), iface_name: c_text(&iface) })
}

impl Device {
    /// Lists the devices DOCA sees.
    pub fn list() -> Result<Vec<DeviceInfo>> {
        let list = DevinfoList::new()?;
        (0..list.len).map(|i| read_info(list.get(i))).collect()
    }

    /// Opens the first device.
    pub fn open_default() -> Result<Device> {
        Self::open_matching("open default device", |_| true)
    }

    /// Opens the device with this PCI address (`"0000:03:00.0"` or `"03:00.0"`).
    pub fn open_by_pci(pci_addr: &str) -> Result<Device> {
        let want = pci_addr.trim().to_ascii_lowercase();
        Self::open_matching("open device by PCI address", |info| {
            info.pci_addr == want || info.pci_addr.strip_prefix("0000:") == Some(want.as_str())
        })
    }

    /// Opens the device with this InfiniBand name (`"mlx5_0"`, `"soft0"`).
    pub fn open_by_ibdev_name(name: &str) -> Result<Device> {
        Self::open_matching("open device by ibdev name", |info| info.ibdev_name == name)
    }

    fn open_matching(what: &'static str, mut pred: impl FnMut(&DeviceInfo) -> bool) -> Result<Device> {
        let list = DevinfoList::new().map_err(|e| e.context_prefix(what))?;
        for i in 0..list.len {
            let devinfo = list.get(i);
            let info = read_info(devinfo)?;
            if pred(&info) {
                let mut dev = std::ptr::null_mut();
                // SAFETY: devinfo is valid while `list` lives; `dev` is a valid out-pointer.
                check(unsafe { sys::doca_dev_open(devinfo, &mut dev) }, what)?;
                return Ok(Device { inner: Arc::new(DevInner { dev, info }) });
            }
        }
        Err(Error::new(ErrorKind::NotFound, format!("{what}: no matching DOCA device")))
    }

    /// The device's names and PCI address.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The raw `doca_dev`, for calls this crate does not wrap. It stays valid while this
    /// `Device` (or a clone) lives.
    pub fn as_ptr(&self) -> *mut sys::doca_dev {
        self.inner.dev
    }
}

/// A function a DPU-side device represents (a host PF, VF or SF), as
/// [`Device::representors`] lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepresentorInfo {
    /// The function's PCI address as the host sees it, `"0000:03:00.0"`.
    pub pci_addr: String,
    /// The function's vendor-unique id, stable across reboots.
    pub vuid: String,
}

/// An open representor: the handle a DPU program gives a Comch server
/// ([`crate::comch::ServerBuilder::representor`]) to serve that host function. Clones share
/// one `doca_dev_rep`, closed when the last drops; it keeps its [`Device`] open.
#[derive(Clone)]
pub struct Representor {
    inner: Arc<RepInner>,
}

struct RepInner {
    rep: *mut sys::doca_dev_rep,
    info: RepresentorInfo,
    _dev: Device,
}

// SAFETY: as for DevInner: a doca_dev_rep is opened once, then only passed to DOCA calls that
// read it, and closed once by the last owner.
unsafe impl Send for RepInner {}
// SAFETY: see Send.
unsafe impl Sync for RepInner {}

impl Drop for RepInner {
    fn drop(&mut self) {
        // SAFETY: `rep` came from doca_dev_rep_open and is closed exactly once, here.
        let rc = unsafe { sys::doca_dev_rep_close(self.rep) };
        if rc != sys::DOCA_SUCCESS {
            crate::trace::report!("doca_dev_rep_close({}) failed: {:?}", self.info.pci_addr, crate::DocaCode(rc));
        }
    }
}

impl Representor {
    /// The represented function's PCI address and VUID.
    pub fn info(&self) -> &RepresentorInfo {
        &self.inner.info
    }
    /// The raw `doca_dev_rep`, valid while this `Representor` (or a clone) lives.
    pub fn as_ptr(&self) -> *mut sys::doca_dev_rep {
        self.inner.rep
    }
}

impl fmt::Debug for Representor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Representor").field("info", &self.inner.info).finish()
    }
}

/// The list from `doca_devinfo_rep_create_list`, destroyed on drop.
struct RepList {
    list: *mut *mut sys::doca_devinfo_rep,
    len: usize,
}

impl RepList {
    /// The network representors of `dev` (filter NET, as NVIDIA's samples use to find a
    /// host function by PCI address).
    fn new(dev: &Device) -> Result<RepList> {
        let mut list = std::ptr::null_mut();
        let mut n = 0u32;
        check(
            // SAFETY: an open device and valid out-pointers.
            unsafe {
                sys::doca_devinfo_rep_create_list(
                    dev.as_ptr(),
                    sys::DOCA_DEVINFO_REP_FILTER_NET as i32,
                    &mut list,
                    &mut n,
                )
            },
            "doca_devinfo_rep_create_list",
        )?;
        Ok(RepList { list, len: n as usize })
    }

    fn get(&self, i: usize) -> *mut sys::doca_devinfo_rep {
        assert!(i < self.len);
        // SAFETY: the list holds `len` valid pointers while it is alive.
        unsafe { *self.list.add(i) }
    }
}

impl Drop for RepList {
    fn drop(&mut self) {
        // SAFETY: `list` came from doca_devinfo_rep_create_list and is destroyed once.
        unsafe { sys::doca_devinfo_rep_destroy_list(self.list) };
    }
}

fn read_rep_info(rep: *const sys::doca_devinfo_rep) -> Result<RepresentorInfo> {
    let mut pci = [0 as std::ffi::c_char; sys::DOCA_DEVINFO_REP_PCI_ADDR_SIZE];
    let mut vuid = [0 as std::ffi::c_char; sys::DOCA_DEVINFO_REP_VUID_SIZE];
    // SAFETY: each buffer is writable for the size DOCA documents or the size passed.
    unsafe {
        check(sys::doca_devinfo_rep_get_pci_addr_str(rep, pci.as_mut_ptr()), "representor: PCI address")?;
        check(sys::doca_devinfo_rep_get_vuid(rep, vuid.as_mut_ptr(), vuid.len() as u32), "representor: VUID")?;
    }
    Ok(RepresentorInfo { pci_addr: c_text(&pci), vuid: c_text(&vuid) })
}

/// The NUL-terminated text DOCA wrote into `buf` (empty if it wrote no NUL).
fn c_text(buf: &[std::ffi::c_char]) -> String {
    // SAFETY: the buffer is initialised and `len` bytes long; from_bytes_until_nul stops at
    // the first NUL and fails cleanly without one.
    let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
    CStr::from_bytes_until_nul(bytes).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Normalises a PCI address for comparison: lower case, `0000:` domain added when missing.
fn full_pci(s: &str) -> String {
    let s = s.trim().to_ascii_lowercase();
    if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s
    }
}

impl Device {
    /// The host functions this device represents: on a DPU, the host PFs/VFs/SFs it manages
    /// (network representors); with the soft provider, one per device under
    /// `DOCA_SOFT_ROLE=dpu`.
    ///
    /// # Errors
    /// [`ErrorKind::NotSupported`] on a host, which represents nothing.
    pub fn representors(&self) -> Result<Vec<RepresentorInfo>> {
        let list = RepList::new(self)?;
        (0..list.len).map(|i| read_rep_info(list.get(i))).collect()
    }

    /// Opens the representor of the host function at `pci_addr` (`"0000:03:00.0"` or
    /// `"03:00.0"`), as NVIDIA's DPU samples pick the host they serve.
    ///
    /// # Errors
    /// [`ErrorKind::NotSupported`] on a host; [`ErrorKind::NotFound`] when no representor
    /// has that address.
    pub fn open_representor_by_pci(&self, pci_addr: &str) -> Result<Representor> {
        let want = full_pci(pci_addr);
        self.open_representor("open representor by PCI address", |i| full_pci(&i.pci_addr) == want)
    }

    /// Opens the representor with this VUID.
    ///
    /// # Errors
    /// As [`Device::open_representor_by_pci`].
    pub fn open_representor_by_vuid(&self, vuid: &str) -> Result<Representor> {
        self.open_representor("open representor by VUID", |i| i.vuid == vuid)
    }

    fn open_representor(
        &self,
        what: &'static str,
        mut pred: impl FnMut(&RepresentorInfo) -> bool,
    ) -> Result<Representor> {
        let list = RepList::new(self).map_err(|e| e.context_prefix(what))?;
        for i in 0..list.len {
            let info = read_rep_info(list.get(i))?;
            if pred(&info) {
                let mut rep = std::ptr::null_mut();
                // SAFETY: the rep info is valid while `list` lives; valid out-pointer.
                check(unsafe { sys::doca_dev_rep_open(list.get(i), &mut rep) }, what)?;
                return Ok(Representor { inner: Arc::new(RepInner { rep, info, _dev: self.clone() }) });
            }
        }
        Err(Error::new(ErrorKind::NotFound, format!("{what}: no matching representor")))
    }
}

impl fmt::Debug for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device").field("info", &self.inner.info).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn open_default_and_by_name() {
        let infos = Device::list().unwrap();
        assert!(!infos.is_empty());
        let dev = Device::open_default().unwrap();
        assert_eq!(dev.info(), &infos[0]);
        let again = Device::open_by_pci(&infos[0].pci_addr).unwrap();
        assert_eq!(again.info().ibdev_name, infos[0].ibdev_name);
        let by_name = Device::open_by_ibdev_name(&infos[0].ibdev_name).unwrap();
        assert_eq!(by_name.info().pci_addr, infos[0].pci_addr);
        let err = Device::open_by_ibdev_name("no-such-device").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn pci_forms_compare_equal() {
        assert_eq!(full_pci("03:00.0"), "0000:03:00.0");
        assert_eq!(full_pci(" 0000:AF:00.1 "), "0000:af:00.1");
    }

    /// On a host (this test process's role, unless the environment says dpu) there are no
    /// representors; the DPU role is covered by `tests/representors.rs`.
    #[test]
    fn a_host_has_no_representors() {
        if std::env::var("DOCA_SOFT_ROLE").is_ok_and(|r| r == "dpu") {
            return;
        }
        let dev = Device::open_default().unwrap();
        let pci = dev.info().pci_addr.clone();
        match dev.representors() {
            Err(e) => assert_eq!(e.kind(), ErrorKind::NotSupported, "{e}"),
            Ok(list) => panic!("a host listed representors: {list:?}"),
        }
        assert_eq!(dev.open_representor_by_pci(&pci).unwrap_err().kind(), ErrorKind::NotSupported);
    }
}
