"""The GPU catalog: every entry parses, names resolve the way people write them, memory is the runtime's."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kvplan.errors import KVPlanError, WorkloadError
from kvplan.gpus import GPU, custom_gpu, list_gpus, load_catalog, parse_custom_gpu, resolve_gpu
from kvplan.units import GB, GiB, MiB

CATALOG_JSON = Path(__file__).resolve().parents[1] / "kvplan" / "data" / "gpus.json"
CALIBRATION_CSV = Path(__file__).resolve().parents[1] / "validation" / "measured" / "vllm_runs_calibration.csv"
MEMORY_KINDS = {"device_query_bytes", "device_query_mib", "torch_mib", "vllm_gib", "assumed", "estimated"}

RAW = json.loads(CATALOG_JSON.read_text())["gpus"]


# ---------------------------------------------------------------------------------------------- the data


@pytest.mark.parametrize("entry", RAW, ids=[e["name"] for e in RAW])
def test_every_entry_has_positive_numbers_and_a_source(entry):
    assert entry["memory_bytes"] > 0 and isinstance(entry["memory_bytes"], int)
    assert entry["memory_bandwidth_bytes_per_s"] > 0
    assert entry["fp16_dense_flops"] > 0
    for key in ("bf16_dense_flops", "fp8_dense_flops"):
        assert entry[key] is None or entry[key] > 0
    assert entry["source"]["memory_kind"] in MEMORY_KINDS
    assert entry["source"]["memory"] and entry["source"]["specs"]
    assert entry["vendor"] in {"nvidia", "amd"}


@pytest.mark.parametrize("entry", RAW, ids=[e["name"] for e in RAW])
def test_runtime_memory_sits_below_the_marketing_figure(entry):
    # The runtime never reports the full marketing size: an 80 GB H100 shows 79.19 GiB (85.03 GB). The
    # reservation is 0.3-9 % of the card (ECC-on GDDR parts such as the L4 and T4 lose the most).
    marketing_bytes = entry["marketing_memory_gb"] * GiB
    assert 0.85 * marketing_bytes < entry["memory_bytes"] < marketing_bytes


@pytest.mark.parametrize("entry", RAW, ids=[e["name"] for e in RAW])
def test_mib_kinds_are_whole_mib(entry):
    # torch prints total_memory in whole MiB and a vLLM GiB figure was rounded to MiB here, so those bytes
    # must be multiples of 2**20; only deviceQuery gives sub-MiB bytes.
    if entry["source"]["memory_kind"] in {"torch_mib", "device_query_mib", "vllm_gib", "estimated"}:
        assert entry["memory_bytes"] % MiB == 0


def test_no_fp8_on_pre_hopper_and_no_bf16_before_ampere():
    by_name = {g.name: g for g in load_catalog()}
    for name in ("A100-SXM-80GB", "A100-SXM-40GB", "A100-PCIe-80GB", "A100-PCIe-40GB", "A10", "A10G",
                 "RTX-3090", "T4", "V100-SXM2-16GB", "V100-SXM2-32GB"):
        assert by_name[name].fp8_flops is None, name
    for name in ("T4", "V100-SXM2-16GB", "V100-SXM2-32GB"):
        assert by_name[name].bf16_flops is None and by_name[name].fp16_flops > 0, name


def test_required_gpus_are_present():
    names = {g.name for g in list_gpus()}
    assert {"H200", "H100-SXM", "H100-PCIe", "A100-SXM-40GB", "A100-SXM-80GB", "L40S", "L4", "A10G",
            "RTX-4090", "RTX-3090", "T4", "V100-SXM2-16GB", "V100-SXM2-32GB", "MI300X", "B200"} <= names


def test_names_and_aliases_are_unambiguous_within_the_catalog():
    # Every canonical name must resolve to itself, and no alias may be listed on two GPUs.
    for gpu in load_catalog():
        assert resolve_gpu(gpu.name) is gpu
    seen: dict[str, str] = {}
    for entry in RAW:
        for alias in entry["aliases"]:
            key = alias.lower()
            assert seen.setdefault(key, entry["name"]) == entry["name"], f"{alias!r} on two GPUs"


def test_aliases_that_spell_a_size_agree_with_the_entry():
    # "H100 94GB" must sit on the 94 GB NVL; the one deliberate exception is the B200's launch figure.
    from kvplan.gpus import _split_name

    allowed = {("B200", 192), ("GH200", 480)}   # 192 GB launch spec; "GH200 480GB" is the device name
    for entry in RAW:
        for alias in entry["aliases"]:
            _, memory_gb = _split_name(alias)
            if memory_gb is not None and (entry["name"], memory_gb) not in allowed:
                assert memory_gb == entry["marketing_memory_gb"], (entry["name"], alias)


def test_the_h200_nvl_is_its_own_gpu():
    """The PCIe H200: the SXM card's 141 GB of HBM3e and 4.8 TB/s, Hopper's SM 9.0, less compute at 600 W, and NVLink
    bridges instead of NVSwitch, so no NCCL NVLS buffers (kvplan.planning.engines.vllm_profile.NVLS_GPUS)."""
    from kvplan.planning.engines.vllm_profile import NVLS_GPUS

    nvl, sxm = resolve_gpu("H200 NVL"), resolve_gpu("H200")
    assert nvl.name == "H200-NVL" and sxm.name == "H200"
    # Unsloth's banner printed 'NVIDIA H200 NVL. ... Max memory: 139.801 GB', round(total_memory / 1024**3, 3)
    assert round(nvl.memory_bytes / GiB, 3) == 139.801 and nvl.memory_bytes % MiB == 0
    assert nvl.memory_bytes == 143_156 * MiB == sxm.memory_bytes   # torch total_memory=143156MB on an SXM H200
    assert nvl.smi_memory_bytes == 143_771 * MiB                    # nvidia-smi 'NVIDIA H200 NVL, 143771 MiB'
    assert nvl.bandwidth_bytes_per_s == 4_800 * GB                  # 4.8 TB/s, as the SXM card
    # NVIDIA's H200 NVL column: BF16/FP16 1,671 and FP8 3,341 TFLOPS with sparsity, halved to dense
    assert nvl.bf16_flops == nvl.fp16_flops == 1_671 * 10**12 // 2 and nvl.fp8_flops == 3_341 * 10**12 // 2
    assert nvl.bf16_flops < sxm.bf16_flops and nvl.tdp_watts == 600 < sxm.tdp_watts == 700
    assert nvl.compute_capability == (9, 0) and nvl.marketing_memory_gb == 141
    assert "H200-NVL" not in NVLS_GPUS and "H100-NVL" not in NVLS_GPUS and "H200" in NVLS_GPUS
    # no public price list in gpu_prices.json's sources has it (RunPod's SkyPilot catalog stops at H200-SXM)
    assert nvl.price_per_hour is None and nvl.price_source == ""


def test_gpu_exposes_gib_and_source():
    h100 = resolve_gpu("H100")
    # deviceQuery 'NVIDIA H100 80GB HBM3: 81090 MBytes (85029158912 bytes)' (kvplan/data/gpus.json's source)
    assert h100.memory_bytes == 85_029_158_912
    assert round(h100.memory_gib, 2) == 79.19
    assert h100.memory_bytes / GB == pytest.approx(85.03, abs=0.01)   # "80 GB" is neither number
    assert "79.19" in h100.source and "device_query_bytes" in h100.source
    assert h100.is_custom is False


# ---------------------------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("H100-80GB", "H100-SXM"),              # the calibration CSV's label
        ("h100", "H100-SXM"),                   # bare name: the SXM part, the one clouds rent
        ("H100", "H100-SXM"),                   # the llm-d-benchmark doc's label
        ("H100 SXM", "H100-SXM"),               # space instead of dash
        ("h100_sxm5", "H100-SXM"),              # underscore and the SXM5 form factor name
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),  # torch.cuda.get_device_name() on an SXM box
        ("H100 PCIe", "H100-PCIe"),             # form factor picks the variant
        ("h100-pcie-80gb", "H100-PCIe"),        # form factor plus size
        ("H100-94GB", "H100-NVL"),              # only the NVL has 94 GB
        ("H100 NVL", "H100-NVL"),
        ("h200", "H200"),
        ("H200-141GB", "H200"),                 # size suffix equal to the marketing size
        ("H200 SXM", "H200"),                   # the SXM5 module on HGX boards (NVSwitch)
        ("H200 NVL", "H200-NVL"),               # the PCIe card: NVLink bridges, no NVSwitch
        ("NVIDIA H200 NVL", "H200-NVL"),        # torch device name (the DeepSeek-V4-Flash hold-out row's GPU)
        ("H200NVL", "H200-NVL"),
        ("H200-NVL-141GB", "H200-NVL"),
        ("A100-40GB", "A100-SXM-40GB"),         # size picks 40 GB, catalog order picks SXM
        ("a100", "A100-SXM-80GB"),              # bare A100 defaults to the SXM 80 GB
        ("A100 80G", "A100-SXM-80GB"),          # "G" as well as "GB"
        ("A100 80 GB", "A100-SXM-80GB"),        # a space inside the size
        ("NVIDIA A100-SXM4-80GB", "A100-SXM-80GB"),   # torch device name
        ("a100 pcie", "A100-PCIe-80GB"),        # bare PCIe defaults to 80 GB too
        ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"),  # torch device name
        ("A100-SXM4-40GB", "A100-SXM-40GB"),
        ("4090", "RTX-4090"),                   # the bare number people type
        ("RTX4090", "RTX-4090"),                # no space
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),  # vendor and brand words are optional
        ("RTX 3090", "RTX-3090"),               # the calibration CSV's label
        ("rtx-6000-ada", "RTX-6000-Ada"),
        ("L40S", "L40S"),
        ("l4", "L4"),                           # must not be confused with L40S
        ("A10G", "A10G"),
        ("a10", "A10"),                         # must not be confused with A100 or A10G
        ("Tesla T4", "T4"),                     # torch device name
        ("v100", "V100-SXM2-16GB"),             # bare V100: the 16 GB SXM2
        ("V100-32GB", "V100-SXM2-32GB"),        # size picks the 32 GB part
        ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),   # torch device name
        ("mi300x", "MI300X"),
        ("AMD Instinct MI300X", "MI300X"),      # ROCm device name
        ("MI325X", "MI325X"),
        ("b200", "B200"),
        ("B200-192GB", "B200"),                 # the launch figure people still write
        ("NVIDIA GH200 480GB", "GH200"),        # device name counts CPU memory in its "480GB"
    ],
)
def test_names_resolve_the_way_people_write_them(spelling, expected):
    assert resolve_gpu(spelling).name == expected


def test_resolving_a_gpu_returns_it_unchanged():
    gpu = custom_gpu(memory_gib=10)
    assert resolve_gpu(gpu) is gpu


def _calibration_rows():
    if not CALIBRATION_CSV.exists():
        pytest.skip("shared calibration CSV not present")
    with CALIBRATION_CSV.open() as f:
        return [row for row in csv.DictReader(f) if row["gpu"]]


def test_every_calibration_gpu_label_resolves_with_matching_memory():
    # vLLM prints total memory with 2 decimals; the catalog must agree to 0.01 GiB for every measured run.
    rows = _calibration_rows()
    assert rows
    for row in rows:
        gpu = resolve_gpu(row["gpu"])
        if row["gpu_memory_total_gib"]:
            assert abs(gpu.memory_gib - float(row["gpu_memory_total_gib"])) <= 0.01 + 1e-9, (
                row["run_id"], gpu.name, gpu.memory_gib, row["gpu_memory_total_gib"])


# ---------------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("spelling", "must_list"),
    [
        ("H1000", "H100-SXM"),          # typo of a real name
        ("A100-48GB", "A100-SXM-80GB"),  # known GPU, size it never had
        ("rtx 5080", "RTX-5090"),        # a GPU the catalog lacks: neighbours, then the custom hint
        ("MI300", "MI300X"),             # MI300A is a different part, so no silent match
    ],
)
def test_unknown_names_raise_with_close_matches_and_the_custom_hint(spelling, must_list):
    with pytest.raises(WorkloadError) as info:
        resolve_gpu(spelling)
    message = str(info.value)
    assert "\n" not in message
    assert must_list in message
    assert "custom:24GiB:1000GB/s" in message
    close = message.split("close matches: ")[1].split(")")[0].split(", ")
    assert 1 <= len(close) <= 5


def test_nonsense_says_there_is_no_close_match():
    with pytest.raises(WorkloadError, match="no close match"):
        resolve_gpu("toaster")


def test_workload_error_is_a_kvplan_error():
    with pytest.raises(KVPlanError):
        resolve_gpu("")


# ---------------------------------------------------------------------------------------------- custom GPUs


def test_custom_gpu_from_keywords_uses_gib_for_memory_and_gb_per_s_for_bandwidth():
    gpu = custom_gpu(memory_gib=24, bandwidth_gbps=1000, bf16_tflops=165)
    assert gpu.memory_bytes == 24 * 2**30
    assert gpu.bandwidth_bytes_per_s == 1000 * 10**9
    assert gpu.bf16_flops == 165 * 10**12 and gpu.fp16_flops == gpu.bf16_flops
    assert gpu.fp8_flops is None
    assert gpu.is_custom and gpu.vendor == "custom" and gpu.source == "user-defined"


def test_custom_gpu_memory_only():
    gpu = custom_gpu(memory_gib=47.5)
    assert gpu.memory_bytes == int(47.5 * GiB)
    assert gpu.bandwidth_bytes_per_s is None and gpu.bf16_flops is None


@pytest.mark.parametrize(
    ("text", "memory_bytes", "bandwidth", "bf16"),
    [
        ("custom:24GiB:1000GB/s", 24 * GiB, 10**12, None),        # the documented form
        ("CUSTOM:24gib:1000gb/s", 24 * GiB, 10**12, None),        # case does not matter
        ("custom:1000GB/s:24GiB", 24 * GiB, 10**12, None),        # fields are told apart by unit
        ("custom:80GB:2TB/s:300TFLOPS", 80 * 10**9, 2 * 10**12, 300 * 10**12),  # GB is 10**9, honestly
        ("custom:23.5GiB", round(23.5 * GiB), None, None),        # memory alone is enough
    ],
)
def test_custom_gpu_string_form(text, memory_bytes, bandwidth, bf16):
    gpu = resolve_gpu(text)
    assert (gpu.memory_bytes, gpu.bandwidth_bytes_per_s, gpu.bf16_flops) == (memory_bytes, bandwidth, bf16)
    assert gpu.name == text and gpu.is_custom
    assert parse_custom_gpu(text) == gpu


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("custom:24:1000", "cannot read '24'"),         # units are required: 24 GiB or 24 GB?
        ("custom:1000GB/s", "needs a memory size"),      # bandwidth without memory
        ("custom:24GiB:16GiB", "memory twice"),          # two memories
        ("custom:0GiB", "must be positive"),
    ],
)
def test_bad_custom_strings_say_what_to_write(text, complaint):
    with pytest.raises(WorkloadError, match=complaint) as info:
        resolve_gpu(text)
    assert "custom:24GiB:1000GB/s" in str(info.value)


def test_custom_gpu_rejects_non_positive_values():
    with pytest.raises(WorkloadError, match="must be positive"):
        custom_gpu(memory_gib=24, bandwidth_gbps=-1)


def test_gpu_is_frozen():
    gpu = resolve_gpu("L4")
    with pytest.raises(AttributeError):
        gpu.memory_bytes = 1  # type: ignore[misc]
    assert isinstance(gpu, GPU)


def test_every_nvidia_gpu_names_its_sm_version():
    """vLLM picks kernels (and with them weight padding and MLA block sizes) by SM version."""
    from kvplan.gpus import list_gpus

    for gpu in list_gpus():
        if gpu.vendor == "nvidia":
            assert gpu.compute_capability is not None and (7, 0) <= gpu.compute_capability <= (12, 1), gpu.name
        else:
            assert gpu.compute_capability is None, gpu.name
    assert resolve_gpu("A100").compute_capability == (8, 0)
    assert resolve_gpu("RTX 4090").compute_capability == (8, 9)
    assert resolve_gpu("H200").compute_capability == (9, 0)
    assert resolve_gpu("B200").compute_capability == (10, 0)
