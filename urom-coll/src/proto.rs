//! The host ↔ plugin formats of `worker_coll`.
//!
//! Every message is `u32 tag` then its fields, little-endian; `bytes` is `u32 len` + bytes,
//! `str` is `bytes` holding UTF-8, `vec<u64>` is `u32 count` + items. Decoding is strict: a
//! short message, trailing bytes, an unknown tag or code, or a length beyond the message is a
//! [`DecodeError`] (the plugin answers such a command `DOCA_ERROR_INVALID_VALUE`).
//!
//! | message | tag | fields |
//! | --- | --- | --- |
//! | [`Cmd::Init`] | 1 | `rank: u32, members: vec<u64>, host_blob: bytes, allreduce_ring_threshold: u64, allgather_rd_threshold: u64, knomial_radix: u32` |
//! | [`Cmd::Coll`] | 2 | `seq: u32, kind: u8, dtype: u8, op: u8, pad: u8, root: u32, count: u64, src_va: u64, src_len: u64, dst_va: u64, dst_len: u64` |
//! | [`Cmd::Fini`] | 3 | — |
//! | [`Cmd::Invalid`] | 4 | `seq: u32, kind: u8` |
//! | [`Notif::InitDone`] | 1 | `worker_blob: bytes` |
//! | [`Notif::CollDone`] | 2 | `seq: u32` |
//! | [`Notif::FiniDone`] | 3 | — |
//! | [`Notif::Failed`] | 4 | `seq: u32, reason: str` |
//!
//! Codes: kind `0` allreduce, `1` allgather, `2` broadcast, `3` barrier, `4` reduce-scatter;
//! dtype `0` i32, `1` i64, `2` u64, `3` f32, `4` f64; op `0` sum, `1` prod, `2` min, `3` max.
//!
//! A successful answer carries the notification of its command. A failed answer has an error
//! status and a body that is either empty (a command rejected on arrival) or a
//! [`Notif::Failed`] (a collective that failed while running; `seq` is the command's).

use coll_algorithms::{DataType, Kind, ReduceOp, Tuning};

/// The version `worker_coll` reports.
pub const VERSION: u64 = 1;
/// The shared object cargo builds for this plugin.
pub const FILE_NAME: &str = "libworker_coll.so";
/// The name the UROM service lists it under.
pub const PLUGIN_NAME: &str = "worker_coll";
/// The most members a group may have.
pub const MAX_MEMBERS: usize = 255;

/// Collective kinds in wire-code order.
pub const KINDS: [Kind; 5] = [Kind::Allreduce, Kind::Allgather, Kind::Broadcast, Kind::Barrier, Kind::ReduceScatter];

/// A message that does not decode (the SDK's, shared by every plugin's codec).
pub use doca_urom_plugin::wire::DecodeError;
use doca_urom_plugin::wire::{Reader, Writer};

/// The group-wide algorithm choices carried by [`Cmd::Init`] (every member must send the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitTuning {
    /// [`Tuning::allreduce_ring_threshold_bytes`].
    pub allreduce_ring_threshold: u64,
    /// [`Tuning::allgather_rd_threshold_bytes`].
    pub allgather_rd_threshold: u64,
    /// [`Tuning::knomial_radix`], `2..=255`.
    pub knomial_radix: u32,
}

impl Default for InitTuning {
    fn default() -> Self {
        InitTuning::from(Tuning::default())
    }
}

impl From<Tuning> for InitTuning {
    fn from(t: Tuning) -> Self {
        InitTuning {
            allreduce_ring_threshold: t.allreduce_ring_threshold_bytes as u64,
            allgather_rd_threshold: t.allgather_rd_threshold_bytes as u64,
            knomial_radix: t.knomial_radix as u32,
        }
    }
}

impl InitTuning {
    /// The engine's tuning; `None` for a radix outside `2..=255`. Thresholds beyond `usize`
    /// saturate (they mean "never").
    pub fn to_tuning(self) -> Option<Tuning> {
        if !(2..=255).contains(&self.knomial_radix) {
            return None;
        }
        let sat = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        Some(Tuning {
            allreduce_ring_threshold_bytes: sat(self.allreduce_ring_threshold),
            knomial_radix: self.knomial_radix as usize,
            allgather_rd_threshold_bytes: sat(self.allgather_rd_threshold),
        })
    }
}

