"""Discord through discord.py: see adapter.py."""
