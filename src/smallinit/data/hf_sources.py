"""The ``hf:`` inputs of :mod:`smallinit.data.sources`: opening Hugging Face datasets and checking the Hub first.

- :func:`load_hf_online`: ``hf:NAME[:CONFIG][:SPLIT]`` as a streaming dataset; fails at once when offline
  (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE, :func:`hf_offline_flag`) or when the Hub does not answer
  (:func:`hf_unreachable_reason`, a TCP probe of :func:`hf_probe_address` in a daemon thread).
- :func:`load_hf_disk`: ``hf:/path/to/dir[:SPLIT]``, a dataset saved with ``save_to_disk`` (works offline).

``src`` is a :class:`smallinit.data.sources.Source` (this module does not import it: sources imports this one).
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

from smallinit.core.errors import DataError

HF_PROBE_TIMEOUT_S = 3.0
HF_DEFAULT_ENDPOINT = "https://huggingface.co"


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def hf_offline_flag() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("HF_DATASETS_OFFLINE")


def hf_probe_address() -> tuple[str, int]:
    """(host, port) of the Hub endpoint ($HF_ENDPOINT or huggingface.co)."""
    u = urlparse(os.environ.get("HF_ENDPOINT") or HF_DEFAULT_ENDPOINT)
    return u.hostname or "huggingface.co", u.port or (443 if u.scheme != "http" else 80)


def hf_unreachable_reason(address: tuple[str, int] | None = None, timeout: float = HF_PROBE_TIMEOUT_S) -> str | None:
    """None when a TCP connection to the Hub succeeds within ``timeout`` seconds, else why not.

    Runs in a daemon thread so that a hanging DNS lookup cannot stall the caller past ``timeout``.
    """
    host, port = address or hf_probe_address()
    result: list[str | None] = []

    def probe():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(None)
        except OSError as e:
            result.append(f"{type(e).__name__}: {e.strerror or e}")

    t = threading.Thread(target=probe, daemon=True)
    t.start()
    t.join(timeout + 0.5)
    return result[0] if result else f"no answer within {timeout:.0f} s"


def load_hf_online(src):
    """Open ``hf:NAME[:CONFIG][:SPLIT]`` as a streaming dataset; fails at once when offline."""
    hint = "offline, save it with datasets' save_to_disk and pass hf:/path/to/dir"
    try:
        import datasets
    except ImportError:
        raise DataError(f"{src.spec}: needs the 'datasets' package (pip install smallinit[hf])") from None
    split = src.hf_split or "train"
    if hf_offline_flag():
        # Offline mode: only the local cache can answer. ``datasets`` reads the flag when first
        # imported; if it missed it (set later), it would go online, so fail instead.
        if not getattr(datasets.config, "HF_HUB_OFFLINE", False):
            raise DataError(f"{src.spec}: offline mode is set (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); {hint}")
        try:
            return datasets.load_dataset(src.hf_name, src.hf_config, split=split)
        except Exception as e:
            raise DataError(
                f"{src.spec}: not in the local Hugging Face cache and offline mode is set "
                f"(HF_HUB_OFFLINE/HF_DATASETS_OFFLINE); {hint} ({type(e).__name__})"
            ) from None
    reason = hf_unreachable_reason()
    if reason is not None:
        host, port = hf_probe_address()
        raise DataError(f"{src.spec}: cannot reach {host}:{port} ({reason}); {hint}")
    try:
        return datasets.load_dataset(src.hf_name, src.hf_config, split=split, streaming=True)
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{src.spec}: {msg}") from None


def load_hf_disk(src, text_field: str):
    """Open a dataset saved with ``save_to_disk`` (a Dataset, or a DatasetDict and a split)."""
    try:
        import datasets
    except ImportError:
        raise DataError(f"{src.spec}: needs the 'datasets' package (pip install smallinit[hf])") from None
    try:
        ds = datasets.load_from_disk(str(src.path))
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{src.spec}: not a dataset saved with save_to_disk ({msg})") from None
    if isinstance(ds, datasets.DatasetDict):
        splits = list(ds)
        split = src.hf_split or ("train" if "train" in ds else (splits[0] if len(splits) == 1 else None))
        if split not in ds:
            raise DataError(f"{src.spec}: choose a split with hf:PATH:SPLIT (have: {', '.join(splits)})")
        ds = ds[split]
    elif src.hf_split:
        raise DataError(f"{src.spec}: the saved dataset has no splits, drop ':{src.hf_split}'")
    if text_field not in ds.column_names:
        raise DataError(f"{src.spec}: no column {text_field!r} (have: {', '.join(ds.column_names)}); use --text-field")
    return ds
