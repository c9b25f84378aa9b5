//! The algorithms, as per-member schedules of rounds.
//!
//! A schedule is computed once when a collective starts, from (rank, size, lengths). Each round
//! has a step number (the tag's step), sends (a byte range of the working buffer to a peer) and
//! receives (a byte range to reduce into or overwrite). The executor (`collective.rs`) offers the
//! sends, stages the receives, and applies them only once every send of the round was accepted,
//! so a round's sends always see the buffer as it was at the start of the round. Steps are
//! numbered the same way on every member, which is what makes sender and receiver agree on tags.

use std::ops::Range;

use smallvec::SmallVec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Reduce,
    Copy,
}

#[derive(Clone, Debug)]
pub(crate) struct SendOp {
    pub to: usize,
    pub range: Range<usize>,
}

#[derive(Clone, Debug)]
pub(crate) struct RecvOp {
    pub from: usize,
    pub range: Range<usize>,
    pub action: Action,
}

/// One round of a member's schedule. Its sends and receives are kept inline up to two each
/// (every algorithm's rounds but a k-nomial broadcast's upper levels have at most one of
/// each), so that building a schedule allocates only its list of rounds: a collective sets
/// one up per call, and an 8 B allreduce's set-up was mostly these allocations.
#[derive(Clone, Debug, Default)]
pub(crate) struct Round {
    pub step: u32,
    pub sends: SmallVec<[SendOp; 2]>,
    pub recvs: SmallVec<[RecvOp; 2]>,
}

/// A member's schedule: its rounds in order, inline up to two (an allreduce, allgather or
/// barrier of two to four members), so that a small collective's set-up allocates nothing
/// for it.
pub(crate) type Rounds = SmallVec<[Round; 2]>;

fn round(step: u32) -> Round {
    Round { step, ..Round::default() }
}

/// Recursive doubling allreduce on a buffer of `bytes`.
///
/// For a size that is not a power of two, the standard fold-in (as in MPICH/UCC): with
/// `pof2` the largest power of two not above `size` and `rem = size - pof2`, each even rank below
/// `2 * rem` hands its data to the odd rank above it (step 0) and sits out; the remaining `pof2`
/// ranks run recursive doubling (steps `1..=log2(pof2)`, or from 0 without a fold-in); then each odd rank below `2 * rem` hands
/// the result back (last step). Both partners of an exchange combine the same two partial
/// results, and all the operators are commutative, so every rank ends with identical bits.
pub(crate) fn recursive_doubling(rank: usize, size: usize, bytes: usize) -> Rounds {
    let mut rounds = Rounds::new();
    if size <= 1 {
        return rounds;
    }
    let pof2 = 1usize << (usize::BITS - 1 - size.leading_zeros());
    let rem = size - pof2;
    let full = 0..bytes;
    let new_rank = if rank < 2 * rem {
        if rank % 2 == 0 {
            let mut r = round(0);
            r.sends.push(SendOp { to: rank + 1, range: full.clone() });
            rounds.push(r);
            None
        } else {
            let mut r = round(0);
            r.recvs.push(RecvOp { from: rank - 1, range: full.clone(), action: Action::Reduce });
            rounds.push(r);
            Some(rank / 2)
        }
    } else {
        Some(rank - rem)
    };
    // Without a fold-in the exchanges start at step 0 like every other algorithm's first
    // message, so a member that picked another algorithm (different count or tuning) is more
    // likely to receive a header it can reject rather than wait on a step nobody sends.
    let first = u32::from(rem > 0);
    if let Some(nr) = new_rank {
        let mut mask = 1;
        let mut step = first;
        while mask < pof2 {
            let np = nr ^ mask;
            let peer = if np < rem { np * 2 + 1 } else { np + rem };
            let mut r = round(step);
            r.sends.push(SendOp { to: peer, range: full.clone() });
            r.recvs.push(RecvOp { from: peer, range: full.clone(), action: Action::Reduce });
            rounds.push(r);
            mask <<= 1;
            step += 1;
        }
    }
    if rank < 2 * rem {
        let mut r = round(first + pof2.trailing_zeros());
        if rank % 2 == 1 {
            r.sends.push(SendOp { to: rank - 1, range: full });
        } else {
            r.recvs.push(RecvOp { from: rank + 1, range: full, action: Action::Copy });
        }
        rounds.push(r);
    }
    rounds
}

