"""reference/cli.md: every command and subcommand of the click app, walked as click sees it."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import click

from refdocs.md import code, generated, prose, table

# click >= 8.3 marks "no default given" with a sentinel instead of None
_UNSET = getattr(click.core, "UNSET", None)


@dataclass(frozen=True)
class Found:
    path: str  # "provision cloud up"
    command: click.Command
    ctx: click.Context


def commands() -> list[Found]:
    """The app and every command under it, depth first, in `--help` order (lazy groups load here)."""
    from provision.cli.app import cli

    return list(_walk(cli, click.Context(cli, info_name="provision", **cli.context_settings)))


def _walk(command: click.Command, ctx: click.Context) -> Iterator[Found]:
    yield Found(ctx.command_path, command, ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx, **sub.context_settings))


def help_markdown(text: str | None) -> str:
    """click's help text as Markdown: paragraphs re-flowed as click would, a ``\\b`` paragraph kept
    verbatim (click's "do not rewrap" mark), anything after ``\\f`` left out (as click does)."""
    if not text:
        return ""
    text = inspect.cleandoc(text).split("\f", 1)[0]
    out = []
    for para in text.split("\n\n"):
        lines = para.strip("\n").splitlines()
        if lines and lines[0].strip() == "\b":
            out.append(code("\n".join(lines[1:])))
        elif lines:
            out.append(prose(" ".join(line.strip() for line in lines)) + "\n")
    return "\n".join(out)


def type_text(param: click.Parameter) -> str:
    if isinstance(param, click.Option) and param.is_flag and not param.count:
        return "flag"
    kind = param.type
    if isinstance(kind, click.Choice):
        text = " | ".join(f"`{c}`" for c in kind.choices)
    else:
        text = param.metavar or kind.name
        describe = getattr(kind, "_describe_range", None)  # IntRange / FloatRange: "x>=1"
        if describe is not None:
            text += f" ({describe()})"
    if param.multiple:
        text += ", repeatable"
    if isinstance(param, click.Argument) and param.nargs == -1:
        text += ", any number"
    return text


def default_text(param: click.Parameter) -> str:
    default: Any = param.default
    if default is None or default is _UNSET or callable(default):
        return ""
    if isinstance(param, click.Option) and param.is_flag and not default:
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{d}`" for d in default)
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    return f"`{default}`"


def _names(param: click.Parameter) -> str:
    if isinstance(param, click.Argument):
        return f"`{param.metavar or (param.name or '').upper()}`"
    names = ", ".join(nowrap(o) for o in param.opts)
    if param.secondary_opts:
        names += " / " + ", ".join(nowrap(o) for o in param.secondary_opts)
    return names


def nowrap(option: str) -> str:
    """An option's name as code that the browser never breaks (at its hyphens, in a narrow table
    column, `--accept-new-host-keys` would read as three words)."""
    return f'<code style="white-space: nowrap">{option}</code>'


def examples(cmd: click.Command) -> str:
    """The command's examples (provision/cli/examples.py, its --help's end) as a console block."""
    lines = [line.strip() for line in (cmd.epilog or "").splitlines()[2:] if line.strip()]
    return "Examples:\n\n" + code("\n".join(f"$ {line}" for line in lines), "console") if lines else ""


def section(found: Found) -> str:
    cmd, ctx = found.command, found.ctx
    level = "#" * max(2, min(found.path.count(" ") + 1, 4))  # provision, provision up: ##; cloud up: ###
    parts = [f"{level} {found.path}\n", code(" ".join([found.path, *cmd.collect_usage_pieces(ctx)]), "text")]
    parts.append(help_markdown(cmd.help))
    if cmd.epilog:
        parts.append(examples(cmd))
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [p for p in params if isinstance(p, click.Argument)]
    options = [p for p in params if isinstance(p, click.Option)]
    if arguments:
        parts.append(
            table(
                ("Argument", "Type", "Required"),
                [(_names(p), type_text(p), "yes" if p.required else "no") for p in arguments],
            )
        )
    if options:
        parts.append(
            table(
                ("Option", "Type", "Default", "Description"),
                [
                    (
                        _names(p),
                        type_text(p),
                        default_text(p),
                        prose(p.help or "") + (" Required." if p.required else ""),
                    )
                    for p in options
                ],
            )
        )
    if isinstance(cmd, click.Group):
        subs = cmd.list_commands(ctx)
        parts.append("Commands: " + ", ".join(f"[`{n}`](#{_anchor(f'{found.path} {n}')})" for n in subs) + ".\n")
    return "\n".join(parts)


def _anchor(path: str) -> str:
    """The id mkdocs' toc gives a heading made of words and spaces."""
    return path.lower().replace(" ", "-")


def page() -> str:
    found = commands()
    head = (
        "# Command line\n\n"
        + generated("the click app (`provision/cli/app.py` and one module per command)")
        + "Every command takes `--json` (one JSON document on stdout, see [JSON output](json.md)) and "
        "`--debug` (the traceback of an error); exit codes are in [Exit codes](exit-codes.md).\n\n"
        + "\n".join(f"- [`{f.path}`](#{_anchor(f.path)})" for f in found[1:])
        + "\n\n"
    )
    return head + "\n".join(section(f) for f in found)
