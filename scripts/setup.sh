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
# Optional extras, by flag (any order, several at once):
#   --ucx  UCX's benchmark (Debian's ucx-utils), for `cargo run --release -- perf --anchor ucx`;
#          without it that anchor is skipped with a message.
#   --mpi  Open MPI (libopenmpi-dev, openmpi-bin) and what the `mpi` crate's build needs
#          (libclang-dev for its binding generator, pkg-config to find the library), for the
#          feature `mpi` and `scripts/mpi.sh`. The default build and tests need none of it.
apt_install() {
  # apt_install WHAT PACKAGE...: installs with apt-get (updating the lists once if the first
  # try fails); says what will not work when it cannot.
  local what=$1; shift
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
    local SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "$@" ||
      { $SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "$@"; } ||
      echo "setup: installing $* failed: $what" >&2
  else
    echo "setup: $* missing and apt-get is not usable here (not Debian, or no root): $what" >&2
  fi
}
for flag in "$@"; do
  case "$flag" in
    --ucx)
      command -v ucx_perftest >/dev/null 2>&1 || apt_install "perf --anchor ucx will be skipped" ucx-utils
      ;;
    --mpi)
      mpi_pkgs=(libopenmpi-dev openmpi-bin libclang-dev pkg-config)
      if ! dpkg -s "${mpi_pkgs[@]}" >/dev/null 2>&1; then
        apt_install "the feature mpi and scripts/mpi.sh will not build" "${mpi_pkgs[@]}"
      fi
      ;;
    *)
      echo "setup: unknown flag $flag (known: --ucx, --mpi)" >&2
      exit 2
      ;;
  esac
done
