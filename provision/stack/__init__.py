"""The stack: what a user asks for, the host description, the resolver's rules and search, the lock.

Pure: nothing here touches a host, a file outside the caller's paths, or the network.
"""
