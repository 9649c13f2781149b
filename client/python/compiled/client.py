"""gRPC client of the compiled daemon (service ``compiled.v1.Compiler``).

The daemon's address comes from, in order: the ``address`` argument, the
environment variable ``COMPILED_SERVER``, then ``127.0.0.1:7421``.

One gRPC channel is kept per address per process (channels are expensive to
set up and multiplex any number of calls); a forked child makes its own, as
gRPC channels do not survive ``fork()``. Channels accept messages up to
256 MiB.

Errors are mapped to the exceptions of :mod:`compiled.errors`:

=======================================  ======================================
gRPC status                              raised
=======================================  ======================================
INVALID_ARGUMENT, UNIMPLEMENTED          :class:`CompileError`, with the node
                                         and argument from the trailing
                                         metadata entry ``compiled-error-bin``
                                         (a ``compiled.v1.GraphError``)
UNAVAILABLE (also: connection refused)   :class:`DaemonUnavailable`; when a
                                         plain channel's connection was reset
                                         by a server that answers a TLS
                                         handshake, the message says the
                                         daemon expects TLS (``ca=``,
                                         ``COMPILED_CA``)
RESOURCE_EXHAUSTED (after retries)       :class:`DaemonBusy`
anything else                            :class:`DaemonError`
=======================================  ======================================

:func:`compiled.compile` raises only :class:`CompileError`; any other
:class:`DaemonError` makes it run the function eagerly and retry later.

An artifact comes inline in the ``CompileResult`` when it is small enough,
else it is fetched with ``Fetch``; either way its SHA-256 is checked against
the digest the daemon announced.

A daemon that accepts the connection but does not answer (stopped with
SIGSTOP, wedged, a dead host behind a live proxy) must not hold a caller
for the whole compile deadline: a Compile or Fetch stream whose first
message has not arrived after ``answer_timeout`` seconds (default 10,
``$COMPILED_ANSWER_TIMEOUT``) is cancelled and raises
:class:`DaemonUnavailable`. The daemon sends its first event as soon as it
has read the request, before any work. Channels reconnect at most
``RECONNECT_MAX_MS`` after a daemon comes back (gRPC's default backoff
grows to two minutes).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import re
import socket
import ssl
import threading
import time
from typing import Dict, Optional, Tuple

# gRPC's C core logs connection events (a daemon's GOAWAY when a channel
# goes idle, reconnects) to stderr at INFO; a user's job should only hear of
# errors. $GRPC_VERBOSITY set by the user wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
import grpc  # noqa: E402

from . import __version__
from .errors import CompileError, DaemonBusy, DaemonError, DaemonUnavailable, _describe_status
from .v1 import compiled_pb2, compiled_pb2_grpc

__all__ = ["Client", "CompileOutcome", "DEFAULT_ADDRESS", "compile", "get_client", "resolve_address"]

DEFAULT_ADDRESS = "127.0.0.1:7421"
ENV_ADDRESS = "COMPILED_SERVER"
ENV_TOKEN = "COMPILED_TOKEN"
ENV_TRUST_KEY = "COMPILED_TRUST_KEY"
MAX_RECEIVE_BYTES = 256 << 20
ERROR_METADATA_KEY = "compiled-error-bin"

# RESOURCE_EXHAUSTED is retried this many times, sleeping BUSY_BACKOFF * 4**i.
BUSY_RETRIES = 3
BUSY_BACKOFF = 0.1

# Seconds a stream may wait for the daemon's first message.
ENV_ANSWER_TIMEOUT = "COMPILED_ANSWER_TIMEOUT"
DEFAULT_ANSWER_TIMEOUT = 10.0
# The longest pause between two reconnection attempts of a channel.
RECONNECT_MAX_MS = 2000

_channels: Dict[Tuple[int, str], grpc.Channel] = {}
_clients: Dict[Tuple[int, str], "Client"] = {}
_lock = threading.Lock()


def resolve_address(address: Optional[str] = None) -> str:
    """The daemon address to use: ``address``, else ``$COMPILED_SERVER``,
    else ``127.0.0.1:7421``."""
    return address or os.environ.get(ENV_ADDRESS) or DEFAULT_ADDRESS


def _read_pem(path: Optional[str], what: str) -> Optional[bytes]:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"compiled: {what} {path}: {e.strerror}") from None


def _channel(address: str, tls: Tuple[str, str, str] = ("", "", "")) -> grpc.Channel:
    """The process's channel to ``address`` (made on first use); over TLS
    when ``tls`` (ca, cert, key file names) names a CA or a certificate."""
    key = (os.getpid(), address) + tuple(tls)
    with _lock:
        channel = _channels.get(key)
        if channel is None:
            options = [("grpc.max_receive_message_length", MAX_RECEIVE_BYTES),
                       ("grpc.initial_reconnect_backoff_ms", 200),
                       ("grpc.min_reconnect_backoff_ms", 200),
                       ("grpc.max_reconnect_backoff_ms", RECONNECT_MAX_MS)]
            ca, cert, pkey = tls
            if ca or cert:
                creds = grpc.ssl_channel_credentials(
                    root_certificates=_read_pem(ca, "TLS CA"),
                    private_key=_read_pem(pkey, "TLS key"),
                    certificate_chain=_read_pem(cert, "TLS certificate"))
                channel = grpc.secure_channel(address, creds, options=options)
            else:
                channel = grpc.insecure_channel(address, options=options)
            _channels[key] = channel
        return channel


def get_client(address: Optional[str] = None) -> "Client":
    """A shared :class:`Client` for ``address`` (resolved as documented)."""
    address = resolve_address(address)
    key = (os.getpid(), address)
    with _lock:
        client = _clients.get(key)
    if client is None:
        client = Client(address)
        with _lock:
            client = _clients.setdefault(key, client)
    return client


@dataclasses.dataclass
class CompileOutcome:
    """What :meth:`Client.compile_outcome` returns.

    Attributes:
        key: the cache key (hex).
        artifact: the artifact bytes (a serialized ``compiled.v1.Artifact``),
            digest-checked.
        result: the daemon's ``CompileResult`` (``served``, diagnostics,
            timings...); its ``artifact`` field is cleared.
    """
    key: str
    artifact: bytes
    result: compiled_pb2.CompileResult


def _request_bytes(graph_module, options, target, label=None) -> bytes:
    """A serialized CompileRequest for ``graph_module`` (a GraphModule or
    its serialization), without copying the graph into a request message
    first (CompileRequest(graph=...) copies every node: 5-10 ms for a 700 KB
    densenet121 graph). Protobuf parsers merge fields in any order, so the
    graph field (1, length-delimited) is written by hand in front of the
    other fields."""
    rest = compiled_pb2.CompileRequest(client=f"compiled-python/{__version__} pid={os.getpid()}")
    if options is not None:
        rest.options.CopyFrom(options)
    if target is not None:
        rest.target.CopyFrom(target)
    if label is not None:
        rest.label.CopyFrom(label)
    graph = (bytes(graph_module) if isinstance(graph_module, (bytes, bytearray, memoryview))
             else graph_module.SerializeToString())
    return field_bytes(1, graph) + rest.SerializeToString()


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2) holding ``payload``."""
    return _varint((number << 3) | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Client:
    """A client of one daemon. Cheap to create: the channel is shared.

    Args:
        address: ``host:port``; None resolves as :func:`resolve_address`.
        timeout: default deadline of a ``Compile`` call, in seconds (compiles
            of large graphs take a while; hits answer in a millisecond).
        token: bearer token for a daemon started with ``--tokens`` (sent as
            ``authorization: Bearer TOKEN``); None: ``$COMPILED_TOKEN``, if
            set. A ``read`` token gets cache hits only: a miss is refused
            (PERMISSION_DENIED) and :func:`compiled.compile` runs eagerly.
        ca, cert, key: TLS: the daemon's CA certificate (PEM file), and for
            mutual TLS this client's certificate and key; None:
            ``$COMPILED_CA``, ``$COMPILED_CERT``, ``$COMPILED_KEY``. With
            none of them the connection is plain.
        trust_key: the daemons' signing keys (their ``--signing-keys`` file,
            or ``"KEY_ID:HEX_SECRET"``); None: ``$COMPILED_TRUST_KEY``, if
            set. With keys, every artifact must carry a valid signature by
            one of them (see :func:`verify_signature`), else
            :class:`DaemonError` (and :func:`compiled.compile` runs eagerly).
    """

    def __init__(self, address: Optional[str] = None, *, timeout: float = 600.0,
                 token: Optional[str] = None, trust_key: Optional[str] = None,
                 ca: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None, answer_timeout: Optional[float] = None):
        self.address = resolve_address(address)
        self.timeout = timeout
        if answer_timeout is None:
            text = os.environ.get(ENV_ANSWER_TIMEOUT, "")
            try:
                answer_timeout = float(text) if text else DEFAULT_ANSWER_TIMEOUT
            except ValueError:
                raise ValueError(f"compiled: ${ENV_ANSWER_TIMEOUT} must be a number of "
                                 f"seconds, got {text!r}") from None
        if not answer_timeout > 0:
            raise ValueError(f"compiled: the answer timeout must be positive, got {answer_timeout}")
        self.answer_timeout = float(answer_timeout)
        token = token if token is not None else os.environ.get(ENV_TOKEN, "")
        if token and (token != token.strip() or any(ord(ch) < 33 for ch in token)):
            raise ValueError("compiled: the bearer token has spaces or control characters")
        self._metadata = (("authorization", "Bearer " + token),) if token else None
        trust_key = trust_key if trust_key is not None else os.environ.get(ENV_TRUST_KEY, "")
        self._trust = load_trust_keys(trust_key) if trust_key else None
        env = os.environ.get
        tls = (ca if ca is not None else env("COMPILED_CA", ""),
               cert if cert is not None else env("COMPILED_CERT", ""),
               key if key is not None else env("COMPILED_KEY", ""))
        if tls[1] and not tls[2]:
            raise ValueError("compiled: a TLS client certificate needs its key "
                             "(key= or COMPILED_KEY)")
        channel = _channel(self.address, tls)
        # a plain channel's address, for the hint that the daemon expects TLS
        self._plain = None if tls[0] or tls[1] else self.address
        self._stub = compiled_pb2_grpc.CompilerStub(channel)
        # Compile with the request already serialized (see _request_bytes).
        self._compile_bytes = channel.unary_stream(
            "/compiled.v1.Compiler/Compile", request_serializer=None,
            response_deserializer=compiled_pb2.CompileEvent.FromString)

    def __repr__(self) -> str:
        return f"Client({self.address!r})"

    # -- Compile -----------------------------------------------------------

    def compile(self, graph_module, options: Optional[compiled_pb2.CompileOptions] = None, *,
                target: Optional[compiled_pb2.Target] = None,
                timeout: Optional[float] = None, label: Optional[str] = None,
                entry_label: Optional[compiled_pb2.Label] = None) -> Tuple[str, bytes]:
        """Compile ``graph_module`` (a ``graph_pb2.GraphModule``, or its
        serialization) or get it from the cache. Returns ``(key,
        artifact_bytes)``.

        ``label`` names the program in the progress line of a slow compile;
        ``entry_label`` (a ``compiled.v1.Label``, see
        :func:`compiled.labels.make_label`) is stored with the cache entry a
        compile makes, for ``compilectl ls`` and ``lookup``. Without it the
        entry is labelled with ``label`` and this host's name.

        Raises:
            CompileError: the daemon refused the graph.
            DaemonUnavailable: the daemon cannot be reached.
            DaemonBusy: the daemon stayed overloaded through the retries.
            DaemonError: any other failure (deadline, digest mismatch...).
        """
        outcome = self.compile_outcome(graph_module, options, target=target, timeout=timeout,
                                       label=label, entry_label=entry_label)
        return outcome.key, outcome.artifact

    def compile_outcome(self, graph_module, options: Optional[compiled_pb2.CompileOptions] = None,
                        *, target: Optional[compiled_pb2.Target] = None,
                        timeout: Optional[float] = None,
                        label: Optional[str] = None,
                        entry_label: Optional[compiled_pb2.Label] = None) -> CompileOutcome:
        """Like :meth:`compile`, also returning the daemon's CompileResult.

        ``label`` names the program in the progress line a compile that
        takes a while shows (:mod:`compiled.progress`)."""
        from .labels import make_label
        from .progress import Progress
        if entry_label is None:
            entry_label = make_label(label or "")
        request = _request_bytes(graph_module, options, target, entry_label)
        timeout = self.timeout if timeout is None else timeout
        with Progress(label or "a graph", self.address) as progress:
            for attempt in range(BUSY_RETRIES + 1):
                try:
                    result = self._compile_once(request, timeout, progress)
                    break
                except DaemonBusy:
                    if attempt == BUSY_RETRIES:
                        raise
                    time.sleep(BUSY_BACKOFF * 4 ** attempt)
        if result.artifact_inline:
            data = bytes(result.artifact)
            _check_digest(data, result.artifact_digest, result.key)
        else:
            data = self.fetch(result.key, digest=result.artifact_digest,
                              size=result.artifact_size or None)
        if self._trust is not None:
            verify_signature(self._trust, result.key, data, result.signature,
                             result.signature_key)
        result.ClearField("artifact")
        return CompileOutcome(result.key, data, result)

    def _compile_once(self, request: bytes, timeout, progress=None) -> compiled_pb2.CompileResult:
        result = None
        call = self._compile_bytes(request, timeout=timeout, metadata=self._metadata)
        watchdog = _FirstAnswer(call, min(self.answer_timeout, timeout), self._plain)
        try:
            for event in call:
                watchdog.answered()
                if event.WhichOneof("event") == "result":
                    result = event.result
                elif progress is not None:
                    progress.event(event)
        except grpc.RpcError as e:
            raise watchdog.error(e, "Compile") from None
        finally:
            watchdog.answered()
        if result is None:
            raise DaemonError("Compile: the stream ended without a result")
        return result

    # -- Fetch, Stats ------------------------------------------------------

    def fetch(self, key: str, *, digest: str = "", size: Optional[int] = None,
              timeout: Optional[float] = None) -> bytes:
        """The artifact of ``key``, streamed with ``Fetch``, its digest
        checked (against ``digest`` when given, and the stream's own)."""
        parts = []
        offset = 0
        stream_digest = ""
        total = None
        timeout = self.timeout if timeout is None else timeout
        call = self._stub.Fetch(compiled_pb2.FetchRequest(key=key), timeout=timeout,
                                metadata=self._metadata)
        watchdog = _FirstAnswer(call, min(self.answer_timeout, timeout), self._plain)
        try:
            for chunk in call:
                watchdog.answered()
                if chunk.offset != offset:
                    raise DaemonError(f"Fetch {key}: chunk at offset {chunk.offset}, "
                                      f"expected {offset}")
                if chunk.digest and not stream_digest:
                    stream_digest = chunk.digest
                total = chunk.total_size
                parts.append(chunk.data)
                offset += len(chunk.data)
        except grpc.RpcError as e:
            raise watchdog.error(e, "Fetch") from None
        finally:
            watchdog.answered()
        data = b"".join(parts)
        expected_size = size if size is not None else total
        if expected_size is not None and len(data) != expected_size:
            raise DaemonError(f"Fetch {key}: got {len(data)} bytes, expected {expected_size}")
        _check_digest(data, digest or stream_digest, key)
        if digest and stream_digest and digest != stream_digest:
            raise DaemonError(f"Fetch {key}: the stream announces digest {stream_digest}, "
                              f"the compile result {digest}")
        return data

    def stats(self, timeout: float = 10.0) -> compiled_pb2.StatsResponse:
        """The daemon's counters."""
        try:
            return self._stub.Stats(compiled_pb2.StatsRequest(), timeout=timeout,
                                    metadata=self._metadata)
        except grpc.RpcError as e:
            raise _map_rpc_error(e, "Stats", self._plain) from None


def compile(graph_module, options: Optional[compiled_pb2.CompileOptions] = None,
            server: Optional[str] = None) -> Tuple[str, bytes]:
    """``get_client(server).compile(graph_module, options)``."""
    return get_client(server).compile(graph_module, options)


def load_trust_keys(spec: str) -> Dict[str, bytes]:
    """Signing keys from ``"KEY_ID:HEX_SECRET"`` or a file of ``KEY_ID
    HEX_SECRET`` lines (the daemon's ``--signing-keys`` format)."""
    if ":" in spec and not os.path.exists(spec):
        lines = [spec.replace(":", " ", 1)]
    else:
        try:
            with open(spec) as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise ValueError(f"compiled: trust key file {spec}: {e.strerror}") from None
    keys: Dict[str, bytes] = {}
    for n, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        try:
            if len(words) != 2:
                raise ValueError
            secret = bytes.fromhex(words[1])
            if len(secret) < 32:
                raise ValueError
        except ValueError:
            raise ValueError(f"compiled: trust key line {n}: want 'KEY_ID HEX_SECRET' with a "
                             "secret of at least 32 bytes in hex") from None
        keys[words[0]] = secret
    if not keys:
        raise ValueError("compiled: no trust keys given")
    return keys


def verify_signature(keys: Dict[str, bytes], key: str, data: bytes, signature: str,
                     key_id: str) -> None:
    """Checks an artifact's signature: HMAC-SHA-256 by ``keys[key_id]`` of
    ``"compiled-artifact-v1\\n" + key + "\\n" + sha256(data)`` (hex, lower
    case), as the daemon makes it (daemon/sign.h). Raises DaemonError."""
    if not signature:
        raise DaemonError(f"artifact {key[:16]}: not signed, and this client trusts only "
                          "signed artifacts (COMPILED_TRUST_KEY)")
    secret = keys.get(key_id)
    if secret is None:
        raise DaemonError(f"artifact {key[:16]}: signed with key '{key_id}', which this client "
                          f"does not hold (it has {', '.join(sorted(keys))})")
    msg = b"compiled-artifact-v1\n" + key.lower().encode() + b"\n" + \
        hashlib.sha256(data).hexdigest().encode()
    want = hmac.new(secret, msg, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature.lower()):
        raise DaemonError(f"artifact {key[:16]}: the signature by key '{key_id}' does not match")


def _check_digest(data: bytes, digest: str, key: str) -> None:
    if digest and hashlib.sha256(data).hexdigest() != digest.lower():
        raise DaemonError(f"artifact {key}: SHA-256 does not match the announced digest {digest}")


class _FirstAnswer:
    """Cancels a streaming call whose first message has not come within
    ``seconds`` (a timer thread, stopped by the first message)."""

    def __init__(self, call, seconds: float, plain: Optional[str] = None):
        self.call = call
        self.seconds = seconds
        self.plain = plain
        self.expired = False
        self.timer = threading.Timer(seconds, self._expire)
        self.timer.daemon = True
        self.timer.start()

    def _expire(self) -> None:
        self.expired = True
        self.call.cancel()

    def answered(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def error(self, e: grpc.RpcError, what: str) -> DaemonError:
        if self.expired and e.code() == grpc.StatusCode.CANCELLED:
            return DaemonUnavailable(f"{what}: the daemon did not answer within "
                                     f"{self.seconds:g} s (${ENV_ANSWER_TIMEOUT})",
                                     grpc.StatusCode.UNAVAILABLE, "no answer")
        return _map_rpc_error(e, what, self.plain)


# The messages of gRPC for a connection the server closed during the HTTP/2
# handshake, as a TLS server does when a plain client sends its preface.
_CLOSED = ("reset by peer", "Socket closed")
_tls_servers: Dict[str, bool] = {}


def _speaks_tls(address: str, timeout: float = 2.0) -> bool:
    """Whether the server at ``address`` (host:port) answers a TLS handshake.
    Its certificate is not checked: the question is only whether it speaks
    TLS. Remembered per address once it does."""
    if _tls_servers.get(address):
        return True
    m = re.fullmatch(r"(?:dns:(?:///)?|ipv4:|ipv6:)?\[?([^\[\],]+?)\]?:(\d+)", address)
    if not m:
        return False
    host, port = m.groups()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            with ctx.wrap_socket(sock):
                speaks = True
    except ssl.SSLError as e:
        # an alert is a TLS record: the server refused us in TLS (a daemon
        # with --tls-client-ca wants a certificate); anything else is not TLS
        speaks = "ALERT" in (e.reason or "")
    except (OSError, ValueError):
        speaks = False
    if speaks:
        _tls_servers[address] = True
    return speaks


def _map_rpc_error(e: grpc.RpcError, what: str, plain: Optional[str] = None) -> DaemonError:
    """The exception of :mod:`compiled.errors` for a failed call; ``plain``
    is the address of a channel without TLS."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    details = details or ""
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED):
        graph_error = _graph_error(e)
        if graph_error is not None:
            return CompileError(graph_error.message or details, code, details,
                                node=graph_error.node, argument=graph_error.argument,
                                error_code=graph_error.code)
        return CompileError(details or _describe_status(code, details), code, details)
    if code == grpc.StatusCode.UNAVAILABLE:
        hint = ""
        if plain and any(s in details for s in _CLOSED) and _speaks_tls(plain):
            hint = (f"; the daemon at {plain} expects TLS: give the CA of its certificate "
                    "(ca= or COMPILED_CA)")
        return DaemonUnavailable(f"{what}: daemon unavailable (UNAVAILABLE): {details}{hint}",
                                 code, details)
    if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
        return DaemonError(f"{what} not allowed ({code.name}): {details}", code, details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return DaemonBusy(f"{what}: daemon busy (RESOURCE_EXHAUSTED): {details}", code, details)
    return DaemonError(f"{what} failed: {_describe_status(code, details)}", code, details)


def _graph_error(e: grpc.RpcError) -> Optional[compiled_pb2.GraphError]:
    """The GraphError of the trailing metadata, if any."""
    try:
        metadata = e.trailing_metadata() or ()
    except Exception:  # not a call error (e.g. raised before the call)
        return None
    for key, value in metadata:
        if key == ERROR_METADATA_KEY:
            msg = compiled_pb2.GraphError()
            try:
                msg.ParseFromString(value if isinstance(value, bytes) else value.encode())
            except Exception:
                return None
            return msg
    return None
