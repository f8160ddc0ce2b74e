"""A failing rank, looked at: its debugger on a private socket (``debugger.py``), the relay
that joins a terminal to that socket on the rank's node (``debug_relay.py``), and the local
variables of the failure's frames saved in the rank's record (``frame_locals.py``).
"""
