"""Tearing down what provision made: a failed launch's leftovers, and ``cloud down`` by run, expiry or all.

Instances first (and waited for), then security groups and key pairs; the run tag finds what an
interrupted call never reported. Local files (private key, inventory) go once a run has no
instance left. Only what provision made is ever removed: a tag selects, and the names provision
gave at creation confirm (:func:`provision.cloud.aws.listing.why_not_owned`); what the tags select
but provision did not make is reported as skipped and left alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provision.cloud.aws import errors as cerr
from provision.cloud.aws.listing import Listing, split_owned
from provision.cloud.aws.session import LIVE_STATES, tag_map
from provision.cloud.aws.waits import Waits
from provision.cloud.errors import CloudError
from provision.cloud.interface import TAG_EXPIRES, TAG_RUN, DownResult, Say, Skipped, local_files, parse_iso
from provision.errors import ProvisionError
from provision.ids import check_run_id


@dataclass
class Created:
    """What a launch has made so far, in order: the cleanup undoes this and what carries the run tag."""

    key_name: str | None = None
    key_file: Path | None = None
    security_group: str | None = None
    instances: list[str] = field(default_factory=list)
    # RunInstances was sent and no answer read yet: instances may exist whose ids we never got
    launching: bool = False

    def describe(self) -> str:
        parts = [*self.instances]
        if self.security_group:
            parts.append(self.security_group)
        if self.key_name:
            parts.append(f"key pair {self.key_name}")
        return ", ".join(parts) or "nothing"


class Teardown(Listing, Waits):
    """Removing a run's resources: after a failed launch (``_cleanup``) and for ``cloud down``."""

    def _of_run(self, run: str) -> Created:
        """What AWS holds tagged ``provision:run=<run>``: instances not yet terminated, group, key pair.

        A launch interrupted while RunInstances (or CreateKeyPair...) was in flight never got
        the ids back, but EC2 made the resources with the run's tags (TagSpecifications), so the
        tag finds them; the names provision gave them confirm they are the run's (a tag alone
        could be anyone's).
        """
        run_filter = [{"Name": f"tag:{TAG_RUN}", "Values": [run]}]
        insts, _ = split_owned(
            list(
                self._paged(
                    "describe_instances",
                    "Reservations",
                    Filters=[*run_filter, {"Name": "instance-state-name", "Values": LIVE_STATES}],
                )
            ),
            "instance",
        )
        groups, _ = split_owned(
            list(self._paged("describe_security_groups", "SecurityGroups", Filters=run_filter)), "security group"
        )
        keys, _ = split_owned(list(self._paged("describe_key_pairs", "KeyPairs", Filters=run_filter)), "key pair")
        return Created(
            key_name=keys[0]["KeyName"] if keys else None,
            security_group=groups[0]["GroupId"] if groups else None,
            instances=[i["InstanceId"] for i in insts],
        )

    def _await_launched(self, run: str, tagged: Created, say: Say, tries: int = 6) -> Created:
        """The run's instances, looked up again for a while after an interrupted RunInstances.

        EC2's API is eventually consistent: instances just made can take a moment to appear in
        DescribeInstances (Amazon EC2 API Reference, "Eventual consistency in the Amazon EC2
        API", https://docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html). The
        call may also never have reached EC2, so the wait is bounded and then said.
        """
        for _ in range(tries):
            self.sleep(self.poll_s)
            tagged = self._of_run(run)
            if tagged.instances:
                return tagged
        say(
            f"RunInstances was interrupted in flight and no instance tagged {TAG_RUN}={run} showed up in "
            f"{tries * self.poll_s:.0f}s; if it reached EC2, they power off at their TTL, or end them with "
            f"`provision cloud down --run {run}`"
        )
        return tagged

    def _cleanup(self, created: Created, say: Say, cause: BaseException, run: str) -> None:
        try:
            tagged = self._of_run(run)
            if created.launching and not tagged.instances:
                tagged = self._await_launched(run, tagged, say)
        except Exception as exc:
            c = cerr.classify(exc)
            if c is None:
                raise
            say(f"could not look up run {run} by its tag ({c.code}); removing what was recorded")
            tagged = Created()
        instances = list(dict.fromkeys([*created.instances, *tagged.instances]))
        groups = list(dict.fromkeys(g for g in (created.security_group, tagged.security_group) if g))
        keys = list(dict.fromkeys(k for k in (created.key_name, tagged.key_name) if k))
        unrecorded = [i for i in instances if i not in created.instances]
        say(
            f"launch failed ({type(cause).__name__}); removing "
            + (", ".join([*instances, *groups, *(f"key pair {k}" for k in keys)]) or "nothing")
            + (f" ({', '.join(unrecorded)} found by the run tag)" if unrecorded else "")
        )
        leftovers = self._remove(instances, groups, keys)
        if created.key_file is not None:
            created.key_file.unlink(missing_ok=True)
        if leftovers:
            raise CloudError(
                f"launch failed and {', '.join(leftovers)} could not be removed",
                f"run `provision cloud down --run {run}` once AWS answers again",
            ) from cause

    def _remove(self, instances: list[str], groups: list[str], keys: list[str]) -> list[str]:
        """Terminate, wait, then delete groups and key pairs; returns what could not be removed."""
        left: list[str] = []
        if instances:
            try:
                self.call(self.client.terminate_instances, InstanceIds=instances)
                self._wait_terminated(instances)
            except Exception as exc:
                if cerr.classify(exc) is None:
                    raise
                left += instances
        for g in groups:
            if not self._delete_group(g):
                left.append(g)
        for k in keys:
            try:
                self.call(self.client.delete_key_pair, KeyName=k)
            except Exception as exc:
                if cerr.classify(exc) is None:
                    raise
                left.append(f"key pair {k}")
        return left

    def _delete_group(self, group: str) -> bool:
        # A group stays in use a little while after its instances terminate (DependencyViolation).
        for _ in range(20):
            try:
                self.call(self.client.delete_security_group, GroupId=group)
                return True
            except Exception as exc:
                c = cerr.classify(exc)
                if c is None:
                    raise
                if c.code == "InvalidGroup.NotFound":
                    return True
                if c.code != "DependencyViolation":
                    return False
                self.sleep(self.poll_s)
        return False

    def _tagged(self, op: str, key: str) -> list[dict[str, Any]]:
        return list(self._paged(op, key, Filters=[{"Name": "tag-key", "Values": [TAG_RUN]}]))

    def down(
        self,
        *,
        run: str | None = None,
        expired: bool = False,
        all_runs: bool = False,
        workdir: Path | None = None,
        confirm: Callable[[DownResult], None] | None = None,
    ) -> DownResult:
        """End the runs selected by ``run``, ``expired`` or ``all_runs``: what provision made of them.

        ``confirm`` is shown what would be ended (``local_files`` still empty) before anything
        is, when there is something; it raises to end nothing.
        """
        if run is not None:
            check_run_id(run)
        now = self.now()

        def chosen(tags: dict[str, str]) -> bool:
            if all_runs:
                return True
            if run is not None:
                return tags.get(TAG_RUN) == run
            exp = parse_iso(tags.get(TAG_EXPIRES, ""))
            return expired and exp is not None and exp <= now

        tagged_i = self._tagged_instances()

        def pick(resources: list[dict[str, Any]], kind: str) -> tuple[list[dict[str, Any]], list[Skipped]]:
            # The tags select; what they select but provision did not make is reported, not removed.
            return split_owned([r for r in resources if chosen(tag_map(r))], kind)

        insts, skipped_i = pick(tagged_i, "instance")
        groups, skipped_g = pick(self._tagged("describe_security_groups", "SecurityGroups"), "security group")
        keys, skipped_k = pick(self._tagged("describe_key_pairs", "KeyPairs"), "key pair")
        skipped = [*skipped_i, *skipped_g, *skipped_k]
        t_ids = [i["InstanceId"] for i in insts]
        runs = sorted({tag_map(r)[TAG_RUN] for r in [*insts, *groups, *keys]})
        # A run's group and key pair go only once none of its instances is left alive.
        alive = {tag_map(i)[TAG_RUN] for i in split_owned(tagged_i, "instance")[0] if i["InstanceId"] not in t_ids}
        g_ids = [g["GroupId"] for g in groups if tag_map(g)[TAG_RUN] not in alive]
        k_names = [k["KeyName"] for k in keys if tag_map(k)[TAG_RUN] not in alive]
        if confirm is not None and runs:
            confirm(DownResult(runs, t_ids, g_ids, k_names, [], skipped))
        spot_requests = [i["SpotInstanceRequestId"] for i in insts if i.get("SpotInstanceRequestId")]
        try:
            if spot_requests:
                self.call(self.client.cancel_spot_instance_requests, SpotInstanceRequestIds=spot_requests)
            left = self._remove(t_ids, g_ids, k_names)
        except ProvisionError:
            raise
        except Exception as exc:
            raise self.fail(exc, "terminating") from exc
        if left:
            raise CloudError(f"could not remove {', '.join(left)}", "run the same `cloud down` again in a minute")
        local: list[str] = []
        if workdir is not None:
            for r in runs:
                if r in alive:
                    continue
                for p in local_files(workdir, r):
                    if p.exists():
                        p.unlink()
                        local.append(str(p))
        return DownResult(runs, t_ids, g_ids, k_names, local, skipped)
