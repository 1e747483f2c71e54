"""Log lines that keep their structured fields: a ``key=value`` tail, or one JSON object a line.

memhoncho logs with ``extra={"action": ..., "conversation_key": ..., "code": ...}``; the
standard formatter drops those fields. ``FieldsFormatter`` wraps a handler's own formatter and
appends them (text), or writes the whole record as JSON (``log_format`` = ``json``). It is
installed on the handlers of Celery's loggers (``connect_celery``) and by the CLI (``setup_cli``).

Only the fields a call passed are shown; memhoncho never passes message content or an API key,
and a field whose name says it is a secret is masked here as a second line of defence.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

TEXT = "text"
JSON = "json"
FORMATS = (TEXT, JSON)
OWN_LOGGER = "memhoncho"  # fields are shown for this logger and its children only
CLI_FORMAT = "%(levelname)s %(name)s: %(message)s"
MASKED = "[masked]"
SECRET_FIELD_PARTS = ("api_key", "apikey", "token", "secret", "password", "authorization")

# Every attribute a plain LogRecord has; anything else on a record came from ``extra=``.
_STANDARD = frozenset(
    set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__)
    | {"message", "asctime", "taskName", "color_message"}
)


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a call passed with ``extra=``, secret-named ones masked."""
    found: dict[str, Any] = {}
    for name, value in record.__dict__.items():
        if name in _STANDARD or name.startswith("_"):
            continue
        lowered = name.lower()
        found[name] = MASKED if any(p in lowered for p in SECRET_FIELD_PARTS) else value
    return found


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text == "" or any(c.isspace() or c in '="\\' for c in text):
        return json.dumps(text)  # quoted, so the tail stays splittable on spaces
    return text


def _own(record: logging.LogRecord) -> bool:
    return record.name == OWN_LOGGER or record.name.startswith(OWN_LOGGER + ".")


class FieldsFormatter(logging.Formatter):
    """Formats with ``base`` and adds memhoncho's fields: a ``key=value`` tail, or JSON lines."""

    def __init__(self, base: logging.Formatter | None = None, style: str = TEXT) -> None:
        super().__init__()
        self.base = base or logging.Formatter(CLI_FORMAT)
        self.style = style if style in FORMATS else TEXT

    def format(self, record: logging.LogRecord) -> str:
        if self.style == JSON:
            return self._json(record)
        line = self.base.format(record)
        if not _own(record):
            return line
        tail = " ".join(f"{k}={_text_value(v)}" for k, v in fields(record).items())
        if not tail:
            return line
        head, newline, rest = line.partition("\n")  # a traceback stays below the tail
        return f"{head} {tail}{newline}{rest}"

    def _json(self, record: logging.LogRecord) -> str:
        value: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "process": record.processName,
            "message": record.getMessage(),
        }
        if _own(record):  # others' extras (Celery's task context) may carry task arguments
            for name, field_value in fields(record).items():
                value.setdefault(name, field_value)
        if record.exc_info:
            value["exc"] = self.formatException(record.exc_info)
        return json.dumps(value, default=str, sort_keys=False)


def wrap_handlers(logger: logging.Logger, style: str) -> None:
    """Give each of ``logger``'s handlers a ``FieldsFormatter`` over the formatter it has."""
    for handler in logger.handlers:
        current = handler.formatter
        if isinstance(current, FieldsFormatter):
            current.style = style if style in FORMATS else TEXT
            continue
        handler.setFormatter(FieldsFormatter(current, style))


_CLI_HANDLER = "memhoncho-cli"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at each line (a caller may swap it, as tests do)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def setup_cli(style: str | None) -> None:
    """Warnings and errors of memhoncho's loggers on stderr, fields shown (the CLI)."""
    logger = logging.getLogger(OWN_LOGGER)
    for handler in list(logger.handlers):
        if handler.get_name() == _CLI_HANDLER:
            logger.removeHandler(handler)
    handler = _StderrHandler()
    handler.set_name(_CLI_HANDLER)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(FieldsFormatter(logging.Formatter(CLI_FORMAT), style or TEXT))
    logger.addHandler(handler)


_celery_style = [TEXT]  # the format of the app built last in this process


def connect_celery(style: str) -> None:
    """Install the formatter whenever Celery sets up its loggers (worker and beat)."""
    from celery import signals

    _celery_style[0] = style
    signals.after_setup_logger.connect(_on_setup, dispatch_uid="memhoncho.logs", weak=False)
    signals.after_setup_task_logger.connect(
        _on_setup, dispatch_uid="memhoncho.logs.task", weak=False
    )


def _on_setup(logger: logging.Logger | None = None, **_: Any) -> None:
    if logger is not None:
        wrap_handlers(logger, _celery_style[0])
