#!/usr/bin/env bash
# Fuzzes the parsers of untrusted export blobs in doca-soft (see docs/fuzzing.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 30 seconds, every target)
#
# Installs cargo-fuzz if missing, builds every target (AddressSanitizer, debug assertions
# and overflow checks on), then runs each target for SECONDS_PER_TARGET. Exits non-zero if
# any target crashes, leaks, times out or fails to run; the input that did it is saved in
# fuzz/artifacts/<target>/ and the log is fuzz/artifacts/<target>.log.
#
# Environment: FUZZ_SANITIZER=address|none (default address; `none` if ASan is unavailable),
# CARGO_TARGET_DIR as usual (default fuzz/target). The corpus grows in fuzz/corpus/<target>.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-30}"
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: $0 [SECONDS_PER_TARGET] [TARGET...]" >&2
  exit 2
fi
shift || true

if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

# cargo-fuzz passes nightly-only flags to rustc (-Zsanitizer, sanitizer-coverage passes);
# RUSTC_BOOTSTRAP lets the stable toolchain accept them. Harmless on nightly.
export RUSTC_BOOTSTRAP=1
sanitizer="${FUZZ_SANITIZER:-address}"
build_flags=(--sanitizer "$sanitizer" --debug-assertions)

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

cargo fuzz build "${build_flags[@]}"

mkdir -p fuzz/artifacts
failed=()
for t in "${targets[@]}"; do
  log="fuzz/artifacts/$t.log"
  echo "== $t (${secs}s)"
  # -timeout: one input taking 10 s is a hang. -rss_limit_mb: ASan's quarantine needs room.
  if cargo fuzz run "${build_flags[@]}" "$t" -- \
    -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^Done [0-9]+ runs|stat::average_exec_per_sec' "$log" | tr '\n' ' '
    echo
  else
    failed+=("$t")
    tail -n 60 "$log"
    echo "!! $t failed (log: $log, inputs: fuzz/artifacts/$t/)"
  fi
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzzing failed: ${failed[*]}" >&2
  exit 1
fi
echo "fuzzing: ${#targets[@]} targets, ${secs}s each, no crash"
