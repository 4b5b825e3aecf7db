"""The docs site's generated reference pages (docs/reference/*.md, built by docs/_hooks/reference.py).

Each module renders one page from the code's own definitions: the click app, config.py's key
table, the lock's and the JSON documents' shapes checked against real outputs, the exit codes,
the roles' argument specs, the knowledge. A page that would say something the code no longer
does fails the build (:class:`RefDocError`) instead of going out wrong.
"""

from __future__ import annotations

from collections.abc import Callable

from refdocs import (
    bundle_page,
    cli_page,
    config_page,
    exit_codes_page,
    json_page,
    lock_page,
    metrics_page,
    roles_page,
    supported_page,
)

# reference/<name>.md -> the function that writes it (the order of the site's Reference section)
PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_page.page,
    "reference/config.md": config_page.page,
    "reference/lock.md": lock_page.page,
    "reference/bundle.md": bundle_page.page,
    "reference/json.md": json_page.page,
    "reference/exit-codes.md": exit_codes_page.page,
    "reference/metrics.md": metrics_page.page,
    "reference/roles.md": roles_page.page,
    "reference/supported.md": supported_page.page,
}
