"""The store: shards, checkpoints and the model registry, behind one fsspec URL.

A key is a ``/``-separated path relative to the store's root. Writes are
atomic: on a local or shared file system the bytes go to a temporary name in
the same folder and are renamed into place; on object stores a single put is
already atomic. A reader therefore sees either the whole object or nothing,
which is what makes "skip the hop if its checkpoint exists" safe. Object
stores have no rename, so nothing here moves a folder: what must appear whole
as a group of objects (a registry version) is made visible by replacing one
small pointer object after it is written.

On an object store (``s3://BUCKET/PREFIX``, with s3fs installed) every request
that fails transiently is tried again (``core/_retry.py``), listings are never
cached (other hosts write the same store), and credentials and the endpoint
come from the standard variables (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL`` for an
S3-compatible server other than AWS). A failure that does not pass becomes
one ``StoreError`` line naming the store, the operation and the key.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Callable
from typing import Any, BinaryIO, TypeVar

import fsspec

from hoptune.core._errors import StoreError
from hoptune.core._retry import RetryPolicy

__all__ = ["Store"]

T = TypeVar("T")

#: Modules whose exceptions are failures of the store itself (not bugs in hoptune).
_STORE_MODULES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "fsspec", "gcsfs", "adlfs")


class Store:
    """Bytes and JSON by key under one root URL (a folder, ``file://…`` or ``s3://…``)."""

    def __init__(self, url: str) -> None:
        self.url = str(url)
        protocol = fsspec.core.split_protocol(self.url)[0] or "file"
        # other hosts write the same store: a cached listing would hide their objects
        # (and each Store its own client, reading the endpoint and credentials when made)
        options = ({} if protocol in ("file", "local", "memory")
                   else {"use_listings_cache": False, "skip_instance_cache": True})
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        except (ImportError, ValueError) as exc:
            raise StoreError(f"store {self.url}: {exc}") from exc
        self.root = root.rstrip("/")
        self.local = "file" in _protocols(self.fs)
        self.retry = RetryPolicy.from_env()

    def _call(self, operation: Callable[[], T], what: str, key: str) -> T:
        """``operation`` with retries on transient failures; what still fails is a StoreError.

        A missing object stays a ``FileNotFoundError`` for the caller to word.
        """
        try:
            return self.retry.call(operation, f"{what} {key} in {self.url}")
        except FileNotFoundError:
            raise
        except Exception as exc:
            if isinstance(exc, OSError) or type(exc).__module__.split(".")[0] in _STORE_MODULES:
                first = (str(exc).splitlines() or [""])[0]
                raise StoreError(f"store {self.url}: {what} {key}: {type(exc).__name__}: "
                                 f"{first}") from exc
            raise

    def path(self, key: str) -> str:
        """The full path of ``key`` inside the store's file system."""
        return f"{self.root}/{key.lstrip('/')}"

    def exists(self, key: str) -> bool:
        return bool(self._call(lambda: self.fs.exists(self.path(key)), "look up", key))

    def size(self, key: str) -> int:
        """The size in bytes of the object under ``key``."""
        try:
            return int(self._call(lambda: self.fs.size(self.path(key)), "size", key))
        except FileNotFoundError as exc:
            raise StoreError(f"store {self.url}: no object {key}") from exc

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._call(lambda: self.fs.cat_file(self.path(key)), "read", key)
        except FileNotFoundError as exc:
            raise StoreError(f"store {self.url}: no object {key}") from exc

    def read_into(self, key: str, allocate: Callable[[int], T]) -> T:
        """The object under ``key`` read into ``allocate(size)``: a writable buffer of at least
        its size, which is returned. On a file system the bytes go straight into it."""
        def read() -> T:
            if not self.local:
                data = self.fs.cat_file(self.path(key))
                buffer = allocate(len(data))
                memoryview(buffer).cast("B")[: len(data)] = data
                return buffer
            with open(self.path(key), "rb", buffering=0) as fh:
                size = os.fstat(fh.fileno()).st_size
                buffer = allocate(size)
                view, done = memoryview(buffer).cast("B")[:size], 0
                while done < size:
                    got = fh.readinto(view[done:])
                    if not got:
                        raise OSError(f"the file ended after {done} of its {size} bytes")
                    done += got
                return buffer

        try:
            return self._call(read, "read", key)
        except FileNotFoundError as exc:
            raise StoreError(f"store {self.url}: no object {key}") from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key`` atomically (temporary name, then rename)."""
        self.write_with(key, lambda fh: fh.write(data))

    def read_tail(self, key: str, size: int) -> bytes:
        """The last ``size`` bytes of the object under ``key`` (all of it if shorter)."""
        try:
            return self._call(lambda: self.fs.cat_file(self.path(key), start=-size),
                              "read the end of", key)
        except FileNotFoundError as exc:
            raise StoreError(f"store {self.url}: no object {key}") from exc

    def sync(self, key: str) -> None:
        """Make the object under ``key`` durable (written with ``durable=False`` before)."""
        if self.local and os.path.exists(self.path(key)):
            with open(self.path(key), "rb") as fh:
                os.fsync(fh.fileno())

    def write_with(self, key: str, write: Callable[[BinaryIO], object], *,
                   durable: bool = True) -> None:
        """Let ``write`` fill the object under ``key``, atomically.

        On a file system ``write`` streams straight into a temporary file in
        the target's folder, which is renamed into place: no copy of the bytes
        in memory, and no reader ever sees half an object. ``durable`` syncs
        it to disk first; without it a crash of the host (not of a process)
        may lose the object or leave it truncated.
        """
        target = self.path(key)
        if not self.local:
            buffer = io.BytesIO()
            write(buffer)
            data = buffer.getvalue()
            self._call(lambda: self.fs.pipe_file(target, data), "write", key)
            return
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as fh:
                write(fh)
                if durable:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def read_json(self, key: str) -> Any:
        return json.loads(self.read_bytes(key))

    def write_json(self, key: str, value: Any) -> None:
        self.write_bytes(key, json.dumps(value, indent=2, sort_keys=True).encode())

    def list(self, prefix: str) -> list[str]:
        """Keys of the objects below ``prefix`` (recursively), sorted."""
        base = self.path(prefix)
        if self.local and not os.path.exists(base):
            return []
        try:
            found = self._call(lambda: self.fs.find(base), "list", prefix)
        except FileNotFoundError:
            return []
        root = self.root + "/"
        return sorted(p[len(root) :] if p.startswith(root) else p for p in found)

    def delete(self, prefix: str) -> None:
        """Remove ``prefix`` and everything below it; a missing prefix is fine."""
        base = self.path(prefix)

        def remove() -> None:
            if self.fs.exists(base):
                self.fs.rm(base, recursive=True)

        try:
            self._call(remove, "delete", prefix)
        except FileNotFoundError:
            pass  # removed meanwhile (by a retry whose first answer was lost, or another host)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)