/// The byte range of block `i` when `count` elements of `esize` bytes are split into `parts`
/// blocks as evenly as possible (the first `count % parts` blocks get one element more; blocks
/// are empty when `count < parts`).
pub(crate) fn block(i: usize, count: usize, parts: usize, esize: usize) -> Range<usize> {
    let base = count / parts;
    let extra = count % parts;
    let start = i * base + i.min(extra);
    let len = base + usize::from(i < extra);
    start * esize..(start + len) * esize
}

/// Ring reduce-scatter: `size - 1` steps from `step0`; afterwards rank `r` holds block `r`
/// reduced over all ranks. At step `s`, rank `r` sends block `r - s - 1` (its own data at step 0,
/// then the block it reduced the step before) to `r + 1` and reduces block `r - s - 2` from
/// `r - 1`.
pub(crate) fn ring_reduce_scatter(
    rank: usize,
    size: usize,
    step0: u32,
    blocks: &dyn Fn(usize) -> Range<usize>,
    rounds: &mut Rounds,
) {
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    for s in 0..size.saturating_sub(1) {
        let mut r = round(step0 + s as u32);
        r.sends.push(SendOp { to: right, range: blocks((rank + 2 * size - s - 1) % size) });
        r.recvs.push(RecvOp { from: left, range: blocks((rank + 2 * size - s - 2) % size), action: Action::Reduce });
        rounds.push(r);
    }
}

/// Ring allgather: `size - 1` steps from `step0`, rank `r` starting with block `r`. At step `s`,
/// rank `r` passes block `r - s` to `r + 1` and receives block `r - s - 1` from `r - 1`.
pub(crate) fn ring_allgather(
    rank: usize,
    size: usize,
    step0: u32,
    blocks: &dyn Fn(usize) -> Range<usize>,
    rounds: &mut Rounds,
) {
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    for s in 0..size.saturating_sub(1) {
        let mut r = round(step0 + s as u32);
        r.sends.push(SendOp { to: right, range: blocks((rank + size - s) % size) });
        r.recvs.push(RecvOp { from: left, range: blocks((rank + 2 * size - s - 1) % size), action: Action::Copy });
        rounds.push(r);
    }
}

/// Recursive doubling allgather for a power-of-two `size`, blocks of `per` bytes, rank `r`
/// starting with block `r`. Before step `k` a rank holds the `2^k` blocks of its aligned group
/// (`r` with the low `k` bits cleared, onwards), a contiguous range; it swaps that range with
/// partner `r ^ 2^k`, which holds the neighbouring group.
pub(crate) fn recursive_doubling_allgather(rank: usize, size: usize, per: usize) -> Rounds {
    debug_assert!(size.is_power_of_two());
    let mut rounds = Rounds::new();
    let mut mask = 1usize;
    let mut step = 0;
    while mask < size {
        let peer = rank ^ mask;
        let mine = rank & !(mask - 1);
        let theirs = peer & !(mask - 1);
        let mut r = round(step);
        r.sends.push(SendOp { to: peer, range: mine * per..(mine + mask) * per });
        r.recvs.push(RecvOp { from: peer, range: theirs * per..(theirs + mask) * per, action: Action::Copy });
        rounds.push(r);
        mask <<= 1;
        step += 1;
    }
    rounds
}

