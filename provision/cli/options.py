"""The option blocks commands share, declared once: targets, SSH, timeouts, config, stack, lock, --set, output.

A command stacks these decorators instead of declaring its own copy, so that ``--limit``, ``-F``
or ``--set`` mean the same, parse the same and default the same everywhere. Where the wording of
a help text depends on the command (``--local`` "Probe ..." / "Verify ..."), the decorator takes
it as an argument; the option's name, type and default do not vary.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from provision.errors import BadInput, Interrupted
from provision.files import load_yaml
from provision.model.defaults import INSTALL_METHOD_CHOICES

if TYPE_CHECKING:
    from provision.fleet.targets import HostDefaults

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

# --- every command --------------------------------------------------------------------------


class NonEmpty(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2; pyproject takes 8.1
    """Text that must say something: ``--gpu ''`` would otherwise read as "not given" (any GPU)
    and a run would go ahead on a meaning the user never typed. Click reports the failure as a
    usage error, which the group turns into one line and exit 2."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("is empty (give a value, or leave the option out)", param, ctx)
        return value


NONEMPTY = NonEmpty()

DEBUG_HELP = "Show the traceback of an error."


def json_option(func: F) -> F:
    """``--json`` on a command: one JSON document on stdout and nothing else there."""
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON document on stdout and nothing else.")(
        func
    )


def debug_option(func: F) -> F:
    # Read from argv by ProvisionGroup.main (errors can happen before parsing); declared on every
    # command so that it is accepted anywhere on the line and shows in --help.
    return click.option("--debug", is_flag=True, expose_value=False, help=DEBUG_HELP)(func)


def command_options(func: F) -> F:
    """The options every command takes."""
    return json_option(debug_option(func))


# --- asking first: what spends money or destroys things ---------------------------------------


def yes_option(help: str) -> Callable[[F], F]:
    return click.option("-y", "--yes", is_flag=True, help=help)  # -y: as apt, dnf and pip's users type it


def has_terminal() -> bool:
    """Standard input is a terminal: a person may be there to answer."""
    return sys.stdin.isatty()


def can_ask(as_json: bool) -> bool:
    """A person can answer a prompt: stdin is a terminal, and stdout is not a JSON document."""
    return has_terminal() and not as_json


def refuse_unasked(yes: bool, as_json: bool, what: str, hint: str) -> None:
    """Bad input (exit 2, before anything is done) when ``what`` would go ahead unasked: no ``--yes``
    and nobody to ask (no terminal on stdin, or ``--json``)."""
    if not (yes or can_ask(as_json)):
        raise BadInput(f"{what} and there is no terminal to ask on", hint)


def ask_first(question: str, declined: str) -> None:
    """Ask on the terminal (default no); a "no" is :class:`Interrupted` (exit 130): ``declined`` happened."""
    if not click.confirm(question, default=False):
        raise Interrupted(declined, "run again and answer y, or pass --yes")


def _stack(*decorators: Callable[[Any], Any]) -> Callable[[F], F]:
    """Apply ``decorators`` so that ``--help`` lists them in the order given."""

    def apply(func: F) -> F:
        out: Any = func
        for d in reversed(decorators):
            out = d(out)
        return out  # type: ignore[no-any-return]

    return apply


# --- targets: which hosts ---------------------------------------------------------------------


def local_option(help: str) -> Callable[[F], F]:  # click's own keyword
    return click.option("--local", is_flag=True, help=help)


def inventory_option(help: str) -> Callable[[F], F]:
    return click.option("-i", "--inventory", metavar="INVENTORY", type=NONEMPTY, help=help)


def target_options(local: str, inventory: str) -> Callable[[F], F]:
    """``--local`` and ``-i INVENTORY``, with the command's own words for each."""
    return _stack(local_option(local), inventory_option(inventory))


def limit_option() -> Callable[[F], F]:
    return click.option(
        "-l",  # ansible-playbook's short flag for the same thing
        "--limit",
        metavar="PATTERN",
        type=NONEMPTY,
        help="Only these hosts: names or globs, comma-separated.",
    )


# --- reaching hosts: SSH and timeouts -------------------------------------------------------


def host_keys_option() -> Callable[[F], F]:
    return click.option(
        "--accept-new-host-keys",
        is_flag=True,
        help="Record the key of a host not yet in known_hosts (a changed key is still refused).",
    )


def ssh_config_option() -> Callable[[F], F]:
    return click.option(
        "-F",
        "--ssh-config",
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        help="SSH config file to read instead of ~/.ssh/config.",
    )


def login_options() -> Callable[[F], F]:
    """ansible-playbook's ``-u USER``, ``--private-key FILE`` and ``-K``, meaning the same here: for
    every host whose inventory (or ``~/.ssh/config``) names no user, key or sudo password.

    ``-K``'s value is the flag; :func:`host_defaults` asks for the password after every other
    option parsed (a bad option asks nothing)."""
    return _stack(
        click.option(
            "-u",
            "--user",
            "login_user",
            type=NONEMPTY,
            metavar="USER",
            help="SSH login where the inventory names none (beats ~/.ssh/config, as ssh -l does).",
        ),
        click.option(
            "--private-key",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="FILE",
            help="SSH private key where the inventory names none.",
        ),
        click.option(
            "-K",
            "--ask-become-pass",
            "ask_become_pass",
            is_flag=True,
            help="Ask once for the sudo password (hosts whose inventory sets none); kept in memory, never written.",
        ),
    )


