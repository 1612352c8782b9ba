"""The voice store's files: its cross-process lock, and creating, reading and deleting what lies in it.

Owns: `locked` (`flock` on `<dir>/.lock`: open file descriptions, so it orders threads of one process as well
as processes; released when the descriptor closes, so a crashed holder never leaves it held), files made new
and flushed to disk, files read without following a link and refused over a size, `.npy` arrays whose header
is checked before any data is read (`read_npy`), deleting an entry without following a link, and a
best-effort directory fsync. POSIX only (fcntl).
Must not know: voices, names, codes, the layout of an entry.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np

LOCK = ".lock"


@contextmanager
def locked(directory: Path, *, exclusive: bool) -> Iterator[None]:
    """The store's cross-process lock: `flock` on `<directory>/.lock`, exclusive or shared. A reader of a
    directory nobody may write (or one not made yet) goes without: there is no writer to wait for."""
    fd = None
    try:
        fd = os.open(directory / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as e:
        if exclusive or e.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS):
            raise
    try:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


@contextmanager
def create(path: Path) -> Iterator[Any]:
    """A new file (never through a link), flushed to disk before it is closed."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644),
                   "wb") as f:
        yield f
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def opened(path: Path, limit: int) -> Iterator[Any]:
    """A regular file opened without following a link (ELOOP if it is one), refused (ValueError) over
    `limit` bytes."""
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path.name}: not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{path.name}: {info.st_size} bytes, over the {limit} a voice entry may hold")
        yield f


def read_bytes(path: Path, limit: int) -> bytes:
    with opened(path, limit) as f:
        return f.read()


def delete(path: Path) -> None:
    """Remove an entry of the store's own (a link is unlinked, never followed); absent is fine."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def sync_directory(directory: Path) -> None:
    """Make the renames in `directory` durable (best effort: some filesystems refuse a directory fsync)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_npy(path: Path, limit: int, kinds: str = "iuf") -> np.ndarray:
    """A `.npy` file's array, believed only once its header agrees with the file: a plain numeric dtype
    (`kinds`: numpy's kind letters), a C- or Fortran-ordered shape whose bytes are exactly what follows the
    header and at most `limit`. Anything else is a ValueError naming the file; nothing is allocated for a
    shape the file does not hold."""
    with opened(path, limit + 4096) as f:
        size = os.fstat(f.fileno()).st_size
        try:
            version = np.lib.format.read_magic(f)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
            if version not in read_header:
                raise ValueError(f"format version {version}")
            shape, fortran, dtype = read_header[version](f)
        except ValueError as e:
            raise ValueError(f"{path.name}: not a readable .npy header ({e})") from None
        if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None:
            raise ValueError(f"{path.name}: dtype {dtype.str} is not a plain {'/'.join(kinds)} number type")
        count = math.prod(int(n) for n in shape)
        nbytes = count * dtype.itemsize
        if nbytes > limit:
            raise ValueError(f"{path.name}: its header claims shape {list(shape)} ({nbytes} bytes), over the "
                             f"{limit} a voice entry may hold")
        if nbytes != size - f.tell():
            raise ValueError(f"{path.name}: its header claims shape {list(shape)} ({nbytes} bytes) but "
                             f"{size - f.tell()} bytes follow it")
        data = np.frombuffer(f.read(nbytes), dtype=dtype, count=count)
    return data.reshape(shape, order="F" if fortran else "C").copy()
