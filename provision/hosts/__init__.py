"""Hosts: inventories, transports (local and SSH) and the facts a probe gathers."""
