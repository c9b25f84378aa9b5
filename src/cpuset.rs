//! Sets of CPUs, written the way `taskset -c` and `/proc/*/status` write them: `"0-3,6"`.
//!
//! At the crate root, not in the executor, because two layers need it and neither should
//! import the other for it: the executor pins its workers with it, and DROM (`crate::drom`)
//! stores masks in its shared-memory registry with it. Public as [`crate::CpuSet`] (and, as
//! before, `executor::CpuSet` / `executor::MAX_CPUS`).

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, ErrorKind, Result};

/// The largest CPU number a [`CpuSet`] can hold, plus one (the kernel's default `CPU_SETSIZE`).
pub const MAX_CPUS: usize = 1024;

pub(crate) const WORDS: usize = MAX_CPUS / 64;

/// A set of CPU numbers.
///
/// Parsed from and printed as a CPU list (`"0-3,6"`), ordered, cheap to copy.
///
/// ```
/// use async_doca::CpuSet;
/// let set: CpuSet = "0-2,6".parse().unwrap();
/// assert_eq!(set.iter().collect::<Vec<_>>(), [0, 1, 2, 6]);
/// assert_eq!(set.to_string(), "0-2,6");
/// assert!(set.contains(6) && !set.contains(3));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuSet {
    bits: [u64; WORDS],
}

impl CpuSet {
    /// The empty set.
    pub const fn new() -> CpuSet {
        CpuSet { bits: [0; WORDS] }
    }

    /// A set of the given CPUs. Fails for a CPU number of [`MAX_CPUS`] or more.
    pub fn from_cpus(cpus: impl IntoIterator<Item = usize>) -> Result<CpuSet> {
        let mut set = CpuSet::new();
        for cpu in cpus {
            set.insert(cpu)?;
        }
        Ok(set)
    }

    /// The CPUs the calling thread may run on (`sched_getaffinity`).
    pub fn current_affinity() -> Result<CpuSet> {
        Self::affinity_of(0)
    }

    /// The CPUs thread or process `tid` may run on (`sched_getaffinity`; 0 is the caller).
    pub fn affinity_of(tid: libc::pid_t) -> Result<CpuSet> {
        // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
        let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `raw` is a valid, writable cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut raw) };
        if rc != 0 {
            return Err(Error::os(std::io::Error::last_os_error(), "sched_getaffinity"));
        }
        Ok(CpuSet::from_raw(&raw))
    }

    /// Pins the calling thread to exactly this set (`sched_setaffinity`).
    pub fn pin_current_thread(&self) -> Result<()> {
        if self.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "pin thread: empty CPU set"));
        }
        let raw = self.to_raw();
        // SAFETY: `raw` is a valid cpu_set_t of the size passed; 0 means the calling thread.
        let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &raw) };
        if rc != 0 {
            return Err(Error::os(std::io::Error::last_os_error(), &format!("sched_setaffinity({self})")));
        }
        Ok(())
    }

    /// Pins thread `tid` of this process (0: the caller) to exactly this set.
    pub(crate) fn pin_thread(&self, tid: libc::pid_t) -> Result<()> {
        if self.is_empty() {
            return Err(Error::new(ErrorKind::InvalidArgument, "pin thread: empty CPU set"));
        }
        let raw = self.to_raw();
        // SAFETY: `raw` is a valid cpu_set_t of the size passed.
        let rc = unsafe { libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &raw) };
        if rc != 0 {
            return Err(Error::os(std::io::Error::last_os_error(), &format!("sched_setaffinity({tid}, {self})")));
        }
        Ok(())
    }

    /// Adds a CPU. Fails for a CPU number of [`MAX_CPUS`] or more.
    pub fn insert(&mut self, cpu: usize) -> Result<()> {
        if cpu >= MAX_CPUS {
            return Err(Error::new(
                ErrorKind::InvalidArgument,
                format!("CPU {cpu} is out of range (at most {})", MAX_CPUS - 1),
            ));
        }
        self.bits[cpu / 64] |= 1 << (cpu % 64);
        Ok(())
    }

    /// Removes a CPU; returns whether it was there.
    pub fn remove(&mut self, cpu: usize) -> bool {
        let had = self.contains(cpu);
        if had {
            self.bits[cpu / 64] &= !(1 << (cpu % 64));
        }
        had
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.bits[cpu / 64] & (1 << (cpu % 64)) != 0
    }

    /// The number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|&w| w == 0)
    }

    /// The CPUs in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..MAX_CPUS).filter(move |&c| self.contains(c))
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let mut out = *self;
        for (a, b) in out.bits.iter_mut().zip(other.bits) {
            *a &= b;
        }
        out
    }

    /// CPUs in either set.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let mut out = *self;
        for (a, b) in out.bits.iter_mut().zip(other.bits) {
            *a |= b;
        }
        out
    }

    /// CPUs in `self` but not in `other`.
    pub fn difference(&self, other: &CpuSet) -> CpuSet {
        let mut out = *self;
        for (a, b) in out.bits.iter_mut().zip(other.bits) {
            *a &= !b;
        }
        out
    }

    /// Whether every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.difference(other).is_empty()
    }

    /// The set as 64-bit words, CPU `n` being bit `n % 64` of word `n / 64` (the layout the
    /// DROM registry stores in shared memory).
    pub(crate) fn to_words(self) -> [u64; WORDS] {
        self.bits
    }

    /// The inverse of [`to_words`](CpuSet::to_words).
    pub(crate) fn from_words(bits: [u64; WORDS]) -> CpuSet {
        CpuSet { bits }
    }

    fn from_raw(raw: &libc::cpu_set_t) -> CpuSet {
        let mut set = CpuSet::new();
        for cpu in 0..MAX_CPUS {
            // SAFETY: CPU_ISSET reads bit `cpu` of a valid set; cpu < CPU_SETSIZE (1024).
            if unsafe { libc::CPU_ISSET(cpu, raw) } {
                set.bits[cpu / 64] |= 1 << (cpu % 64);
            }
        }
        set
    }

    fn to_raw(self) -> libc::cpu_set_t {
        // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
        let mut raw: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for cpu in self.iter() {
            // SAFETY: writes bit `cpu` (< CPU_SETSIZE) of a valid set.
            unsafe { libc::CPU_SET(cpu, &mut raw) };
        }
        raw
    }
}

