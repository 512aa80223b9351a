#!/usr/bin/env bash
# Runs every check and test of the project: formatting, clippy, unit and integration tests
# (real `yy` binary, real servers on loopback, real SQLite files). Installs what the tests
# need first; safe to run again. Under CI (CI set), a missing dependency is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo is not installed; install the Rust toolchain (rustup) first" >&2
    exit 1
fi
start=$(date +%s)
# A clean clone builds once: incremental state would only cost GiBs of disk and some time.
[ -z "${CI:-}" ] || export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Computers' workspaces and images need room; say how much there is, as a failure's first clue.
free_disk() {
    echo "free disk: $(df -h --output=avail . | tail -n 1 | tr -d ' ') for the build, $(df -h --output=avail /var/lib 2>/dev/null | tail -n 1 | tr -d ' ') under /var/lib"
}
free_disk
# Each phase says when it starts, so a slow CI run shows where its time went.
phase() {
    echo "== $1 (at $(( $(date +%s) - start )) s)"
}
# What the integration tests drive for real: Docker and Podman engines, a pinned Hermes,
# PostgreSQL's server programs.
phase "dependencies"
docker_api=$(scripts/install-docker.sh | tail -n 1)
echo "docker engine API $docker_api"
# Computers on Podman too (tests/podman.rs): its Docker-compatible API service, rootful.
podman_api=$(scripts/install-podman.sh | tail -n 1)
YY_TEST_PODMAN_SOCKET=${YY_PODMAN_SOCKET:-/run/podman/podman.sock}
export YY_TEST_PODMAN_SOCKET
echo "podman API $podman_api on $YY_TEST_PODMAN_SOCKET"
YY_TEST_HERMES=$(scripts/install-hermes.sh | tail -n 1)
export YY_TEST_HERMES
echo "hermes at $YY_TEST_HERMES"
# The PostgreSQL backend's tests make throw-away clusters with these programs (initdb, pg_ctl).
YY_TEST_POSTGRES_BIN=$(scripts/install-postgres.sh | tail -n 1)
export YY_TEST_POSTGRES_BIN
echo "postgresql programs in $YY_TEST_POSTGRES_BIN"
# The web view of `yy computer attach --web` is tested in headless Chromium.
YY_TEST_CHROMIUM=$(scripts/install-chromium.sh | tail -n 1)
export YY_TEST_CHROMIUM
echo "chromium at $YY_TEST_CHROMIUM"
# The systemd units of `yy service` are checked with systemd-analyze verify (tests/service.rs).
if ! command -v systemd-analyze >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
echo "systemd-analyze $(systemd-analyze --version | head -n 1)"
# Each of the ~40 test binaries links all of yy: mold (Debian's package) links them in a
# fraction of ld's time. Best effort: without it the default linker does the same job.
if [ -z "${RUSTFLAGS:-}" ]; then
    if ! command -v mold >/dev/null 2>&1; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo="sudo"
        export DEBIAN_FRONTEND=noninteractive
        $sudo apt-get install -y -qq --no-install-recommends mold >/dev/null 2>&1 \
            || { $sudo apt-get update -qq && $sudo apt-get install -y -qq --no-install-recommends mold >/dev/null; } \
            || echo "mold could not be installed; linking with the default linker"
    fi
    if command -v mold >/dev/null 2>&1; then
        export RUSTFLAGS="-C link-arg=-fuse-ld=mold"
        echo "linker: $(mold --version)"
    fi
fi
phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy"
cargo clippy --locked --all-targets --quiet -- -D warnings
phase "cargo test: build"
# The test binaries, as cargo lists them (one JSON line per artifact; those built as tests).
cargo test --locked --no-run --quiet --message-format=json >target/test-artifacts.json
free_disk
phase "cargo test: run"
status=0
scripts/run-tests.sh target/test-artifacts.json || status=$?
echo "== done in $(( $(date +%s) - start )) s"
exit "$status"
