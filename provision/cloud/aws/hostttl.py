"""The TTL held by the instance itself: user data that powers it off at ``provision:expires-at``.

``cloud down --expired`` needs a controller that is still there; a laptop closed or a CI job
killed after ``cloud up`` leaves GPUs billing. So every instance is launched with
``InstanceInitiatedShutdownBehavior=terminate`` (a shutdown from inside the OS then terminates
it instead of stopping it: EC2 User Guide, "Change instance initiated shutdown behavior",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/Using_ChangingInstanceInitiatedShutdownBehavior.html)
and with the user data below, which arms a power-off at the expiry.

User data that starts with ``#!`` is a "user data script": cloud-init runs it once, as root,
late in the first boot (cloud-init docs, "User data formats",
https://docs.cloud-init.io/en/latest/explanation/format.html; EC2 User Guide, "Run commands
when you launch an EC2 instance with user data input",
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/user-data.html, which also sets the 16 KB
limit on the raw data and says boto3/the CLI do the base64 encoding). Ubuntu, Debian, RHEL and
Amazon Linux 2023 images on EC2 all boot with cloud-init and systemd, so the script is plain
POSIX sh and uses only ``date``, ``shutdown`` and ``systemctl``.

Because the script runs only on the first boot and a shutdown scheduled with ``shutdown -P +N``
lives in ``/run`` (lost on reboot), the script installs a small boot-time unit that arms the
power-off again on every boot, and powers off at once when the expiry has passed (an instance
stopped through the API and started again later). The minutes are rounded up, so the instance
ends within a minute after its ``provision:expires-at``.

provision does not take user data from the user (there is no ``--user-data`` option); this
script is the whole of the user data of every instance it launches.
"""

from __future__ import annotations

from datetime import datetime, timezone

# The tag that says the launch request carried this user data and terminate-on-shutdown, so
# `cloud ls` can show it without one DescribeInstanceAttribute call per instance.
TAG_HOST_TTL = "provision:host-ttl"
HOST_TTL_ARMED = "shutdown-at-expiry"
SHUTDOWN_BEHAVIOR = "terminate"

_SCRIPT = """#!/bin/sh
# provision run {run}: power off (which terminates this instance: it was launched with
# InstanceInitiatedShutdownBehavior=terminate) at provision:expires-at {expires}, even when
# the machine that launched it is gone. Run once by cloud-init; the unit below re-arms it on
# every boot, because a shutdown scheduled with `shutdown -P +N` does not survive a reboot.
cat > /usr/local/sbin/provision-ttl <<'EOF'
#!/bin/sh
left=$(( {epoch} - $(date +%s) ))
if [ "$left" -le 0 ]; then exec shutdown -P now "provision: run {run} expired at {expires}"; fi
exec shutdown -P "+$(( (left + 59) / 60 ))" "provision: run {run} expires at {expires}"
EOF
chmod 0755 /usr/local/sbin/provision-ttl
if command -v systemctl >/dev/null 2>&1; then
  cat > /etc/systemd/system/provision-ttl.service <<'EOF'
[Unit]
Description=provision: power off at the run's TTL ({expires})
After=systemd-logind.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/provision-ttl

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  systemctl enable provision-ttl.service
fi
/usr/local/sbin/provision-ttl
"""


def user_data(run: str, expires: datetime) -> str:
    """The user-data script for one run (the run id is checked by the caller: it is [0-9a-f-] only)."""
    expires = expires.astimezone(timezone.utc)
    return _SCRIPT.format(run=run, expires=expires.strftime("%Y-%m-%dT%H:%M:%SZ"), epoch=int(expires.timestamp()))
