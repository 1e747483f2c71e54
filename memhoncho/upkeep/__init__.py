"""Upkeep: what beat and the operator run over the whole store: the sweep, replay of dead
letters, and departures of users."""