impl FromStr for CpuSet {
    type Err = Error;

    /// Parses a CPU list: comma-separated CPUs or inclusive ranges, `"0-3,6"`. Spaces are
    /// allowed around items. The empty string is the empty set.
    fn from_str(s: &str) -> Result<CpuSet> {
        let bad = |why: &str| Error::new(ErrorKind::InvalidArgument, format!("bad CPU list {s:?}: {why}"));
        let mut set = CpuSet::new();
        let s_trim = s.trim();
        if s_trim.is_empty() {
            return Ok(set);
        }
        for item in s_trim.split(',') {
            let item = item.trim();
            let num = |t: &str| t.trim().parse::<usize>().map_err(|_| bad(&format!("{t:?} is not a CPU number")));
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let n = num(item)?;
                    (n, n)
                }
            };
            if lo > hi {
                return Err(bad(&format!("range {lo}-{hi} is reversed")));
            }
            if hi >= MAX_CPUS {
                return Err(bad(&format!("CPU {hi} is out of range (at most {})", MAX_CPUS - 1)));
            }
            for cpu in lo..=hi {
                set.insert(cpu)?;
            }
        }
        Ok(set)
    }
}

impl fmt::Display for CpuSet {
    /// Prints the shortest CPU list: runs of two or more become ranges (`"0-2,6"`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut cpus = self.iter().peekable();
        while let Some(lo) = cpus.next() {
            let mut hi = lo;
            while cpus.peek() == Some(&(hi + 1)) {
                hi = cpus.next().unwrap_or(hi);
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if hi == lo {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuSet({self})")
    }
}

impl FromIterator<usize> for CpuSet {
    /// Collects CPU numbers; numbers of [`MAX_CPUS`] or more are ignored.
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> CpuSet {
        let mut set = CpuSet::new();
        for cpu in iter {
            let _ = set.insert(cpu);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_print_round_trip() {
        for (text, printed) in [("0-3,6", "0-3,6"), ("1", "1"), ("3,1,2", "1-3"), (" 0 , 2-3 ", "0,2-3"), ("", "")] {
            let set: CpuSet = text.parse().unwrap();
            assert_eq!(set.to_string(), printed, "{text:?}");
            assert_eq!(printed.parse::<CpuSet>().unwrap(), set);
        }
    }

    #[test]
    fn parse_rejects_garbage() {
        for text in ["a", "1-", "-1", "3-1", "1,,2", "1024", "0-5000", "1.5"] {
            assert!(text.parse::<CpuSet>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn set_algebra() {
        let a: CpuSet = "0-3".parse().unwrap();
        let b: CpuSet = "2-5".parse().unwrap();
        assert_eq!(a.intersection(&b).to_string(), "2-3");
        assert_eq!(a.union(&b).to_string(), "0-5");
        assert_eq!(a.difference(&b).to_string(), "0-1");
        assert!("2".parse::<CpuSet>().unwrap().is_subset(&a));
        assert_eq!(a.len(), 4);
    }

    #[test]
    fn affinity_round_trip() {
        let mine = CpuSet::current_affinity().unwrap();
        assert!(!mine.is_empty());
        let first: CpuSet = [mine.iter().next().unwrap()].into_iter().collect();
        std::thread::spawn(move || {
            first.pin_current_thread().unwrap();
            assert_eq!(CpuSet::current_affinity().unwrap(), first);
        })
        .join()
        .unwrap();
    }
}
