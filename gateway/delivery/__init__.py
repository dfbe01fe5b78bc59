"""Everything the gateway says to a platform: one paced path per chat (outbound.py,
budget.py), replies shown while written (streaming.py), a reply made into the
platform's messages (rendering.py), and chats that moved to a new id (moves.py).

May import: the shared modules only; nothing of inbound/, turns/ or above.
"""
