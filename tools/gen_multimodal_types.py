"""Regenerate kvplan/data/multimodal_types.json: the model_types transformers ships only as multimodal models.

The conformance sweep (validation/conformance.py) builds every `MODEL_FOR_CAUSAL_LM` class; a family that ships
only as an image-text or multimodal class (Qwen2-VL: Qwen2VLForConditionalGeneration) is not in its record, yet
transformers does ship it. kvplan.config.verified reads this list so that its warning says so, rather than
"not one transformers ships".
Run: python tools/gen_multimodal_types.py   (needs transformers; tests/test_unread.py checks it).
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "kvplan" / "data" / "multimodal_types.json"


def multimodal_types() -> dict[str, str]:
    """model_type -> the class transformers builds for it, for types with no causal-LM class."""
    from transformers.models.auto import modeling_auto as auto

    causal = auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    out: dict[str, str] = {}
    for mapping in (auto.MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES, auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES):
        for model_type, name in mapping.items():
            if model_type not in causal and isinstance(name, str):
                out.setdefault(model_type, name)
    return dict(sorted(out.items()))


def main() -> None:
    import transformers

    OUT.write_text(json.dumps({"transformers": transformers.__version__, "types": multimodal_types()}, indent=1)
                   + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
