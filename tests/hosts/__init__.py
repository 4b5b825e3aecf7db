"""SSH test hosts: Debian 12 systemd-nspawn containers on a private bridge (see testhosts.sh)."""
