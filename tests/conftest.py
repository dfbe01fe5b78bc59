"""Shared pytest setup: the fake-server fixtures live in tests/harness/fixtures.py, the
`--cpu-load` option in tests/harness/load.py, the clock tests drive in tests/harness/clock.py,
and how the suite is marked and laid out for a parallel run in tests/harness/suite.py."""

pytest_plugins = ["tests.harness.fixtures", "tests.harness.load", "tests.harness.clock",
                  "tests.harness.suite"]
