#!/usr/bin/env bash
# The Windows test suite: builds agent-reach.exe (install.sh --target
# windows --build-only), the test-only shim DLL Wine 8 needs
# (bcryptprimitives.c: Rust's std imports ProcessPrng, which Wine 8 lacks),
# runs suite.py against the .exe under wine64, then the library's unit
# tests compiled for Windows (scripts/build-windows.sh --unit-tests) under
# wine64 too. Everything it makes stays
# under target/windows (the built standard library and the Wine prefix are
# reused by later runs). Bounded: each Wine start has a timeout in the suite
# and the whole suite one here.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
suite_timeout=${WINDOWS_SUITE_TIMEOUT:-600}

if ! command -v x86_64-w64-mingw32-gcc >/dev/null || [ ! -x /usr/lib/wine/wine64 ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    gcc-mingw-w64-x86-64 wine64
fi

# The dev profile: the suite checks behaviour, and the shipped `dist`
# profile (opt-level 3, LTO) takes far longer to build cold on 2 cores than
# this stage may (WINDOWS_PROFILE=dist tests the shipped build).
exe=$(PROFILE="${WINDOWS_PROFILE:-dev}" ./install.sh --target windows --build-only | tail -1)
echo "== windows: built $exe"

bin="$root/target/windows/test-bin"
rm -rf "$bin"
mkdir -p "$bin"
x86_64-w64-mingw32-gcc -shared -O2 -o "$bin/bcryptprimitives.dll" \
  tests/windows/bcryptprimitives.c tests/windows/bcryptprimitives.def -ladvapi32
cp "$exe" "$bin/agent-reach.exe"
cp "$exe" "$bin/agent-reach-sandbox.exe"

export WINEPREFIX="$root/target/windows/wineprefix"
export WINEDEBUG=-all
export WINEDLLOVERRIDES="winemenubuilder.exe=d;mscoree=d;mshtml=d"
export WORK_ROOT="$root/target/windows"
# One wineserver for the whole suite (each Wine start would otherwise wait
# for a new one); ended when the suite ends, whatever happens.
stop_wine() { WINEPREFIX="$WINEPREFIX" /usr/lib/wine/wineserver64 -k 2>/dev/null || true; }
trap stop_wine EXIT
mkdir -p "$WINEPREFIX"
timeout 180 /usr/lib/wine/wine64 "$bin/agent-reach.exe" --version
# The session PATH entry holds links of the .exe in a directory of its own:
# the shim must be found there too, so it also goes into the prefix's
# system32 (the test prefix only; a real Windows has the DLL).
cp "$bin/bcryptprimitives.dll" "$WINEPREFIX/drive_c/windows/system32/"
/usr/lib/wine/wineserver64 -p 2>/dev/null || true

timeout --kill-after=10 "$suite_timeout" python3 tests/windows/suite.py "$bin/agent-reach.exe"

# The library's unit tests compiled for Windows, under Wine: the Windows
# backend's (platform_windows::, its pseudo console path included) and the
# shared code's (apply_patch, output, ...). A failure fails the stage.
unit=$(scripts/build-windows.sh --unit-tests | tail -1)
if [ -z "$unit" ] || [ ! -f "$unit" ]; then
  echo "== windows: the unit tests did not build" >&2
  exit 1
fi
cp "$unit" "$bin/unit-tests.exe"
echo "== windows: the library's unit tests under wine64"
timeout --kill-after=10 "$suite_timeout" /usr/lib/wine/wine64 "$bin/unit-tests.exe"
