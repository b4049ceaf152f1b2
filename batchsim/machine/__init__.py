"""The machine model: GPUs and models (catalog), the roofline step time, KV memory and dollars."""
