//! Structure-aware fuzzing of the out-of-band star rendezvous (`src/oob/star.rs`): rank 0's
//! `accept_all`, which reads each joining member's hello (magic `ADO1`, rank, size), and the
//! allgather after it, whose messages are frames (a little-endian `u32` length, then the
//! bytes). The real code runs over in-memory pipes (`async_doca::oob::fuzzing`, hidden, not
//! API) that deliver a few bytes per call and, when the input says so, "would block" every
//! other call.
//!
//! The input is a script: the number of joining members (0..=6), rank 0's contribution, how
//! the pipes deliver, the order the members connect in; then, per member, a hello shape
//! (valid, wrong magic, truncated, bad or repeated rank, wrong size), a frame shape (valid,
//! over-long length, truncated, garbage, a complete frame of the wrong length) and whether
//! the member hangs up or stays silent after its bytes. Last, the reply a lone member reads
//! from rank 0, in the same shapes.
//!
//! Checks: nothing panics; every run ends within its deadline (a silent member ends in
//! `TimedOut`, never a hang); the outcome matches an independent reading of the protocol:
//! a script whose hellos and frames are all well-formed succeeds with the contributions in
//! rank order (rank 0 replies that to every member as one frame, and a member reading the
//! reply gets it too, having sent exactly the hello and frame the script built for it);
//! anything else ends in an error.
#![no_main]

use std::time::{Duration, Instant};

use async_doca::oob::fuzzing::{member, rank0, Peer, PipeShape};
use libfuzzer_sys::fuzz_target;

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn u8(&mut self) -> u8 {
        // A script that runs out reads zeros: every input is a whole script.
        let Some((&b, rest)) = self.0.split_first() else { return 0 };
        self.0 = rest;
        b
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

/// A run expected to succeed gets a generous deadline (it never waits: every byte is
/// there, so only a bug could use it up); one expected to fail gets a short one, as a
/// silent member runs into it.
const OK_LIMIT: Duration = Duration::from_secs(2);
const ERR_LIMIT: Duration = Duration::from_millis(5);
/// How far past its deadline a run may end (a loaded machine, ASan).
const SLACK: Duration = Duration::from_secs(3);

fn hello(magic: [u8; 4], rank: u32, size: u32) -> Vec<u8> {
    [&magic[..], &rank.to_le_bytes(), &size.to_le_bytes()].concat()
}

fn frame(b: &[u8]) -> Vec<u8> {
    [&(b.len() as u32).to_le_bytes()[..], b].concat()
}

/// A frame in one of the shapes, and whether it is a well-formed frame of `len` bytes.
fn frame_shape(c: &mut Cursor<'_>, len: usize) -> (Vec<u8>, bool) {
    match c.u8() % 7 {
        0..=1 => (frame(&c.bytes(len)), true),
        2 => {
            // Announces more than it carries: a little more, or up to 4 GiB.
            let claim = if c.u8() & 1 == 0 { len as u32 + 1 + u32::from(c.u8()) } else { c.u32().max(len as u32 + 1) };
            ([&claim.to_le_bytes()[..], &c.bytes(len)].concat(), false)
        }
        3 => {
            let f = frame(&c.bytes(len));
            let cut = usize::from(c.u8()) % f.len();
            (f[..cut].to_vec(), false)
        }
        4 => {
            let n = usize::from(c.u8() % 24);
            (c.bytes(n), false)
        }
        _ => {
            // Complete, but not the length every member contributes.
            let other = (len + 1 + usize::from(c.u8() % 16)) % 33;
            let other = if other == len { len + 1 } else { other };
            (frame(&c.bytes(other)), false)
        }
    }
}

/// The protocol, read independently of the code under test: what rank 0's allgather yields
/// for members (in connection order) that send `streams`, or `None` for an error.
fn expect_rank0(size: u32, mine: &[u8], streams: &[Vec<u8>]) -> Option<Vec<u8>> {
    let mut by_rank: Vec<Option<&[u8]>> = vec![None; streams.len()];
    for s in streams {
        if s.len() < 12 || &s[..4] != b"ADO1" {
            return None;
        }
        let word = |i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap());
        let (rank, their_size) = (word(4), word(8));
        if their_size != size || rank == 0 || rank >= size || by_rank[rank as usize - 1].is_some() {
            return None;
        }
        by_rank[rank as usize - 1] = Some(&s[12..]);
    }
    let mut all = mine.to_vec();
    for f in by_rank {
        all.extend_from_slice(expect_frame(f?)?.filter(|p| p.len() == mine.len())?);
    }
    Some(all)
}

/// The first frame of `bytes`: `None` if incomplete, `Some(payload)` otherwise.
fn expect_frame(bytes: &[u8]) -> Option<Option<&[u8]>> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().unwrap()) as usize;
    Some(bytes.get(4..4usize.checked_add(len)?))
}

