"""Each chat's turns: their order (routing a stored message to its chat's queue, the
router, jobs, recovery after a restart, and with several processes the chat leases of
cluster.py) and their work (worker, outages, commands, resets, attachment reading, the
spend gate), and the conversation a turn runs in (conversations, compacting, hygiene,
groups, speakers, per-chat settings and tools, what a turn writes, spending and prices).

May import: delivery/ and the shared modules; never inbound/, service/, wiring/ or cli/.
"""
