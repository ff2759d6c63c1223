"""The wire format of Roofline's TCP messages.

Every message is a fixed 48-byte header followed by its payload::

    magic    4s   b"RFLX"
    version  B    1
    kind     B    0 data, 1 handshake
    layer    H    Kylix layer (informational; 0xFFFF when not a layer message)
    token    16s  the job token handed out by the launcher (two jobs never mix)
    sender   I    the sender's rank
    tag      Q    the communicator's tag namespace
    length   Q    payload bytes
    crc      I    CRC-32 of the payload

A receiver checks the magic number, version, token and sender before it trusts the length,
and the CRC-32 after reading the payload: a message that fails any check raises
:class:`~roofline.comm.MessageError` and is never delivered.
"""

from __future__ import annotations

import socket
import struct
import zlib

from ._base import MessageError, PeerError

__all__ = ["HEADER", "KIND_DATA", "KIND_HELLO", "MAGIC", "NO_LAYER", "pack_header", "recv_exact",
           "read_header"]

MAGIC = b"RFLX"
VERSION = 1
KIND_DATA = 0
KIND_HELLO = 1
NO_LAYER = 0xFFFF
HEADER = struct.Struct("<4sBBH16sIQQI")
#: Payloads larger than this are refused before reading (a corrupt or hostile length field).
MAX_PAYLOAD = 1 << 34


def crc32(bufs) -> int:
    c = 0
    for b in bufs:
        c = zlib.crc32(b, c)
    return c


def pack_header(kind, token, sender, tag, bufs, layer=NO_LAYER) -> bytes:
    """The header of a message whose payload is the concatenation of ``bufs``."""
    length = sum(memoryview(b).nbytes for b in bufs)
    return HEADER.pack(MAGIC, VERSION, kind, layer, token, sender, tag, length, crc32(bufs))


def recv_exact(sock: socket.socket, n: int, peer=None) -> bytearray:
    """Exactly ``n`` bytes from ``sock``; :class:`PeerError` if the connection ends first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise PeerError(f"connection to rank {peer} closed after {got} of {n} bytes"
                            if peer is not None else "connection closed", peer)
        got += k
    return buf


def read_header(sock, token, peer=None, expect_sender=None):
    """Read and check one header: ``(kind, sender, tag, length, crc, layer)``."""
    raw = recv_exact(sock, HEADER.size, peer)
    magic, version, kind, layer, tok, sender, tag, length, crc = HEADER.unpack(raw)
    if magic != MAGIC:
        raise MessageError(f"foreign bytes (magic {bytes(magic)!r}, not {MAGIC!r})"
                           + (f" from rank {peer}" if peer is not None else ""))
    if version != VERSION:
        raise MessageError(f"protocol version {version}, expected {VERSION}")
    if tok != token:
        raise MessageError("a message with a wrong job token (another job's, or foreign)"
                           + (f" from rank {peer}" if peer is not None else ""))
    if expect_sender is not None and sender != expect_sender:
        raise MessageError(f"a message claiming sender {sender} on the connection of rank "
                           f"{expect_sender}")
    if length > MAX_PAYLOAD:
        raise MessageError(f"a message announcing {length} bytes, over the maximum frame of "
                           f"{MAX_PAYLOAD} (corrupt length)"
                           + (f" from rank {peer}" if peer is not None else ""))
    return kind, sender, tag, length, crc, layer


def read_payload(sock, length, crc, peer=None, tag=None):
    """Read a payload and check its CRC-32."""
    try:
        buf = recv_exact(sock, length, peer)
    except MemoryError:
        raise MessageError(f"no memory for a {length}-byte message from rank {peer} (tag {tag})"
                           ) from None
    if zlib.crc32(buf) != crc:
        raise MessageError(f"bad CRC-32 on a {length}-byte message from rank {peer}"
                           f" (tag {tag}): corrupted in transit, not delivered")
    return buf
