"""Test helpers users can reuse: a local Honcho stand-in the real SDK talks to over HTTP."""

from memhoncho.testing.standin import HonchoStandIn, StandInControl, serve

__all__ = ["HonchoStandIn", "StandInControl", "serve"]
