#!/usr/bin/env bash
# Installs Debian's Chromium for the web-view test of `yy computer attach --web` (headless,
# driven over the DevTools protocol, talking only to 127.0.0.1). Safe to run again: does
# nothing when a chromium is on PATH. Prints the executable's path on its last line.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
command -v chromium
