"""Keep credentials out of messages and logs: URL user-info, query-string values, API keys echoed back.

Why here and not at each ``raise``: an error line is built from pieces that come from elsewhere
(a server's error body that quotes the ``Authorization`` header, an httpx exception that repeats the
URL, a judge reply). ``Redactor`` is applied to the finished text, so a piece added later is covered
too. Every pattern is a literal prefix followed by one quantified character class, so redaction
stays linear in the length of the text it cleans.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import attrs

MASK = "***"

#: Keys naming a credential. A key ending in "token" is one (``token``, ``hf_token``, ``access_token``);
#: a count or name of tokens is not (``max_new_tokens``, ``tokenizer``: they were masked, so logs and
#: dashboards showed ``***`` for a run's token budgets), nor is a tokenizer's special token.
_SECRET_KEY = re.compile(r"(?i)(api[_-]?key|private[_-]?key|secret|password|passwd|authorization|credential|token$)")
_SPECIAL_TOKEN_KEY = re.compile(r"(?i)^(pad|eos|bos|unk|sep|cls|mask|start|end|image|audio|video|think)_token$")


def is_secret_key(key: object) -> bool:
    """Whether a config or log field named ``key`` holds a credential (its value is masked whole)."""
    name = str(key)
    return bool(_SECRET_KEY.search(name)) and not _SPECIAL_TOKEN_KEY.match(name)

#: A credential after a scheme's "//": ``https://user:secret@host`` or ``https://TOKEN@host``.
_USERINFO = re.compile(r"(?i)\b((?:https?|wss?)://)[^/\s@?#]+@")
#: An echoed ``Authorization`` header: its whole value (scheme and credentials) to the line's end.
_AUTH_HEADER = re.compile(r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?)[^\r\n\"',;}]+")
#: ``Bearer <token>`` wherever it appears.
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]+")
#: ``api_key: "..."``, ``"password"="..."``, ``x-api-key: ...`` as servers echo them.
_KEY_VALUE = re.compile(
    r"(?i)\b((?:x-)?(?:api[_-]?key|apikey|access[_-]?token|auth[_-]?token|token|secret|password|passwd)"
    r"[\"']?\s*[:=]\s*[\"']?)([^\s\"',;&}]+)"
)
#: A query-string value whose name suggests a credential (``?api_key=...&sig=...``).
_QUERY_SECRET = re.compile(
    r"(?i)([?&](?:api[_-]?key|key|token|access[_-]?token|sig|signature|secret|password|code|auth)=)[^&\s#\"']+"
)
#: Provider key formats (OpenAI ``sk-...``, Hugging Face ``hf_...``).
_KEY_SHAPES = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}|\bhf_[A-Za-z0-9]{16,}")


def display_url(url: str) -> str:
    """``url`` fit to print: user-info masked, every query value masked."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _USERINFO.sub(lambda m: m.group(1) + MASK + "@", url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + "@" + netloc.rpartition("@")[2]
    query = "&".join(f"{k}={MASK}" for k, _ in parse_qsl(parts.query, keep_blank_values=True))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The credential strings inside ``url`` (user name, password, query values) to mask elsewhere."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.username or "", parts.password or ""]
    found += [v for _, v in parse_qsl(parts.query, keep_blank_values=True)]
    return [s for s in found if s]


@attrs.frozen
class Redactor:
    """Masks the known ``secrets`` (exact strings) and anything shaped like a credential."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, secrets: Iterable[str | None]) -> Redactor:
        # longest first, so a secret containing another is masked whole; very short strings
        # (a user name "a") would mask ordinary words, and a 3-character secret protects nothing
        unique = {s for s in secrets if s and len(s) >= 4}
        return cls(tuple(sorted(unique, key=len, reverse=True)))

    def __call__(self, text: object) -> str:
        out = str(text)
        for secret in self.secrets:
            out = out.replace(secret, MASK)
        out = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", out)
        out = _AUTH_HEADER.sub(lambda m: m.group(1) + MASK, out)
        out = _BEARER.sub(lambda m: m.group(1) + MASK, out)
        out = _KEY_VALUE.sub(lambda m: m.group(1) + MASK, out)
        out = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, out)
        return _KEY_SHAPES.sub(MASK, out)
