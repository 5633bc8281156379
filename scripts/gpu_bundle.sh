#!/usr/bin/env bash
# Prepares .gpu-bundle/ at the repository root: the Debian 12 packages that configuring and
# building Holdfast needs, as .deb files, for a machine that has none of them and no network
# (the lent GPU machine: ../shared/notes/gpu-machine.md). Run it here (Debian 12, network);
# carry .gpu-bundle (git-ignored) with the run; there:
#
#   .gpu-bundle/unpack.sh /tmp/hf-deps          # dpkg -x each .deb into a prefix of its own
#   . /tmp/hf-deps/env.sh                        # CMAKE_PREFIX_PATH, PKG_CONFIG_PATH, LD_LIBRARY_PATH
#   cmake -C /tmp/hf-deps/bundle.cmake ...       # pkg-config, library architecture, rpath-link
#
# unpack.sh prints the full cmake line. Not in the bundle: LibTorch (the machine's PyTorch wheel
# has it), CUDA/NCCL (the machine's), libslurm (optional; holdfastd then has the local scheduler).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=$ROOT/.gpu-bundle
LIMIT_MIB=48

# What CMakeLists.txt finds, and what those need to link and run:
#   find_package spdlog (-> fmt), nlohmann_json, CLI11, Boost 1.74 (headers), SQLite3, GTest
#   (GMock), Gloo (-> libhiredis, libibverbs -> libnl); pkg_check_modules tomlplusplus,
#   libxxhash; pkg-config itself (pkgconf), in case the machine has none.
PKGS=(
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  nlohmann-json3-dev libcli11-dev libboost1.74-dev
  libsqlite3-dev libsqlite3-0
  libtomlplusplus-dev libtomlplusplus3 libxxhash-dev libxxhash0
  libgtest-dev libgmock-dev googletest
  libgloo-dev libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200
  pkgconf pkgconf-bin libpkgconf3
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

mkdir -p "$BUNDLE"
tmp=$(mktemp -d "$BUNDLE/download.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
download() { (cd "$tmp" && apt-get download -q "${PKGS[@]}") ; }
if ! download; then
  echo "gpu_bundle: apt-get download failed; running apt-get update and trying again" >&2
  $SUDO apt-get update -q
  download
fi

rm -rf "$BUNDLE/debs"
mkdir -p "$BUNDLE/debs"
mv "$tmp"/*.deb "$BUNDLE/debs/"

# MANIFEST: package version sha256, one a line.
(
  cd "$BUNDLE/debs"
  for deb in *.deb; do
    printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
      "$(sha256sum "$deb" | cut -d' ' -f1)"
  done
) > "$BUNDLE/MANIFEST"

cat > "$BUNDLE/unpack.sh" <<'UNPACK'
#!/usr/bin/env bash
# unpack.sh PREFIX: extracts every .deb of debs/ into PREFIX (never /) and makes the result
# usable from there: .pc and CMake files that name /usr point into PREFIX, absolute symlinks
# too; writes PREFIX/env.sh, PREFIX/bundle.cmake and PREFIX/bin/pkg-config (a wrapper of the
# bundled pkgconf). Needs dpkg-deb, or ar + tar + xz, or python3. Made by scripts/gpu_bundle.sh.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
mkdir -p "$1"
P=$(cd "$1" && pwd -P)
if [ "$P" = / ] || [ "$P" = /usr ] || [ "$P" = /usr/local ]; then
  echo "unpack.sh: refusing prefix '$P'" >&2; exit 2
fi
ARCH=x86_64-linux-gnu

method=${HOLDFAST_UNPACK_METHOD:-}
if [ -z "$method" ]; then
  if command -v dpkg-deb >/dev/null; then method=dpkg
  elif command -v ar >/dev/null && command -v tar >/dev/null && command -v xz >/dev/null; then method=ar
  else method=python; fi
fi
extract() {  # extract DEB
  case "$method" in
    dpkg) dpkg-deb -x "$1" "$P" ;;
    ar)
      local t; t=$(mktemp -d)
      (cd "$t" && ar x "$1")
      tar -xf "$t"/data.tar.* -C "$P" || { rm -rf "$t"; return 1; }
      rm -rf "$t" ;;
    python)
      python3 - "$1" "$P" <<'PY'
import io, sys, tarfile
deb, dest = sys.argv[1], sys.argv[2]
data = open(deb, "rb").read()
assert data[:8] == b"!<arch>\n", deb
off = 8
while off < len(data):
    name = data[off:off + 16].decode().strip().rstrip("/")
    size = int(data[off + 48:off + 58].decode().strip())
    body = data[off + 60:off + 60 + size]
    off += 60 + size + (size & 1)
    if name.startswith("data.tar"):
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
            kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
            tf.extractall(dest, **kw)
        break
else:
    sys.exit("no data.tar in " + deb)
PY
      ;;
    *) echo "unpack.sh: unknown HOLDFAST_UNPACK_METHOD '$method'" >&2; exit 2 ;;
  esac
}
n=0
for deb in "$HERE"/debs/*.deb; do extract "$deb"; n=$((n + 1)); done
echo "unpack.sh: $n packages extracted into $P ($method)"

# Absolute symlinks would point at the machine's /usr: point them into PREFIX.
find "$P" -type l -lname '/*' -print | while IFS= read -r l; do
  t=$(readlink "$l")
  case "$t" in "$P"/*) continue ;; esac
  ln -sfn "$P$t" "$l"
done
# pkg-config files: prefix=/usr, libdir=/usr/..., -I/usr/include (nlohmann_json.pc, gtest.pc).
find "$P" -name '*.pc' -path '*/pkgconfig/*' -print | while IFS= read -r f; do
  sed -i -E "s#^([A-Za-z_][A-Za-z0-9_]*)=/usr(/|\$)#\1=$P/usr\2#; s#(^|[ \t])-([IL])/usr/#\1-\2$P/usr/#g" "$f"
done
# CMake package files: absolute /usr/... (Gloo's IMPORTED_LOCATION "/usr/lib/libgloo.so.0.5.0";
# the "/lib -> /usr/lib" checks of fmt/spdlog/GTest, harmless either way). Idempotent: a path
# already under PREFIX has a path character before its /usr/.
find "$P/usr/lib" "$P/usr/share" -name '*.cmake' -path '*cmake*' -print 2>/dev/null | while IFS= read -r f; do
  sed -i -E "s#(^|[^A-Za-z0-9_./~+-])/usr/#\1$P/usr/#g" "$f"
done
if grep -rIlE '(^|[^A-Za-z0-9_./~+-])/usr/(lib|include)' --include='*.cmake' "$P/usr" >/dev/null 2>&1 ||
   grep -rIlE '^[A-Za-z_]+=/usr' --include='*.pc' "$P/usr" >/dev/null 2>&1; then
  echo "unpack.sh: warning: files still naming /usr:" >&2
  grep -rIlE '(^|[^A-Za-z0-9_./~+-])/usr/(lib|include)|^[A-Za-z_]+=/usr' --include='*.cmake' --include='*.pc' "$P/usr" >&2 || true
fi

LIBS="$P/usr/lib/$ARCH:$P/usr/lib:$P/lib/$ARCH"
PCP="$P/usr/lib/$ARCH/pkgconfig:$P/usr/lib/pkgconfig:$P/usr/share/pkgconfig"

# pkg-config that needs no environment: the bundled pkgconf, its libpkgconf, the bundle's .pc
# files first (PKG_CONFIG_PATH from the caller still counts, after them).
mkdir -p "$P/bin"
cat > "$P/bin/pkg-config" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_PATH="$PCP\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
exec "$P/usr/bin/pkgconf" "\$@"
EOF
chmod +x "$P/bin/pkg-config"

cat > "$P/env.sh" <<EOF
# . $P/env.sh — Holdfast's Debian dependencies unpacked in $P (from .gpu-bundle).
export HOLDFAST_DEPS_PREFIX="$P"
export CMAKE_PREFIX_PATH="$P/usr\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_PATH="$PCP\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
export PKG_CONFIG="$P/bin/pkg-config"
# Runtime (and ld's search for libgloo's own needs: libhiredis, libibverbs, libnl).
export LD_LIBRARY_PATH="$LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOF

cat > "$P/bundle.cmake" <<EOF
# cmake -C $P/bundle.cmake: settings for Holdfast's Debian dependencies unpacked in $P.
# The prefix itself goes in CMAKE_PREFIX_PATH (env.sh exports it; or -DCMAKE_PREFIX_PATH).
set(HOLDFAST_DEPS_PREFIX "$P" CACHE PATH "Holdfast's unpacked Debian dependencies")
set(PKG_CONFIG_EXECUTABLE "$P/bin/pkg-config" CACHE FILEPATH "")
# Debian's CMake packages live in lib/$ARCH/cmake: searched only with this set (a compiler
# that reports its multiarch directory sets it anyway, to the same value).
set(CMAKE_LIBRARY_ARCHITECTURE "$ARCH" CACHE STRING "")
# ld must find what the bundled shared libraries need (libgloo -> libhiredis, libibverbs -> libnl).
# --disable-new-dtags: the build tree's binaries get DT_RPATH, which (unlike DT_RUNPATH) also
# serves their libraries' own needs, so they run without env.sh's LD_LIBRARY_PATH. LibTorch's
# libraries keep finding the wheel's nvidia/*/lib first (their own DT_RPATH comes first).
set(CMAKE_EXE_LINKER_FLAGS "-Wl,-rpath-link,$LIBS -Wl,--disable-new-dtags" CACHE STRING "")
set(CMAKE_SHARED_LINKER_FLAGS "-Wl,-rpath-link,$LIBS -Wl,--disable-new-dtags" CACHE STRING "")
set(CMAKE_BUILD_RPATH "$P/usr/lib/$ARCH;$P/usr/lib;$P/lib/$ARCH" CACHE STRING "")
EOF

# Checks: the files CMake looks for, pkg-config answers, the C library is new enough.
for f in usr/include/spdlog/spdlog.h usr/include/fmt/format.h usr/include/nlohmann/json.hpp \
         usr/include/CLI/CLI.hpp usr/include/boost/version.hpp usr/include/sqlite3.h \
         usr/include/toml++/toml.h usr/include/xxhash.h usr/include/gtest/gtest.h \
         usr/include/gloo/allreduce.h usr/lib/libgloo.so.0.5.0 usr/lib/$ARCH/libsqlite3.so \
         usr/lib/$ARCH/cmake/spdlog/spdlogConfig.cmake usr/share/cmake/Gloo/GlooConfig.cmake; do
  [ -e "$P/$f" ] || { echo "unpack.sh: missing $P/$f" >&2; exit 1; }
done
"$P/bin/pkg-config" --modversion tomlplusplus libxxhash >/dev/null ||
  { echo "unpack.sh: the bundled pkg-config does not answer" >&2; exit 1; }
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
case "$glibc" in
  2.3[4-9]*|2.[4-9]*|[3-9].*) ;;
  *) echo "unpack.sh: warning: glibc '${glibc:-?}' here; the bundled libraries need >= 2.34" >&2 ;;
esac

cat <<EOF
unpack.sh: ready ($(du -sh "$P" | cut -f1) in $P). Configure with:
  . $P/env.sh
  cmake -S SRC -B BUILD -G Ninja -C $P/bundle.cmake \\
    -DCMAKE_PREFIX_PATH="$P/usr;\$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
EOF
UNPACK
chmod +x "$BUNDLE/unpack.sh"

bytes=$(du -sb "$BUNDLE" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "gpu_bundle: $(ls "$BUNDLE/debs" | wc -l) packages, ${mib} MiB in $BUNDLE (limit ${LIMIT_MIB} MiB)"
if [ "$bytes" -gt $((LIMIT_MIB * 1048576)) ]; then
  echo "gpu_bundle: $BUNDLE is over ${LIMIT_MIB} MiB" >&2
  exit 1
fi
