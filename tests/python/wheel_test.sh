#!/bin/sh
# wheel_test.sh - `pip install .` as a user runs it: builds libkvstash with
# meson (meson-python) into a wheel, installs it into a fresh virtual
# environment, and from outside the tree (no KVSTASH_LIB, no build
# directory) imports kvstash, checks that the package, the library and the
# wire are one release, and seals, verifies and dequantizes a block
# through the library the wheel carries.  Usage: wheel_test.sh SRC SCRATCH
set -eu
src=$1
scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch"
python3 -m venv --system-site-packages "$scratch/venv"
py="$scratch/venv/bin/python"
if ! "$py" -c 'import mesonpy' 2>/dev/null; then
	echo "SKIP: meson-python not installed (scripts/install-deps.sh installs it)"
	exit 77
fi
# the build's own dependencies come from the machine (no isolation); CUDA
# left out to keep the test short
"$py" -m pip install --quiet --no-build-isolation \
	--config-settings=setup-args=-Dcuda=disabled \
	--config-settings=builddir="$scratch/build" "$src" \
	>"$scratch/pip.log" 2>&1 || { tail -30 "$scratch/pip.log"; exit 1; }
cd "$scratch"
env -u KVSTASH_LIB -u PYTHONPATH "$py" - "$src" <<'PY'
import os, sys
import numpy as np
import kvstash
from kvstash import _lib

site = os.path.dirname(os.path.abspath(kvstash.__file__))
assert not site.startswith(os.path.join(os.path.abspath(sys.argv[1]), "python")), site
assert "site-packages" in site, site
assert os.path.dirname(kvstash.lib_path) == site, kvstash.lib_path
version = open(os.path.join(sys.argv[1], "meson.build")).read().split("version: '")[1].split("'")[0]
assert kvstash.__version__ == version, (kvstash.__version__, version)
assert _lib.lib.kvs_version().decode() == version
assert _lib.lib.kvs_wire_version() == kvstash.WIRE_VERSION == 1

rt = kvstash.Runtime(1, 2, 2, 64, kv_dtype="f32", order="kivi", device="cpu",
                     group=32, bits=2, residual=64, max_tokens=512, pool_pages=8)
seq = rt.batch(1).sequence()
seq.append_ids(list(range(130)))
rng = np.random.default_rng(7)
k = rng.standard_normal((2, 130, 64), dtype=np.float32)
v = rng.standard_normal((2, 130, 64), dtype=np.float32)
seq.prefill(0, k, v)
data = seq.block(0, 0)
kvstash.verify(data)
hk, hv = seq.history(0, 0, 1, dtype="f32")
bk, bv = kvstash.Block(data).dequantize()
np.testing.assert_array_equal(bk, hk[0])
np.testing.assert_array_equal(bv, hv[0])
assert bk.shape == (2, 64, 64) and np.abs(bk - k[:, :64]).max() < 2.0
rt.close()
print("wheel: kvstash %s from %s, wire %d" % (kvstash.__version__, kvstash.lib_path,
                                            kvstash.WIRE_VERSION))
PY
