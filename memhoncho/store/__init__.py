"""The durable files in the data directory and their locks. No Celery, no network."""