/// K-nomial tree broadcast of `bytes` from `root`. In virtual ranks `v = rank - root`, round `j`
/// (distance `d = radix^j`) has every `v < d` (which holds the data by then) send to
/// `v + i*d` for `i in 1..radix`; so `v` receives at the round where `d <= v < d*radix`, from
/// `v mod d`, and sends in every later round.
pub(crate) fn knomial_broadcast(rank: usize, size: usize, root: usize, radix: usize, bytes: usize) -> Rounds {
    let mut rounds = Rounds::new();
    let v = (rank + size - root) % size;
    let real = |x: usize| (x + root) % size;
    let mut dist = 1usize;
    let mut step = 0u32;
    while dist < size {
        let next = dist.saturating_mul(radix);
        if v >= dist && v < next {
            let mut r = round(step);
            r.recvs.push(RecvOp { from: real(v % dist), range: 0..bytes, action: Action::Copy });
            rounds.push(r);
        } else if v < dist {
            let mut r = round(step);
            for i in 1..radix {
                match i.checked_mul(dist).and_then(|o| o.checked_add(v)) {
                    Some(c) if c < size => r.sends.push(SendOp { to: real(c), range: 0..bytes }),
                    _ => break,
                }
            }
            if !r.sends.is_empty() {
                rounds.push(r);
            }
        }
        dist = next;
        step += 1;
    }
    rounds
}

/// Dissemination barrier: round `j` sends an empty message to `r + 2^j` and waits for one from
/// `r - 2^j`; after `ceil(log2 size)` rounds every rank has (transitively) heard from all.
pub(crate) fn dissemination(rank: usize, size: usize) -> Rounds {
    let mut rounds = Rounds::new();
    let mut dist = 1usize;
    let mut step = 0u32;
    while dist < size {
        let mut r = round(step);
        r.sends.push(SendOp { to: (rank + dist) % size, range: 0..0 });
        r.recvs.push(RecvOp { from: (rank + size - dist) % size, range: 0..0, action: Action::Copy });
        rounds.push(r);
        dist *= 2;
        step += 1;
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Every send has exactly one matching receive with the same step and length, and vice versa.
    fn check_matched(size: usize, schedule: impl Fn(usize) -> Rounds) {
        let mut sends: HashMap<(usize, usize, u32), usize> = HashMap::new();
        let mut recvs: HashMap<(usize, usize, u32), usize> = HashMap::new();
        for r in 0..size {
            for round in schedule(r) {
                for s in &round.sends {
                    assert_ne!(s.to, r, "send to self");
                    assert!(sends.insert((r, s.to, round.step), s.range.len()).is_none(), "duplicate send");
                }
                for v in &round.recvs {
                    assert!(recvs.insert((v.from, r, round.step), v.range.len()).is_none(), "duplicate recv");
                }
            }
        }
        assert_eq!(sends, recvs);
    }

    #[test]
    fn schedules_pair_up() {
        for size in 1..=17 {
            check_matched(size, |r| recursive_doubling(r, size, 40));
            check_matched(size, |r| dissemination(r, size));
            if size.is_power_of_two() {
                check_matched(size, |r| recursive_doubling_allgather(r, size, 3));
            }
            for radix in 2..=5 {
                for root in [0, size / 2, size - 1] {
                    check_matched(size, |r| knomial_broadcast(r, size, root, radix, 9));
                }
            }
            for count in [0, 1, size.saturating_sub(1), size + 3, 100] {
                check_matched(size, |r| {
                    let mut v = Rounds::new();
                    let b = |i| block(i, count, size, 4);
                    ring_reduce_scatter(r, size, 0, &b, &mut v);
                    ring_allgather(r, size, size as u32, &b, &mut v);
                    v
                });
            }
        }
    }

    #[test]
    fn blocks_tile_the_buffer() {
        for parts in 1..9 {
            for count in [0, 1, 5, 8, 9, 100] {
                let mut next = 0;
                for i in 0..parts {
                    let b = block(i, count, parts, 8);
                    assert_eq!(b.start, next);
                    next = b.end;
                }
                assert_eq!(next, count * 8);
            }
        }
    }

    #[test]
    fn knomial_reaches_everyone_once() {
        for size in 1..=20 {
            for radix in 2..=6 {
                let receivers: usize = (0..size)
                    .map(|r| {
                        knomial_broadcast(r, size, 3 % size, radix, 1).iter().map(|x| x.recvs.len()).sum::<usize>()
                    })
                    .sum();
                assert_eq!(receivers, size - 1);
            }
        }
    }
}
