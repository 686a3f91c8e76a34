#!/bin/sh
# libkvstash as a user gets it: `meson install` into a scratch destdir,
# then a program built against the installed headers with nothing but
# `pkg-config kvstash`, run against the installed shared library.
#   install_test.sh BUILD_DIR SCRATCH
set -eu
build=$1
dest=$(mktemp -d "$2/install-XXXXXX")
trap 'rm -rf "$dest"' EXIT
meson install -C "$build" --destdir "$dest" --no-rebuild >"$dest/install.log" 2>&1 ||
	{ cat "$dest/install.log"; exit 1; }
pc=$(find "$dest" -name kvstash.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: no kvstash.pc installed"; exit 1; }
for h in client.h store.h kvformat.h error.h; do
	[ -n "$(find "$dest" -path "*/include/kvstash/$h")" ] ||
		{ echo "FAIL: kvstash/$h not installed"; exit 1; }
done
export PKG_CONFIG_PATH="$(dirname "$pc")"
export PKG_CONFIG_SYSROOT_DIR="$dest"
cat >"$dest/use.c" <<'EOC'
#include <stdio.h>
#include <string.h>
#include <kvstash/client.h>

int main(int argc, char **argv)
{
	struct kvs_client_opts o;
	struct kvs_client *c;
	int err;

	kvs_client_opts_default(&o);
	o.address = "127.0.0.1:1";
	o.key_file = argv[1];
	o.connect_timeout_ms = 2000;
	err = kvs_client_connect(&o, &c);
	printf("connect: %s\n", kvs_strerror(err));
	return err == 0 || strcmp(kvs_strerror(err), "success") == 0;
}
EOC
echo "00112233445566778899aabbccddeeff" >"$dest/key"
# shellcheck disable=SC2046
cc -o "$dest/use" "$dest/use.c" $(pkg-config --cflags --libs kvstash)
libdir=$(dirname "$(find "$dest" -name 'libkvstash.so*' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$dest/use" "$dest/key"
echo "install: headers, kvstash.pc and libkvstash work from $dest"
