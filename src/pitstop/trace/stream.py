"""A trace's events read a window of whole events at a time, never the whole file (torch-free).

A Kineto trace is one JSON object whose ``traceEvents`` list holds nearly all of its bytes.
:class:`TraceWindows` reads the file (or the gzip stream) forward and keeps at most two
windows of its bytes (:data:`WINDOW` each): the part before the list is decoded on
its own (closed as ``...: []}``), then the list is cut after an event (``}`` ``,`` ``{``) past
each window's length and ``[`` + those events + ``]`` is typed in one msgspec call; what
follows the last cut is decoded as ``{"traceEvents": [`` + the rest of the file.

Why a cut is never wrong: each window starts where an event starts, at the list's own depth and
outside any string, so msgspec parses it exactly as it would parse those bytes in the whole
file; ``[`` + bytes + ``]`` is valid JSON only if the cut is also at the list's depth, outside
any string, that is between two events. A cut inside a string or a nested object fails to
decode and the next candidate is tried. Anything this reader does not expect (no
``traceEvents`` list near the start, no cut found, a key both before and after the list, any
decode error) raises :class:`NotStreamable` or msgspec's error, and the caller reads the file
whole instead, which also gives every error its usual message.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import BinaryIO

import msgspec

from pitstop.trace.wire import META_FIELDS, WireEvent, WireTail, WireTrace

__all__ = ["WINDOW", "NotStreamable", "TraceWindows"]

#: bytes of JSON typed per msgspec call (about 4,000 Kineto events; larger windows were no faster)
WINDOW = 1 << 20
_HEAD_LIMIT = 64 << 20  # the traceEvents key must start within this many bytes
_TRIES = 8  # candidate cuts tried per window before giving up
_GROW = 16  # windows of bytes the buffer may hold while looking for a cut
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_HEAD = msgspec.json.Decoder(WireTrace)
_EVENTS = msgspec.json.Decoder(list[WireEvent])
_TAIL = msgspec.json.Decoder(WireTail)


class NotStreamable(Exception):
    """This file is not laid out as the windowed reader expects: read it whole instead."""


class TraceWindows:
    """Iterate :meth:`events` (lists of typed events, in file order); afterwards :attr:`meta`
    holds the top-level keys other than ``traceEvents``, wherever they were in the file."""

    def __init__(self, fh: BinaryIO, window: int = WINDOW) -> None:
        self.fh = fh
        self.window = max(int(window), 64)
        self.buf = bytearray()
        self.eof = False
        self.meta: WireTail | None = None

    def _fill(self, size: int) -> None:
        while not self.eof and len(self.buf) < size:
            block = self.fh.read(size - len(self.buf))
            if block:
                self.buf += block
            else:
                self.eof = True

    def events(self) -> Iterator[list[WireEvent]]:
        head = self._head()
        while True:
            self._fill(2 * self.window)
            if len(self.buf) < 2 * self.window:
                break
            yield self._cut()
        tail = self._tail()
        if tail.traceEvents:
            yield tail.traceEvents
        meta = {}
        for key in META_FIELDS:
            before, after = getattr(head, key), getattr(tail, key)
            if before is not None and after is not None:
                raise NotStreamable(f"{key} both before and after traceEvents")
            meta[key] = after if after is not None else before
        self.meta = WireTail(**meta)

    def _head(self) -> WireTrace:
        """Decode what precedes the list; leave the buffer starting at its ``[``."""
        searched = 0
        while (found := _KEY.search(self.buf, max(searched - 4096, 0))) is None:
            if self.eof or len(self.buf) >= _HEAD_LIMIT:
                raise NotStreamable("no traceEvents list near the start")
            searched = len(self.buf)
            self._fill(searched + self.window)
        head = _HEAD.decode(bytes(self.buf[:found.end()]) + b"]}")
        if head.traceEvents != []:
            raise NotStreamable("traceEvents is not a top-level key")
        del self.buf[:found.end() - 1]
        return head

    def _cut(self) -> list[WireEvent]:
        """Type the events of about one window; leave the buffer starting with ``[`` at the next."""
        buf, pos, tries = self.buf, self.window, 0
        while tries < _TRIES:
            found = _CUT.search(buf, pos)
            if found is None:  # an event longer than the rest of the buffer: read on, within limits
                if self.eof or len(buf) >= _GROW * self.window:
                    break
                self._fill(len(buf) + self.window)
                continue
            tries += 1
            cut = found.start() + 1
            saved, buf[cut] = buf[cut], 0x5D  # "]" just after the event's "}"
            try:
                with memoryview(buf) as whole, whole[:cut + 1] as part:
                    events = _EVENTS.decode(part)
            except msgspec.ValidationError:
                raise
            except msgspec.DecodeError:
                pos = found.end()
                continue
            finally:
                buf[cut] = saved
            comma = buf.index(b",", cut)
            buf[comma] = 0x5B  # "["
            del buf[:comma]
            return events
        raise NotStreamable("no cut between two events")

    def _tail(self) -> WireTail:
        if b'"traceEvents"' in self.buf:
            raise NotStreamable("traceEvents named twice")
        tail = _TAIL.decode(b'{"traceEvents":' + self.buf)
        self.buf = bytearray()
        return tail
