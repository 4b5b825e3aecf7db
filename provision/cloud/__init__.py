"""Cloud runs for provision: launch tagged GPU instances, list them with their cost, end them.

The cloud-neutral part lives here: ``request`` checks what was asked (pure), ``interface`` is
what a cloud implements (:class:`~provision.cloud.interface.Cloud`: launch, listing, down,
errors) and the results it returns, ``errors`` the errors its failures become, ``inventory``
writes what the next step (``provision probe -i`` / ``up -i``) reads, ``launcher`` turns the
options into a checked launch and builds the client, ``oneshot`` is ``up --cloud``'s launch,
provision and end. Everything that speaks to AWS is in ``aws/``, one module per phase.
Nothing here is imported by ``provision --help`` or ``provision resolve``: boto3 loads only
when a cloud command runs.
"""
