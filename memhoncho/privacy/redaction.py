"""Secret redaction at capture: a text's secrets are replaced before its outbox line is written.

Agent transcripts carry API keys, tokens and private keys. memhoncho replaces every match of a
default set of common key shapes (and of the ``redact_patterns`` setting) with ``[REDACTED]``
in the run's texts before the batch is built, so a secret is never on disk and never reaches
Honcho. A pattern with a group named ``secret`` replaces only that group (``Bearer <token>``
keeps the word ``Bearer``). Only the number of replacements is ever reported, never what they
replaced. Cost: a character search per pattern (its gate, ``_gate``), then the substring searches
of its triggers only where the gate is found; a pattern's regular expression runs only when
triggered.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from memhoncho.errors import ConfigError
from memhoncho.settings.values import check_pattern

REPLACEMENT = "[REDACTED]"
CACHED_REDACTORS = 8  # distinct extra-pattern sets kept compiled (one per settings change)

#: (name, triggers, regex) of the shapes redacted by default. Each is anchored on a fixed
#: prefix or a key word, so ordinary prose is never touched; lengths are the issuers' documented
#: minimums. A pattern runs only on a text holding one of its triggers (a plain substring
#: search, lowercase triggers against the lowercased text), so a run without a secret pays a
#: few substring searches, not a regular expression per pattern.
DEFAULT_PATTERNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "private-key",
        ("PRIVATE KEY",),
        r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----"
        r"[\s\S]*?(?:-----END[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----|\Z)",
    ),
    # OpenAI (sk-, sk-proj-, sk-svcacct-) and Anthropic (sk-ant-api03-...) keys.
    ("sk-key", ("sk-",), r"\bsk-[A-Za-z0-9_-]{20,}"),
    ("honcho-key", ("hch-",), r"\bhch-[A-Za-z0-9_-]{16,}"),
    (
        "aws-access-key-id",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
    ),
    (  # aws_secret_access_key = ... (the CLI's files), "SecretAccessKey": "..." (its JSON)
        "aws-secret-access-key",
        ("secret",),
        r"(?i)(?:aws_?)?secret_?access_?key[\"']?\s*[:=]\s*[\"']?(?P<secret>[A-Za-z0-9/+]{40})",
    ),
    # Stripe's live and test keys, secret and restricted (sk_live_..., rk_test_...).
    ("stripe-key", ("k_live_", "k_test_"), r"\b[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    (  # a password in a URL: postgresql://user:PASSWORD@host, https://user:PASSWORD@host
        "url-password",
        ("://",),
        r"\b[A-Za-z][A-Za-z0-9+.-]{1,30}://[^\s:/@]{1,128}:(?P<secret>[^\s@/]{1,256})@",
    ),
    (  # password=..., passwd: ..., "password": "..." (the value, its quotes kept)
        "password",
        ("passw", "pwd"),
        r"(?i)\b[a-z_]{0,20}(?:password|passwd|pwd)[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;&]{4,})",
    ),
    ("github-token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), r"\bgh[pousr]_[A-Za-z0-9]{36,}"),
    ("github-pat", ("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{22,}"),
    ("slack-token", ("xox",), r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    (
        "slack-webhook",
        ("hooks.slack.com",),
        r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]{20,}",
    ),
    ("google-api-key", ("AIza",), r"\bAIza[0-9A-Za-z_-]{35}"),
    ("jwt", ("eyJ",), r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    ("bearer", ("bearer",), r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/-]{16,}=*)"),
)


#: a gate is the character of a pattern's triggers most likely to be absent from prose: first
#: punctuation (not a space), then letters and digits, the rarest in English prose first
_GATE_RANK = "-_/.:=+~JQXZzqxjKVBYWGPFMUCDLHRSNOTE0123456789kvbpygfwmucldrhsnioateIA"


def _gate(triggers: tuple[str, ...]) -> str:
    """A character every trigger holds (so a text without it holds none of them), or "".

    Looking for one character is a ``memchr``; looking for a short trigger is about 1 ns a
    character of the text. A run without a secret mostly pays the gates."""
    shared = set.intersection(*(set(t) for t in triggers)) if triggers else set()
    return next((c for c in _GATE_RANK if c in shared), "")


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    triggers: tuple[str, ...]  # empty: always run (an operator's pattern)
    lowercase: bool  # the triggers are searched in the lowercased text
    gate: str = ""  # in every trigger (``_gate``): searched first

    def replace(self, match: re.Match[str]) -> str:
        if "secret" not in self.regex.groupindex or match.group("secret") is None:
            return REPLACEMENT
        start, end = match.span("secret")
        offset = match.start()
        whole = match.group(0)
        return whole[: start - offset] + REPLACEMENT + whole[end - offset :]


class Redactor:
    """The patterns compiled once; ``redact`` searches each pattern's triggers, then runs it."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        self._patterns = _defaults() + [_Pattern(re.compile(regex), (), False) for regex in extra]

    def redact(self, text: str) -> tuple[str, int]:
        """``text`` with every secret replaced by ``[REDACTED]``, and how many were."""
        total = 0
        lowered: str | None = None
        for pattern in self._patterns:
            if pattern.triggers:
                if pattern.lowercase:
                    if lowered is None:
                        lowered = text.lower()
                    haystack = lowered
                else:
                    haystack = text
                if pattern.gate and pattern.gate not in haystack:
                    continue
                if not any(trigger in haystack for trigger in pattern.triggers):
                    continue
            text, found = pattern.regex.subn(pattern.replace, text)
            if found:
                total += found
                lowered = None  # the text changed
        return text, total


@functools.cache
def _defaults() -> list[_Pattern]:
    """The default patterns, compiled once per process (shared by every redactor)."""
    return [
        _Pattern(compiled, triggers, bool(compiled.flags & re.IGNORECASE), _gate(triggers))
        for _, triggers, regex in DEFAULT_PATTERNS
        if (compiled := re.compile(regex))
    ]


@functools.lru_cache(maxsize=CACHED_REDACTORS)
def redactor(extra: tuple[str, ...] = ()) -> Redactor:
    """The redactor of the defaults plus ``extra``; compiled once per distinct ``extra``.

    ConfigError (naming the pattern's position, not its text) if an extra pattern is invalid;
    the settings refuse such a value before it gets here.
    """
    for position, pattern in enumerate(extra):
        try:
            check_pattern(pattern)
        except ValueError as exc:
            raise ConfigError(
                f"redact_patterns[{position}] is invalid: {exc}", setting="redact_patterns"
            ) from None
    return Redactor(extra)
