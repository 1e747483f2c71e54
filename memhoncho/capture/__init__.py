"""Capture: the host's side. Validate and redact a run, build its record, append it durably,
then hint a worker (directly, or through the relay and its socket)."""
