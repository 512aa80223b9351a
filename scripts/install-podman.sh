#!/usr/bin/env bash
# Install (if missing) and start (if not answering) Podman's Docker-compatible API, the
# second engine yy computers can run on (`yy runner run --engine podman`).
#
# Idempotent; safe to run when the service already answers. Needs root on Debian: the
# service is rootful (`podman system service` as root), like dockerd.
# Last line of stdout: the service's Docker API version (e.g. "1.41").
#
# Environment:
#   YY_PODMAN_SOCKET  the API socket (default /run/podman/podman.sock)
#   YY_PODMAN_LOG     the service's log file (default /var/log/yy-podman.log)
#   YY_PODMAN_WAIT    seconds to wait for the service to answer (default 30)
set -euo pipefail

SOCKET="${YY_PODMAN_SOCKET:-/run/podman/podman.sock}"
LOG="${YY_PODMAN_LOG:-/var/log/yy-podman.log}"
WAIT="${YY_PODMAN_WAIT:-30}"

say() { echo "install-podman: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    say "must run as root"
    exit 1
fi

# 1. Packages: Debian's podman (4.3 on bookworm) with its hard dependencies (conmon, crun,
#    CNI plugins) and catatonit for HostConfig.Init; other recommends are not needed.
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
# HostConfig.Init runs Podman's default init, catatonit (only a recommend of podman).
[ -x /usr/libexec/podman/catatonit ] || missing+=(catatonit)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Package lists may be absent on a fresh image; refresh once if install fails.
    if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        apt-get update >&2
        apt-get install -y --no-install-recommends "${missing[@]}" >&2
    fi
fi

# The compat API's version document; empty when the socket does not answer.
api_version() {
    curl -fsS --max-time 5 --unix-socket "$SOCKET" http://d/v1.41/version 2>/dev/null |
        sed -n 's/.*"ApiVersion":"\([^"]*\)".*/\1/p'
}

service_running() {
    local pid
    for pid in $(pgrep -x podman 2>/dev/null || true); do
        # A killed service can linger as a zombie when PID 1 does not reap.
        case "$(cat "/proc/$pid/stat" 2>/dev/null)" in
            *"(podman) Z"* | *"(podman) X"* | "") continue ;;
        esac
        if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
            grep -q "system service .*unix://$SOCKET"; then
            return 0
        fi
    done
    return 1
}

# 2. Start the service unless it already answers (or is already starting).
if [ -n "$(api_version)" ]; then
    say "podman service already answering on $SOCKET"
elif service_running; then
    say "podman service is starting; waiting"
else
    mkdir -p "$(dirname "$SOCKET")"
    rm -f "$SOCKET"
    say "starting podman system service in the background (log: $LOG)"
    # --time=0: never exit for idleness. Detached from this shell's session (no systemd).
    setsid nohup podman system service --time=0 "unix://$SOCKET" >>"$LOG" 2>&1 </dev/null &
fi

# 3. Wait for the API.
deadline=$((SECONDS + WAIT))
until v="$(api_version)" && [ -n "$v" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        say "the podman service did not answer on $SOCKET within ${WAIT}s; last log lines:"
        tail -n 20 "$LOG" >&2 2>/dev/null || true
        exit 1
    fi
    sleep 0.3
done
say "podman $(podman version --format '{{.Server.Version}}' 2>/dev/null || podman --version), storage $(podman info --format '{{.Store.GraphDriverName}}'), cgroup $(podman info --format '{{.Host.CgroupsVersion}}'), socket $SOCKET"
echo "$v"
