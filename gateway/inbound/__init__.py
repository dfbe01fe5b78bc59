"""A message entering the gateway: is it for us, may its sender talk to us; then it is
stored in the inbound ledger and handed to routing (turns/routing.py), each chat's
messages in the order they came.

Owns: door.py (the adapters' handler), intake.py (each chat's order of entry, and what is
said about a message once it is in), gates.py (the checks before the ledger), ledger.py
(the ledger row, and edits and deletes of a message still waiting).

May import: turns/, delivery/ and the shared modules; never service/, wiring/ or cli/.
"""
