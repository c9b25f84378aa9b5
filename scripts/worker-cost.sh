#!/usr/bin/env bash
# What the worker_coll plugin costs per offloaded collective, in instructions: the
# `worker_cost_probe` harness (urom-coll/tests/plugin.rs) runs checked 8 B allreduces of two
# members in one thread, with no waiting and no other process, under callgrind, twice (LOW and
# HIGH collectives); the difference of the plugin's inclusive cost (its `worker_cmd` and
# `progress` entry points) over the difference of the counts is the cost of one allreduce,
# both members together. Deterministic: a quiet machine is not needed. See docs/cost.md
# ("Twelfth session") for what it measured.
#
# usage: scripts/worker-cost.sh [LOW HIGH]      (default 100 300)
# needs: valgrind (callgrind_annotate comes with it)
set -euo pipefail
cd "$(dirname "$0")/.."
low=${1:-100}
high=${2:-300}
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
    echo "worker-cost: needs valgrind (e.g. apt-get install valgrind)" >&2
    exit 2
fi
bin=$(cargo test --release -p doca-urom-coll --test plugin --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*plugin-[^"]*\)".*/\1/p' | tail -1)
if [ -z "$bin" ]; then
    echo "worker-cost: could not build the plugin tests" >&2
    exit 1
fi
out=$(mktemp -d "${TMPDIR:-/tmp}/worker-cost.XXXXXX")
trap 'rm -rf "$out"' EXIT

# The plugin's inclusive instructions in one callgrind profile.
plugin_cost() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null | awk '
        / urom-plugin\/src\/ffi\.rs:doca_urom_plugin::ffi::(worker_cmd|progress) \[/ {
            n = $1; gsub(",", "", n); sum += n
        }
        END { print sum + 0 }'
}

for n in "$low" "$high"; do
    WORKER_COST_ITERS=$n valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" \
        "$bin" worker_cost_probe --ignored --exact >/dev/null 2>&1
done
a=$(plugin_cost "$out/cg.$low")
b=$(plugin_cost "$out/cg.$high")
if [ "$a" -eq 0 ] || [ "$b" -le "$a" ]; then
    echo "worker-cost: no plugin cost found in the profiles ($a, $b)" >&2
    exit 1
fi
awk -v a="$a" -v b="$b" -v lo="$low" -v hi="$high" \
    'BEGIN { printf "plugin instructions per 8 B allreduce of 2 members (both together): %.0f\n", (b - a) / (hi - lo) }'
