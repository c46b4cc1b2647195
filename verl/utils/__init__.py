"""Shared utilities: sequence-length balancing, registries, torch helpers, timing."""
