"""Reading a JSON input file, plain or gzipped, with a one-line error for every way it can fail.

Traces and calibration files are read this way: the gzip magic bytes decide (not the file name),
a byte-order mark is allowed, and a file that is not JSON, nested past the parser's stack or
holding a number of thousands of digits is an error naming the file, never a traceback.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of a gzip file."""


def load_json_file(path: Path, noun: str, error: Callable[[str], Exception]) -> Any:
    """The JSON value in ``path`` (gzipped or not).

    Args:
        path: the file.
        noun: what the file should be, for messages ("trace", "calibration file").
        error: builds the exception to raise from a message (``FILE: what is wrong``).

    Raises:
        FileNotFoundError: ``path`` does not exist (the caller knows what to suggest).
        Exception: ``error(message)`` for any other failure.
    """
    if path.exists() and not path.is_file() and not path.is_dir():
        raise error(f"{path}: not a regular file (a pipe or a device?)")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise
    except OSError as failure:
        raise error(f"{path}: cannot read ({failure.strerror or failure})") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as failure:  # zlib: a gzip header over a corrupt deflate stream
            raise error(f"{path}: broken gzip file ({failure})") from None
    try:
        return json.loads(raw.decode("utf-8-sig"))  # a byte-order mark is not an error
    except UnicodeDecodeError as failure:
        raise error(f"{path}: not UTF-8 text (byte {failure.start}); expected JSON, plain or gzipped, "
                    f"for a {noun}") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply to be a {noun}") from None
    except json.JSONDecodeError as failure:
        raise error(f"{path}: not valid JSON (line {failure.lineno}, column {failure.colno}: {failure.msg}); "
                    f"truncated, or not a {noun}?") from None
    except ValueError:  # (after JSONDecodeError, a ValueError too) an integer past Python's 4300 digits
        raise error(f"{path}: not a {noun} (a number of thousands of digits)") from None
