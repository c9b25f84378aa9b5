//! The host side's view of the wire protocol ([`crate::urom::proto`]): building the requests
//! and commands it sends, decoding what it receives, and the description a process contributes
//! to a domain's OOB exchange.
//!
//! A process's description is the `Domain` encoding (`vec<Member>`) of its local members: the
//! body of a `DomainCreate` after its tag and `ctx`. Decoding reuses the strict decoder of
//! `DomainCreate`, so a malformed description from another process is refused exactly like a
//! malformed packet.

use crate::types::*;
use crate::urom::proto::{self, CpuSet, Domain, HostToWorker, Request, WorkerToHost};

pub(crate) use crate::urom::proto::{Member, PluginAddr, Reply, Seg};

pub(crate) use crate::urom::proto::NotifyRef as Notify;

/// `doca_cpu_set_t` → wire cpuset (bit n of the set is bit n % 64 of word n / 64).
pub(crate) fn cpuset_to_wire(c: &doca_cpu_set_t) -> CpuSet {
    let mut w = [0u64; 16];
    for cpu in (0..DOCA_CPU_SETSIZE).filter(|&cpu| c.is_set(cpu)) {
        w[cpu / 64] |= 1 << (cpu % 64);
    }
    w
}

/// Wire cpuset → `doca_cpu_set_t`.
pub(crate) fn cpuset_from_wire(w: &CpuSet) -> doca_cpu_set_t {
    let mut c = doca_cpu_set_t::empty();
    for cpu in (0..DOCA_CPU_SETSIZE).filter(|&cpu| w[cpu / 64] & (1 << (cpu % 64)) != 0) {
        c.set(cpu);
    }
    c
}

pub(crate) fn hello(req: u64, pid: u32, max_workers: u32, max_msg_size: u64) -> Vec<u8> {
    Request::Hello { req, proto: proto::PROTO_VERSION, pid, max_workers, max_msg_size }.encode()
}

pub(crate) fn spawn(
    req: u64,
    worker_id: u64,
    gid: u32,
    plugins: u64,
    cpuset: &doca_cpu_set_t,
    max_inflight: u32,
    env: &[String],
) -> Vec<u8> {
    Request::Spawn { req, worker_id, gid, plugins, cpuset: cpuset_to_wire(cpuset), max_inflight, env: env.to_vec() }
        .encode()
}

pub(crate) fn stop(req: u64, worker_id: u64) -> Vec<u8> {
    Request::Stop { req, worker_id }.encode()
}

pub(crate) fn workers_by_gid(req: u64, gid: u32) -> Vec<u8> {
    Request::WorkersByGid { req, gid }.encode()
}

/// A control reply, or None for a packet that does not decode (the connection is dropped).
pub(crate) fn decode_reply(b: &[u8]) -> Option<Reply> {
    Reply::decode(b).ok()
}

/// The bytes of a `Command` before its payload (the packet is these, then the payload).
pub(crate) fn command_head(ctx: u64, plugin: u64, payload_len: usize) -> [u8; proto::COMMAND_HEAD] {
    HostToWorker::command_head(ctx, plugin, payload_len)
}

pub(crate) fn domain_create(ctx: u64, members: &[Member]) -> Vec<u8> {
    HostToWorker::DomainCreate { ctx, domain: Domain { members: members.to_vec() } }.encode()
}

pub(crate) fn domain_destroy(ctx: u64) -> Vec<u8> {
    HostToWorker::DomainDestroy { ctx }.encode()
}

/// A data-connection message, its notification borrowed from `b`, or None for a packet that
/// does not decode.
pub(crate) fn decode_notify(b: &[u8]) -> Option<Notify<'_>> {
    WorkerToHost::decode_notify(b).ok()
}

/// Bytes of `DomainCreate`'s tag and `ctx`, before the `Domain`.
const DOMAIN_CREATE_HEAD: usize = 12;

/// This process's description for the OOB exchange.
pub(crate) fn encode_members(members: &[Member]) -> Vec<u8> {
    let mut v = domain_create(0, members);
    v.drain(..DOMAIN_CREATE_HEAD);
    v
}

/// Another process's description, strictly decoded.
pub(crate) fn decode_members(desc: &[u8]) -> Option<Vec<Member>> {
    let mut packet = Vec::with_capacity(DOMAIN_CREATE_HEAD + desc.len());
    packet.extend_from_slice(&2u32.to_le_bytes());
    packet.extend_from_slice(&0u64.to_le_bytes());
    packet.extend_from_slice(desc);
    match HostToWorker::decode(&packet).ok()? {
        HostToWorker::DomainCreate { domain, .. } => Some(domain.members),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_round_trip() {
        let mut c = doca_cpu_set_t::empty();
        for cpu in [0, 1, 63, 64, 500, 1023] {
            c.set(cpu);
        }
        let w = cpuset_to_wire(&c);
        assert_eq!(w[0], 0x8000_0000_0000_0003);
        assert_eq!(w[1], 1);
        assert_eq!(cpuset_from_wire(&w), c);
    }

    #[test]
    fn descriptions_round_trip_and_refuse_garbage() {
        let m = vec![Member {
            worker_id: 7,
            addrs: vec![PluginAddr { plugin: 2, addr: vec![1, 2, 3] }],
            segs: vec![Seg { va: 0x1000, len: 64, memh: vec![9; 4], mkey: vec![] }],
        }];
        let d = encode_members(&m);
        assert_eq!(&d[..4], &1u32.to_le_bytes(), "starts with the member count");
        assert_eq!(decode_members(&d), Some(m));
        assert_eq!(decode_members(&d[..d.len() - 1]), None);
        let mut longer = d.clone();
        longer.push(0);
        assert_eq!(decode_members(&longer), None);
        assert_eq!(decode_members(&encode_members(&[])), Some(vec![]));
    }
}
