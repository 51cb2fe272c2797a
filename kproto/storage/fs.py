"""Where the readers' bytes come from: local paths, or ``s3://``, ``gs://``, ``hdfs://`` and any
other ``pyarrow.fs`` or fsspec URI.

Local paths (no ``scheme://``, or ``file://``) keep the plain ``os`` calls (and the readers their
mmap): every function here checks :func:`is_remote` first. A URI is resolved once per
``scheme://authority`` to a ``pyarrow.fs.FileSystem``: ``s3``/``s3a`` to ``S3FileSystem``, ``gs``
to ``GcsFileSystem``, ``hdfs`` to ``HadoopFileSystem``, other schemes pyarrow knows through
``FileSystem.from_uri``, and schemes only fsspec knows through
``PyFileSystem(FSSpecHandler(fsspec.filesystem(scheme)))``. Credentials come from where those
libraries look (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``~/.aws``, instance roles, ``GOOGLE_APPLICATION_CREDENTIALS``, ...; ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` for an S3-compatible server, as boto3 reads them), or from options given with
:func:`configure` (the keyword arguments of the filesystem class, e.g. ``endpoint_override``,
``access_key``, ``secret_key``, ``region``, ``scheme``; for fsspec its storage options).

Remote listings are one request per folder; what they say of each entry (kind, size) is kept
and answers the ``isfile``/``isdir``/``getsize`` that follow, until the folder is listed again.
Reads are byte ranges (:func:`read_range`: one ranged GET), never a whole object per small read.
"""
from __future__ import annotations

import mmap
import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping
from urllib.parse import urlsplit

if TYPE_CHECKING:  # imported where used: local paths (and `import kproto.storage`) skip them
    import pyarrow as pa
    import pyarrow.fs as pafs

__all__ = ["Entry", "configure", "exists", "getsize", "glob", "is_remote", "isdir", "isfile",
           "join", "listdir", "mapped_file", "normpath", "open_input", "read_range", "resolve",
           "walk_files"]

_S3 = ("s3", "s3a", "s3n")
_TRUE, _FALSE = ("true", "yes"), ("false", "no")
# the numeric arguments of pyarrow's S3, GCS and HDFS filesystems
_NUMERIC = frozenset({"connect_timeout", "request_timeout", "retry_limit_seconds", "replication",
                      "buffer_size", "default_block_size", "port"})
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+")  # RFC 3986; one letter is a Windows drive


def is_remote(path: str | os.PathLike[str]) -> bool:
    """True for a ``scheme://`` URI other than ``file://`` (those go through pyarrow/fsspec)."""
    path = os.fspath(path)
    i = path.find("://")
    return i > 1 and _SCHEME.fullmatch(path[:i]) is not None and path[:i].lower() != "file"


def _local(path: str) -> str:
    return path[7:] if path[:7].lower() == "file://" else path


def _root(path: str) -> tuple[str, str, str]:
    """``(scheme, "scheme://authority", rest)`` of a URI, ``rest`` without leading slash."""
    # not urlsplit: a "?" or "#" is part of a key (or a glob pattern), not a query
    scheme, _, after = path.partition("://")
    netloc, _, rest = after.partition("/")
    return scheme.lower(), f"{scheme}://{netloc}", rest.lstrip("/")


def normpath(path: str | os.PathLike[str]) -> str:
    """``os.path.normpath`` that keeps a URI's ``scheme://authority`` (a ``pathlib.Path`` is
    a local path)."""
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.normpath(_local(path))
    _, root, rest = _root(path)
    rest = os.path.normpath(rest) if rest else ""
    return root if rest in ("", ".") else f"{root}/{rest}"


def join(path: str, *names: str) -> str:
    """``os.path.join`` for local paths and URIs alike."""
    return os.path.join(path, *names)


