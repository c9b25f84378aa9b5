//! Element types, reduction operators and the reduction kernels.
//!
//! Buffers are plain byte slices holding little-endian packed elements. They come from the
//! network or from registered host memory, so nothing guarantees their alignment: the kernels
//! load and store every element through `from_le_bytes`/`to_le_bytes` on fixed-size chunks,
//! which the compiler turns into plain (vectorised) loads on little-endian machines.

use std::fmt;
use std::str::FromStr;

/// The element type of a reduction (or of a typed buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    I32,
    I64,
    U64,
    F32,
    F64,
}

impl DataType {
    /// Every type, in wire-code order.
    pub const ALL: [DataType; 5] = [DataType::I32, DataType::I64, DataType::U64, DataType::F32, DataType::F64];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::I32 | DataType::F32 => 4,
            DataType::I64 | DataType::U64 | DataType::F64 => 8,
        }
    }

    /// Lower-case name (`"i32"`, ...), the form [`DataType::parse`] accepts.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::I32 => "i32",
            DataType::I64 => "i64",
            DataType::U64 => "u64",
            DataType::F32 => "f32",
            DataType::F64 => "f64",
        }
    }

    /// Parses a name, case-insensitively: `i32 i64 u64 f32 f64`, also `int32 int64 uint64 float double`.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "i32" | "int32" => DataType::I32,
            "i64" | "int64" => DataType::I64,
            "u64" | "uint64" => DataType::U64,
            "f32" | "float" | "float32" => DataType::F32,
            "f64" | "double" | "float64" => DataType::F64,
            _ => return None,
        })
    }

    pub(crate) const fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DataType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| format!("unknown data type {s:?} (expected i32, i64, u64, f32 or f64)"))
    }
}

/// A reduction operator. All four are commutative and associative on integers (Sum and Prod
/// wrap on overflow); see [`reduce_into`] for floats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
}

impl ReduceOp {
    /// Every operator, in wire-code order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max];

    /// Lower-case name (`"sum"`, ...), the form [`ReduceOp::parse`] accepts.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
        }
    }

    /// Parses a name, case-insensitively: `sum prod min max` (also `product`).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "sum" => ReduceOp::Sum,
            "prod" | "product" => ReduceOp::Prod,
            "min" => ReduceOp::Min,
            "max" => ReduceOp::Max,
            _ => return None,
        })
    }

    pub(crate) const fn code(self) -> u8 {
        self as u8
    }

    pub(crate) fn from_code(code: u8) -> Option<Self> {
        Self::ALL.get(code as usize).copied()
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::parse(s).ok_or_else(|| format!("unknown reduction {s:?} (expected sum, prod, min or max)"))
    }
}

trait Elem: Copy {
    const SIZE: usize;
    fn load(b: &[u8]) -> Self;
    fn store(self, b: &mut [u8]);
}

macro_rules! impl_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn load(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
            #[inline(always)]
            fn store(self, b: &mut [u8]) {
                b.copy_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}
impl_elem!(i32, i64, u64, f32, f64);

#[inline(always)]
fn apply<T: Elem>(acc: &mut [u8], other: &[u8], f: impl Fn(T, T) -> T) {
    for (a, b) in acc.chunks_exact_mut(T::SIZE).zip(other.chunks_exact(T::SIZE)) {
        f(T::load(a), T::load(b)).store(a);
    }
}

// IEEE 754-2019 `minimum`/`maximum` with a canonical NaN. The point is that the result must not
// depend on operand order: recursive doubling combines the same two partial results on two ranks
// in opposite orders, and every rank must end with bit-identical output. `f64::min` would drop
// NaNs and pick either zero for (-0.0, +0.0) depending on order.
macro_rules! float_minmax {
    ($min:ident, $max:ident, $t:ty) => {
        #[inline(always)]
        fn $min(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::NAN
            } else if a < b {
                a
            } else if b < a {
                b
            } else {
                // Equal: identical bits, or +0/-0 where the set sign bit wins (-0 < +0).
                <$t>::from_bits(a.to_bits() | b.to_bits())
            }
        }
        #[inline(always)]
        fn $max(a: $t, b: $t) -> $t {
            if a.is_nan() || b.is_nan() {
                <$t>::NAN
            } else if a > b {
                a
            } else if b > a {
                b
            } else {
                <$t>::from_bits(a.to_bits() & b.to_bits())
            }
        }
    };
}
float_minmax!(min_f32, max_f32, f32);
float_minmax!(min_f64, max_f64, f64);

