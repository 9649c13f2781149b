#!/usr/bin/env python3
"""How long slow peers keep other clients out (issue 35, items 1 and 2).

Not a test. Starts its own daemon on free loopback ports, opens PEERS
connections that each send one byte every INTERVAL seconds for up to
--hold seconds, and meanwhile tries a normal client every 0.5 s:

  tls     TLS on the gRPC port with --max-connections PEERS; the peers
          trickle a TLS handshake (a record header announcing 16 KiB, then
          its bytes one at a time). The normal client is a TLS gRPC Stats
          call on a fresh channel.
  http    /healthz and /metrics (--metrics-listen); the peers trickle an
          HTTP request line. The normal client is GET /healthz.

Prints when the first normal request got through, and for how long each
peer was kept open (until the daemon closed it, or --hold).

Run from the repository root after `make` (COMPILED_BUILD selects another
build tree):

    /usr/bin/python3 bench/slow_peers.py tls|http [--peers N] [--hold S]
        [--interval S] [-- DAEMON_ARGS...]
"""

import argparse
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from benchlib import Daemon  # noqa: E402

import grpc  # noqa: E402

from compiled.v1 import compiled_pb2, compiled_pb2_grpc  # noqa: E402


def make_pki(d):
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
            "ca.key", "-out", "ca.pem", "-subj", "/CN=bench ca")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=server")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", "server.pem", "-extfile", "san.ext")


class Trickler(threading.Thread):
    """One connection sending `first`, then one byte of `rest` every
    `interval` s until the daemon closes it or `until`."""

    def __init__(self, port, first, rest, interval, until):
        super().__init__(daemon=True)
        self.port, self.first, self.rest = port, first, rest
        self.interval, self.until = interval, until
        self.opened = self.closed = None

    def run(self):
        s = socket.create_connection(("127.0.0.1", self.port))
        self.opened = time.time()
        try:
            s.sendall(self.first)
            for b in self.rest:
                send_at = min(self.until, time.time() + self.interval)
                while True:  # wait `interval`, watching for the close
                    left = send_at - time.time()
                    if left <= 0 or not select.select([s], [], [], left)[0]:
                        break
                    if not s.recv(4096):
                        raise ConnectionResetError
                if time.time() >= self.until:
                    return
                s.sendall(bytes([b]))
        except OSError:
            self.closed = time.time()
        finally:
            s.close()


def tls_ok(address, ca):
    creds = grpc.ssl_channel_credentials(root_certificates=ca)
    with grpc.secure_channel(address, creds) as ch:
        try:
            compiled_pb2_grpc.CompilerStub(ch).Stats(compiled_pb2.StatsRequest(), timeout=2)
            return True
        except grpc.RpcError:
            return False


def http_ok(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port, timeout=2) as r:
            return r.status in (200, 503)
    except OSError:
        return False


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["tls", "http"])
    ap.add_argument("--peers", type=int, default=0,
                    help="slow peers (default: 16 for tls, 200 for http)")
    ap.add_argument("--hold", type=float, default=60, help="seconds the peers keep trickling")
    ap.add_argument("--interval", type=float, default=1.0)
    argv = sys.argv[1:]
    rest = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:rest])
    a.daemon_args = argv[rest + 1:]
    peers = a.peers or (16 if a.mode == "tls" else 200)
    tmp = tempfile.mkdtemp(prefix="slow-peers-")
    try:
        args = list(a.daemon_args)
        if a.mode == "tls":
            make_pki(tmp)
            args += ["--tls-cert", os.path.join(tmp, "server.pem"), "--tls-key",
                     os.path.join(tmp, "server.key"), "--max-connections", str(peers)]
            ca = open(os.path.join(tmp, "ca.pem"), "rb").read()
            first, rest = b"\x16\x03\x01\x40\x00", bytes(16384)
        else:
            mport = free_port()
            args += ["--metrics-listen", "127.0.0.1:%d" % mport]
            first, rest = b"G", b"ET /healthz HTTP/1.1\r\n" + b"X" * 100000
        with Daemon(*args) as d:
            port = int(d.address.rsplit(":", 1)[1])
            ok = (lambda: tls_ok(d.address, ca)) if a.mode == "tls" else (lambda: http_ok(mport))
            assert ok(), "the normal client fails before any slow peer"
            start = time.time()
            until = start + a.hold
            ts = [Trickler(port if a.mode == "tls" else mport, first, rest, a.interval, until)
                  for _ in range(peers)]
            for t in ts:
                t.start()
            time.sleep(1.0)  # all connected
            served = None
            while time.time() < until:
                t0 = time.time()
                if ok():
                    served = t0 - start
                    break
                time.sleep(max(0, 0.5 - (time.time() - t0)))
            for t in ts:
                t.join(a.hold + 10)
            held = sorted((t.closed or until) - t.opened for t in ts if t.opened)
            print("%s: %d slow peers (a byte every %.1f s for up to %.0f s), daemon args %s"
                  % (a.mode, peers, a.interval, a.hold, " ".join(a.daemon_args) or "(none)"))
            print("  first normal request served after: %s"
                  % ("%.1f s" % served if served is not None else "never (%.0f s)" % a.hold))
            print("  slow peers kept open: min %.1f s, median %.1f s, max %.1f s%s"
                  % (held[0], held[len(held) // 2], held[-1],
                     "" if any(t.closed for t in ts) else " (none closed by the daemon)"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