/// One collective as the host asks for it. Buffers are the host's registered memory (the
/// domain's segments of this worker's member); lengths in bytes; `count` in elements of
/// `dtype`:
///
/// | kind | `src_len` | `dst_len` |
/// | --- | --- | --- |
/// | allreduce | `count × size(dtype)` | `count × size(dtype)` |
/// | allgather | `count × size(dtype)` (this member's block) | `members × count × size(dtype)` |
/// | broadcast | root: `count × size(dtype)`; others: `0` or the same | `count × size(dtype)` |
/// | barrier (`count` 0) | `0` | `0` |
/// | reduce-scatter | `members × count × size(dtype)` | `count × size(dtype)` (this member's block) |
///
/// `op` matters for allreduce and reduce-scatter, `root` for broadcast; the others ignore
/// them (they are still carried, so every member's command encodes the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollSpec {
    /// The host's number for this collective, echoed in the answer.
    pub seq: u32,
    pub kind: Kind,
    pub dtype: DataType,
    pub op: ReduceOp,
    pub root: u32,
    pub count: u64,
    pub src_va: u64,
    pub src_len: u64,
    pub dst_va: u64,
    pub dst_len: u64,
}

impl CollSpec {
    /// The (src, dst) lengths this collective needs in a group of `members`; `None` when they
    /// overflow. For a broadcast `src` is the root's length (others may also pass 0).
    pub fn expected_lengths(&self, members: usize) -> Option<(u64, u64)> {
        let n = self.count.checked_mul(self.dtype.size() as u64)?;
        let all = n.checked_mul(members as u64)?;
        Some(match self.kind {
            Kind::Allreduce | Kind::Broadcast => (n, n),
            Kind::Allgather => (n, all),
            Kind::Barrier => (0, 0),
            Kind::ReduceScatter => (all, n),
        })
    }

    /// Checks the lengths and the root for a group of `members` seen from `rank`.
    pub fn check(&self, members: usize, rank: usize) -> Result<(), String> {
        let (src, dst) = self.expected_lengths(members).ok_or("buffer length overflows")?;
        if self.kind == Kind::Barrier && self.count != 0 {
            return Err(format!("a barrier has count 0, not {}", self.count));
        }
        if self.kind == Kind::Broadcast && self.root as usize >= members {
            return Err(format!("root {} is not a member of a group of {members}", self.root));
        }
        let src_ok = match self.kind {
            Kind::Broadcast if self.root as usize != rank => self.src_len == 0 || self.src_len == src,
            _ => self.src_len == src,
        };
        if !src_ok || self.dst_len != dst {
            return Err(format!(
                "{} of {} {} elements in a group of {members} needs src {src} and dst {dst} bytes, got {} and {}",
                self.kind.name(),
                self.count,
                self.dtype,
                self.src_len,
                self.dst_len
            ));
        }
        Ok(())
    }
}

/// A `worker_coll` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cmd {
    /// Joins the group: this worker is `rank` of `members` (domain worker ids by rank);
    /// `host_blob` is the host's RDMA connection export for this worker. Answered
    /// [`Notif::InitDone`] at once; collectives then wait until every peer is connected.
    Init { rank: u32, members: Vec<u64>, host_blob: Vec<u8>, tuning: InitTuning },
    /// Runs one collective. Answered [`Notif::CollDone`] once the result is in the host's
    /// `dst`; accepted collectives are answered in submission order.
    Coll(CollSpec),
    /// Leaves the group once every collective before it is answered; answered
    /// [`Notif::FiniDone`] after them.
    Fini,
    /// Takes the place of a collective of `kind` whose arguments the host rejected: the
    /// worker fails it on every member (the others' collective fails with `INVALID_VALUE`
    /// instead of waiting for this member forever, and later collectives still match).
    /// Answered [`Notif::Failed`] with `INVALID_VALUE`.
    Invalid { seq: u32, kind: Kind },
}

/// A `worker_coll` notification body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notif {
    /// `Init` accepted: the host connects its connection for this worker with `worker_blob`.
    InitDone { worker_blob: Vec<u8> },
    /// Collective `seq` finished; its result is in the host's `dst`.
    CollDone { seq: u32 },
    /// The group is left.
    FiniDone,
    /// Collective `seq` failed (the answer's status says how), with a human-readable reason.
    Failed { seq: u32, reason: String },
}

fn code_of<T: PartialEq>(all: &[T], v: &T) -> u8 {
    all.iter().position(|x| x == v).expect("every value is in its table") as u8
}

/// Bytes of a packed `Cmd::Coll`: tag, seq, four one-byte codes, root, then count and the two
/// buffers' addresses and lengths.
const COLL_CMD_LEN: usize = 4 + 4 + 4 + 4 + 5 * 8;

