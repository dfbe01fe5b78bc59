"""Shared pytest setup: the fake-server fixtures live in tests/harness/fixtures.py."""

pytest_plugins = ["tests.harness.fixtures"]
