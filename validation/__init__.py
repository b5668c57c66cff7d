"""kvplan's validation harness: predicted vs measured KV-cache bytes and peak memory on real
transformers `generate()` runs (GPU and CPU). See validation/README.md; run `python -m validation --help`.

Shipped with the repository (not the wheel); needs the `validate` extra (torch, transformers, optional
optimum-quanto / hqq, tqdm, matplotlib). kvplan itself never imports it.
"""

__all__ = ["main"]


def main(argv=None) -> int:
    from .harness import main as _main

    return _main(argv)
