"""Engine profiles: how transformers `generate`, vLLM and SGLang spend GPU memory.

Each profile is a documented model of one engine's accounting, with its rules pinned by tests.
"""
