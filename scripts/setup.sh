#!/usr/bin/env bash
# Installs what building and testing async-doca needs beyond a Rust toolchain. Idempotent.
set -euo pipefail
if command -v rustup >/dev/null 2>&1; then
  rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
  rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
fi
# The C ABI tests (tests/c_abi.rs, urom-plugin's C plugin test) build C with `cc`; without
# it they pass after saying they were skipped. CI machines have it.
command -v cc >/dev/null 2>&1 || echo "setup: no C compiler (cc): the C ABI tests will be skipped" >&2
