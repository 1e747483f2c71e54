"""Recall: the tools a model calls (``tools``), their arguments and schemas (``arguments``),
and the host's way to run one on a worker (``remote``)."""
