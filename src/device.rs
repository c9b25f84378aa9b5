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
            eprintln!("async-doca: doca_dev_close({}) failed: {:?}", self.info.ibdev_name, crate::DocaCode(rc));
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
    let text = |buf: &[std::ffi::c_char]| {
        // SAFETY: the buffer is initialised (zeroed, then filled by DOCA) and `len` bytes
        // long; from_bytes_until_nul stops at the first NUL and fails cleanly without one.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len()) };
        CStr::from_bytes_until_nul(bytes).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default()
    };
    Ok(DeviceInfo { pci_addr: text(&pci), ibdev_name: text(&ibdev), iface_name: text(&iface) })
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
}
