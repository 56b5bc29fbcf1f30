"""A real SMTP server for the statement tests: aiosmtpd in its own process, recording every
message it accepts as one file, with faults on request.

Started as ``python -m aiosmtpd -n -l 127.0.0.1:PORT -c tests.smtp_sink.RecordingHandler DIR``
(``running_smtp_server`` does it, in its own process group, and stops the group however the
test ends). Each message the server takes is written to ``DIR/messages/NNNNNN.eml``.

A fault is a line of ``DIR/faults``; each message's DATA consumes the first line:

- ``drop-after-data``: record the message (the server took it), then drop the connection
  before the ``250`` reply: the client cannot know the message was taken.
- ``451``: do not record it; answer ``451 4.3.0`` (a temporary refusal).
- ``550``: do not record it; answer ``550 5.1.1`` (a permanent refusal: no such mailbox).
"""

from __future__ import annotations

import email
import socket
import subprocess
import sys
import time
from argparse import ArgumentParser
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from typing import Any

from support.ports import free_port
from support.processes import stop_group

ROOT = Path(__file__).resolve().parents[1]


class RecordingHandler:
    """aiosmtpd handler: record each accepted message to a file; apply queued faults."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "messages").mkdir(parents=True, exist_ok=True)
        # Numbered on from what an earlier server recorded in the same directory.
        self.recorded = len(list((directory / "messages").glob("*.eml")))

    @classmethod
    def from_cli(cls, parser: ArgumentParser, *args: str) -> RecordingHandler:
        if len(args) != 1:
            parser.error("RecordingHandler takes one argument: the directory to record messages in")
        return cls(Path(args[0]))

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        fault = self._next_fault()
        if fault == "451":
            return "451 4.3.0 Try again later"
        if fault == "550":
            return "550 5.1.1 No such mailbox here"
        self._record(envelope.original_content)
        if fault == "drop-after-data":
            server.transport.abort()  # taken, and no reply: the client sees the connection drop
        return "250 OK"

    def _next_fault(self) -> str:
        path = self.directory / "faults"
        if not path.exists():
            return ""
        lines = path.read_text().splitlines()
        path.write_text("".join(f"{line}\n" for line in lines[1:]))
        return lines[0].strip() if lines else ""

    def _record(self, content: bytes) -> None:
        messages = self.directory / "messages"
        self.recorded += 1
        number = self.recorded
        partial = messages / f"{number:06d}.part"
        partial.write_bytes(content)
        partial.rename(messages / f"{number:06d}.eml")  # whole files only, for the reader


@dataclass(frozen=True)
class RunningSmtpServer:
    host: str
    port: int
    directory: Path

    def messages(self) -> list[Message]:
        paths = sorted((self.directory / "messages").glob("*.eml"))
        return [email.message_from_bytes(path.read_bytes()) for path in paths]

    def fail_next(self, *faults: str) -> None:
        """Queue faults for the next messages' DATA (module doc)."""
        with (self.directory / "faults").open("a") as file:
            file.writelines(f"{fault}\n" for fault in faults)


def _accepting(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            return conn.recv(3) == b"220"
    except OSError:
        return False


@contextmanager
def running_smtp_server(
    *, directory: Path, port: int | None = None, timeout: float = 20.0
) -> Iterator[RunningSmtpServer]:
    """Start the server on ``port`` (a free one unless given), wait until it greets, yield
    it, and stop its process group on the way out, whatever happened."""
    port = port or free_port()
    directory.mkdir(parents=True, exist_ok=True)
    log = (directory / "server.log").open("ab")
    command = [
        sys.executable,
        "-m",
        "aiosmtpd",
        "-n",
        "-l",
        f"127.0.0.1:{port}",
        "-c",
        "tests.smtp_sink.RecordingHandler",
        str(directory),
    ]
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=log, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not _accepting(port):
            if process.poll() is not None:
                raise RuntimeError(f"the SMTP server exited with {process.returncode}; see {directory / 'server.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the SMTP server did not greet on port {port} within {timeout} s")
            time.sleep(0.05)
        yield RunningSmtpServer("127.0.0.1", port, directory)
    finally:
        stop_group(process, grace=10)
        log.close()
