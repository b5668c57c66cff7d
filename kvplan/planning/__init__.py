"""Stage 7, planning: what fits where, per engine.

- `inputs`, `result`: the settings every engine takes, checked once; the `Plan` every engine returns;
- `engines/`: each engine planned end to end (`vllm`, `sglang`, `hf`, with their profiles, drafters, adapters);
- `planner`: `plan()`, the dispatch and what holds for any engine; `search`: fewest GPUs and fixes;
- `speed`, `workload`, `compare`: the roofline, a request mix with its cost, setups side by side.

(Stage 6 is the GPU catalog, `kvplan.gpus`.)
"""
