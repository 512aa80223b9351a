#!/usr/bin/env bash
# Builds yy (release) and runs the control plane with its embedded SQLite database.
# Arguments are passed to `yy serve`, e.g. --listen 0.0.0.0:8420 --data-dir /var/lib/yy.
# Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not installed; install the Rust toolchain (rustup) first" >&2
    exit 1
fi
cargo build --release --locked --quiet
exec target/release/yy serve "$@"
