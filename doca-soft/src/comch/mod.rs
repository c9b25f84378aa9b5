//! Comch (`doca_comch_*`): the communication channel between a DPU-side server and host-side
//! clients, here between processes (or threads) of one host.
//!
//! # Model
//!
//! * **Rendezvous.** The server and its clients share a *name*. A started server listens on
//!   the abstract Unix socket `async-doca-comch.<uid>.<name>` (`SOCK_SEQPACKET`: message
//!   boundaries are kept by the kernel, and a closed peer is seen as end of file). Abstract
//!   sockets vanish with their last descriptor, so a crashed server leaves nothing behind.
//! * **Handshake** ([`wire`]): the client sends HELLO (magic, version, its max message size),
//!   the server answers WELCOME (its max message size) or REJECT (another version, too many
//!   clients). Both sides then use the smaller maximum. The server reports the new connection
//!   through its connect callback; the client's start (`IN_PROGRESS`, state STARTING) becomes
//!   RUNNING through progress once WELCOME arrived. A client started before its server retries
//!   the connection from progress every [`CONNECT_RETRY`] for [`CONNECT_TIMEOUT`] (or what
//!   [`CONNECT_TIMEOUT_ENV`] says), then its start fails (IDLE).
//! * **Messages** are one DATA record each; a send task completes when the kernel took the
//!   record (a full socket keeps it queued in order on its connection and progress retries).
//!   Received records become receive events.
//! * **Events call user code, hooks may not** (`ctx.rs`): every event (connect, disconnect,
//!   message) travels as an internal *event task* of the ctx ([`EventTask`]) that completes at
//!   once; its delivery from `doca_pe_progress` runs the user's callback, in order with the
//!   send completions. Their pool is `recv_queue_size` (+ the client limit on the server):
//!   while it is exhausted, messages stay in the socket (flow control back to the sender).
//!   Event tasks count as in-flight tasks of the ctx until delivered.
//! * **Descriptors in the PE.** The listening socket and every connection socket are
//!   registered with the PE's notification set (level mode), so an event-mode PE wakes for a
//!   new client, a message, or a closed peer.
//! * **Reading only what may wait.** Each side counts the records it sends in shared memory
//!   its peer maps (`sent`), and progress reads a connection's socket only while the peer's
//!   count is ahead of what it read (and now and then regardless: a crashed peer's end of
//!   file is counted by nobody), so a busy-polling PE makes no failing `recv(2)` per call.
//! * **Disconnection.** A peer that closes (stop, destroy, exit, crash) is seen as end of file:
//!   the server reports it through its disconnect callback; on both sides pending and later
//!   sends on that connection fail with `DOCA_ERROR_CONNECTION_RESET`, and
//!   `doca_comch_connection_update_info` answers `DOCA_ERROR_CONNECTION_ABORTED`. Every
//!   message the peer sent before it went (its completed sends) is still received first,
//!   even when our own send noticed the departure before our reads did, and even when the
//!   kernel reports the reset ahead of them (a peer that closed with our records unread).
//!   `doca_comch_server_disconnect` closes one client's connection (the client sees it closed;
//!   no callback on the server's side, it asked for it).
//! * **Lifetime of a connection object.** It is freed once it ended *and* the user can no
//!   longer name it: on a server, after the disconnect callback (or the connect callback of
//!   a failed attempt) returned, after `doca_comch_server_disconnect`, or at stop; on a
//!   client, at stop. Send tasks still allocated on it and undelivered events keep it until
//!   they are freed or delivered (see `Endpoint::sweep`). A server that serves clients for
//!   months therefore holds only its current connections.
//! * **Stop** closes every connection and the listener; submitted sends are flushed by the
//!   framework (`FLUSH_STATUS`), undelivered events are dropped.
//! * **Fast path** ([`consumer`], [`producer`], [`fastq`]): a consumer announces a receive queue
//!   in shared memory and the export of its buffers' mmap on the connection (a CONSUMER_NEW
//!   record, [`wire`]); the peer reports it through the new-consumer event registered with
//!   `*_event_consumer_register`, and its producers claim posted receives from the queue and
//!   write into them directly. A consumer's stop withdraws it (CONSUMER_GONE: the expired
//!   event). A consumer or producer is used on one thread with its own PE, the connection's
//!   or another (see *Threads*).
//!
//! # Limits (capabilities; our choices, hardware reports its own)
//! Name up to [`MAX_NAME_LEN`] bytes with the NUL, messages up to [`MAX_MSG_SIZE`] (default
//! [`DEFAULT_MAX_MSG_SIZE`]), receive queue up to [`MAX_RECV_QUEUE`] (default
//! [`DEFAULT_RECV_QUEUE`]), [`MAX_CLIENTS`] clients per server, [`MAX_SEND_TASKS`] send tasks.
//!
//! # Threads
//! As in DOCA: a server or client, its connections and tasks are used on the thread of its PE.
//! A consumer or producer may be on another thread (DOCA allows one per thread, each on its
//! own PE): of its connection it uses only what is thread-safe for that (`chan.rs`, the fast
//! path's section): the state and the peer's departure (atomics), the holds that keep the
//! connection alive and the orphan mark (one atomic word, so that exactly one thread frees
//! an orphan), the table of the peer's consumers (a mutex; a producer keeps its target and
//! locks only to change it), and an outbox for its records, which the server's or client's
//! thread sends at its next progress (its PE is rung). Everything else of a connection stays
//! its endpoint's thread's alone.

