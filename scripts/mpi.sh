#!/usr/bin/env bash
# The MPI bootstrap end to end: installs Open MPI (scripts/setup.sh --mpi), builds
# examples/allreduce_mpi with the feature `mpi`, and runs it under mpirun with 4 ranks (the
# UROM domain and the host-only communicator bootstrap over MPI; every collective verified on
# every rank; rank 0 prints its latency table). Exits non-zero if any rank failed.
#
#   scripts/mpi.sh [example arguments, e.g. --sizes 1,4096 --iters 5]
#   MPI_RANKS=2 scripts/mpi.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0

scripts/setup.sh --mpi
if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpi.sh: mpirun is missing after scripts/setup.sh --mpi (see its message above)" >&2
  exit 1
fi

cargo build --release --features mpi --example allreduce_mpi

ranks=${MPI_RANKS:-4}
# More ranks than cores is the normal case on small machines and CI: allow it. Open MPI
# refuses to run as root unless told twice (flag and environment); CI runs as root.
flags=(--oversubscribe)
if [ "$(id -u)" = 0 ]; then
  flags+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# MpiOob's own test: a singleton world (MPI without mpirun), from a thread that is not MPI's
# main thread, as the executors are not.
timeout 600 cargo test --features mpi --lib oob::mpi
# Every step of the example is bounded (60 s); this bounds the whole run as well.
timeout 600 mpirun "${flags[@]}" -n "$ranks" target/release/examples/allreduce_mpi "$@" </dev/null
