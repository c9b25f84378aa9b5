//! The UROM `coll` plugin: collectives run by the workers of a domain.
//!
//! Each process of a parallel application owns one UROM worker; the workers of a domain run
//! allreduce, allgather, broadcast, barrier and reduce-scatter among themselves with the
//! [`coll_algorithms`] engine, reading their host's source buffer and writing its destination
//! buffer directly with RDMA while the host computes. [`CollPlugin`] is the plugin (exported
//! as `libworker_coll.so` by `plugins/worker_coll`); [`proto`] holds the command and
//! notification formats for plugins and hosts alike. Where the other collectives layers live
//! (the engine, the host API, the host side of the offload): `docs/collectives.md`.
//!
//! # The model
//!
//! * **One instance per worker process**, driven only from the worker's thread: `command`
//!   and `progress` never block. Everything (DOCA completions, control datagrams, the engine)
//!   advances from `progress`, which the worker calls while commands are outstanding.
//! * **Resources** (created in `open`, destroyed on drop, which is the plugin's close): the
//!   first DOCA device, a PE, one RDMA ctx (permissions local read/write + RDMA read/write;
//!   task pools for send, receive, read and write) holding every connection, 32 posted
//!   receive buffers and 16 send buffers of 64 KiB + 32 bytes in two local mmaps, and an
//!   abstract `AF_UNIX` datagram socket whose name is the plugin's address (spread by the
//!   domain exchange, found with [`WorkerCtx::addr`](doca_urom_plugin::WorkerCtx::addr)).
//!   Close stops the ctx (every task in flight is flushed through its callback), then frees
//!   buffers, mmaps, the ctx, the PE and the device.
//! * **Init** ([`proto::Cmd::Init`]): the host has exported one RDMA connection for this
//!   worker and sends its blob; the plugin exports one connection for the host, connects it to
//!   the host's blob and answers [`proto::Notif::InitDone`] with its own blob, which the host
//!   connects. It also exports one connection per peer and sends each peer's plugin a hello
//!   datagram `{magic, from_rank, from_member, to_member, blob}`; a hello received connects
//!   the connection for its sender (hellos arriving before `Init` are kept). Collectives start
//!   once every peer's hello was applied.
//! * **Messages between workers** are RDMA sends in chunks of at most 64 KiB behind a
//!   32-byte header (sender rank, magic, tag bits, offset, total); receives are reposted as
//!   soon as their chunk is copied out, chunks are reassembled per (sender, tag) and whole
//!   messages filed in a [`coll_algorithms::Matcher`] for the engine. The engine's sends are queued
//!   (up to 8 MiB, then [`coll_algorithms::Sent::Busy`]) and handed to RDMA as send buffers free.
//! * **A collective** ([`proto::Cmd::Coll`]) is checked (lengths per kind, root, the host
//!   ranges inside one registered segment each: `INVALID_VALUE` / `NOT_FOUND` at once,
//!   without taking a sequence number), then: RDMA-read `src` from the host into local memory
//!   (through the host segment's mkey, an RDMA mmap export imported with
//!   `doca_mmap_create_from_export`, over the host connection), submit to the engine in
//!   command order, RDMA-write the result into `dst`, answer [`proto::Notif::CollDone`].
//!   Accepted collectives are answered in command order, and only once every message of
//!   theirs has left (queued chunks handed to RDMA, send tasks completed): the worker stops
//!   calling `progress` when nothing is outstanding, and a member that answered early would
//!   strand the chunks its peers wait for (a broadcast root finishes locally first). Imported host mmaps are kept (keyed
//!   by mkey bytes, up to 64 unused ones) so repeated collectives on the same buffers do not
//!   map the host's segment again; the local staging memory is per collective.
//! * **Failures.** A failed RDMA task puts the ctx in its error state (every connection
//!   breaks), and so does a peer that dies or closes: the transport then fails every
//!   operation with [`coll_algorithms::TransportErrorKind::PeerGone`], which fails every pending and
//!   later collective (`CONNECTION_ABORTED`, body [`proto::Notif::Failed`] with the reason);
//!   the engine's abort notices fail the peers' side too. A mismatch between members
//!   (count, type, kind) is `INVALID_VALUE`.
//! * **Fini** ([`proto::Cmd::Fini`]) is answered after every earlier collective; the group is
//!   then left for good (a plugin instance serves one `Init`; later commands are
//!   `BAD_STATE`).
//!
//! # Host side, in order
//!
//! 1. Open the device, create a PE and a `doca_rdma` ctx per worker with permissions
//!    `LOCAL_READ_WRITE | RDMA_READ | RDMA_WRITE` (the target ctx's permissions gate one-sided
//!    access), start it and export one connection (`doca_rdma_export`).
//! 2. Register the buffers the collectives use: memory from `doca_soft_alloc_shared` (the
//!    soft provider can only reach other processes' shared memory), an mmap with
//!    `LOCAL_READ_WRITE | RDMA_READ | RDMA_WRITE`, and its `doca_mmap_export_rdma` blob as the
//!    domain segment's mkey. Create the domain with those segments (the plugin looks them up).
//! 3. Send `Init { rank, members (domain worker ids by rank), host_blob, tuning }` to the
//!    worker; on `InitDone { worker_blob }`, `doca_rdma_connect` the connection with it.
//! 4. Send `Coll` commands; each `CollDone` means the result is in `dst`. Keep the host
//!    ctx alive (and progressed now and then) while collectives run.
//! 5. `Fini`, then stop the host ctx.

pub mod proto;

mod plugin;
mod rdma;

pub use plugin::CollPlugin;
