"""Property tests: whatever the request and host, a resolved stack satisfies every rule.

The rules are re-checked here from the knowledge tables directly (not through the resolver's
own rule functions), so a resolver bug cannot hide behind itself. Unsatisfiable answers must
name at least one failing rule.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from provision.errors import Unsatisfiable
from provision.matrix import cc_tuple, load, wheels
from provision.stack import venv_conflicts
from provision.stack.request import HostSpec, StackRequest
from provision.stack.resolve import resolve
from provision.stack.search import Resolver

K = load()
WHEELS = wheels.load()
GPUS = [g.name for g in K.gpus]
OSES = [o.id for o in K.os_releases]
TORCH = [r.version for r in K.t.torch]
TF = [r.version for r in K.t.tensorflow if r.and_cuda]
TF_ALL = [r.version for r in K.t.tensorflow]
BRANCHES = [str(b.branch) for b in K.t.branches if b.newest]

framework_sets = st.one_of(
    st.just([]),
    st.sampled_from(TORCH).map(lambda v: [f"torch=={v}"]),
    st.sampled_from(TORCH).map(lambda v: [f"torch>={v}"]),
    st.sampled_from(TORCH).map(lambda v: [f"torch=={v}+cpu"]),
    st.sampled_from(TF).map(lambda v: [f"tensorflow[and-cuda]=={v}"]),
    st.sampled_from(["jax", "jax[cuda12]", "jax[cuda13]"]).map(lambda j: [j]),
    st.tuples(st.sampled_from(TORCH), st.sampled_from(TF)).map(lambda p: [f"torch=={p[0]}", f"tensorflow=={p[1]}"]),
    st.just(["torch", "jax"]),
    st.sampled_from(TF_ALL).map(lambda v: [f"tensorflow=={v}"]),
)

requests = st.fixed_dictionaries(
    {
        "frameworks": framework_sets,
        "driver": st.one_of(st.just("auto"), st.just("none"), st.sampled_from(BRANCHES)),
        "kernel_modules": st.sampled_from(["auto", "auto", "open", "proprietary"]),
        "torch_index": st.sampled_from(["auto", "auto", "pypi", "pytorch"]),
        "cuda_toolkit": st.one_of(st.none(), st.sampled_from(["12.8", "13.0", "12.2", "11.8"])),
        "cudnn": st.one_of(st.none(), st.sampled_from(["9.10.2.21", "9.17.1.4", "9.5.1.17", "8.9.7.29"])),
    }
)
hosts = st.fixed_dictionaries(
    {
        "gpu": st.one_of(st.none(), st.sampled_from(GPUS)),
        "gpu_count": st.sampled_from([1, 2, 4, 8]),
        "os": st.sampled_from(OSES),
    }
)
INSTANCES = [it.name for it in K.instance_types]


def _check_invariants(req_in: dict[str, Any], host: HostSpec, doc: dict[str, Any]) -> None:
    stack, codes = doc["stack"], {w["code"] for w in doc["warnings"]}
    gpu = host.gpu
    driver = stack["driver"]
    fws = stack["frameworks"]
    python = stack["python"]
    # python: from the OS; a standalone CPython (python_source auto) only when no set fits an OS Python
    if stack["python_source"] == "os":
        assert python in host.os.pythons
    else:
        assert stack["python_source"] == "standalone" and K.t.standalone_python is not None
        assert python in K.t.standalone_python.pythons
        try:  # the search alone: the verdict without the suggestions resolve() would add
            Resolver(StackRequest.build(**req_in, python_source="os"), host, K).run()
        except Unsatisfiable:
            pass
        else:
            raise AssertionError("a standalone Python was chosen although an OS Python fits")
    # frameworks: exactly those asked for (torch by default), each matching its specifier
    asked = {f.split("[")[0].split("=")[0].split(">")[0] for f in req_in["frameworks"]} or {"torch"}
    assert set(fws) == asked
    for spec in req_in["frameworks"]:
        name = spec.split("[")[0].split("=")[0].split(">")[0]
        version_spec = spec[spec.index("]") + 1 :] if "]" in spec else spec[len(name) :]
        assert Version(fws[name]["version"]) in SpecifierSet(version_spec.split("+")[0])
    # driver rules
    if req_in["driver"] == "none":
        assert driver is None
    if driver is not None:
        branch = int(driver["branch"])
        assert driver["version"].startswith(f"{branch}.")
        if req_in["driver"] not in ("auto", "none"):
            assert driver["branch"] == req_in["driver"]
        if gpu is not None:
            assert branch >= gpu.min_driver_branch
            assert gpu.last_driver_branch is None or branch <= gpu.last_driver_branch
            if gpu.kernel_modules == "proprietary-only":
                assert driver["kernel_modules"] == "proprietary"
            if gpu.kernel_modules == "open-only":
                assert driver["kernel_modules"] == "open"
        if req_in["kernel_modules"] != "auto":
            assert driver["kernel_modules"] == req_in["kernel_modules"]
        b = K.branch(branch)
        assert b is not None
        if b.eol and b.eol < K.t.snapshot:
            assert "eol_branch" in codes
    # fabric manager equals the driver exactly, and only on NVSwitch boards
    needs_fm = gpu is not None and gpu.needs_fabric_manager and host.gpu_count >= 8
    if needs_fm and driver is not None:
        assert stack["fabric_manager"] == {"version": driver["version"]}
    else:
        assert stack["fabric_manager"] is None
    # frameworks never share a venv where a shared package has no release for all their pins
    # (torch as the PyPI wheel; a download.pytorch.org-only variant is reported unchecked instead)
    torch_rel = next((r for r in K.t.torch if r.version == fws["torch"]["version"]), None) if "torch" in fws else None
    if len(fws) > 1 and (torch_rel is None or fws["torch"]["variant"] in ("cpu", torch_rel.pypi_default)):
        reqs = [
            f"{n}[{','.join(f['extras'])}]=={f['version']}" if f.get("extras") else f"{n}=={f['version']}"
            for n, f in fws.items()
            if f.get("variant") != "cpu"
        ]
        assert not venv_conflicts.check(reqs, host.arch, python).conflicts, reqs
    # system CUDA and cuDNN only when asked; packaged for the OS, running on the GPU
    assert (stack["cuda_toolkit"] is None) == (req_in["cuda_toolkit"] is None)
    assert (stack["cudnn"] is None) == (req_in["cudnn"] is None)
    if req_in["cuda_toolkit"] is not None:
        # the distro method installs the OS archive's own nvidia-cuda-toolkit (one version per OS,
        # os.yaml distro_cuda_toolkit); every other path takes NVIDIA's repository, which packages
        # each release for the OSes its list names
        if driver is not None and driver["install_method"] == "distro":
            assert host.os.distro_cuda_toolkit == req_in["cuda_toolkit"]
        else:
            assert host.os.id in K.toolkit(req_in["cuda_toolkit"]).os
    if stack["cudnn"] is not None and gpu is not None:
        assert _cudnn_runs_on(stack["cudnn"]["version"], gpu)
    # the cuDNN jax's plugin or TensorFlow's [and-cuda] lets pip install (the newest release their own
    # range allows, from wheels.yaml's METADATA pins and release lists) runs on the GPU too
    if gpu is not None:
        for name, fw in fws.items():
            if name != "torch" and fw.get("extras"):
                found = _newest_cudnn(f"{name}[{','.join(fw['extras'])}]=={fw['version']}", host.arch, python)
                pinned = [r.split("==")[1] for r in doc["pip"] if r.startswith("nvidia-cudnn-cu")]
                if "torch" in fws and fws["torch"]["variant"] != "cpu":
                    continue  # torch's exact cuDNN pin governs the venv (its own rule checks it)
                installed = pinned[0] if pinned else found
                assert installed is None or _cudnn_runs_on(installed, gpu), (name, fw, found, pinned)
    # open kernel modules on GeForce/workstation cards: production from R560, alpha before R545
    if driver is not None and gpu is not None and _geforce(gpu) and gpu.kernel_modules == "open-recommended":
        branch = int(driver["branch"])
        if branch < 560 and driver["kernel_modules"] == "open":
            assert branch >= 545 and req_in["kernel_modules"] == "open" and "open_modules_beta" in codes
    # Maxwell, Pascal, Volta: a deprecated caveat while a supported branch still drives them
    if gpu is not None and gpu.arch in ("maxwell", "pascal", "volta"):
        assert "deprecated_gpu" in codes
    # torch: the wheel reaches the GPU and the driver runs its CUDA
    t = fws.get("torch")
    if t is not None:
        rel = next(r for r in K.t.torch if r.version == t["version"])
        variant = rel.variant(t["variant"])
        assert variant is not None
        assert python in rel.python
        if variant.name == "cpu":
            assert t["cuda"] is None and t["index_url"].endswith("/cpu")
        else:
            if req_in["torch_index"] == "pypi":
                assert variant.name == rel.pypi_default and "pypi.org" in t["index_url"]
            if gpu is not None:
                arch_list = variant.arch_list_aarch64 if host.arch == "aarch64" else variant.arch_list
                ccs = [cc_tuple(a) for a in arch_list]
                exact = gpu.cc in ccs or any(a[0] == gpu.cc[0] and a[1] <= gpu.cc[1] for a in ccs)
                assert exact or (variant.ptx and gpu.cc > max(ccs) and "ptx_jit" in codes)
                if variant.cudnn is not None:  # the cuDNN the wheel brings reaches the GPU
                    assert _cudnn_runs_on(variant.cudnn, gpu), (variant.cudnn, gpu.name)
            tk = req_in["cuda_toolkit"]
            if tk is not None and variant.cuda is not None and tk.split(".")[0] != variant.cuda.split(".")[0]:
                assert "toolkit_torch_cuda" in codes
            if driver is not None:
                cuda = variant.cuda
                assert cuda is not None
                floor = K.minor_floor(int(cuda.split(".")[0]))
                assert floor is not None and Version(driver["version"]) >= Version(floor)
                full = next(x.full_compat_min_driver for x in K.t.toolkits if x.version == cuda)
                if full and Version(driver["version"]) < Version(full):
                    assert "minor_version_compat" in codes
    tf = fws.get("tensorflow")
    if tf is not None:
        assert host.arch == "x86_64"
        rel_tf = next(r for r in K.t.tensorflow if r.version == tf["version"])
        assert python in rel_tf.python
        if "and-cuda" not in tf["extras"]:  # it loads the system CUDA and cuDNN: major ==, minor >=
            for built, have in ((rel_tf.cuda, req_in["cuda_toolkit"]), (rel_tf.cudnn, req_in["cudnn"])):
                assert have is not None
                b, h = Version(built).release, Version(have).release
                assert h[0] == b[0] and h[1] >= b[1], (built, have)
        if gpu is not None:
            assert gpu.cc >= cc_tuple(rel_tf.min_cc)
        if driver is not None:
            assert Version(driver["version"]) >= Version(K.minor_floor(int(rel_tf.cuda.split(".")[0])) or "0")
    j = fws.get("jax")
    if j is not None:
        major = int(j["extras"][0].removeprefix("cuda"))
        line = K.t.jax_lines[major]
        if gpu is not None:
            assert gpu.cc >= cc_tuple(line.min_cc)
        if driver is not None:
            assert Version(driver["version"]) >= Version(line.min_driver)


def _newest_cudnn(requirement: str, arch: str, python: str) -> str | None:
    fp = WHEELS.get(requirement)
    found = fp.requirements(arch, python) if fp is not None else None
    for r in found or []:
        name = canonicalize_name(r.name)
        if name.startswith("nvidia-cudnn-cu") and name in WHEELS.releases:
            allowed = [v for v in WHEELS.releases[name] if r.specifier.contains(v)]
            return max(allowed, key=Version) if allowed else None
    return None


def _cudnn_runs_on(version: str, gpu: Any) -> bool:
    """cuDNN's own floors, from the knowledge and the measured series cuts (not the resolver's code):
    cuDNN 9 from compute capability 5.0, 9.11 from 7.5, Blackwell from 9.7."""
    v = Version(version)
    rel = next((r for r in K.t.cudnn if r.version == version), None)
    need = (7, 5) if v >= Version("9.11") else (5, 0) if v >= Version("9") else (3, 5)
    if rel is not None:
        need = max(need, cc_tuple(rel.min_cc))
    return bool(gpu.cc >= need and (gpu.arch != "blackwell" or v >= Version("9.7")))


def _geforce(gpu: Any) -> bool:
    forms = [f.split()[0] for f in gpu.pci_forms.values()]
    return bool(forms) and all(f in ("card", "workstation", "max-q") for f in forms)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req_in=requests, host_in=hosts)
def test_every_lock_satisfies_every_rule(req_in: dict[str, Any], host_in: dict[str, Any]) -> None:
    req = StackRequest.build(**req_in)
    host = HostSpec.describe(**{k: v for k, v in host_in.items() if k != "gpu_count" or host_in["gpu"]})
    try:
        res = resolve(req, host)
    except Unsatisfiable as err:
        assert err.conflicts and all(":" in c for c in err.conflicts)
        return
    doc = res.to_json()
    doc["pip"] = list(res.packages.pip.requirements) if res.packages.pip else []
    _check_invariants(req_in, host, doc)
    again = resolve(req, host).to_json()
    assert again == {k: v for k, v in doc.items() if k != "pip"}  # pure: the same question, the same answer


@settings(max_examples=80, deadline=None)
@given(req_in=requests, instance=st.sampled_from(INSTANCES))
def test_instance_types_resolve_to_valid_stacks(req_in: dict[str, Any], instance: str) -> None:
    """Instance types bring GPU, count, arch and Fabric Manager; the same rules hold."""
    host = HostSpec.describe(instance_type=instance, os="ubuntu-22.04")
    try:
        res = resolve(StackRequest.build(**req_in), host)
    except Unsatisfiable as err:
        assert err.conflicts
        return
    doc = res.to_json()
    assert doc["host"]["instance_type"] == instance
    assert doc["host"]["arch"] == K.instance_type(instance).arch
    fm = K.instance_type(instance).fabric_manager and doc["stack"]["driver"] is not None
    assert (doc["stack"]["fabric_manager"] is not None) == fm
    if fm:
        assert doc["stack"]["fabric_manager"]["version"] == doc["stack"]["driver"]["version"]


@settings(max_examples=60, deadline=None)
@given(host_in=hosts)
# a T4G (sm_75) on aarch64: no CUDA torch wheel carries its kernels (knowledge 2026.12.7), so the
# only working change is torch's CPU build (found by this test in the first run of that knowledge)
@example(host_in={"gpu": "T4G", "gpu_count": 1, "os": "debian-13"})
def test_suggestions_of_unsatisfiable_answers_resolve(host_in: dict[str, Any]) -> None:
    """Every suggestion is a change that works: applying it to the request resolves."""
    req = StackRequest.build(frameworks=["torch==2.6.0"], driver="535", kernel_modules="open")
    host = HostSpec.describe(**{k: v for k, v in host_in.items() if k != "gpu_count" or host_in["gpu"]})
    try:
        resolve(req, host)
    except Unsatisfiable as err:
        assert err.suggestions, err.conflicts
        for s in err.suggestions:
            args: dict[str, Any] = {"frameworks": ["torch==2.6.0"], "driver": "535", "kernel_modules": "open"}
            host_args = dict(host_in) if host_in["gpu"] else {"os": host_in["os"]}
            frameworks: list[str] = []
            for change in s["changes"]:
                key = change["option"].removeprefix("--").replace("-", "_")
                if key == "framework":
                    frameworks.append(change["value"])
                elif key in ("os", "arch"):
                    host_args[key] = change["value"]
                else:
                    args[key] = change["value"]
            if frameworks:
                args["frameworks"] = frameworks
            assert resolve(StackRequest.build(**args), HostSpec.describe(**host_args)).stack, s


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req_in=requests, host_in=hosts)
def test_no_variant_of_the_chosen_release_has_fewer_caveats(req_in: dict[str, Any], host_in: dict[str, Any]) -> None:
    """Of the chosen torch release, every other variant resolves with at least as many caveats.

    Only where the resolver chose the variant: a spec with a local tag (``torch==2.14.1+cpu``) is the
    user's choice, kept whatever its caveats (CI drew ``+cpu`` with a system CUDA 12.8 toolkit: the
    toolkit's driver is left alone, a caveat the cu126 variant, which installs a driver, has not)."""
    if [f for f in req_in["frameworks"] if not f.startswith("torch")] or req_in["torch_index"] == "pypi":
        return
    if any("+" in f for f in req_in["frameworks"]):
        return
    host = HostSpec.describe(**{k: v for k, v in host_in.items() if k != "gpu_count" or host_in["gpu"]})
    try:
        doc = resolve(StackRequest.build(**req_in), host).to_json()
    except Unsatisfiable:
        return
    t = doc["stack"]["frameworks"]["torch"]
    rel = next(r for r in K.t.torch if r.version == t["version"])
    for v in rel.variants:
        if v.name in (t["variant"], "cpu"):
            continue
        other = {**req_in, "frameworks": [f"torch=={rel.version}+{v.name}"], "torch_index": "pytorch"}
        try:
            alt = resolve(StackRequest.build(**other), host).to_json()
        except Unsatisfiable:
            continue
        assert len(alt["warnings"]) >= len(doc["warnings"]), (v.name, alt["warnings"], doc["warnings"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(req_in=requests, host_in=hosts)
def test_every_suggestion_of_any_request_resolves(req_in: dict[str, Any], host_in: dict[str, Any]) -> None:
    """Whatever the request, each suggestion of an unsatisfiable answer, applied, resolves."""
    host_args = {k: v for k, v in host_in.items() if k != "gpu_count" or host_in["gpu"]}
    try:
        resolve(StackRequest.build(**req_in), HostSpec.describe(**host_args))
    except Unsatisfiable as err:
        for s in err.suggestions:
            args, h = dict(req_in), dict(host_args)
            frameworks = [c["value"] for c in s["changes"] if c["option"] == "--framework"]
            for change in s["changes"]:
                key = change["option"].removeprefix("--").replace("-", "_")
                if key in ("os", "arch"):
                    h[key] = change["value"]
                elif key != "framework":
                    args[key] = change["value"]
            if frameworks:
                args["frameworks"] = frameworks
            assert resolve(StackRequest.build(**args), HostSpec.describe(**h)).stack, s