def host_defaults(login_user: str | None, private_key: Path | None, ask_become_pass: bool) -> HostDefaults | None:
    """The hosts' defaults from :func:`login_options`; None when none was given."""
    from provision.fleet.targets import HostDefaults  # noqa: PLC0415 (start-up: `provision --version` loads this module, not fleet.targets)

    if login_user is None and private_key is None and not ask_become_pass:
        return None
    return HostDefaults(
        user=login_user,
        key_file=str(private_key.expanduser()) if private_key is not None else None,
        become_password=ask_become_password(ask_become_pass),
    )


def ask_become_password(ask: bool) -> str | None:
    """The sudo password for ``-K``, read without echo (getpass); None without ``-K``.

    Without a terminal there is nobody to ask: bad input (exit 2) rather than a read that hangs
    or takes a piped line a log could hold."""
    if not ask:
        return None
    if not has_terminal():
        raise BadInput(
            "-K asks for the sudo password and there is no terminal to ask on",
            "run it at a terminal, or set ansible_become_password in a vars file kept out of git",
        )
    import getpass  # noqa: PLC0415 (only for -K)

    return getpass.getpass("sudo password (-K): ")


def ssh_options() -> Callable[[F], F]:
    """``--accept-new-host-keys`` and ``-F FILE``: how SSH reaches the hosts and trusts them."""
    return _stack(host_keys_option(), ssh_config_option())


def connect_timeout_option() -> Callable[[F], F]:
    return click.option(
        "--connect-timeout",
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Give up on a host that does not answer SSH within this time.",
    )


def timeout_option(
    default: float, help: str, *, minimum: float | None = None, dest: str = "timeout"
) -> Callable[[F], F]:
    """``--timeout SECONDS``: what runs on a host gives up after this (the command says what)."""
    kind: Any = float if minimum is None else click.FloatRange(min=minimum)
    return click.option("--timeout", dest, type=kind, default=default, show_default=True, metavar="SECONDS", help=help)


def parallel_option(default: int, help: str) -> Callable[[F], F]:
    return click.option("--parallel", type=click.IntRange(min=1), default=default, show_default=True, help=help)


# --- files: config, lock, state ---------------------------------------------------------------


def config_option(help: str = "provision.yaml.") -> Callable[[F], F]:
    return click.option("-c", "--config", "config_path", type=click.Path(path_type=Path), help=help)


# --- the stack request: what to install (resolve, plan, up) -------------------------------------


def _stack_option_list() -> list[tuple[str, Callable[[Any], Any]]]:
    """The options that override the config's ``stack:`` (and install.method / install.python_source),
    by the keyword of StackRequest.build each one sets.

    Built when a command that takes them is imported, not with this module: app.py imports this
    module on every start, and the choices of --python-source live beside the request's parser.
    """
    from provision.stack.request import PYTHON_SOURCES  # noqa: PLC0415 (start-up: `provision --version` loads this module, not stack.request)

    return [
        (
            "frameworks",
            click.option(
                "--framework",
                "frameworks",
                type=NONEMPTY,
                multiple=True,
                help="PEP 508 spec, repeatable: torch>=2.6, torch==2.7.1+cu128, jax[cuda12].",
            ),
        ),
        (
            "driver",
            click.option("--driver", type=NONEMPTY, help="auto, none, a branch (580) or an exact version (580.95.05)."),
        ),
        (
            "allow_unknown_driver",
            click.option(
                "--allow-unknown-driver",
                is_flag=True,
                default=None,
                help="Take an exact --driver release the knowledge data does not list (a warning, not exit 2).",
            ),
        ),
        (
            "kernel_modules",
            click.option(
                "--kernel-modules",
                type=click.Choice(["auto", "open", "proprietary"]),
                help="Driver kernel-module flavour.",
            ),
        ),
        (
            "cuda_toolkit",
            click.option("--cuda-toolkit", type=NONEMPTY, help="System CUDA toolkit VERSION or none (default none)."),
        ),
        ("cudnn", click.option("--cudnn", type=NONEMPTY, help="System cuDNN VERSION or none (default none).")),
        (
            "python",
            click.option(
                "--python", type=NONEMPTY, help="Python X.Y for the venv (default: the OS's python3 when it fits)."
            ),
        ),
        (
            "torch_index",
            click.option(
                "--torch-index",
                type=click.Choice(["auto", "pypi", "pytorch"]),
                help="Where torch wheels may come from.",
            ),
        ),
        (
            "torch_variant",
            click.option(
                "--torch-variant",
                type=NONEMPTY,
                help="Constrain torch's CUDA variant (cu128, cpu) when the spec is a range.",
            ),
        ),
        (
            "install_method",
            click.option(
                "--install-method",
                type=click.Choice(INSTALL_METHOD_CHOICES),
                help="How the driver is installed (overrides install.method).",
            ),
        ),
        (
            "python_source",
            click.option(
                "--python-source",
                type=click.Choice(PYTHON_SOURCES),
                help="The venv's Python: the OS's, a standalone CPython (installed by uv), or auto (the OS's when it "
                "fits; overrides install.python_source).",
            ),
        ),
    ]


