"""Putting a dataset in place as one unit, and cleaning up what a dead run left behind.

A dataset is its shard files, its labels file and a manifest written last: a
folder without the manifest is not a complete dataset. The commit first moves
every file of the previous dataset of the same name aside (also shards of an
earlier, different ``--shards``), renames the new files in, and only then
removes the old ones; if any rename fails, the new files are removed and the
old ones moved back.

One ``make`` writes an output at a time: it holds the output's lock
(:func:`output_lock`) from before it looks at the folder until the commit is
done. So the temp and spool files of that output that it finds are a dead
run's, whatever PID namespace that run had, and it removes them; a second
``make`` to the same output fails at once instead of mixing two datasets.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import stat

from queuekit.errors import DatasetError, OutputExistsError
from queuekit.records.make.guard import exclusive

log = logging.getLogger(__name__)

_OURS = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-f]{8}\.(?:tmp|old)$")


def output_lock(output: str):
    """The lock the one ``make`` writing ``output`` holds (a context manager).

    Raises:
        OutputBusyError: another live ``make`` writes ``output``.
    """
    folder, name = os.path.split(output)
    return exclusive(os.path.join(folder, f".{name}.queuekit-lock"), f"output {output}")


def spool_prefix(output: str) -> str:
    """The name prefix of the spool (and Beam staging) folders of ``output``'s writer."""
    return f".{os.path.basename(output)}.queuekit-spool-"


def manifest_path(output: str) -> str:
    """The manifest written beside ``output`` when the dataset is complete."""
    return output + ".manifest.json"


def skipped_path(output: str) -> str:
    """The list of skipped images a Beam ``make`` writes beside ``output``."""
    return output + ".skipped.jsonl"


def check_output(output: str) -> str:
    """The absolute output path, with its folder created; errors name the path, before work.

    Raises:
        DatasetError: ``output`` is (or ends like) a folder, or a file is in the way.
        OSError: the folder cannot be created or written, naming it.
    """
    text = os.fspath(output)
    if text.endswith((os.sep, os.altsep or os.sep)) or os.path.isdir(text):
        raise DatasetError(f"output {text} is a folder; give a file path, e.g. "
                           f"{os.path.join(text, 'data.tfrecords')}")
    path = os.path.abspath(text)
    folder = os.path.dirname(path)
    probe = folder
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise DatasetError(f"cannot create the output folder {folder}: {probe} is a file")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, f"cannot create the output folder: {e.strerror}", folder) from e
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(13, "output folder is not writable", folder)
    return path


def remove_stale(output: str, names) -> list[str]:
    """Remove the temp and spool files a dead run left for ``output`` (and its ``names``).

    Call it holding :func:`output_lock`: no live run owns such files then. Only
    regular files and spool folders, never through a link.
    """
    removed: list[str] = []
    names = set(names)
    folder = os.path.dirname(output)
    spool = spool_prefix(output)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        ours = _OURS.match(entry.name)
        if entry.name.startswith(spool) and entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)  # does not follow links
        elif ours and ours.group("name") in names and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except OSError:
                continue
        else:
            continue
        log.warning("removed %s, left by a queuekit run that was killed", entry.path)
        removed.append(entry.path)
    return removed


def previous_dataset(output: str) -> list[str]:
    """The existing files of a dataset written to ``output``: any shard count, labels, manifest.

    Raises:
        OutputExistsError: one of them is not a regular file (a device, a FIFO, a
            link, a folder): ``--overwrite`` replaces only the files of a dataset.
    """
    folder, name = os.path.split(output)
    stem, ext = os.path.splitext(name)
    shard = re.compile(re.escape(stem) + r"-\d{5}-of-\d{5}" + re.escape(ext or ".tfrecords") + "$")
    extras = {name, name + ".labels.txt", name + ".manifest.json", name + ".skipped.jsonl"}
    try:
        entries = sorted(os.listdir(folder))
    except OSError:
        return []
    found = [os.path.join(folder, e) for e in entries if e in extras or shard.match(e)]
    for path in found:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            raise OutputExistsError(f"{path} is not a regular file (a link, device, FIFO or "
                                    f"folder): queuekit replaces only regular files; remove "
                                    f"it yourself or choose another output")
    return found


def _aside(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.{os.getpid()}-{secrets.token_hex(4)}.old")


def commit(moves: list[tuple[str, str]], previous: list[str]) -> None:
    """Rename each (temp, final) into place, the last one last; move ``previous`` aside first.

    On any failure the new files are removed and the previous ones restored.
    """
    finals = {final for _, final in moves}
    backups: list[tuple[str, str]] = []
    placed: list[str] = []
    try:
        for path in sorted(set(previous) | {f for f in finals if os.path.lexists(f)}):
            if os.path.lexists(path):
                aside = _aside(path)
                os.replace(path, aside)
                backups.append((aside, path))
        for tmp, final in moves:
            os.replace(tmp, final)
            placed.append(final)
    except BaseException:
        for final in placed:
            try:
                os.unlink(final)
            except OSError:
                pass
        for aside, path in backups:
            try:
                os.replace(aside, path)
            except OSError:
                log.error("could not restore %s from %s", path, aside)
        raise
    for aside, _ in backups:
        try:
            os.unlink(aside)
        except OSError:
            pass


def manifest_text(*, shards: list[str], records: list[int], labels: str, classes: list[str],
                  image_size, encoding: str, schema: str = "queuekit") -> str:
    """The manifest: what the dataset holds, written last."""
    return json.dumps({
        "format": "queuekit-dataset", "version": 1, "schema": schema,
        "shards": [os.path.basename(s) for s in shards], "records": records,
        "total_records": sum(records), "labels": os.path.basename(labels),
        "classes": classes, "image_size": list(image_size), "encoding": encoding,
    }, indent=2, ensure_ascii=False) + "\n"
