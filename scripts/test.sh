#!/usr/bin/env bash
# The whole test suite: what `cargo test --workspace` runs, plus the checks that need a
# special build (the loom model of the executor's park handshake) and the examples that
# must exit 0, and the valgrind check of futures dropped in flight. Every test bounds its own
# time and cleans up its processes.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --workspace

# The chaos harness ran above in the debug build (tests/chaos.rs: processes killed, frozen,
# contexts restarted, futures dropped, the UROM daemon crashed and workers killed, DROM masks
# moved, all under random RDMA, sync-event and UROM traffic, every invariant checked from the
# logs); once more optimised, where the timing differs.
# `scripts/soak.sh MINUTES` runs it for longer.
cargo test --release --test chaos
# The same for the links between programs (tests/chaos_links.rs: connection setup by
# address, remote events, DMA on exported memory, Comch conversations, under kills, freezes
# and garbage on the port); it ran above in the debug build.
cargo test --release --test chaos_links

# The loom model checker explores every interleaving of the park/wake handshake; it needs
# its own cfg, so it builds in its own target directory.
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --lib loom

cargo run --release --example sync_event_pair
cargo run --release --example rdma_write
cargo run --release --example rdma_read
cargo run --release --example rdma_send_imm
cargo run --release --example rdma_write_imm
cargo run --release --example rdma_atomics
# Host and "DPU" processes: DMA of a 64 MiB host buffer in and a result back, verified.
cargo run --release --example dma_copy
# NVIDIA's local-PCI sync-event pattern: the blob over Comch, then signal/wait rounds.
cargo run --release --example comch_sync_event
# Connection management by address: a server and 8 clients (echoes verified), and a peer
# driving the server's sync event through RDMA (remote-net sync events).
cargo run --release --example rdma_cm_echo
cargo run --release --example rdma_remote_event
# The UROM examples start a private UROM service when none is running, and stop it.
cargo run --release --example urom_multi_workers_bootstrap
cargo run --release --example urom_ping_pong
cargo run --release --example allreduce
# A runtime follows the CPU masks `async-doca taskset` gives it (the tool is used when built).
cargo build --release --bin async-doca
cargo run --release --example drom_rebalance

# The tokio bridge's unit, doc and UROM tests ran above (feature `tokio` is on by default);
# the HTTP example's end-to-end test needs hyper (`tokio-example`): two processes, hyper clients.
cargo test --features tokio-example --test tokio_kv

# Futures dropped while their DOCA tasks are in flight, under valgrind: no invalid access,
# nothing definitely lost.
scripts/valgrind-drop.sh
