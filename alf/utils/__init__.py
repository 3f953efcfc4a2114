"""Utilities: value operations, distributions, schedules, seeding."""
