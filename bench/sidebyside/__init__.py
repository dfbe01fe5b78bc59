"""Side-by-side benchmark against Hermes Agent 0.19.0: `make bench`, or see run.py."""
