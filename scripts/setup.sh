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
#   --ucx-new  A UCX of at least 1.15 (NVIDIA's UROM plugins need it; Debian 12 has 1.13) in
#          .deps/ucx: the libraries, headers, pkg-config files and tools of PyPI's
#          `libucx-cu12` wheel (UCX built by NVIDIA's RAPIDS project; its CUDA transports are
#          modules UCX loads only where CUDA is). `. .deps/ucx/env.sh` puts it on
#          PKG_CONFIG_PATH, LD_LIBRARY_PATH and PATH; tests/c_programs.rs uses it when present.
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
install_new_ucx() {
  # The wheel is a zip of libucx/{bin,include,lib}; its .pc files name the prefix it was
  # built in, which is rewritten here to where it lands.
  local root dest tmp
  root=$(cd "$(dirname "$0")/.." && pwd)
  dest=$root/.deps/ucx
  if [ -e "$dest/include/ucp/api/ucp_version.h" ]; then
    return
  fi
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "setup: --ucx-new needs python3 with pip: no UCX >= 1.15 installed" >&2
    return
  fi
  tmp=$(mktemp -d)
  if ! python3 -m pip download --quiet --no-deps --only-binary :all: --dest "$tmp" 'libucx-cu12>=1.15'; then
    echo "setup: downloading libucx-cu12 from PyPI failed: no UCX >= 1.15 installed" >&2
    rm -rf "$tmp"
    return
  fi
  rm -rf "$dest" && mkdir -p "$dest"
  python3 - "$tmp" "$dest" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if not info.filename.startswith("libucx/") or info.is_dir():
            continue
        out = os.path.join(dest, info.filename[len("libucx/"):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(info) as src, open(out, "wb") as dst:
            dst.write(src.read())
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            os.chmod(out, mode)
for pc in glob.glob(os.path.join(dest, "lib", "pkgconfig", "*.pc")):
    lines = open(pc).read().splitlines()
    lines = ["prefix = " + dest if l.replace(" ", "").startswith("prefix=") else l for l in lines]
    open(pc, "w").write("\n".join(lines) + "\n")
PY
  rm -rf "$tmp"
  {
    echo "# Source this to build and run against the UCX in $dest."
    echo "export PKG_CONFIG_PATH=\"$dest/lib/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}\""
    echo "export LD_LIBRARY_PATH=\"$dest/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\""
    echo "export PATH=\"$dest/bin:\$PATH\""
  } > "$dest/env.sh"
  echo "setup: UCX $(PKG_CONFIG_PATH=$dest/lib/pkgconfig pkg-config --modversion ucx 2>/dev/null || echo '?') in $dest (. $dest/env.sh to use it)"
}
for flag in "$@"; do
  case "$flag" in
    --ucx)
      command -v ucx_perftest >/dev/null 2>&1 || apt_install "perf --anchor ucx will be skipped" ucx-utils
      ;;
    --ucx-new)
      install_new_ucx
      ;;
    --mpi)
      mpi_pkgs=(libopenmpi-dev openmpi-bin libclang-dev pkg-config)
      if ! dpkg -s "${mpi_pkgs[@]}" >/dev/null 2>&1; then
        apt_install "the feature mpi and scripts/mpi.sh will not build" "${mpi_pkgs[@]}"
      fi
      ;;
    *)
      echo "setup: unknown flag $flag (known: --ucx, --ucx-new, --mpi)" >&2
      exit 2
      ;;
  esac
done
