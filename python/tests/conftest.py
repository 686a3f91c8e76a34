"""What the tests share: a real kvstashd on 127.0.0.1 with a port it picks
itself (port 0, told back through its ready file) and a store directory
under pytest's tmp_path, started from KVSTASHD (the meson test sets it to
the build's daemon); tests that need it skip where it is not set."""

import os
import signal
import subprocess
import time

import pytest

TENANTS = {
    "alice": "000102030405060708090a0b0c0d0e0f",
    "bob": "101112131415161718191a1b1c1d1e1f",
    "carol": "202122232425262728292a2b2c2d2e2f",
}


class Daemon:
    def __init__(self, tmp, dram="64M", extra=()):
        exe = os.environ.get("KVSTASHD")
        if not exe:
            pytest.skip("KVSTASHD is not set (the meson test sets it to the build's kvstashd)")
        import kvstash

        if not kvstash._lib.client_available:
            pytest.skip("libkvstash was built without the client (UCX)")
        self.dir = tmp
        keys = tmp / "keys"
        keys.write_text("".join("%s %s\n" % kv for kv in TENANTS.items()))
        for name, key in TENANTS.items():
            (tmp / ("key-" + name)).write_text("%s %s\n" % (name, key))
        ready = tmp / "ready"
        self.log = tmp / "kvstashd.log"
        self.proc = subprocess.Popen(
            [exe, "--listen", "127.0.0.1:0", "--dir", str(tmp / "store"), "--auth-key-file",
             str(keys), "--namespace", "alice=a,bob=b,carol=a", "--dram-capacity", dram,
             "--nvme-capacity", "256M", "--segment-size", "1M", "--ready-file", str(ready),
             "--log-file", str(self.log), *extra])
        deadline = time.monotonic() + 15
        while not ready.exists() or not ready.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError("kvstashd exited at start: %s" % self.log.read_text())
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kvstashd not ready after 15 s")
            time.sleep(0.01)
        self.port = int(ready.read_text().split()[0])
        self.address = "127.0.0.1:%d" % self.port

    def key(self, tenant):
        return str(self.dir / ("key-" + tenant))

    def client(self, tenant="alice", **kw):
        import kvstash

        return kvstash.Client(self.address, self.key(tenant), **kw)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -1
        return self.proc.returncode


@pytest.fixture
def daemon(tmp_path):
    d = Daemon(tmp_path)
    yield d
    assert d.stop() == 0
