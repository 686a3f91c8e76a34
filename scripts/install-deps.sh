#!/bin/sh
# Installs what kvstash needs to build and test, from Debian 12 packages only.
# Safe to run twice.  Run as root (or through sudo).
set -eu
pkgs="build-essential meson ninja-build pkg-config clang clang-format libclang-rt-14-dev
      libcmocka-dev liburing-dev libucx-dev ucx-utils liblz4-dev libxxhash-dev
      libssl-dev libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev
      etcd-server fio python3
      python3-pip iproute2"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
if [ -n "$missing" ]; then
	as_root=""
	if [ "$(id -u)" -ne 0 ]; then
		if ! command -v sudo >/dev/null 2>&1; then
			echo "kvstash: run as root to install:$missing" >&2
			exit 1
		fi
		as_root="sudo"
	fi
	echo "kvstash: installing:$missing"
	# env, not export: sudo may drop the environment.
	$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
	# shellcheck disable=SC2086
	$as_root env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends $missing
fi
# The Python package's tests: NumPy and pytest, through pip where the
# distribution's python3 lacks them (Debian 12 marks its python3 as
# externally managed: pip then needs --break-system-packages).
if ! python3 -c 'import numpy, pytest' >/dev/null 2>&1; then
	echo "kvstash: installing numpy and pytest (pip)"
	python3 -m pip install --quiet numpy pytest 2>/dev/null ||
		python3 -m pip install --quiet --break-system-packages \
			numpy pytest
fi
# meson-python, the wheel's build backend (pyproject.toml), for the test
# that installs the package as a user does; without its dependencies, so
# that PyPI's meson does not shadow the distribution's.
if ! python3 -c 'import mesonpy' >/dev/null 2>&1; then
	echo "kvstash: installing meson-python (pip, without PyPI's meson)"
	pkgs="meson-python pyproject-metadata packaging"
	python3 -m pip install --quiet --no-deps $pkgs 2>/dev/null ||
		python3 -m pip install --quiet --no-deps \
			--break-system-packages $pkgs
fi
echo "kvstash: build dependencies present"
