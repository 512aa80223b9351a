#!/usr/bin/env bash
# Install (if missing) and start (if not answering) the Docker engine that yy
# computers run on, plus debootstrap for registry-free base images and e2fsprogs for
# workspace limits.
#
# Idempotent; safe to run when dockerd is already running. Needs root on Debian.
# Last line of stdout: the server's Docker API version (e.g. "1.41").
#
# Environment:
#   YY_DOCKERD_ARGS   extra dockerd flags (default: none; e.g. "--storage-driver=vfs
#                     --iptables=false" on hosts without overlayfs / netfilter)
#   YY_DOCKERD_LOG    dockerd log file (default /var/log/yy-dockerd.log)
#   YY_DOCKER_WAIT    seconds to wait for the engine to answer (default 30)
set -euo pipefail

LOG="${YY_DOCKERD_LOG:-/var/log/yy-dockerd.log}"
WAIT="${YY_DOCKER_WAIT:-30}"
DOCKERD_ARGS="${YY_DOCKERD_ARGS:-}"
PIDFILE=/var/run/docker.pid

say() { echo "install-docker: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    say "must run as root"
    exit 1
fi

# 1. Packages. docker.io pulls containerd, runc, tini and iptables as hard
#    dependencies; recommends (apparmor, git, needrestart, ...) are not needed.
missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# Workspace limits (yy runner run --workspace-limit) make an ext4 image per workspace.
command -v mkfs.ext4 >/dev/null 2>&1 || missing+=(e2fsprogs)
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Package lists may be absent on a fresh image; refresh once if install fails.
    if ! apt-get install -y --no-install-recommends "${missing[@]}" >&2; then
        apt-get update >&2
        apt-get install -y --no-install-recommends "${missing[@]}" >&2
    fi
fi

# The Debian client is /usr/bin/docker; a different CLI earlier in PATH (e.g. a
# static /usr/local/bin/docker) also works since the client negotiates the API.
DOCKER="$(command -v docker || echo /usr/bin/docker)"

api_version() {
    "$DOCKER" version --format '{{.Server.APIVersion}}' 2>/dev/null
}

dockerd_running() {
    [ -s "$PIDFILE" ] || return 1
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    # "PID (dockerd) S ..." -- a killed dockerd can linger as a zombie (Z) when
    # PID 1 does not reap, so check the state as well as the name.
    local stat
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    case "$stat" in
        *"(dockerd) Z"* | *"(dockerd) X"*) return 1 ;;
        *"(dockerd) "*) return 0 ;;
        *) return 1 ;;
    esac
}

# 2. Start the engine unless it already answers (or is already starting).
if api_version >/dev/null; then
    say "dockerd already answering"
elif dockerd_running; then
    say "dockerd (pid $(cat "$PIDFILE")) is starting; waiting"
else
    if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && [ -d /run/systemd/system ]; then
        say "starting docker.service via systemd"
        systemctl start docker.service >&2
    else
        # No systemd as init (containers, VMs with a custom init): run dockerd
        # ourselves, detached from this shell's session.
        if [ -e "$PIDFILE" ]; then
            say "removing stale $PIDFILE"
            rm -f "$PIDFILE"
        fi
        say "starting dockerd in the background (log: $LOG)"
        # shellcheck disable=SC2086  # DOCKERD_ARGS is intentionally word-split
        setsid nohup dockerd $DOCKERD_ARGS >>"$LOG" 2>&1 </dev/null &
    fi
fi

# 3. Wait for the API.
deadline=$((SECONDS + WAIT))
until v="$(api_version)"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
        say "dockerd did not answer within ${WAIT}s; last log lines:"
        tail -n 20 "$LOG" >&2 2>/dev/null || true
        exit 1
    fi
    sleep 0.5
done
say "engine $("$DOCKER" version --format '{{.Server.Version}}'), storage $("$DOCKER" info --format '{{.Driver}}'), cgroup v$("$DOCKER" info --format '{{.CgroupVersion}}')"
echo "$v"
