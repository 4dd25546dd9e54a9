"""The files ``privstream sanitize`` writes: which paths it refuses, and how they appear.

Refused before anything is read (exit 2):

* an ``--output`` or ``--dead-letter`` that is the input, and a dead-letter
  file that is the output. "Is" means the same file: the same device and
  inode once both exist (a hard link or a symlink to it is the same file),
  the same resolved path before (``a/./b`` is ``a/b``). Writing the release
  over its raw input would destroy the only copy of the records; dead
  letters among sanitized records would put raw lines in the release.
* a ``--metadata`` path that is the input (stdin included), the output or
  the dead-letter file: ``run_sanitize`` replaces it with the sidecar; the
  same for an ``--aggregates-output`` path, which is not the metadata either.
* an existing ``--output``, ``--dead-letter``, ``--metadata`` or
  ``--aggregates-output`` path (a file, a link, even a dangling one) unless
  ``--overwrite``: an earlier output is an earlier release, and releasing the
  same records again with fresh noise adds its epsilon to theirs. A
  directory, ``--overwrite`` or not.

Every file is written to a new temporary file beside its target (same
directory, so same file system: the rename is atomic), fsync'd and renamed
over the target only when the run has read its whole input. A failing run
removes its temporary files, and so does one stopped by SIGTERM
(``exit_cleanly_on_sigterm``); one killed outright (SIGKILL, power loss)
leaves a ``.NAME.privstream-*.tmp`` file and the target as it was, never a
half-written target. The rename replaces a symlink at the target, never
the file it points to.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, TextIO

from privstream.errors import PrivstreamError

#: a new file, never through a symlink, not inherited by child processes
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: the output's mode before the umask (as ``open(path, "w")`` gives it)
OUTPUT_MODE = 0o666
#: dead letters hold raw records: readable by their owner only (a umask only takes away)
PRIVATE_MODE = 0o600


class FilePathError(PrivstreamError):
    """An output or dead-letter path that would lose data or release twice: exit 2."""


@dataclass(frozen=True)
class FilePaths:
    """What ``sanitize`` reads and writes; None: stdin or stdout (metadata: none)."""

    input: str | None
    output: str | None
    dead_letter: str
    metadata: str | None = None
    overwrite: bool = False
    #: ``--aggregates-output``: the config's aggregates over the whole file (docs/aggregates.md)
    aggregates: str | None = None


def _identity(path: str | None, stream: int) -> tuple[int, int] | None:
    """(device, inode) of the regular file ``path`` leads to, or of descriptor ``stream``
    when ``path`` is None; None for no such file (yet) or another kind (a terminal, a
    pipe: stdin and stdout on one terminal are not one file)."""
    try:
        info = os.stat(path) if path is not None else os.fstat(stream)
    except (OSError, ValueError):  # nothing there, a path through a non-directory, fd -1
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISREG(info.st_mode) else None


def _fd(stream: TextIO | None) -> int:
    """The descriptor of a standard stream, -1 when it has none (closed, a StringIO)."""
    try:
        return stream.fileno() if stream is not None else -1
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        return -1


def _same(a: str | None, a_stream: int, b: str | None, b_stream: int) -> bool:
    ida, idb = _identity(a, a_stream), _identity(b, b_stream)
    if ida is not None and ida == idb:
        return True
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def _check_distinct(paths: FilePaths) -> None:
    stdin, stdout = _fd(sys.stdin), _fd(sys.stdout)
    if _same(paths.output, stdout, paths.input, stdin):
        raise FilePathError(
            f"--output {paths.output or 'stdout'} is the --input file "
            f"{paths.input or 'stdin'} (the same file, or a link to it): the release would "
            "replace the raw records it is made from; name a new --output file"
        )
    if _same(paths.dead_letter, -1, paths.input, stdin):
        raise FilePathError(
            f"--dead-letter {paths.dead_letter} is the --input file {paths.input or 'stdin'} "
            "(the same file, or a link to it): the dead letters would replace the raw "
            "records; name a new --dead-letter file"
        )
    if _same(paths.dead_letter, -1, paths.output, stdout):
        raise FilePathError(
            f"--dead-letter {paths.dead_letter} is the --output file "
            f"{paths.output or 'stdout'} (the same file, or a link to it): raw records would "
            "land among the sanitized ones; name another --dead-letter file"
        )
    if paths.metadata is not None:
        for option, other, stream in (
            ("--input", paths.input, stdin),
            ("--output", paths.output, stdout),
            ("--dead-letter", paths.dead_letter, -1),
        ):
            if _same(paths.metadata, -1, other, stream):
                raise FilePathError(
                    f"--metadata {paths.metadata} is the {option} file "
                    f"{other or ('stdin' if option == '--input' else 'stdout')} (the same "
                    "file, or a link to it): the metadata would replace it; name another file"
                )


def _check_new(paths: FilePaths) -> None:
    named = (("--output", paths.output), ("--dead-letter", paths.dead_letter))
    for option, path in (*named, ("--metadata", paths.metadata)):
        with contextlib.suppress(OSError):
            if path is not None and stat.S_ISDIR(os.lstat(path).st_mode):
                raise FilePathError(f"{option} {path} is a directory: name a file")
    if paths.overwrite:
        return
    if paths.output is not None and os.path.lexists(paths.output):
        raise FilePathError(
            f"--output {paths.output} exists: it holds an earlier release, and sanitizing "
            "the same records again draws fresh noise, a second release whose epsilon adds "
            "to the first's (averaging the two halves the noise variance); keep the earlier "
            "output, name a new file for other records, or pass --overwrite if the earlier "
            "output was never shared"
        )
    if paths.metadata is not None and os.path.lexists(paths.metadata):
        raise FilePathError(
            f"--metadata {paths.metadata} exists: it describes an earlier release (or is "
            "another file); move it away, name a new file, or pass --overwrite to replace it"
        )
    if os.path.lexists(paths.dead_letter):
        raise FilePathError(
            f"--dead-letter {paths.dead_letter}: the path exists; dead letters hold raw "
            "records and never write into or through an existing file: move it away, name "
            "a new file, or pass --overwrite to replace it (a link is replaced, not followed)"
        )


def _check_aggregates(paths: FilePaths) -> None:
    """The aggregates' file is a file of its own, new unless ``--overwrite``."""
    target = paths.aggregates
    if target is None:
        return
    others = (
        ("--input", paths.input, _fd(sys.stdin)),
        ("--output", paths.output, _fd(sys.stdout)),
        ("--dead-letter", paths.dead_letter, -1),
        ("--metadata", paths.metadata, -1),
    )
    for option, other, stream in others:
        if option == "--metadata" and other is None:  # no sidecar (output on stdout)
            continue
        if _same(target, -1, other, stream):
            raise FilePathError(
                f"--aggregates-output {target} is the {option} file "
                f"{other or ('stdin' if option == '--input' else 'stdout')} (the same file, or "
                "a link to it): the aggregates would replace it; name another file"
            )
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(target).st_mode):
            raise FilePathError(f"--aggregates-output {target} is a directory: name a file")
    if not paths.overwrite and os.path.lexists(target):
        raise FilePathError(
            f"--aggregates-output {target} exists: it holds an earlier release of the "
            "aggregates, and answering them again draws fresh noise, a second release whose "
            "epsilon adds to the first's; keep it, name a new file, or pass --overwrite if it "
            "was never shared"
        )