# ------------------------------------------------------------------------ filesystems
_options: dict[str, dict[str, Any]] = {}
_filesystems: dict[tuple[str, tuple], tuple[pafs.FileSystem, str]] = {}
_lock = threading.Lock()


def _coerce(key: str, value: Any) -> Any:
    """Spark hands options over as strings, the filesystem classes check their argument
    types: ``true``/``false`` become booleans, the values of numeric arguments numbers."""
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE + _FALSE:
            return low in _TRUE
        if key in _NUMERIC:
            return float(low) if "." in low else int(low)
    return value


def configure(path: str, options: Mapping[str, Any] | None) -> None:
    """Use ``options`` for the filesystem of ``path``'s ``scheme://authority`` from now on in
    this process (nothing for a local path or empty options). The readers call it with their
    ``storage_options``."""
    if not options or not is_remote(path):
        return
    _, root, _ = _root(path)
    with _lock:
        _options[root] = {k: _coerce(k, v) for k, v in options.items()}


def _make(scheme: str, root: str, opts: dict[str, Any]) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``root`` and the inner path of the root itself."""
    import pyarrow.fs as pafs
    netloc = urlsplit(root).netloc
    if scheme in _S3:
        # built directly: FileSystem.from_uri would ask AWS for the bucket's region first
        return pafs.S3FileSystem(**opts), netloc
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(**opts), netloc
    if scheme in ("hdfs", "viewfs"):
        parts = urlsplit(root)  # no host: the fs.defaultFS of core-site.xml
        return pafs.HadoopFileSystem(parts.hostname or "default", parts.port or 0, **opts), "/"
    if not opts:
        try:
            fs, inner = pafs.FileSystem.from_uri(root + "/")
            return fs, inner.rstrip("/") or "/"
        except (ValueError, TypeError):  # pyarrow.lib.ArrowInvalid: a scheme pyarrow lacks
            pass
    try:
        import fsspec
        from pyarrow.fs import FSSpecHandler, PyFileSystem
    except ImportError:
        raise ValueError(f"{root}: pyarrow has no filesystem for {scheme}:// and fsspec is "
                         f"not installed") from None
    try:
        impl = fsspec.filesystem(scheme, **opts)
    except ValueError as exc:
        raise ValueError(f"{root}: unknown filesystem {scheme}:// ({exc})") from None
    return PyFileSystem(FSSpecHandler(impl)), impl._strip_protocol(root) or "/"


def resolve(path: str) -> tuple[pafs.FileSystem, str]:
    """``(filesystem, path in it)`` for a local path or URI (the filesystem of a URI root is
    made once per options given to :func:`configure`)."""
    import pyarrow.fs as pafs
    if not is_remote(path):
        return pafs.LocalFileSystem(), os.path.abspath(_local(path))
    scheme, root, rest = _root(path)
    opts = _options.get(root, {})
    if scheme in _S3 and "endpoint_override" not in opts:
        # the AWS SDKs' variables (boto3, the CLI), which pyarrow's S3 client does not read
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            opts = {**opts, "endpoint_override": endpoint}
    key = (root, tuple(sorted((k, repr(v)) for k, v in opts.items())))
    with _lock:
        made = _filesystems.get(key)
    if made is None:
        made = _make(scheme, root, opts)
        with _lock:
            _filesystems[key] = made
    fs, base = made
    if not rest:
        return fs, base
    head = base.rstrip("/")
    return fs, f"{head}/{rest}" if head or base == "/" else rest


# ------------------------------------------------------------------------ listing
@dataclass(frozen=True)
class Entry:
    """One entry of a folder listing."""

    name: str
    is_dir: bool
    is_file: bool
    size: int | None = None  # files of a remote listing (local: ask getsize)


_info: dict[str, Entry] = {}  # URI -> what the last listing of its folder said of it


def _missing(path: str, exc: Exception | None = None) -> FileNotFoundError:
    why = f" ({exc})" if exc is not None else ""
    return FileNotFoundError(2, f"no such file, folder or bucket{why}", path)


def _file_info(path: str, infos) -> list[Entry]:
    import pyarrow.fs as pafs
    out = []
    for info in infos:
        name = info.base_name
        if info.type == pafs.FileType.Directory:
            entry = Entry(name, True, False)
        elif info.type == pafs.FileType.File:
            entry = Entry(name, False, True, info.size)
        else:
            continue
        _info[join(path, name)] = entry
        out.append(entry)
    return out


def listdir(path: str) -> list[Entry]:
    """The entries of a folder (one listing request for a URI); ``FileNotFoundError`` when
    there is no such folder (or bucket)."""
    if not is_remote(path):
        local = _local(path)
        with os.scandir(local) as it:  # follows symbolic links, as os.path.isdir/isfile do
            return [Entry(e.name, e.is_dir(), e.is_file()) for e in it]
    import pyarrow.fs as pafs
    fs, inner = resolve(path)
    # pyarrow's GCS lists a folder's subfolders only when they have a folder marker object,
    # which most writers (gsutil, rclone, Kafka's tiered storage) never make: this folder's
    # entries are taken from a recursive listing, its subfolders from the paths in them
    deep = fs.type_name == "gcs"
    try:
        infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=False, recursive=deep))
    except FileNotFoundError as exc:
        raise _missing(path, exc) from None
    except OSError as exc:
        if "NoSuchBucket" in str(exc) or "does not exist" in str(exc):
            raise _missing(path, exc) from None
        raise
    if deep:
        infos = _children(inner, infos)
    return _file_info(path.rstrip("/"), infos)


def _children(inner: str, infos: list) -> list:
    """The entries directly in folder ``inner`` of a recursive listing under it: its files,
    and a folder for every first path component of a deeper entry."""
    import pyarrow.fs as pafs
    head = inner.rstrip("/")
    out: list = []
    folders: dict[str, Any] = {}
    for info in infos:
        rel = info.path[len(head) + 1:].strip("/")
        name, sep, _ = rel.partition("/")
        if sep or info.type == pafs.FileType.Directory:
            folders.setdefault(name, pafs.FileInfo(f"{head}/{name}", pafs.FileType.Directory))
        elif rel:
            out.append(info)
    return out + [folders[n] for n in sorted(folders)]


def walk_files(path: str) -> list[tuple[str, int]]:
    """``(path, size)`` of every file under a folder, recursively (one listing for a URI;
    folders and files whose name starts with a dot are left out)."""
    if not is_remote(path):
        out = []
        for root, dirs, files in os.walk(_local(path)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            out += [(os.path.join(root, f), os.path.getsize(os.path.join(root, f)))
                    for f in sorted(files) if not f.startswith(".")]
        return out
    import pyarrow.fs as pafs
    fs, inner = resolve(path)
    try:
        infos = fs.get_file_info(pafs.FileSelector(inner, recursive=True, allow_not_found=False))
    except FileNotFoundError as exc:
        raise _missing(path, exc) from None
    base = path.rstrip("/")
    out = []
    for info in infos:
        if info.type != pafs.FileType.File:
            continue
        rel = info.path[len(inner.rstrip("/")) + 1:]
        if any(part.startswith(".") for part in rel.split("/")):
            continue
        out.append((f"{base}/{rel}", info.size))
    return sorted(out)


def _stat(path: str) -> Entry | None:
    import pyarrow.fs as pafs
    entry = _info.get(path)
    if entry is not None:
        return entry
    fs, inner = resolve(path)
    info = fs.get_file_info(inner)
    if info.type == pafs.FileType.Directory:
        return Entry(info.base_name, True, False)
    if info.type == pafs.FileType.File:
        return Entry(info.base_name, False, True, info.size)
    return None


def isdir(path: str) -> bool:
    """``os.path.isdir`` for local paths and URIs."""
    if not is_remote(path):
        return os.path.isdir(_local(path))
    entry = _stat(path)
    return entry is not None and entry.is_dir


def isfile(path: str) -> bool:
    """``os.path.isfile`` for local paths and URIs."""
    if not is_remote(path):
        return os.path.isfile(_local(path))
    entry = _stat(path)
    return entry is not None and not entry.is_dir


def exists(path: str) -> bool:
    """``os.path.exists`` for local paths and URIs."""
    return os.path.exists(_local(path)) if not is_remote(path) else _stat(path) is not None


def getsize(path: str) -> int:
    """``os.path.getsize`` for local paths and URIs (``FileNotFoundError`` if missing)."""
    if not is_remote(path):
        return os.path.getsize(_local(path))
    entry = _stat(path)
    if entry is None or entry.is_dir or entry.size is None:
        raise _missing(path)
    return entry.size


def open_input(path: str) -> pa.NativeFile:
    """A file opened for random access (``read_at(n, offset)``: one ranged GET of a URI);
    ``FileNotFoundError`` when missing."""
    import pyarrow as pa
    if not is_remote(path):
        return pa.OSFile(_local(path), "rb")
    fs, inner = resolve(path)
    try:
        return fs.open_input_file(inner)  # S3: one HEAD, for the size
    except FileNotFoundError as exc:
        raise _missing(path, exc) from None


def read_range(path: str, start: int = 0, end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of a file (to its end when ``end`` is None): a seek and read of
    a local file, one ranged read of a URI."""
    if not is_remote(path):
        with open(_local(path), "rb") as f:
            if start:
                f.seek(start)
            return f.read(-1 if end is None else max(0, end - start))
    with open_input(path) as f:
        stop = f.size() if end is None else min(end, f.size())
        return bytes(f.read_at(stop - start, start)) if stop > start else b""


