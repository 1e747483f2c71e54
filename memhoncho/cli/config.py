"""``memhoncho init`` and ``memhoncho config show``: a deployment's folders and settings.

``init`` gives a data directory its identity (``deployment.initialise``); ``config show`` prints
the effective settings and where each came from (flag, environment, file, default), with
secrets masked, after the same strict check every command makes.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from memhoncho.cli.exits import print_json

if TYPE_CHECKING:
    import argparse

MASK = "****"


def register(sub: Any) -> None:
    init = sub.add_parser(
        "init", help="initialise the data directory (its identity); harmless when it has one"
    )
    init.add_argument("--json", action="store_true", help="the identity as one JSON object")
    init.add_argument(
        "--api-key-stdin",
        action="store_true",
        help="read the Honcho API key from stdin into secrets.json (mode 0600, atomically)",
    )
    init.add_argument(
        "--broker-password-file",
        metavar="PATH",
        help="write a new random broker password to PATH (mode 0600) unless it exists, for"
        " the broker and the broker_password_file setting (compose.yaml)",
    )
    init.set_defaults(handler=init_command)

    config = sub.add_parser("config", help="the effective settings")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser(
        "show", help="each setting's value and where it came from (secrets masked)"
    )
    show.add_argument("--json", action="store_true", help="one JSON object")
    show.set_defaults(handler=show_command)


def init_command(args: argparse.Namespace) -> int:
    from memhoncho import deployment
    from memhoncho.deployment import Deployment

    place = Deployment.from_dirs(args.config_dir, args.data_dir)
    key_written = _write_key_from_stdin(place.config_dir) if args.api_key_stdin else None
    if args.broker_password_file:
        _write_broker_password(args.broker_password_file)
    found, written = deployment.initialise(place.data_dir)
    answer = {**found, "initialised_now": written}
    if key_written is not None:
        answer["api_key_file"] = str(key_written)
    if args.json:
        print_json(answer)
    elif written:
        print(f"initialised {place.data_dir} (deployment {found['deployment_id']})")
    else:
        print(f"{place.data_dir} is already initialised (deployment {found['deployment_id']})")
    return 0


def _write_key_from_stdin(config_dir: Any) -> Any:
    """The key on stdin into ``secrets.json``: 0600 in a 0700 folder (``store/modes.py``),
    written atomically, the file's other sections kept. ConfigError for no key."""
    import sys

    from memhoncho import settings as settings_module
    from memhoncho.errors import ConfigError
    from memhoncho.store.atomic import write_bytes
    from memhoncho.store.modes import make_dirs

    key = sys.stdin.readline(4096).strip()
    if not key:
        raise ConfigError("--api-key-stdin: no key on stdin")
    path = config_dir / settings_module.SECRETS_FILE
    try:
        current = json.loads(path.read_bytes())
    except (OSError, ValueError):
        current = {}
    if not isinstance(current, dict):
        current = {}
    current[settings_module.API_KEY_SECTION] = key
    make_dirs(config_dir)
    write_bytes(path, json.dumps(current).encode("utf-8"))
    os.chmod(path, 0o600)
    return path


def _write_broker_password(path: str) -> None:
    """A new random password (32 bytes, hex) at ``path``, 0600, created exclusively: one that
    exists is kept (the broker already has it)."""
    import secrets

    from memhoncho.errors import ConfigError

    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise ConfigError(f"--broker-password-file: {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
        handle.flush()
        os.fsync(handle.fileno())


def mask_url(url: str) -> str:
    """The URL with its password replaced (user, host and database stay readable)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{netloc}"))


def effective(args: argparse.Namespace) -> dict[str, Any]:
    """The effective settings, each as ``{"value", "source"}``, and the folders and key."""
    from memhoncho import deployment as deployment_module
    from memhoncho import dirs
    from memhoncho import settings as settings_module
    from memhoncho.deployment import Deployment

    place = Deployment.from_dirs(args.config_dir, args.data_dir)
    current = settings_module.load(place.config_dir)  # ConfigError: nothing to show
    given = settings_module.sources(place.config_dir)
    settings_file = place.config_dir / settings_module.SETTINGS_FILE
    shown: dict[str, Any] = {}
    for name in settings_module.FIELDS:
        value = getattr(current, name)
        source = given.get(name, "default")
        if source == str(settings_file):
            source = f"file {settings_file}"
        elif source != "default":
            source = f"env {source}"
        if name == "log_format" and getattr(args, "log_format", None):
            value, source = args.log_format, "flag --log-format"
        if name in settings_module.SECRET_KEYS and value:
            value = MASK
        elif name.endswith("_url") and isinstance(value, str):
            value = mask_url(value)
        shown[name] = {
            "value": list(value) if isinstance(value, tuple) else value,
            "source": source,
        }

    def folder(flag: str | None, env: str, value: Any) -> dict[str, Any]:
        source = f"flag {flag}" if flag else f"env {env}" if os.environ.get(env) else "default"
        return {"value": str(value), "source": source}

    return {
        "precedence": "flags > MEMHONCHO_* environment > settings file > defaults",
        "config_dir": folder(args.config_dir and "--config-dir", dirs.CONFIG_ENV, place.config_dir),
        "data_dir": folder(args.data_dir and "--data-dir", dirs.DATA_ENV, place.data_dir),
        "settings_file": {"path": str(settings_file), "exists": settings_file.exists()},
        "api_key": _api_key(place, current),
        "identity": deployment_module.identity(place.data_dir),
        "settings": shown,
    }


def _api_key(place: Any, current: Any) -> dict[str, Any]:
    from memhoncho import settings as settings_module

    key = place.api_key()
    if key is None:
        return {"value": None, "source": "none: delivery waits for a key"}
    secrets = place.config_dir / settings_module.SECRETS_FILE
    stored = settings_module.files.read_json_cached(secrets).value.get(
        settings_module.API_KEY_SECTION
    )
    if stored:
        source = f"file {secrets}"
    elif os.environ.get("MEMHONCHO_API_KEY", "").strip():
        source = "env MEMHONCHO_API_KEY"
    else:
        source = f"file {current.api_key_file} (api_key_file)"
    return {"value": MASK, "source": source}


def show_command(args: argparse.Namespace) -> int:
    shown = effective(args)
    if args.json:
        print_json(shown)
        return 0
    print(f"precedence: {shown['precedence']}")
    for name in ("config_dir", "data_dir", "api_key"):
        print(f"{name} = {shown[name]['value']}  ({shown[name]['source']})")
    identity = shown["identity"]
    print(f"identity = {identity['deployment_id'] if identity else 'none (memhoncho init)'}")
    width = max(len(name) for name in shown["settings"])
    for name, entry in shown["settings"].items():
        print(f"{name:<{width}} = {entry['value']!s}  ({entry['source']})")
    return 0