impl Cmd {
    /// The packed command. Panics on fields beyond the format's limits (more than `u32::MAX`
    /// members or blob bytes), which are never valid commands.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Cmd::Init { rank, members, host_blob, tuning } => {
                let mut w = Writer::default().u32(1).u32(*rank).u32(u32::try_from(members.len()).expect("members"));
                for m in members {
                    w = w.u64(*m);
                }
                w.bytes(host_blob)
                    .u64(tuning.allreduce_ring_threshold)
                    .u64(tuning.allgather_rd_threshold)
                    .u32(tuning.knomial_radix)
                    .done()
            }
            Cmd::Coll(c) => Writer::with_capacity(COLL_CMD_LEN)
                .u32(2)
                .u32(c.seq)
                .u8(code_of(&KINDS, &c.kind))
                .u8(code_of(&DataType::ALL, &c.dtype))
                .u8(code_of(&ReduceOp::ALL, &c.op))
                .u8(0)
                .u32(c.root)
                .u64(c.count)
                .u64(c.src_va)
                .u64(c.src_len)
                .u64(c.dst_va)
                .u64(c.dst_len)
                .done(),
            Cmd::Fini => Writer::default().u32(3).done(),
            Cmd::Invalid { seq, kind } => Writer::default().u32(4).u32(*seq).u8(code_of(&KINDS, kind)).done(),
        }
    }

    /// Parses a packed command.
    pub fn decode(buf: &[u8]) -> Result<Cmd, DecodeError> {
        let mut r = Reader::new(buf, "worker_coll command");
        let cmd = match r.u32()? {
            1 => Cmd::Init {
                rank: r.u32()?,
                members: r.u64s()?,
                host_blob: r.bytes()?.to_vec(),
                tuning: InitTuning {
                    allreduce_ring_threshold: r.u64()?,
                    allgather_rd_threshold: r.u64()?,
                    knomial_radix: r.u32()?,
                },
            },
            2 => {
                let seq = r.u32()?;
                let kind = *KINDS.get(r.u8()? as usize).ok_or(r.invalid("unknown kind"))?;
                let dtype = *DataType::ALL.get(r.u8()? as usize).ok_or(r.invalid("unknown data type"))?;
                let op = *ReduceOp::ALL.get(r.u8()? as usize).ok_or(r.invalid("unknown operator"))?;
                if r.u8()? != 0 {
                    return Err(r.invalid("non-zero padding"));
                }
                Cmd::Coll(CollSpec {
                    seq,
                    kind,
                    dtype,
                    op,
                    root: r.u32()?,
                    count: r.u64()?,
                    src_va: r.u64()?,
                    src_len: r.u64()?,
                    dst_va: r.u64()?,
                    dst_len: r.u64()?,
                })
            }
            3 => Cmd::Fini,
            4 => {
                let seq = r.u32()?;
                let kind = *KINDS.get(r.u8()? as usize).ok_or(r.invalid("unknown kind"))?;
                Cmd::Invalid { seq, kind }
            }
            _ => return Err(r.invalid("unknown tag")),
        };
        r.finish()?;
        Ok(cmd)
    }
}