def stack_options(func: F) -> F:
    """Declare the stack options and pass them to ``func`` as one ``stack_flags``: the given ones only.

    ``stack_flags`` maps StackRequest.build's keywords to the values typed (``frameworks`` as a
    list); what is not there comes from the config (:meth:`provision.config.Config.request_args`).
    """

    options = _stack_option_list()

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name, _ in options}
        values["frameworks"] = list(values["frameworks"]) or None
        values["allow_unknown_driver"] = values["allow_unknown_driver"] or None  # a flag not given is no override
        return func(*args, stack_flags={k: v for k, v in values.items() if v is not None}, **kwargs)

    decorated: Any = wrapper
    for _, option in reversed(options):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def lock_option(
    help: str, default: Path | None = None, name: str = "--lock", dest: str = "lock_path", **extra: Any
) -> Callable[[F], F]:
    """``--lock FILE`` (or ``name``): the lock a command writes (with a default) or reads."""
    return click.option(
        name,
        dest,
        type=click.Path(dir_okay=False, path_type=Path),
        metavar="FILE",
        default=default,
        show_default=default is not None,
        help=help,
        **extra,
    )


def deprecated_lock_option(new_name: str) -> Callable[[F], F]:
    """The old ``--lock FILE`` of ``plan`` and ``up`` (it meant "write here" on one and "apply this" on
    the other): still taken, into ``old_lock_path``, with a note on stderr naming ``new_name``."""

    def warn(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
        if value is not None:
            click.echo(f"warning: --lock is deprecated here; use {new_name} {value} (same meaning)", err=True)
        return value

    return lock_option(f"Deprecated spelling of {new_name}.", dest="old_lock_path", hidden=True, callback=warn)


def state_option() -> Callable[[F], F]:
    return click.option(
        "--state",
        "state_path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="The fleet state DB (default: state.path in the config, else .provision/state.db).",
    )


# --- role variables -------------------------------------------------------------------------


def set_option(help: str = "Set a role variable; repeatable.") -> Callable[[F], F]:
    """``-e/--set VAR=VALUE`` (repeatable) into ``sets``; :func:`parse_sets` reads them.

    ``-e``: ansible-playbook's extra variables, which beat every other variable of the play, as a
    --set value beats the lock's role variables in the run dir. Only the ``NAME=VALUE`` form
    (Ansible's ``@file`` and JSON forms are refused by :func:`parse_sets`)."""
    return click.option("-e", "--set", "sets", multiple=True, metavar="VAR=VALUE", help=help)


def deprecated_alias(old: str, new: str, dest: str, **kind: Any) -> Callable[[F], F]:
    """A hidden old spelling of option ``new``: taken, with a note on stderr naming ``new``, into
    ``ctx.meta`` (:func:`take_alias` merges it into ``dest``)."""

    def warn(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            click.echo(f"warning: {old} is deprecated; use {new} {value} (same meaning)", err=True)
            ctx.meta[f"alias:{dest}"] = value

    return click.option(old, f"deprecated_{dest}", hidden=True, expose_value=False, callback=warn, **kind)


def take_alias(dest: str, value: Any) -> Any:
    """``value`` of option ``dest``, or what its deprecated spelling gave (:func:`deprecated_alias`)."""
    old = click.get_current_context().meta.get(f"alias:{dest}")
    return value if value is not None or old is None else old


def verbose_option() -> Callable[[F], F]:
    """``-v``: what ansible-playbook prints, on stderr (the commands that apply: up, rollback)."""
    return click.option(
        "-v",
        "--verbose",
        "verbosity",
        count=True,
        help="Show what ansible-playbook prints (on stderr); -vv and more add ansible-playbook's own -v.",
    )


def reboot_controller_option() -> Callable[[F], F]:
    return click.option(
        "--reboot-controller",
        is_flag=True,
        help="Allow rebooting the machine that runs Ansible (--local) when the driver needs it.",
    )


def parse_sets(pairs: tuple[str, ...]) -> dict[str, Any]:
    """``--set`` values as role variables: ``NAME=VALUE`` with VALUE read as YAML (``[a, b]``, ``true``)."""
    import yaml  # noqa: PLC0415 (yaml is not loaded on every start: about 10 ms)

    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep:
            raise BadInput(
                f"--set {pair!r} is not NAME=VALUE",
                "write e.g. --set nvidia_driver_debian_mirror=http://mirror/debian",
            )
        try:
            out[name.strip()] = load_yaml(raw, f"--set {name}") if raw.strip() else ""
        except yaml.YAMLError:
            raise BadInput(f"--set {name}: the value is not YAML", "quote strings; lists as [a, b]") from None
    return out
