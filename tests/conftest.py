"""Shared pytest setup: the fake-server fixtures live in tests/harness/fixtures.py, the
`--cpu-load` option of `make test-loaded` in tests/harness/load.py."""

pytest_plugins = ["tests.harness.fixtures", "tests.harness.load"]
