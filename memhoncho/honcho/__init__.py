"""Honcho: the one place memhoncho calls the SDK (``adapter``) and the retry decision beside it
(``retry``). No other package imports the ``honcho`` SDK."""
