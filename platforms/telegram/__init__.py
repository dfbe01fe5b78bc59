"""Telegram: the Bot API adapter and the Markdown-to-entities formatting it sends with."""
