#!/usr/bin/env bash
# Build the yy computer base root filesystem from Debian packages (no container
# registry needed) and record the installed package set.
#
# usage: build-rootfs.sh DIR [--mirror URL] [--suite SUITE] [--packages FILE]
#                            [--security]
#
#   DIR         target directory; must not exist or be empty
#   --mirror    Debian mirror (default: http://deb.debian.org/debian)
#   --suite     Debian suite (default: VERSION_CODENAME of the host, else bookworm)
#   --packages  package list (default: images/base/packages.txt next to this script)
#   --no-slim   keep man pages, info, translations and docs (default: drop them,
#               keeping every /usr/share/doc/*/copyright, like Debian's slim images)
#   --security  after debootstrap, also apply SUITE-updates and SUITE-security
#               (from --security-mirror, default http://deb.debian.org/debian-security)
#
# Writes DIR.lock: every installed package as `name=version`, sorted, one per line
# (the format of images/base/packages.lock). Needs root and debootstrap.
# Then import with:  tar -C DIR --numeric-owner -c . | docker import - NAME
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mirror="http://deb.debian.org/debian"
security_mirror="http://deb.debian.org/debian-security"
suite=""
packages="$here/../images/base/packages.txt"
security=0
slim=1
dir=""

die() { echo "build-rootfs: $*" >&2; exit 1; }
say() { echo "build-rootfs: $*" >&2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --mirror) mirror="${2:?--mirror needs a URL}"; shift 2 ;;
        --suite) suite="${2:?--suite needs a name}"; shift 2 ;;
        --packages) packages="${2:?--packages needs a file}"; shift 2 ;;
        --security) security=1; shift ;;
        --no-slim) slim=0; shift ;;
        --security-mirror) security_mirror="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) [ -z "$dir" ] || die "only one DIR"; dir="$1"; shift ;;
    esac
done
[ -n "$dir" ] || die "usage: build-rootfs.sh DIR [--mirror URL] [--suite SUITE]"
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, chroot, file ownership)"
command -v debootstrap >/dev/null || die "debootstrap missing (run scripts/install-docker.sh)"
[ -r "$packages" ] || die "package list $packages not readable"
if [ -z "$suite" ]; then
    # shellcheck disable=SC1091
    suite="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
    suite="${suite:-bookworm}"
fi
if [ -e "$dir" ] && [ -n "$(ls -A "$dir" 2>/dev/null)" ]; then
    die "$dir exists and is not empty"
fi
dir="$(mkdir -p "$dir" && cd "$dir" && pwd)"

include="$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$packages" | grep -v '^$' | paste -sd, -)"
keyring_args=()
[ -r /usr/share/keyrings/debian-archive-keyring.gpg ] &&
    keyring_args=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)

say "debootstrap $suite from $mirror (minbase + $include)"
start=$SECONDS
debootstrap --variant=minbase --components=main "${keyring_args[@]}" \
    --include="$include" "$suite" "$dir" "$mirror" >&2
say "debootstrap took $((SECONDS - start))s"

if [ "$security" -eq 1 ]; then
    say "applying $suite-updates and $suite-security"
    cat >"$dir/etc/apt/sources.list" <<SRC
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security_mirror $suite-security main
SRC
    cp /etc/resolv.conf "$dir/etc/resolv.conf"
    chroot "$dir" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        DEBIAN_FRONTEND=noninteractive sh -c 'apt-get update -q && apt-get -y -q -o Dpkg::Use-Pty=0 upgrade' >&2
    : >"$dir/etc/resolv.conf"
fi

# Slim down: package caches and lists (the image never runs apt offline anyway),
# logs, and files that identify the build host.
rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/cache/apt/archives/partial/* \
       "$dir"/var/cache/apt/*.bin "$dir"/var/lib/apt/lists/* "$dir"/var/cache/debconf/*-old \
       "$dir"/var/log/apt/* "$dir"/var/log/dpkg.log "$dir"/var/log/bootstrap.log \
       "$dir"/var/log/alternatives.log "$dir"/tmp/* "$dir"/var/tmp/*
: >"$dir/etc/hostname"
: >"$dir/etc/resolv.conf"
rm -f "$dir/etc/machine-id" "$dir/var/lib/dbus/machine-id"
mkdir -p "$dir/var/lib/apt/lists/partial"
if [ "$slim" -eq 1 ]; then
    find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
    rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
           "$dir"/usr/share/lintian/* "$dir"/usr/share/linda/*
    # Keep later dpkg installs (e.g. a derived image) equally slim.
    cat >"$dir/etc/dpkg/dpkg.cfg.d/yy-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CFG
fi

# Lock file: installed packages only, name=version, sorted (C locale).
dpkg-query --admindir="$dir/var/lib/dpkg" -W \
    -f='${db:Status-Abbrev}${Package}=${Version}\n' |
    sed -n 's/^ii *//p' | LC_ALL=C sort >"$dir.lock"

say "$(wc -l <"$dir.lock") packages, $(du -sh "$dir" | cut -f1) in $dir; lock: $dir.lock"
