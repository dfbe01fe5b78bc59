"""The gateway: where a message from a platform becomes a stored, answered turn.

Its folders follow a message's path, and imports run down that path, never back up:

    cli/, web/      the surfaces: the `threadline` command, the web view
    wiring/         builds every part from the config and hands the parts in
    service/        the process: the Gateway's lifecycle, the run loop, connections
    inbound/        a message entering: addressed? allowed? stored, then queued
    turns/          each chat's order and its work: router, worker, conversations
    delivery/       what goes out to a platform: paced sends, previews, rendering

A folder may import from the folders below it, never from one above. The modules at
this level (auth, clock, metrics, offload, store_open) and config/ and mcp/ are shared by every
folder and import none of them. tests/gateway/test_layout.py reads the imports and
holds them to this order (docs/architecture.md, "The gateway's folders").
"""
