"""The running process: the Gateway's lifecycle over its parts (app.py), the run loop
with its signals and systemd notices (run.py, notify.py), bringing platforms up and
keeping them up (connections.py), the event loop's pulse (loopwatch.py), logging
(logs.py) and the one-run-per-database lock (runlock.py).

May import: inbound/, turns/, delivery/ and the shared modules; never wiring/ or cli/.
"""
