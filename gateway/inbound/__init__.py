"""A message entering the gateway: is it for us, may its sender talk to us, is it a
command; then it is stored in the inbound ledger and handed to its chat's queue. Also
rows routed again: what a restart finds open, and what another process stored.

Owns: door.py (the adapters' handler), intake.py (each chat's order of entry, routing),
gates.py (the checks before the ledger), ledger.py (the ledger row, edits, deletes),
invocation.py (reading `/cmd@bot args`), recovery.py (rows routed again).

May import: turns/, delivery/ and the shared modules; never service/, wiring/ or cli/.
"""
