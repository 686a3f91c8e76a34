#!/bin/sh
# Installs what kvstash needs to build and test, from Debian 12 packages only.
# Safe to run twice.  Run as root (or through sudo).
set -eu
pkgs="build-essential meson ninja-build pkg-config clang libclang-rt-14-dev
      libcmocka-dev liburing-dev libucx-dev ucx-utils liblz4-dev libxxhash-dev
      libssl-dev fio python3 iproute2"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	# shellcheck disable=SC2086
	apt-get install -y -q --no-install-recommends $missing
fi
echo "kvstash: build dependencies present"
