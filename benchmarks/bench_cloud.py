"""EC2 launch and listing against a loopback moto server: API calls and wall time, as ratios.

What it shows: a larger fleet costs no more calls to launch (one RunInstances for the whole
count, MinCount=MaxCount) and one DescribeInstances page to list; each zone that answers
"insufficient capacity" adds exactly one RunInstances call. Times are moto's, so only the ratios
and call counts carry over to real EC2 (where the boot wait dominates, minutes, not measured).
Run: `.venv/bin/python benchmarks/bench_cloud.py` (no AWS account, no network beyond loopback).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

REGION = "us-east-1"


class _Http:
    status_code = 400
    headers: dict[str, str] = {}  # noqa: RUF012


def main() -> None:
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION=REGION,
        MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION="true",
        AWS_CONFIG_FILE="/nonexistent",
        AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
    )
    os.environ.pop("AWS_PROFILE", None)
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ["AWS_ENDPOINT_URL"] = f"http://{host}:{port}"
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import boto3

    from provision.cloud.aws.ec2 import Ec2
    from provision.cloud.request import LaunchRequest, describe_type
    from provision.ids import new_run_id

    session = boto3.session.Session(region_name=REGION)
    ubuntu = [{"Name": "name", "Values": ["ubuntu*"]}]
    images = session.client("ec2").describe_images(Filters=ubuntu)["Images"]
    ami = images[0]["ImageId"]

    def cloud(fail_zones: int = 0) -> tuple[Ec2, Counter[str]]:
        ec2 = Ec2(session, REGION, sleep=lambda _s: None, poll_s=0.0)
        calls: Counter[str] = Counter()
        failed: list[int] = [0]
        zone_of = {s["SubnetId"]: s["AvailabilityZone"] for s in ec2.client.describe_subnets()["Subnets"]}
        seen_zones: list[str] = []

        def hook(model: Any, params: dict[str, Any], **_: Any) -> Any:
            calls[model.name] += 1
            if model.name == "RunInstances" and failed[0] < fail_zones:
                zone = zone_of.get(params["body"].get("NetworkInterface.1.SubnetId", ""), "")
                seen_zones.append(zone)
                failed[0] += 1
                return _Http(), {
                    "Error": {"Code": "InsufficientInstanceCapacity", "Message": "bench"},
                    "ResponseMetadata": {"HTTPStatusCode": 400},
                }
            return None

        ec2.client.meta.events.register("before-call.ec2.*", hook)
        return ec2, calls

    def launch(count: int, types: list[str], fail_zones: int = 0) -> tuple[float, Counter[str], Ec2, str]:
        ec2, calls = cloud(fail_zones)
        req = LaunchRequest(
            run=new_run_id(),
            region=REGION,
            types=tuple(describe_type(t) for t in types),
            count=count,
            ttl=timedelta(hours=1),
            ssh_cidr="203.0.113.7/32",
            image=None,
            ami=ami,
            wait_ssh=False,
            os_id="ubuntu-22.04",
        )
        with tempfile.TemporaryDirectory() as work:
            start = time.perf_counter()
            ec2.launch(req, ami_lookup=None, workdir=Path(work))
            took = time.perf_counter() - start
        return took, calls, ec2, req.run

    rows = []
    _, _, ec2, run = launch(1, ["g5.xlarge"])  # warm-up: imports, moto's first answers
    ec2.down(run=run)
    base_t, base_c, ec2, run = launch(1, ["g5.xlarge"])
    base_c = Counter(base_c)  # a copy: the same hook counts the teardown below
    base_calls = sum(base_c.values())
    rows.append(("up, 1 instance", base_t, base_calls, base_c["RunInstances"]))
    ec2.down(run=run)
    for count in (8, 32):
        t, c, ec2, run = launch(count, ["g5.xlarge"])
        rows.append((f"up, {count} instances", t, sum(c.values()), c["RunInstances"]))
        if count == 32:
            ec2_ls, ls_calls = cloud()
            start = time.perf_counter()
            listed = ec2_ls.instances()
            ls_t = time.perf_counter() - start
            assert len(listed) == 32
        ec2.down(run=run)
    for fail in (3, 5, 8):
        t, c, ec2, run = launch(1, ["g5.xlarge", "g6.xlarge"], fail_zones=fail)
        rows.append((f"up, capacity refused in {fail} zones", t, sum(c.values()), c["RunInstances"]))
        ec2.down(run=run)
    ec2_ls, ls1 = cloud()
    t, _, ec2, run = launch(1, ["g5.xlarge"])
    start = time.perf_counter()
    ec2_ls.instances()
    ls1_t = time.perf_counter() - start
    ec2.down(run=run)
    server.stop()

    print("| operation | wall (s) | / up 1 | API calls | RunInstances |")
    print("|---|---|---|---|---|")
    for name, t, n, runs in rows:
        print(f"| {name} | {t:.3f} | {t / base_t:.2f} | {n} | {runs} |")
    print(f"| ls, 1 instance | {ls1_t:.3f} | {ls1_t / base_t:.2f} | {sum(ls1.values())} | 0 |")
    print(f"| ls, 32 instances | {ls_t:.3f} | {ls_t / base_t:.2f} | {sum(ls_calls.values())} | 0 |")
    print(f"\nup of 1 instance, calls: {dict(base_c)}")


if __name__ == "__main__":
    main()
