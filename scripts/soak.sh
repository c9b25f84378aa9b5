#!/usr/bin/env bash
# The chaos harness (tests/chaos.rs) for as long as asked: rounds of N processes doing random
# RDMA, sync-event and UROM traffic (commands, collectives) under faults (kills, freezes, ctx
# restarts, UROM daemon crashes and worker kills, DROM mask changes), every invariant checked
# after each round; then the links harness (tests/chaos_links.rs: connection setup, remote
# events, DMA, Comch) for as long again.
#   scripts/soak.sh MINUTES [PROCS]
# ASYNC_DOCA_CHAOS_SEED=S (ASYNC_DOCA_LINKS_SEED=S) repeats a run. Runs at the lowest CPU priority (the machine may be
# shared); prints the figures (rounds, operations, faults, checks) as it goes and at the end,
# and every failing round with its seed and fault schedule (its logs are kept in /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes="${1:?usage: scripts/soak.sh MINUTES [PROCS]}"
procs="${2:-4}"
cargo build --release --test chaos --test chaos_links
ASYNC_DOCA_CHAOS_MINUTES="$minutes" ASYNC_DOCA_CHAOS_PROCS="$procs" \
    nice -n 19 cargo test --release --test chaos -- --ignored --exact chaos_soak --nocapture
ASYNC_DOCA_LINKS_MINUTES="$minutes" \
    nice -n 19 cargo test --release --test chaos_links -- --ignored --exact chaos_links_soak --nocapture
