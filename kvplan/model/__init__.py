"""Stage 1, what a model is: the one description every later stage shares, read once by `kvplan.config`.

- `layers`: one frozen spec per kind of cached layer (full, sliding, chunked, MLA, indexed MLA, state, none);
- `arch`: the weight shape (`ArchShape`: layers, experts, towers, quantization), priced by `kvplan.weights`;
- `checkpoint`: what a checkpoint's safetensors headers hold, summarised (`CheckpointWeights`);
- `spec`: `ModelSpec`, the layers, the shape, the sizes around them and the checkpoint of one model.

Plain frozen dataclasses, no Hugging Face field names, no I/O; nothing here imports a later stage.
"""
