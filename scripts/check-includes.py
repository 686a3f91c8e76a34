#!/usr/bin/env python3
"""check-includes.py - the direction of the tree's dependencies, enforced.

Every folder of docs/ARCHITECTURE.md may include the public headers
(include/kvstash/) and the interface headers of the folders below it, and
its own headers; never another folder's private headers, never a folder
above it.  A test of the build runs this (suite unit): a change that breaks
the direction fails there, with one line per offending include.

Usage: check-includes.py [SOURCE_ROOT]
"""
import os
import re
import sys

# Each folder: the folders it may depend on (directly or not).
DEPENDS = {
    "common": [],
    "kvformat": ["common"],
    "stream": ["kvformat", "common"],
    "store": ["kvformat", "common"],
    "kernels": ["stream", "kvformat", "common"],
    "transport": ["kvformat", "common"],
    "cluster": ["common"],
    "client": ["transport", "cluster", "store", "kvformat", "common"],
    "runtime": ["client", "kernels", "store", "stream", "kvformat", "common"],
    "tools/cli": ["client", "kernels", "store", "kvformat", "common"],
    "server": ["tools/cli", "transport", "cluster", "store", "kvformat",
               "common"],
    "bench/src": ["tools/cli", "runtime", "client", "cluster", "store",
                  "stream", "kvformat", "common"],
    "demo": ["tools/cli", "runtime", "client", "store", "stream",
             "kvformat", "common"],
    "tools": ["bench/src", "demo", "tools/cli", "runtime", "client",
              "cluster", "store", "kernels", "stream", "kvformat", "common"],
}

# The headers a folder offers the folders above it; the rest are private.
INTERFACE = {
    "common": {"bytes.h", "clock.h", "rng.h"},
    "transport": {"proto.h", "ucx.h", "keyfile.h"},
    "tools/cli": {"cli_util.h", "cli_kvs.h"},
    "bench/src": {"bench_cmd.h"},
    "demo": {"demo_cmd.h"},
    "kernels": {"kernels_test.h"},  # the kernels' test hooks (tests/gpu)
}

# Which folder owns each public header.
PUBLIC = {
    "error.h": "common", "log.h": "common", "version.h": "common",
    "kvformat.h": "kvformat",
    "stream.h": "stream", "store.h": "store", "kernels.h": "kernels",
    "tenant.h": "transport", "server.h": "server", "cluster.h": "cluster",
    "client.h": "client", "runtime.h": "runtime",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCES = (".c", ".h", ".cu", ".cuh")


def folder_of(path):
    """The folder of DEPENDS a source file belongs to (the deepest)."""
    best = None
    for f in DEPENDS:
        if path.startswith(f + "/") and (best is None or len(f) > len(best)):
            best = f
    return best


def check_file(root, path, folder, errors):
    allowed = set(DEPENDS[folder]) | {folder}
    here = os.path.dirname(path)
    with open(os.path.join(root, path), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            inc = m.group(1)
            where = "%s:%d: \"%s\"" % (path, n, inc)
            if inc == "kvs_config.h":
                continue
            if inc.startswith("kvstash/"):
                owner = PUBLIC.get(inc[len("kvstash/"):])
                if owner is None:
                    errors.append("%s: not a public header" % where)
                elif owner not in allowed:
                    errors.append("%s: %s may not depend on %s" %
                                  (where, folder, owner))
                continue
            # relative to the including file first, as the compiler does
            target = os.path.normpath(os.path.join(here, inc))
            if not os.path.exists(os.path.join(root, target)):
                target = os.path.normpath(inc)  # from the root
            if not os.path.exists(os.path.join(root, target)):
                # an interface header on a dependency's include path
                owners = [f for f, hs in INTERFACE.items() if inc in hs]
                if not owners:
                    errors.append("%s: no such header" % where)
                elif owners[0] not in allowed:
                    errors.append("%s: %s may not depend on %s" %
                                  (where, folder, owners[0]))
                continue
            owner = folder_of(target)
            if owner is None or owner == folder:
                continue
            if owner not in allowed:
                errors.append("%s: %s may not depend on %s" %
                              (where, folder, owner))
            elif os.path.basename(target) not in INTERFACE.get(owner, ()):
                errors.append("%s: a private header of %s" % (where, owner))


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    errors = []
    checked = 0
    for top in sorted({f.split("/")[0] for f in DEPENDS}):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                folder = folder_of(path)
                if folder is None:
                    continue
                check_file(root, path, folder, errors)
                checked += 1
    for e in errors:
        print(e)
    print("%d files, %d includes against the dependency direction" %
          (checked, len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
