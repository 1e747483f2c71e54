"""Recall: what comes back from Honcho. The prompt sections and the representation refresh
(``memory``), the tools a model calls (``tools``, ``honcho_tools``) and their arguments and
schemas (``arguments``). Running a tool on a worker is the Celery edge's
(``worker/remote_recall.py``)."""
