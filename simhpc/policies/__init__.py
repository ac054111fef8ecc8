"""Policies: what decides (checkpoint plans, pipeline schedules, placements), one registry per family."""
