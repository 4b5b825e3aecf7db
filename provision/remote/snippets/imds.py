"""The EC2 instance type from the instance metadata service (IMDSv2), run ON the target.

argv[1] is the endpoint (http://169.254.169.254 on EC2; a test server in tests). A token first
(IMDSv2: instances launched with HttpTokens=required answer nothing without it), then the type.
Short timeouts: off EC2 nothing answers and the probe must not wait. Prints the type or nothing.
"""

from __future__ import annotations

import sys
import urllib.request

TIMEOUT = 1.0


def main() -> None:
    base = sys.argv[1].rstrip("/")
    # No proxy: the metadata service is link-local and a proxy would answer for it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        token_request = urllib.request.Request(
            f"{base}/latest/api/token", method="PUT", headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"}
        )
        token = opener.open(token_request, timeout=TIMEOUT).read().decode()
        request = urllib.request.Request(
            f"{base}/latest/meta-data/instance-type", headers={"X-aws-ec2-metadata-token": token}
        )
        print(opener.open(request, timeout=TIMEOUT).read().decode().strip())
    except (OSError, ValueError):
        return


if __name__ == "__main__":
    main()
