"""Attachments in a conversation: how they are stored in a message, kept on disk, read,
and shown to a model (docs/architecture.md, "Attachments")."""
