"""Packing a job's working directory ("workdir"): the files its command
needs (``python3 train.py`` finds train.py), as a gzip-compressed tar named
by its SHA-256 digest. ``Client.upload_workdir`` uploads it and
``Client.submit(workdir=...)`` does both and names it in the spec.

The archive is deterministic: entries in order of their paths, each with
mtime 0, uid and gid 0 and no user or group names, and a gzip header with
mtime 0 and no file name. Packing unchanged files again gives the same
digest, so that a submission re-run with the same idempotency key sends the
same spec. The `gpuq submit --workdir` of the CLI packs by the same rules,
including the patterns of a ``.gpuqignore`` file at the directory's root.
"""

from __future__ import annotations

import contextlib
import fnmatch
import gzip
import hashlib
import logging
import os
import re
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from typing import IO, Dict, Iterator, List, Optional, Sequence, Tuple

from .errors import GpuqError
from .progress import byte_count

#: Names left out at any depth: version control, `gpuq dev`'s settings
#: (they hold its token), caches and virtualenvs.
LEFT_OUT = frozenset({".git", ".gpuq", "__pycache__", ".ipynb_checkpoints", ".venv"})

#: The file at the root of a packed directory that lists what else to leave
#: out, one pattern a line.
IGNORE_FILE = ".gpuqignore"

#: The most a packed directory may be (compressed) for the client to upload
#: it. The server's ``storage.workdir_max_bytes`` may be lower: its 413 is
#: raised as it is.
MAX_BYTES = 100 << 20

#: How a spec's workdir names an uploaded directory: this, then 64 hex digits.
DIGEST_PREFIX = "sha256:"

_MIB = 1 << 20

_log = logging.getLogger("gpuq")


@dataclass(frozen=True)
class Packed:
    """A directory packed into ``path``, a temporary file removed when the
    ``packed`` block ends; ``digest`` is ``"sha256:<hex>"``."""

    path: str
    digest: str
    bytes: int

    @property
    def hex(self) -> str:
        """The digest's 64 hex digits, as the upload's URL takes them."""
        return self.digest[len(DIGEST_PREFIX):]


@dataclass(frozen=True)
class _Entry:
    """One entry of the archive: ``name`` is its path in the archive, with
    ``/``; ``kind`` is "dir", "file" or "link"."""

    name: str
    path: str
    kind: str
    mode: int = 0o755
    size: int = 0
    target: str = ""


@dataclass(frozen=True)
class _Rule:
    """One pattern of ``.gpuqignore``. With ``by_path`` its ``segments``
    match an entry's path from the root, one segment each; without, its one
    segment matches an entry's base name at any depth. ``dirs_only`` (the
    pattern ended in ``/``) matches directories only."""

    segments: Tuple[str, ...]
    by_path: bool
    dirs_only: bool

    def matches(self, name: str, is_dir: bool) -> bool:
        """Whether the entry with archive name ``name`` is left out."""
        if self.dirs_only and not is_dir:
            return False
        if not self.by_path:
            return fnmatch.fnmatchcase(name.rpartition("/")[2], self.segments[0])
        parts = name.split("/")
        return len(parts) == len(self.segments) and all(map(fnmatch.fnmatchcase, parts, self.segments))


class _TooBig(Exception):
    """The archive grew past the limit while it was written."""


