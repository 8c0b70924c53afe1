"""Where a run writes: the one rule for output folders.

:func:`prepare_out` is the rule every command that writes a run follows (evaluate,
reproduce, train, live, predictor evaluate): the folder is new or empty, or it is this
command's own run and ``--resume`` continues it, or ``--force`` replaces a folder a run
wrote; a lock keeps a second run out while the first writes; names the run will write
are checked before the run starts.  :func:`prepare_out_file` is the same rule for a
command that writes one file, and :func:`claim_file` adds the lock (export, calibrate,
curves, jobs import, traces import, predictor deadline-prior).  The files themselves are
written with
:func:`mara_env.atomic.atomic_write` or :func:`~mara_env.atomic.atomic_path`, which leave
a whole file or none.

:func:`output_dir_problem` is the probe all of them share: a file is written rather than
asking ``os.access``, which reads permission bits that root passes where it still cannot
write (``/proc``, for one).  The CLI (:mod:`mara_agents.commands.checks`) and training
(:func:`mara_agents.training.records.check_out`) ask it too.
"""

from __future__ import annotations

import atexit
import fcntl
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

# In every run folder: the lock a run holds while it writes, and the record of which
# command made the folder (what --resume and --force look at).
MARKER = ".mara-run"


def output_dir_problem(path: str | os.PathLike, label: object = None) -> str | None:
    """Why no new file can be written in directory ``path`` (which may not exist yet), as
    "<what>; expected <what>", or None when one can; ``label`` (default: ``path``) is what
    the caller's message shows, so an ancestor that is a file is named unless it is that.

    The file system is left as it was (directories made for the probe are removed again).
    """
    path = Path(path)
    label = path if label is None else label
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == label else f"{existing} is a file"
        return f"{what}; expected a directory there"
    made = None if existing == path else existing / path.relative_to(existing).parts[0]
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        return f"cannot write in {path} ({exc.strerror or exc}); expected a writable directory"
    finally:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
    return None


class OutputError(ValueError):
    """An output folder or file the command may not write; the message is one line naming
    it and the choices."""


