#!/usr/bin/env bash
# Turn a root filesystem made by build-rootfs.sh into the yy computer image,
# without a registry and without `docker build`:
#   1. docker import ROOTFS            -> base image (one layer)
#   2. docker create + docker cp (tar) -> layer with user 1000 `yy`, its home and
#                                         /usr/local/bin/yy
#   3. docker commit --change ...      -> final image (USER, ENV, WORKDIR, CMD, labels)
# Last line of stdout: the full image ID (sha256:...).
#
# usage: build-image.sh ROOTFS_DIR --binary PATH [--tag NAME] [--version V]
#   --binary   the guest agent (the yy binary; glibc-dynamic is fine when built on
#              the same or an older Debian release than the rootfs)
#   --tag      repository:tag for the final image (default: none, ID only)
#   --version  value of the org.yy.version label (default: `yy --version` output)
# The recipe digest label is sha256(packages.txt + ROOTFS_DIR.lock).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "build-image: $*" >&2; exit 1; }
say() { echo "build-image: $*" >&2; }

rootfs="" binary="" tag="" version=""
while [ $# -gt 0 ]; do
    case "$1" in
        --binary) binary="${2:?}"; shift 2 ;;
        --tag) tag="${2:?}"; shift 2 ;;
        --version) version="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) [ -z "$rootfs" ] || die "only one ROOTFS_DIR"; rootfs="$1"; shift ;;
    esac
done
if [ -z "$rootfs" ] || [ ! -d "$rootfs" ]; then die "usage: build-image.sh ROOTFS_DIR --binary PATH"; fi
if [ -z "$binary" ] || [ ! -x "$binary" ]; then die "--binary must be an executable file"; fi
[ -r "$rootfs.lock" ] || die "$rootfs.lock missing (made by build-rootfs.sh)"
[ "$(id -u)" -eq 0 ] || die "must run as root (tar must keep root ownership)"
rootfs="$(cd "$rootfs" && pwd)"
if [ -z "$version" ]; then
    version="$("$binary" --version 2>/dev/null | head -n1 || true)"
    version="${version:-unknown}"
fi
recipe="sha256:$(cat "$here/../images/base/packages.txt" "$rootfs.lock" | sha256sum | cut -d' ' -f1)"

# 1. Base layer. The layer diff ID equals sha256 of this tar stream; the image ID
#    does not repeat across imports (it includes the creation time).
start=$SECONDS
base="$(tar -C "$rootfs" --numeric-owner -c . | docker import \
    --change "LABEL org.yy.recipe-digest=$recipe" - )"
say "imported base $base in $((SECONDS - start))s"

# 2. Layer contents, staged with numeric ownership.
stage="$(mktemp -d)"
cid=""
cleanup() {
    rm -rf "$stage"
    [ -z "$cid" ] || docker rm -f "$cid" >/dev/null 2>&1 || true
}
trap cleanup EXIT
mkdir -p "$stage/etc" "$stage/usr/local/bin" "$stage/home/yy"
for f in passwd group shadow gshadow; do cp -p "$rootfs/etc/$f" "$stage/etc/$f"; done
grep -q '^yy:' "$stage/etc/passwd" || {
    echo 'yy:x:1000:1000:yy computer user:/home/yy:/bin/bash' >>"$stage/etc/passwd"
    echo 'yy:x:1000:' >>"$stage/etc/group"
    echo 'yy:!::' >>"$stage/etc/gshadow"
    echo "yy:!:$(( $(date +%s) / 86400 )):0:99999:7:::" >>"$stage/etc/shadow"
}
cp -a "$rootfs/etc/skel/." "$stage/home/yy/"
chown -R 1000:1000 "$stage/home/yy"
chmod 0750 "$stage/home/yy"
install -m 0755 -o 0 -g 0 "$binary" "$stage/usr/local/bin/yy"

cid="$(docker create "$base" /bin/true)"
tar -C "$stage" --numeric-owner -c . | docker cp - "$cid:/"
image="$(docker commit \
    --change 'USER 1000:1000' \
    --change 'WORKDIR /home/yy' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV HOME=/home/yy' \
    --change 'CMD ["sleep", "infinity"]' \
    --change "LABEL org.yy.version=\"$version\" org.yy.recipe-digest=$recipe" \
    "$cid")"
[ -z "$tag" ] || docker tag "$image" "$tag"
say "image $image${tag:+ ($tag)} built in $((SECONDS - start))s"
echo "$image"
