"""EC2 through boto3: everything in provision that speaks to AWS, one module per phase.

``session`` opens boto3's session and holds the client, retries and paging; ``errors`` classifies
AWS failures once; ``images`` finds the AMI; ``launch`` makes a run (``failover`` picks zone, type
and market, ``waits`` polls until the hosts answer); ``listing`` reads the runs back from their
tags with ``prices``; ``teardown`` ends them; ``hostttl`` is the user data that ends an instance
at its expiry; ``ec2`` puts the phases together as :class:`~provision.cloud.aws.ec2.Ec2`.
boto3 is imported only inside functions: importing this package loads no SDK.
"""
