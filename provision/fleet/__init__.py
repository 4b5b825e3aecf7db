"""The fleet: planning for many hosts, up's orchestration, batches, state, the fleet cache, reports."""
