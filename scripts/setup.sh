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
# UCX's headers: doca_urom_plugin.h uses UCX's <ucs/datastruct/list.h> when it is installed, as
# DOCA's does (NVIDIA's plugins include it themselves), and its own compatible list otherwise.
# Installing Debian's libucx-dev makes C plugins build against the real UCX type.
if [ -e /usr/include/ucs/datastruct/list.h ]; then
  :
elif command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
  if ! { $SUDO apt-get install -y libucx-dev || { $SUDO apt-get update && $SUDO apt-get install -y libucx-dev; }; }; then
    echo "setup: installing libucx-dev failed: C UROM plugins build with doca_urom_plugin.h's own list instead of UCX's" >&2
  fi
else
  echo "setup: no UCX headers and apt-get is not usable here (not Debian, or no root): C UROM plugins build with doca_urom_plugin.h's own list instead of UCX's" >&2
fi
# `scripts/setup.sh --ucx`: also UCX's benchmark (Debian's ucx-utils), for
# `cargo run --release -- perf --anchor ucx`; without it that anchor is skipped with a message.
if [ "${1:-}" = "--ucx" ]; then
  if command -v ucx_perftest >/dev/null 2>&1; then
    :
  elif command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    $SUDO apt-get install -y ucx-utils || { $SUDO apt-get update && $SUDO apt-get install -y ucx-utils; } ||
      echo "setup: installing ucx-utils failed: perf --anchor ucx will be skipped" >&2
  else
    echo "setup: ucx_perftest is missing and apt-get is not usable here: perf --anchor ucx will be skipped" >&2
  fi
fi
