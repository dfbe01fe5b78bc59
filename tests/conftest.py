"""Shared pytest setup: the fake-server fixtures live in tests/harness/fixtures.py, the
`--cpu-load` option in tests/harness/load.py, the clock tests drive in tests/harness/clock.py."""

pytest_plugins = ["tests.harness.fixtures", "tests.harness.load", "tests.harness.clock"]
