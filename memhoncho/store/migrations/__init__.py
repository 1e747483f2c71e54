"""alembic migrations of the PostgreSQL store (``memhoncho db upgrade`` runs them)."""
