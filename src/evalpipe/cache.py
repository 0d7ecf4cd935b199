"""A replayable, content-addressed cache of chat-completion responses.

Every judge and OpenAI-compatible agent request can go through it: record a run once against a live
model, commit the cache directory, and replay it offline in CI. The key is a SHA-256 of the whole
request (model id, messages, parameters, repetition index) with line endings normalised, so a changed
word of a prompt or a different model misses, and a CRLF checkout does not.

On disk: ``<directory>/<key[:2]>/<key>.json``, one JSON entry per key holding the request, the
response body, its token usage and the creation and expiration times. Writes go to a temporary file
in the same folder and are renamed into place, so concurrent writers (threads or processes) never
leave a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalpipe._internal.files import atomic_path

__all__ = [
    "DEFAULT_TTL",
    "CacheConfig",
    "CacheEntry",
    "CacheError",
    "CacheMissError",
    "CacheMode",
    "CacheStats",
    "ResponseCache",
    "cache_clean",
    "cache_stats",
    "normalize_request",
    "request_key",
]

CacheMode = Literal["record", "replay", "off"]
"""``record``: a hit is served from disk, a miss calls the model and stores the answer.
``replay``: a hit is served from disk, a miss (or an expired entry) is a CacheMissError.
``off``: the cache is neither read nor written."""

DEFAULT_TTL = timedelta(days=3650)
"""Ten years: a committed cache is a test fixture and must not silently expire."""

_SUFFIX = ".json"


class CacheError(Exception):
    """The cache directory or one of its entries cannot be used."""


class CacheMissError(CacheError):
    """In replay mode, a request has no (unexpired) stored answer.

    Attributes:
        key: the request's cache key.
        difference: what differs from the nearest stored request, in words.
    """

    def __init__(self, key: str, difference: str, directory: Path) -> None:
        self.key = key
        self.difference = difference
        super().__init__(
            f"cache miss in replay mode for key {key} in {directory}: {difference}. "
            "Record the cache again (mode='record' against a live endpoint) if the request "
            "changed on purpose."
        )


class CacheEntry(BaseModel):
    """One stored exchange: the normalised request and the response body it got."""

    model_config = ConfigDict(extra="forbid")

    key: str
    """SHA-256 of the normalised request."""
    created: datetime
    """When the entry was written (UTC)."""
    expires: datetime
    """After this moment the entry is a miss (UTC)."""
    request: dict[str, Any]
    """The normalised request the key was computed from."""
    response: dict[str, Any]
    """The endpoint's JSON response body, as received."""
    usage: dict[str, int] | None = None
    """Token counts of the recorded call: input_tokens, output_tokens, total_tokens."""
    latency_s: float | None = None
    """How long the recorded call took (a replay reports 0)."""

    def expired(self, now: datetime | None = None) -> bool:
        """Whether the entry is past its expiration time."""
        return (now or datetime.now(UTC)) >= self.expires


class CacheStats(BaseModel):
    """What a cache directory holds (``evalpipe cache stats``)."""

    model_config = ConfigDict(extra="forbid")

    directory: str
    entries: int = 0
    """Stored entries, expired ones included."""
    expired: int = 0
    """Entries past their expiration time (``evalpipe cache clean`` drops them)."""
    unreadable: int = 0
    """Files that are not valid entries (left alone by ``clean``)."""
    bytes: int = 0
    """Total size of the entry files."""
    oldest: datetime | None = None
    newest: datetime | None = None


class CacheConfig(BaseModel):
    """A response cache as written in a suite: ``{directory: eval-cache, mode: replay}``."""

    model_config = ConfigDict(extra="forbid")

    directory: str
    """The cache directory (commit it to replay in CI)."""
    mode: CacheMode = "record"
    ttl_days: float = Field(default=DEFAULT_TTL.days, ge=0)
    """Days a new entry stays valid."""

    def build(self) -> ResponseCache:
        """The ResponseCache this describes."""
        return ResponseCache(self.directory, mode=self.mode, ttl=timedelta(days=self.ttl_days))

    @classmethod
    def coerce(cls, value: ResponseCache | Mapping[str, Any] | None) -> ResponseCache | None:
        """A ResponseCache from a ResponseCache, a mapping of CacheConfig fields, or None.

        Raises:
            pydantic.ValidationError: for a mapping with bad fields (a ValueError).
            TypeError: for anything else.
        """
        if value is None or isinstance(value, ResponseCache):
            return value
        if isinstance(value, Mapping):
            return cls.model_validate(dict(value)).build()
        raise TypeError(
            f"cache must be a ResponseCache or a mapping like {{directory: ..., mode: replay}}, "
            f"got {type(value).__name__}"
        )


