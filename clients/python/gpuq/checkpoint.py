"""Commit a checkpoint from inside a running job.

The worker running a job listens on a per-attempt unix socket named by
``GPUQ_CONTROL_SOCKET``; ``save()`` speaks the same protocol as
``gpuq checkpoint save``: it sends ``save``, and the worker answers
``ok <seq>`` once ``GPUQ_CHECKPOINT_DIR`` is packed, uploaded and recorded,
or ``error <message>``. Do not modify the directory until it returns.
"""

from __future__ import annotations

import os
import socket
from typing import Optional

from .errors import CheckpointError

ENV_CONTROL_SOCKET = "GPUQ_CONTROL_SOCKET"

#: How long save waits for the worker by default, as `gpuq checkpoint save`.
DEFAULT_TIMEOUT = 30 * 60.0

_MAX_ANSWER = 64 * 1024


def directory() -> str:
    """The job's checkpoint directory (``GPUQ_CHECKPOINT_DIR``)."""
    d = os.environ.get("GPUQ_CHECKPOINT_DIR")
    if not d:
        raise CheckpointError("GPUQ_CHECKPOINT_DIR is not set: this runs only inside a job started by a gpuq worker")
    return d


def resumed() -> bool:
    """True when this attempt started from a restored checkpoint."""
    return os.environ.get("GPUQ_RESUMED") == "1"


def save(timeout: Optional[float] = DEFAULT_TIMEOUT, socket_path: Optional[str] = None) -> int:
    """Commits GPUQ_CHECKPOINT_DIR as the job's next checkpoint and returns
    its sequence number once it is durable."""
    path = socket_path or os.environ.get(ENV_CONTROL_SOCKET, "")
    if not path:
        raise CheckpointError(ENV_CONTROL_SOCKET + " is not set: gpuq.checkpoint.save() must run inside a job started by a gpuq worker")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(path)
            conn.sendall(b"save\n")
            answer = b""
            while not answer.endswith(b"\n") and len(answer) < _MAX_ANSWER:
                data = conn.recv(4096)
                if not data:
                    break
                answer += data
    except OSError as e:
        raise CheckpointError("reaching the worker at %s: %s" % (path, e)) from e
    line = answer.decode("utf-8", "replace").strip()
    if line.startswith("error "):
        raise CheckpointError(line[len("error "):])
    if line.startswith("ok "):
        try:
            return int(line[3:])
        except ValueError:
            pass
    raise CheckpointError("unexpected answer from the worker: %r" % line)
