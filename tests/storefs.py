"""A Beam file system with a scheme, for tests: ``qktest:///abs/path`` is the local ``/abs/path``.

It takes the code paths a ``gs://`` or ``s3://`` output takes (a scheme, no
os.rename, Beam's own rename and delete) without a network. Beam finds file
systems as the subclasses of ``FileSystem`` in the process, so it works for
pipelines run in this process (``in_memory``, one worker).
"""

import posixpath

from apache_beam.io.filesystem import FileMetadata
from apache_beam.io.localfilesystem import LocalFileSystem

PREFIX = "qktest://"


def local(path: str) -> str:
    return path[len(PREFIX):] if path.startswith(PREFIX) else path


def remote(path: str) -> str:
    return PREFIX + path


class StoreFileSystem(LocalFileSystem):
    @classmethod
    def scheme(cls):
        return "qktest"

    def join(self, basepath, *paths):
        return posixpath.join(basepath, *paths)

    def split(self, path):
        head, tail = posixpath.split(local(path))
        return remote(head), tail

    def _url_dirname(self, url_or_path):
        return posixpath.dirname(url_or_path)

    def _list(self, dir_or_prefix):
        for meta in super()._list(local(dir_or_prefix)):
            yield FileMetadata(remote(meta.path), meta.size_in_bytes, meta.last_updated_in_seconds)

    def mkdirs(self, path):
        return super().mkdirs(local(path))

    def create(self, path, *args, **kwargs):
        return super().create(local(path), *args, **kwargs)

    def open(self, path, *args, **kwargs):
        return super().open(local(path), *args, **kwargs)

    def copy(self, sources, destinations):
        return super().copy([local(p) for p in sources], [local(p) for p in destinations])

    def rename(self, sources, destinations):
        return super().rename([local(p) for p in sources], [local(p) for p in destinations])

    def exists(self, path):
        return super().exists(local(path))

    def size(self, path):
        return super().size(local(path))

    def last_updated(self, path):
        return super().last_updated(local(path))

    def checksum(self, path):
        return super().checksum(local(path))

    def metadata(self, path):
        meta = super().metadata(local(path))
        return FileMetadata(path, meta.size_in_bytes, meta.last_updated_in_seconds)

    def delete(self, paths):
        return super().delete([local(p) for p in paths])