pub mod chan;
pub mod consumer;
pub mod fastq;
pub mod producer;
mod sent;
#[cfg(test)]
mod tests;
pub mod wire;

pub use chan::{
    doca_comch_client, doca_comch_connection, doca_comch_event_connection_status_changed, doca_comch_event_consumer,
    doca_comch_event_msg_recv, doca_comch_server, doca_comch_task_send, doca_dev_rep, EventTask,
};

use std::time::Duration;

/// Longest name, NUL included (`doca_comch_cap_get_max_name_len`). Bounded by the socket
/// address: 108 bytes minus the prefix.
pub const MAX_NAME_LEN: u32 = 64;
/// Largest message (`doca_comch_cap_get_max_msg_size`).
pub const MAX_MSG_SIZE: u32 = 65_536;
/// Message size limit when the user sets none.
pub const DEFAULT_MAX_MSG_SIZE: u32 = 4096;
/// Largest receive queue (`doca_comch_cap_get_max_recv_queue_size`).
pub const MAX_RECV_QUEUE: u32 = 8192;
/// Receive queue when the user sets none.
pub const DEFAULT_RECV_QUEUE: u32 = 64;
/// Clients one server accepts (`doca_comch_cap_get_max_clients`).
pub const MAX_CLIENTS: u32 = 512;
/// Largest send task pool (`doca_comch_cap_get_max_send_tasks`).
pub const MAX_SEND_TASKS: u32 = 8192;
/// How long a started client keeps trying to reach a server that is not there yet. NVIDIA's
/// samples give a client 30 s to reach RUNNING, which a shorter window would cut short when
/// the server starts late. The soft-only `DOCA_SOFT_COMCH_CONNECT_TIMEOUT_MS` overrides it
/// ([`CONNECT_TIMEOUT_ENV`]; the chaos harness bounds its rounds with it).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// The environment variable that overrides [`CONNECT_TIMEOUT`], in milliseconds.
pub const CONNECT_TIMEOUT_ENV: &str = "DOCA_SOFT_COMCH_CONNECT_TIMEOUT_MS";
/// Between two connection attempts of a client whose server is not there yet (each is a
/// socket and a `connect`; the client's PE has no descriptor to sleep on meanwhile).
pub const CONNECT_RETRY: Duration = Duration::from_millis(1);

/// The connect window of a client started now: [`CONNECT_TIMEOUT`], or the milliseconds of
/// `DOCA_SOFT_COMCH_CONNECT_TIMEOUT_MS` (a value that is not a number is ignored, logged).
pub(crate) fn connect_timeout() -> Duration {
    match std::env::var(CONNECT_TIMEOUT_ENV) {
        Err(_) => CONNECT_TIMEOUT,
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(ms) => Duration::from_millis(ms),
            Err(_) => {
                crate::sdk_log!(
                    WARNING,
                    "{CONNECT_TIMEOUT_ENV}={v:?} is not a number of milliseconds; using {CONNECT_TIMEOUT:?}"
                );
                CONNECT_TIMEOUT
            }
        },
    }
}

/// The answer of a fast-path capability query (`doca_comch_{consumer,producer}_cap_get_max_*`):
/// `v` for a device of this provider.
pub(crate) fn fast_cap(devinfo: *const crate::dev::doca_devinfo, dst: *mut u32, v: u32) -> crate::types::doca_error_t {
    crate::ffi::guard_err(|| {
        crate::dev::devinfo_ref(devinfo)?;
        // SAFETY: `out` checks NULL; writable by the caller's contract.
        unsafe { crate::ffi::out(dst, v) }
    })
}