def _glob_regex(pattern: str) -> re.Pattern:
    """``glob``'s matching rules as a regex: ``*``, ``?`` and ``[...]`` stay within a folder
    name, ``**/`` spans any number of folders."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("/**", i) and i + 3 == len(pattern):
            out.append("(?:/.*)?")  # "d/**" is d itself and all below it
            i += 3
        elif pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            j = pattern.index("]", i + 2)
            body = pattern[i + 1:j]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))


def glob(pattern: str) -> list[str]:
    """``glob.glob(pattern, recursive=True)`` for a URI: what matches under the pattern's
    fixed leading folder (one listing, recursive when the pattern spans folders)."""
    import pyarrow.fs as pafs
    _, root, rest = _root(pattern)
    parts = rest.split("/")
    fixed = 0
    while fixed < len(parts) and not any(c in parts[fixed] for c in "*?["):
        fixed += 1
    base = "/".join([root] + parts[:fixed])
    remaining = "/".join(parts[fixed:])
    fs, inner = resolve(base)
    try:
        infos = fs.get_file_info(pafs.FileSelector(inner, recursive="/" in remaining
                                                   or "**" in remaining, allow_not_found=True))
    except FileNotFoundError:
        return []
    rx = _glob_regex(remaining)
    cut = len(inner.rstrip("/")) + 1
    out = [base] if remaining == "**" and fs.get_file_info(inner).type == pafs.FileType.Directory \
        else []
    for info in infos:
        rel = info.path[cut:]
        if rx.fullmatch(rel):
            out.append(f"{base}/{rel}")
            _file_info(os.path.dirname(out[-1]), [info])  # what exists/getsize ask next
    return sorted(out)


@contextmanager
def mapped_file(path: str) -> Iterator[memoryview]:
    """A local file mapped read-only, as a memoryview (empty for an empty file), unmapped
    at the end unless a view of it is still alive (the GC unmaps it then)."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            yield memoryview(b"")
            return
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    view = memoryview(mm)
    try:
        yield view
    finally:
        view.release()
        try:
            mm.close()
        except BufferError:
            pass
