"""The Celery edge: the app factory, the thin tasks, routing (the wire names) and the embedded
broker. Services below never import it; ``memhoncho.celery_app`` names its app for ``celery -A``."""
