"""A TLS front before a Temporal dev server, as a secured cluster or Temporal Cloud has.

``TlsFront`` terminates TLS with a certificate made for the test, demands a client
certificate signed by the test's CA when asked to, and forwards the bytes to the dev
server's plain gRPC port. It reads every request's headers on the way (HTTP/2 frames
decoded with ``hpack``), so a test can see the API key and metadata a client sent; with
``api_key`` set it answers requests that carry another key as Temporal Cloud does, with
gRPC status 16 (unauthenticated), and never forwards them.

It runs on an event loop of its own, in a thread, so that a test may block on a CLI
command while the front carries that command's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import hpack
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
HEADERS, CONTINUATION = 0x1, 0x9
END_HEADERS, PADDED, PRIORITY = 0x4, 0x8, 0x20


@dataclass
class Certificates:
    """A CA, a server certificate for localhost and 127.0.0.1, and a client certificate,
    as PEM files in ``directory``."""

    directory: Path
    ca: Path = field(init=False)
    server_cert: Path = field(init=False)
    server_key: Path = field(init=False)
    client_cert: Path = field(init=False)
    client_key: Path = field(init=False)

    def __post_init__(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "subagents test CA")])
        now = datetime.datetime.now(datetime.UTC)
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca = self._write("ca.pem", ca.public_bytes(serialization.Encoding.PEM))

        def leaf(name: str, usage: x509.ObjectIdentifier, server: bool) -> tuple[Path, Path]:
            key = ec.generate_private_key(ec.SECP256R1())
            builder = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=1))
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            )
            if server:
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.DNSName("localhost"),
                            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        ]
                    ),
                    critical=False,
                )
            cert = builder.sign(ca_key, hashes.SHA256())
            key_pem = key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
            return (
                self._write(f"{name}.pem", cert.public_bytes(serialization.Encoding.PEM)),
                self._write(f"{name}.key", key_pem),
            )

        self.server_cert, self.server_key = leaf("server", ExtendedKeyUsageOID.SERVER_AUTH, True)
        self.client_cert, self.client_key = leaf("client", ExtendedKeyUsageOID.CLIENT_AUTH, False)

    def _write(self, name: str, data: bytes) -> Path:
        path = self.directory / name
        path.write_bytes(data)
        return path


class _HeaderReader:
    """Decodes the request headers in a client's HTTP/2 byte stream, as it passes."""

    def __init__(self) -> None:
        self.buffer = b""
        self.preface = False
        self.decoder = hpack.Decoder()
        self.decoder.max_allowed_table_size = 1 << 20
        self.block = b""

    def feed(self, data: bytes) -> list[dict[str, str]]:
        self.buffer += data
        found: list[dict[str, str]] = []
        if not self.preface:
            if len(self.buffer) < len(PREFACE):
                return found
            self.buffer = self.buffer[len(PREFACE) :]
            self.preface = True
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            kind, flags = self.buffer[3], self.buffer[4]
            if len(self.buffer) < 9 + length:
                break
            payload, self.buffer = self.buffer[9 : 9 + length], self.buffer[9 + length :]
            if kind == HEADERS:
                if flags & PADDED:
                    payload = payload[1 : len(payload) - payload[0]]
                if flags & PRIORITY:
                    payload = payload[5:]
                self.block = payload
            elif kind == CONTINUATION:
                self.block += payload
            else:
                continue
            if flags & END_HEADERS:
                decoded = self.decoder.decode(self.block, raw=False)
                found.append({str(k): str(v) for k, v in decoded})
                self.block = b""
        return found


class TlsFront:
    """A TLS terminator before ``upstream`` (``host:port``); see the module's doc.

    Args:
        upstream: The dev server's plain gRPC address.
        certificates: The server certificate it presents, and the CA client
            certificates must be signed by.
        require_client_cert: Refuse the handshake of a client without a certificate.
        api_key: Answer requests whose ``authorization`` is not ``Bearer <api_key>``
            with gRPC status 16 instead of forwarding them.
    """

    def __init__(
        self,
        upstream: str,
        certificates: Certificates,
        *,
        require_client_cert: bool = True,
        api_key: str | None = None,
    ) -> None:
        self.upstream = upstream
        self.certificates = certificates
        self.require_client_cert = require_client_cert
        self.api_key = api_key
        self.requests: list[dict[str, str]] = []
        """Headers of every request that came through, in order."""
        self.refused = 0
        """Requests answered with status 16 (a wrong or missing API key)."""
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def start(self) -> TlsFront:
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            loop.set_exception_handler(lambda _loop, _context: None)  # refused handshakes
            self._server = loop.run_until_complete(
                asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self._context())
            )
            self.port = self._server.sockets[0].getsockname()[1]
            started.set()
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="tls-front", daemon=True)
        self._thread.start()
        started.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> TlsFront:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.certificates.server_cert, self.certificates.server_key)
        ctx.set_alpn_protocols(["h2"])
        if self.require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(self.certificates.ca)
        return ctx

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        headers = _HeaderReader()
        pending = b""
        try:
            while True:  # the first request decides whether this connection goes through
                data = await reader.read(65536)
                if not data:
                    return
                pending += data
                found = headers.feed(data)
                self.requests.extend(found)
                if found:
                    break
            if self.api_key is not None and not self._authorized(found[0]):
                await self._refuse(reader, writer, pending)
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream.rsplit(":", 1))
            up_writer.write(pending)

            async def client_to_server() -> None:
                while data := await reader.read(65536):
                    self.requests.extend(headers.feed(data))
                    up_writer.write(data)
                    await up_writer.drain()
                up_writer.close()

            async def server_to_client() -> None:
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
                writer.close()

            await asyncio.gather(client_to_server(), server_to_client(), return_exceptions=True)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _authorized(self, request: dict[str, str]) -> bool:
        return request.get("authorization") == f"Bearer {self.api_key}"

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pending: bytes
    ) -> None:
        """Speak HTTP/2 to the client and answer each request with status 16."""
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        conn.initiate_connection()
        data = pending
        first = True
        while data:
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    if not first:  # the first one's headers are recorded already
                        self.requests.append({str(k): str(v) for k, v in event.headers or []})
                    first = False
                    self.refused += 1
                    conn.send_headers(
                        event.stream_id,
                        [
                            (":status", "200"),
                            ("content-type", "application/grpc"),
                            ("grpc-status", "16"),
                            ("grpc-message", "Request unauthorized"),
                        ],
                        end_stream=True,
                    )
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            writer.write(conn.data_to_send())
            await writer.drain()
            data = await reader.read(65536)
