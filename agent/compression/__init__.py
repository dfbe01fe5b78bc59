"""The built-in context engine, the compressor: cut, summarize, assemble."""
