"""The resolver: (stack request, host description) -> an exact, explained set of versions.

Pure: it reads only the compatibility knowledge (:mod:`provision.matrix`) and its arguments,
never a host, the network or the clock, so the same request always gives the same answer.

The search takes candidates newest first (frameworks, then their CUDA variant with the one PyPI
serves first, then Python, then the driver branch preferring no caveats, then long-term and
production branches) and returns the first set that passes every rule. A rule either passes,
passes with a warning (a caveat: minor-version compatibility, an end-of-life branch, PTX JIT),
or fails with a message naming the rule. When nothing passes, :class:`Unsatisfiable` names the
failing rules and carries concrete changes that would work (:mod:`provision.stack.suggest`).
The request and host types live in :mod:`provision.stack.request`; the rules, candidates, driver
choice, search, explanations and package plan in the modules beside this one.
"""

from __future__ import annotations

from provision.errors import Unsatisfiable
from provision.matrix import Knowledge, load
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolution import Resolution
from provision.stack.search import Resolver
from provision.stack.suggest import suggest

__all__ = ["resolve"]


def resolve(request: StackRequest, host: HostSpec, knowledge: Knowledge | None = None) -> Resolution:
    """The newest set of versions that passes every rule, or :class:`Unsatisfiable`.

    Unsatisfiable carries ``conflicts`` (the failing rules) and ``suggestions``: each a change to
    the request that does resolve, with what it would give.
    """
    k = knowledge or load()
    try:
        return Resolver(request, host, k).run()
    except Unsatisfiable as err:
        suggestions = suggest(request, host, k)
        err.suggestions = suggestions
        if suggestions:
            err.hint = "try " + "; or ".join(s["summary"] for s in suggestions[:2])
        raise