impl Notif {
    /// The packed notification body.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Notif::InitDone { worker_blob } => Writer::default().u32(1).bytes(worker_blob).done(),
            Notif::CollDone { seq } => Writer::with_capacity(8).u32(2).u32(*seq).done(),
            Notif::FiniDone => Writer::default().u32(3).done(),
            Notif::Failed { seq, reason } => Writer::default().u32(4).u32(*seq).bytes(reason.as_bytes()).done(),
        }
    }

    /// Parses a notification body.
    pub fn decode(buf: &[u8]) -> Result<Notif, DecodeError> {
        let mut r = Reader::new(buf, "worker_coll notification");
        let n = match r.u32()? {
            1 => Notif::InitDone { worker_blob: r.bytes()?.to_vec() },
            2 => Notif::CollDone { seq: r.u32()? },
            3 => Notif::FiniDone,
            4 => {
                let seq = r.u32()?;
                let reason = std::str::from_utf8(r.bytes()?).map_err(|_| r.invalid("reason is not UTF-8"))?;
                Notif::Failed { seq, reason: reason.to_owned() }
            }
            _ => return Err(r.invalid("unknown tag")),
        };
        r.finish()?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll() -> CollSpec {
        CollSpec {
            seq: 7,
            kind: Kind::ReduceScatter,
            dtype: DataType::F64,
            op: ReduceOp::Max,
            root: 0,
            count: 3,
            src_va: 0x1000,
            src_len: 48,
            dst_va: 0x2000,
            dst_len: 24,
        }
    }

    fn samples() -> (Vec<Cmd>, Vec<Notif>) {
        let cmds = vec![
            Cmd::Init {
                rank: 1,
                members: vec![1 << 63, (1 << 63) + 1],
                host_blob: vec![9; 40],
                tuning: InitTuning::default(),
            },
            Cmd::Init { rank: 0, members: vec![], host_blob: vec![], tuning: InitTuning::default() },
            Cmd::Coll(coll()),
            Cmd::Fini,
            Cmd::Invalid { seq: 7, kind: Kind::ReduceScatter },
        ];
        let notifs = vec![
            Notif::InitDone { worker_blob: vec![1, 2, 3] },
            Notif::CollDone { seq: u32::MAX },
            Notif::FiniDone,
            Notif::Failed { seq: 3, reason: "peer 2 is gone".into() },
        ];
        (cmds, notifs)
    }

    #[test]
    fn round_trips() {
        let (cmds, notifs) = samples();
        for c in cmds {
            assert_eq!(Cmd::decode(&c.encode()), Ok(c));
        }
        for n in notifs {
            assert_eq!(Notif::decode(&n.encode()), Ok(n));
        }
        for (i, k) in KINDS.into_iter().enumerate() {
            let c = Cmd::Coll(CollSpec { kind: k, ..coll() });
            assert_eq!(c.encode()[8], i as u8);
            // The per-operation messages are sized up front: one allocation, never grown.
            let b = c.encode();
            assert_eq!((b.len(), b.capacity()), (COLL_CMD_LEN, COLL_CMD_LEN));
            let n = Notif::CollDone { seq: 3 }.encode();
            assert_eq!(n.len(), n.capacity());
            assert_eq!(Cmd::decode(&c.encode()), Ok(c));
        }
    }

    #[test]
    fn rejects_truncation_trailing_bytes_and_bad_codes() {
        let (cmds, notifs) = samples();
        for m in cmds.iter().map(Cmd::encode) {
            for cut in 0..m.len() {
                assert!(Cmd::decode(&m[..cut]).is_err(), "cut at {cut}");
            }
            let mut long = m.clone();
            long.push(0);
            assert_eq!(Cmd::decode(&long).unwrap_err().why, "trailing bytes");
        }
        for m in notifs.iter().map(Notif::encode) {
            for cut in 0..m.len() {
                assert!(Notif::decode(&m[..cut]).is_err());
            }
        }
        let good = Cmd::Coll(coll()).encode();
        for (at, why) in
            [(8, "unknown kind"), (9, "unknown data type"), (10, "unknown operator"), (11, "non-zero padding")]
        {
            let mut bad = good.clone();
            bad[at] = 200;
            assert_eq!(Cmd::decode(&bad).unwrap_err().why, why);
        }
        // A member count far beyond the message.
        let mut init = samples().0[0].encode();
        init[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Cmd::decode(&init).unwrap_err().why, "truncated");
        assert_eq!(Cmd::decode(&9u32.to_le_bytes()).unwrap_err().why, "unknown tag");
        let mut failed = Notif::Failed { seq: 1, reason: "x".into() }.encode();
        *failed.last_mut().unwrap() = 0xff;
        assert_eq!(Notif::decode(&failed).unwrap_err().why, "reason is not UTF-8");
    }

    #[test]
    fn length_rules() {
        let c = coll();
        assert_eq!(c.expected_lengths(2), Some((48, 24)));
        assert!(c.check(2, 0).is_ok());
        assert!(c.check(3, 0).is_err());
        let ag = CollSpec { kind: Kind::Allgather, src_len: 24, dst_len: 72, ..c };
        assert!(ag.check(3, 1).is_ok());
        let bc = CollSpec { kind: Kind::Broadcast, root: 1, src_len: 0, dst_len: 24, ..c };
        assert!(bc.check(2, 0).is_ok());
        assert!(bc.check(2, 1).is_err(), "the root must pass its source");
        assert!(CollSpec { root: 2, ..bc }.check(2, 0).is_err());
        let bar = CollSpec { kind: Kind::Barrier, count: 0, src_len: 0, dst_len: 0, ..c };
        assert!(bar.check(4, 3).is_ok());
        assert!(CollSpec { count: 1, ..bar }.check(4, 3).is_err());
        assert_eq!(CollSpec { count: u64::MAX, ..c }.expected_lengths(2), None);
        assert_eq!(InitTuning { knomial_radix: 1, ..Default::default() }.to_tuning(), None);
        assert_eq!(InitTuning::default().to_tuning(), Some(Tuning::default()));
    }
}
