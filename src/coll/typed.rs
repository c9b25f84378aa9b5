//! Typed views of registered memory: the buffers collectives read and write.
//!
//! A [`TypedBuf<T>`] is a [`Buf`] (an owned slice of registered [`Memory`]) that holds a whole
//! number of little-endian `T` elements. The collectives of [`HostComm`](super::HostComm) take
//! them, and so will the offloaded collectives of a UROM domain, whose workers reach the same
//! registered memory: that is why these are views of `Memory` rather than Rust slices.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use coll_algorithms::DataType;

use crate::error::{Error, ErrorKind, Result};
use crate::mem::{Access, Buf, Memory};
use crate::Device;

mod sealed {
    pub trait Sealed {}
}

/// An element type collectives can reduce: `i32`, `i64`, `u64`, `f32`, `f64` (sealed: the
/// engine's kernels exist for exactly these).
pub trait Element: sealed::Sealed + Copy + PartialEq + fmt::Debug + 'static {
    /// The engine's name for the type (it travels in every message header, so members that
    /// disagree about the type get a mismatch error).
    const DATA_TYPE: DataType;
    /// Size in bytes.
    const SIZE: usize;
    #[doc(hidden)]
    fn load_le(bytes: &[u8]) -> Self;
    #[doc(hidden)]
    fn store_le(self, out: &mut [u8]);
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DATA_TYPE: DataType = DataType::$d;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn load_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("one element"))
            }
            fn store_le(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
element!(i32 => I32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// A slice of registered memory holding `len()` elements of `T` (little-endian, unaligned
/// allowed).
///
/// ```
/// use async_doca::coll::TypedBuf;
/// use async_doca::{Access, Device};
/// let dev = Device::open_default()?;
/// let mem = dev.alloc(64, Access::LOCAL_READ_WRITE)?;
/// let mut v = TypedBuf::<f64>::new(&mem, 2..6)?; // bytes 16..48
/// v.write_from(&[1.0, 2.0, 3.0, 4.0])?;
/// assert_eq!((v.len(), v.read_vec()), (4, vec![1.0, 2.0, 3.0, 4.0]));
/// assert_eq!(v.buf().offset(), 16);
/// // Wrong lengths and ranges are InvalidArgument errors, not panics.
/// assert!(v.write_from(&[1.0]).is_err());
/// assert!(TypedBuf::<f64>::new(&mem, 0..9).is_err());
/// # Ok::<(), async_doca::Error>(())
/// ```
pub struct TypedBuf<T: Element> {
    buf: Buf,
    _elem: PhantomData<T>,
}

fn invalid(msg: String) -> Error {
    Error::new(ErrorKind::InvalidArgument, msg)
}

impl<T: Element> TypedBuf<T> {
    /// Elements `elems` of `mem` seen as an array of `T` (element `i` at byte `i * T::SIZE`).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] when the range is reversed or does not fit in `mem`.
    pub fn new(mem: &Memory, elems: Range<usize>) -> Result<Self> {
        let bytes = elems
            .start
            .checked_mul(T::SIZE)
            .zip(elems.end.checked_mul(T::SIZE))
            .filter(|(s, e)| s <= e && *e <= mem.len())
            .ok_or_else(|| {
                invalid(format!(
                    "coll: elements {elems:?} of {} do not fit in {} bytes of memory",
                    T::DATA_TYPE,
                    mem.len()
                ))
            })?;
        Ok(TypedBuf { buf: mem.try_slice(bytes.0..bytes.1)?, _elem: PhantomData })
    }

    /// A [`Buf`] seen as an array of `T`.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] when its length is not a whole number of elements.
    pub fn from_buf(buf: Buf) -> Result<Self> {
        if buf.len() % T::SIZE != 0 {
            return Err(invalid(format!(
                "coll: a {}-byte buffer is not a whole number of {} elements",
                buf.len(),
                T::DATA_TYPE
            )));
        }
        Ok(TypedBuf { buf, _elem: PhantomData })
    }

    /// Fresh zeroed registered memory for `len` elements, with `access` (local access is
    /// enough for the host collectives).
    pub fn alloc(dev: &Device, len: usize, access: Access) -> Result<Self> {
        let bytes = len
            .checked_mul(T::SIZE)
            .ok_or_else(|| invalid(format!("coll: {len} elements of {} overflow", T::DATA_TYPE)))?;
        // Zero-byte registrations are not a thing; an empty view of one byte is.
        let mem = dev.alloc(bytes.max(1), access)?;
        Self::new(&mem, 0..len)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf.len() / T::SIZE
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Length in bytes.
    pub fn byte_len(&self) -> usize {
        self.buf.len()
    }

    /// The underlying buffer.
    pub fn buf(&self) -> &Buf {
        &self.buf
    }

    pub fn into_buf(self) -> Buf {
        self.buf
    }

    /// A copy of the elements.
    pub fn read_vec(&self) -> Vec<T> {
        self.buf.to_vec().chunks_exact(T::SIZE).map(T::load_le).collect()
    }

    /// Copies `data` into the buffer.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidArgument`] unless `data.len() == self.len()`.
    pub fn write_from(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len() {
            return Err(invalid(format!(
                "coll: {} {} elements given for a buffer of {}",
                data.len(),
                T::DATA_TYPE,
                self.len()
            )));
        }
        let mut bytes = vec![0u8; self.buf.len()];
        for (x, out) in data.iter().zip(bytes.chunks_exact_mut(T::SIZE)) {
            x.store_le(out);
        }
        self.buf.write(0, &bytes);
        Ok(())
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.buf.to_vec()
    }

    /// Overwrites the whole buffer with `bytes` (the caller checked the length).
    pub(crate) fn put_bytes(&mut self, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), self.buf.len());
        self.buf.write(0, bytes);
    }
}

impl<T: Element> fmt::Debug for TypedBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedBuf")
            .field("type", &T::DATA_TYPE)
            .field("len", &self.len())
            .field("buf", &self.buf)
            .finish()
    }
}
