"""reference/supported.md: what the knowledge (provision/matrix/data/*.yaml) covers, through the
same loader and rows that `provision matrix` shows."""

from __future__ import annotations

from itertools import groupby
from typing import Any

from refdocs.md import generated, prose, table


def _list(values: Any) -> str:
    return ", ".join(str(v) for v in values)


# The host `plan` is tried with on each OS release: a GPU every driver branch and OS supports.
PLAN_GPU = "L4"


def plannable(os_id: str) -> str:
    """ "yes" where `plan` takes an OS release (resolved and checked as plan does), else its reason."""
    from provision.errors import ProvisionError
    from provision.stack.packages import check_plannable
    from provision.stack.request import HostSpec, StackRequest
    from provision.stack.resolve import resolve

    host = HostSpec.describe(os=os_id, gpu=PLAN_GPU, gpu_count=1)
    try:
        check_plannable(host)
        check_plannable(host, resolve(StackRequest.build(), host).packages)
    except ProvisionError as exc:
        return exc.reason()
    return "yes"


def os_section(k: Any) -> str:
    refused = {o.id: why for o in k.os_releases if (why := plannable(o.id)) != "yes"}
    rows = [
        (
            f"`{o.id}`" + (f" ({_list(o.aliases)})" if o.aliases else ""),
            o.family,
            _list(o.archs),
            _list(o.pythons),
            _list(o.install_methods) or "-",
            o.eol or "-",
            "no, see below" if o.id in refused else "yes",
        )
        for o in k.os_releases
    ]
    return (
        f"## OS releases\n\nThe default is `{k.t.default_os}`. *plan*: whether `plan` and `up` take the release "
        f"(tried with one {PLAN_GPU} and the default request while this page was built); `resolve` knows them all.\n\n"
        + table(("OS", "Family", "Arch", "Python (OS packages)", "Driver install methods", "End of life", "plan"), rows)
        + "".join(f"\n- {prose(why)}" for why in refused.values())
        + "\n"
    )


def driver_section(k: Any) -> str:
    from provision.stack.tables import driver_rows

    rows = [
        (r["branch"], r["class"], r["max_cuda"], r["newest"] or "-", r["eol"] or "-", "yes" if r["end_of_life"] else "")
        for r in driver_rows(k, None)
    ]
    return "## Driver branches\n\n" + table(
        ("Branch", "Class", "Newest CUDA", "Newest release", "End of life", "Ended"), rows
    )


def gpu_section(k: Any) -> str:
    from provision.stack.tables import gpu_row

    parts = [
        "## GPUs\n\nBy architecture, newest first; names are matched case-insensitively, as NVML prints them, "
        "or by PCI ID (`10de:XXXX`).\n"
    ]
    for arch in k.t.architectures.values():
        gpus = [g for g in k.gpus if g.arch == arch.name]
        if not gpus:
            continue
        rows = []
        for g in gpus:
            r = gpu_row(g)
            rows.append(
                (
                    f"`{g.name}`" + (f" ({_list(g.aliases)})" if g.aliases else ""),
                    r["compute_capability"],
                    r["memory_gib"],
                    r["kernel_modules"],
                    r["driver_branches"],
                    "yes" if r["fabric_manager"] else "",
                )
            )
        parts.append(
            f"\n### {arch.name.capitalize()}\n\nCompute capability {_list(arch.compute_capabilities)}; "
            f"CUDA {arch.first_cuda} or newer"
            + (f", up to {arch.last_cuda}" if arch.last_cuda else "")
            + f"; driver branch {arch.min_driver_branch} or newer"
            + (f", up to {arch.last_driver_branch}" if arch.last_driver_branch else "")
            + ".\n\n"
            + table(
                ("GPU", "Compute capability", "Memory (GiB)", "Kernel modules", "Driver branches", "Fabric Manager"),
                rows,
            )
        )
    return "".join(parts)


def cuda_section(k: Any) -> str:
    rows = [
        (t.version, t.minor_compat_min_driver, t.full_compat_min_driver or "-", f"{t.sm_min}-{t.sm_max}", _list(t.os))
        for t in k.t.toolkits
    ]
    return "## CUDA toolkits\n\nA system toolkit only when asked (`--cuda-toolkit`, `stack.cuda_toolkit`).\n\n" + table(
        ("CUDA", "Driver (minor-version compatibility)", "Driver (full)", "SM", "OS"), rows
    )


def framework_section(k: Any) -> str:
    torch = [(r.version, _list(r.python), _list(f"`{v.name}`" for v in r.variants), r.pypi_default) for r in k.t.torch]
    tensorflow = [(r.version, _list(r.python), r.cuda, r.cudnn, "yes" if r.and_cuda else "") for r in k.t.tensorflow]
    jax = [(j.version, _list(j.python), _list(k.t.jax_lines[m].extra for m in j.cuda_majors)) for j in k.t.jax]
    return (
        "## Frameworks\n\n### PyTorch\n\n"
        + table(("torch", "Python", "Variants", "Variant on PyPI"), torch)
        + "\n### TensorFlow\n\n"
        + table(("tensorflow", "Python", "CUDA", "cuDNN", "`[and-cuda]`"), tensorflow)
        + "\n### JAX\n\n"
        + table(("jax", "Python", "Extras"), jax)
    )


def ec2_section(k: Any) -> str:
    from provision.stack.tables import instance_rows

    rows = []
    for family, group in groupby(instance_rows(k), key=lambda r: k.instance_type(r["name"]).family):
        items = list(group)
        gpus = sorted({f"{r['gpu']}" for r in items})
        rows.append(
            (
                f"`{family}`",
                _list(gpus),
                _list(sorted({r["gpu_count"] for r in items})),
                _list(sorted({r["arch"] for r in items})),
                _list(f"`{r['name']}`" for r in items),
            )
        )
    return "## EC2 GPU instance types\n\nPrices per type: `provision matrix --instances`.\n\n" + table(
        ("Family", "GPU", "GPUs per instance", "Arch", "Types"), rows
    )


def page() -> str:
    from provision.matrix import load

    k = load()
    return "\n".join(
        [
            "# What is supported\n",
            generated("the knowledge, `provision/matrix/data/*.yaml` (through `provision.matrix.load()`)"),
            f"Knowledge version {k.version} (data read up to {k.t.snapshot}). Every entry in the data carries its "
            "`source:` and, where not first-hand, its `confidence`; `provision matrix` prints the same tables, "
            "and `provision matrix --gpu NAME` what runs on one GPU.\n",
            os_section(k),
            driver_section(k),
            gpu_section(k),
            cuda_section(k),
            framework_section(k),
            ec2_section(k),
        ]
    )
