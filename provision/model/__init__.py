"""The typed model every stage takes and returns: pure, frozen records that import nothing of
provision but :mod:`provision.errors` (docs/explanation/layout.md lists the modules)."""
