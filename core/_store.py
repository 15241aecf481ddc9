"""The store: shards, checkpoints and the model registry, behind one fsspec URL.

A key is a ``/``-separated path relative to the store's root. Writes are
atomic: on a local or shared file system the bytes go to a temporary name in
the same folder and are renamed into place; on object stores a single put is
already atomic. A reader therefore sees either the whole object or nothing,
which is what makes "skip the hop if its checkpoint exists" safe.
"""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Callable
from typing import Any, BinaryIO

import fsspec

from hoptune.core._errors import StoreError

__all__ = ["Store"]


class Store:
    """Bytes and JSON by key under one root URL (a folder, ``file://…`` or ``s3://…``)."""

    def __init__(self, url: str) -> None:
        self.url = str(url)
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as exc:
            raise StoreError(f"store {self.url}: {exc}") from exc
        self.root = root.rstrip("/")
        self.local = "file" in _protocols(self.fs)

    def path(self, key: str) -> str:
        """The full path of ``key`` inside the store's file system."""
        return f"{self.root}/{key.lstrip('/')}"

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self.path(key)))

    def read_bytes(self, key: str) -> bytes:
        try:
            return self.fs.cat_file(self.path(key))
        except FileNotFoundError as exc:
            raise StoreError(f"store {self.url}: no object {key}") from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        """Write ``data`` under ``key`` atomically (temporary name, then rename)."""
        self.write_with(key, lambda fh: fh.write(data))

    def read_tail(self, key: str, size: int) -> bytes:
        """The last ``size`` bytes of the object under ``key`` (all of it if shorter)."""
        try:
            return self.fs.cat_file(self.path(key), start=-size)
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
            self.fs.pipe_file(target, buffer.getvalue())
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
        if not self.fs.exists(base):
            return []
        found = self.fs.find(base)
        root = self.root + "/"
        return sorted(p[len(root) :] if p.startswith(root) else p for p in found)

    def delete(self, prefix: str) -> None:
        """Remove ``prefix`` and everything below it; a missing prefix is fine."""
        base = self.path(prefix)
        if self.fs.exists(base):
            self.fs.rm(base, recursive=True)

    def move_folder(self, source: str, target: str, *, last: str | None = None) -> None:
        """Move the folder ``source`` to ``target``, which must not exist yet.

        On a file system one rename: a reader sees the whole folder or none
        of it. Elsewhere (object stores have no folders) each object is
        copied, the one named ``last`` after the others, then the source goes.
        """
        src, dst = self.path(source), self.path(target)
        if self.fs.exists(dst):
            raise StoreError(f"store {self.url}: {target} exists already")
        if self.local:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            os.rename(src, dst)
            return
        keys = self.list(source)
        ordered = [k for k in keys if k.rsplit("/", 1)[-1] != last]
        ordered += [k for k in keys if k.rsplit("/", 1)[-1] == last]
        for key in ordered:
            self.fs.copy(self.path(key), dst + key[len(source):])
        self.delete(source)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"


def _protocols(fs: fsspec.AbstractFileSystem) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)