/// `acc[i] = acc[i] op other[i]` over little-endian packed elements of `dtype`.
///
/// Semantics:
/// - integers: `Sum` and `Prod` wrap (two's complement), `Min`/`Max` are the usual ones;
/// - floats: `Sum`/`Prod` are IEEE addition/multiplication (commutative, not associative: the
///   collectives fix the association order so every rank gets bit-identical results);
///   `Min`/`Max` follow IEEE 754-2019 `minimum`/`maximum`: a NaN operand gives NaN (always the
///   canonical quiet NaN, whatever the payloads) and `-0.0 < +0.0`. That makes them commutative
///   and associative, so the result never depends on the order ranks are combined in.
///
/// The slices need no particular alignment.
///
/// # Panics
/// If the lengths differ or are not a multiple of `dtype.size()`. The collectives never pass
/// such slices (they check message lengths first).
pub fn reduce_into(acc: &mut [u8], other: &[u8], dtype: DataType, op: ReduceOp) {
    assert_eq!(acc.len(), other.len(), "reduce_into: operand lengths differ");
    assert_eq!(acc.len() % dtype.size(), 0, "reduce_into: length is not a whole number of {dtype} elements");
    use DataType as D;
    use ReduceOp as R;
    match (dtype, op) {
        (D::I32, R::Sum) => apply::<i32>(acc, other, i32::wrapping_add),
        (D::I32, R::Prod) => apply::<i32>(acc, other, i32::wrapping_mul),
        (D::I32, R::Min) => apply::<i32>(acc, other, Ord::min),
        (D::I32, R::Max) => apply::<i32>(acc, other, Ord::max),
        (D::I64, R::Sum) => apply::<i64>(acc, other, i64::wrapping_add),
        (D::I64, R::Prod) => apply::<i64>(acc, other, i64::wrapping_mul),
        (D::I64, R::Min) => apply::<i64>(acc, other, Ord::min),
        (D::I64, R::Max) => apply::<i64>(acc, other, Ord::max),
        (D::U64, R::Sum) => apply::<u64>(acc, other, u64::wrapping_add),
        (D::U64, R::Prod) => apply::<u64>(acc, other, u64::wrapping_mul),
        (D::U64, R::Min) => apply::<u64>(acc, other, Ord::min),
        (D::U64, R::Max) => apply::<u64>(acc, other, Ord::max),
        (D::F32, R::Sum) => apply::<f32>(acc, other, |a, b| a + b),
        (D::F32, R::Prod) => apply::<f32>(acc, other, |a, b| a * b),
        (D::F32, R::Min) => apply::<f32>(acc, other, min_f32),
        (D::F32, R::Max) => apply::<f32>(acc, other, max_f32),
        (D::F64, R::Sum) => apply::<f64>(acc, other, |a, b| a + b),
        (D::F64, R::Prod) => apply::<f64>(acc, other, |a, b| a * b),
        (D::F64, R::Min) => apply::<f64>(acc, other, min_f64),
        (D::F64, R::Max) => apply::<f64>(acc, other, max_f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn to_f64s(b: &[u8]) -> Vec<f64> {
        b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
    }

    #[test]
    fn names_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::parse(d.name()), Some(d));
            assert_eq!(DataType::from_code(d.code()), Some(d));
            assert_eq!(d.to_string().parse::<DataType>(), Ok(d));
        }
        for o in ReduceOp::ALL {
            assert_eq!(ReduceOp::parse(o.name()), Some(o));
            assert_eq!(ReduceOp::from_code(o.code()), Some(o));
        }
        assert_eq!(DataType::parse("DOUBLE"), Some(DataType::F64));
        assert!(DataType::parse("u32").is_none());
        assert!("avg".parse::<ReduceOp>().is_err());
        assert_eq!(DataType::from_code(5), None);
    }

    #[test]
    fn integers_wrap() {
        let mut a: Vec<u8> = [i32::MAX, i32::MIN, 3].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [1i32, -1, i32::MIN].iter().flat_map(|x| x.to_le_bytes()).collect();
        reduce_into(&mut a, &b, DataType::I32, ReduceOp::Sum);
        let got: Vec<i32> = a.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![i32::MIN, i32::MAX, 3i32.wrapping_add(i32::MIN)]);

        let mut a = u64::MAX.to_le_bytes().to_vec();
        reduce_into(&mut a, &3u64.to_le_bytes(), DataType::U64, ReduceOp::Prod);
        assert_eq!(u64::from_le_bytes(a.try_into().unwrap()), u64::MAX.wrapping_mul(3));
    }

    #[test]
    fn float_min_max_nan_and_zero() {
        let nan_payload = f64::from_bits(0x7ff8_dead_beef_0001);
        let a = [1.0, f64::NAN, 2.0, -0.0, 0.0, nan_payload];
        let b = [f64::NAN, 5.0, -3.0, 0.0, -0.0, 1.0];
        for (x, y) in [(a, b), (b, a)] {
            let mut m = f64s(&x);
            reduce_into(&mut m, &f64s(&y), DataType::F64, ReduceOp::Min);
            let m = to_f64s(&m);
            assert_eq!(m[0].to_bits(), f64::NAN.to_bits());
            assert_eq!(m[1].to_bits(), f64::NAN.to_bits());
            assert_eq!(m[2], -3.0);
            assert_eq!(m[3].to_bits(), (-0.0f64).to_bits());
            assert_eq!(m[4].to_bits(), (-0.0f64).to_bits());
            assert_eq!(m[5].to_bits(), f64::NAN.to_bits());
            let mut m = f64s(&x);
            reduce_into(&mut m, &f64s(&y), DataType::F64, ReduceOp::Max);
            let m = to_f64s(&m);
            assert!(m[0].is_nan() && m[1].is_nan());
            assert_eq!(m[2], 2.0);
            assert_eq!(m[3].to_bits(), 0.0f64.to_bits());
            assert_eq!(m[4].to_bits(), 0.0f64.to_bits());
        }
        let mut m = (-0.0f32).to_le_bytes().to_vec();
        reduce_into(&mut m, &0.0f32.to_le_bytes(), DataType::F32, ReduceOp::Max);
        assert_eq!(f32::from_le_bytes(m.try_into().unwrap()).to_bits(), 0.0f32.to_bits());
    }

    #[test]
    fn unaligned_slices() {
        let mut backing = [0u8; 8 * 4 + 1];
        let other: Vec<u8> = (1..=4u64).flat_map(|x| x.to_le_bytes()).collect();
        let acc = &mut backing[1..];
        acc.copy_from_slice(&other);
        reduce_into(acc, &other, DataType::U64, ReduceOp::Prod);
        let got: Vec<u64> = acc.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![1, 4, 9, 16]);
    }

    #[test]
    #[should_panic(expected = "lengths differ")]
    fn length_mismatch_panics() {
        reduce_into(&mut [0u8; 8], &[0u8; 4], DataType::I32, ReduceOp::Sum);
    }
}