@contextlib.contextmanager
def packed(directory: str) -> Iterator[Packed]:
    """Packs ``directory`` into a temporary file, yields it as a
    :class:`Packed`, and removes the file afterwards. Entries it leaves out
    other than by name (a symlink out of the directory, a fifo) are each
    named in a warning on the ``gpuq`` logger. A path that is not a
    directory, a ``.gpuqignore`` with a pattern it refuses, or a directory
    that packs to more than :data:`MAX_BYTES`, raises :class:`GpuqError`;
    packing stops at the limit rather than compressing the rest of a
    directory that holds a data set."""
    shown = str(directory)
    root = os.path.abspath(directory)
    if not os.path.isdir(root):
        why = "is not a directory" if os.path.exists(root) else "does not exist"
        raise GpuqError("workdir: %s %s (want the directory to ship with the job, or %s and the digest of one "
                        "uploaded)" % (shown, why, DIGEST_PREFIX))
    entries = _walk(root, _ignore_rules(root, shown))
    limit = MAX_BYTES
    fd, tmp = tempfile.mkstemp(prefix="gpuq-workdir-", suffix=".tar.gz")
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                digest, size = _write(entries, out, limit)
            except _TooBig:
                raise GpuqError(_too_big(shown, entries, limit)) from None
            except OSError as e:
                raise GpuqError("workdir %s: %s" % (shown, e)) from e
        yield Packed(tmp, DIGEST_PREFIX + digest, size)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def _ignore_rules(root: str, shown: str) -> List[_Rule]:
    """The patterns of root's ``.gpuqignore``, none without one. A pattern
    it refuses raises :class:`GpuqError` naming its line, before anything is
    packed, rather than shipping what its author meant to leave out."""
    try:
        with open(os.path.join(root, IGNORE_FILE), "rb") as f:
            text = f.read().decode("utf-8")
    except FileNotFoundError:
        return []
    except OSError as e:
        raise GpuqError("workdir %s: %s" % (shown, e)) from e
    except UnicodeDecodeError as e:
        raise GpuqError("workdir %s: %s is not UTF-8 text (%s)" % (shown, IGNORE_FILE, e)) from e
    rules = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            rules.append(_rule(line))
        except ValueError as e:
            raise GpuqError('workdir %s: %s line %d: "%s": %s' % (shown, IGNORE_FILE, number, line, e)) from None
    return rules


#: A character class with something in it: ``[abc]``, ``[a-z]``.
_CLASS = re.compile(r"\[[^]/]+\]")


def _rule(line: str) -> _Rule:
    """The rule of a pattern of ``.gpuqignore``, or ValueError saying why it
    is refused. What .gitignore has and this does not (negation, negated
    classes, ``**``, backslash escapes) is refused rather than matched
    otherwise; so is an
    unclosed ``[``, which fnmatch would take as a literal one, and an empty
    segment ("/", "a//b"), which no path has."""
    if line.startswith("!"):
        raise ValueError("negation (!) is not supported")
    if "**" in line:
        raise ValueError("** is not supported; a pattern without / matches at any depth")
    if "[!" in line or "[^" in line:
        raise ValueError("negated classes ([! or [^) are not supported")
    if "\\" in line:
        raise ValueError("backslash escapes are not supported")
    pattern, dirs_only = (line[:-1], True) if line.endswith("/") else (line, False)
    pattern, anchored = (pattern[1:], True) if pattern.startswith("/") else (pattern, False)
    segments = tuple(pattern.split("/"))
    if not all(segments) or "[" in _CLASS.sub("", pattern):
        raise ValueError("malformed pattern")
    return _Rule(segments, anchored or len(segments) > 1, dirs_only)


def _walk(root: str, rules: Sequence[_Rule] = ()) -> List[_Entry]:
    """The entries of the directory root, depth first, each directory's in
    order of their names, without those left out: by name, by a pattern of
    rules (silently), and those that cannot be shipped (with a warning)."""
    entries: List[_Entry] = []

    def visit(local: str, prefix: str) -> None:
        try:
            with os.scandir(local) as it:
                items = sorted(it, key=lambda item: item.name)
        except OSError as e:
            raise GpuqError("workdir: %s" % e) from e
        for item in items:
            if item.name in LEFT_OUT:
                continue
            name = prefix + item.name
            try:
                st = item.stat(follow_symlinks=False)
                if any(rule.matches(name, stat.S_ISDIR(st.st_mode)) for rule in rules):
                    continue
                if stat.S_ISLNK(st.st_mode):
                    target = os.readlink(item.path)
                    why = _link_refused(root, local, target)
                    if why:
                        _log.warning("workdir: left out %s: a symlink to %s, %s", name, target, why)
                        continue
                    entries.append(_Entry(name, item.path, "link", 0o777, target=target))
                elif stat.S_ISDIR(st.st_mode):
                    entries.append(_Entry(name, item.path, "dir"))
                    visit(item.path, name + "/")
                elif stat.S_ISREG(st.st_mode):
                    entries.append(_Entry(name, item.path, "file", st.st_mode & 0o777, st.st_size))
                else:
                    _log.warning("workdir: left out %s: %s", name, _kind(st.st_mode))
            except OSError as e:
                raise GpuqError("workdir: %s" % e) from e

    visit(root, "")
    return entries