fn run_within<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let t0 = Instant::now();
    let r = f();
    assert!(t0.elapsed() < limit + SLACK, "a run took {:?} with a deadline of {limit:?}", t0.elapsed());
    r
}

fuzz_target!(|data: &[u8]| {
    let mut c = Cursor(data);
    let n = usize::from(c.u8() % 7);
    let size = n as u32 + 1;
    let len = usize::from(c.u8() % 17);
    let mine = c.bytes(len);
    let shape_byte = c.u8();
    let shape = PipeShape {
        chunk: if shape_byte & 0x80 != 0 { 1 << 16 } else { 1 + usize::from(shape_byte % 16) },
        stall: shape_byte & 0x40 != 0,
    };
    // The ranks 1..size in the order the members connect (a fuzzed shuffle).
    let mut ranks: Vec<u32> = (1..size).collect();
    for i in (1..ranks.len()).rev() {
        ranks.swap(i, usize::from(c.u8()) % (i + 1));
    }

    let mut peers = Vec::new();
    let mut all_valid = true;
    // Per valid member: its rank and the bytes it should send.
    let mut valid_members = Vec::new();
    for (i, &rank) in ranks.iter().enumerate() {
        let (h, hello_ok, ends) = match c.u8() % 7 {
            0..=2 => (hello(*b"ADO1", rank, size), true, false),
            3 => {
                let mut h = hello(*b"ADO1", rank, size);
                h[usize::from(c.u8() % 4)] ^= c.u8().max(1);
                (h, false, false)
            }
            4 => {
                // Cut short; the stream ends there.
                let h = hello(*b"ADO1", rank, size);
                (h[..usize::from(c.u8() % 12)].to_vec(), false, true)
            }
            5 => {
                let bad = match c.u8() % 4 {
                    0 => 0,
                    1 => size + u32::from(c.u8()),
                    2 if i > 0 => ranks[usize::from(c.u8()) % i],
                    _ => c.u32(),
                };
                (hello(*b"ADO1", bad, size), false, false)
            }
            _ => (hello(*b"ADO1", rank, size ^ c.u32().max(1)), false, false),
        };
        let (f, frame_ok) = if ends { (Vec::new(), false) } else { frame_shape(&mut c, len) };
        all_valid &= hello_ok && frame_ok;
        let sends = [h, f].concat();
        if hello_ok && frame_ok {
            valid_members.push((rank, sends.clone()));
        }
        peers.push(Peer { sends, silent_after: c.u8() & 1 != 0 });
    }

    let streams: Vec<Vec<u8>> = peers.iter().map(|p| p.sends.clone()).collect();
    let want = expect_rank0(size, &mine, &streams);
    if all_valid {
        assert!(want.is_some(), "the script builder and the reading of the protocol disagree");
    }
    let limit = if want.is_some() { OK_LIMIT } else { ERR_LIMIT };
    let (got, written) = run_within(limit, || rank0(&mine, peers, shape, limit));
    match (&got, &want) {
        (Ok(all), Some(w)) => {
            assert_eq!(all, w, "contributions not in rank order");
            for out in &written {
                assert_eq!(out, &frame(all), "rank 0's reply to a member");
            }
            // Every member reading that reply gets the same, having sent what the script built.
            for (rank, sent) in valid_members.iter().take(2) {
                let theirs = sent[16..].to_vec();
                let root = Peer { sends: frame(all), silent_after: false };
                let (r, wrote) = run_within(OK_LIMIT, || member(*rank, size, &theirs, root, shape, OK_LIMIT));
                assert_eq!(r.as_deref().ok(), Some(&all[..]), "member {rank} reading rank 0's reply");
                assert_eq!(&wrote, sent, "member {rank}'s hello and frame");
            }
        }
        (Err(_), None) => {}
        (Ok(_), None) => panic!("rank 0 accepted a malformed rendezvous: {got:?}"),
        (Err(e), Some(_)) => panic!("rank 0 refused a well-formed rendezvous: {e}"),
    }

    // A lone member (rank 1 of 2) reading a reply in any of the frame shapes.
    let (reply, _) = frame_shape(&mut c, 2 * len);
    let root = Peer { sends: reply.clone(), silent_after: c.u8() & 1 != 0 };
    let want = expect_frame(&reply).flatten().filter(|p| p.len() == 2 * len).map(<[u8]>::to_vec);
    let limit = if want.is_some() { OK_LIMIT } else { ERR_LIMIT };
    let mine1 = vec![1u8; len];
    let (got, _) = run_within(limit, || member(1, 2, &mine1, root, shape, limit));
    assert_eq!(got.ok(), want, "a member reading the reply {reply:02x?}");
});
