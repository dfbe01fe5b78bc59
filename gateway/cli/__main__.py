"""`python -m gateway.cli`: the same as the `threadline` command."""

from gateway.cli.dispatch import main

main()
