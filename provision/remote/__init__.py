"""What is copied to hosts and run there: the smoke job, the tune job, the probe snippets.

These files import only the standard library, torch and pynvml (a lint test enforces it): the
hosts have nothing of provision installed.
"""