def check_paths(paths: FilePaths) -> None:
    """Refuse paths that would lose data or release twice (module docstring)."""
    _check_distinct(paths)
    _check_new(paths)
    _check_aggregates(paths)


class AtomicFile:
    """A temporary file beside ``target``, created on the first use of ``stream``.

    ``commit`` fsyncs it and renames it over ``target`` (then fsyncs the
    directory, so that the rename survives a crash); ``discard`` removes it.
    The first of them ends it; the other is then a no-op. Nothing exists on
    disk before the caller holds the object, so a caller that arranges the
    ``discard`` first leaves no temporary file behind whenever a SIGTERM
    lands (``exit_cleanly_on_sigterm``).
    """

    def __init__(self, target: str, mode: int) -> None:
        self.target = target
        self._mode = mode
        self._fh: BinaryIO | None = None
        self.temporary: str | None = None
        self._done = False

    def _open(self) -> BinaryIO:
        head, name = os.path.split(self.target)
        for attempt in range(100):  # O_EXCL: never a name another run is writing
            temporary = os.path.join(head, f".{name}.privstream-{os.getpid()}-{attempt}.tmp")
            with contextlib.suppress(FileExistsError), _sigterm_deferred():
                # created and recorded with SIGTERM held, so ``discard`` knows every file
                fd = os.open(temporary, _NEW, self._mode)
                self.temporary, self._fh = temporary, os.fdopen(fd, "wb")
                return self._fh
        raise FilePathError(
            f"{head or '.'}: .{name}.privstream-{os.getpid()}-0.tmp to -99.tmp all exist "
            "(left by killed runs): remove them"
        )

    @property
    def stream(self) -> BinaryIO:
        """The temporary file (created now if it is not yet)."""
        return self._fh if self._fh is not None else self._open()

    def write(self, data: bytes) -> int:
        return self.stream.write(data)

    def commit(self) -> None:
        """Make the written bytes the target's (a lazy file never written: no-op)."""
        if self._done:
            return
        if self._fh is None or self.temporary is None:
            self._done = True
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        try:
            os.replace(self.temporary, self.target)
        except OSError as exc:  # name the target, not the temporary (discard removes it)
            raise OSError(exc.errno, exc.strerror, self.target) from exc
        self._done = True
        sync_directory(self.target)

    def discard(self) -> None:
        """Remove the temporary file: the target stays as it was."""
        if self._done:
            return
        self._done = True
        if self._fh is not None and self.temporary is not None:
            self._fh.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.temporary)


def exit_cleanly_on_sigterm() -> None:
    """SIGTERM raises SystemExit(143) instead of ending the process where it stands.

    The exception unwinds through ``discard``, so a run stopped by a service
    manager or ``kill`` removes its temporary files like a failing one (the
    default action would leave them; the targets are safe either way). Only
    for a process ``main`` owns: a handler is process-wide.
    """
    signal.signal(signal.SIGTERM, _terminated)


@contextlib.contextmanager
def _sigterm_deferred() -> Iterator[None]:
    """SIGTERM held until the block ends (then delivered): in the main thread only, where
    Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def sync_directory(path: str) -> None:
    """fsync the directory holding ``path``: a rename is durable only once it is."""
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
