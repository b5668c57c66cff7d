"""Each engine planned end to end: how transformers `generate` (`hf`), vLLM (`vllm`) and SGLang (`sglang`) spend
GPU memory, each rule read from the engine's source at the version it names, and pinned by tests. An engine takes a
finished `ModelSpec` and the checked settings (`kvplan.planning.inputs`) and returns a `Plan`
(`kvplan.planning.result`); it never reads a source or a config itself.
"""
