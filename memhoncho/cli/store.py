"""``memhoncho db upgrade`` and ``memhoncho store migrate``: the PostgreSQL store's commands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memhoncho.cli.exits import count, print_json

if TYPE_CHECKING:
    import argparse


def register(sub: Any) -> None:
    db = sub.add_parser("db", help="the PostgreSQL store's schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    upgrade = db_sub.add_parser("upgrade", help="migrate the schema to this version (alembic)")
    upgrade.add_argument("--url", help="default: the store_url setting")
    upgrade.set_defaults(handler=db_upgrade)
    store = sub.add_parser("store", help="move between stores")
    store_sub = store.add_subparsers(dest="store_command", required=True)
    move = store_sub.add_parser("migrate", help="copy the file store into PostgreSQL")
    move.add_argument("--to", required=True, help="the target store, postgresql://user@host/db")
    move.add_argument("--json", action="store_true", help="the report as JSON")
    move.set_defaults(handler=store_migrate)


def _store_url(args: argparse.Namespace) -> str:
    from memhoncho.deployment import Deployment

    url = args.url or Deployment.from_dirs(args.config_dir, args.data_dir).settings().store_url
    if not url:
        from memhoncho.errors import ConfigError

        raise ConfigError("no PostgreSQL store: give --url or set store_url")
    return str(url)


def db_upgrade(args: argparse.Namespace) -> int:
    """Bring the PostgreSQL store's schema to this memhoncho's version (alembic)."""
    from memhoncho.store import schema

    revision = schema.upgrade(_store_url(args))
    print(f"the store's schema is at {revision}")
    return 0


def store_migrate(args: argparse.Namespace) -> int:
    """Copy this data directory's file store into a PostgreSQL store (idempotent)."""
    from memhoncho.deployment import Deployment, require_initialised
    from memhoncho.errors import ConfigError
    from memhoncho.store import is_postgres, open_store
    from memhoncho.store.files import FileStore
    from memhoncho.store.migrate import migrate
    from memhoncho.store.postgres import PostgresStore

    if not is_postgres(args.to):
        raise ConfigError("--to must be a postgresql:// URL")
    deployment = Deployment.from_dirs(args.config_dir, args.data_dir)
    require_initialised(deployment.data_dir)
    source = FileStore(deployment.layout)
    target = open_store(deployment.data_dir, args.to, deployment.settings().store_timeout_s)
    assert isinstance(target, PostgresStore)
    report = migrate(source, target)
    if args.json:
        print_json(report.as_dict())
    else:
        print(
            f"copied {count(report.conversations, 'conversation')}: {report.ledgers_copied} ledgers"
            f" ({report.ledgers_kept} already there), {report.records_copied} pending records"
            f" ({report.records_present} already there), {report.forks_copied} forks,"
            f" {report.dead_copied} dead letters; {len(report.errors)} problems"
        )
        for error in report.errors:
            print(f"  {error}")
    return 1 if report.errors else 0
