"""A verification failure injected on a test host, real to the smoke job.

A stray module that shadows the venv's torch: the stdlib folder comes before site-packages on
sys.path, so `import torch` in the venv fails, while pip and importlib.metadata (what Ansible,
the probe, the verify role and provision-health read) still see torch installed. The apply
succeeds; only the smoke job, which imports torch, fails: a real verification failure.
"""

SHADOW = "/usr/lib/python3.11/torch.py"


def shadow_text(who: str) -> str:
    return f"raise ImportError('a stray torch.py shadows the venv torch ({who})')"
