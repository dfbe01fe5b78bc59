"""The read-only web view of chats, chains and spending (docs/web.md)."""
