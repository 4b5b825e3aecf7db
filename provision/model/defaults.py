"""Values declared once that the config, the CLI, the resolver, the Ansible settings and the roles share.

The roles keep their own YAML copies (``choices:`` in ``meta/argument_specs.yml``, the venv in
``playbooks/roles/python_env/defaults/main.yml``) because Ansible reads them without provision;
``tests/unit/roles/test_roles_lint.py`` checks those copies equal these values.
"""

from __future__ import annotations

# How the NVIDIA driver (and a system CUDA toolkit) is installed: NVIDIA's CUDA network repository
# or the OS's own packages. The roles take one of these; the request and the config also take auto
# (the resolver picks per host).
INSTALL_METHODS = ("nvidia-repo", "distro")
INSTALL_METHOD_CHOICES = ("auto", *INSTALL_METHODS)

# Where the frameworks' virtual environment lives on each host (install.venv's default, the
# python_env role's python_env_path, from which frameworks_venv and verify_venv derive).
DEFAULT_VENV = "/opt/provision/venv"
# Where python_env has uv install a standalone CPython (its python_env_standalone_dir): `up` takes
# a venv made from a Python under it for the lock's standalone CPython (provision.fleet.planning).
STANDALONE_PYTHON_DIR = "/opt/provision/python"

# `provision health`'s fan-out: hosts asked at once, and how long one host may take (the program
# answers in under 2 s; the rest is the SSH connection). Here, not in provision/fleet/health.py, so
# the CLI's options show them without importing the fleet at start-up (`provision --help`).
HEALTH_PARALLEL = 64
HEALTH_TIMEOUT_S = 30.0

# Where the health role installs provision-health's spec and program (its health_spec_file and
# health_lib_dir + /health defaults; tests/unit/fleet/test_health_spec.py checks the copies equal):
# the probe reads both there, and `up` applies a converged host again when they are not current.
HEALTH_SPEC_FILE = "/etc/provision/health.json"
HEALTH_PROGRAM_DIR = "/usr/local/lib/provision/health"
