"""``memhoncho db upgrade``: bring a PostgreSQL store's schema to this memhoncho's version.

The migrations are alembic scripts inside the package (``store/migrations``), plain SQL through
``op.execute``; alembic and SQLAlchemy are imported here only, so hosts and workers never load
them (they check the version with one query: ``postgres.check_schema``).
"""

from __future__ import annotations

from memhoncho.errors import ConfigError, StoreUnavailable
from memhoncho.store import is_postgres

MIGRATIONS = "memhoncho.store:migrations"


def _alembic_config(url: str) -> object:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    # SQLAlchemy's name for psycopg 3; "%" is alembic's interpolation character.
    sa_url = "postgresql+psycopg://" + url.split("://", 1)[1]
    config.set_main_option("sqlalchemy.url", sa_url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> str:
    """Run every migration up to ``revision``; the revision the database is at afterwards."""
    if not is_postgres(url):
        raise ConfigError("db upgrade needs a postgresql:// store URL (store_url)")
    from alembic import command
    from sqlalchemy.exc import OperationalError

    config = _alembic_config(url)
    try:
        command.upgrade(config, revision)  # type: ignore[arg-type]
    except OperationalError as exc:
        raise StoreUnavailable(
            f"the store's database cannot be reached ({type(exc.orig).__name__})"
        ) from None
    return current(url) or ""


def current(url: str) -> str | None:
    """The revision the database is at (None before the first upgrade), by one query."""
    import psycopg

    from memhoncho.store.postgres import SCHEMA_REVISION  # noqa: F401 - same package pins it

    with psycopg.connect(url, connect_timeout=5, autocommit=True) as conn:
        try:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        except psycopg.errors.UndefinedTable:
            return None
    return row[0] if row else None