def _normalize(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\r\n", "\n").replace("\r", "\n")
    if isinstance(value, Mapping):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalize(v) for v in value]
    return value


def normalize_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request with every string's line endings turned into ``\\n`` (keys and values).

    Raises:
        TypeError: when the request holds something that is not JSON data.
    """
    normalized = _normalize(request)
    json.dumps(normalized, allow_nan=False)  # fail here, naming nothing secret, if not JSON data
    return dict(normalized)


def request_key(request: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the normalised request as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(
        normalize_request(request), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ResponseCache:
    """Response cache over a directory.

    Args:
        directory: where entries live (created on first write).
        mode: ``record``, ``replay`` or ``off`` (see CacheMode).
        ttl: how long a new entry stays valid; long by default (DEFAULT_TTL).

    Raises:
        ValueError: for an unknown mode or a negative ttl.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        mode: CacheMode = "record",
        ttl: timedelta = DEFAULT_TTL,
    ) -> None:
        if mode not in ("record", "replay", "off"):
            raise ValueError(f"cache mode must be 'record', 'replay' or 'off', got {mode!r}")
        if ttl < timedelta(0):
            raise ValueError(f"cache ttl must not be negative, got {ttl}")
        self.directory = Path(directory)
        self.mode: CacheMode = mode
        self.ttl = ttl
        self._stored: list[CacheEntry] | None = None
        """Entries read once to explain replay misses (replay mode never writes)."""

    def __repr__(self) -> str:
        return f"ResponseCache({str(self.directory)!r}, mode={self.mode!r}, ttl={self.ttl})"

    @property
    def enabled(self) -> bool:
        """Whether requests consult the cache at all."""
        return self.mode != "off"

    def path_for(self, key: str) -> Path:
        """Where the entry for ``key`` is stored."""
        return self.directory / key[:2] / f"{key}{_SUFFIX}"

    def get(self, request: Mapping[str, Any]) -> CacheEntry | None:
        """The unexpired entry stored for ``request``, or None (``off`` mode: always None).

        Raises:
            CacheMissError: in replay mode, when there is none; the text names what differs from
                the nearest stored request.
            CacheError: in replay mode, when the stored entry is not valid JSON of an entry.
        """
        if not self.enabled:
            return None
        key = request_key(request)
        try:
            entry = _read_entry(self.path_for(key))
        except CacheError:
            if self.mode == "replay":
                raise
            entry = None  # record mode: a corrupt entry is recorded again
        if entry is not None and not entry.expired():
            return entry
        if self.mode != "replay":
            return None
        if entry is not None:
            why = f"the stored entry expired at {entry.expires.isoformat()}"
        else:
            why = self.explain_miss(request)
        raise CacheMissError(key, why, self.directory)

    def put(
        self,
        request: Mapping[str, Any],
        response: Mapping[str, Any],
        *,
        usage: Mapping[str, int] | None = None,
        latency_s: float | None = None,
    ) -> CacheEntry | None:
        """Store ``response`` for ``request`` (record mode only; otherwise nothing is written)."""
        if self.mode != "record":
            return None
        normalized = normalize_request(request)
        key = request_key(normalized)
        now = datetime.now(UTC)
        entry = CacheEntry(
            key=key,
            created=now,
            expires=now + self.ttl,
            request=normalized,
            response=dict(response),
            usage=dict(usage) if usage is not None else None,
            latency_s=latency_s,
        )
        path = self.path_for(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as handle:
            handle.write(entry.model_dump_json(indent=1))
            handle.flush()
            os.fsync(handle.fileno())
        return entry

    def entries(self) -> list[CacheEntry]:
        """Every readable entry in the directory (unreadable files are skipped)."""
        return [e for _, e in _iter_entries(self.directory) if e is not None]

    def explain_miss(self, request: Mapping[str, Any]) -> str:
        """In words, how ``request`` differs from the nearest stored request."""
        normalized = normalize_request(request)
        if self._stored is None or self.mode != "replay":
            # When a prompt changed, every request misses: read the directory once, not per miss.
            self._stored = self.entries()
        stored = self._stored
        if not stored:
            return "the cache directory holds no entries"
        nearest = max(stored, key=lambda e: _similarity(normalized, e.request))
        return f"nearest stored request is {nearest.key}: {_describe_difference(normalized, nearest.request)}"


def _similarity(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[int, int, int]:
    same_model = int(a.get("model") == b.get("model"))
    prefix = _first_difference(a.get("messages") or [], b.get("messages") or [])
    same_fields = sum(1 for k in set(a) | set(b) if a.get(k) == b.get(k))
    return same_model, prefix, same_fields


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_difference(a: Sequence[Any], b: Sequence[Any]) -> int:
    """The index of the first item where ``a`` and ``b`` differ (the shorter one's length when
    one starts the other)."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _describe_difference(request: Mapping[str, Any], stored: Mapping[str, Any]) -> str:
    parts = [
        f"{field} is {_short(request.get(field))} (stored: {_short(stored.get(field))})"
        for field in sorted((set(request) | set(stored)) - {"messages"})
        if request.get(field) != stored.get(field)
    ]
    mine: list[Any] = list(request.get("messages") or [])
    theirs: list[Any] = list(stored.get("messages") or [])
    i = _first_difference(mine, theirs)
    if mine != theirs and i >= min(len(mine), len(theirs)):
        parts.append(f"messages has {len(mine)} message(s), the stored request {len(theirs)}")
    elif mine != theirs:
        m, t = mine[i], theirs[i]
        a, b = (x.get("content") if isinstance(x, Mapping) else None for x in (m, t))
        if isinstance(a, str) and isinstance(b, str) and m.get("role") == t.get("role"):
            at = _first_difference(a, b)
            start = max(0, at - 20)
            parts.append(
                f"messages[{i}] ({m.get('role')}) content differs at character {at}: "
                f"{_short(a[start : at + 40])!r} vs stored {_short(b[start : at + 40])!r}"
            )
        else:
            parts.append(f"messages[{i}] differs: {_short(m)} (stored: {_short(t)})")
    return "; ".join(parts) or "no difference found (the entry may be unreadable)"


def _read_entry(path: Path) -> CacheEntry | None:
    try:
        return CacheEntry.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except ValidationError as exc:
        raise CacheError(
            f"{path}: not a valid cache entry ({exc.error_count()} error(s), first: "
            f"{exc.errors()[0]['msg']}); delete the file or record it again"
        ) from None


def _iter_entries(directory: Path) -> Iterator[tuple[Path, CacheEntry | None]]:
    """Every entry file of ``directory`` (none when it is missing), None for an unreadable one."""
    for path in sorted(directory.glob(f"*/*{_SUFFIX}")):
        try:
            yield path, _read_entry(path)
        except (OSError, CacheError):
            yield path, None


def cache_stats(directory: str | os.PathLike[str]) -> CacheStats:
    """Count the entries of a cache directory: total, expired, unreadable, bytes, oldest/newest.

    A missing directory gives zero counts.
    """
    root = Path(directory)
    stats = CacheStats(directory=str(root))
    now = datetime.now(UTC)
    created: list[datetime] = []
    for path, entry in _iter_entries(root):
        try:
            stats.bytes += path.stat().st_size
        except OSError:
            continue
        if entry is None:
            stats.unreadable += 1
            continue
        stats.entries += 1
        if entry.expired(now):
            stats.expired += 1
        created.append(entry.created)
    if created:
        stats.oldest, stats.newest = min(created), max(created)
    return stats


def cache_clean(directory: str | os.PathLike[str]) -> int:
    """Delete the expired entries of a cache directory; returns how many were deleted.

    Unreadable files are left alone (``cache_stats`` counts them).
    """
    removed = 0
    now = datetime.now(UTC)
    for path, entry in _iter_entries(Path(directory)):
        if entry is not None and entry.expired(now):
            path.unlink(missing_ok=True)
            removed += 1
    return removed
