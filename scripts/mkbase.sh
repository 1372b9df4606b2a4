#!/usr/bin/env bash
# Writes a Debian rootfs tarball with the packages of the given lists (sandbox/packages/*.txt),
# made with mmdebstrap: the local base image the DistRS Dockerfiles build on without a registry.
#   scripts/mkbase.sh OUT.tar sandbox/packages/base.txt sandbox/packages/worker.txt
# DEBIAN_SUITE (bookworm) and DEBIAN_MIRROR (http://deb.debian.org) choose the archive.
# The 'essential' variant plus the lists: no apt in the image (nothing installs at build time).
set -euo pipefail
out=$1; shift
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org}
pkgs=$(cat "$@" | sed 's/#.*//' | tr -s ' \t' '\n' | sed '/^$/d' | sort -u | paste -sd, -)
# stdin from /dev/null: mmdebstrap reads sources from a non-terminal stdin otherwise.
mmdebstrap --variant=essential --include="$pkgs" --format=tar \
  --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/* "$1"/var/log/*.log' \
  "$suite" "$out.part" \
  "deb $mirror/debian $suite main" \
  "deb $mirror/debian $suite-updates main" \
  "deb $mirror/debian-security $suite-security main" </dev/null
mv "$out.part" "$out"
