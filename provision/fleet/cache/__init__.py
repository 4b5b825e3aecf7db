"""The fleet cache (``install.cache: auto|off``): N hosts download each artifact once.

For a run that applies to SSH hosts the controller, for the length of the run:

- runs squid, a caching HTTP proxy from the OS's packages, for the hosts' apt/dnf traffic
  (cached by URL, ``collapsed_forwarding`` so hosts asking at the same moment share one
  upstream fetch; package files are kept, index files are revalidated);
- fills a wheelhouse once per (Python, architecture) with ``pip download`` of exactly the pins
  the hosts' frameworks role would install, from the same indexes and find-links, and serves it
  over HTTP;
- opens one SSH connection per host (host keys verified as everywhere) with reverse port
  forwards, so a host reaches both on its own ``127.0.0.1``: hosts need no route to the
  controller, which is what cloud instances behind NAT and jump hosts have.

Not an open proxy: every tunnelled request comes from 127.0.0.1, so squid fetches only from this
run's repositories and indexes (:class:`RepoSources`, :func:`_acl_rules`) and the forwards must
listen on the host's loopback only (:meth:`Tunnel.forward`).

Nothing persists on a host: the proxy reaches apt through the play's ``environment`` and the
wheelhouse is a ``--find-links`` of this run's host_vars, so a killed run leaves no host pointing
at a tunnel that is gone. ``auto`` never fails a run: a part that cannot start (no squid on the
controller, a wheel that has no binary for the host's platform) is left out with a note and the
hosts fetch that part themselves.

Why squid and not apt-cacher-ng: apt-cacher-ng 3.7 cannot bind its port in gVisor sandboxes
such as our CI (its resolver fails on the bind address), and squid also serves dnf.
HTTPS sources pass through uncached (a proxy cannot read TLS); the Debian/Ubuntu archives and
security mirrors are plain HTTP (apt checks their signatures), and wheels never go through the
proxy.

``auto``'s rule for every part: one that cannot start is off with a one-line reason
(:func:`one_line`), never a failed run.

The parts: ``config`` (what ``install.cache`` means for one run: whether it runs, where it lives,
what it caches), ``sources`` (what squid may fetch), ``squid`` (its config, log and process),
``wheels`` (the wheelhouse: ``pip download`` plan and its HTTP server), ``tunnel`` (the reverse
forwards and the host_vars that point a host at them) and ``run`` (:class:`~provision.fleet.cache.run.FleetCache`,
which starts them for a run and reports what they did).
"""

from __future__ import annotations

from provision.errors import ProvisionError


def one_line(exc: BaseException) -> str:
    """Why a part of the cache is off, for the run's notes: the error's first line, at most 200 characters."""
    text = exc.reason() if isinstance(exc, ProvisionError) else str(exc)
    return (text.splitlines() or [type(exc).__name__])[0][:200]
