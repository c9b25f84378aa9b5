//! What the collective examples share (`allreduce`, `allreduce_mpi`): the collectives they
//! run and one verified run of one, the same code for the offloaded and the host-only
//! communicator (`Collectives`).
//!
//! Not an example itself; each includes it with `#[path = "common/coll.rs"] mod coll;`, next
//! to `mod urom;` (whose `step` and `mismatch` it uses).

#![allow(dead_code)] // each example uses a different part

use std::time::{Duration, Instant};

use async_doca::coll::{Collectives, ReduceOp, TypedBuf};
use async_doca::{Memory, Result};

use crate::urom::{mismatch, step};

/// The longest any one collective may take, including waiting for the other members.
const LIMIT: Duration = Duration::from_secs(60);

/// The collectives of the run, in the order they run and print.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Coll {
    Allreduce,
    Allgather,
    Broadcast,
    ReduceScatter,
    Barrier,
}

impl Coll {
    pub fn name(self) -> &'static str {
        match self {
            Coll::Allreduce => "allreduce",
            Coll::Allgather => "allgather",
            Coll::Broadcast => "broadcast",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::Barrier => "barrier",
        }
    }
}

/// Member `rank`'s contribution at element `i` of round `iter` (small integers: f64 sums are
/// exact in any order).
pub fn value(rank: u32, i: usize, iter: usize) -> f64 {
    ((i * 7 + iter * 3) % 1000) as f64 + f64::from(rank) * 1000.0
}

/// One verified collective, offloaded or not (the same code: `Collectives`); returns its
/// latency (submission to result). Sources sit at the start of `mem`, destinations at `max`.
#[allow(clippy::too_many_arguments)]
pub async fn one(
    c: &impl Collectives,
    coll: Coll,
    mem: &Memory,
    max: usize,
    rank: u32,
    size: u32,
    count: usize,
    iter: usize,
) -> Result<Duration> {
    if coll == Coll::Barrier {
        let started = Instant::now();
        step("barrier", LIMIT, c.barrier()).await?;
        return Ok(started.elapsed());
    }
    let n = size as usize;
    let (src_len, dst_len) = match coll {
        Coll::Allreduce | Coll::Broadcast => (count, count),
        Coll::Allgather => (count, count * n),
        Coll::ReduceScatter => (count * n, count),
        Coll::Barrier => unreachable!("returned above"),
    };
    let mut src = TypedBuf::<f64>::new(mem, 0..src_len)?;
    let mut dst = TypedBuf::<f64>::new(mem, max..max + dst_len)?;
    src.write_from(&(0..src_len).map(|i| value(rank, i, iter)).collect::<Vec<_>>())?;
    let root = iter % n;
    // Broadcast works in place in `dst`: the root fills it, the others poison it.
    let poison = vec![f64::NAN; dst_len];
    match coll {
        Coll::Broadcast if rank as usize == root => {
            dst.write_from(&(0..count).map(|i| value(rank, i, iter)).collect::<Vec<_>>())?
        }
        _ => dst.write_from(&poison)?,
    }
    let started = Instant::now();
    let what = coll.name();
    match coll {
        Coll::Allreduce => step(what, LIMIT, c.allreduce(&src, &mut dst, ReduceOp::Sum)).await?,
        Coll::Allgather => step(what, LIMIT, c.allgather(&src, &mut dst)).await?,
        Coll::Broadcast => step(what, LIMIT, c.broadcast(root, &mut dst)).await?,
        Coll::ReduceScatter => step(what, LIMIT, c.reduce_scatter(&src, &mut dst, ReduceOp::Sum)).await?,
        Coll::Barrier => unreachable!("returned above"),
    }
    let took = started.elapsed();
    let sum = |i: usize| -> f64 { (0..size).map(|r| value(r, i, iter)).sum() };
    let want: Vec<f64> = match coll {
        Coll::Allreduce => (0..count).map(sum).collect(),
        // Block r is rank r's source.
        Coll::Allgather => (0..dst_len).map(|j| value((j / count) as u32, j % count, iter)).collect(),
        Coll::Broadcast => (0..count).map(|i| value(root as u32, i, iter)).collect(),
        // This rank's block of the reduced vector.
        Coll::ReduceScatter => (0..count).map(|i| sum(rank as usize * count + i)).collect(),
        Coll::Barrier => unreachable!("returned above"),
    };
    for (i, (got, want)) in dst.read_vec().into_iter().zip(want).enumerate() {
        if got != want {
            return Err(mismatch(format!("element {i} is {got}, expected {want}")));
        }
    }
    Ok(took)
}
