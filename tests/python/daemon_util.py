"""Start and stop a real `compiled` daemon for tests, and talk to it.

The daemon binary comes from $COMPILED_BUILD/bin/compiled (the Makefile sets
it; `make asan` points it at the sanitizer build). $COMPILED_DAEMON_WRAPPER,
when set, prefixes the command (e.g. "valgrind --leak-check=full
--error-exitcode=99"). Each daemon listens on a free loopback port (it binds
port 0 and writes the port to a file) and keeps its cache and log in a
temporary directory.

At stop, the daemon must exit with status 0 and its output must hold no
sanitizer or valgrind report: a leak or a memory error fails the test that
stopped it.
"""

import os
import re
import resource
import shlex
import signal
import socket
import subprocess
import time

import grpc

from compiled.v1 import compiled_pb2, compiled_pb2_grpc, graph_pb2, health_pb2_grpc

SRC = os.environ.get("COMPILED_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))
BIN = os.path.join(BUILD, "bin", "compiled")
GRAPHS = os.path.join(SRC, "tests", "data", "graphs")

BAD_OUTPUT = re.compile(
    r"ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|"
    r"ERROR SUMMARY: [1-9]|definitely lost: [1-9]")


def free_port():
    """A TCP port of 127.0.0.1 that nothing listens on (free when asked: a
    test that starts a listener on it, or needs an address that refuses
    connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_address():
    """A 127.0.0.1 address that refuses connections (no daemon there)."""
    return "127.0.0.1:%d" % free_port()


def load_graph(name):
    gm = graph_pb2.GraphModule()
    with open(os.path.join(GRAPHS, name + ".pb"), "rb") as f:
        gm.ParseFromString(f.read())
    return gm


def variant(gm, tag):
    """A copy of `gm` with a distinct key: the client's torch version is part
    of the key's target component, and changing it keeps the graph valid."""
    g = graph_pb2.GraphModule()
    g.CopyFrom(gm)
    g.torch_version = "%s+%s" % (gm.torch_version, tag)
    return g


def compile_request(gm, **kw):
    return compiled_pb2.CompileRequest(graph=gm, **kw)


def run_compile(stub, req, timeout=60):
    """Calls Compile and returns (events, result)."""
    events = list(stub.Compile(req, timeout=timeout))
    assert events, "Compile returned no event"
    assert events[-1].WhichOneof("event") == "result", events[-1]
    return events, events[-1].result


class Daemon:
    def __init__(self, tmpdir, *args, cache_dir=None, nofile=None):
        self.dir = str(tmpdir)
        self.nofile = nofile  # (soft, hard) RLIMIT_NOFILE for the daemon
        self.cache_dir = cache_dir or os.path.join(self.dir, "cache")
        self.args = list(args)
        self.proc = None
        self.port = None
        self.out_path = os.path.join(self.dir, "daemon.out")
        self.log_path = os.path.join(self.dir, "daemon.log")
        self._channel = None

    def start(self, extra=()):
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        wrapper = shlex.split(os.environ.get("COMPILED_DAEMON_WRAPPER", ""))
        cmd = wrapper + [BIN, "--listen", "127.0.0.1:0", "--port-file", port_file,
                         "--cache-dir", self.cache_dir, "--log-file", self.log_path,
                         "--grace-seconds", "20"] + self.args + list(extra)
        self.out = open(self.out_path, "ab")
        preexec = None
        if self.nofile is not None:
            def preexec():
                resource.setrlimit(resource.RLIMIT_NOFILE, self.nofile)
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT,
                                     preexec_fn=preexec)
        deadline = time.time() + (60 if wrapper else 15)
        while time.time() < deadline:
            if os.path.exists(port_file):
                with open(port_file) as f:
                    text = f.read().strip()
                if text:
                    self.port = int(text)
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError("daemon exited early:\n" + self.output())
            time.sleep(0.02)
        raise RuntimeError("daemon did not start:\n" + self.output())

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def channel(self):
        if self._channel is None:
            self._channel = grpc.insecure_channel(
                self.address, options=[("grpc.max_receive_message_length", 256 << 20)])
        return self._channel

    def stub(self):
        return compiled_pb2_grpc.CompilerStub(self.channel())

    def health(self):
        return health_pb2_grpc.HealthStub(self.channel())

    def stats(self):
        return self.stub().Stats(compiled_pb2.StatsRequest(), timeout=10)

    def output(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode(errors="replace")

    def log(self):
        if not os.path.exists(self.log_path):
            return ""
        with open(self.log_path) as f:
            return f.read()

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=60, check=True):
        """Stops the daemon; returns its exit status. With check, asserts a
        clean exit and no sanitizer/valgrind report, and for a daemon
        started with --verify-ir (the native code generator's tests) that
        the C compiler never failed: such a failure is served as the ATen
        program, which a test comparing only values would not notice."""
        if check and "--verify-ir" in self.args and self.proc is not None and \
                self.proc.poll() is None:
            failures = self.stats().native_failures
            assert failures == 0, "the C compiler failed %d times:\n%s" % (
                failures, "\n".join(line for line in self.log().splitlines()
                                    if "native" in line or "cc" in line)[-8000:])
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("daemon did not stop within %ss:\n%s" % (timeout, self.output()))
        self.out.close()
        self.proc = None
        if check:
            out = self.output()
            assert rc == 0, "daemon exited with %s:\n%s" % (rc, out[-4000:])
            bad = BAD_OUTPUT.search(out)
            assert not bad, "daemon reported errors:\n" + out[-8000:]
        return rc

    def kill(self):
        """SIGKILL: no cleanup at all (crash tests)."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None
        self.proc.kill()
        self.proc.wait()
        self.out.close()
        self.proc = None
