"""The docs site builds with `mkdocs build --strict` (as `make docs` and CI build it), and its
generated reference shows every command and every role variable.

What the pages must hold is read from the real click app and the real argument specs, walked
here with click and PyYAML, not from the generator's own lists.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml

from provision.config import KEYS

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def text_of(site: Path, page: str) -> str:
    """A built page's text: tags dropped, entities decoded (code spans become plain words)."""
    raw = (site / page / "index.html").read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def commands() -> list[tuple[str, click.Command]]:
    from provision.cli.app import cli

    found: list[tuple[str, click.Command]] = []

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        found.append((ctx.command_path, cmd))
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(cli, click.Context(cli, info_name="provision"))
    return found


def test_the_cli_page_shows_every_command_and_option(site: Path) -> None:
    raw = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    text = text_of(site, "reference/cli")
    found = commands()
    assert len(found) > 12
    for path, cmd in found:
        anchor = path.lower().replace(" ", "-")
        assert f'id="{anchor}"' in raw, path
        # this command's section: from its heading to the next one
        section = raw.split(f'id="{anchor}"', 1)[1].split("<h2", 1)[0].split("<h3", 1)[0]
        words = html.unescape(re.sub(r"<[^>]+>", " ", section))
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if not getattr(param, "hidden", False) and opt.startswith("-"):
                    assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", words), (path, opt)
        assert (cmd.help or "").split("\n")[0].strip()[:40] in text, path


def test_the_roles_page_shows_every_role_variable(site: Path) -> None:
    text = text_of(site, "reference/roles")
    roles = sorted((REPO / "playbooks" / "roles").glob("*/meta/argument_specs.yml"))
    assert len(roles) >= 10
    for spec_file in roles:
        options = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"]["options"]
        assert options, spec_file
        for name in options:
            assert re.search(rf"\b{name}\b", text), (spec_file.parent.parent.name, name)


def test_the_config_page_shows_every_key(site: Path) -> None:
    text = text_of(site, "reference/config")
    for key in KEYS:
        assert key.path in text, key.path


def test_every_page_of_the_nav_was_built(site: Path) -> None:
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(items: list[object]) -> list[str]:
        out: list[str] = []
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            out += pages(value) if isinstance(value, list) else [str(value)]
        return out

    for page in pages(nav):
        built = "index.html" if page == "index.md" else page.removesuffix(".md").removesuffix("/index") + "/index.html"
        assert (site / built).is_file(), page
