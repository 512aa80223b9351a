#!/usr/bin/env bash
# Shell reference for `yy image verify`: start a throw-away computer from IMAGE with
# the production hardening, check it from inside and through `docker inspect`,
# print a pass/fail table, remove the container, exit 1 on any failure.
#
# usage: verify-image.sh IMAGE [WORKSPACE_DIR]
#   WORKSPACE_DIR  host directory to mount at /workspace (default: a fresh temp dir;
#                  it is made 0700 and owned by 1000:1000)
set -euo pipefail

image="${1:?usage: verify-image.sh IMAGE [WORKSPACE_DIR]}"
ws="${2:-}"
own_ws=0
if [ -z "$ws" ]; then ws="$(mktemp -d /var/tmp/yy-verify-ws.XXXXXX)"; own_ws=1; fi
mkdir -p "$ws"; chown 1000:1000 "$ws"; chmod 0700 "$ws"
name="yy-verify-$$"
# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
    docker rm -f "$name" >/dev/null 2>&1 || true
    [ "$own_ws" -eq 0 ] || rm -rf "$ws"
}
trap cleanup EXIT

docker run -d --name "$name" \
    --network none --read-only \
    --tmpfs /tmp:rw,exec,nosuid,nodev,size=512m \
    --tmpfs /home/yy:rw,nosuid,nodev,size=256m,uid=1000,gid=1000,mode=0700 \
    --cap-drop ALL --security-opt no-new-privileges \
    --user 1000:1000 --memory 1g --memory-swap 1g --cpus 1 --pids-limit 256 \
    --init -v "$ws:/workspace" -w /workspace \
    --label org.yy.computer=verify \
    "$image" sleep infinity >/dev/null

fail=0
check() { # name, expected, actual
    local ok=PASS
    [ "$2" = "$3" ] || { ok=FAIL; fail=1; }
    printf '%-4s  %-22s  want %-26s got %s\n' "$ok" "$1" "$2" "$3"
}
inside() { docker exec "$name" sh -c "$1" 2>/dev/null || true; }
insp() { docker inspect -f "$1" "$name"; }

check "guest agent"     present  "$(inside 'test -x /usr/local/bin/yy && /usr/local/bin/yy --version >/dev/null && echo present || echo missing')"
# shellcheck disable=SC2016  # expanded inside the container
check "uid:gid"         1000:1000 "$(inside 'echo $(id -u):$(id -g)')"
check "interfaces"      lo       "$(inside 'ls /sys/class/net | tr "\n" " " | sed "s/ $//"')"
check "root read-only"  ro       "$(inside 'touch /.yy-probe 2>/dev/null && echo rw || echo ro')"
check "workspace rw"    rw       "$(inside 'touch /workspace/.yy-probe && rm /workspace/.yy-probe && echo rw || echo ro')"
check "connect out"     refused  "$(inside 'python3 -c "import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=3)" >/dev/null 2>&1 && echo connected || echo refused')"
check "capabilities"    0000000000000000 "$(inside 'sed -n "s/^CapEff:\t//p" /proc/self/status')"
check "no_new_privs"    1        "$(inside 'sed -n "s/^NoNewPrivs:\t//p" /proc/self/status')"
check "NetworkMode"     none     "$(insp '{{.HostConfig.NetworkMode}}')"
check "CapDrop"         "[ALL]"  "$(insp '{{.HostConfig.CapDrop}}')"
check "SecurityOpt"     "[no-new-privileges]" "$(insp '{{.HostConfig.SecurityOpt}}')"
check "ReadonlyRootfs"  true     "$(insp '{{.HostConfig.ReadonlyRootfs}}')"
check "Memory"          1073741824 "$(insp '{{.HostConfig.Memory}}')"
check "NanoCpus"        1000000000 "$(insp '{{.HostConfig.NanoCpus}}')"
check "PidsLimit"       256      "$(insp '{{.HostConfig.PidsLimit}}')"
check "mounts"          "bind:$ws:/workspace:true" "$(insp '{{range .Mounts}}{{.Type}}:{{.Source}}:{{.Destination}}:{{.RW}} {{end}}' | sed 's/ $//')"
check "Config.User"     1000:1000 "$(insp '{{.Config.User}}')"
exit "$fail"