class RunDir:
    """An output folder claimed by one run (from :func:`prepare_out`): its lock is held
    until :meth:`release` or the end of a ``with`` block.

    Leaving the block by an exception removes what the claim itself added when the run
    wrote nothing (the folder, if it made it, and the marker), so a failed start leaves
    the file system as it was.
    """

    def __init__(self, path: Path, fd: int, made: Path | None, resumed: bool) -> None:
        self.path = path
        self.resumed = resumed  # an existing run of this command, continued
        self._fd: int | None = fd
        self._made = made

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is not None:
            self.abandon()
        self.release()

    def abandon(self) -> None:
        """Give up a run that failed: what the claim added goes when the run wrote nothing."""
        if not self.resumed:
            self._undo()
        self.release()

    def clear(self, keep: Sequence[str] = ()) -> None:
        """Remove what the folder holds but ``keep`` (names): a resumed run's files that it
        writes again from the start."""
        _remove(self.path, [p.name for p in self.path.iterdir() if p.name not in (MARKER, *keep)])

    def release(self) -> None:
        """Let other runs in (the marker stays: the folder remains this command's run)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _undo(self) -> None:
        if any(p.name != MARKER for p in self.path.iterdir()):
            return  # the run wrote something: kept for the user to see
        (self.path / MARKER).unlink(missing_ok=True)
        if self._made is not None:
            shutil.rmtree(self._made, ignore_errors=True)


def prepare_out(
    path: str | os.PathLike,
    *,
    command: str,
    force: bool = False,
    resume: bool = False,
    resumable: bool = False,
    files: Sequence[str] = (),
    dirs: Sequence[str] = (),
    option: str = "--out",
    settings: dict | None = None,
) -> RunDir:
    """Claim folder ``path`` for a run of ``command`` (e.g. ``"evaluate"``) or raise
    :class:`OutputError` with one line naming it and the choices.

    The rule: a new or empty folder is taken; a non-empty one only with ``resume`` (it
    must then be a run of ``command``, or one written before runs were marked) or with
    ``force``, which empties it first (only a folder that holds a run: one marked by a
    command, or whose entries all match ``files`` and ``dirs``, glob patterns allowed).
    ``resumable`` says whether ``command`` has ``--resume``, for the message.  A run
    already writing there (its lock held) stops this one at once.  ``files`` and ``dirs``
    (names in ``path``, glob patterns allowed) are what the run will write: one of them
    found as the other kind is refused now, not after the run.  Use the result as a
    context manager (or keep it and call :meth:`RunDir.release`): the lock is held until
    then, and a run that fails having written nothing leaves no trace.  ``settings`` (JSON
    values) are recorded with the run; ``resume`` continues only a run of the same ones.

    Example::

        with prepare_out(args.out, command="mine", force=args.force, files=("*.csv",)):
            ...  # write into args.out
    """
    path = _named(path, option, "a directory")
    problem = output_dir_problem(path)
    if problem is not None:
        raise OutputError(f"{option} {path}: {problem}")
    made = _first_missing(path)
    path.mkdir(parents=True, exist_ok=True)
    marked = (path / MARKER).exists()
    fd = _lock(path / MARKER, path, option)
    try:
        record = _record(fd)
        previous = record.get("command")
        # hidden entries last: the example the message names is one the user knows
        entries = sorted(
            (p.name for p in path.iterdir() if p.name != MARKER),
            key=lambda name: (name.startswith("."), name),
        )
        resumed = False
        if entries:
            if resume:
                if previous and previous != command:
                    raise OutputError(
                        f"{option} {path}: holds a run of `mara {previous}`, not of "
                        f"`mara {command}`: nothing to resume there; choose a new name, or "
                        "--force to replace it"
                    )
                _same_settings(record.get("settings"), settings, path, option)
                resumed = True
            elif force:
                _empty(path, entries, previous, (*files, *dirs), option)
            else:
                n = len(entries)
                kind = (
                    f"a run of `mara {previous}`"
                    if previous
                    else f"{n} entr{'y' if n == 1 else 'ies'}"
                )
                resume_it = resumable and previous in (None, command)
                raise OutputError(
                    f"{option} {path}: not empty (holds {kind}, e.g. {entries[0]!r}); choose "
                    f"a new name, {'--resume to continue it, ' if resume_it else ''}or "
                    "--force to replace it"
                )
        _check_kinds(path, files, dirs, option)
        _write_marker(fd, command, settings)
    except BaseException:
        if not marked:  # leave the folder as it was found
            (path / MARKER).unlink(missing_ok=True)
        os.close(fd)
        if made is not None and not any(path.iterdir()):
            shutil.rmtree(made, ignore_errors=True)
        raise
    return RunDir(path, fd, made, resumed)


def prepare_out_file(
    path: str | os.PathLike,
    *,
    force: bool = False,
    resumable: bool = False,
    option: str = "--out",
) -> Path:
    """``path`` as a file a command may write (atomically, with
    :func:`mara_env.atomic.atomic_write`), or :class:`OutputError`: an existing file is
    replaced only with ``force`` (``resumable``: the command's ``--resume`` continues it,
    for the message); a folder never."""
    path = _named(path, option, "a file path")
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory; expected a file path, not a directory")
    problem = output_dir_problem(path.parent, path)
    if problem is not None:
        raise OutputError(f"{option} {path}: {problem}")
    if path.exists() and not force:
        resume_it = "--resume to continue it, " if resumable else ""
        raise OutputError(
            f"{option} {path}: exists; choose a new name, {resume_it}or --force to replace it"
        )
    return path


class FileClaim:
    """An output file claimed by one command (from :func:`claim_file`): a lock file beside
    it (``.NAME.lock``) keeps a second command out until the ``with`` block ends, when the
    lock file goes."""

    def __init__(self, path: Path, lock: Path, fd: int) -> None:
        self.path = path
        self._lock = lock
        self._fd: int | None = fd
        atexit.register(self.release)  # a command stopped before its block still tidies up

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.release()

    def release(self) -> None:
        """Let other commands in, removing the lock file."""
        if self._fd is not None:
            self._lock.unlink(missing_ok=True)
            os.close(self._fd)
            self._fd = None
            atexit.unregister(self.release)


def claim_optional(
    path: str | os.PathLike | None, *, command: str, force: bool = False, option: str = "--csv"
) -> AbstractContextManager[Path | None]:
    """:func:`claim_file` of ``path`` for an optional output (a script's ``--csv``), or, with
    no path, a block that gives ``None``."""
    if path is None:
        return nullcontext()
    return claim_file(path, command=command, force=force, option=option)


def claim_file(
    path: str | os.PathLike,
    *,
    command: str,
    force: bool = False,
    extend: bool = False,
    option: str = "--out",
) -> FileClaim:
    """Claim file ``path`` for ``command`` (e.g. ``"jobs import"``): the rule of
    :func:`prepare_out_file` (an existing file is replaced only with ``force``, or read
    and extended with ``extend``), and a lock held until the ``with`` block ends, so that
    a second command writing the same file stops at once.

    Example::

        with claim_file(args.out, command="mine", force=args.force) as out:
            atomic_write(out, data)
    """
    path = prepare_out_file(path, force=force or extend, option=option)
    try:  # a new folder is made, as a run's --out folder is
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"{option} {path}: cannot create its folder {path.parent} ({exc.strerror}); "
            "expected a writable place"
        ) from None
    lock = path.parent / f".{path.name}.lock"
    fd = _lock(lock, path, option)
    _write_marker(fd, command)
    return FileClaim(path, lock, fd)


def _named(path: str | os.PathLike, option: str, expected: str) -> Path:
    """``path``, unless it is empty (which pathlib would read as the working directory)."""
    if not os.fspath(path).strip():
        raise OutputError(f"{option} {os.fspath(path)!r}: empty; expected {expected}")
    return Path(path)


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None: it exists)."""
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def _lock(marker: Path, path: Path, option: str) -> int:
    """The descriptor of lock file ``marker``, locked; OutputError naming ``path`` at once
    if a run holds it."""
    while True:
        try:
            fd = os.open(marker, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutputError(
                f"{option} {path}: cannot create its lock {marker.name} ({exc.strerror}); "
                "expected a writable place with a shorter name"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _record(fd)
            os.close(fd)
            who = f" (mara {holder.get('command')}, pid {holder.get('pid')})" if holder else ""
            raise OutputError(
                f"{option} {path}: another run{who} is writing there now; wait for it "
                f"to end, or choose another {option}"
            ) from None
        # a run that undid its claim may have removed the marker we opened: lock the new one
        try:
            same = os.fstat(fd).st_ino == os.stat(marker).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def _record(fd: int) -> dict:
    """What a marker records of the run that made the folder (empty: nothing)."""
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        record = json.loads(os.read(fd, 1 << 16) or b"null")
    except ValueError:
        return {}
    return record if isinstance(record, dict) else {}


# The settings key under which a run records the digest of each file it reads
# (:func:`input_digests`): what ``--resume`` compares first, naming a file that changed.
INPUTS = "inputs"


def input_digests(files: Iterable[tuple[str, str | os.PathLike]]) -> dict[str, str]:
    """The sha256 of each input file, by how the command was told of it: ``(option,
    path)`` pairs, e.g. ``("--jobs", "t.parquet")`` -> ``{"--jobs t.parquet": "9f2c..."}``;
    recorded as the settings' :data:`INPUTS`, a resumed run must read the same bytes."""
    return {f"{option} {os.fspath(path)}": file_digest(path) for option, path in files}


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 of a file's bytes, as hex (read in blocks: a trace library may be large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def changed_input(before: dict[str, str], now: dict[str, str]) -> str | None:
    """What changed of an input both :func:`input_digests` name (``"--jobs t.parquet has
    changed since the run read it (sha256 ...)"``), or None."""
    for name, digest in now.items():
        if name in before and before[name] != digest:
            return (
                f"{name} has changed since the run read it (sha256 {before[name][:12]}... "
                f"then, {digest[:12]}... now)"
            )
    return None


def _same_settings(before: dict | None, now: dict | None, path: Path, option: str) -> None:
    """Refuse to resume a run whose recorded settings differ from ``now``, naming one: an
    input file whose content changed first (:data:`INPUTS`), then any other setting."""
    if now is None or before is None:
        return
    now = json.loads(json.dumps(now, default=str))
    if INPUTS in now:
        read = before.get(INPUTS)
        if not isinstance(read, dict):
            raise OutputError(
                f"{option} {path}: holds a run that recorded no digest of the files it read "
                "(an earlier version of mara), so --resume cannot tell whether they changed; "
                "--force to start it again"
            )
        changed = changed_input(read, now[INPUTS])
        if changed is not None:
            raise OutputError(
                f"{option} {path}: {changed}; --resume continues a run on the same inputs: "
                "restore the file, or --force to start again"
            )
    for key in sorted((set(before) | set(now)) - {INPUTS}):
        if before.get(key) != now.get(key):
            raise OutputError(
                f"{option} {path}: holds a run with {key}={before.get(key)!r}, not "
                f"{now.get(key)!r}; --resume continues the same run: give the same options, "
                "or --force to replace it"
            )
    if INPUTS in now and set(now[INPUTS]) != set(before[INPUTS]):
        raise OutputError(
            f"{option} {path}: holds a run that read {sorted(before[INPUTS])}, not "
            f"{sorted(now[INPUTS])}; --resume continues the same run: give the same files, "
            "or --force to replace it"
        )


def _write_marker(fd: int, command: str, settings: dict | None = None) -> None:
    record = {"command": command, "pid": os.getpid(), "started": time.strftime("%FT%T%z")}
    if settings is not None:
        record["settings"] = json.loads(json.dumps(settings, default=str))
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, (json.dumps(record) + "\n").encode())


def _empty(
    path: Path, entries: list[str], previous: str | None, patterns: Sequence[str], option: str
) -> None:
    """Remove ``entries`` of a run folder for --force; a folder no run wrote is refused."""
    if previous is None:
        foreign = [e for e in entries if not any(fnmatch.fnmatch(e, p) for p in patterns)]
        if foreign:
            raise OutputError(
                f"{option} {path}: holds {foreign[0]!r}, which no mara run wrote; --force "
                "replaces only a run's folder: choose a new name, or move it yourself"
            )
    _remove(path, entries)


def _remove(path: Path, names: Sequence[str]) -> None:
    for name in names:
        entry = path / name
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _check_kinds(path: Path, files: Sequence[str], dirs: Sequence[str], option: str) -> None:
    """Refuse a name the run will write as a file that is a folder, or the other way."""
    for patterns, want, found in ((files, "file", "folder"), (dirs, "folder", "file")):
        for entry in (e for p in patterns for e in sorted(path.glob(p))):
            if entry.is_dir() == (want == "file"):
                raise OutputError(
                    f"{option} {path}: {entry.name} is a {found}; the run writes a {want} of "
                    "that name: move it, or choose a new name"
                )