def _link_refused(root: str, link_dir: str, target: str) -> Optional[str]:
    """Why a symlink in link_dir to target is left out, or None when it is
    kept: its target, resolved from the link's directory, must stay inside
    root, and be written relative to it."""
    if os.path.isabs(target):
        if _within(root, os.path.normpath(target)):
            return "an absolute path (a link inside the directory is kept only when relative)"
        return "outside the directory"
    if _within(root, os.path.normpath(os.path.join(link_dir, target))):
        return None
    return "outside the directory"


def _within(root: str, path: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a fifo (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "neither a file, a directory nor a symlink"


class _Sink:
    """Where the compressed archive is written: the file, hashed and
    counted on the way. Past ``limit`` bytes it raises :class:`_TooBig`
    once, then takes what is left (the gzip trailer) without writing it."""

    def __init__(self, out: IO[bytes], limit: int) -> None:
        self.out = out
        self.limit = limit
        self.hash = hashlib.sha256()
        self.bytes = 0
        self.over = False

    def write(self, data: bytes) -> int:
        if self.over:
            return len(data)
        self.bytes += len(data)
        if self.bytes > self.limit:
            self.over = True
            raise _TooBig()
        self.hash.update(data)
        self.out.write(data)
        return len(data)

    def flush(self) -> None:
        if not self.over:
            self.out.flush()


def _write(entries: List[_Entry], out: IO[bytes], limit: int) -> Tuple[str, int]:
    """Writes entries to out as a deterministic gzip-compressed tar and
    returns its SHA-256 (hex) and size."""
    sink = _Sink(out, limit)
    gz = gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=sink, mtime=0)  # type: ignore[arg-type]
    try:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for e in entries:
                info = tarfile.TarInfo(e.name)
                info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                info.mode = e.mode
                if e.kind == "dir":
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                elif e.kind == "link":
                    info.type = tarfile.SYMTYPE
                    info.linkname = e.target
                    tar.addfile(info)
                else:
                    with open(e.path, "rb") as f:
                        info.size = os.fstat(f.fileno()).st_size
                        tar.addfile(info, f)
    finally:
        gz.close()
    return sink.hash.hexdigest(), sink.bytes


def _too_big(shown: str, entries: List[_Entry], limit: int) -> str:
    """The refusal of a directory that packs to more than limit, naming its
    largest top-level entries (by the size of their files)."""
    sizes: Dict[str, int] = {}
    for e in entries:
        top, sep, _ = e.name.partition("/")
        key = top + "/" if sep or e.kind == "dir" else top
        sizes[key] = sizes.get(key, 0) + e.size
    total = sum(sizes.values())
    largest = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return ("workdir %s packs to over %s (its files hold %s), more than an upload may be "
            "(storage.workdir_max_bytes); largest: %s"
            % (shown, _limit(limit), _size(total), ", ".join("%s %s" % (k, _size(n)) for k, n in largest)))


def _size(n: int) -> str:
    """A size as the refusal writes it: 120.0 MiB, or 512 B and 1.5 KiB
    below a MiB."""
    return "%.1f MiB" % (n / _MIB) if n >= _MIB else byte_count(n)


def _limit(n: int) -> str:
    return "%d MiB" % (n // _MIB) if n % _MIB == 0 else byte_count(n)
