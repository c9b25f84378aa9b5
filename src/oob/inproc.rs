//! [`InProcessOob`]: the members are threads of one process, meeting in shared memory.
//!
//! Each allgather is a numbered round in a map shared by the group: a member's request adds its
//! part and completes once every part is in; the last member to take the result removes the
//! round. Tests and single-process programs use it; it needs no file, socket or launcher.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{Oob, OobRequest};
use crate::error::{Error, ErrorKind, Result};

/// One allgather among in-process members.
struct Round {
    /// Each member's contribution, once made.
    parts: Vec<Option<Vec<u8>>>,
    /// How many members took the result; the round is forgotten when all did.
    taken: u32,
}

#[derive(Default)]
struct Rounds {
    rounds: HashMap<u64, Round>,
}

impl std::fmt::Debug for Rounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} round(s) open", self.rounds.len())
    }
}

/// An [`Oob`] whose members are threads of this process.
///
/// ```
/// use async_doca::oob::{InProcessOob, Oob, OobRequest};
/// let members = InProcessOob::group(2);
/// let mut reqs: Vec<_> = members.iter().map(|m| m.allgather(&[m.rank() as u8]).unwrap()).collect();
/// assert_eq!(reqs[0].test().unwrap(), Some(vec![0, 1]));
/// assert_eq!(reqs[1].test().unwrap(), Some(vec![0, 1]));
/// ```
#[derive(Debug)]
pub struct InProcessOob {
    rank: u32,
    size: u32,
    next_round: std::cell::Cell<u64>,
    shared: Arc<Mutex<Rounds>>,
}

impl InProcessOob {
    /// `n` connected members, ranks `0..n`; hand one to each thread.
    pub fn group(n: u32) -> Vec<InProcessOob> {
        let shared = Arc::new(Mutex::new(Rounds::default()));
        (0..n)
            .map(|rank| InProcessOob { rank, size: n, next_round: std::cell::Cell::new(0), shared: shared.clone() })
            .collect()
    }
}

impl Oob for InProcessOob {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn allgather(&self, data: &[u8]) -> Result<Box<dyn OobRequest>> {
        let round = self.next_round.get();
        self.next_round.set(round + 1);
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let entry = g.rounds.entry(round).or_insert_with(|| Round { parts: vec![None; self.size as usize], taken: 0 });
        entry.parts[self.rank as usize] = Some(data.to_vec());
        Ok(Box::new(InProcessRequest { shared: self.shared.clone(), round, size: self.size, done: false }))
    }
}

struct InProcessRequest {
    shared: Arc<Mutex<Rounds>>,
    round: u64,
    size: u32,
    done: bool,
}

impl OobRequest for InProcessRequest {
    fn test(&mut self) -> Result<Option<Vec<u8>>> {
        if self.done {
            return Err(Error::new(ErrorKind::BadState, "oob: request already completed"));
        }
        let mut g = self.shared.lock().unwrap_or_else(|p| p.into_inner());
        let Some(entry) = g.rounds.get_mut(&self.round) else {
            return Err(Error::new(ErrorKind::BadState, "oob: round vanished"));
        };
        if entry.parts.iter().any(|c| c.is_none()) {
            return Ok(None);
        }
        let all: Vec<u8> = entry.parts.iter().flat_map(|c| c.as_deref().unwrap_or(&[])).copied().collect();
        entry.taken += 1;
        if entry.taken == self.size {
            g.rounds.remove(&self.round);
        }
        self.done = true;
        Ok(Some(all))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::drive_all;

    #[test]
    #[cfg_attr(miri, ignore = "crosses FFI into the DOCA provider or makes system calls Miri cannot run")]
    fn in_process_rounds_in_order() {
        let g = InProcessOob::group(3);
        for round in 0..3u8 {
            let reqs = g.iter().map(|m| m.allgather(&[round, m.rank() as u8]).unwrap()).collect();
            for all in drive_all(reqs) {
                assert_eq!(all, vec![round, 0, round, 1, round, 2]);
            }
        }
        assert_eq!(g[0].shared.lock().unwrap().rounds.len(), 0, "finished rounds are removed");
    }
}
