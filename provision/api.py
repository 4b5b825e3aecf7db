"""The library face of provision: what the commands do, as functions with typed results.

Each function here is the whole of a command minus its printing; heavy imports happen inside.
"""

from __future__ import annotations

from provision.fleet.planning import Assumed, HostPlan, PlanResult, parse_assume, plan

__all__ = ["Assumed", "HostPlan", "PlanResult", "parse_assume", "plan"]
