"""Measuring what a transformers cache and a `generate` call really use.

- `walk_cache(cache)`: the unique storage bytes of every tensor a cache object holds, read by walking it
  (each layer's keys / values, conv and recurrent states, quantized tensors, the 0-d bookkeeping scalars),
  opening tensor subclasses (optimum-quanto's QTensors) through `__tensor_flatten__`. Storages are deduplicated
  by their StorageImpl, so a view (a sliding layer's last W-1 tokens) counts the whole buffer it pins.
- `CudaMemory`: `torch.cuda.memory_allocated` / `max_memory_allocated` snapshots around the phases of a run,
  plus reserved memory and the process's NVML figure for context.
- `CpuPeak`: the peak of live CPU tensor bytes during a run, from the allocation events torch's profiler
  records (`profile_memory=True`): every c10 allocation and free, in order, summed. It sees tensors only
  (not Python objects or MKL scratch), which is what the CUDA figure sees too.

Nothing here imports kvplan; it measures and nothing else.
"""

from __future__ import annotations

import gc
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

CUDA_BLOCK = 512  # the caching allocator rounds every block up to a multiple of 512 bytes

_LEAVES = (str, bytes, int, float, bool, complex, type(None), torch.dtype, torch.device, torch.Size)


@dataclass
class CacheBytes:
    """What one cache object holds. `storage` is the figure kvplan predicts (`kv_cache_bytes`)."""

    storage: int = 0         # unique storages, views counted by the whole buffer they pin
    logical: int = 0         # sum of numel x element_size over distinct tensors
    scalars: int = 0         # 0-d tensors (StaticLayer.cumulative_length, _sliding_window_tensor, fp8 scales)
    tensors: int = 0
    device_storage: int = 0  # of `storage`, on an accelerator
    host_storage: int = 0    # of `storage`, in host memory (all of it on CPU; the offloaded layers on CUDA)
    allocator_storage: int = 0  # sum of storages rounded up to CUDA's 512-byte blocks (what memory_allocated sees)
    layer_classes: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _is_cache_object(obj: Any) -> bool:
    """Objects whose attributes the walk opens: transformers' cache and layer classes, and the subclasses a modeling
    file derives from them (never modules, configs, quantizers or anything else; the quantized data sits in the
    layers' own attributes). DeepSeek-V4's DeepseekV4CSACache (modeling_deepseek_v4.py, a DynamicSlidingWindowLayer)
    holds its compressor state in its own dicts: walking cache_utils classes only measured its cache as 0 bytes."""
    return any((cls.__module__ or "").startswith("transformers.cache_utils") for cls in type(obj).__mro__)


