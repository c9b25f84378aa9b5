#!/usr/bin/env bash
# Runs examples/drop_in_flight under valgrind: RDMA operations and sync event waits whose
# futures are dropped while their DOCA tasks are in flight, completed later or flushed at
# shutdown. Fails on any invalid read or write (or other memcheck error) and on memory
# "definitely lost"; "still reachable" and "possibly lost" (thread stacks and thread-locals
# of the runtime) are reported but allowed. Valgrind does not know pidfd_open (it warns
# "unhandled syscall 434"); the soft provider then falls back to kill(pid, 0) for liveness.
# Takes some 10 seconds once built.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || (apt-get update && apt-get install -y valgrind)

cargo build --release --example drop_in_flight
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')

valgrind --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite \
    --show-leak-kinds=definite --track-origins=yes \
    "$target_dir/release/examples/drop_in_flight"
