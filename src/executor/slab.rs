//! A small generational slab for executor-local records (live tasks, context records).
//!
//! Owned by one executor and used only on its thread (no locking). A key packs the entry's
//! index (low 32 bits) and its generation (high 32 bits); removing an entry bumps its
//! generation, so a stale key (a task or ctx that is already gone) looks up nothing instead
//! of aliasing a newer entry. Generation 0 is never used, so key 0 is never valid.

enum Entry<T> {
    Occupied { generation: u32, value: T },
    Vacant { generation: u32, next_free: u32 },
}

const NONE: u32 = u32::MAX;

pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    len: usize,
}

#[inline]
fn key(index: u32, generation: u32) -> u64 {
    (u64::from(generation) << 32) | u64::from(index)
}

#[inline]
fn split(key: u64) -> (usize, u32) {
    ((key & 0xffff_ffff) as usize, (key >> 32) as u32)
}

impl<T> Slab<T> {
    pub(crate) const fn new() -> Slab<T> {
        Slab { entries: Vec::new(), free_head: NONE, len: 0 }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `value` and returns its key.
    pub(crate) fn insert(&mut self, value: T) -> u64 {
        self.len += 1;
        if self.free_head != NONE {
            let index = self.free_head;
            let entry = &mut self.entries[index as usize];
            let Entry::Vacant { generation, next_free } = *entry else {
                unreachable!("slab free list points at an occupied entry")
            };
            self.free_head = next_free;
            *entry = Entry::Occupied { generation, value };
            return key(index, generation);
        }
        let index = u32::try_from(self.entries.len()).expect("slab: more than 2^32 entries");
        assert!(index != NONE, "slab: more than 2^32 - 1 entries");
        self.entries.push(Entry::Occupied { generation: 1, value });
        key(index, 1)
    }

    pub(crate) fn get(&self, k: u64) -> Option<&T> {
        let (index, generation) = split(k);
        match self.entries.get(index) {
            Some(Entry::Occupied { generation: g, value }) if *g == generation => Some(value),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, k: u64) -> Option<&mut T> {
        let (index, generation) = split(k);
        match self.entries.get_mut(index) {
            Some(Entry::Occupied { generation: g, value }) if *g == generation => Some(value),
            _ => None,
        }
    }

    /// Removes the entry of `k`; `None` if the key is stale or unknown.
    pub(crate) fn remove(&mut self, k: u64) -> Option<T> {
        let (index, generation) = split(k);
        let entry = self.entries.get_mut(index)?;
        match entry {
            Entry::Occupied { generation: g, .. } if *g == generation => {
                // Skip generation 0 on wrap-around so that key 0 stays invalid.
                let next_gen = match generation.wrapping_add(1) {
                    0 => 1,
                    g => g,
                };
                let old = std::mem::replace(entry, Entry::Vacant { generation: next_gen, next_free: self.free_head });
                self.free_head = index as u32;
                self.len -= 1;
                match old {
                    Entry::Occupied { value, .. } => Some(value),
                    Entry::Vacant { .. } => unreachable!(),
                }
            }
            _ => None,
        }
    }

    /// The keys of all entries (a snapshot, so the slab may change while they are used).
    pub(crate) fn keys(&self) -> Vec<u64> {
        self.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Entry::Occupied { generation, .. } => Some(key(i as u32, *generation)),
                Entry::Vacant { .. } => None,
            })
            .collect()
    }

    /// Removes every entry and returns the values.
    #[cfg(test)]
    pub(crate) fn drain(&mut self) -> Vec<T> {
        let keys = self.keys();
        keys.into_iter().filter_map(|k| self.remove(k)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_keys_do_not_alias() {
        let mut s = Slab::new();
        let a = s.insert("a");
        assert_ne!(a, 0);
        assert_eq!(s.remove(a), Some("a"));
        let b = s.insert("b");
        // Same index, new generation: the old key finds nothing.
        assert_eq!(a & 0xffff_ffff, b & 0xffff_ffff);
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        assert_eq!(s.get(b), Some(&"b"));
        assert_eq!(s.len(), 1);
        let c = s.insert("c");
        let mut all = s.drain();
        all.sort();
        assert_eq!(all, ["b", "c"]);
        assert!(s.is_empty() && s.get(c).is_none());
    }
}
