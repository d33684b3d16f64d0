"""A job's progress while ``Client.wait`` waits for it.

In Jupyter (IPython with a kernel) one display is updated in place; on a
terminal one line is redrawn with ``\\r``; anywhere else (a pipe, a log
file) each state change is one plain line, so captured output holds no
control characters. The elapsed time keeps ticking on a terminal and in
Jupyter while the state stays the same.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Callable, Dict, Optional

from .types import Event


def _notebook_display():
    """IPython's display functions when running in a Jupyter kernel."""
    try:
        from IPython import get_ipython  # type: ignore
        from IPython.display import display  # type: ignore
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return None
    return display


def _mode(stream: IO[str], mode: Optional[str]):
    """The display mode for stream (``"notebook"``, ``"tty"`` or
    ``"lines"``) unless one is given, and IPython's display function in a
    notebook."""
    display = None
    if mode is None:
        display = _notebook_display()
        if display is not None:
            mode = "notebook"
        elif hasattr(stream, "isatty") and stream.isatty():
            mode = "tty"
        else:
            mode = "lines"
    return mode, display


class Progress:
    """Shows the state changes of one job. ``mode`` is ``"notebook"``,
    ``"tty"`` or ``"lines"``; by default it is chosen from the environment."""

    TICK = 1.0

    def __init__(self, job_id: str, stream: Optional[IO[str]] = None, mode: Optional[str] = None) -> None:
        self.job_id = job_id
        self.stream = stream if stream is not None else sys.stderr
        self.mode, self._display = _mode(self.stream, mode)
        mode = self.mode
        self.start = time.monotonic()
        self._last: Optional[Event] = None
        self._handle = None
        self._drawn = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None
        if mode in ("tty", "notebook"):
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _elapsed(self) -> str:
        return "%ds" % round(time.monotonic() - self.start)

    def _line(self) -> str:
        ev = self._last
        assert ev is not None
        msg = ev.message if len(ev.message) <= 60 else ev.message[:59] + "…"
        # The id's last digits: the leading ones of a UUIDv7 are the time of
        # submission, the same for every job of a sweep.
        return "…%s  %-9s attempt %d  %s  %s" % (self.job_id[-12:], ev.state, ev.attempt, self._elapsed(), msg)

    def _tick(self) -> None:
        while not self._stop.wait(self.TICK):
            with self._lock:
                if self._last is not None:
                    self._draw()

    def _draw(self) -> None:
        self._drawn = True
        if self.mode == "tty":
            self.stream.write("\r\033[K" + self._line())
            self.stream.flush()
        elif self.mode == "notebook":
            text = self._line()
            if self._handle is None:
                self._handle = self._display(_Text(text), display_id=True)
            else:
                self._handle.update(_Text(text))

    def event(self, ev: Event) -> None:
        """Shows a state change; a repeat of the last state and attempt only
        refreshes a terminal's or notebook's line."""
        with self._lock:
            repeat = self._last is not None and (self._last.state, self._last.attempt) == (ev.state, ev.attempt)
            self._last = ev
            if self.mode == "lines":
                if not repeat:
                    self.stream.write("%s %s attempt %d %s %s\n" % (self.job_id, ev.state, ev.attempt, self._elapsed(), ev.message))
                    self.stream.flush()
            else:
                self._draw()

    def close(self) -> None:
        """Stops the ticking and ends a terminal's line."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            if self.mode == "tty" and self._drawn:
                self.stream.write("\n")
                self.stream.flush()


class Transfer:
    """Shows a download's or an upload's progress once it has lasted
    longer than ``QUIET`` seconds, so that a short one shows nothing: in
    Jupyter one display updated, on a terminal one line redrawn, anywhere
    else one plain line every ``EVERY`` seconds; ``close`` shows where it
    ended. ``count`` writes an amount (bytes by default;
    ``Client.submit_many`` counts jobs)."""

    QUIET = 1.0
    EVERY = 5.0
    EVERY_LIVE = 0.25

    def __init__(self, what: str, total: int, stream: Optional[IO[str]] = None, mode: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic, count: Optional[Callable[[int], str]] = None) -> None:
        self.what = what
        self._count = count or byte_count
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.mode, self._display = _mode(self.stream, mode)
        self._every = self.EVERY if self.mode == "lines" else self.EVERY_LIVE
        self._clock = clock
        self.start = clock()
        self._shown: Optional[float] = None
        self._handle = None

    def add(self, n: int) -> None:
        """Counts n more bytes downloaded or uploaded (or jobs submitted)."""
        self.done += n
        now = self._clock()
        if now - self.start >= self.QUIET and (self._shown is None or now - self._shown >= self._every):
            self._show(now)

    def _show(self, now: float) -> None:
        self._shown = now
        pct = self.done * 100 // self.total if self.total > 0 else 100
        text = "%s: %s of %s (%d%%), %ds" % (self.what, self._count(self.done), self._count(self.total), pct,
                                             round(now - self.start))
        self._handle = _put(self.mode, self.stream, self._display, self._handle, text)

    def close(self) -> None:
        if self._shown is None:
            return
        self._show(self._clock())
        if self.mode == "tty":
            self.stream.write("\n")
            self.stream.flush()


class Sweep:
    """Shows how many jobs of a list ``Client.wait_all`` has seen finish,
    by outcome, once the wait has lasted longer than ``QUIET`` seconds (a
    list of jobs already finished shows nothing): in Jupyter one display
    updated, on a terminal one line redrawn, anywhere else one plain line at
    most every ``EVERY`` seconds; ``close`` shows where it ended."""

    QUIET = 1.0
    EVERY = 5.0
    TICK = 1.0

    def __init__(self, total: int, stream: Optional[IO[str]] = None, mode: Optional[str] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total = total
        self.outcomes: Dict[str, int] = {}
        self.stream = stream if stream is not None else sys.stderr
        self.mode, self._display = _mode(self.stream, mode)
        self._clock = clock
        self.start = clock()
        self._shown: Optional[float] = None
        self._shown_done = 0
        self._handle = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: Optional[threading.Thread] = None
        if self.mode in ("tty", "notebook"):
            # The elapsed time ticks while a long job holds the count.
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(self.TICK):
            with self._lock:
                now = self._clock()
                if now - self.start >= self.QUIET:
                    self._show(now)

    def finished(self, state: str) -> None:
        """Counts a job finished in ``state``."""
        with self._lock:
            self.outcomes[state] = self.outcomes.get(state, 0) + 1
            now = self._clock()
            if now - self.start >= self.QUIET and (self.mode != "lines" or self._shown is None or now - self._shown >= self.EVERY):
                self._show(now)

    def _show(self, now: float) -> None:
        self._shown = now
        self._shown_done = sum(self.outcomes.values())
        tally = ", ".join("%d %s" % (n, state) for state, n in self.outcomes.items())
        text = "wait_all: %d of %d finished (%s), %ds" % (self._shown_done, self.total, tally, round(now - self.start))
        self._handle = _put(self.mode, self.stream, self._display, self._handle, text)

    def close(self) -> None:
        """Stops the ticking and shows the count it ended at."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        now = self._clock()
        if self._shown is None and now - self.start < self.QUIET:
            return
        if self.mode != "lines" or self._shown is None or sum(self.outcomes.values()) != self._shown_done:
            self._show(now)
        if self.mode == "tty":
            self.stream.write("\n")
            self.stream.flush()


def byte_count(n: int) -> str:
    """n bytes in binary units, as the gpuq CLI writes them: 512 B,
    1.5 KiB, 12 MiB."""
    if n < 1024:
        return "%d B" % n
    value, unit = float(n), ""
    for unit in "KMGTPE":
        value /= 1024
        if value < 1024:
            break
    return ("%.1f %siB" if value < 10 else "%.0f %siB") % (value, unit)


def _put(mode: str, stream: IO[str], display, handle, text: str):
    """Shows text as a progress line in mode: the terminal's line redrawn,
    the notebook's display updated (created the first time; its handle is
    returned), or a plain line. Returns the display handle."""
    if mode == "notebook":
        if handle is None:
            return display(_Text(text), display_id=True)
        handle.update(_Text(text))
        return handle
    stream.write(("\r\033[K" + text) if mode == "tty" else text + "\n")
    stream.flush()
    return handle


class _Text:
    """Plain text for IPython's display."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text
