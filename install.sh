#!/usr/bin/env bash
# install.sh: build agent-reach from this checkout and install it.
#
#   ./install.sh [--with-aliases] [--build-only] [--target windows]
#
# Builds the shipped binary (the `dist` profile: release, stripped, no
# line tables) with the locked dependencies, installs `agent-reach` to
# ${PREFIX:-$HOME/.local}/bin and, with --with-aliases, the personality
# links (apply_patch, applypatch, agent-reach-sandbox, agent-reach-exec,
# swerex-remote) beside it. Running it again replaces what it installed.
# On Linux with glibc the binary is linked statically (static-pie): every
# start skips loading three shared libraries, about 0.5 ms of each `run`,
# and it runs where no libc is (a `FROM scratch` image).
# --build-only builds and prints the binary's path, installing nothing.
# --target windows builds agent-reach.exe for x86_64-pc-windows-gnu on
# Linux (with --build-only: there is nothing to install here): it installs
# Debian's rustc-web, cargo-web, rust-web-src (the standard library's
# sources, built for the target) and gcc-mingw-w64-x86-64 (the linker),
# builds into target/windows and prints the .exe's path.
set -euo pipefail

with_aliases=0
build_only=0
target=
expect_target=0
for arg in "$@"; do
  if [ "$expect_target" = 1 ]; then target=$arg; expect_target=0; continue; fi
  case "$arg" in
    --with-aliases) with_aliases=1 ;;
    --build-only) build_only=1 ;;
    --target) expect_target=1 ;;
    --target=*) target=${arg#--target=} ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument: $arg (see --help)" >&2; exit 2 ;;
  esac
done
if [ "$expect_target" = 1 ]; then
  echo "install.sh: --target needs a value (windows)" >&2; exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)

case "$target" in
  "") ;;
  windows)
    if [ "$build_only" = 0 ]; then
      echo "install.sh: --target windows builds the .exe only (as with --build-only): copy it to the Windows machine" >&2
    fi
    exec "$here/scripts/build-windows.sh"
    ;;
  *) echo "install.sh: unknown --target $target (known: windows)" >&2; exit 2 ;;
esac
prefix=${PREFIX:-$HOME/.local}
bindir="$prefix/bin"

if ! command -v cargo >/dev/null 2>&1; then
  for candidate in "$HOME/.cargo/bin/cargo" /usr/local/cargo/bin/cargo; do
    if [ -x "$candidate" ]; then PATH="$(dirname "$candidate"):$PATH"; break; fi
  done
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "install.sh: cargo is not installed or not on PATH." >&2
  echo "  Install the Rust toolchain (https://rustup.rs), then run ./install.sh again." >&2
  exit 1
fi

manifest="$here/Cargo.toml"
# Cargo.toml's [profile.dist]: release, stripped.
profile=dist
host=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')
built_static=0
case "$host" in
  *-linux-gnu)
    # crt-static only for the final link (`cargo rustc` passes the flag to
    # the binary alone): as a global RUSTFLAGS it would break proc-macros.
    echo "install.sh: building the shipped binary, statically linked (cargo rustc --profile $profile --locked --bin agent-reach -- -C target-feature=+crt-static)..." >&2
    if cargo rustc --profile "$profile" --locked --bin agent-reach --manifest-path "$manifest" \
        -- -C target-feature=+crt-static >&2; then
      built_static=1
    else
      echo "install.sh: the static link failed (no static libc?); building the dynamic binary instead" >&2
    fi
    ;;
esac
if [ "$built_static" = 0 ]; then
  echo "install.sh: building the shipped binary (cargo build --profile $profile --locked)..." >&2
  cargo build --profile "$profile" --locked --bin agent-reach --manifest-path "$manifest" >&2
fi
target_dir=$(cargo metadata --format-version 1 --no-deps --manifest-path "$manifest" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])' 2>/dev/null \
  || echo "$here/target")
built="$target_dir/$profile/agent-reach"
if ! "$built" --version >/dev/null; then
  echo "install.sh: the built binary $built does not start" >&2
  exit 1
fi
if [ "$build_only" = 1 ]; then
  echo "$built"
  exit 0
fi

mkdir -p "$bindir"
# Copy to a temporary name, then rename: a running agent-reach keeps working.
install -m 0755 "$built" "$bindir/.agent-reach.new"
mv -f "$bindir/.agent-reach.new" "$bindir/agent-reach"
echo "installed $bindir/agent-reach"

if [ "$with_aliases" = 1 ]; then
  for name in apply_patch applypatch agent-reach-sandbox agent-reach-exec swerex-remote; do
    ln -sfn agent-reach "$bindir/$name"
    echo "installed $bindir/$name -> agent-reach"
  done
fi

case ":$PATH:" in
  *":$bindir:"*) ;;
  *) echo "note: $bindir is not on your PATH; add it with:"
     echo "  export PATH=\"$bindir:\$PATH\"" ;;
esac
