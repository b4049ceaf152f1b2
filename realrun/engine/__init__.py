"""The real engine: which model runs (``model``), what it is fed (``inputs``), and a policy's Steps
executed as its forward passes (``engine.Engine``), with the KV cache in blocks of one pool
(``paged``) or, where the body cannot attend over blocks, in a left-padded rectangle
(``kvcache``, ``padded_passes``); ``packed`` holds the weights packed once for the CPU.

The lowest of realrun's layers: it imports nothing else of realrun's.
"""
