#!/usr/bin/env python3
"""The command line's cluster forms against a real etcd and three kvstashd.

cli_cluster_test.py KVSTASH KVSTASHD SCRATCH

kvstashd --etcd URL --cluster NAME --node-id ID [--advertise HOST:PORT]
(one node from a --config file) registers; `kvstash --etcd URL --cluster
NAME --auth-key-file FILE put --replicas 2 | get --out | exists | delete |
stat --json` have the output and exit codes of the one-server forms, with
a "nodes" array in stat; the same through a fixed --server list; usage
errors exit 2, an unreachable etcd 1; a node whose etcd does not answer
serves all the same; a node id held by a live node elsewhere is refused;
SIGTERM takes a node out of the members at once.  Exits 77 without etcd.
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

# The remote forms' test gives the driver (run, check, blocks, the key).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "server"))
import cli_remote_test  # noqa: E402
from cli_remote_test import ALICE, KVSTASH, KVSTASHD, run  # noqa: E402
from cli_test import Failure, check  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def etcd_binary():
    for path in (os.environ.get("KVS_ETCD"), "/usr/bin/etcd",
                 shutil.which("etcd")):
        if path and os.access(path, os.X_OK):
            return path
    return None


def start_etcd(tmp):
    cport, pport = free_port(), free_port()
    client = "http://127.0.0.1:%d" % cport
    peer = "http://127.0.0.1:%d" % pport
    data = tempfile.mkdtemp(prefix="etcd-", dir="/dev/shm"
                            if os.access("/dev/shm", os.W_OK) else tmp)
    log = open(os.path.join(tmp, "etcd.log"), "w")
    p = subprocess.Popen([etcd_binary(), "--name", "e", "--data-dir", data,
                          "--listen-client-urls", client,
                          "--advertise-client-urls", client,
                          "--listen-peer-urls", peer,
                          "--initial-advertise-peer-urls", peer,
                          "--initial-cluster", "e=" + peer,
                          "--log-level", "warn"],
                         stdout=log, stderr=log)
    deadline = time.time() + 20
    while True:
        check(p.poll() is None, "etcd exited at start")
        try:
            with urllib.request.urlopen(client + "/health", timeout=1) as r:
                if r.status == 200:
                    return p, client, data
        except OSError:
            pass
        check(time.time() < deadline, "etcd not healthy")
        time.sleep(0.05)


def start_node(tmp, name, args, config=None):
    keys = os.path.join(tmp, "keys")
    ready = os.path.join(tmp, "ready-" + name)
    log = open(os.path.join(tmp, name + ".log"), "a")
    cmd = [KVSTASHD, "--dir", os.path.join(tmp, "store-" + name),
           "--auth-key-file", keys, "--dram-capacity", "16M",
           "--nvme-capacity", "64M", "--segment-size", "4M",
           "--ready-file", ready]
    if config:
        cmd += ["--config", config]
    elif "--listen" not in args:
        cmd += ["--listen", "127.0.0.1:0"]
    p = subprocess.Popen(cmd + args, stdout=log, stderr=log)
    deadline = time.time() + 15
    while not os.path.exists(ready):
        check(p.poll() is None, "kvstashd %s exited at start" % name)
        check(time.time() < deadline, "kvstashd %s not ready" % name)
        time.sleep(0.02)
    with open(ready) as f:
        return p, "127.0.0.1:%d" % int(f.read().split()[0])


def members(remote, n, timeout=10):
    """stat --json once the nodes array has @n members."""
    deadline = time.time() + timeout
    while True:
        _, out, _ = run(*remote, "stat", "--json", expect=0)
        st = json.loads(out)
        if len(st["nodes"]) == n:
            return st
        check(time.time() < deadline, "members: %d, not %d"
              % (len(st["nodes"]), n))
        time.sleep(0.1)


def main():
    if etcd_binary() is None:
        print("etcd not installed (etcd-server): test skipped")
        return 77
    tmp = tempfile.mkdtemp(prefix="cli-cluster-", dir=sys.argv[3])
    procs, etcd_data = [], None
    try:
        etcd, url, etcd_data = start_etcd(tmp)
        procs.append(etcd)
        key = os.path.join(tmp, "key")
        with open(key, "w") as f:
            f.write(ALICE)
        with open(os.path.join(tmp, "keys"), "w") as f:
            f.write(ALICE)
        cl = ["--etcd", url, "--cluster", "c1", "--lease-ttl", "5"]
        n0, a0 = start_node(tmp, "n0", cl + ["--node-id", "n0"])
        procs.append(n0)
        # the advertised address: --advertise, here the listen address
        # chosen beforehand
        port = free_port()
        n1, a1 = start_node(tmp, "n1", cl + [
            "--node-id", "n1", "--listen", "127.0.0.1:%d" % port,
            "--advertise", "127.0.0.1:%d" % port])
        procs.append(n1)
        conf = os.path.join(tmp, "n2.conf")
        with open(conf, "w") as f:
            f.write("listen = 127.0.0.1:0\netcd = %s\ncluster = c1\n"
                    "node-id = n2\nlease-ttl = 5\n" % url)
        n2, a2 = start_node(tmp, "n2", [], config=conf)
        procs.append(n2)
        remote = ["--etcd", url, "--cluster", "c1", "--auth-key-file", key]

        st = members(remote, 3)
        byid = {n["id"]: n for n in st["nodes"]}
        check(sorted(byid) == ["n0", "n1", "n2"], "ids %r" % sorted(byid))
        check(byid["n0"]["address"] == a0 and byid["n1"]["address"] == a1
              and byid["n2"]["address"] == a2, "addresses %r" % byid)
        for n in st["nodes"]:
            check(n["state"] == "up" and n["capacity"] == (16 + 64) << 20,
                  "node %r" % n)
            for field in ("id", "address", "state", "blocks", "bytes",
                          "capacity"):
                check(field in n, "node lacks %s" % field)
        check(st["membership"]["source"] == "etcd" and
              st["membership"]["state"] == "connected",
              "membership %r" % st["membership"])

        rng = random.Random(7)
        blocks = [cli_remote_test.pack(tmp, i, rng)
                  for i in range(6)]
        _, out, _ = run(*remote, "put", "--replicas", "2", *blocks, expect=0)
        ids = out.split()
        _, local, _ = run("store", "put", "--dir", os.path.join(tmp, "local"),
                          *blocks, expect=0)
        check(ids == local.split(), "ids %r vs %r" % (ids, local.split()))
        st = members(remote, 3)
        held = sum(n["blocks"] for n in st["nodes"])
        check(held == 12, "two copies of six blocks: %d held" % held)
        cli_remote_test.check_gets(remote, ids, blocks, tmp)
        _, out, _ = run(*remote, "exists", *ids, expect=0)
        check(out.split().count("present") == 6, "exists %r" % out)
        _, out, _ = run(*remote, "delete", ids[5], expect=0)
        check("deleted" in out, "delete %r" % out)
        rc, _, err = run(*remote, "get", ids[5], "--out",
                         os.path.join(tmp, "miss"), expect=3)
        check("not found" in err and len(err.splitlines()) == 1,
              "miss: %r" % err)
        run(*remote, "exists", ids[5], expect=3)
        run(*remote, "delete", ids[5], expect=3)
        _, out, _ = run(*remote, "stat", expect=0)
        check(out.count("node n") == 3, "stat text %r" % out)

        # a fixed list places the same way, given as a list or repeated
        fixed = ["--server", "%s,%s" % (a0, a1), "--server", a2,
                 "--auth-key-file", key]
        _, out, _ = run(*fixed, "exists", *ids[:5], expect=0)
        _, out, _ = run(*fixed, "stat", "--json", expect=0)
        check(json.loads(out)["membership"]["source"] == "list" and
              len(json.loads(out)["nodes"]) == 3, "fixed stat %r" % out)

        # usage errors
        run("--etcd", url, "--auth-key-file", key, "stat", expect=2)
        run(*remote, "--server", a0, "stat", expect=2)
        run("--cluster", "c1", "--server", a0, "--auth-key-file", key,
            "stat", expect=2)
        run(*remote, "put", "--replicas", "9", blocks[0], expect=2)
        # etcd not there: one line, exit 1
        rc, _, err = run("--etcd", "http://127.0.0.1:%d" % free_port(),
                         "--cluster", "c1", "--auth-key-file", key, "stat",
                         expect=1)
        check(len(err.splitlines()) == 1, "no etcd: %r" % err)

        # a node whose etcd does not answer serves what it holds
        nx, ax = start_node(tmp, "nx", [
            "--etcd", "http://127.0.0.1:%d" % free_port(), "--cluster",
            "c1", "--node-id", "nx", "--etcd-timeout-ms", "300"])
        procs.append(nx)
        run("--server", ax, "--auth-key-file", key, "stat", expect=0)
        with open(os.path.join(tmp, "nx.log")) as f:
            check("does not answer" in f.read(), "no warning in nx.log")
        # a node id a live node holds at another address: refused
        q = subprocess.run([KVSTASHD, "--listen", "127.0.0.1:0", "--dir",
                            os.path.join(tmp, "store-dup"),
                            "--auth-key-file", os.path.join(tmp, "keys"),
                            "--etcd", url, "--cluster", "c1", "--node-id",
                            "n0"], capture_output=True, text=True,
                           timeout=60)
        check(q.returncode == 1 and "n0" in q.stderr,
              "duplicate id: %d %r" % (q.returncode, q.stderr))
        # SIGTERM: out of the members at once
        n2.send_signal(signal.SIGTERM)
        check(n2.wait(timeout=15) == 0, "SIGTERM exit status")
        members(remote, 2, timeout=2)
        print("cli cluster: all checks passed")
        return 0
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        if etcd_data:
            shutil.rmtree(etcd_data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
