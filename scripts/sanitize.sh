#!/usr/bin/env bash
# Undefined behaviour and data races, looked for three ways (nightly Rust; this script
# installs what it needs with rustup):
#   miri  Miri over the runtime's unit tests that stay in Rust (slot table, waiter lists, slab,
#         timers, cpuset, park protocol, ranges, wait masks, OOB framing, the RDMA stream's
#         and pipeline's bookkeeping, error kinds); the tests that cross into the DOCA provider
#         or make system calls Miri cannot run (memfd_create, sockets, epoll on a PE) are
#         marked #[cfg_attr(miri, ignore)] and skipped (src/rdma/tests.rs, RDMA throughout, is
#         compiled out under Miri). 41 run, 53 skipped; a few minutes.
#   asan  AddressSanitizer (with LeakSanitizer) over the unit tests of doca-soft and the
#         runtime and the RDMA, sync-event, executor and chaos integration tests, the
#         standard library rebuilt instrumented (-Zbuild-std).
#   tsan  ThreadSanitizer over the same tests (the runtime's cross-thread wake-ups, the
#         provider's threads and doorbells). It sees one process at a time, and
#         not the rings and memory doca-soft shares through memfd segments: even in one
#         process the importer maps a segment at an address of its own, so accesses through
#         the two mappings are not compared (a blind spot, not a source of false reports).
#   scripts/sanitize.sh [miri|asan|tsan]...   (default: all three)
# The chaos test runs children from its own instrumented binary and the `async-doca` command
# line (its UROM daemon), which is built here first with the same flags; a sanitizer report
# in any of their stderr files fails its round. Builds set `--cfg async_doca_sanitizer="..."`
# for the one check a sanitizer distorts (chaos' resident-memory check, off under ASan).
# What the runs found: docs/reliability.md, "Sanitizers and Miri". Each uses its own target
# directory under target/. Not in .ci/run: the sanitizer builds rebuild the standard library
# and take longer than CI allows (5-8 minutes each from a cold target directory on 2 shared
# cores, build and tests, much longer under load); `miri` alone fits.
set -euo pipefail
cd "$(dirname "$0")/.."

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(miri asan tsan)
# Install nightly only when missing (an installed one is used as it is, not updated).
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component add rust-src miri --toolchain nightly

host="$(rustc +nightly -vV | sed -n 's/^host: //p')"

# The integration tests that exercise the runtime and the provider together, in-process and
# across processes (the chaos harness starts its children from the same instrumented binary).
sanitized_tests() (
    # A subshell: the exports below end with it.
    local flag="$1" dir="$2"
    # Frame pointers give the sanitizers' reports usable stacks; debug assertions stay on.
    # `async_doca_sanitizer` names the sanitizer to the code, for the few checks it distorts
    # (the chaos test's resident-memory check under ASan); declared in Cargo.toml's check-cfg.
    export RUSTFLAGS="-Zsanitizer=$flag -Cforce-frame-pointers=yes --cfg async_doca_sanitizer=\"$flag\""
    export RUSTDOCFLAGS="-Zsanitizer=$flag"
    export CARGO_TARGET_DIR="target/$dir"
    # The chaos test runs the `async-doca` command line (its UROM daemon). That binary belongs
    # to `cli/`, which a `-p async-doca` test build does not build, and the test's fallback (a
    # nested `cargo build`) would inherit RUSTFLAGS without -Zbuild-std/--target: the sanitizer
    # flags would then reach the proc macros (serde_derive) and rustc could not load them. So it
    # is built here first, instrumented the same way, where the test looks first
    # (target/$dir/$host/debug/async-doca, beside the test binaries). The test build after it
    # rewrites doca-soft's unhashed outputs back to its own feature set.
    cargo +nightly build -Zbuild-std --target "$host" -p async-doca-cli --bin async-doca
    # --no-fail-fast: one binary's report does not hide the others'.
    cargo +nightly test -Zbuild-std --target "$host" --no-fail-fast \
        -p doca-soft -p async-doca --lib --test rdma --test sync_event --test executor --test chaos --test outlive --test executor_ends \
        -- --test-threads=2 "${@:3}"
)

for mode in "${modes[@]}"; do
    case "$mode" in
    miri)
        echo "== Miri: executor and buffer unit tests"
        CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p async-doca --lib
        ;;
    asan)
        echo "== AddressSanitizer"
        # LeakSanitizer is on with ASan; a report fails the test binary at exit. Leaks made on
        # purpose by a test are suppressed by name (scripts/lsan.supp). An allocation too big
        # for the sanitizer returns null, as it does without it: a test asks for one on purpose
        # (coll::host, an absurd announced message length must fail the chunk, not abort).
        LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp" \
            ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:allocator_may_return_null=1" \
            sanitized_tests address asan
        ;;
    tsan)
        echo "== ThreadSanitizer"
        # Every test runs, the UROM daemon's end-to-end test too: its daemon now gets SIGTERM
        # at its serving thread (see DaemonProc::terminate in doca-soft's daemon tests). A
        # too-big allocation returns null, as under ASan (coll::host's absurd-length test).
        # Options in the caller's TSAN_OPTIONS are appended (they win), e.g. halt_on_error=0
        # to see every report of a run.
        TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:allocator_may_return_null=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}" \
            sanitized_tests thread tsan
        ;;
    *)
        echo "unknown mode $mode (miri, asan or tsan)" >&2
        exit 2
        ;;
    esac
done
echo "sanitize: ${modes[*]}: clean"
