"""The machine model: GPUs and models (specs, builtin, catalog), the roofline step time, precision
and tensor parallelism (parallel), KV memory, dollars, engine presets (engines) and the published
record (validation)."""
