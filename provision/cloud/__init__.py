"""EC2 for provision: launch tagged GPU instances, list them with their cost, terminate them.

``request`` checks what was asked (pure), ``images`` finds the AMI, ``ec2`` talks to AWS,
``errors`` classifies AWS failures once, ``prices`` says what an instance costs and
``inventory`` writes what the next step (``provision probe -i`` / ``up -i``) reads.
Nothing here is imported by ``provision --help`` or ``provision resolve``: boto3 loads only
when a cloud command runs.
"""
