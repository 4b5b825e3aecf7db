"""The EC2 client provision uses: one region's session with every phase (launch, list, down).

One run = the instances of one ``cloud up`` plus the security group and key pair made for them,
all tagged ``provision:run`` and ``provision:expires-at``. AWS is the record: ``ls`` and ``down``
read the tags, so they work from any machine with the credentials, and a crashed ``up`` leaves
nothing that ``down --run`` cannot find.
"""

from __future__ import annotations

from provision.cloud.aws.launch import Launching
from provision.cloud.aws.listing import Listing
from provision.cloud.aws.teardown import Teardown


class Ec2(Launching, Teardown, Listing):
    """One region's EC2 client plus the policies of the phase modules (retries, waits, tags)."""
