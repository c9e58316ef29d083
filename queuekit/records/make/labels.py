"""The labels file: one class name per line, in label order, escaped so any name fits.

A class folder's name may hold a newline, a backslash or bytes that are not
UTF-8. Each name is written as its UTF-8 bytes (undecodable file-system bytes
kept as they were: ``surrogateescape``), with ``\\`` written ``\\\\``, a
newline ``\\n`` and a carriage return ``\\r``: names without those characters
(nearly all) read back as plain lines, and every name round-trips through
:func:`read_labels`.
"""

from __future__ import annotations

_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"\\": "\\", "n": "\n", "r": "\r"}


def escape(name: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in name)


def unescape(line: str) -> str:
    out, chars = [], iter(line)
    for c in chars:
        if c == "\\":
            nxt = next(chars, "")
            out.append(_UNESCAPES.get(nxt, "\\" + nxt))
        else:
            out.append(c)
    return "".join(out)


def labels_text(names) -> str:
    return "".join(escape(n) + "\n" for n in names)


def write_labels(path: str, names) -> None:
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        f.write(labels_text(names))


def read_labels(path: str) -> list[str]:
    """The class names of a labels file, in label order."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        return [unescape(line) for line in f.read().split("\n")[:-1]]