def iter_tensors(obj: Any, seen: dict[int, Any] | None = None, depth: int = 0) -> Iterator[torch.Tensor]:
    """Plain tensors reachable from `obj`: through containers, cache / layer objects and tensor subclasses.

    `seen` keeps every visited object alive until the walk ends, so a temporary freed mid-walk cannot hand its
    id to another object that would then be skipped.
    """
    if seen is None:
        seen = {}
    if depth > 16 or id(obj) in seen or isinstance(obj, _LEAVES):
        return
    seen[id(obj)] = obj
    if isinstance(obj, torch.Tensor):
        if type(obj) not in (torch.Tensor, torch.nn.Parameter) and hasattr(obj, "__tensor_flatten__"):
            names, _ = obj.__tensor_flatten__()
            for name in names:
                yield from iter_tensors(getattr(obj, name), seen, depth + 1)
            return
        yield obj
        return
    if isinstance(obj, torch.nn.Module):
        return
    if isinstance(obj, Mapping):
        for value in list(obj.values()):
            yield from iter_tensors(value, seen, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for value in list(obj):
            yield from iter_tensors(value, seen, depth + 1)
    elif _is_cache_object(obj) and hasattr(obj, "__dict__"):
        for value in list(vars(obj).values()):
            yield from iter_tensors(value, seen, depth + 1)


def _round_block(n: int) -> int:
    return 0 if n == 0 else -(-n // CUDA_BLOCK) * CUDA_BLOCK


def walk_cache(cache: Any) -> CacheBytes:
    """Bytes a transformers Cache holds (any object works: the walk starts from its attributes)."""
    seen: dict[int, Any] = {}
    tensors = list(iter_tensors(vars(cache) if hasattr(cache, "__dict__") else cache, seen))
    result = CacheBytes()
    storages: dict[int, tuple[int, torch.device]] = {}
    for t in tensors:
        result.tensors += 1
        size = t.numel() * t.element_size()
        result.logical += size
        if t.dim() == 0:
            result.scalars += size
        s = t.untyped_storage()
        storages[s._cdata] = (s.nbytes(), t.device)
    for nbytes, device in storages.values():
        result.storage += nbytes
        if device.type == "cpu":
            result.host_storage += nbytes
        else:
            result.device_storage += nbytes
            result.allocator_storage += _round_block(nbytes)
    for layer in getattr(cache, "layers", []) or []:
        name = type(layer).__name__
        result.layer_classes[name] = result.layer_classes.get(name, 0) + 1
    return result


def module_bytes(model: torch.nn.Module) -> int:
    """Unique storage bytes of a model's parameters and buffers (tied weights once)."""
    storages: dict[int, int] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        s = t.untyped_storage()
        storages[s._cdata] = s.nbytes()
    return sum(storages.values())


def tensor_bytes(*tensors: torch.Tensor | None) -> int:
    return sum(t.untyped_storage().nbytes() for t in tensors if t is not None)


def allocator_bytes(*tensors: torch.Tensor | None) -> int:
    """What CUDA's caching allocator charges for these tensors (each rounded up to 512-byte blocks)."""
    return sum(_round_block(t.untyped_storage().nbytes()) for t in tensors if t is not None)


# ---------------------------------------------------------------- CUDA


class CudaMemory:
    """Allocator and driver figures for one CUDA device."""

    def __init__(self, device: torch.device):
        self.device = device
        self._nvml = _nvml_handle(device)

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def allocated(self) -> int:
        self.sync()
        return torch.cuda.memory_allocated(self.device)

    def peak(self) -> int:
        self.sync()
        return torch.cuda.max_memory_allocated(self.device)

    def reserved_peak(self) -> int:
        return torch.cuda.max_memory_reserved(self.device)

    def reset_peak(self) -> None:
        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)

    def total(self) -> int:
        return torch.cuda.get_device_properties(self.device).total_memory

    def process_bytes(self) -> int | None:
        """This process's device memory as the driver sees it (allocator pools + CUDA context), if NVML answers."""
        if self._nvml is None:
            return None
        try:
            import pynvml

            pid = os.getpid()
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(self._nvml):
                if proc.pid == pid:
                    return int(proc.usedGpuMemory) if proc.usedGpuMemory is not None else None
        except Exception:  # noqa: BLE001 - context figure only
            return None
        return None

    def device_used(self) -> int:
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free


def _nvml_handle(device: torch.device):
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
    except Exception:  # noqa: BLE001 - NVML is optional
        return None


def driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except Exception:  # noqa: BLE001
        return None


def free_memory(device: torch.device | None = None) -> None:
    """Everything unreferenced collected and, on CUDA, the caching allocator emptied."""
    gc.collect()
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


# ---------------------------------------------------------------- CPU peak

MARKER = "kvplan::first_token"


class CpuPeak:
    """Peak live CPU tensor bytes above the level at `__enter__`, split at the first `mark()` (end of prefill).

    Uses torch.profiler's memory events, which report every allocation and free of the CPU allocator with
    its size; their running sum is the live total. Overhead is a few microseconds per op.
    """

    def __init__(self):
        self.prefill_peak: int | None = None
        self.decode_peak: int | None = None
        self.peak: int | None = None
        self.events = 0
        self._prof = None

    def __enter__(self):
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=False,
                             with_stack=False)
        self._prof.__enter__()
        return self

    @staticmethod
    def mark() -> None:
        with torch.profiler.record_function(MARKER):
            pass

    def __exit__(self, *exc):
        self._prof.__exit__(*exc)
        if exc[0] is None:
            self._summarise()
        self._prof = None
        return False

    def _summarise(self) -> None:
        events = self._prof.profiler.kineto_results.events()
        memory, marks = [], []
        for e in events:
            name = e.name()
            if name == "[memory]":
                if str(e.device_type()).endswith("CPU"):
                    memory.append((e.start_ns(), e.nbytes()))
            elif name == MARKER:
                marks.append(e.start_ns())
        memory.sort()
        split = min(marks) if marks else None
        live = peak = 0
        pre = post = None
        for ts, delta in memory:
            live += delta
            peak = max(peak, live)
            if split is None or ts < split:
                pre = live if pre is None else max(pre, live)
            else:
                post = live if post is None else max(post, live)
        self.events = len(memory)
        self.peak = peak
        self.prefill_peak = max(0, pre or 0)
        self.decode_peak = None if post is None else max(0, post)
