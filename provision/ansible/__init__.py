"""Ansible at the edge: role variables from a lock group, the run dir, the ansible-runner facade."""
