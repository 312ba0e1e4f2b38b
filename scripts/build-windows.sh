#!/usr/bin/env bash
# scripts/build-windows.sh: agent-reach.exe for x86_64-pc-windows-gnu, built
# on Debian (what `install.sh --target windows` runs). Prints the .exe's path.
#
# The rustup toolchain has no Windows standard library and none can be
# fetched here, so Debian's Rust 1.96 (rustc-web, cargo-web) builds one from
# its sources (rust-web-src) with -Zbuild-std (RUSTC_BOOTSTRAP=1 allows the
# unstable flag on this stable compiler); mingw-w64's gcc links. Everything
# goes to target/windows, so Linux builds in target/ are not disturbed and
# the built standard library is reused by later runs.
#   PROFILE=dev scripts/build-windows.sh   the debug build (faster)
#   scripts/build-windows.sh --unit-tests  the library's unit tests (a test
#                                          .exe, built and not run)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
profile=${PROFILE:-dist}
triple=x86_64-pc-windows-gnu

need=()
for pkg in rustc-web cargo-web rust-web-src gcc-mingw-w64-x86-64; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  echo "build-windows: installing Debian packages: ${need[*]}" >&2
  apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

# Debian's cargo and rustc (/usr/bin), not rustup's proxies earlier on PATH.
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc RUSTC_BOOTSTRAP=1
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER=x86_64-w64-mingw32-gcc
export CARGO_TARGET_DIR="$here/target/windows"
if [ "${1:-}" = --unit-tests ]; then
  # The library's unit tests for Windows (the dev profile), not run: the
  # test .exe's path is printed for Wine to run.
  echo "build-windows: /usr/bin/cargo test -Zbuild-std=std,panic_abort --target $triple --locked --lib --no-run" >&2
  /usr/bin/cargo test -Zbuild-std=std,panic_abort --target "$triple" --locked --lib --no-run \
    --message-format=json --manifest-path "$here/Cargo.toml" \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])'
  exit 0
fi
echo "build-windows: /usr/bin/cargo build -Zbuild-std=std,panic_abort --target $triple --profile $profile --locked" >&2
/usr/bin/cargo build -Zbuild-std=std,panic_abort --target "$triple" --profile "$profile" \
  --locked --bin agent-reach --manifest-path "$here/Cargo.toml" >&2
case "$profile" in dev) dir=debug ;; *) dir=$profile ;; esac
built="$CARGO_TARGET_DIR/$triple/$dir/agent-reach.exe"
if [ ! -f "$built" ]; then
  echo "build-windows: the build did not produce $built" >&2
  exit 1
fi
echo "$built"
