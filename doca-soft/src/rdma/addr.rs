//! RDMA addresses (`doca_rdma_addr_*`): an IP address (or GID) and a port naming a peer for
//! connection management (`cm.rs`). A client's address object is owned by the user and may
//! not be destroyed while a connection uses it; a server-side connection owns the address
//! object of its client (`doca_rdma_connection_get_addr`).

use core::cell::Cell;
use core::ffi::c_char;
use std::ffi::{CStr, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

use crate::ffi::{guard_err, out};
use crate::types::*;

/// `"ADDR"`: marks a live address object.
const ADDR_MAGIC: u32 = 0x4144_4452;

/// `struct doca_rdma_addr`.
pub struct doca_rdma_addr {
    magic: u32,
    ty: doca_rdma_addr_type,
    /// The address as given (returned by `get_params`).
    text: CString,
    pub(super) port: u16,
    pub(super) ip: IpAddr,
    /// Connections using it (client side), or 1 for ever when a connection owns it.
    pub(super) in_use: Cell<u32>,
}

/// Parses an address string of `ty`. GIDs are written like IPv6 addresses; an IPv4-mapped
/// GID (RoCE v2 over IPv4) means that IPv4 address.
#[allow(non_upper_case_globals)] // DOCA's enumerator names
fn parse_addr(ty: doca_rdma_addr_type, s: &str) -> Result<IpAddr, doca_error_t> {
    match ty {
        DOCA_RDMA_ADDR_TYPE_IPv4 => s.parse::<Ipv4Addr>().map(IpAddr::V4).map_err(|_| DOCA_ERROR_INVALID_VALUE),
        DOCA_RDMA_ADDR_TYPE_IPv6 => s.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|_| DOCA_ERROR_INVALID_VALUE),
        DOCA_RDMA_ADDR_TYPE_GID => {
            let v6 = s.parse::<Ipv6Addr>().map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
            Ok(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
        }
        _ => Err(DOCA_ERROR_INVALID_VALUE),
    }
}

impl doca_rdma_addr {
    fn new(ty: doca_rdma_addr_type, text: &str, port: u16) -> Result<doca_rdma_addr, doca_error_t> {
        let ip = parse_addr(ty, text)?;
        Ok(doca_rdma_addr {
            magic: ADDR_MAGIC,
            ty,
            text: CString::new(text).map_err(|_| DOCA_ERROR_INVALID_VALUE)?,
            port,
            ip,
            in_use: Cell::new(0),
        })
    }

    /// An address object describing a peer's socket address (owned by a connection).
    pub(super) fn of_peer(sa: SocketAddr) -> doca_rdma_addr {
        let ty = if sa.is_ipv4() { DOCA_RDMA_ADDR_TYPE_IPv4 } else { DOCA_RDMA_ADDR_TYPE_IPv6 };
        let text = CString::new(sa.ip().to_string()).unwrap_or_default();
        doca_rdma_addr { magic: ADDR_MAGIC, ty, text, port: sa.port(), ip: sa.ip(), in_use: Cell::new(1) }
    }

    pub(crate) fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    /// Where a connection request to this address goes. Listeners bind only the loopback
    /// addresses (`cm.rs`, `doca_rdma_start_listen_to_port`: the soft device reaches nothing
    /// beyond this host), so another address of this host (checked by the caller with
    /// [`is_local`]) is reached through the loopback address of its family. NVIDIA's samples
    /// give the client the server's own address (`-sa <server ip>`).
    pub(crate) fn handshake_addr(&self) -> SocketAddr {
        let ip = match self.ip {
            ip if ip.is_loopback() => ip,
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        };
        SocketAddr::new(ip, self.port)
    }
}

/// Whether `ip` is an address of this host (binding it succeeds only then).
pub(super) fn is_local(ip: IpAddr) -> bool {
    let soft_gid = matches!(ip, IpAddr::V6(v6) if super::props::is_soft_gid(v6));
    ip.is_loopback() || soft_gid || UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Validates an address pointer from C.
///
/// # Safety
/// A non-NULL `p` must point to an address created by this provider and not destroyed.
pub(super) unsafe fn addr_ref<'a>(p: *const doca_rdma_addr) -> Result<&'a doca_rdma_addr, doca_error_t> {
    // SAFETY: per the contract.
    let a = unsafe { crate::ffi::obj(p) }?;
    if a.magic != ADDR_MAGIC {
        return Err(DOCA_ERROR_INVALID_VALUE);
    }
    Ok(a)
}

// ---- entry points ----

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_addr_create(
    addr_type: doca_rdma_addr_type,
    address: *const c_char,
    port: u16,
    addr: *mut *mut doca_rdma_addr,
) -> doca_error_t {
    guard_err(|| {
        if address.is_null() || addr.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: non-NULL; the caller passes a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(address) }.to_str().map_err(|_| DOCA_ERROR_INVALID_VALUE)?;
        let a = doca_rdma_addr::new(addr_type, text, port)?;
        let raw = Box::into_raw(Box::new(a));
        // SAFETY: non-NULL out-pointer, writable by the caller's contract.
        unsafe { out(addr, raw) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_addr_destroy(addr: *mut doca_rdma_addr) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let a = unsafe { addr_ref(addr) }?;
        if a.in_use.get() > 0 {
            // Used by a connection (or owned by one: an address from connection_get_addr).
            return Err(DOCA_ERROR_BAD_STATE);
        }
        // SAFETY: created by Box::into_raw in addr_create and not in use.
        let mut b = unsafe { Box::from_raw(addr) };
        b.magic = 0;
        drop(b);
        Ok(())
    })
}

#[no_mangle]
pub unsafe extern "C" fn doca_rdma_addr_get_params(
    addr: *mut doca_rdma_addr,
    addr_type: *mut doca_rdma_addr_type,
    address: *mut *const c_char,
    port: *mut u16,
) -> doca_error_t {
    guard_err(|| {
        // SAFETY: forwarded contract.
        let a = unsafe { addr_ref(addr) }?;
        if addr_type.is_null() || address.is_null() || port.is_null() {
            return Err(DOCA_ERROR_INVALID_VALUE);
        }
        // SAFETY: the three out-pointers are non-NULL and writable (contract); the string is
        // owned by the address object.
        unsafe {
            addr_type.write(a.ty);
            address.write(a.text.as_ptr());
            port.write(a.port);
        }
        Ok(())
    })
}
