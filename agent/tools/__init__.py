"""Tools the model may call: the registry, running calls, the output budget, built-ins."""
